#include "worker/collective/grpc/collective_frame.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "proto/collective.pb.h"

namespace fulcrum {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;

constexpr uint32_t kFromTag =
    WireFormatLite::MakeTag(CollectiveFrame::kFromFieldNumber, WireFormatLite::WIRETYPE_FIXED32);
constexpr uint32_t kRoundTag =
    WireFormatLite::MakeTag(CollectiveFrame::kRoundFieldNumber, WireFormatLite::WIRETYPE_FIXED64);
constexpr uint32_t kDataTag = WireFormatLite::MakeTag(CollectiveFrame::kDataFieldNumber,
                                                      WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
// The fields before the data: each tag is one byte, then 4, 8 and up to 5
// bytes of length.
constexpr int kMaxHeaderBytes = 1 + 4 + 1 + 8 + 1 + 5;

// The fields before the floats. `bytes`: the data field's length, or -1
// for none.
grpc::Slice Header(int from, uint64_t round, int64_t bytes) {
  uint8_t header[kMaxHeaderBytes];
  uint8_t* out = header;
  out = CodedOutputStream::WriteTagToArray(kFromTag, out);
  out = CodedOutputStream::WriteLittleEndian32ToArray(static_cast<uint32_t>(from), out);
  out = CodedOutputStream::WriteTagToArray(kRoundTag, out);
  out = CodedOutputStream::WriteLittleEndian64ToArray(round, out);
  if (bytes >= 0) {
    out = CodedOutputStream::WriteTagToArray(kDataTag, out);
    out = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(bytes), out);
  }
  return grpc::Slice(header, static_cast<size_t>(out - header));
}

absl::Status Malformed(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("a collective frame ", what));
}

// A slice of `piece`'s bytes that holds `owner` until gRPC lets it go.
grpc::Slice BorrowedSlice(Message::Piece piece, const std::shared_ptr<const void>& owner) {
  return grpc::Slice(grpc_slice_new_with_user_data(
                         const_cast<char*>(piece.data()), piece.size(),
                         [](void* held) { delete static_cast<std::shared_ptr<const void>*>(held); },
                         new std::shared_ptr<const void>(owner)),
                     grpc::Slice::STEAL_REF);
}

}  // namespace

const std::string& CollectiveStreamMethod() {
  static const std::string* const method = [] {
    const auto* service = CollectiveFrame::descriptor()->file()->FindServiceByName("Collective");
    return new std::string(
        absl::StrCat("/", service->full_name(), "/", service->method(0)->name()));
  }();
  return *method;
}

std::string FormatStreamOrder(const StreamOrder& order) {
  return absl::StrCat(order.sender, ".", order.sequence);
}

StreamOrder ParseStreamOrder(absl::string_view value) {
  StreamOrder order;
  const size_t dot = value.find('.');
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(value.substr(0, dot), &order.sender) ||
      !absl::SimpleAtoi(value.substr(dot + 1), &order.sequence)) {
    return {};
  }
  return order;
}

grpc::ByteBuffer EncodeFrame(int from, uint64_t round, MessageFloats data) {
  if (data.empty()) {
    grpc::Slice header = Header(from, round, -1);
    return grpc::ByteBuffer(&header, 1);
  }
  auto* owned = new MessageFloats(std::move(data));
  const size_t bytes = owned->size() * sizeof(float);
  const grpc::Slice slices[] = {
      Header(from, round, static_cast<int64_t>(bytes)),
      grpc::Slice(
          grpc_slice_new_with_user_data(
              owned->data(), bytes,
              [](void* user_data) { delete static_cast<MessageFloats*>(user_data); }, owned),
          grpc::Slice::STEAL_REF)};
  return grpc::ByteBuffer(slices, 2);
}

grpc::ByteBuffer EncodeForwardedFrame(int from, uint64_t round, Message data) {
  if (data.owner() == nullptr) return EncodeFrame(from, round, std::move(data).Take());
  std::vector<grpc::Slice> slices = {
      Header(from, round, static_cast<int64_t>(data.size() * sizeof(float)))};
  for (Message::Piece piece : data.pieces()) {
    if (!piece.empty()) slices.push_back(BorrowedSlice(piece, data.owner()));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::StatusOr<DecodedFrame> DecodeFrame(grpc::ByteBuffer& buffer, int size) {
  grpc::ProtoBufferReader reader(&buffer);
  CodedInputStream in(&reader);
  DecodedFrame frame;
  bool has_from = false;
  bool has_data = false;
  int64_t data_at = 0;  // where the data's bytes start in the frame
  int64_t data_bytes = 0;
  int32_t from = -1;
  for (;;) {
    // A tag of more than 5 bytes, which ReadTag would cut to 32 bits, is
    // refused as protobuf refuses it.
    const int before = in.CurrentPosition();
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    if (in.CurrentPosition() - before > 5) return Malformed("does not parse");
    if (tag == kFromTag) {
      uint32_t value = 0;
      if (!in.ReadLittleEndian32(&value)) return Malformed("ends inside its sender");
      std::memcpy(&from, &value, sizeof(from));
      has_from = true;
    } else if (tag == kRoundTag) {
      if (!in.ReadLittleEndian64(&frame.round)) return Malformed("ends inside its round");
    } else if (tag == kDataTag) {
      uint32_t bytes = 0;
      if (has_data) return Malformed("carries its data twice");
      if (!in.ReadVarint32(&bytes) || bytes > INT_MAX) return Malformed("has a bad data length");
      if (bytes % sizeof(float) != 0) {
        return Malformed(absl::StrCat("carries ", bytes, " bytes of data: not whole floats"));
      }
      if (static_cast<int64_t>(bytes) > static_cast<int64_t>(buffer.Length())) {
        return Malformed(
            absl::StrCat("claims ", bytes, " bytes of data in a message of ", buffer.Length()));
      }
      data_at = in.CurrentPosition();
      data_bytes = bytes;
      if (!in.Skip(static_cast<int>(bytes))) {
        return Malformed(absl::StrCat("ends inside its ", bytes, " bytes of data"));
      }
      has_data = true;
    } else if (WireFormatLite::GetTagFieldNumber(tag) == 0 ||
               // Groups are refused: skipping one reads the tags inside it
               // without the length check above (no peer sends one).
               WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_START_GROUP ||
               WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_END_GROUP ||
               !WireFormatLite::SkipField(&in, tag)) {
      return Malformed("does not parse");
    }
  }
  if (!in.ConsumedEntireMessage()) return Malformed("does not parse");
  if (!has_from) return Malformed("names no sender");
  if (from < 0 || from >= size) {
    return Malformed(absl::StrCat("from rank ", from, ": not a rank of ", size));
  }
  frame.from = from;
  if (data_bytes > 0) {
    // The data's bytes where gRPC received them: the slices, held by the
    // message, cut to [data_at, data_at + data_bytes).
    auto slices = std::make_shared<std::vector<grpc::Slice>>();
    if (!buffer.Dump(slices.get()).ok()) return Malformed("cannot be read");
    std::vector<Message::Piece> pieces;
    int64_t at = 0;  // the frame's byte where this slice starts
    for (const grpc::Slice& slice : *slices) {
      const int64_t size = static_cast<int64_t>(slice.size());
      const int64_t begin = std::max(at, data_at);
      const int64_t end = std::min(at + size, data_at + data_bytes);
      if (begin < end) {
        pieces.emplace_back(reinterpret_cast<const char*>(slice.begin()) + (begin - at),
                            static_cast<size_t>(end - begin));
      }
      at += size;
    }
    frame.data = Message(std::move(pieces), std::move(slices));
  }
  return frame;
}

}  // namespace fulcrum
