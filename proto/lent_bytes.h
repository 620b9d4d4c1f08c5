// Sending tensor bytes over gRPC without copying them.
//
// gRPC serialises a message into buffers of its own, so protobuf copies every
// byte of it. A writer of the messages that carry tensors (PullResponse,
// PushRequest, PushPullRequest) can instead lend gRPC their large fields
// (kMinLentBytes or more; protobuf offers `string` fields as well as
// `bytes`, in practice the tensor data): the serialised message then
// refers to the data where it lies, and gRPC holds `owner`, which keeps
// that data alive, until it has sent the bytes. That can be after Write
// returns: the transport may still queue them, so the message must not
// change or go away while `owner` lives.
//
//   auto message = std::make_shared<PullResponse>(...);
//   {
//     LendTensorBytes lend(message);
//     stream->Write(*message);
//   }
//
// Lending is per thread and per scope: writes made by this thread while a
// LendTensorBytes lives lend, and every other write copies as usual. gRPC's
// synchronous API serialises inside Write, on the calling thread. Every
// message written in the scope must hold only bytes that `owner` keeps alive.
//
// This header is included by the generated ps_service.grpc.pb.h (see
// proto/BUILD.bazel), so that gRPC's code everywhere uses the serialisers
// declared here.
#ifndef FULCRUM_PROTO_LENT_BYTES_H_
#define FULCRUM_PROTO_LENT_BYTES_H_

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <cstddef>
#include <memory>

namespace fulcrum {

class PullResponse;
class PushRequest;
class PushPullRequest;

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

}  // namespace fulcrum

namespace grpc {

// gRPC's serialisers for the messages that carry tensors: protobuf's, except
// that inside a LendTensorBytes scope large byte fields are lent. (Declared
// here, where the messages are incomplete; defined in lent_bytes.cc.)
#define FULCRUM_LENDING_SERIALIZER(Message)                                          \
  template <>                                                                        \
  class SerializationTraits<Message> {                                               \
   public:                                                                           \
    static Status Serialize(const Message& message, ByteBuffer* buffer,              \
                            bool* own_buffer);                                       \
    static Status Deserialize(ByteBuffer* buffer, Message* message);                 \
  };

FULCRUM_LENDING_SERIALIZER(fulcrum::PullResponse)
FULCRUM_LENDING_SERIALIZER(fulcrum::PushRequest)
FULCRUM_LENDING_SERIALIZER(fulcrum::PushPullRequest)

#undef FULCRUM_LENDING_SERIALIZER

}  // namespace grpc

#endif  // FULCRUM_PROTO_LENT_BYTES_H_
