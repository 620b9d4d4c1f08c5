#include "proto/lent_bytes.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/support/slice.h>

#include <utility>
#include <vector>

#include "common/logging.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {
namespace {

// The owner of the current thread's LendTensorBytes scope, or null.
thread_local std::shared_ptr<const void> current_owner;

// Bytes of each buffer given to protobuf for what is not lent (tags,
// lengths, small fields): protobuf lends a byte field only when it does not
// fit in what is left of the buffer, so buffers stay small.
constexpr int kBlockBytes = 1024;

void ReleaseOwner(void* owner) { delete static_cast<std::shared_ptr<const void>*>(owner); }

// A protobuf output stream into gRPC slices that lends large byte fields as
// slices holding a reference to their owner.
class LendingStream final : public google::protobuf::io::ZeroCopyOutputStream {
 public:
  explicit LendingStream(const std::shared_ptr<const void>& owner) : owner_(owner) {}

  bool Next(void** data, int* size) override {
    slices_.emplace_back(static_cast<size_t>(kBlockBytes));
    *data = const_cast<uint8_t*>(slices_.back().begin());
    *size = kBlockBytes;
    bytes_ += kBlockBytes;
    return true;
  }

  // Protobuf backs up only into the buffer the last Next gave.
  void BackUp(int count) override {
    if (count == 0) return;
    grpc::Slice& last = slices_.back();
    CHECK(static_cast<size_t>(count) <= last.size());
    bytes_ -= count;
    if (static_cast<size_t>(count) == last.size()) {
      slices_.pop_back();
    } else {
      last = last.sub(0, last.size() - count);
    }
  }

  int64_t ByteCount() const override { return bytes_; }

  bool AllowsAliasing() const override { return true; }

  bool WriteAliasedRaw(const void* data, int size) override {
    if (static_cast<size_t>(size) < kMinLentBytes) {
      slices_.emplace_back(data, static_cast<size_t>(size));  // a copy
    } else {
      slices_.emplace_back(const_cast<void*>(data), static_cast<size_t>(size), &ReleaseOwner,
                           new std::shared_ptr<const void>(owner_));
    }
    bytes_ += size;
    return true;
  }

  void MoveTo(grpc::ByteBuffer* buffer) {
    grpc::ByteBuffer slices(slices_.data(), slices_.size());
    buffer->Swap(&slices);
    slices_.clear();
  }

 private:
  const std::shared_ptr<const void>& owner_;
  std::vector<grpc::Slice> slices_;
  int64_t bytes_ = 0;
};

template <typename Message>
grpc::Status Serialize(const Message& message, grpc::ByteBuffer* buffer, bool* own_buffer) {
  if (current_owner == nullptr) {
    return grpc::GenericSerialize<grpc::ProtoBufferWriter, Message>(message, buffer, own_buffer);
  }
  *own_buffer = true;
  message.ByteSizeLong();  // caches the sizes SerializeWithCachedSizes writes
  LendingStream stream(current_owner);
  {
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.EnableAliasing(true);
    message.SerializeWithCachedSizes(&coded);
    if (coded.HadError()) return grpc::Status(grpc::StatusCode::INTERNAL, "serialization failed");
  }  // returns protobuf's unused buffer space
  stream.MoveTo(buffer);
  return grpc::Status::OK;
}

}  // namespace

LendTensorBytes::LendTensorBytes(std::shared_ptr<const void> owner) {
  CHECK(current_owner == nullptr && owner != nullptr && "LendTensorBytes scopes do not nest");
  current_owner = std::move(owner);
}

LendTensorBytes::~LendTensorBytes() { current_owner.reset(); }

}  // namespace fulcrum

#define FULCRUM_LENDING_SERIALIZER_IMPL(Message)                                              \
  grpc::Status grpc::SerializationTraits<Message>::Serialize(                                  \
      const Message& message, ByteBuffer* buffer, bool* own_buffer) {                          \
    return fulcrum::Serialize(message, buffer, own_buffer);                                     \
  }                                                                                            \
  grpc::Status grpc::SerializationTraits<Message>::Deserialize(ByteBuffer* buffer,             \
                                                               Message* message) {             \
    return GenericDeserialize<ProtoBufferReader, Message>(buffer, message);                     \
  }

FULCRUM_LENDING_SERIALIZER_IMPL(fulcrum::PullResponse)
FULCRUM_LENDING_SERIALIZER_IMPL(fulcrum::PushRequest)
FULCRUM_LENDING_SERIALIZER_IMPL(fulcrum::PushPullRequest)
