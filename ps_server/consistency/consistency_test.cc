// The consistency modes side by side: every scenario runs on a parameter
// server (and the client policy) of each mode, on a fake clock, and its
// trace is compared with the table. A new mode adds its rows here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/consistency/policy.h"
#include "common/logging.h"
#include "common/tensor.h"
#include "ps_server/parameter_server.h"
#include "ps_server/test_requests.h"

namespace fulcrum {
namespace {

constexpr int kWorkers = 2;
constexpr int64_t kLeaseMs = 200;
constexpr int64_t kStartupMs = 1000;  // the start-up deadline

// A server of `mode` with two workers (sync aggregates both; ssp's bound is
// 1), holding w = [0, 0, 0, 0] with SGD at learning rate 1, on a clock the
// scenario moves.
class Cluster {
 public:
  explicit Cluster(ConsistencyMode mode)
      : ps_(Config(mode), [this] { return start_ + absl::Milliseconds(offset_ms_.load()); }) {
    CreateShardsRequest request;
    ShardSpec* spec = request.add_shards();
    VariableSpec* v = spec->mutable_variable();
    v->set_name("w");
    v->add_shape(4);
    v->set_dtype(DT_FLOAT);
    v->mutable_optimizer()->set_learning_rate(1.0f);
    spec->set_num_shards(1);
    spec->set_rows(4);
    CHECK(ps_.CreateShards(request).ok());
  }

  // A push of `value` everywhere from `worker`, computed at `version`, at
  // `clock` (-1: none), with `push_id`: its outcome, with the staleness
  // after a '/' when there is any, or the error code.
  std::string Push(int worker, int64_t version, float value, int64_t clock, uint64_t push_id = 0) {
    PushRequest request;
    request.set_worker_id(worker);
    if (clock >= 0) request.set_clock(clock);
    request.set_push_id(push_id);
    ShardSlice* slice = request.add_gradients();
    slice->set_variable("w");
    slice->set_version(version);
    EncodeFloatTensor({4}, std::vector<float>(4, value), slice->mutable_tensor());
    auto pushed = ps_.Push(request);
    if (!pushed.ok()) return absl::StatusCodeToString(pushed.status().code());
    const ShardPushResult& result = pushed->results(0);
    std::string out = ShardPushResult::Outcome_Name(result.outcome());
    if (result.staleness() > 0) absl::StrAppend(&out, "/", result.staleness());
    return out;
  }

  bool PullsOverlapPush() const { return ps_.PullsOverlapPush(); }

  // A pull by `worker` at `clock` of w at `min_version`, given `wait`:
  // "v<version> w=<value>", or why not.
  std::string Pull(int worker, int64_t min_version, int64_t clock,
                   absl::Duration wait = absl::Milliseconds(50)) {
    auto pulled = PullResponse(worker, min_version, clock, wait);
    if (!pulled.ok()) {
      return pulled.status().code() == absl::StatusCode::kDeadlineExceeded
                 ? absl::StrCat("waiting: ", pulled.status().message())
                 : absl::StatusCodeToString(pulled.status().code());
    }
    return absl::StrCat("v", pulled->slices(0).version(),
                        " w=", FloatValues(pulled->slices(0).tensor())[0]);
  }

  // The same pull's answer.
  absl::StatusOr<fulcrum::PullResponse> PullResponse(int worker, int64_t min_version, int64_t clock,
                                                     absl::Duration wait) {
    return ps_.Pull(PullOf("w", worker, min_version, clock), absl::Now() + wait, {1 << 20});
  }

  // What a reader sees now.
  std::string State() { return Pull(-1, 0, -1); }

  void Heartbeat(int worker, bool finished = false) {
    HeartbeatRequest request;
    request.set_worker_id(worker);
    request.set_finished(finished);
    CHECK(ps_.Heartbeat(request).ok());
  }

  // Moves the clock to `ms` after the start and expires what ran out.
  void AdvanceTo(int64_t ms) {
    offset_ms_ = ms;
    ps_.CheckLeases();
  }

  // Moves the clock to `ms` in half leases, `worker` heartbeating on each.
  void KeepAliveTo(int worker, int64_t ms) {
    for (int64_t t = offset_ms_ + kLeaseMs / 2; t < ms; t += kLeaseMs / 2) {
      AdvanceTo(t);
      Heartbeat(worker);
    }
    AdvanceTo(ms);
    Heartbeat(worker);
  }

