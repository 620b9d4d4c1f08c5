// The floats of one collective message (PeerLinks, Mailbox, the gRPC
// frames). A vector whose resize leaves new floats unset: a received
// message is written over as soon as it is sized, and zeroing it first
// was a pass over memory as long as the copy itself (4% of an all-reduce
// benchmark's samples, as much as the copy).
#ifndef FULCRUM_WORKER_COLLECTIVE_MESSAGE_H_
#define FULCRUM_WORKER_COLLECTIVE_MESSAGE_H_

#include <memory>
#include <new>
#include <utility>
#include <vector>

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

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_MESSAGE_H_
