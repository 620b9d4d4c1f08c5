// Tensor bytes over gRPC without the copies protobuf would make.
//
// Sending. gRPC serialises a message into buffers of its own, so protobuf
// copies every byte of it. SerializeLending instead lends gRPC a message's
// large fields (kMinLentBytes or more; in practice the tensor data): the
// serialised message refers to the bytes where they lie, and gRPC holds
// `owner`, which keeps them alive, until it has sent them -- which can be
// after the write returns, so the message must not change while `owner`
// lives. A client writes the ByteBuffer it returns. The bytes of a push's
// or a pull's slices that lie outside the message (OutgoingPush,
// OutgoingPull) are lent from where they lie. A server, whose generated
// handlers serialise through SerializationTraits, writes pull responses
// inside a LendTensorBytes scope instead:
//
//   auto pull = std::make_shared<OutgoingPull>(...);
//   {
//     LendTensorBytes lend(pull);
//     writer->Write(pull->response);  // serialised inside Write, on this thread
//   }
//
// Receiving. Protobuf parses a tensor's bytes into the message, and the
// reader then copies them to where they belong. ParsePullResponse reads
// DT_FLOAT tensor data from gRPC's buffers straight to where a SlicePlacer
// says instead; placed slices arrive without data.
//
// This header is included by the generated ps_service.grpc.pb.h (see
// proto/BUILD.bazel), so that gRPC's code everywhere serialises pull
// responses through the traits declared here.
#ifndef FULCRUM_COMMON_RPC_TENSOR_BYTES_H_
#define FULCRUM_COMMON_RPC_TENSOR_BYTES_H_

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <cstddef>
#include <memory>

#include "absl/status/status.h"

namespace google::protobuf {
class MessageLite;
}  // namespace google::protobuf

namespace fulcrum {

class PullRequest;
class PullResponse;
class SlicePlacer;
struct OutgoingPull;
struct OutgoingPush;

// Byte fields at least this large are lent; smaller ones are copied, which
// costs less than the reference that lending them would take.
constexpr size_t kMinLentBytes = 4096;

// `message` serialised with its large byte fields lent, as above.
grpc::ByteBuffer SerializeLending(const google::protobuf::MessageLite& message,
                                  const std::shared_ptr<const void>& owner);

// `push` serialised as a PushRequest, or, with `as_push_pull`, as a
// PushPullRequest of it and `pull` (when not null): as SerializeLending
// does, and with the bytes the push lends (OutgoingPush::lent) lent to gRPC
// from where they lie, on behalf of `owner`, which must keep that memory
// unchanged while it lives.
grpc::ByteBuffer SerializePush(const OutgoingPush& push, bool as_push_pull, const PullRequest* pull,
                               const std::shared_ptr<const void>& owner);

// `pull` serialised as a PullResponse, as SerializePush serialises a push.
grpc::ByteBuffer SerializePull(const OutgoingPull& pull, const std::shared_ptr<const void>& owner);

// Parses a PullResponse, placing DT_FLOAT tensor data where `placer` says
// (see SlicePlacer). A known field of a slice or its tensor after placed
// data fails the parse (protobuf writes the data last; unknown fields are
// skipped): DATA_LOSS "malformed pull response ...". Consumes `buffer`.
absl::Status ParsePullResponse(grpc::ByteBuffer* buffer, SlicePlacer* placer, PullResponse* out);

// See the top of this file: `pull`'s response, written by this thread
// while the scope lives, is serialised as SerializePull does, on behalf of
// `pull`. Scopes do not nest, and write no other pull response.
class LendTensorBytes {
 public:
  explicit LendTensorBytes(std::shared_ptr<const OutgoingPull> pull);
  ~LendTensorBytes();
  LendTensorBytes(const LendTensorBytes&) = delete;
  LendTensorBytes& operator=(const LendTensorBytes&) = delete;
};

}  // namespace fulcrum

namespace grpc {

// gRPC's serialiser for pull responses: protobuf's, except inside a
// LendTensorBytes scope. (Declared here, where the message is incomplete;
// defined in tensor_bytes.cc.)
template <>
class SerializationTraits<fulcrum::PullResponse> {
 public:
  static Status Serialize(const fulcrum::PullResponse& message, ByteBuffer* buffer,
                          bool* own_buffer);
  static Status Deserialize(ByteBuffer* buffer, fulcrum::PullResponse* message);
};

}  // namespace grpc

#endif  // FULCRUM_COMMON_RPC_TENSOR_BYTES_H_
