#include "ps_server/embedding/heavy_hitters.h"

#include <algorithm>
#include <utility>

namespace fulcrum {

HeavyHitters::HeavyHitters(int capacity) : capacity_(static_cast<size_t>(std::max(1, capacity))) {
  heap_.reserve(capacity_);
}

void HeavyHitters::SiftDown(size_t i) {
  // The hitter at i moves down past smaller children, each moved up into
  // the hole it leaves: one write of a position per level.
  const Hitter moving = heap_[i];
  for (;;) {
    size_t least = 2 * i + 1;
    if (least >= heap_.size()) break;
    if (least + 1 < heap_.size() && heap_[least + 1].count < heap_[least].count) ++least;
    if (heap_[least].count >= moving.count) break;
    heap_[i] = heap_[least];
    position_[heap_[i].id] = i;
    i = least;
  }
  heap_[i] = moving;
  position_[moving.id] = i;
}

void HeavyHitters::Add(int64_t id, int64_t weight) {
  if (auto held = position_.find(id); held != position_.end()) {
    heap_[held->second].count += weight;  // larger: it can only go down a min-heap
    SiftDown(held->second);
    return;
  }
  if (heap_.size() < capacity_) {
    // Up past larger parents, each moved down into the hole.
    size_t i = heap_.size();
    heap_.push_back({id, weight, 0});
    for (; i > 0 && heap_[(i - 1) / 2].count > weight; i = (i - 1) / 2) {
      heap_[i] = heap_[(i - 1) / 2];
      position_[heap_[i].id] = i;
    }
    heap_[i] = {id, weight, 0};
    position_[id] = i;
    return;
  }
  // Full: the least counted gives its place to `id`, which may have been
  // pushed as often before it was dropped.
  Hitter& least = heap_[0];
  position_.erase(least.id);
  least = {id, least.count + weight, least.count};
  SiftDown(0);
}

std::vector<HeavyHitters::Hitter> HeavyHitters::Top(int n) const {
  std::vector<Hitter> top = heap_;
  const auto first = top.begin() + static_cast<std::ptrdiff_t>(
                                       std::min(top.size(), static_cast<size_t>(std::max(0, n))));
  std::partial_sort(top.begin(), first, top.end(), [](const Hitter& a, const Hitter& b) {
    return a.count != b.count ? a.count > b.count : a.id < b.id;
  });
  top.erase(first, top.end());
  return top;
}

}  // namespace fulcrum
