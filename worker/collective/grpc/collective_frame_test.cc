#include "worker/collective/grpc/collective_frame.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "proto/collective.pb.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

std::string Bytes(grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& slice : slices) {
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return out;
}

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

TEST(CollectiveFrameTest, IsTheProtoFramesEncodingBothWays) {
  EXPECT_EQ(CollectiveStreamMethod(), "/fulcrum.Collective/Stream");
  grpc::ByteBuffer encoded = EncodeFrame(3, 0x0123456789abcdefULL, {1.5f, -2.0f});
  const std::string bytes = Bytes(encoded);
  CollectiveFrame parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.from(), 3);
  EXPECT_EQ(parsed.round(), 0x0123456789abcdefULL);
  ASSERT_EQ(parsed.data().size(), 8u);

  // What protobuf writes, with an unknown field a newer sender might add.
  CollectiveFrame written;
  written.set_from(0);
  written.set_round(9);
  const std::vector<float> floats = {4.0f, 5.0f, 6.0f};
  written.set_data(std::string(reinterpret_cast<const char*>(floats.data()), 12));
  std::string with_unknown = written.SerializeAsString() + std::string("\x20\x05", 2);
  grpc::ByteBuffer buffer = Buffer(with_unknown);
  auto decoded = DecodeFrame(buffer, 2);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->from, 0);
  EXPECT_EQ(decoded->round, 9u);
  EXPECT_EQ(std::move(decoded->data).Take(), MessageFloats(floats.begin(), floats.end()));

  grpc::ByteBuffer notice = EncodeFrame(1, 2, {});
  auto empty = DecodeFrame(notice, 2);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->data.empty());
}

// A frame that arrives in uneven slices (most floats split between two)
// decodes to a message borrowing them, which outlives the buffer and is
// forwarded as the same bytes, as the frame's sender would encode it.
TEST(CollectiveFrameTest, AReceivedFrameIsForwardedFromItsSlices) {
  MessageFloats floats(1001);
  for (size_t i = 0; i < floats.size(); ++i) floats[i] = 0.5f * static_cast<float>(i) - 7.0f;
  grpc::ByteBuffer encoded = EncodeFrame(2, 7, floats);
  const std::string bytes = Bytes(encoded);
  std::vector<grpc::Slice> slices;
  for (size_t at = 0, cut = 1; at < bytes.size(); cut = cut % 13 + 1) {
    const size_t take = std::min(cut, bytes.size() - at);
    slices.emplace_back(bytes.data() + at, take);
    at += take;
  }
  auto buffer = std::make_unique<grpc::ByteBuffer>(slices.data(), slices.size());
  slices.clear();
  auto decoded = DecodeFrame(*buffer, 4);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  buffer.reset();  // the message holds the slices it borrows
  EXPECT_NE(decoded->data.owner(), nullptr);
  ASSERT_EQ(decoded->data.size(), floats.size());
  MessageFloats copied(floats.size());
  decoded->data.CopyTo(copied.data());
  EXPECT_EQ(copied, floats);
  grpc::ByteBuffer forwarded = EncodeForwardedFrame(2, 7, std::move(decoded->data));
  EXPECT_EQ(Bytes(forwarded), bytes);
  grpc::ByteBuffer owned = EncodeForwardedFrame(2, 7, Message(MessageFloats(floats)));
  EXPECT_EQ(Bytes(owned), bytes);
}

TEST(CollectiveFrameTest, RefusesWhatIsNotAFrameOfTheGroup) {
  const auto fault = [](const std::string& bytes, int size) {
    grpc::ByteBuffer buffer = Buffer(bytes);
    auto decoded = DecodeFrame(buffer, size);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(decoded.status().message());
  };
  grpc::ByteBuffer from_five = EncodeFrame(5, 1, {1.0f});
  EXPECT_THAT(fault(Bytes(from_five), 4), HasSubstr("from rank 5: not a rank of 4"));
  CollectiveFrame no_sender;
  no_sender.set_round(1);
  EXPECT_THAT(fault(no_sender.SerializeAsString(), 4), HasSubstr("names no sender"));
  CollectiveFrame odd;
  odd.set_from(0);
  odd.set_data("abc");
  EXPECT_THAT(fault(odd.SerializeAsString(), 4), HasSubstr("not whole floats"));
  const std::string whole = Bytes(from_five);
  EXPECT_THAT(fault(whole.substr(0, whole.size() - 2), 8), HasSubstr("data"));
  EXPECT_THAT(fault(std::string("\xff\xff\xff\xff\xff\xff\x01", 7), 8), HasSubstr("parse"));
  CollectiveFrame twice;
  twice.set_from(0);
  twice.set_data(std::string(4, '\0'));
  EXPECT_THAT(fault(twice.SerializeAsString() + twice.SerializeAsString(), 4), HasSubstr("twice"));
}

}  // namespace
}  // namespace fulcrum
