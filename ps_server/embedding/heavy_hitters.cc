#include "ps_server/embedding/heavy_hitters.h"

#include <algorithm>
#include <utility>

namespace fulcrum {

HeavyHitters::HeavyHitters(int capacity) : capacity_(static_cast<size_t>(std::max(1, capacity))) {
  heap_.reserve(capacity_);
}

void HeavyHitters::Swap(size_t a, size_t b) {
  std::swap(heap_[a], heap_[b]);
  position_[heap_[a].id] = a;
  position_[heap_[b].id] = b;
}

void HeavyHitters::SiftDown(size_t i) {
  for (;;) {
    size_t least = i;
    for (size_t child : {2 * i + 1, 2 * i + 2}) {
      if (child < heap_.size() && heap_[child].count < heap_[least].count) least = child;
    }
    if (least == i) return;
    Swap(i, least);
    i = least;
  }
}

void HeavyHitters::Add(int64_t id, int64_t weight) {
  if (auto held = position_.find(id); held != position_.end()) {
    heap_[held->second].count += weight;  // larger: it can only go down a min-heap
    SiftDown(held->second);
    return;
  }
  if (heap_.size() < capacity_) {
    heap_.push_back({id, weight, 0});
    position_[id] = heap_.size() - 1;
    for (size_t i = heap_.size() - 1; i > 0 && heap_[(i - 1) / 2].count > heap_[i].count;) {
      Swap(i, (i - 1) / 2);
      i = (i - 1) / 2;
    }
    return;
  }
  // Full: the least counted gives its place to `id`, which may have been
  // pushed as often before it was dropped.
  Hitter& least = heap_[0];
  position_.erase(least.id);
  least = {id, least.count + weight, least.count};
  position_[id] = 0;
  SiftDown(0);
}

std::vector<HeavyHitters::Hitter> HeavyHitters::Top(int n) const {
  std::vector<Hitter> top = heap_;
  std::sort(top.begin(), top.end(), [](const Hitter& a, const Hitter& b) {
    return a.count != b.count ? a.count > b.count : a.id < b.id;
  });
  top.resize(std::min(top.size(), static_cast<size_t>(std::max(0, n))));
  return top;
}

}  // namespace fulcrum
