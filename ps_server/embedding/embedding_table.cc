#include "ps_server/embedding/embedding_table.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/embedding.h"
#include "common/optimizer/optimizer.h"
#include "common/tensor.h"

namespace fulcrum {
namespace {

// The spec with the optimizer's defaults filled in.
EmbeddingTableSpec Canonical(const EmbeddingTableSpec& spec) {
  VariableSpec variable;
  *variable.mutable_optimizer() = spec.optimizer();
  EmbeddingTableSpec out = spec;
  *out.mutable_optimizer() = CanonicalSpec(variable).optimizer();
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EmbeddingTable>> EmbeddingTable::Create(
    const EmbeddingTableSpec& spec) {
  if (absl::Status s = ValidateEmbeddingTableSpec(spec); !s.ok()) return s;
  return std::unique_ptr<EmbeddingTable>(new EmbeddingTable(Canonical(spec)));
}

EmbeddingTable::EmbeddingTable(const EmbeddingTableSpec& spec)
    : spec_(spec),
      initializer_(spec),
      store_({spec.width(), NumSlots(spec.optimizer()), spec.max_rows(),
              std::max(1, spec.admit_after())}) {
  // The slots as MakeSlots starts them (Adagrad's and FTRL's accumulators
  // at initial_accumulator_value), for every new row.
  for (const std::vector<float>& slot : MakeSlots(spec.optimizer(), spec.width())) {
    initial_slots_.insert(initial_slots_.end(), slot.begin(), slot.end());
  }
}

absl::Status EmbeddingTable::CheckIds(absl::Span<const int64_t> ids, size_t floats,
                                      const char* what, int64_t max_ids) const {
  if (static_cast<int64_t>(ids.size()) > max_ids) {
    return absl::ResourceExhaustedError(absl::StrCat("embedding table '", spec_.name(),
                                                     "': ", ids.size(), " ids in one ", what,
                                                     ", past the limit of ", max_ids));
  }
  if (floats != ids.size() * static_cast<size_t>(spec_.width())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "embedding table '", spec_.name(), "': a ", what, " of ", ids.size(), " ids with ", floats,
        " floats, not ", ids.size(), " rows of width ", spec_.width()));
  }
  return absl::OkStatus();
}

absl::Status EmbeddingTable::Pull(absl::Span<const int64_t> ids, absl::Span<float> out) {
  if (absl::Status s = CheckIds(ids, out.size(), "pull", kMaxIdsPerRequest); !s.ok()) return s;
  const int64_t width = spec_.width();
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < ids.size(); ++i) {
    absl::Span<float> to = out.subspan(i * width, width);
    if (const float* row = store_.Find(ids[i])) {
      std::copy(row, row + width, to.begin());
    } else {
      initializer_.Row(ids[i], to);
    }
  }
  return absl::OkStatus();
}

void EmbeddingTable::Read(int64_t start, int64_t max_rows, bool slots,
                          ReadRowsResponse* out) const {
  const int64_t width = spec_.width();
  const int num_slots = NumSlots(spec_.optimizer());
  out->set_width(width);
  out->set_num_slots(slots ? num_slots : 0);
  absl::MutexLock lock(&mu_);
  out->set_rows(store_.size());
  start = std::clamp<int64_t>(start, 0, store_.size());
  const int64_t count = std::min(std::max<int64_t>(max_rows, 0), store_.size() - start);
  out->mutable_ids()->Reserve(count);
  out->mutable_values()->Reserve(count * width);
  if (slots) out->mutable_slots()->Reserve(count * width * num_slots);
  store_.ForEachRowAt(start, count, [&](int64_t id, absl::Span<const float> row) {
    out->add_ids(id);
    out->mutable_values()->Add(row.begin(), row.begin() + width);
    if (slots) out->mutable_slots()->Add(row.begin() + width, row.end());
  });
  out->set_next(start + count);
}

absl::Status EmbeddingTable::CheckPush(absl::Span<const int64_t> ids,
                                       absl::Span<const float> grads) const {
  if (absl::Status s = CheckIds(ids, grads.size(), "push", kMaxIdsPerPush); !s.ok()) return s;
  const int64_t width = spec_.width();
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!seen.insert(ids[i]).second) {
      return absl::InvalidArgumentError(absl::StrCat("embedding table '", spec_.name(), "': id ",
                                                     ids[i],
                                                     " twice in one push (sum its gradients)"));
    }
    const auto row = grads.subspan(i * width, width);
    if (!std::all_of(row.begin(), row.end(), [](float g) { return std::isfinite(g); })) {
      return absl::InvalidArgumentError(absl::StrCat(
          "embedding table '", spec_.name(), "': the gradient of id ", ids[i], " is not finite"));
    }
  }
  return absl::OkStatus();
}

