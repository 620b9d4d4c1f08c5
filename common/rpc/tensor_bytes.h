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
// says instead; placed slices arrive without data. A server parses pushes
// with ParseReceivedPush, which leaves their DT_FLOAT gradient data in
// gRPC's buffers, to be applied from there (ReceivedBytes). Its generated
// handlers parse inside Read, so it reads inside a ReceiveTensorBytes
// scope:
//
//   ReceiveTensorBytes receive;
//   while (reader->Read(&part)) Use(part, receive.Take());
//   if (!receive.error().ok()) ...  // a message that could not be parsed
//
// This header is included by the generated ps_service.grpc.pb.h (see
// proto/BUILD.bazel), so that gRPC's code everywhere serialises pull
// responses and parses pushes through the traits declared here.
#ifndef FULCRUM_COMMON_RPC_TENSOR_BYTES_H_
#define FULCRUM_COMMON_RPC_TENSOR_BYTES_H_

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "common/slices.h"

namespace google::protobuf {
class MessageLite;
}  // namespace google::protobuf

namespace fulcrum {

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

// Parses a PushRequest, or a PushPullRequest's push and pull, leaving the
// DT_FLOAT data of the push's gradient slices in `buffer`'s slices:
// `received` gets an entry per gradient slice (ReceivedSlice), whose owner
// keeps what the buffer held. DATA_LOSS "malformed push ..." when it is not
// one. Consumes `buffer`.
absl::Status ParseReceivedPush(grpc::ByteBuffer* buffer, PushRequest* out, ReceivedBytes* received);
absl::Status ParseReceivedPush(grpc::ByteBuffer* buffer, PushPullRequest* out,
                               ReceivedBytes* received);

// See the top of this file: the PushRequests and PushPullRequests that this
// thread's reads parse while the scope lives are parsed as
// ParseReceivedPush does. Scopes do not nest.
class ReceiveTensorBytes {
 public:
  ReceiveTensorBytes();
  ~ReceiveTensorBytes();
  ReceiveTensorBytes(const ReceiveTensorBytes&) = delete;
  ReceiveTensorBytes& operator=(const ReceiveTensorBytes&) = delete;

  // What the last message read left in gRPC's buffers (moved out).
  ReceivedBytes Take();
  // Why a read failed to parse its message (which ends the reads), or OK.
  const absl::Status& error() const { return error_; }

  // For the serialisers: records a message's parse.
  void Record(absl::Status parsed, ReceivedBytes received);

 private:
  ReceivedBytes received_;
  absl::Status error_;
};

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

// gRPC's parsers for pushes: protobuf's, except inside a ReceiveTensorBytes
// scope.
template <>
class SerializationTraits<fulcrum::PushRequest> {
 public:
  static Status Serialize(const fulcrum::PushRequest& message, ByteBuffer* buffer,
                          bool* own_buffer);
  static Status Deserialize(ByteBuffer* buffer, fulcrum::PushRequest* message);
};

template <>
class SerializationTraits<fulcrum::PushPullRequest> {
 public:
  static Status Serialize(const fulcrum::PushPullRequest& message, ByteBuffer* buffer,
                          bool* own_buffer);
  static Status Deserialize(ByteBuffer* buffer, fulcrum::PushPullRequest* message);
};

}  // namespace grpc

#endif  // FULCRUM_COMMON_RPC_TENSOR_BYTES_H_
