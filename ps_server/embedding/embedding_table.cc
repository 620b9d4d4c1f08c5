#include "ps_server/embedding/embedding_table.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/embedding.h"
#include "common/logging.h"
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
    const EmbeddingTableSpec& spec, int partition) {
  if (absl::Status s = ValidateEmbeddingTableSpec(spec); !s.ok()) return s;
  return std::unique_ptr<EmbeddingTable>(new EmbeddingTable(Canonical(spec), partition));
}

EmbeddingTable::EmbeddingTable(const EmbeddingTableSpec& spec, int partition)
    : ReplicatedUnit(TableKey(spec.name(), partition),
                     absl::StrCat("embedding table '", spec.name(), "' range ", partition),
                     /*version=*/0),
      spec_(spec),
      partition_(partition),
      initializer_(spec),
      store_(std::make_unique<RowStore>(StoreOptions())) {
  // The slots as MakeSlots starts them (Adagrad's and FTRL's accumulators
  // at initial_accumulator_value), for every new row.
  for (const std::vector<float>& slot : MakeSlots(spec.optimizer(), spec.width())) {
    initial_slots_.insert(initial_slots_.end(), slot.begin(), slot.end());
  }
}

RowStore::Options EmbeddingTable::StoreOptions() const {
  return {spec_.width(), NumSlots(spec_.optimizer()), spec_.max_rows(),
          std::max(1, spec_.admit_after())};
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
  if (absl::Status s = CheckPrimaryLocked(); !s.ok()) return s;
  // While copies take this one's updates, a pull is no use of its rows:
  // the copies never see it.
  const bool counts_as_use = !ForwardingLocked();
  std::vector<const float*> rows(ids.size());
  store_->FindAll(ids, /*peek=*/!counts_as_use, absl::MakeSpan(rows));
  for (size_t i = 0; i < ids.size(); ++i) {
    absl::Span<float> to = out.subspan(i * width, width);
    if (rows[i] != nullptr) {
      std::copy(rows[i], rows[i] + width, to.begin());
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
  out->set_rows(store_->size());
  start = std::clamp<int64_t>(start, 0, store_->size());
  const int64_t count = std::min(std::max<int64_t>(max_rows, 0), store_->size() - start);
  out->mutable_ids()->Reserve(count);
  out->mutable_values()->Reserve(count * width);
  if (slots) out->mutable_slots()->Reserve(count * width * num_slots);
  store_->ForEachRowAt(start, count, [&](int64_t id, absl::Span<const float> row) {
    out->add_ids(id);
    out->mutable_values()->Add(row.begin(), row.begin() + width);
    if (slots) out->mutable_slots()->Add(row.begin() + width, row.end());
  });
  out->set_next(start + count);
}

absl::StatusOr<EmbeddingTable::CheckedRows> EmbeddingTable::CheckPush(
    absl::Span<const int64_t> ids, absl::Span<const float> grads) const {
  if (absl::Status s = CheckIds(ids, grads.size(), "push", kMaxIdsPerPush); !s.ok()) return s;
  const int64_t width = spec_.width();
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(ids.size());
  for (int64_t id : ids) {
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(absl::StrCat("embedding table '", spec_.name(), "': id ",
                                                     id, " twice in one push (sum its gradients)"));
    }
  }
  if (const int64_t bad = FirstNonFinite(grads); bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat("embedding table '", spec_.name(),
                                                   "': the gradient of id ", ids[bad / width],
                                                   " is not finite"));
  }
  return CheckedRows(this, ids, grads);
}

ShardPushResult EmbeddingTable::ResultLocked(ShardPushResult::Outcome outcome,
                                             int64_t staleness) const {
  ShardPushResult result;
  result.set_variable(spec_.name());
  result.set_outcome(outcome);
  result.set_version(version_);
  result.set_staleness(staleness);
  return result;
}

void EmbeddingTable::ApplyLocked(absl::Span<const int64_t> ids, absl::Span<const float> grads,
                                 int averaged, absl::Span<const Taken> pushes) {
  const int64_t width = spec_.width();
  ++version_;
  const auto init = [this](int64_t id, absl::Span<float> row) {
    initializer_.Row(id, row.subspan(0, spec_.width()));
    std::copy(initial_slots_.begin(), initial_slots_.end(), row.begin() + spec_.width());
  };
  // Every row first (null: not admitted yet), then the rule over them all;
  // in parts of at most max_rows ids, so that no row of a part is evicted
  // (and taken by another id) before its gradient is applied.
  const size_t part = spec_.max_rows() > 0 ? static_cast<size_t>(spec_.max_rows()) : ids.size();
  std::vector<float*> rows(std::min(part, ids.size()));
  for (size_t begin = 0; begin < ids.size(); begin += part) {
    const size_t n = std::min(part, ids.size() - begin);
    const absl::Span<float*> touched = absl::MakeSpan(rows.data(), n);
    store_->TouchAll(ids.subspan(begin, n), init, touched);
    ApplyGradientToRows(spec_.optimizer(), version_, averaged, width,
                        grads.subspan(begin * width, n * width), touched);
  }
  MadeVersionLocked([&, version = version_] {
    ShardUpdate update;
    update.set_table(spec_.name());
    update.set_partition(partition_);
    update.set_version(version);
    update.set_averaged(averaged);
    update.set_ids(ids.data(), ids.size() * sizeof(int64_t));
    update.set_gradient(grads.data(), grads.size() * sizeof(float));
    AddPushes(pushes, &update);
    return update;
  });
}

