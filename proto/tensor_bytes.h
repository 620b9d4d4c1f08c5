// Tensor bytes over gRPC without the copies protobuf would make.
//
// Sending. gRPC serialises a message into buffers of its own, so protobuf
// copies every byte of it. A writer of the messages that carry tensors
// (PullResponse, PushRequest, PushPullRequest) can instead lend gRPC their
// large fields (kMinLentBytes or more; protobuf offers `string` fields as
// well as `bytes`, in practice the tensor data): the serialised message then
// refers to the data where it lies, and gRPC holds `owner`, which keeps that
// data alive, until it has sent the bytes. That can be after Write returns:
// the transport may still queue them, so the message must not change or go
// away while `owner` lives.
//
//   auto message = std::make_shared<PullResponse>(...);
//   {
//     LendTensorBytes lend(message);
//     stream->Write(*message);
//   }
//
// Receiving. Protobuf parses a tensor's bytes into the message, and the
// reader then copies them to where they belong. A reader of PullResponses
// that knows where the values go can have them read from gRPC's buffers
// straight into place instead:
//
//   PlaceTensorBytes place(&placer);  // a TensorPlacer
//   stream->Read(&response);          // placed slices arrive without data
//
// Both are per thread and per scope: what this thread writes (reads) while
// the scope object lives is lent (placed), and everything else is copied as
// usual. gRPC's synchronous API serialises inside Write and parses inside
// Read, on the calling thread. Only streamed calls use these serialisers:
// gRPC's generated unary stubs and handlers serialise through protobuf's
// MessageLite base class, so unary calls always copy.
//
// This header is included by the generated ps_service.grpc.pb.h (see
// proto/BUILD.bazel), so that gRPC's code everywhere uses the serialisers
// declared here.
#ifndef FULCRUM_PROTO_TENSOR_BYTES_H_
#define FULCRUM_PROTO_TENSOR_BYTES_H_

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <cstddef>
#include <memory>
#include <string>

namespace fulcrum {

class PullResponse;
class PushRequest;
class PushPullRequest;

// See the top of this file. Scopes do not nest.
class LendTensorBytes {
 public:
  explicit LendTensorBytes(std::shared_ptr<const void> owner);
  ~LendTensorBytes();
  LendTensorBytes(const LendTensorBytes&) = delete;
  LendTensorBytes& operator=(const LendTensorBytes&) = delete;
};

// Byte fields at least this large are lent; smaller ones are copied, which
// costs less than the reference that lending them would take.
constexpr size_t kMinLentBytes = 4096;

class ShardSlice;

// Where the float32 values of received slices go.
class TensorPlacer {
 public:
  virtual ~TensorPlacer() = default;
  // Called as a PullResponse is parsed, for each slice whose data holds
  // `bytes` bytes of DT_FLOAT values, with the slice's other fields (the
  // tensor's dtype and shape too) already parsed. Returns where the bytes go
  // -- room for `bytes` bytes -- or null to leave them in the message. A
  // placed slice arrives with empty data; a known field of the slice or
  // its tensor after placed data makes the message fail to parse
  // (protobuf writes the data last; unknown fields are skipped).
  virtual float* Place(const ShardSlice& slice, size_t bytes) = 0;
};

// See the top of this file. Scopes do not nest.
class PlaceTensorBytes {
 public:
  explicit PlaceTensorBytes(TensorPlacer* placer);
  ~PlaceTensorBytes();
  PlaceTensorBytes(const PlaceTensorBytes&) = delete;
  PlaceTensorBytes& operator=(const PlaceTensorBytes&) = delete;

  // Why a response read in this scope failed to parse; empty if none did.
  // gRPC reports such a failure only as a read that returns false (a
  // stream that seems to end, a unary call without a response), so the
  // caller should check this after the call.
  const std::string& error() const { return error_; }
  // Whether this thread is in a scope where a parse failed: a reader whose
  // stream read returned false then knows to cancel the call instead of
  // waiting for the rest of it.
  static bool FailedOnThisThread();
  // The placer of this thread's scope, or null: a caller that reads part
  // of a response on other threads opens scopes with it there.
  static TensorPlacer* CurrentPlacer();

 private:
  friend grpc::Status DeserializePlacing(grpc::ByteBuffer* buffer, PullResponse* message);
  TensorPlacer* const placer_;
  std::string error_;
};

}  // namespace fulcrum

namespace grpc {

// gRPC's serialisers for the messages that carry tensors: protobuf's, except
// inside the scopes above. (Declared here, where the messages are
// incomplete; defined in tensor_bytes.cc.)
#define FULCRUM_TENSOR_SERIALIZER(Message)                                                 \
  template <>                                                                              \
  class SerializationTraits<Message> {                                                     \
   public:                                                                                 \
    static Status Serialize(const Message& message, ByteBuffer* buffer, bool* own_buffer); \
    static Status Deserialize(ByteBuffer* buffer, Message* message);                       \
  };

FULCRUM_TENSOR_SERIALIZER(fulcrum::PullResponse)
FULCRUM_TENSOR_SERIALIZER(fulcrum::PushRequest)
FULCRUM_TENSOR_SERIALIZER(fulcrum::PushPullRequest)

#undef FULCRUM_TENSOR_SERIALIZER

}  // namespace grpc

#endif  // FULCRUM_PROTO_TENSOR_BYTES_H_
