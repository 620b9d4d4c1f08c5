#include "ps_server/embedding/row_store.h"

#include <algorithm>
#include <limits>

#include "common/logging.h"

namespace fulcrum {

RowStore::RowStore(const Options& options)
    : options_(options),
      row_floats_(options.width * (1 + options.num_slots)),
      max_rows_(options.max_rows > 0 ? options.max_rows : std::numeric_limits<int32_t>::max()),
      max_candidates_(std::max<int64_t>(options.max_rows, int64_t{1} << 16)) {
  CHECK(options.width >= 1 && options.num_slots >= 0 && options.max_rows >= 0 &&
        options.admit_after >= 1);
}

void RowStore::Unlink(int32_t row) {
  const int32_t before = prev_[row], after = next_[row];
  (before == kNone ? head_ : next_[before]) = after;
  (after == kNone ? tail_ : prev_[after]) = before;
}

void RowStore::PushFront(int32_t row) {
  prev_[row] = kNone;
  next_[row] = head_;
  (head_ == kNone ? tail_ : prev_[head_]) = row;
  head_ = row;
}

int32_t RowStore::Allocate(int64_t id) {
  int32_t row;
  if (size() <= max_rows_) {
    row = static_cast<int32_t>(ids_.size());
    if (row % kSlabRows == 0) {
      // Uninitialised: every row is filled as it is stored.
      slabs_.push_back(std::unique_ptr<float[]>(new float[kSlabRows * row_floats_]));
    }
    ids_.push_back(id);
    prev_.push_back(kNone);
    next_.push_back(kNone);
  } else {
    row = tail_;  // the least recently used makes room
    Unlink(row);
    index_.erase(ids_[row]);
    ids_[row] = id;
    ++evictions_;
  }
  PushFront(row);
  return row;
}

float* RowStore::Use(int32_t row) {
  // Without a bound nothing is evicted, and the order of use is only the
  // order of creation: two random accesses a touch saved.
  if (options_.max_rows > 0 && head_ != row) {
    Unlink(row);
    PushFront(row);
  }
  return RowData(row);
}

float* RowStore::Find(int64_t id) {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : Use(it->second);
}

const float* RowStore::Peek(int64_t id) const {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : RowData(it->second);
}

float* RowStore::Touch(int64_t id,
                       absl::FunctionRef<void(int64_t id, absl::Span<float> row)> init) {
  if (options_.admit_after > 1) {
    if (float* row = Find(id)) return row;
    auto [it, added] = candidates_.try_emplace(id, 0);
    if (++it->second < static_cast<uint32_t>(options_.admit_after)) {
      if (added && static_cast<int64_t>(candidates_.size()) > max_candidates_) {
        candidates_.clear();  // the decay: frequent ids soon climb back
        candidates_.emplace(id, 1);
      }
      return nullptr;
    }
    candidates_.erase(it);
    ++admissions_;
  }
  // One probe of the index for a stored id and a new one alike.
  auto [it, added] = index_.try_emplace(id, kNone);
  if (!added) return Use(it->second);
  // An eviction erases another id from the index, which leaves `it` valid.
  it->second = Allocate(id);
  float* row = RowData(it->second);
  init(id, absl::MakeSpan(row, row_floats_));
  return row;
}

void RowStore::TouchAll(absl::Span<const int64_t> ids,
                        absl::FunctionRef<void(int64_t id, absl::Span<float> row)> init,
                        absl::Span<float*> rows) {
  CHECK(rows.size() == ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + kLookAhead < ids.size()) index_.prefetch(ids[i + kLookAhead]);
    rows[i] = Touch(ids[i], init);
  }
}

void RowStore::FindAll(absl::Span<const int64_t> ids, bool peek, absl::Span<const float*> rows) {
  CHECK(rows.size() == ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + kLookAhead < ids.size()) index_.prefetch(ids[i + kLookAhead]);
    rows[i] = peek ? Peek(ids[i]) : Find(ids[i]);
  }
}

void RowStore::Put(int64_t id, absl::Span<const float> row) {
  CHECK(static_cast<int64_t>(row.size()) == row_floats_);
  auto [it, added] = index_.try_emplace(id, kNone);
  if (added) it->second = Allocate(id);
  float* data = Use(it->second);
  std::copy(row.begin(), row.end(), data);
  candidates_.erase(id);
}

void RowStore::PutCandidate(int64_t id, uint32_t touches) {
  if (index_.contains(id) || touches == 0) return;
  candidates_[id] = touches;
}

void RowStore::ForEachRow(
    absl::FunctionRef<void(int64_t id, absl::Span<const float> row)> visit) const {
  for (int32_t row = tail_; row != kNone; row = prev_[row]) {
    visit(ids_[row], absl::MakeConstSpan(RowData(row), row_floats_));
  }
}

void RowStore::ForEachRowAt(
    int64_t start, int64_t count,
    absl::FunctionRef<void(int64_t id, absl::Span<const float> row)> visit) const {
  const int64_t end = std::min(size(), start + std::max<int64_t>(count, 0));
  for (int64_t row = std::max<int64_t>(start, 0); row < end; ++row) {
    visit(ids_[row], absl::MakeConstSpan(RowData(static_cast<int32_t>(row)), row_floats_));
  }
}

void RowStore::ForEachCandidate(absl::FunctionRef<void(int64_t id, uint32_t touches)> visit) const {
  for (const auto& [id, touches] : candidates_) visit(id, touches);
}

int64_t RowStore::MemoryBytes() const {
  // A flat hash map holds a control byte and a slot per bucket.
  const auto table = [](const auto& map, int64_t slot_bytes) {
    return static_cast<int64_t>(map.bucket_count()) * (slot_bytes + 1);
  };
  return static_cast<int64_t>(slabs_.size()) * kSlabRows * row_floats_ *
             static_cast<int64_t>(sizeof(float)) +
         table(index_, sizeof(std::pair<int64_t, int32_t>)) +
         static_cast<int64_t>(ids_.capacity() * sizeof(int64_t) +
                              (prev_.capacity() + next_.capacity()) * sizeof(int32_t)) +
         table(candidates_, sizeof(std::pair<int64_t, uint32_t>));
}

}  // namespace fulcrum
