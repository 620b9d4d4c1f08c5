// Fuzz target: the collective stream's frame parser (DecodeFrame), on
// bytes as gRPC hands them over, in uneven slices. Whatever it accepts,
// protobuf must parse as the same CollectiveFrame, and the frame encoded
// again must decode to the same sender, round and floats.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/types/span.h"
#include "fuzz/fuzz_input.h"
#include "proto/collective.pb.h"
#include "worker/collective/grpc/collective_frame.h"

namespace fulcrum::fuzz {
namespace {

constexpr int kGroup = 8;  // the receiver's group size

bool SameFloats(absl::Span<const float> a, const std::string& bytes) {
  return a.size() * sizeof(float) == bytes.size() &&
         (a.empty() || std::memcmp(a.data(), bytes.data(), bytes.size()) == 0);
}

void Frame(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  grpc::ByteBuffer buffer = AsReceived(bytes);
  auto decoded = DecodeFrame(buffer, kGroup);
  if (!decoded.ok()) return;
  Check(decoded->from >= 0 && decoded->from < kGroup, "a sender outside the group");
  CollectiveFrame parsed;
  Check(parsed.ParseFromArray(data, static_cast<int>(size)), "a frame protobuf rejects");
  Check(parsed.has_from() && parsed.from() == decoded->from, "another sender than protobuf's");
  Check(parsed.round() == decoded->round, "another round than protobuf's");
  Check(SameFloats(decoded->data, parsed.data()), "other floats than protobuf's");
  grpc::ByteBuffer again = EncodeFrame(decoded->from, decoded->round, decoded->data);
  auto round_trip = DecodeFrame(again, kGroup);
  Check(round_trip.ok(), "an encoded frame does not decode");
  // The floats compared as bytes: a NaN is not == itself.
  const std::string bytes_again(reinterpret_cast<const char*>(round_trip->data.data()),
                                round_trip->data.size() * sizeof(float));
  Check(round_trip->from == decoded->from && round_trip->round == decoded->round &&
            SameFloats(decoded->data, bytes_again),
        "an encoded frame decodes to another");
}

}  // namespace
}  // namespace fulcrum::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fulcrum::fuzz::Frame(data, size);
  return 0;
}
