#include "ps_server/shard.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "common/logging.h"
#include "common/partitioner.h"
#include "common/slices.h"

namespace fulcrum {
namespace {

Shape ShardShape(const ShardSpec& spec) {
  Shape shape(spec.variable().shape().begin(), spec.variable().shape().end());
  shape[0] = spec.rows();
  return shape;
}

}  // namespace

absl::StatusOr<ShardContents> NewShardContents(const ShardSpec& spec,
                                               const RestoredVariable* restored,
                                               absl::string_view initial_values) {
  const int64_t n = spec.rows() * RowElements(spec.variable().shape());
  const OptimizerSpec& optimizer = spec.variable().optimizer();
  ShardContents contents;
  contents.values.resize(n);
  contents.slots = MakeSlots(optimizer, n);
  if (restored == nullptr && !initial_values.empty()) {
    CHECK(initial_values.size() == contents.values.size() * sizeof(float));
    std::memcpy(contents.values.data(), initial_values.data(), initial_values.size());
    return contents;
  }
  if (restored == nullptr) {
    InitializeRows(spec.variable(), spec.row_offset(), spec.rows(),
                   absl::MakeSpan(contents.values));
    return contents;
  }
  if (restored->num_slots != NumSlots(optimizer) || restored->row_elems * spec.rows() != n) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint of variable '", spec.variable().name(), "' has ", restored->num_slots,
        " slots of rows of ", restored->row_elems, "; its optimizer keeps ", NumSlots(optimizer)));
  }
  if (absl::Status s = restored->Read(spec.row_offset(), spec.rows(), &contents); !s.ok()) {
    return s;
  }
  return contents;
}

Shard::Shard(ShardSpec spec, ShardContents contents)
    : ReplicatedUnit(ShardKey(spec.variable().name(), spec.shard()),
                     absl::StrCat("variable '", spec.variable().name(), "' shard ", spec.shard()),
                     contents.version),
      spec_(std::move(spec)),
      shape_(ShardShape(spec_)),
      values_(std::make_shared<std::vector<float>>(std::move(contents.values))),
      slots_(std::move(contents.slots)) {}

absl::Status Shard::Read(int64_t min_version, absl::Time deadline, DataType encoding,
                         int64_t max_slice_bytes, OutgoingPull* out) const {
  absl::ReaderMutexLock lock(&mu_);
  auto ready = [this, min_version]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return cancelled_ || retired_ || committed_version_ >= min_version;
  };
  if (!ready()) {
    const absl::Time waiting = absl::Now();
    mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
    out->response.set_waited_us(out->response.waited_us() +
                                absl::ToInt64Microseconds(absl::Now() - waiting));
  }
  // UNAVAILABLE, so that clients retry: the server is going away.
  if (cancelled_) return absl::UnavailableError(absl::StrCat(label(), ": server is shutting down"));
  if (retired_) return RetiredError();
  if (committed_version_ < min_version) {
    return absl::DeadlineExceededError(absl::StrCat(
        label(), ": still at version ", committed_version_,
        version_ > committed_version_ ? absl::StrCat(" (", version_, " not yet on its backups)")
                                      : "",
        " at the deadline, waiting for ", min_version));
  }
  pulls_.fetch_add(1, std::memory_order_relaxed);
  if (encoding == DT_FLOAT) out->snapshots.push_back(values_);
  // The committed version, which every copy has: a gradient computed from
  // these values is never from a version a promoted copy lacks (the values
  // may hold the updates after it, on their way to the backups).
  return AppendShardSlices(spec_.variable().name(), spec_.shard(), committed_version_, shape_,
                           *values_, encoding, max_slice_bytes, out->response.mutable_slices(),
                           &out->lent);
}

absl::Status Shard::CheckComputedAt(int64_t computed_at) const {
  absl::ReaderMutexLock lock(&mu_);
  return CheckNotFromFutureLocked(computed_at);
}

