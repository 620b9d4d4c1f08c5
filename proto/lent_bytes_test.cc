#include "proto/lent_bytes.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "proto/ps_service.pb.h"

namespace fulcrum {
namespace {

// A pull response with one slice of `bytes` tensor bytes.
std::shared_ptr<PullResponse> Response(size_t bytes) {
  auto response = std::make_shared<PullResponse>();
  ShardSlice* slice = response->add_slices();
  slice->set_variable("w");
  slice->set_version(3);
  TensorProto* tensor = slice->mutable_tensor();
  tensor->set_dtype(DT_FLOAT);
  tensor->add_shape(static_cast<int64_t>(bytes / 4));
  for (size_t i = 0; i < bytes; ++i) tensor->mutable_data()->push_back(static_cast<char>(i * 7));
  response->add_push_results()->set_variable("w");
  return response;
}

// gRPC's serialisation of `message`, and the bytes it holds.
grpc::ByteBuffer Serialize(const PullResponse& message) {
  grpc::ByteBuffer buffer;
  bool own = false;
  EXPECT_TRUE(grpc::SerializationTraits<PullResponse>::Serialize(message, &buffer, &own).ok());
  EXPECT_TRUE(own);
  return buffer;
}

std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

TEST(LendTensorBytesTest, LentBytesAreTheMessageAndHoldItsOwner) {
  std::shared_ptr<PullResponse> message = Response(1 << 20);
  const std::string expected = message->SerializeAsString();
  grpc::ByteBuffer buffer;
  {
    LendTensorBytes lend(message);
    buffer = Serialize(*message);
  }
  // The buffer refers to the message's bytes (no copy), so it holds the
  // message, which outlives the writer's own reference.
  EXPECT_GT(message.use_count(), 1);
  const std::weak_ptr<PullResponse> weak = message;
  const char* data = message->slices(0).tensor().data().data();
  message.reset();
  ASSERT_FALSE(weak.expired());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  bool aliased = false;
  for (const grpc::Slice& slice : slices) {
    aliased = aliased || reinterpret_cast<const char*>(slice.begin()) == data;
  }
  EXPECT_TRUE(aliased) << "no slice points at the tensor bytes";
  EXPECT_EQ(Bytes(buffer), expected);
  PullResponse parsed;
  ASSERT_TRUE(grpc::SerializationTraits<PullResponse>::Deserialize(&buffer, &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), expected);
  slices.clear();
  EXPECT_TRUE(weak.expired()) << "gRPC's last reference did not release the message";
}

TEST(LendTensorBytesTest, OutsideAScopeAndForSmallFieldsBytesAreCopied) {
  for (size_t bytes : {size_t{16}, kMinLentBytes - 4, size_t{1} << 20}) {
    std::shared_ptr<PullResponse> message = Response(bytes);
    grpc::ByteBuffer buffer;
    if (bytes < kMinLentBytes) {
      LendTensorBytes lend(message);
      buffer = Serialize(*message);
    } else {
      buffer = Serialize(*message);  // no scope
    }
    EXPECT_EQ(message.use_count(), 1) << bytes << " bytes";
    EXPECT_EQ(Bytes(buffer), message->SerializeAsString()) << bytes << " bytes";
  }
}

// Push messages lend as pull responses do, however many slices they carry.
TEST(LendTensorBytesTest, PushPullRequestsWithManySlicesRoundTrip) {
  auto request = std::make_shared<PushPullRequest>();
  request->mutable_push()->set_worker_id(2);
  for (int i = 0; i < 5; ++i) {
    *request->mutable_push()->add_gradients() = Response(10000 + 1000 * i)->slices(0);
  }
  request->mutable_pull()->add_shards()->set_variable("w");
  grpc::ByteBuffer buffer;
  bool own = false;
  {
    LendTensorBytes lend(request);
    ASSERT_TRUE(
        grpc::SerializationTraits<PushPullRequest>::Serialize(*request, &buffer, &own).ok());
  }
  EXPECT_EQ(request.use_count(), 1 + 5);  // one reference per lent field
  PushPullRequest parsed;
  ASSERT_TRUE(grpc::SerializationTraits<PushPullRequest>::Deserialize(&buffer, &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), request->SerializeAsString());
}

}  // namespace
}  // namespace fulcrum
