#include "worker/collective/message.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/tensor.h"
#include "common/vector_loops.h"

namespace fulcrum {
namespace {

// to[i] += from's float i, for i < n.
FULCRUM_VECTOR_CLONES void AddBytesInto(float* __restrict to, const char* __restrict from,
                                        int64_t n) {
  for (int64_t i = 0; i < n; ++i) to[i] += LoadFloat(from, i);
}

// out[i] = from's float i + addend[i], for i < n: the sum AddInto rounds.
FULCRUM_VECTOR_CLONES void SumBytes(float* __restrict out, const char* __restrict from,
                                    const float* __restrict addend, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = LoadFloat(from, i) + addend[i];
}

}  // namespace

Message::Message(MessageFloats floats)
    : floats_(std::make_unique<MessageFloats>(std::move(floats))), size_(floats_->size()) {
  if (size_ > 0) {
    pieces_.emplace_back(reinterpret_cast<const char*>(floats_->data()), size_ * sizeof(float));
  }
}

Message::Message(std::vector<Piece> pieces, std::shared_ptr<const void> owner)
    : owner_(std::move(owner)), pieces_(std::move(pieces)) {
  size_t bytes = 0;
  for (Piece piece : pieces_) bytes += piece.size();
  size_ = bytes / sizeof(float);
}

template <typename Run>
void Message::ForEachRun(const Run& run) const {
  size_t next = 0;            // the next float to hand over
  char split[sizeof(float)];  // the bytes of a float split between pieces
  size_t held = 0;            // of which this many came so far
  for (Piece piece : pieces_) {
    const char* bytes = piece.data();
    size_t left = piece.size();
    if (held > 0) {
      const size_t take = std::min(left, sizeof(float) - held);
      std::memcpy(split + held, bytes, take);
      held += take;
      bytes += take;
      left -= take;
      if (held < sizeof(float)) continue;
      run(next++, split, int64_t{1});
      held = 0;
    }
    const size_t whole = left / sizeof(float);
    if (whole > 0) run(next, bytes, static_cast<int64_t>(whole));
    next += whole;
    held = left - whole * sizeof(float);
    std::memcpy(split, bytes + whole * sizeof(float), held);
  }
}

void Message::CopyTo(float* out) const {
  char* to = reinterpret_cast<char*>(out);
  for (Piece piece : pieces_) {
    if (piece.empty()) continue;
    std::memcpy(to, piece.data(), piece.size());
    to += piece.size();
  }
}

void Message::AddTo(float* to) const {
  ForEachRun([to](size_t first, const char* bytes, int64_t count) {
    AddBytesInto(to + first, bytes, count);
  });
}

void Message::SumTo(const float* addend, float* out) const {
  ForEachRun([addend, out](size_t first, const char* bytes, int64_t count) {
    SumBytes(out + first, bytes, addend + first, count);
  });
}

MessageFloats Message::Take() && {
  MessageFloats floats;
  if (floats_ != nullptr) {
    floats = std::move(*floats_);
  } else {
    floats.resize(size_);
    CopyTo(floats.data());
  }
  *this = Message();
  return floats;
}

}  // namespace fulcrum
