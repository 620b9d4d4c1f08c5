// The floats of collective messages (PeerLinks, Mailbox, the gRPC frames).
//
// MessageFloats: what a rank sends, a vector whose resize leaves new floats
// unset (a message is written over as soon as it is sized, and zeroing it
// first was a pass over memory as long as the copy itself).
//
// Message: what a rank receives. Either floats it owns, or bytes where the
// transport received them (gRPC's receive buffers, in pieces that may
// split a float and lie at any address), kept alive by their owner: the
// ring sums or stores straight out of those buffers and forwards them
// without copying them out first (the copy was an eighth of a 64 MiB
// all-reduce's work). Move-only; thread-compatible.
#ifndef FULCRUM_WORKER_COLLECTIVE_MESSAGE_H_
#define FULCRUM_WORKER_COLLECTIVE_MESSAGE_H_

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace fulcrum {

// std::allocator, except that a value constructed with no arguments is
// default-initialised (a float left unset), not value-initialised (zero).
template <typename T>
class UnsetAllocator : public std::allocator<T> {
 public:
  template <typename U>
  struct rebind {
    using other = UnsetAllocator<U>;
  };
  UnsetAllocator() = default;
  template <typename U>
  explicit UnsetAllocator(const UnsetAllocator<U>&) noexcept {}

  template <typename U>
  void construct(U* at) noexcept {
    ::new (static_cast<void*>(at)) U;
  }
  template <typename U, typename... Args>
  void construct(U* at, Args&&... args) {
    ::new (static_cast<void*>(at)) U(std::forward<Args>(args)...);
  }
};

using MessageFloats = std::vector<float, UnsetAllocator<float>>;

class Message {
 public:
  using Piece = absl::Span<const char>;

  Message() = default;
  // Floats this message owns.
  explicit Message(MessageFloats floats);
  // Borrowed: the floats are the bytes of `pieces` in order (a whole number
  // of floats in all), which `owner` keeps alive.
  Message(std::vector<Piece> pieces, std::shared_ptr<const void> owner);

  Message(Message&&) = default;
  Message& operator=(Message&&) = default;
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // out[i] = (*this)[i] for i < size().
  void CopyTo(float* out) const;
  // to[i] += (*this)[i] for i < size().
  void AddTo(float* to) const;
  // out[i] = (*this)[i] + addend[i] for i < size(); out and addend do not
  // overlap. Each sum rounds as AddInto's (common/vector_loops.h).
  void SumTo(const float* addend, float* out) const;

  // The floats, as a vector: this message's own, or a copy of borrowed ones.
  MessageFloats Take() &&;

  // The bytes in order, and what keeps them alive (null when this message
  // owns its floats): for a transport that forwards them as they are.
  const std::vector<Piece>& pieces() const { return pieces_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  // Calls run(first, bytes, count) over runs of whole floats covering
  // [0, size()) in order: float `first` on, `count` of them at `bytes`
  // (any address). A float split between pieces comes as a run of one.
  template <typename Run>
  void ForEachRun(const Run& run) const;

  std::unique_ptr<MessageFloats> floats_;  // owned
  std::shared_ptr<const void> owner_;      // borrowed
  std::vector<Piece> pieces_;
  size_t size_ = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_MESSAGE_H_
