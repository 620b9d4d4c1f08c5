#include "ps_server/embedding/heavy_hitters.h"

#include <algorithm>
#include <utility>

namespace fulcrum {

HeavyHitters::HeavyHitters(int capacity) : capacity_(static_cast<size_t>(std::max(1, capacity))) {
  heap_.reserve(capacity_);
  slots_.reserve(capacity_);
}

void HeavyHitters::SiftDown(size_t i) {
  // The entry at i moves down past smaller children, each moved up into
  // the hole it leaves.
  const Entry moving = heap_[i];
  for (;;) {
    size_t least = 2 * i + 1;
    if (least >= heap_.size()) break;
    if (least + 1 < heap_.size() && heap_[least + 1].count < heap_[least].count) ++least;
    if (heap_[least].count >= moving.count) break;
    Put(i, heap_[least]);
    i = least;
  }
  Put(i, moving);
}

void HeavyHitters::Add(int64_t id, int64_t weight) {
  if (auto held = slot_of_.find(id); held != slot_of_.end()) {
    const size_t i = slots_[held->second].place;
    heap_[i].count += weight;  // larger: it can only go down a min-heap
    SiftDown(i);
    return;
  }
  if (heap_.size() < capacity_) {
    // Up past larger parents, each moved down into the hole.
    const auto slot = static_cast<uint32_t>(slots_.size());
    slots_.push_back({id, 0, 0});
    slot_of_.emplace(id, slot);
    size_t i = heap_.size();
    heap_.push_back({weight, slot});
    for (; i > 0 && heap_[(i - 1) / 2].count > weight; i = (i - 1) / 2) Put(i, heap_[(i - 1) / 2]);
    Put(i, {weight, slot});
    return;
  }
  // Full: the least counted gives its place to `id`, which may have been
  // pushed as often before it was dropped.
  Entry& least = heap_[0];
  Slot& slot = slots_[least.slot];
  slot_of_.erase(slot.id);
  slot_of_.emplace(id, least.slot);
  slot.id = id;
  slot.error = least.count;
  least.count += weight;
  SiftDown(0);
}

std::vector<HeavyHitters::Hitter> HeavyHitters::Top(int n) const {
  std::vector<Hitter> top;
  top.reserve(heap_.size());
  for (const Entry& entry : heap_) {
    const Slot& slot = slots_[entry.slot];
    top.push_back({slot.id, entry.count, slot.error});
  }
  const auto first = top.begin() + static_cast<std::ptrdiff_t>(
                                       std::min(top.size(), static_cast<size_t>(std::max(0, n))));
  std::partial_sort(top.begin(), first, top.end(), [](const Hitter& a, const Hitter& b) {
    return a.count != b.count ? a.count > b.count : a.id < b.id;
  });
  top.erase(first, top.end());
  return top;
}

}  // namespace fulcrum
