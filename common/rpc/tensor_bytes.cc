#include "common/rpc/tensor_bytes.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/support/slice.h>

#include <array>
#include <climits>
#include <cstring>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/slices.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;

// The pull of the current thread's LendTensorBytes scope, or null.
thread_local std::shared_ptr<const OutgoingPull> current_pull;
// The current thread's ReceiveTensorBytes scope, or null.
thread_local ReceiveTensorBytes* current_receive = nullptr;

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

// Where the DT_FLOAT data of received pushes stays: the message's buffer,
// read in place, and the values split between two of its slices, copied.
struct ReceivedMessage {
  explicit ReceivedMessage(grpc::ByteBuffer* message) { buffer.Swap(message); }
  grpc::ByteBuffer buffer;
  // Reads `buffer` (declared after it, so destroyed before it).
  std::optional<grpc::ProtoBufferReader> reader;
  std::deque<std::array<char, sizeof(float)>> split_values;  // never move
};

// Limits `in` to the message's `bytes`, so that nested fields are checked
// against its end (WireParser::Nested); false when it cannot be.
bool LimitToMessage(CodedInputStream* in, size_t bytes) {
  if (bytes > static_cast<size_t>(INT_MAX)) return false;
  in->PushLimit(static_cast<int>(bytes));
  return true;
}

// A varint32's longest encoding.
constexpr int kMaxVarint32Bytes = 5;

// A parser of the messages that carry tensors (ps_service.proto,
// tensor.proto): a PullResponse's DT_FLOAT data goes where a placer says
// (client), a push's stays in the buffer it arrived in (server), and
// everything else is read as protobuf would: fields by number and wire
// type, unknown ones skipped, not kept.
class WireParser {
 public:
  WireParser(CodedInputStream* in, SlicePlacer* placer) : in_(in), placer_(placer) {}
  WireParser(CodedInputStream* in, std::shared_ptr<ReceivedMessage> received)
      : in_(in), received_(std::move(received)) {}

  bool Response(PullResponse* response) {
    while (const uint32_t tag = NextTag()) {
      if (tag == Tag(PullResponse::kSlicesFieldNumber, kBytes)) {
        ShardSlice* slice = response->add_slices();
        if (!Nested([&] { return Slice(slice); })) return false;
      } else if (tag == Tag(PullResponse::kPushResultsFieldNumber, kBytes)) {
        std::string bytes;
        if (!ReadBytes(&bytes) || !response->add_push_results()->ParseFromString(bytes)) {
          return false;
        }
      } else if (tag == Tag(PullResponse::kWaitedUsFieldNumber, kVarint)) {
        uint64_t waited = 0;
        if (!in_->ReadVarint64(&waited)) return false;
        response->set_waited_us(static_cast<int64_t>(waited));
      } else if (!Skip(tag)) {
        return false;
      }
    }
    return in_->ConsumedEntireMessage();
  }

  // A PushRequest; `out` gets an entry per gradient slice.
  bool Push(PushRequest* push, ReceivedBytes* out) {
    std::string rest;  // the fields other than the gradients, for protobuf
    {
      google::protobuf::io::StringOutputStream rest_stream(&rest);
      CodedOutputStream rest_out(&rest_stream);
      while (const uint32_t tag = NextTag()) {
        if (tag == Tag(PushRequest::kGradientsFieldNumber, kBytes)) {
          ShardSlice* slice = push->add_gradients();
          out->emplace_back();
          slice_received_ = &out->back();
          if (!Nested([&] { return Slice(slice); })) return false;
        } else if (!Skip(tag, &rest_out)) {
          return false;
        }
      }
    }
    return in_->ConsumedEntireMessage() && push->MergeFromString(rest);
  }

  // A PushPullRequest; `out` gets an entry per gradient slice of its push.
  bool PushPull(PushPullRequest* message, ReceivedBytes* out) {
    std::string rest;  // the pull, for protobuf
    {
      google::protobuf::io::StringOutputStream rest_stream(&rest);
      CodedOutputStream rest_out(&rest_stream);
      while (const uint32_t tag = NextTag()) {
        if (tag == Tag(PushPullRequest::kPushFieldNumber, kBytes)) {
          if (!Nested([&] { return Push(message->mutable_push(), out); })) return false;
        } else if (!Skip(tag, &rest_out)) {
          return false;
        }
      }
    }
    return in_->ConsumedEntireMessage() && message->MergeFromString(rest);
  }

