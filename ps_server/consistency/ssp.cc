// ssp (stale synchronous parallel, bound k): pushes apply at once, and each
// advances its worker's clock; a worker at clock c may pull only when every
// active worker's clock is >= c - k. k = 0 is lock-step.
//
// With replicated shards, a server's clocks count the pushes it applied
// itself. A shard promoted here from a lost primary lacks the pushes that
// primary took but had not yet replicated, though this server's clocks
// count them (every push reaches every server). So pulls routed by the
// table that promoted it count, of each other worker, only the pushes known
// acknowledged everywhere (those before the clock of its last call here),
// until it calls by that table too: by then the pushes it retried to the
// new primary are applied.
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
        clocks_(context.workers->num_workers()) {}

  absl::Status CheckPush(const PushRequest& push) const override {
    return CheckClock("push", push.worker_id(), push.has_clock(), push.clock());
  }

  absl::StatusOr<ShardPushResult> PushShard(Shard& shard, const ShardGradient& grad) override {
    return shard.ApplyNow(grad, /*max_staleness=*/-1);
  }

  // The worker finished the step computed at `clock`: its clock becomes at
  // least clock + 1. It sent this push once its last was acknowledged.
  void AfterPush(const PushRequest& push) override {
    absl::MutexLock lock(&mu_);
    WorkerClock& worker = clocks_[push.worker_id()];
    worker.clock = std::max(worker.clock, push.clock() + 1);
    HeardLocked(worker, push.clock(), push.placement_epoch());
  }

  absl::Status AwaitPull(const PullRequest& pull, absl::Time deadline, int64_t checked_by,
                         absl::Duration* waited) override {
    if (!pull.has_worker_id()) return absl::OkStatus();  // readers wait for no one
    if (absl::Status s = CheckClock("pull", pull.worker_id(), pull.has_clock(), pull.clock());
        !s.ok()) {
      return s;
    }
    const int64_t min_clock = pull.clock() - bound_;
    absl::MutexLock lock(&mu_);
    // A pull at clock c follows the push at c - 2, acknowledged (a
    // push-pull carries the push at c - 1 with it, applied here first), so
    // its worker's pushes up to c - 1 are in here: a server that joined
    // the job mid-run learns the clocks of the workers that call it.
    WorkerClock& puller = clocks_[pull.worker_id()];
    puller.clock = std::max(puller.clock, pull.clock());
    HeardLocked(puller, pull.clock() - 1, pull.placement_epoch());
    // A worker waiting here on shards that moved away would wait for the
    // others' clocks for ever: they no longer push here.
    auto moved = [this, checked_by]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return checked_by >= 0 && placement_epoch_ > checked_by;
    };
    auto ready = [this, min_clock, &pull, &moved]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return cancelled_ || moved() || BehindLocked(min_clock, pull).empty();
    };
    if (!ready()) {
      const absl::Time waiting = absl::Now();
      mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
      if (waited != nullptr) *waited += absl::Now() - waiting;
    }
    if (cancelled_) return absl::UnavailableError("server is shutting down");
    const std::vector<int> behind = BehindLocked(min_clock, pull);
    if (!behind.empty() && moved()) {
      return absl::AbortedError("ssp: a placement table was applied while the pull waited");
    }
    if (!behind.empty()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "ssp: worker ", pull.worker_id(), " at clock ", pull.clock(), " waits for worker(s) ",
          absl::StrJoin(behind, ", "), " to reach clock ", min_clock));
    }
    return absl::OkStatus();
  }

  void OnPromoted(int64_t epoch) override {
    absl::MutexLock lock(&mu_);
    for (WorkerClock& worker : clocks_) {
      if (worker.held_from == 0) worker.held_from = epoch;
      worker.held_until = std::max(worker.held_until, epoch);
    }
  }

  void OnPlacementApplied(int64_t epoch) override {
    absl::MutexLock lock(&mu_);
    placement_epoch_ = std::max(placement_epoch_, epoch);
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
        info.set_clock(clocks_[info.worker_id()].clock);
      }
    }
  }

 private:
  struct WorkerClock {
    int64_t clock = 0;  // its pushes applied here: the last one's clock + 1
    // Its pushes at clocks below this were acknowledged, by every copy.
    int64_t acknowledged = 0;
    // Epochs of the tables that promoted shards here since its last call
    // by the newest of them (0: none). Pulls routed by one count only its
    // acknowledged pushes.
    int64_t held_from = 0;
    int64_t held_until = 0;
  };

  // A call of the worker's: its pushes below `acknowledged` were, and it
  // was routed by the table of `epoch`.
  static void HeardLocked(WorkerClock& worker, int64_t acknowledged, int64_t epoch) {
    worker.acknowledged = std::max(worker.acknowledged, acknowledged);
    if (worker.held_until != 0 && epoch >= worker.held_until)
      worker.held_from = worker.held_until = 0;
  }

  // Active workers whose clock, as `pull` counts it, is below `min_clock`.
  std::vector<int> BehindLocked(int64_t min_clock, const PullRequest& pull) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<int> behind;
    const std::vector<bool> active = workers_.Active();
    for (size_t i = 0; i < clocks_.size(); ++i) {
      const WorkerClock& worker = clocks_[i];
      int64_t clock = worker.clock;
      // The puller's own pushes are in before it pulls.
      if (static_cast<int>(i) != pull.worker_id() && worker.held_from != 0 &&
          pull.placement_epoch() >= worker.held_from) {
        clock = std::min(clock, worker.acknowledged);
      }
      if (active[i] && clock < min_clock) behind.push_back(static_cast<int>(i));
    }
    return behind;
  }

  const int64_t bound_;
  WorkerTable& workers_;
  mutable absl::Mutex mu_;  // taken before the worker table's
  std::vector<WorkerClock> clocks_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  int64_t placement_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // the newest OnPlacementApplied
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
