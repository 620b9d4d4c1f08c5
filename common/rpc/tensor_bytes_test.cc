#include "common/rpc/tensor_bytes.h"

#include <gmock/gmock.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/slices.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {
namespace {

// A pull with one slice of `bytes` tensor bytes, held.
std::shared_ptr<OutgoingPull> Response(size_t bytes) {
  auto pull = std::make_shared<OutgoingPull>();
  PullResponse* response = &pull->response;
  ShardSlice* slice = response->add_slices();
  slice->set_variable("w");
  slice->set_version(3);
  TensorProto* tensor = slice->mutable_tensor();
  tensor->set_dtype(DT_FLOAT);
  tensor->add_shape(static_cast<int64_t>(bytes / 4));
  for (size_t i = 0; i < bytes; ++i) tensor->mutable_data()->push_back(static_cast<char>(i * 7));
  response->add_push_results()->set_variable("w");
  return pull;
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
  std::shared_ptr<OutgoingPull> message = Response(1 << 20);
  const std::string expected = message->response.SerializeAsString();
  grpc::ByteBuffer buffer;
  {
    LendTensorBytes lend(message);
    buffer = Serialize(message->response);
  }
  // The buffer refers to the message's bytes (no copy), so it holds the
  // message, which outlives the writer's own reference.
  EXPECT_GT(message.use_count(), 1);
  const std::weak_ptr<OutgoingPull> weak = message;
  const char* data = message->response.slices(0).tensor().data().data();
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
    std::shared_ptr<OutgoingPull> message = Response(bytes);
    grpc::ByteBuffer buffer;
    if (bytes < kMinLentBytes) {
      LendTensorBytes lend(message);
      buffer = Serialize(message->response);
    } else {
      buffer = Serialize(message->response);  // no scope
    }
    EXPECT_EQ(message.use_count(), 1) << bytes << " bytes";
    EXPECT_EQ(Bytes(buffer), message->response.SerializeAsString()) << bytes << " bytes";
  }
}

// The lent bytes may be the last thing in the message.
TEST(LendTensorBytesTest, AMessageEndingInLentBytesRoundTrips) {
  std::shared_ptr<OutgoingPull> message = Response(1 << 20);
  message->response.clear_push_results();
  grpc::ByteBuffer buffer;
  {
    LendTensorBytes lend(message);
    buffer = Serialize(message->response);
  }
  EXPECT_GT(message.use_count(), 1);
  EXPECT_TRUE(Bytes(buffer) == message->response.SerializeAsString());
}

// A pull whose float32 slices lend their bytes from a snapshot: its wire
// bytes are the materialised response's, sent from the snapshot itself,
// which gRPC holds until it lets the buffer go.
TEST(LendTensorBytesTest, SnapshotBytesGoFromWhereTheyLie) {
  auto values = std::make_shared<std::vector<float>>(12 << 10);
  for (size_t i = 0; i < values->size(); ++i) (*values)[i] = 0.5f * static_cast<float>(i);
  auto pull = std::make_shared<OutgoingPull>();
  pull->snapshots.push_back(values);
  ASSERT_TRUE(AppendShardSlices("w", 1, 9, {3 << 10, 4}, *values, DT_FLOAT, 16 << 10,
                                pull->response.mutable_slices(), &pull->lent)
                  .ok());
  pull->response.add_push_results()->set_variable("w");
  const std::string expected = OutgoingPull(*pull).Materialize().SerializeAsString();
  grpc::ByteBuffer buffer;
  {
    LendTensorBytes lend(pull);
    buffer = Serialize(pull->response);
  }
  EXPECT_EQ(Bytes(buffer), expected);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  int aliased = 0;
  for (const grpc::Slice& slice : slices) {
    const char* begin = reinterpret_cast<const char*>(slice.begin());
    aliased += begin >= reinterpret_cast<const char*>(values->data()) &&
               begin < reinterpret_cast<const char*>(values->data() + values->size());
  }
  EXPECT_EQ(aliased, 3) << "each 16 KiB slice of the snapshot lent once";
  const std::weak_ptr<std::vector<float>> weak = values;
  values.reset();
  pull.reset();
  EXPECT_FALSE(weak.expired()) << "the buffer no longer holds the snapshot";
  buffer.Clear();
  slices.clear();
  EXPECT_TRUE(weak.expired());
}