 private:
  static constexpr uint32_t Tag(int field, WireFormatLite::WireType type) {
    return WireFormatLite::MakeTag(field, type);
  }
  static constexpr WireFormatLite::WireType kVarint = WireFormatLite::WIRETYPE_VARINT;
  static constexpr WireFormatLite::WireType kBytes = WireFormatLite::WIRETYPE_LENGTH_DELIMITED;

  // The next field's tag; 0 at the message's end, and for a tag protobuf
  // rejects -- field number 0, or a varint of more than 5 bytes, which
  // ReadTag would cut to 32 bits -- after which ConsumedEntireMessage fails.
  uint32_t NextTag() {
    const int before = in_->CurrentPosition();
    const uint32_t tag = in_->ReadTag();
    const bool valid = WireFormatLite::GetTagFieldNumber(tag) != 0 &&
                       in_->CurrentPosition() - before <= kMaxVarint32Bytes;
    return tag != 0 && valid ? tag : 0;
  }

  // A length, as protobuf's parser takes one: a varint of at most 5 bytes
  // up to INT_MAX. (CodedInputStream::ReadVarint32 reads up to 10 and keeps
  // the low 32 bits, so a longer one would pass with another value.)
  bool ReadLength(int* length) {
    const int before = in_->CurrentPosition();
    uint64_t value = 0;
    if (!in_->ReadVarint64(&value) || in_->CurrentPosition() - before > kMaxVarint32Bytes ||
        value > INT_MAX) {
      return false;
    }
    *length = static_cast<int>(value);
    return true;
  }

  // Skips the field `tag` began, as protobuf's parser does (copying it to
  // `out`, if given). Not WireFormatLite::SkipField: it reads lengths with
  // ReadVarint32, which ReadLength says why not to.
  bool Skip(uint32_t tag, CodedOutputStream* out = nullptr) {
    switch (WireFormatLite::GetTagWireType(tag)) {
      case kBytes: {
        int length = 0;
        std::string bytes;
        if (!ReadLength(&length) || !in_->ReadString(&bytes, length)) return false;
        if (out != nullptr) {
          out->WriteTag(tag);
          out->WriteVarint32(static_cast<uint32_t>(length));
          out->WriteString(bytes);
        }
        return true;
      }
      case WireFormatLite::WIRETYPE_START_GROUP: {
        // Its fields, to the END_GROUP of its number, nested no deeper
        // than protobuf's default recursion limit.
        if (group_depth_ >= kMaxGroupDepth) return false;
        ++group_depth_;
        if (out != nullptr) out->WriteTag(tag);
        const uint32_t end =
            Tag(WireFormatLite::GetTagFieldNumber(tag), WireFormatLite::WIRETYPE_END_GROUP);
        bool ok = false;
        while (const uint32_t inner = NextTag()) {
          if (inner == end) {
            if (out != nullptr) out->WriteTag(inner);
            ok = true;
            break;
          }
          if (!Skip(inner, out)) break;
        }
        --group_depth_;
        return ok;
      }
      case WireFormatLite::WIRETYPE_END_GROUP:
        return false;  // one that no START_GROUP began
      default:         // varints and fixed widths: SkipField reads them as protobuf does
        return out != nullptr ? WireFormatLite::SkipField(in_, tag, out)
                              : WireFormatLite::SkipField(in_, tag);
    }
  }
  bool ReadBytes(std::string* out) {
    int length = 0;
    return ReadLength(&length) && in_->ReadString(out, length);
  }
  bool ReadInt64(int64_t* out) {
    uint64_t value = 0;
    if (!in_->ReadVarint64(&value)) return false;
    *out = static_cast<int64_t>(value);
    return true;
  }
  // A length-delimited field parsed by `parse`, which must read it whole.
  // A length past the enclosing message's end fails (PushLimit would
  // quietly cut it to that end, accepting a truncated field).
  template <typename Parse>
  bool Nested(Parse parse) {
    int length = 0;
    if (!ReadLength(&length) || length > in_->BytesUntilLimit()) return false;
    const CodedInputStream::Limit limit = in_->PushLimit(length);
    if (!parse()) return false;
    in_->PopLimit(limit);
    return true;
  }

