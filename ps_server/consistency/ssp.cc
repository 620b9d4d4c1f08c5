// ssp (stale synchronous parallel, bound k): pushes apply at once, and each
// advances its worker's clock; a worker at clock c may pull only when every
// active worker's clock is >= c - k. k = 0 is lock-step.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "ps_server/consistency/policy.h"

namespace fulcrum {
namespace {

// Clocks beyond this are refused: clock + 1 and clock - k never overflow.
constexpr int64_t kMaxClock = int64_t{1} << 62;

absl::Status CheckClock(const char* what, int worker, bool has_clock, int64_t clock) {
  if (!has_clock) {
    return absl::InvalidArgumentError(
        absl::StrCat("ssp: the ", what, " of worker ", worker, " carries no clock"));
  }
  if (clock < 0 || clock >= kMaxClock) {
    return absl::InvalidArgumentError(absl::StrCat("ssp: the ", what, " of worker ", worker,
                                                   " carries clock ", clock, ", not in [0, 2^62)"));
  }
  return absl::OkStatus();
}

class SspPolicy final : public ConsistencyPolicy {
 public:
  explicit SspPolicy(const PolicyContext& context)
      : bound_(context.config->staleness_bound()),
        workers_(*context.workers),
        clocks_(context.workers->num_workers(), 0) {}

  absl::Status CheckPush(const PushRequest& push) const override {
    return CheckClock("push", push.worker_id(), push.has_clock(), push.clock());
  }

  absl::StatusOr<ShardPushResult> PushShard(Shard& shard, const ShardGradient& grad) override {
    return shard.ApplyNow(grad, /*max_staleness=*/-1);
  }

  // The worker finished the step computed at `clock`: its clock becomes at
  // least clock + 1.
  void AfterPush(const PushRequest& push) override {
    absl::MutexLock lock(&mu_);
    int64_t& clock = clocks_[push.worker_id()];
    clock = std::max(clock, push.clock() + 1);
  }

  absl::Status AwaitPull(const PullRequest& pull, absl::Time deadline) override {
    if (!pull.has_worker_id()) return absl::OkStatus();  // readers wait for no one
    if (absl::Status s = CheckClock("pull", pull.worker_id(), pull.has_clock(), pull.clock());
        !s.ok()) {
      return s;
    }
    const int64_t min_clock = pull.clock() - bound_;
    absl::MutexLock lock(&mu_);
    auto ready = [this, min_clock]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return cancelled_ || BehindLocked(min_clock).empty();
    };
    mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
    if (cancelled_) return absl::UnavailableError("server is shutting down");
    const std::vector<int> behind = BehindLocked(min_clock);
    if (!behind.empty()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "ssp: worker ", pull.worker_id(), " at clock ", pull.clock(), " waits for worker(s) ",
          absl::StrJoin(behind, ", "), " to reach clock ", min_clock));
    }
    return absl::OkStatus();
  }

  // Fewer active workers can only let waiting pulls go: taking the lock
  // has them look again.
  void OnWorkersChanged() override { absl::MutexLock lock(&mu_); }

  void Cancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

  void Describe(DescribeResponse* out) const override {
    out->set_staleness_bound(bound_);
    absl::MutexLock lock(&mu_);
    for (WorkerInfo& info : *out->mutable_workers()) {
      if (info.worker_id() >= 0 && info.worker_id() < static_cast<int>(clocks_.size())) {
        info.set_clock(clocks_[info.worker_id()]);
      }
    }
  }

 private:
  // Active workers whose clock is below `min_clock`.
  std::vector<int> BehindLocked(int64_t min_clock) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<int> behind;
    const std::vector<bool> active = workers_.Active();
    for (size_t i = 0; i < clocks_.size(); ++i) {
      if (active[i] && clocks_[i] < min_clock) behind.push_back(static_cast<int>(i));
    }
    return behind;
  }

  const int64_t bound_;
  WorkerTable& workers_;
  mutable absl::Mutex mu_;  // taken before the worker table's
  std::vector<int64_t> clocks_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

absl::Status Validate(const PsServerConfig& config) {
  if (config.staleness_bound() < 0 || config.staleness_bound() >= kMaxClock) {
    return absl::InvalidArgumentError(
        absl::StrCat("staleness: must be in [0, 2^62), got ", config.staleness_bound()));
  }
  return absl::OkStatus();
}

std::unique_ptr<ConsistencyPolicy> Make(const PolicyContext& context) {
  return std::make_unique<SspPolicy>(context);
}

}  // namespace

const ModeDefinition kSspMode = {SSP, &Validate, &Make};

}  // namespace fulcrum