// Any message lends as a pull response does, however many slices it holds.
TEST(LendTensorBytesTest, PushPullRequestsWithManySlicesRoundTrip) {
  auto request = std::make_shared<PushPullRequest>();
  request->mutable_push()->set_worker_id(2);
  for (int i = 0; i < 5; ++i) {
    *request->mutable_push()->add_gradients() = Response(10000 + 1000 * i)->response.slices(0);
  }
  request->mutable_pull()->add_shards()->set_variable("w");
  grpc::ByteBuffer buffer = SerializeLending(*request, request);
  EXPECT_EQ(request.use_count(), 1 + 5);  // one reference per lent field
  EXPECT_EQ(Bytes(buffer), request->SerializeAsString());
}

// A push of float32 gradients that lends them from where they lie (and,
// with `held`, one bfloat16 slice that holds its bytes), and its pull.
std::shared_ptr<OutgoingPush> LentPush(const std::vector<float>& values, bool held) {
  auto push = std::make_shared<OutgoingPush>();
  push->request.set_worker_id(1);
  push->request.set_clock(9);
  push->request.set_push_id(77);
  EXPECT_TRUE(AppendShardSlices("w", 0, 5, {static_cast<int64_t>(values.size()) / 8, 8}, values,
                                DT_FLOAT, 16 << 10, push->request.mutable_gradients(), &push->lent)
                  .ok());
  if (held) {
    EXPECT_TRUE(AppendShardSlices("b", 0, 5, {8}, absl::MakeConstSpan(values).subspan(0, 8),
                                  DT_BFLOAT16, 16 << 10, push->request.mutable_gradients(),
                                  &push->lent)
                    .ok());
  }
  return push;
}

// The wire bytes of a lent push are those of the push with its bytes in
// place, and gRPC's slices point at the caller's floats: no copy.
TEST(SerializePushTest, LentBytesGoFromWhereTheyLie) {
  std::vector<float> values(size_t{3} * 4096);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i);
  for (bool held : {false, true}) {
    SCOPED_TRACE(held ? "with a held slice" : "all lent");
    std::shared_ptr<OutgoingPush> push = LentPush(values, held);
    ASSERT_GT(push->request.gradients_size(), 1);
    EXPECT_TRUE(push->request.gradients(0).tensor().data().empty());
    const PushRequest whole = push->Materialize();

    grpc::ByteBuffer buffer = SerializePush(*push, false, nullptr, push);
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    int aliased = 0;
    for (const grpc::Slice& slice : slices) {
      const char* begin = reinterpret_cast<const char*>(slice.begin());
      aliased += begin >= reinterpret_cast<const char*>(values.data()) &&
                 begin < reinterpret_cast<const char*>(values.data() + values.size());
    }
    EXPECT_EQ(aliased, 3) << "each 16 KiB slice of the gradient lent once";
    PushRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(Bytes(buffer)));
    EXPECT_EQ(parsed.SerializeAsString(), whole.SerializeAsString());
    EXPECT_GT(push.use_count(), 1);  // gRPC's slices hold the owner
    slices.clear();
    buffer.Clear();
    EXPECT_EQ(push.use_count(), 1);

    PullRequest pull;
    pull.add_shards()->set_variable("w");
    PushPullRequest expected;
    *expected.mutable_push() = whole;
    *expected.mutable_pull() = pull;
    PushPullRequest both;
    ASSERT_TRUE(both.ParseFromString(Bytes(SerializePush(*push, true, &pull, push))));
    EXPECT_EQ(both.SerializeAsString(), expected.SerializeAsString());
    expected.clear_pull();
    ASSERT_TRUE(both.ParseFromString(Bytes(SerializePush(*push, true, nullptr, push))));
    EXPECT_EQ(both.SerializeAsString(), expected.SerializeAsString());
  }
}