  bool Slice(ShardSlice* slice) {
    bool placed = false;
    while (const uint32_t tag = NextTag()) {
      // Placed data must come last: a field after it could change where it
      // belonged. Fields unknown here (a newer server's, or a known number
      // with another wire type) are skipped, as protobuf skips them.
      static constexpr uint32_t kKnown[] = {Tag(ShardSlice::kVariableFieldNumber, kBytes),
                                            Tag(ShardSlice::kShardFieldNumber, kVarint),
                                            Tag(ShardSlice::kRowOffsetFieldNumber, kVarint),
                                            Tag(ShardSlice::kVersionFieldNumber, kVarint),
                                            Tag(ShardSlice::kTensorFieldNumber, kBytes)};
      if (placed && absl::c_linear_search(kKnown, tag)) return false;
      int64_t value = 0;
      bool ok = true;
      if (tag == Tag(ShardSlice::kVariableFieldNumber, kBytes)) {
        // A string field: UTF-8, or the parse fails, as protobuf's does.
        ok = ReadBytes(slice->mutable_variable()) &&
             WireFormatLite::VerifyUtf8String(slice->variable().data(),
                                              static_cast<int>(slice->variable().size()),
                                              WireFormatLite::PARSE, "fulcrum.ShardSlice.variable");
      } else if (tag == Tag(ShardSlice::kShardFieldNumber, kVarint)) {
        ok = ReadInt64(&value);
        slice->set_shard(static_cast<int32_t>(value));
      } else if (tag == Tag(ShardSlice::kRowOffsetFieldNumber, kVarint)) {
        ok = ReadInt64(&value);
        slice->set_row_offset(value);
      } else if (tag == Tag(ShardSlice::kVersionFieldNumber, kVarint)) {
        ok = ReadInt64(&value);
        slice->set_version(value);
      } else if (tag == Tag(ShardSlice::kTensorFieldNumber, kBytes)) {
        ok = Nested([&] { return Tensor(slice, &placed); });
      } else {
        ok = Skip(tag);
      }
      if (!ok) return false;
    }
    return in_->ConsumedEntireMessage();
  }

  bool Tensor(ShardSlice* slice, bool* placed) {
    TensorProto* tensor = slice->mutable_tensor();
    while (const uint32_t tag = NextTag()) {
      static constexpr uint32_t kKnown[] = {
          Tag(TensorProto::kDtypeFieldNumber, kVarint), Tag(TensorProto::kShapeFieldNumber, kBytes),
          Tag(TensorProto::kShapeFieldNumber, kVarint), Tag(TensorProto::kDataFieldNumber, kBytes)};
      if (*placed && absl::c_linear_search(kKnown, tag)) return false;  // as in Slice
      int64_t value = 0;
      bool ok = true;
      if (tag == Tag(TensorProto::kDtypeFieldNumber, kVarint)) {
        ok = ReadInt64(&value);
        tensor->set_dtype(static_cast<DataType>(static_cast<int32_t>(value)));
      } else if (tag == Tag(TensorProto::kShapeFieldNumber, kBytes)) {  // packed
        ok = Nested([&] {
          while (in_->BytesUntilLimit() > 0) {
            if (!ReadInt64(&value)) return false;
            tensor->add_shape(value);
          }
          return true;
        });
      } else if (tag == Tag(TensorProto::kShapeFieldNumber, kVarint)) {
        ok = ReadInt64(&value);
        tensor->add_shape(value);
      } else if (tag == Tag(TensorProto::kDataFieldNumber, kBytes)) {
        int length = 0;
        ok = ReadLength(&length);
        float* place = ok && placer_ != nullptr && tensor->dtype() == DT_FLOAT
                           ? placer_->Place(*slice, static_cast<size_t>(length))
                           : nullptr;
        if (ok && received_ != nullptr && tensor->dtype() == DT_FLOAT) {
          ok = LeaveInPlace(length);
          tensor->clear_data();
          *placed = true;
        } else if (place != nullptr) {
          ok = in_->ReadRaw(place, length);
          tensor->clear_data();
          *placed = true;
        } else if (ok) {
          ok = in_->ReadString(tensor->mutable_data(), length);
        }
      } else {
        ok = Skip(tag);
      }
      if (!ok) return false;
    }
    return in_->ConsumedEntireMessage();
  }

