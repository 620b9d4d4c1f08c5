// Fuzz target: the collective stream's frame parser (DecodeFrame), on
// bytes as gRPC hands them over, in uneven slices. Whatever it accepts,
// protobuf must parse as the same CollectiveFrame, and the message,
// forwarded from the slices it borrows once the buffer is gone, must
// decode to the same sender, round and floats.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz/fuzz_input.h"
#include "proto/collective.pb.h"
#include "worker/collective/grpc/collective_frame.h"

namespace fulcrum::fuzz {
namespace {

constexpr int kGroup = 8;  // the receiver's group size

// A message's floats as bytes (compared as bytes: a NaN is not == itself).
std::string Bytes(const Message& message) {
  std::string bytes(message.size() * sizeof(float), '\0');
  if (!message.empty()) message.CopyTo(reinterpret_cast<float*>(bytes.data()));
  return bytes;
}

void Frame(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto buffer = std::make_unique<grpc::ByteBuffer>(AsReceived(bytes));
  auto decoded = DecodeFrame(*buffer, kGroup);
  if (!decoded.ok()) return;
  buffer.reset();  // the message holds what it borrows
  Check(decoded->from >= 0 && decoded->from < kGroup, "a sender outside the group");
  CollectiveFrame parsed;
  Check(parsed.ParseFromArray(data, static_cast<int>(size)), "a frame protobuf rejects");
  Check(parsed.has_from() && parsed.from() == decoded->from, "another sender than protobuf's");
  Check(parsed.round() == decoded->round, "another round than protobuf's");
  const std::string floats = Bytes(decoded->data);
  Check(floats == parsed.data(), "other floats than protobuf's");
  // Forwarded from where it was received, as the ring passes a chunk on.
  grpc::ByteBuffer again =
      EncodeForwardedFrame(decoded->from, decoded->round, std::move(decoded->data));
  auto round_trip = DecodeFrame(again, kGroup);
  Check(round_trip.ok(), "a forwarded frame does not decode");
  Check(round_trip->from == decoded->from && round_trip->round == decoded->round &&
            Bytes(round_trip->data) == floats,
        "a forwarded frame decodes to another");
}

}  // namespace
}  // namespace fulcrum::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fulcrum::fuzz::Frame(data, size);
  return 0;
}