absl::Status Shard::CheckNotFromFutureLocked(int64_t computed_at) const {
  if (computed_at > version_ || computed_at < 0) {
    return absl::FailedPreconditionError(absl::StrCat(label(), ": gradient computed at version ",
                                                      computed_at, " but the shard is at version ",
                                                      version_, " (was the server restarted?)"));
  }
  return absl::OkStatus();
}

ShardPushResult Shard::ResultLocked(ShardPushResult::Outcome outcome, int64_t staleness) const {
  ShardPushResult result;
  result.set_variable(spec_.variable().name());
  result.set_shard(spec_.shard());
  result.set_outcome(outcome);
  result.set_version(version_);
  result.set_staleness(staleness);
  return result;
}

void Shard::UnshareValuesLocked() {
  // No snapshot can be taken meanwhile (Read holds mu_), but one can be let
  // go: a count of 1 is final. The fence orders this thread's writes after
  // the reads of whoever let the last snapshot go (its release decrement).
  if (values_.use_count() > 1) {
    values_ = std::make_shared<std::vector<float>>(*values_);
  } else {
    std::atomic_thread_fence(std::memory_order_acquire);
  }
}

void Shard::ApplyLocked(GradientParts grad, int averaged, absl::Span<const Taken> pushes) {
  UnshareValuesLocked();
  ++version_;
  ApplyGradient(spec_.variable().optimizer(), version_, averaged, grad, absl::MakeSpan(*values_),
                slots_);
  MadeVersionLocked([&, version = version_] {
    ShardUpdate update;
    update.set_variable(spec_.variable().name());
    update.set_shard(spec_.shard());
    update.set_version(version);
    update.set_averaged(averaged);
    std::string* gradient = update.mutable_gradient();
    for (FloatBytes part : grad) gradient->append(part.data(), part.size());
    AddPushes(pushes, &update);
    return update;
  });
}

std::vector<ShardUpdate> Shard::SnapshotLocked(int64_t part_bytes) const {
  const int64_t n = static_cast<int64_t>(values_->size());
  const int64_t floats = n * static_cast<int64_t>(1 + slots_.size());
  const int64_t per_part = std::max<int64_t>(1, part_bytes / static_cast<int64_t>(sizeof(float)));
  std::vector<ShardUpdate> parts;
  for (int64_t offset = 0; offset < floats; offset += per_part) {
    ShardUpdate& update = parts.emplace_back();
    update.set_variable(spec_.variable().name());
    update.set_shard(spec_.shard());
    update.set_version(version_);
    ShardSnapshot* part = update.mutable_snapshot();
    if (offset == 0) *part->mutable_spec() = spec_;
    part->set_offset(offset);
    part->set_floats(floats);
    const int64_t end = std::min(floats, offset + per_part);
    std::string* data = part->mutable_data();
    data->resize((end - offset) * sizeof(float));
    for (int64_t i = offset; i < end;) {  // across values, then each slot
      const int64_t within = i % n;
      const float* from = i < n ? values_->data() : slots_[i / n - 1].data();
      const int64_t count = std::min(end - i, n - within);
      std::memcpy(data->data() + (i - offset) * sizeof(float), from + within,
                  count * sizeof(float));
      i += count;
    }
  }
  const std::vector<uint64_t>& ids = last_push_ids_.ids();
  parts.back().mutable_snapshot()->mutable_push_ids()->Assign(ids.begin(), ids.end());
  return parts;
}