absl::StatusOr<ShardPushResult> EmbeddingTable::Push(int worker, uint64_t push_id,
                                                     const CheckedRows& rows) {
  CHECK(rows.table_ == this);
  const absl::Span<const int64_t> ids = rows.ids();
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckPrimaryLocked(); !s.ok()) return s;
  if (last_push_ids_.Seen(worker, push_id)) return ResultLocked(ShardPushResult::DUPLICATE, 0);
  CountPushedLocked(ids);
  const Taken taken{worker, push_id};
  ApplyLocked(ids, rows.grads(), 1, absl::MakeConstSpan(&taken, 1));
  return ResultLocked(ShardPushResult::APPLIED, 0);
}

absl::StatusOr<ShardPushResult> EmbeddingTable::Accumulate(int worker, uint64_t push_id,
                                                           int64_t computed_at,
                                                           const CheckedRows& rows, int required) {
  CHECK(rows.table_ == this);
  const absl::Span<const int64_t> ids = rows.ids();
  const absl::Span<const float> grads = rows.grads();
  const int64_t width = spec_.width();
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckPrimaryLocked(); !s.ok()) return s;
  if (computed_at > version_) {
    return absl::InvalidArgumentError(absl::StrCat("embedding table '", spec_.name(),
                                                   "': gradients computed at version ", computed_at,
                                                   ", but the table is at ", version_));
  }
  if (computed_at < version_) return ResultLocked(ShardPushResult::STALE, version_ - computed_at);
  // A push is remembered once its step is applied (as Shard::Accumulate
  // says why): a copy's snapshot lacks the step being accumulated.
  if (std::any_of(pending_from_.begin(), pending_from_.end(),
                  [&](const Taken& t) { return t.worker == worker; }) ||
      last_push_ids_.IsLast(worker, push_id)) {
    return ResultLocked(ShardPushResult::DUPLICATE, 0);
  }
  CountPushedLocked(ids);
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
  pending_from_.push_back({worker, push_id});
  if (static_cast<int>(pending_from_.size()) < required) {
    return ResultLocked(ShardPushResult::ACCUMULATED, 0);
  }
  ApplyAccumulatedLocked();
  return ResultLocked(ShardPushResult::APPLIED, 0);
}

void EmbeddingTable::CountPushedLocked(absl::Span<const int64_t> ids) {
  if (ids.empty()) return;
  // Every stride-th id from a start that moves on with each push, so that
  // no place in a push goes uncounted: each counted id stands for the
  // stride it was picked from.
  const size_t stride = std::max<size_t>((ids.size() + kHotSampled - 1) / kHotSampled,
                                         std::min(kHotMaxStride, 1 + hot_seen_ / kHotExact));
  hot_seen_ += ids.size();
  for (size_t i = hot_offset_++ % stride; i < ids.size(); i += stride) {
    hot_.Add(ids[i], static_cast<int64_t>(stride));
  }
}

void EmbeddingTable::ApplyAccumulatedLocked() {
  const int64_t width = spec_.width();
  for (size_t i = 0; i < pending_ids_.size(); ++i) {
    const float scale = 1.0f / static_cast<float>(pending_counts_[i]);
    for (int64_t j = 0; j < width; ++j) pending_sums_[i * width + j] *= scale;
  }
  ApplyLocked(pending_ids_, pending_sums_, static_cast<int>(pending_from_.size()), pending_from_);
  for (const Taken& taken : pending_from_) last_push_ids_.Record(taken.worker, taken.push_id);
  DropPendingLocked();
}

void EmbeddingTable::DropPendingLocked() {
  pending_index_.clear();
  pending_ids_.clear();
  pending_sums_.clear();
  pending_counts_.clear();
  pending_from_.clear();
}

