// The most-pushed ids of a table, in memory independent of how many ids
// there are: the Space-Saving sketch (Metwally, Agrawal and El Abbadi,
// 2005). It counts at most `capacity` ids; an id it does not hold, when
// full, takes the place of the least counted, starting at that count plus
// one. Any id pushed more than total/capacity times is held, and each
// count is over the id's true count by at most the count it started from
// (its error). Weighted, so that a sample of a stream can stand for it (an
// id counted with weight w stands for w ids). O(log capacity) per id.
// Thread-compatible.
#ifndef FULCRUM_PS_SERVER_EMBEDDING_HEAVY_HITTERS_H_
#define FULCRUM_PS_SERVER_EMBEDDING_HEAVY_HITTERS_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace fulcrum {

class HeavyHitters {
 public:
  explicit HeavyHitters(int capacity);

  // Counts `id` `weight` (>= 1) times.
  void Add(int64_t id, int64_t weight = 1);

  struct Hitter {
    int64_t id;
    int64_t count;  // an estimate, at most `error` over the true count
    int64_t error;
  };
  // The `n` most counted, most first (ties by id).
  std::vector<Hitter> Top(int n) const;

 private:
  // A min-heap by count of the held ids' slots; each slot's id, error and
  // place in the heap stay put while the heap moves, so that a move costs
  // array writes and the id's map entry is written only when it comes or
  // goes. SiftDown moves the entry at i to its place below.
  struct Entry {
    int64_t count;
    uint32_t slot;
  };
  struct Slot {
    int64_t id;
    int64_t error;
    uint32_t place;  // in heap_
  };
  void SiftDown(size_t i);
  void Put(size_t i, const Entry& entry) {
    heap_[i] = entry;
    slots_[entry.slot].place = static_cast<uint32_t>(i);
  }

  const size_t capacity_;
  std::vector<Entry> heap_;
  std::vector<Slot> slots_;
  absl::flat_hash_map<int64_t, uint32_t> slot_of_;
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_EMBEDDING_HEAVY_HITTERS_H_