  // Takes the next `length` bytes as the current slice's received data:
  // where they lie in the buffer's slices, in pieces of whole values.
  bool LeaveInPlace(int length) {
    ReceivedSlice& out = *slice_received_;
    out = ReceivedSlice();
    out.bytes = length;
    out.owner = received_;
    int carried = 0;  // bytes of a value split between two buffer slices
    std::array<char, sizeof(float)> carry;
    while (length > 0) {
      const void* data = nullptr;
      int size = 0;
      if (!in_->GetDirectBufferPointer(&data, &size)) return false;
      size = std::min(size, length);
      const char* bytes = static_cast<const char*>(data);
      int at = 0;
      if (carried > 0) {
        const int fill = std::min<int>(size, sizeof(float) - carried);
        std::memcpy(carry.data() + carried, bytes, fill);
        carried += fill;
        at = fill;
        if (carried == sizeof(float)) {
          received_->split_values.push_back(carry);
          out.pieces.emplace_back(received_->split_values.back().data(), sizeof(float));
          carried = 0;
        }
      }
      if (carried == 0) {  // else all of this buffer slice went to the carry
        const int whole = (size - at) / static_cast<int>(sizeof(float)) * sizeof(float);
        if (whole > 0) out.pieces.emplace_back(bytes + at, whole);
        carried = size - at - whole;
        std::memcpy(carry.data(), bytes + at + whole, carried);
      }
      in_->Skip(size);
      length -= size;
    }
    return true;
  }

  // Protobuf's default recursion limit, for groups skipped within groups.
  static constexpr int kMaxGroupDepth = 100;
  int group_depth_ = 0;
  CodedInputStream* const in_;
  SlicePlacer* const placer_ = nullptr;              // null: nothing is placed
  const std::shared_ptr<ReceivedMessage> received_;  // null: nothing is left in place
  ReceivedSlice* slice_received_ = nullptr;          // the current push slice's
};

// What `write` writes, with large byte fields lent on behalf of `owner`.
template <typename Write>
grpc::ByteBuffer WriteLending(const std::shared_ptr<const void>& owner, Write write) {
  LendingStream stream(owner);
  {
    CodedOutputStream out(&stream);
    out.EnableAliasing(true);
    write(&out);
  }  // returns protobuf's unused buffer space
  grpc::ByteBuffer buffer;
  stream.MoveTo(&buffer);
  return buffer;
}

}  // namespace

grpc::ByteBuffer SerializeLending(const google::protobuf::MessageLite& message,
                                  const std::shared_ptr<const void>& owner) {
  message.ByteSizeLong();  // caches the sizes SerializeWithCachedSizes writes
  return WriteLending(owner,
                      [&](CodedOutputStream* out) { message.SerializeWithCachedSizes(out); });
}