bool EmbeddingTable::CompleteIfReady(int required) {
  absl::MutexLock lock(&mu_);
  if (!primary_.empty() || pending_from_.empty() ||
      static_cast<int>(pending_from_.size()) < required) {
    return false;
  }
  ApplyAccumulatedLocked();
  return true;
}

absl::Status EmbeddingTable::AwaitVersion(int64_t min_version, absl::Time deadline) const {
  absl::ReaderMutexLock lock(&mu_);
  auto ready = [this, min_version]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return cancelled_ || retired_ || committed_version_ >= min_version;
  };
  if (!ready()) mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (cancelled_) return absl::UnavailableError("the parameter server is shutting down");
  if (retired_) return RetiredError();
  if (committed_version_ < min_version) {
    return absl::DeadlineExceededError(absl::StrCat("embedding table '", spec_.name(),
                                                    "': waited for version ", min_version,
                                                    "; it is at ", committed_version_));
  }
  return absl::OkStatus();
}

absl::Status EmbeddingTable::WriteCheckpoint(CheckpointFileWriter& writer) const {
  // Rows go in records of about 4 MiB.
  const int64_t row_floats = spec_.width() * (1 + NumSlots(spec_.optimizer()));
  const size_t per_record = static_cast<size_t>(
      std::max<int64_t>(1, (4 << 20) / ((row_floats + 2) * static_cast<int64_t>(sizeof(float)))));
  absl::MutexLock lock(&mu_);
  if (retired_) return RetiredError();
  TableCheckpoint meta;
  *meta.mutable_spec() = spec_;
  meta.set_version(version_);
  meta.set_rows(store_->size());
  meta.set_candidates(store_->candidates());
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
  store_->ForEachRow([&](int64_t id, absl::Span<const float> row) {
    ids.push_back(id);
    rows.insert(rows.end(), row.begin(), row.end());
    if (ids.size() == per_record) flush(false);
  });
  flush(false);
  store_->ForEachCandidate([&](int64_t id, uint32_t count) {
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
  version_ = committed_version_ = std::max(version_, part.meta.version());
  return file.ReadTable(
      part,
      [&](int64_t id, absl::Span<const float> row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (keep(id)) store_->Put(id, row);
      },
      [&](int64_t id, uint32_t touches) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (keep(id)) store_->PutCandidate(id, touches);
      });
}

int64_t EmbeddingTable::BytesPerRow() const {
  return spec_.width() * (1 + NumSlots(spec_.optimizer())) * static_cast<int64_t>(sizeof(float)) +
         RowStore::kMaxOverheadBytesPerRow;
}

EmbeddingTable::Stats EmbeddingTable::stats() const {
  absl::MutexLock lock(&mu_);
  return {store_->size(),       store_->candidates(),  store_->evictions(),
          store_->admissions(), store_->MemoryBytes(), version_};
}

std::vector<HeavyHitters::Hitter> EmbeddingTable::hottest() const {
  absl::MutexLock lock(&mu_);
  return hot_.Top(kHottestShown);
}

std::vector<ShardUpdate> EmbeddingTable::SnapshotLocked(int64_t part_bytes) const {
  const int64_t row_bytes =
      static_cast<int64_t>(sizeof(int64_t) + store_->row_floats() * sizeof(float));
  constexpr int64_t kCandidateBytes = sizeof(int64_t) + sizeof(uint32_t);
  const int64_t version = version_;
  const int64_t rows = store_->size();
  const int64_t candidates = store_->candidates();
  std::vector<ShardUpdate> parts;
  int64_t entries = 0;
  int64_t bytes = 0;  // in the last part
  const auto part = [&]() -> TableSnapshot* {
    if (parts.empty() || bytes >= part_bytes) {
      ShardUpdate& update = parts.emplace_back();
      update.set_table(spec_.name());
      update.set_partition(partition_);
      update.set_version(version);
      TableSnapshot* snapshot = update.mutable_table_snapshot();
      if (parts.size() == 1) *snapshot->mutable_spec() = spec_;
      snapshot->set_offset(entries);
      snapshot->set_rows(rows);
      snapshot->set_candidates(candidates);
      bytes = 0;
    }
    return parts.back().mutable_table_snapshot();
  };
  part();  // the first, though the range holds nothing
  store_->ForEachRow([&](int64_t id, absl::Span<const float> row) {
    TableSnapshot* snapshot = part();
    snapshot->mutable_ids()->append(reinterpret_cast<const char*>(&id), sizeof(id));
    snapshot->mutable_data()->append(reinterpret_cast<const char*>(row.data()),
                                     row.size() * sizeof(float));
    bytes += row_bytes;
    ++entries;
  });
  store_->ForEachCandidate([&](int64_t id, uint32_t touches) {
    TableSnapshot* snapshot = part();
    snapshot->add_candidate_ids(id);
    snapshot->add_touches(touches);
    bytes += kCandidateBytes;
    ++entries;
  });
  const std::vector<uint64_t>& ids = last_push_ids_.ids();
  parts.back().mutable_table_snapshot()->mutable_push_ids()->Assign(ids.begin(), ids.end());
  return parts;
}

bool EmbeddingTable::IsOfThisUnit(const ShardUpdate& update) const {
  return update.table() == spec_.name() && update.partition() == partition_;
}

absl::StatusOr<int64_t> EmbeddingTable::ApplySnapshotPartLocked(const ShardUpdate& update) {
  const TableSnapshot& part = update.table_snapshot();
  const int64_t row_bytes = store_->row_floats() * static_cast<int64_t>(sizeof(float));
  const int64_t rows = static_cast<int64_t>(part.ids().size() / sizeof(int64_t));
  const int64_t candidates = part.candidate_ids_size();
  const int64_t entries = part.rows() + part.candidates();
  // Its rows lie among the snapshot's rows, its candidates after them.
  if (part.ids().size() % sizeof(int64_t) != 0 ||
      static_cast<int64_t>(part.data().size()) != rows * row_bytes ||
      part.touches_size() != candidates || part.offset() < 0 || part.rows() < 0 ||
      part.candidates() < 0 || update.version() < 0 || part.offset() + rows > part.rows() ||
      (candidates > 0 && part.offset() + rows < part.rows()) ||
      part.offset() + rows + candidates > entries) {
    return absl::InvalidArgumentError(
        absl::StrCat(label(), ": a snapshot's part of ", rows, " rows (", part.data().size(),
                     " bytes) and ", candidates, " candidates after ", part.offset(),
                     " entries (version ", update.version(), ") is not one of ", part.rows(),
                     " rows of ", row_bytes, " bytes and ", part.candidates(), " candidates"));
  }
  if (part.offset() == 0) {
    filling_ = std::make_unique<RowStore>(StoreOptions());
    filled_ = 0;
    filling_version_ = update.version();
  } else if (filling_ == nullptr || filling_version_ != update.version() ||
             part.offset() != filled_) {
    // A part sent again after the stream broke, of a snapshot taken whole.
    if (filling_ == nullptr && update.version() <= version_) return version_;
    return absl::FailedPreconditionError(absl::StrCat(
        label(), ": given a snapshot's part after ", part.offset(), " entries of version ",
        update.version(), ", while holding ", filled_, " entries of version ", filling_version_));
  }
  for (int64_t i = 0; i < rows; ++i) {
    int64_t id = 0;
    std::memcpy(&id, part.ids().data() + i * sizeof(int64_t), sizeof(id));
    std::vector<float> row(store_->row_floats());
    std::memcpy(row.data(), part.data().data() + i * row_bytes, row_bytes);
    filling_->Put(id, row);
  }
  for (int64_t i = 0; i < candidates; ++i) {
    filling_->PutCandidate(part.candidate_ids(i), part.touches(i));
  }
  filled_ += rows + candidates;
  if (filled_ < entries) return -1;
  // Whole: the primary's rows replace this copy's.
  store_ = std::move(filling_);
  version_ = committed_version_ = filling_version_;
  last_push_ids_.Assign({part.push_ids().begin(), part.push_ids().end()});
  DropPendingLocked();
  filling_version_ = -1;
  return version_;
}

absl::Status EmbeddingTable::CheckUpdateLocked(const ShardUpdate& update) const {
  const size_t ids = update.ids().size() / sizeof(int64_t);
  if (update.ids().size() % sizeof(int64_t) == 0 &&
      update.gradient().size() == ids * spec_.width() * sizeof(float) && update.averaged() >= 1) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(label(), ": an update of ", update.ids().size(), " bytes of ids and ",
                   update.gradient().size(), " bytes of gradients averaging ", update.averaged(),
                   " is not one of rows of width ", spec_.width()));
}

void EmbeddingTable::ApplyUpdateLocked(const ShardUpdate& update) {
  std::vector<int64_t> ids(update.ids().size() / sizeof(int64_t));
  std::memcpy(ids.data(), update.ids().data(), update.ids().size());
  std::vector<float> grads(update.gradient().size() / sizeof(float));
  std::memcpy(grads.data(), update.gradient().data(), update.gradient().size());
  const std::vector<Taken> pushes = PushesOf(update);
  ApplyLocked(ids, grads, update.averaged(), pushes);
}

void EmbeddingTable::FreeLocked() {
  store_ = std::make_unique<RowStore>(StoreOptions());
  filling_.reset();
  filling_version_ = -1;
}

}  // namespace fulcrum
