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
  // A min-heap by count of the ids held; position_ maps an id to its
  // place in it. SiftDown moves the hitter at i to its place below.
  void SiftDown(size_t i);

  const size_t capacity_;
  std::vector<Hitter> heap_;
  absl::flat_hash_map<int64_t, size_t> position_;
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_EMBEDDING_HEAVY_HITTERS_H_
