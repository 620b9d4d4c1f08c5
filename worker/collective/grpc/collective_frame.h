// The frames of the collective stream (proto/collective.proto's
// CollectiveFrame), written and read without protobuf's serialiser: the
// floats go out from the sender's vector, which the message's slices then
// own, or from where a forwarded message was received; and come in without
// a copy, the decoded message borrowing gRPC's slices. The bytes are the
// message's protobuf encoding. Thread-compatible free functions.
#ifndef FULCRUM_WORKER_COLLECTIVE_GRPC_COLLECTIVE_FRAME_H_
#define FULCRUM_WORKER_COLLECTIVE_GRPC_COLLECTIVE_FRAME_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/collective/mailbox.h"
#include "worker/collective/message.h"

namespace fulcrum {

// "/fulcrum.Collective/Stream": the method of collective.proto's service.
const std::string& CollectiveStreamMethod();

// The metadata key under which a stream says its StreamOrder, and the
// value: "SENDER.SEQUENCE" in decimal. A value that does not parse reads
// as no order ({0, 0}).
inline const char kStreamOrderMetadataKey[] = "fulcrum-stream-order";
std::string FormatStreamOrder(const StreamOrder& order);
StreamOrder ParseStreamOrder(absl::string_view value);

// The frame from rank `from`, of round `round`, carrying `data`.
grpc::ByteBuffer EncodeFrame(int from, uint64_t round, MessageFloats data);
// The same for a message as it was received (or its own floats): borrowed
// bytes are sent from where they lie, kept alive until gRPC has written
// them.
grpc::ByteBuffer EncodeForwardedFrame(int from, uint64_t round, Message data);

struct DecodedFrame {
  int from = -1;
  uint64_t round = 0;
  Message data;  // borrowing `buffer`'s slices
};

// The frame in `buffer`. INVALID_ARGUMENT naming the fault when it does not
// parse as a CollectiveFrame, carries no sender, a sender that is not a rank
// of a group of `size`, its data twice, or data that is not whole floats.
// Unknown fields are skipped.
absl::StatusOr<DecodedFrame> DecodeFrame(grpc::ByteBuffer& buffer, int size);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_GRPC_COLLECTIVE_FRAME_H_