// Places DT_FLOAT data of variable "w" into `values`; everything else is left
// in the message. Records what it was asked.
class TestPlacer final : public SlicePlacer {
 public:
  explicit TestPlacer(size_t floats) : values(floats, -1.0f) {}
  float* Place(const ShardSlice& slice, size_t bytes) override {
    asked.push_back(slice.variable() + "@" + std::to_string(slice.row_offset()));
    if (slice.variable() != "w" || bytes > values.size() * sizeof(float)) return nullptr;
    return values.data();
  }
  std::vector<float> values;
  std::vector<std::string> asked;
};

// `bytes` as gRPC would hand them over: in several slices of uneven size.
grpc::ByteBuffer Buffer(const std::string& bytes) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0, size = 1; at < bytes.size(); at += size, size = size * 3 + 5) {
    slices.emplace_back(bytes.data() + at, std::min(size, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::Status Parse(const std::string& bytes, SlicePlacer* placer, PullResponse* response) {
  grpc::ByteBuffer buffer = Buffer(bytes);
  return ParsePullResponse(&buffer, placer, response);
}

// A float32 slice of `floats` values 0.5, 1.5, ..., of variable `name`.
ShardSlice FloatSlice(const std::string& name, int64_t row_offset, int floats) {
  ShardSlice slice;
  slice.set_variable(name);
  slice.set_shard(1);
  slice.set_row_offset(row_offset);
  slice.set_version(9);
  slice.mutable_tensor()->set_dtype(DT_FLOAT);
  slice.mutable_tensor()->add_shape(floats);
  std::vector<float> values(floats);
  for (int i = 0; i < floats; ++i) values[i] = i + 0.5f;
  slice.mutable_tensor()->set_data(values.data(), floats * sizeof(float));
  return slice;
}

PullResponse Mixed() {
  PullResponse response;
  *response.add_slices() = FloatSlice("w", 3, 3000);
  *response.add_slices() = FloatSlice("b", 0, 10);
  ShardSlice* half = response.add_slices();
  *half = FloatSlice("w", 0, 8);
  half->mutable_tensor()->set_dtype(DT_BFLOAT16);  // not float32: never placed
  half->mutable_tensor()->mutable_data()->resize(16);
  response.add_push_results()->set_variable("w");
  response.mutable_push_results(0)->set_version(4);
  return response;
}

TEST(ParsePullResponseTest, PlacedFloatDataSkipsTheMessage) {
  const PullResponse sent = Mixed();
  TestPlacer placer(3000);
  PullResponse received;
  ASSERT_TRUE(Parse(sent.SerializeAsString(), &placer, &received).ok());
  // Asked only for float32 data: w and b, not the bfloat16 slice.
  EXPECT_EQ(placer.asked, (std::vector<std::string>{"w@3", "b@0"}));
  // The bytes as they were sent (compared as bytes: they are the wire's).
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(placer.values.data()), 3000 * sizeof(float)),
            sent.slices(0).tensor().data());
  // The placed slice came without data, the rest as protobuf parses it.
  PullResponse expected = sent;
  expected.mutable_slices(0)->mutable_tensor()->clear_data();
  EXPECT_TRUE(received.SerializeAsString() == expected.SerializeAsString());
}

TEST(ParsePullResponseTest, WithoutPlacingItParsesAsProtobufDoes) {
  const PullResponse sent = Mixed();
  std::string bytes = sent.SerializeAsString();
  bytes += std::string("\x98\x06\x07", 3);  // an unknown varint field 99, skipped
  TestPlacer refuses(0);                    // places nothing
  PullResponse received;
  ASSERT_TRUE(Parse(bytes, &refuses, &received).ok());
  PullResponse by_protobuf;
  ASSERT_TRUE(by_protobuf.ParseFromString(bytes));
  by_protobuf.DiscardUnknownFields();  // which the placing parser skips
  EXPECT_TRUE(received.SerializeAsString() == by_protobuf.SerializeAsString());
  EXPECT_TRUE(received.SerializeAsString() == sent.SerializeAsString());
}

// Protobuf writes a slice's data last; a field after placed data could
// change where the data belonged, so such a message is refused.
TEST(ParsePullResponseTest, AFieldAfterPlacedDataFailsTheParse) {
  ShardSlice slice = FloatSlice("w", 0, 100);
  slice.clear_row_offset();
  std::string slice_bytes = slice.SerializeAsString() + std::string("\x18\x05", 2);  // row 5
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream out(&stream);
    out.WriteTag(google::protobuf::internal::WireFormatLite::MakeTag(
        1, google::protobuf::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    out.WriteVarint32(static_cast<uint32_t>(slice_bytes.size()));
    out.WriteString(slice_bytes);
  }
  TestPlacer placer(100);
  PullResponse received;
  const absl::Status refused = Parse(bytes, &placer, &received);
  EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("malformed pull response"));
  // Unplaced, the same bytes are a valid message: row 5 wins.
  TestPlacer refuses(0);
  ASSERT_TRUE(Parse(bytes, &refuses, &received).ok());
  EXPECT_EQ(received.slices(0).row_offset(), 5);
}

// A newer server's fields, which protobuf writes after the data, do not
// stop placement.
TEST(ParsePullResponseTest, UnknownFieldsAfterPlacedDataAreSkipped) {
  PullResponse sent;
  *sent.add_slices() = FloatSlice("w", 0, 100);
  TensorProto* tensor = sent.mutable_slices(0)->mutable_tensor();
  tensor->GetReflection()->MutableUnknownFields(tensor)->AddVarint(7, 1);
  ShardSlice* slice = sent.mutable_slices(0);
  slice->GetReflection()->MutableUnknownFields(slice)->AddVarint(6, 1);
  TestPlacer placer(100);
  PullResponse received;
  ASSERT_TRUE(Parse(sent.SerializeAsString(), &placer, &received).ok());
  EXPECT_TRUE(received.slices(0).tensor().data().empty());  // placed
  EXPECT_EQ(placer.values[99], 99.5f);
  EXPECT_FALSE(Parse("\x0a\x05\x0a", &placer, &received).ok());  // truncated
}

TEST(ParsePullResponseTest, TruncatedMessagesFailWithoutReadingPastTheEnd) {
  const std::string bytes = Mixed().SerializeAsString();
  TestPlacer placer(3000);
  for (size_t cut : {size_t{1}, size_t{5}, size_t{40}, bytes.size() / 2, bytes.size() - 1}) {
    PullResponse received;
    EXPECT_FALSE(Parse(bytes.substr(0, cut), &placer, &received).ok()) << "cut at " << cut;
  }
}

// Corrupted bytes from a broken or hostile server fail or parse, but never
// read or write out of bounds (run under ASan to see that).
TEST(ParsePullResponseTest, CorruptedMessagesNeverOverrun) {
  const std::string bytes = Mixed().SerializeAsString();
  std::mt19937 random(7);
  int parsed = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string corrupt = bytes;
    for (int flips = 1 + trial % 4; flips > 0; --flips) {
      corrupt[random() % corrupt.size()] = static_cast<char>(random());
    }
    TestPlacer placer(3000);
    PullResponse received;
    parsed += Parse(corrupt, &placer, &received).ok();
  }
  EXPECT_GT(parsed, 0);  // flips inside tensor data still parse
}

}  // namespace
}  // namespace fulcrum