ShardPushResult EmbeddingTable::ResultLocked(ShardPushResult::Outcome outcome,
                                             int64_t staleness) const {
  ShardPushResult result;
  result.set_variable(spec_.name());
  result.set_outcome(outcome);
  result.set_version(step_);
  result.set_staleness(staleness);
  return result;
}

void EmbeddingTable::ApplyLocked(absl::Span<const int64_t> ids, absl::Span<const float> grads,
                                 int averaged) {
  const int64_t width = spec_.width();
  ++step_;
  const auto init = [this](int64_t id, absl::Span<float> row) {
    initializer_.Row(id, row.subspan(0, spec_.width()));
    std::copy(initial_slots_.begin(), initial_slots_.end(), row.begin() + spec_.width());
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    float* row = store_.Touch(ids[i], init);
    if (row == nullptr) continue;  // not admitted yet
    ApplyGradientToRow(spec_.optimizer(), step_, averaged, grads.subspan(i * width, width),
                       absl::MakeSpan(row, store_.row_floats()));
  }
  version_changed_.SignalAll();
}

absl::StatusOr<ShardPushResult> EmbeddingTable::Push(int worker, uint64_t push_id,
                                                     absl::Span<const int64_t> ids,
                                                     absl::Span<const float> grads) {
  if (absl::Status s = CheckPush(ids, grads); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (last_push_ids_.Seen(worker, push_id)) return ResultLocked(ShardPushResult::DUPLICATE, 0);
  ApplyLocked(ids, grads, 1);
  return ResultLocked(ShardPushResult::APPLIED, 0);
}

absl::StatusOr<ShardPushResult> EmbeddingTable::Accumulate(int worker, uint64_t push_id,
                                                           int64_t computed_at,
                                                           absl::Span<const int64_t> ids,
                                                           absl::Span<const float> grads,
                                                           int required) {
  if (absl::Status s = CheckPush(ids, grads); !s.ok()) return s;
  const int64_t width = spec_.width();
  absl::MutexLock lock(&mu_);
  if (computed_at > step_) {
    return absl::InvalidArgumentError(absl::StrCat("embedding table '", spec_.name(),
                                                   "': gradients computed at version ", computed_at,
                                                   ", but the table is at ", step_));
  }
  if (computed_at < step_) return ResultLocked(ShardPushResult::STALE, step_ - computed_at);
  if (std::find(pending_from_.begin(), pending_from_.end(), worker) != pending_from_.end() ||
      last_push_ids_.Seen(worker, push_id)) {
    return ResultLocked(ShardPushResult::DUPLICATE, 0);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    auto [it, added] = pending_index_.try_emplace(ids[i], pending_ids_.size());
    if (added) {
      pending_ids_.push_back(ids[i]);
      pending_sums_.resize(pending_sums_.size() + width, 0.0f);
      pending_counts_.push_back(0);
    }
    float* sum = pending_sums_.data() + static_cast<int64_t>(it->second) * width;
    const float* g = grads.data() + i * width;
    for (int64_t j = 0; j < width; ++j) sum[j] += g[j];
    ++pending_counts_[it->second];
  }
  pending_from_.push_back(worker);
  if (static_cast<int>(pending_from_.size()) < required) {
    return ResultLocked(ShardPushResult::ACCUMULATED, 0);
  }
  ApplyAccumulatedLocked();
  return ResultLocked(ShardPushResult::APPLIED, 0);
}

void EmbeddingTable::ApplyAccumulatedLocked() {
  const int64_t width = spec_.width();
  for (size_t i = 0; i < pending_ids_.size(); ++i) {
    const float scale = 1.0f / static_cast<float>(pending_counts_[i]);
    for (int64_t j = 0; j < width; ++j) pending_sums_[i * width + j] *= scale;
  }
  ApplyLocked(pending_ids_, pending_sums_, static_cast<int>(pending_from_.size()));
  pending_index_.clear();
  pending_ids_.clear();
  pending_sums_.clear();
  pending_counts_.clear();
  pending_from_.clear();
}

bool EmbeddingTable::CompleteIfReady(int required) {
  absl::MutexLock lock(&mu_);
  if (pending_from_.empty() || static_cast<int>(pending_from_.size()) < required) return false;
  ApplyAccumulatedLocked();
  return true;
}

int64_t EmbeddingTable::version() const {
  absl::MutexLock lock(&mu_);
  return step_;
}

absl::Status EmbeddingTable::AwaitVersion(int64_t min_version, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  while (step_ < min_version && !cancelled_) {
    if (version_changed_.WaitWithDeadline(&mu_, deadline)) {
      if (step_ >= min_version || cancelled_) break;
      return absl::DeadlineExceededError(absl::StrCat("embedding table '", spec_.name(),
                                                      "': waited for version ", min_version,
                                                      "; it is at ", step_));
    }
  }
  if (cancelled_) return absl::UnavailableError("the parameter server is shutting down");
  return absl::OkStatus();
}

void EmbeddingTable::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  version_changed_.SignalAll();
}