namespace {

// Writes a length-delimited field's tag and length.
void WriteFieldHeader(int field, size_t length, CodedOutputStream* out) {
  out->WriteTag(WireFormatLite::MakeTag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
  out->WriteVarint64(length);
}

size_t FieldHeaderSize(int field, size_t length) {
  return CodedOutputStream::VarintSize32(
             WireFormatLite::MakeTag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) +
         CodedOutputStream::VarintSize64(length);
}

// A gradient slice as it goes on the wire: held (the slice itself) or lent
// (its fields and its tensor's, then the lent bytes as the tensor's data).
class SliceWriter {
 public:
  SliceWriter(const ShardSlice& slice, absl::Span<const char> lent) : slice_(slice), lent_(lent) {
    if (lent_.empty()) {
      size_ = slice_.ByteSizeLong();
      return;
    }
    fields_ = slice_;
    fields_.clear_tensor();
    const size_t tensor_fields = slice_.tensor().ByteSizeLong();
    tensor_size_ =
        tensor_fields + FieldHeaderSize(TensorProto::kDataFieldNumber, lent_.size()) + lent_.size();
    size_ = fields_.ByteSizeLong() + FieldHeaderSize(ShardSlice::kTensorFieldNumber, tensor_size_) +
            tensor_size_;
  }

  size_t size() const { return size_; }

  void Write(CodedOutputStream* out) const {
    if (lent_.empty()) {
      slice_.SerializeWithCachedSizes(out);
      return;
    }
    fields_.SerializeWithCachedSizes(out);
    WriteFieldHeader(ShardSlice::kTensorFieldNumber, tensor_size_, out);
    slice_.tensor().SerializeWithCachedSizes(out);  // dtype and shape: no data
    WriteFieldHeader(TensorProto::kDataFieldNumber, lent_.size(), out);
    out->WriteRawMaybeAliased(lent_.data(), static_cast<int>(lent_.size()));
  }

 private:
  const ShardSlice& slice_;
  const absl::Span<const char> lent_;
  ShardSlice fields_;  // lent: the slice without its tensor
  size_t tensor_size_ = 0;
  size_t size_ = 0;
};

// Slices, each held or lent (`lent`, as LentBytes says), as field `field` of
// a message.
class SlicesWriter {
 public:
  SlicesWriter(int field, const SliceList& slices, const LentBytes& lent) : field_(field) {
    writers_.reserve(slices.size());
    for (int i = 0; i < slices.size(); ++i) {
      writers_.emplace_back(slices[i], lent.empty() ? absl::Span<const char>() : lent[i]);
      size_ += FieldHeaderSize(field_, writers_.back().size()) + writers_.back().size();
    }
  }

  // Bytes of the fields, headers included.
  size_t size() const { return size_; }

  void Write(CodedOutputStream* out) const {
    for (const SliceWriter& slice : writers_) {
      WriteFieldHeader(field_, slice.size(), out);
      slice.Write(out);
    }
  }

 private:
  const int field_;
  std::vector<SliceWriter> writers_;
  size_t size_ = 0;
};

}  // namespace

grpc::ByteBuffer SerializePush(const OutgoingPush& push, bool as_push_pull, const PullRequest* pull,
                               const std::shared_ptr<const void>& owner) {
  if (push.lent.empty()) {
    if (!as_push_pull) return SerializeLending(push.request, owner);
    PushPullRequest message;
    message.unsafe_arena_set_allocated_push(const_cast<PushRequest*>(&push.request));
    if (pull != nullptr) message.unsafe_arena_set_allocated_pull(const_cast<PullRequest*>(pull));
    grpc::ByteBuffer buffer = SerializeLending(message, owner);
    message.unsafe_arena_release_push();
    message.unsafe_arena_release_pull();
    return buffer;
  }
  PushRequest header;
  CopyPushHeader(push.request, &header);
  const SlicesWriter slices(PushRequest::kGradientsFieldNumber, push.request.gradients(),
                            push.lent);
  const size_t push_size = header.ByteSizeLong() + slices.size();
  return WriteLending(owner, [&](CodedOutputStream* out) {
    if (as_push_pull) WriteFieldHeader(PushPullRequest::kPushFieldNumber, push_size, out);
    header.SerializeWithCachedSizes(out);
    slices.Write(out);
    if (as_push_pull && pull != nullptr) {
      WriteFieldHeader(PushPullRequest::kPullFieldNumber, pull->ByteSizeLong(), out);
      pull->SerializeWithCachedSizes(out);
    }
  });
}

grpc::ByteBuffer SerializePull(const OutgoingPull& pull, const std::shared_ptr<const void>& owner) {
  if (pull.lent.empty()) return SerializeLending(pull.response, owner);
  const SlicesWriter slices(PullResponse::kSlicesFieldNumber, pull.response.slices(), pull.lent);
  PullResponse rest;  // the push results and the wait
  *rest.mutable_push_results() = pull.response.push_results();
  rest.set_waited_us(pull.response.waited_us());
  rest.ByteSizeLong();
  return WriteLending(owner, [&](CodedOutputStream* out) {
    slices.Write(out);
    rest.SerializeWithCachedSizes(out);
  });
}

absl::Status ParsePullResponse(grpc::ByteBuffer* buffer, SlicePlacer* placer, PullResponse* out) {
  bool parsed = false;
  {
    grpc::ProtoBufferReader reader(buffer);
    if (!reader.status().ok()) {
      return absl::DataLossError(
          absl::StrCat("unreadable pull response: ", reader.status().error_message()));
    }
    CodedInputStream in(&reader);
    out->Clear();
    parsed = LimitToMessage(&in, buffer->Length()) && WireParser(&in, placer).Response(out);
  }
  buffer->Clear();
  if (!parsed) {
    return absl::DataLossError("malformed pull response (not protobuf, or fields out of order)");
  }
  return absl::OkStatus();
}

namespace {

// ParseReceivedPush of a `Message`, parsed by `parse`.
template <typename Message, typename Parse>
absl::Status ParseReceiving(grpc::ByteBuffer* buffer, Message* out, ReceivedBytes* received,
                            Parse parse) {
  out->Clear();
  received->clear();
  auto message = std::make_shared<ReceivedMessage>(buffer);
  message->reader.emplace(&message->buffer);
  if (!message->reader->status().ok()) {
    return absl::DataLossError(
        absl::StrCat("unreadable push: ", message->reader->status().error_message()));
  }
  bool parsed = false;
  {
    CodedInputStream in(&*message->reader);
    WireParser parser(&in, message);
    parsed = LimitToMessage(&in, message->buffer.Length()) && parse(parser);
  }
  if (!parsed) {
    received->clear();
    return absl::DataLossError("malformed push (not protobuf, or fields out of order)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseReceivedPush(grpc::ByteBuffer* buffer, PushRequest* out,
                               ReceivedBytes* received) {
  return ParseReceiving(buffer, out, received,
                        [&](WireParser& parser) { return parser.Push(out, received); });
}

absl::Status ParseReceivedPush(grpc::ByteBuffer* buffer, PushPullRequest* out,
                               ReceivedBytes* received) {
  return ParseReceiving(buffer, out, received,
                        [&](WireParser& parser) { return parser.PushPull(out, received); });
}

ReceiveTensorBytes::ReceiveTensorBytes() {
  CHECK(current_receive == nullptr && "ReceiveTensorBytes scopes do not nest");
  current_receive = this;
}

ReceiveTensorBytes::~ReceiveTensorBytes() { current_receive = nullptr; }

ReceivedBytes ReceiveTensorBytes::Take() { return std::move(received_); }

void ReceiveTensorBytes::Record(absl::Status parsed, ReceivedBytes received) {
  received_ = std::move(received);
  if (!parsed.ok()) error_ = std::move(parsed);
}

LendTensorBytes::LendTensorBytes(std::shared_ptr<const OutgoingPull> pull) {
  CHECK(current_pull == nullptr && pull != nullptr && "LendTensorBytes scopes do not nest");
  current_pull = std::move(pull);
}

LendTensorBytes::~LendTensorBytes() { current_pull.reset(); }

}  // namespace fulcrum

grpc::Status grpc::SerializationTraits<fulcrum::PullResponse>::Serialize(
    const fulcrum::PullResponse& message, ByteBuffer* buffer, bool* own_buffer) {
  const std::shared_ptr<const fulcrum::OutgoingPull>& pull = fulcrum::current_pull;
  if (pull == nullptr) {
    return GenericSerialize<ProtoBufferWriter, fulcrum::PullResponse>(message, buffer, own_buffer);
  }
  CHECK(&message == &pull->response && "a LendTensorBytes scope writes its own pull");
  *own_buffer = true;
  *buffer = fulcrum::SerializePull(*pull, pull);
  return Status::OK;
}

grpc::Status grpc::SerializationTraits<fulcrum::PullResponse>::Deserialize(
    ByteBuffer* buffer, fulcrum::PullResponse* message) {
  return GenericDeserialize<ProtoBufferReader, fulcrum::PullResponse>(buffer, message);
}

namespace {

// A push's Deserialize: ParseReceivedPush inside a ReceiveTensorBytes
// scope, protobuf's outside.
template <typename Message>
grpc::Status DeserializePush(grpc::ByteBuffer* buffer, Message* message) {
  fulcrum::ReceiveTensorBytes* scope = fulcrum::current_receive;
  if (scope == nullptr) {
    return grpc::GenericDeserialize<grpc::ProtoBufferReader, Message>(buffer, message);
  }
  fulcrum::ReceivedBytes received;
  absl::Status parsed = fulcrum::ParseReceivedPush(buffer, message, &received);
  grpc::Status status =
      parsed.ok() ? grpc::Status::OK
                  : grpc::Status(grpc::StatusCode::INTERNAL, std::string(parsed.message()));
  scope->Record(std::move(parsed), std::move(received));
  return status;
}

}  // namespace

grpc::Status grpc::SerializationTraits<fulcrum::PushRequest>::Serialize(
    const fulcrum::PushRequest& message, ByteBuffer* buffer, bool* own_buffer) {
  return GenericSerialize<ProtoBufferWriter, fulcrum::PushRequest>(message, buffer, own_buffer);
}

grpc::Status grpc::SerializationTraits<fulcrum::PushRequest>::Deserialize(
    ByteBuffer* buffer, fulcrum::PushRequest* message) {
  return DeserializePush(buffer, message);
}

grpc::Status grpc::SerializationTraits<fulcrum::PushPullRequest>::Serialize(
    const fulcrum::PushPullRequest& message, ByteBuffer* buffer, bool* own_buffer) {
  return GenericSerialize<ProtoBufferWriter, fulcrum::PushPullRequest>(message, buffer, own_buffer);
}

grpc::Status grpc::SerializationTraits<fulcrum::PushPullRequest>::Deserialize(
    ByteBuffer* buffer, fulcrum::PushPullRequest* message) {
  return DeserializePush(buffer, message);
}
