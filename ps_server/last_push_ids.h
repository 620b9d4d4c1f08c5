// The push_id of each worker's last push a shard or table took, so that a
// push retried after its answer was lost is taken once (DUPLICATE after).
// Thread-compatible: the shard or table that owns it locks.
#ifndef FULCRUM_PS_SERVER_LAST_PUSH_IDS_H_
#define FULCRUM_PS_SERVER_LAST_PUSH_IDS_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace fulcrum {

class LastPushIds {
 public:
  // True when `worker` (>= 0, checked by the server) pushed `push_id`
  // last; else remembers it. A push_id of 0 is never seen.
  bool Seen(int worker, uint64_t push_id) {
    if (IsLast(worker, push_id)) return true;
    Record(worker, push_id);
    return false;
  }
  // True when `worker` pushed `push_id` (not 0) last; remembers nothing.
  bool IsLast(int worker, uint64_t push_id) const {
    return push_id != 0 && static_cast<size_t>(worker) < ids_.size() && ids_[worker] == push_id;
  }
  // Remembers `push_id` (not 0) as `worker`'s last push.
  void Record(int worker, uint64_t push_id) {
    if (push_id == 0) return;
    if (static_cast<size_t>(worker) >= ids_.size()) ids_.resize(worker + 1, 0);
    ids_[worker] = push_id;
  }

  // Each worker's last push id, by worker id (0: none), as a copy of the
  // shard sends it to another.
  const std::vector<uint64_t>& ids() const { return ids_; }
  void Assign(std::vector<uint64_t> ids) { ids_ = std::move(ids); }

 private:
  std::vector<uint64_t> ids_;  // by worker id
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_LAST_PUSH_IDS_H_