absl::StatusOr<int64_t> Shard::ApplySnapshotPartLocked(const ShardUpdate& update) {
  const ShardSnapshot& part = update.snapshot();
  const int64_t n = static_cast<int64_t>(values_->size());
  const int64_t floats = n * static_cast<int64_t>(1 + slots_.size());
  const int64_t count = static_cast<int64_t>(part.data().size() / sizeof(float));
  if (part.floats() != floats || part.data().size() % sizeof(float) != 0 || part.offset() < 0 ||
      part.offset() > floats - count || update.version() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(label(), ": a snapshot's part of ", part.data().size(), " bytes at float ",
                     part.offset(), " of ", part.floats(), " (version ", update.version(),
                     ") is not one of its ", floats, " floats"));
  }
  if (part.offset() == 0) {
    filling_.clear();
    filling_.reserve(floats);
    filling_version_ = update.version();
  } else if (filling_version_ != update.version() ||
             part.offset() != static_cast<int64_t>(filling_.size())) {
    // A part sent again after the stream broke, of a snapshot taken whole.
    if (filling_version_ < 0 && update.version() <= version_) return version_;
    return absl::FailedPreconditionError(
        absl::StrCat(label(), ": given a snapshot's part at float ", part.offset(), " of version ",
                     update.version(), ", while holding ", filling_.size(), " floats of version ",
                     filling_version_));
  }
  const auto* data = reinterpret_cast<const float*>(part.data().data());
  filling_.insert(filling_.end(), data, data + count);
  if (static_cast<int64_t>(filling_.size()) < floats) return -1;
  // Whole: the primary's state replaces this copy's.
  UnshareValuesLocked();
  std::copy(filling_.begin(), filling_.begin() + n, values_->begin());
  for (size_t slot = 0; slot < slots_.size(); ++slot) {
    const auto from = filling_.begin() + n * static_cast<int64_t>(slot + 1);
    std::copy(from, from + n, slots_[slot].begin());
  }
  version_ = committed_version_ = filling_version_;
  last_push_ids_.Assign({part.push_ids().begin(), part.push_ids().end()});
  accumulated_from_.clear();
  filling_ = std::vector<float>();
  filling_version_ = -1;
  return version_;
}

bool Shard::IsOfThisUnit(const ShardUpdate& update) const {
  return update.table().empty() && update.variable() == spec_.variable().name() &&
         update.shard() == spec_.shard();
}

absl::Status Shard::CheckUpdateLocked(const ShardUpdate& update) const {
  if (update.gradient().size() == values_->size() * sizeof(float) && update.averaged() >= 1) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(label(), ": an update of ",
                                                 update.gradient().size(), " bytes averaging ",
                                                 update.averaged(), " is not one of it"));
}

void Shard::ApplyUpdateLocked(const ShardUpdate& update) {
  const std::vector<Taken> pushes = PushesOf(update);
  const FloatBytes gradient(update.gradient().data(), update.gradient().size());
  ApplyLocked(absl::MakeConstSpan(&gradient, 1), update.averaged(), pushes);
}

void Shard::DropPendingLocked() {
  accumulated_.clear();
  accumulated_from_.clear();
}

void Shard::FreeLocked() {
  values_ = std::make_shared<std::vector<float>>();  // a pull's snapshot keeps its own
  slots_.clear();
  std::vector<float>().swap(accumulated_);
  std::vector<float>().swap(filling_);
  filling_version_ = -1;
}

absl::StatusOr<ShardPushResult> Shard::ApplyNow(const ShardGradient& grad, int64_t max_staleness) {
  pushes_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckPrimaryLocked(); !s.ok()) return s;
  if (absl::Status s = CheckNotFromFutureLocked(grad.computed_at); !s.ok()) return s;
  const int64_t staleness = version_ - grad.computed_at;
  if (max_staleness >= 0 && staleness > max_staleness) {
    return ResultLocked(ShardPushResult::STALE, staleness);
  }
  if (last_push_ids_.Seen(grad.worker, grad.push_id))
    return ResultLocked(ShardPushResult::DUPLICATE, staleness);
  const Taken taken{grad.worker, grad.push_id};
  ApplyLocked(grad.parts, 1, absl::MakeConstSpan(&taken, 1));
  return ResultLocked(ShardPushResult::APPLIED, staleness);
}

