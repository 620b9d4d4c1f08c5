// The rows of one embedding table that one server holds: int64 ids to rows
// of `width` floats, each followed by the optimizer's per-row slots (each
// `width` floats too). Compact: an open-addressing index (Abseil's flat
// hash map, id -> row number) over rows kept in slabs of contiguous floats,
// never a heap node per id; a row costs its floats and about 40 bytes.
//
// Bounded: with `max_rows`, storing a row past it evicts the least recently
// used one (reads and writes both count as use). Optional admission: with
// `admit_after` = F > 1, an id is stored only at its F-th touch; before
// that Touch returns nothing (the caller reads the initial row and drops
// the gradient) and the id costs a counter. The counters are bounded by
// `max_rows` too (at least 2^16): when they reach it they are all forgotten,
// a decay that frequent ids soon climb back from.
//
// Not thread-safe: the table that owns it locks.
#ifndef FULCRUM_PS_SERVER_EMBEDDING_ROW_STORE_H_
#define FULCRUM_PS_SERVER_EMBEDDING_ROW_STORE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/types/span.h"

namespace fulcrum {

class RowStore {
 public:
  struct Options {
    int64_t width = 1;     // floats per row
    int num_slots = 0;     // optimizer slots per row
    int64_t max_rows = 0;  // 0: no bound (at most 2^31 - 1 rows either way)
    int admit_after = 1;   // touches before an id is stored
  };

  // What a stored row takes besides its floats, at most: its index entry
  // (at the map's lowest load), its id and its links in the order of use
  // (vectors at double their size).
  static constexpr int64_t kMaxOverheadBytesPerRow = 64;

  // `options` must hold width >= 1, num_slots >= 0, max_rows >= 0 and
  // admit_after >= 1 (the table checks what a peer sends).
  explicit RowStore(const Options& options);

  // Floats of a row: its values, then each slot.
  int64_t row_floats() const { return row_floats_; }

  // The row of `id` if stored, now the most recently used; else null.
  float* Find(int64_t id);
  // The row of `id` if stored, its use not counted; else null.
  const float* Peek(int64_t id) const;

  // The row of `id`, the most recently used: stored now, filled by
  // `init`, if it was not and this touch admits it; null while it is
  // still a candidate.
  float* Touch(int64_t id, absl::FunctionRef<void(int64_t id, absl::Span<float> row)> init);
  // Touch of each of `ids` in turn, its row (or null) into `rows` (as many):
  // the index's lookups are started some ids ahead, so that a large
  // request's cache misses overlap instead of each waiting in turn.
  void TouchAll(absl::Span<const int64_t> ids,
                absl::FunctionRef<void(int64_t id, absl::Span<float> row)> init,
                absl::Span<float*> rows);
  // Find, or with `peek` Peek, of each of `ids`, fetched ahead as TouchAll.
  void FindAll(absl::Span<const int64_t> ids, bool peek, absl::Span<const float*> rows);

  // Stores `id`'s row as given (restoring a checkpoint), evicting as Touch
  // does; `row` holds row_floats() floats.
  void Put(int64_t id, absl::Span<const float> row);

  // A candidate's touches so far (restoring a checkpoint).
  void PutCandidate(int64_t id, uint32_t touches);

  // Every stored row, least recently used first, so that putting them
  // back in this order restores the order of use (without max_rows, in
  // the order they were stored: nothing is evicted, so use is not kept).
  void ForEachRow(absl::FunctionRef<void(int64_t id, absl::Span<const float> row)> visit) const;
  // The stored rows at positions [start, start + count) of the store's
  // own order (which only evictions change, each in place), for reading a
  // table page by page; the order of use is kept.
  void ForEachRowAt(int64_t start, int64_t count,
                    absl::FunctionRef<void(int64_t id, absl::Span<const float> row)> visit) const;
  // Every candidate and its touches.
  void ForEachCandidate(absl::FunctionRef<void(int64_t id, uint32_t touches)> visit) const;

  int64_t size() const { return static_cast<int64_t>(index_.size()); }
  int64_t candidates() const { return static_cast<int64_t>(candidates_.size()); }
  int64_t evictions() const { return evictions_; }
  int64_t admissions() const { return admissions_; }
  // Bytes it holds: the slabs, the index, the order of use, the counters.
  int64_t MemoryBytes() const;

 private:
  static constexpr int32_t kNone = -1;
  static constexpr int64_t kSlabRows = 1024;
  // How many ids ahead TouchAll and FindAll start a lookup.
  static constexpr size_t kLookAhead = 16;

  float* RowData(int32_t row) {
    return slabs_[row / kSlabRows].get() + (row % kSlabRows) * row_floats_;
  }
  const float* RowData(int32_t row) const {
    return slabs_[row / kSlabRows].get() + (row % kSlabRows) * row_floats_;
  }
  // A row for `id`, the most recently used: a new one, or the least
  // recently used one's, evicted (its id erased from the index). The
  // caller puts `id` in the index: it is in already, counted in size().
  int32_t Allocate(int64_t id);
  // `row`, now the most recently used.
  float* Use(int32_t row);
  void Unlink(int32_t row);
  void PushFront(int32_t row);  // the most recently used

  const Options options_;
  const int64_t row_floats_;
  const int64_t max_rows_;        // the bound, or 2^31 - 1
  const int64_t max_candidates_;  // counters before they are forgotten
  absl::flat_hash_map<int64_t, int32_t> index_;
  std::vector<std::unique_ptr<float[]>> slabs_;
  std::vector<int64_t> ids_;  // by row
  // The order of use, a list through the rows: most recent at head_.
  std::vector<int32_t> prev_, next_;
  int32_t head_ = kNone, tail_ = kNone;
  absl::flat_hash_map<int64_t, uint32_t> candidates_;
  int64_t evictions_ = 0, admissions_ = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_EMBEDDING_ROW_STORE_H_
