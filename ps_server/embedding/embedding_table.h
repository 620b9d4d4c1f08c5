// One embedding table's rows on one server (EmbeddingTableSpec): sparse
// pulls of rows by id, sparse pushes of row gradients applied by the
// table's optimizer to the rows touched only, within the bounds of its
// RowStore. Checks what a peer sends: a bad request changes nothing.
// Thread-safe.
#ifndef FULCRUM_PS_SERVER_EMBEDDING_EMBEDDING_TABLE_H_
#define FULCRUM_PS_SERVER_EMBEDDING_EMBEDDING_TABLE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "proto/tensor.pb.h"
#include "ps_server/embedding/row_store.h"

namespace fulcrum {

class EmbeddingTable {
 public:
  // Most ids one request may name: past it, RESOURCE_EXHAUSTED.
  static constexpr int64_t kMaxIdsPerRequest = int64_t{1} << 20;

  // INVALID_ARGUMENT when `spec` is not a valid table
  // (ValidateEmbeddingTableSpec).
  static absl::StatusOr<std::unique_ptr<EmbeddingTable>> Create(const EmbeddingTableSpec& spec);

  // The canonical spec (the optimizer's defaults filled in).
  const EmbeddingTableSpec& spec() const { return spec_; }

  // The rows of `ids` into `out` (ids.size() x width floats): stored rows
  // as they are, the others their initial rows (nothing is stored).
  absl::Status Pull(absl::Span<const int64_t> ids, absl::Span<float> out);

  // Applies `grads` (ids.size() x width floats, each id's row gradient:
  // the mean of `averaged` >= 1 gradients) to the rows of `ids` (distinct),
  // creating rows as admitted; an id not admitted yet has its gradient
  // dropped. Each push is one step of the table (lazy Adam's t).
  // INVALID_ARGUMENT for a size that does not fit, a repeated id or a
  // gradient that is not finite, naming it; RESOURCE_EXHAUSTED past
  // kMaxIdsPerRequest. Then nothing changes.
  absl::Status Push(absl::Span<const int64_t> ids, absl::Span<const float> grads, int averaged);

  struct Stats {
    int64_t rows = 0;
    int64_t candidates = 0;
    int64_t evictions = 0;
    int64_t admissions = 0;
    int64_t bytes = 0;
    int64_t step = 0;  // pushes applied
  };
  Stats stats() const;

 private:
  explicit EmbeddingTable(const EmbeddingTableSpec& spec);
  absl::Status CheckIds(absl::Span<const int64_t> ids, size_t floats, const char* what) const;

  const EmbeddingTableSpec spec_;
  std::vector<float> initial_slots_;  // a new row's slots, one after another
  mutable absl::Mutex mu_;
  RowStore store_ ABSL_GUARDED_BY(mu_);
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_EMBEDDING_EMBEDDING_TABLE_H_