void Shard::ApplyAccumulatedLocked() {
  const int averaged = static_cast<int>(accumulated_from_.size());
  const float scale = 1.0f / static_cast<float>(averaged);
  for (float& g : accumulated_) g *= scale;
  const FloatBytes mean = AsFloatBytes(accumulated_);
  ApplyLocked(absl::MakeConstSpan(&mean, 1), averaged, accumulated_from_);
  for (const Taken& taken : accumulated_from_) last_push_ids_.Record(taken.worker, taken.push_id);
  accumulated_.clear();
  accumulated_from_.clear();
}

absl::StatusOr<ShardPushResult> Shard::Accumulate(const ShardGradient& grad, int required) {
  pushes_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckPrimaryLocked(); !s.ok()) return s;
  if (absl::Status s = CheckNotFromFutureLocked(grad.computed_at); !s.ok()) return s;
  const int64_t staleness = version_ - grad.computed_at;
  if (staleness > 0) return ResultLocked(ShardPushResult::STALE, staleness);
  // A push is remembered once its step is applied, not when it is added:
  // a snapshot of this shard (a copy that takes the primary's place) lacks
  // the step being accumulated, so the pushes added to it must count as
  // not taken there, and be taken when pushed again.
  if (std::any_of(accumulated_from_.begin(), accumulated_from_.end(),
                  [&](const Taken& t) { return t.worker == grad.worker; }) ||
      last_push_ids_.IsLast(grad.worker, grad.push_id)) {
    return ResultLocked(ShardPushResult::DUPLICATE, 0);
  }
  const bool first = accumulated_.empty();
  if (first) accumulated_.resize(values_->size());
  // Raw pointers: Span's bounds-checked [] keeps the loop from vectorising.
  float* sum = accumulated_.data();
  for (FloatBytes part : grad.parts) {
    const size_t n = part.size() / sizeof(float);
    if (n == 0) continue;
    if (first) {
      std::memcpy(sum, part.data(), part.size());
    } else {
      for (size_t i = 0; i < n; ++i) sum[i] += LoadFloat(part.data(), i);
    }
    sum += n;
  }
  accumulated_from_.push_back({grad.worker, grad.push_id});
  if (static_cast<int>(accumulated_from_.size()) < required) {
    return ResultLocked(ShardPushResult::ACCUMULATED, 0);
  }
  ApplyAccumulatedLocked();
  return ResultLocked(ShardPushResult::APPLIED, 0);
}

bool Shard::CompleteIfReady(int required) {
  absl::MutexLock lock(&mu_);
  if (!primary_.empty() || accumulated_from_.empty() ||
      static_cast<int>(accumulated_from_.size()) < required) {
    return false;
  }
  ApplyAccumulatedLocked();
  return true;
}

absl::Status Shard::WriteCheckpoint(CheckpointFileWriter& writer) const {
  absl::ReaderMutexLock lock(&mu_);
  if (retired_) return RetiredError();
  ShardCheckpoint meta;
  *meta.mutable_spec() = spec_;
  meta.set_version(version_);
  meta.set_num_slots(static_cast<int>(slots_.size()));
  std::vector<absl::Span<const float>> slots;
  for (const std::vector<float>& slot : slots_) slots.push_back(slot);
  return writer.AddShard(meta, *values_, slots);
}

ShardInfo Shard::Describe() const {
  absl::ReaderMutexLock lock(&mu_);
  ShardInfo info;
  info.set_variable(spec_.variable().name());
  info.set_shard(spec_.shard());
  info.set_num_shards(spec_.num_shards());
  info.mutable_shape()->Assign(shape_.begin(), shape_.end());
  info.set_version(version_);
  info.set_pushes(pushes_.load(std::memory_order_relaxed));
  info.set_pulls(pulls_.load(std::memory_order_relaxed));
  info.set_pending_gradients(static_cast<int>(accumulated_from_.size()));
  info.set_optimizer(OptimizerSpec::Kind_Name(spec_.variable().optimizer().kind()));
  info.set_primary(primary_);
  return info;
}

}  // namespace fulcrum