 private:
  static PsServerConfig Config(ConsistencyMode mode) {
    PsServerConfig config;
    config.set_mode(mode);
    config.set_num_replicas(kWorkers);
    config.set_replicas_to_aggregate(kWorkers);
    config.set_staleness_bound(1);
    config.set_max_staleness(-1);
    config.set_lease_timeout_ms(kLeaseMs);
    config.set_startup_timeout_ms(kStartupMs);
    config.set_max_message_bytes(1 << 20);
    config.set_max_memory_bytes(1 << 20);
    return config;
  }

  const absl::Time start_ = absl::Now();
  std::atomic<int64_t> offset_ms_{0};
  ParameterServer ps_;
};

// Each scenario returns its trace: the outcomes it saw, space-separated.
using Scenario = std::function<std::string(Cluster&)>;

std::string Join(const std::vector<std::string>& parts) { return absl::StrJoin(parts, " | "); }

// The push of each worker at version 0 (and clock 0).
std::string EachWorkerPushesOnce(Cluster& c) {
  return Join({c.Push(0, 0, 1, 0), c.Push(1, 0, 2, 0), c.State()});
}

// Worker 0 pushes again from version 0 after the step of both.
std::string APushFromAnOldVersion(Cluster& c) {
  return Join({c.Push(0, 0, 1, 0), c.Push(1, 0, 1, 0), c.Push(0, 0, 1, 1), c.State()});
}

// A push sent twice with one push_id (a retry after a lost response).
std::string ARetriedPushAppliesOnce(Cluster& c) {
  return Join({c.Push(0, 0, 1, 0, /*push_id=*/7), c.Push(0, 0, 1, 0, /*push_id=*/7), c.State()});
}

// Worker 0 runs two clocks ahead of worker 1 (the bound is 1) and pulls.
std::string AWorkerTwoClocksAheadPulls(Cluster& c) {
  return Join({c.Push(0, 0, 1, 0), c.Push(0, 0, 1, 1, 2), c.Pull(0, 0, 2)});
}

// Worker 1 has started; worker 0 pushes; worker 1 stays silent until its
// lease runs out. The pull is the one worker 0 makes next: sync waits for
// the step it joined.
std::string ASilentWorkersLeaseRunsOut(Cluster& c, ConsistencyMode mode) {
  const int64_t next = mode == SYNC ? 1 : 0;
  c.Heartbeat(1);
  std::vector<std::string> trace = {c.Push(0, 0, 1, 0), c.Push(0, mode == SYNC ? 0 : 1, 1, 1, 2)};
  c.AdvanceTo(kLeaseMs * 3 / 4);
  c.Heartbeat(0);
  trace.push_back(c.Pull(0, next, 2));  // worker 1's lease has not run out yet
  c.AdvanceTo(kLeaseMs * 5 / 4);
  trace.push_back(c.Pull(0, next, 2));
  // Worker 1 comes back with a gradient from version 0, and rejoins.
  trace.push_back(c.Push(1, 0, 4, 0));
  return Join(trace);
}

// As above, but worker 1 says it has finished instead.
std::string AWorkerFinishesMidStep(Cluster& c, ConsistencyMode mode) {
  const int64_t next = mode == SYNC ? 1 : 0;
  std::vector<std::string> trace = {c.Push(0, 0, 1, 0), c.Push(0, mode == SYNC ? 0 : 1, 1, 1, 2)};
  trace.push_back(c.Pull(0, next, 2));
  c.Heartbeat(1, /*finished=*/true);
  trace.push_back(c.Pull(0, next, 2));
  return Join(trace);
}

// Worker 1 has not started: it is awaited well past a lease, until the
// start-up deadline; then the job goes on without it.
std::string AWorkerNotStartedYet(Cluster& c, ConsistencyMode mode) {
  const int64_t next = mode == SYNC ? 1 : 0;
  std::vector<std::string> trace = {c.Push(0, 0, 1, 0), c.Push(0, mode == SYNC ? 0 : 1, 1, 1, 2)};
  c.KeepAliveTo(0, kLeaseMs * 2);
  trace.push_back(c.Pull(0, next, 2));
  c.KeepAliveTo(0, kStartupMs);
  trace.push_back(c.Pull(0, next, 2));
  return Join(trace);
}

// Worker 1 starts three leases after worker 0 (which keeps its lease) and
// joins the first step.
std::string ALateWorkerJoinsTheFirstStep(Cluster& c) {
  std::vector<std::string> trace = {c.Push(0, 0, 1, 0)};
  c.KeepAliveTo(0, kLeaseMs * 3);
  trace.push_back(c.Push(1, 0, 2, 0));
  trace.push_back(c.State());
  return Join(trace);
}

// Worker 0 waits two clocks ahead until worker 1 finishes its clock 0.
std::string TheSlowWorkerCatchesUp(Cluster& c) {
  return Join({c.Push(0, 0, 1, 0), c.Push(0, 0, 1, 1, 2), c.Pull(0, 0, 2), c.Push(1, 0, 1, 0),
               c.Pull(0, 0, 2)});
}

// A server that joined mid-run (ps_server --etcd, fulcrumctl add-server)
// has seen no push of either worker: each worker's pull tells it the
// worker's clock, so that neither waits for the other for ever.
std::string AServerThatJoinedLateLearnsClocksFromPulls(Cluster& c) {
  return Join({c.Pull(0, 0, 5), c.Pull(1, 0, 5), c.Pull(0, 0, 5)});
}

std::string APushWithoutAClock(Cluster& c) { return Join({c.Push(0, 0, 1, -1), c.State()}); }

std::string AReaderPullsWithoutAWorkerId(Cluster& c) {
  return Join({c.Push(0, 0, 1, 0), c.Push(0, 0, 1, 1, 2), c.Pull(-1, 0, 5)});
}

// The client side: what a worker does in the mode.
std::string ClientPolicy(ConsistencyMode mode) {
  auto policy = MakeClientPolicy(mode);
  CHECK(policy.ok());
  return Join(
      {absl::StrCat("after pushing from v5 pull v", (*policy)->MinVersionAfterPush(5)),
       (*policy)->CarriesClock() ? "clock" : "no clock",
       (*policy)->PushReachesEveryServer() ? "every server" : "servers with gradients",
       absl::StrCat("resume at step 100 of 4 workers: batch ", (*policy)->ResumedBatches(100, 4)),
       (*policy)->AwaitsEveryWorker() ? "awaits every worker" : "starts alone"});
}

struct Row {
  const char* scenario;
  ConsistencyMode mode;
  std::string expected;
};

void PrintTo(const Row& row, std::ostream* out) {
  *out << "'" << row.scenario << "' in " << ConsistencyMode_Name(row.mode);
}

const Row kRows[] = {
    {"each worker pushes once", ASYNC, "APPLIED | APPLIED/1 | v2 w=-3"},
    {"each worker pushes once", SYNC, "ACCUMULATED | APPLIED | v1 w=-1.5"},
    {"each worker pushes once", SSP, "APPLIED | APPLIED/1 | v2 w=-3"},

    {"a push from an old version", ASYNC, "APPLIED | APPLIED/1 | APPLIED/2 | v3 w=-3"},
    {"a push from an old version", SYNC, "ACCUMULATED | APPLIED | STALE/1 | v1 w=-1"},
    {"a push from an old version", SSP, "APPLIED | APPLIED/1 | APPLIED/2 | v3 w=-3"},

    {"a retried push applies once", ASYNC, "APPLIED | DUPLICATE/1 | v1 w=-1"},
    {"a retried push applies once", SYNC, "ACCUMULATED | DUPLICATE | v0 w=0"},
    {"a retried push applies once", SSP, "APPLIED | DUPLICATE/1 | v1 w=-1"},

    {"a worker two clocks ahead pulls", ASYNC, "APPLIED | APPLIED/1 | v2 w=-2"},
    {"a worker two clocks ahead pulls", SYNC, "ACCUMULATED | DUPLICATE | v0 w=0"},
    {"a worker two clocks ahead pulls", SSP,
     "APPLIED | APPLIED/1 | waiting: ssp: worker 0 at clock 2 waits for worker(s) 1 to reach "
     "clock 1"},

    {"a silent worker's lease runs out", ASYNC,
     "APPLIED | APPLIED | v2 w=-2 | v2 w=-2 | APPLIED/2"},
    {"a silent worker's lease runs out", SYNC,
     "ACCUMULATED | DUPLICATE | waiting: variable 'w' shard 0: still at version 0 at the "
     "deadline, waiting for 1 | v1 w=-1 | STALE/1"},
    {"a silent worker's lease runs out", SSP,
     "APPLIED | APPLIED | waiting: ssp: worker 0 at clock 2 waits for worker(s) 1 to reach "
     "clock 1 | v2 w=-2 | APPLIED/2"},

    {"a worker finishes mid-step", ASYNC, "APPLIED | APPLIED | v2 w=-2 | v2 w=-2"},
    {"a worker finishes mid-step", SYNC,
     "ACCUMULATED | DUPLICATE | waiting: variable 'w' shard 0: still at version 0 at the "
     "deadline, waiting for 1 | v1 w=-1"},
    {"a worker finishes mid-step", SSP,
     "APPLIED | APPLIED | waiting: ssp: worker 0 at clock 2 waits for worker(s) 1 to reach "
     "clock 1 | v2 w=-2"},

    {"a worker not started yet", ASYNC, "APPLIED | APPLIED | v2 w=-2 | v2 w=-2"},
    {"a worker not started yet", SYNC,
     "ACCUMULATED | DUPLICATE | waiting: variable 'w' shard 0: still at version 0 at the "
     "deadline, waiting for 1 | v1 w=-1"},
    {"a worker not started yet", SSP,
     "APPLIED | APPLIED | waiting: ssp: worker 0 at clock 2 waits for worker(s) 1 to reach "
     "clock 1 | v2 w=-2"},

    {"a late worker joins the first step", ASYNC, "APPLIED | APPLIED/1 | v2 w=-3"},
    {"a late worker joins the first step", SYNC, "ACCUMULATED | APPLIED | v1 w=-1.5"},
    {"a late worker joins the first step", SSP, "APPLIED | APPLIED/1 | v2 w=-3"},

    {"the slow worker catches up", ASYNC, "APPLIED | APPLIED/1 | v2 w=-2 | APPLIED/2 | v3 w=-3"},
    {"the slow worker catches up", SYNC, "ACCUMULATED | DUPLICATE | v0 w=0 | APPLIED | v1 w=-1"},
    {"the slow worker catches up", SSP,
     "APPLIED | APPLIED/1 | waiting: ssp: worker 0 at clock 2 waits for worker(s) 1 to reach "
     "clock 1 | APPLIED/2 | v3 w=-3"},

    {"a server that joined late learns clocks from pulls", ASYNC, "v0 w=0 | v0 w=0 | v0 w=0"},
    {"a server that joined late learns clocks from pulls", SYNC, "v0 w=0 | v0 w=0 | v0 w=0"},
    {"a server that joined late learns clocks from pulls", SSP,
     "waiting: ssp: worker 0 at clock 5 waits for worker(s) 1 to reach clock 4 | v0 w=0 | v0 "
     "w=0"},

    {"a push without a clock", ASYNC, "APPLIED | v1 w=-1"},
    {"a push without a clock", SYNC, "ACCUMULATED | v0 w=0"},
    {"a push without a clock", SSP, "INVALID_ARGUMENT | v0 w=0"},

    {"a reader pulls without a worker id", ASYNC, "APPLIED | APPLIED/1 | v2 w=-2"},
    {"a reader pulls without a worker id", SYNC, "ACCUMULATED | DUPLICATE | v0 w=0"},
    {"a reader pulls without a worker id", SSP, "APPLIED | APPLIED/1 | v2 w=-2"},

    {"client", ASYNC,
     "after pushing from v5 pull v0 | no clock | servers with gradients | resume at step 100 "
     "of 4 workers: batch 25 | starts alone"},
    {"client", SYNC,
     "after pushing from v5 pull v6 | no clock | servers with gradients | resume at step 100 "
     "of 4 workers: batch 100 | awaits every worker"},
    {"client", SSP,
     "after pushing from v5 pull v0 | clock | every server | resume at step 100 of 4 workers: "
     "batch 25 | awaits every worker"},
};

std::string RunScenario(const Row& row) {
  const std::string scenario = row.scenario;
  if (scenario == "client") return ClientPolicy(row.mode);
  Cluster cluster(row.mode);
  if (scenario == "each worker pushes once") return EachWorkerPushesOnce(cluster);
  if (scenario == "a push from an old version") return APushFromAnOldVersion(cluster);
  if (scenario == "a server that joined late learns clocks from pulls")
    return AServerThatJoinedLateLearnsClocksFromPulls(cluster);
  if (scenario == "a retried push applies once") return ARetriedPushAppliesOnce(cluster);
  if (scenario == "a worker two clocks ahead pulls") return AWorkerTwoClocksAheadPulls(cluster);
  if (scenario == "a silent worker's lease runs out") {
    return ASilentWorkersLeaseRunsOut(cluster, row.mode);
  }
  if (scenario == "a worker finishes mid-step") return AWorkerFinishesMidStep(cluster, row.mode);
  if (scenario == "a worker not started yet") return AWorkerNotStartedYet(cluster, row.mode);
  if (scenario == "a late worker joins the first step") {
    return ALateWorkerJoinsTheFirstStep(cluster);
  }
  if (scenario == "the slow worker catches up") return TheSlowWorkerCatchesUp(cluster);
  if (scenario == "a push without a clock") return APushWithoutAClock(cluster);
  if (scenario == "a reader pulls without a worker id") {
    return AReaderPullsWithoutAWorkerId(cluster);
  }
  return absl::StrCat("no scenario '", scenario, "'");
}

class ConsistencyTest : public ::testing::TestWithParam<Row> {};

TEST_P(ConsistencyTest, TraceMatchesTheTable) {
  EXPECT_EQ(RunScenario(GetParam()), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(Modes, ConsistencyTest, ::testing::ValuesIn(kRows),
                         [](const ::testing::TestParamInfo<Row>& info) {
                           std::string name = absl::StrCat(info.param.scenario, "_",
                                                           ConsistencyMode_Name(info.param.mode));
                           for (char& c : name) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// Only async answers a push-pull's pulled shards before the push ends: the
// other modes' pulls wait for what the whole push does.
TEST(ConsistencyTest, OnlyAsyncPullsOverlapThePush) {
  for (ConsistencyMode mode : {ASYNC, SYNC, SSP}) {
    EXPECT_EQ(Cluster(mode).PullsOverlapPush(), mode == ASYNC) << ConsistencyMode_Name(mode);
  }
}

// A pull held for the other workers (sync's step, SSP's bound) says how
// long it was held: here until worker 1 pushes, at least 30 ms after the
// pull began; async holds nothing.
TEST(ConsistencyTest, APullSaysHowLongTheServerHeldItForTheOthers) {
  for (ConsistencyMode mode : {ASYNC, SYNC, SSP}) {
    Cluster c(mode);
    int64_t min_version = 0, clock = -1;
    if (mode == SYNC) {
      ASSERT_EQ(c.Push(0, 0, 1, -1), "ACCUMULATED");
      min_version = 1;  // the step, once worker 1 pushes
    } else if (mode == SSP) {
      ASSERT_EQ(c.Push(0, 0, 1, 0), "APPLIED");
      ASSERT_EQ(c.Push(0, 0, 1, 1, 2), "APPLIED/1");
      clock = 2;  // two clocks ahead of worker 1
    }
    std::thread other([&] {
      if (mode == ASYNC) return;
      absl::SleepFor(absl::Milliseconds(30));  // the time the pull is held for
      c.Push(1, 0, 1, mode == SSP ? 0 : -1);
    });
    auto pulled = c.PullResponse(0, min_version, clock, absl::Seconds(30));
    other.join();
    ASSERT_TRUE(pulled.ok()) << pulled.status();
    if (mode == ASYNC) {
      EXPECT_EQ(pulled->waited_us(), 0);
    } else {
      EXPECT_GE(pulled->waited_us(), 25'000) << ConsistencyMode_Name(mode);
      EXPECT_LT(pulled->waited_us(), 30'000'000) << ConsistencyMode_Name(mode);
    }
  }
}

// Every mode a config may name has a row of each scenario.
TEST(ConsistencyTest, EveryModeHasEveryScenario) {
  std::map<std::string, int> modes_per_scenario;
  for (const Row& row : kRows) ++modes_per_scenario[row.scenario];
  for (const auto& [scenario, modes] : modes_per_scenario) {
    EXPECT_EQ(modes, 3) << scenario;
  }
}

}  // namespace
}  // namespace fulcrum