absl::Status EmbeddingTable::WriteCheckpoint(CheckpointFileWriter& writer) const {
  // Rows go in records of about 4 MiB.
  const int64_t row_floats = spec_.width() * (1 + NumSlots(spec_.optimizer()));
  const size_t per_record = static_cast<size_t>(
      std::max<int64_t>(1, (4 << 20) / ((row_floats + 2) * static_cast<int64_t>(sizeof(float)))));
  absl::MutexLock lock(&mu_);
  TableCheckpoint meta;
  *meta.mutable_spec() = spec_;
  meta.set_version(step_);
  meta.set_rows(store_.size());
  meta.set_candidates(store_.candidates());
  if (absl::Status s = writer.AddTable(meta); !s.ok()) return s;
  absl::Status status;
  std::vector<int64_t> ids;
  std::vector<float> rows;
  std::vector<uint32_t> touches;
  const auto flush = [&](bool candidates) {
    if (ids.empty() || !status.ok()) return;
    status = candidates ? writer.AddTableCandidates(ids, touches) : writer.AddTableRows(ids, rows);
    ids.clear();
    rows.clear();
    touches.clear();
  };
  store_.ForEachRow([&](int64_t id, absl::Span<const float> row) {
    ids.push_back(id);
    rows.insert(rows.end(), row.begin(), row.end());
    if (ids.size() == per_record) flush(false);
  });
  flush(false);
  store_.ForEachCandidate([&](int64_t id, uint32_t count) {
    ids.push_back(id);
    touches.push_back(count);
    if (ids.size() == per_record) flush(true);
  });
  flush(true);
  return status;
}

absl::Status EmbeddingTable::Restore(const CheckpointFile& file, const CheckpointTable& part,
                                     absl::FunctionRef<bool(int64_t id)> keep) {
  const EmbeddingTableSpec& saved = part.meta.spec();
  if (saved.width() != spec_.width() || saved.optimizer().kind() != spec_.optimizer().kind()) {
    return absl::FailedPreconditionError(
        absl::StrCat("embedding table '", spec_.name(), "': the checkpoint holds it with width ",
                     saved.width(), " and ", OptimizerSpec::Kind_Name(saved.optimizer().kind()),
                     "; it is now created with width ", spec_.width(), " and ",
                     OptimizerSpec::Kind_Name(spec_.optimizer().kind())));
  }
  absl::MutexLock lock(&mu_);
  step_ = std::max(step_, part.meta.version());
  return file.ReadTable(
      part,
      [&](int64_t id, absl::Span<const float> row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (keep(id)) store_.Put(id, row);
      },
      [&](int64_t id, uint32_t touches) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (keep(id)) store_.PutCandidate(id, touches);
      });
}

int64_t EmbeddingTable::BytesPerRow() const {
  return spec_.width() * (1 + NumSlots(spec_.optimizer())) * static_cast<int64_t>(sizeof(float)) +
         RowStore::kMaxOverheadBytesPerRow;
}

EmbeddingTable::Stats EmbeddingTable::stats() const {
  absl::MutexLock lock(&mu_);
  return {store_.size(),       store_.candidates(),  store_.evictions(),
          store_.admissions(), store_.MemoryBytes(), step_};
}

}  // namespace fulcrum
