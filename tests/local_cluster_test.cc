// The local launcher end to end: real ps_server and worker processes on
// 127.0.0.1 training on Fashion-MNIST, and the failures it must stop on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/child_process.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

// The pid of ps 1 as the launcher reports starting it, or -1.
pid_t StartedPs1(ChildProcess& cluster) {
  auto started = cluster.WaitForLine("[launcher] started ps 1 (pid ", absl::Seconds(60));
  std::smatch match;
  if (!started || !std::regex_search(*started, match, std::regex("pid (\\d+)"))) return -1;
  return std::stoi(match[1]);
}

std::vector<std::string> Launcher(std::vector<std::string> args) {
  std::vector<std::string> argv = {RunfilePath("deploy/local_cluster"),
                                   "--bin_dir=" + RunfilePath("")};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// Two epochs: in async mode the chief's test accuracy is of the model at the
// end of its own share, and a worker that starts late (a loaded machine)
// leaves the chief's first epoch at 0.76 where it is 0.84 otherwise.
// With --tls: mutual TLS between the processes, certificates made for the
// run, as a cluster across machines runs.
TEST(LocalClusterTest, TrainsFashionMnistAndWritesSummaryAndCurves) {
  const std::string summary = TempPath("summary.json");
  const std::string metrics = TempPath("metrics.jsonl");
  ChildProcess cluster("cluster",
                       Launcher({"--num_ps=2", "--num_workers=2", "--mode=async", "--tls",
                                 "--summary_json=" + summary, "--metrics_jsonl=" + metrics, "--",
                                 "--epochs=2", "--hidden=64", "--log_every_steps=100"}));
  ASSERT_EQ(cluster.Wait(absl::Seconds(240)), 0);
  EXPECT_TRUE(cluster.HasLine("[launcher] mutual TLS, with certificates in "));
  EXPECT_TRUE(cluster.HasLine("(mutual TLS)"));
  EXPECT_TRUE(cluster.HasLine("[ps 1] "));
  EXPECT_TRUE(cluster.HasLine("[worker 1] "));
  EXPECT_TRUE(cluster.HasLine("[launcher] ps 0 exited with status 0"));

  const std::string json = ReadWholeFile(summary);
  std::smatch match;
  ASSERT_TRUE(std::regex_search(json, match, std::regex("\"test_accuracy\": ([0-9.]+)"))) << json;
  EXPECT_GT(std::stod(match[1]), 0.80);
  EXPECT_THAT(json, HasSubstr("\"mode\": \"async\""));
  EXPECT_THAT(json, HasSubstr("\"num_workers\": 2"));
  EXPECT_THAT(json, HasSubstr("\"num_ps\": 2"));

  const std::string svg = TempPath("curves.svg");
  ChildProcess plot(
      "plot", {"/usr/bin/python3", RunfilePath("deploy/plot_training_curves.py"), metrics, svg});
  ASSERT_EQ(plot.Wait(absl::Seconds(60)), 0);
  EXPECT_THAT(ReadWholeFile(svg), HasSubstr("test accuracy"));
  EXPECT_THAT(ReadWholeFile(svg), HasSubstr("<polyline"));
}

// By default plaintext on 127.0.0.1: the launcher makes tokens for the
// run, which every call carries, the chief's JobDone the control token.
TEST(LocalClusterTest, TrainsWithBfloat16OnTheWire) {
  const std::string summary = TempPath("bf16-summary.json");
  ChildProcess cluster("cluster", Launcher({"--num_ps=2", "--num_workers=2", "--mode=sync",
                                            "--summary_json=" + summary, "--", "--epochs=1",
                                            "--hidden=64", "--wire_dtype=bfloat16"}));
  ASSERT_EQ(cluster.Wait(absl::Seconds(240)), 0);
  EXPECT_TRUE(cluster.HasLine("[launcher] plaintext on 127.0.0.1, every call carrying a token"));
  EXPECT_TRUE(cluster.HasLine("(plaintext, tokens)"));
  EXPECT_FALSE(cluster.HasLine("UNAUTHENTICATED"));
  const std::string json = ReadWholeFile(summary);
  std::smatch match;
  ASSERT_TRUE(std::regex_search(json, match, std::regex("\"test_accuracy\": ([0-9.]+)"))) << json;
  EXPECT_GT(std::stod(match[1]), 0.80);
}

// Replicated shards through the launcher, which starts an etcd for them:
// a server killed (-9) mid-run and never restarted fails over to its
// units' backups, the copies it held are made again on the others, and
// the job in `mode` with `worker_args` completes with the summary's
// `figure` above `bar` and no process restarted. `promoted`: a line of the
// promotion, whose epoch is one past the table's last change (the
// variables' creation; the tables', after them).
// `security`: the launcher's security flag ("": its default).
void TrainThroughAServerLostForGood(const std::string& mode,
                                    const std::vector<std::string>& worker_args,
                                    const std::string& promoted, const std::string& figure,
                                    double bar, const std::string& security = "") {
  const std::string summary = TempPath("replicated-" + mode + "-" + figure + ".json");
  std::vector<std::string> args = {"--num_ps=3", "--num_workers=2", "--mode=" + mode,
                                   "--replication=2", "--summary_json=" + summary};
  if (!security.empty()) args.push_back(security);
  args.insert(args.end(), {"--", "--log_every_steps=100"});
  args.insert(args.end(), worker_args.begin(), worker_args.end());
  ChildProcess cluster("cluster", Launcher(args));
  const pid_t ps1 = StartedPs1(cluster);
  ASSERT_GT(ps1, 0);
  ASSERT_TRUE(cluster.WaitForLine("step 100/", absl::Seconds(120)));
  ASSERT_EQ(kill(ps1, SIGKILL), 0);
  ASSERT_EQ(cluster.Wait(absl::Seconds(300)), 0);
  EXPECT_TRUE(cluster.HasLine("[launcher] etcd on 127.0.0.1:"));
  if (security == "--tls") {
    EXPECT_TRUE(cluster.HasLine("(mutual TLS) coordinates"));
  }
  EXPECT_TRUE(cluster.HasLine(", a backup of 127.0.0.1:"));
  EXPECT_TRUE(cluster.HasLine(", backed up on 127.0.0.1:"));
  EXPECT_TRUE(cluster.HasLine("[launcher] ps 1 exited with status 137"));
  EXPECT_TRUE(cluster.HasLine("lost its lease in etcd: its shards fail over"));
  // One change of the table promotes the backups and makes the lost
  // copies again on the others, which catch up from their primaries.
  EXPECT_TRUE(cluster.HasLine(promoted));
  EXPECT_TRUE(cluster.HasLine(", a copy of 127.0.0.1:"));
  EXPECT_TRUE(cluster.HasLine(" has caught up"));
  EXPECT_TRUE(cluster.HasLine(" is ready"));
  EXPECT_FALSE(cluster.HasLine("[launcher] restarting"));
  const std::string json = ReadWholeFile(summary);
  std::smatch match;
  ASSERT_TRUE(std::regex_search(json, match, std::regex("\"" + figure + "\": ([0-9.]+)"))) << json;
  EXPECT_GT(std::stod(match[1]), bar);
}

void TrainMlpThroughAServerLostForGood(const std::string& mode, const std::string& security = "") {
  TrainThroughAServerLostForGood(mode, {"--epochs=1", "--hidden=64"}, "the primary now (epoch 3)",
                                 "test_accuracy", 0.80, security);
}

// With --tls, the run's etcd serves mutual TLS too.
TEST(LocalClusterTest, SyncTrainsWithReplicatedShardsThroughAServerLostForGood) {
  TrainMlpThroughAServerLostForGood("sync", "--tls");
}
TEST(LocalClusterTest, AsyncTrainsWithReplicatedShardsThroughAServerLostForGood) {
  TrainMlpThroughAServerLostForGood("async");
}
TEST(LocalClusterTest, SspTrainsWithReplicatedShardsThroughAServerLostForGood) {
  TrainMlpThroughAServerLostForGood("ssp");
}

// The table-heavy CTR model (26 tables, bounded), its tables' ranges
// replicated as the shards are.
TEST(LocalClusterTest, TrainsTheCtrModelThroughAServerLostForGood) {
  TrainThroughAServerLostForGood(
      "async",
      {"--model=ctr", "--dataset=synthetic_ctr", "--ctr_vocabulary=100000",
       "--ctr_train_examples=150000", "--ctr_test_examples=20000", "--epochs=2", "--hidden=32",
       "--batch_size=256", "--learning_rate=0.002", "--embedding_learning_rate=0.1",
       "--embedding_max_rows=5000"},
      "' range 1: the primary now (epoch 4)", "test_auc", 0.82);
}

// A copy for each server more than there are is refused.
TEST(LocalClusterTest, MoreCopiesThanServersIsAFlagError) {
  ChildProcess three("three", Launcher({"--num_ps=2", "--replication=3"}));
  EXPECT_EQ(three.Wait(absl::Seconds(60)), 2);
  EXPECT_TRUE(three.HasLine("--replication=3 needs between 1 and --num_ps (2) servers"));
}

TEST(LocalClusterTest, PlaintextWithTlsIsAFlagError) {
  ChildProcess both("both", Launcher({"--num_ps=1", "--insecure", "--tls"}));
  EXPECT_EQ(both.Wait(absl::Seconds(60)), 2);
  EXPECT_TRUE(both.HasLine("--insecure (plaintext) cannot go with --tls or --tls_dir"));
}

TEST(LocalClusterTest, UnknownWireDtypeIsAFlagError) {
  ChildProcess cluster("cluster",
                       Launcher({"--num_ps=1", "--num_workers=1", "--", "--wire_dtype=fp8"}));
  EXPECT_EQ(cluster.Wait(absl::Seconds(120)), 2);
  EXPECT_TRUE(cluster.HasLine("--wire_dtype: 'fp8' is not one of float32, bfloat16, float16"));
}

TEST(LocalClusterTest, NoChannelsIsAFlagError) {
  ChildProcess cluster("cluster",
                       Launcher({"--num_ps=1", "--num_workers=1", "--", "--channels_per_ps=0"}));
  EXPECT_EQ(cluster.Wait(absl::Seconds(120)), 2);
  EXPECT_TRUE(cluster.HasLine("--channels_per_ps: must be >= 1, got 0"));
}

TEST(LocalClusterTest, WorkersServePrometheusMetrics) {
  ChildProcess cluster("cluster", Launcher({"--num_ps=1", "--num_workers=1", "--mode=async", "--",
                                            "--epochs=3", "--hidden=64", "--log_every_steps=100",
                                            "--metrics_port=0", "--metrics_host=127.0.0.1"}));
  auto line = cluster.WaitForLine("metrics on http://127.0.0.1:", absl::Seconds(60));
  std::smatch match;
  ASSERT_TRUE(line && std::regex_search(*line, match, std::regex(":(\\d+)/metrics")));
  ASSERT_TRUE(cluster.WaitForLine("step 200/", absl::Seconds(120)));
  const std::string metrics = HttpGet(std::stoi(match[1]), "/metrics");
  std::smatch steps;
  ASSERT_TRUE(std::regex_search(metrics, steps, std::regex("fulcrum_worker_steps_total (\\d+)")))
      << metrics;
  EXPECT_GE(std::stoi(steps[1]), 200);
  EXPECT_THAT(metrics, HasSubstr("fulcrum_worker_step_duration_seconds_count"));
  EXPECT_THAT(metrics, HasSubstr("fulcrum_worker_global_step"));
  EXPECT_THAT(metrics, HasSubstr("fulcrum_worker_examples_per_second"));
  EXPECT_EQ(cluster.Wait(absl::Seconds(120)), 0);
}

int CountOf(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// --trace_file: every process traces (the workers steps 5 to 9), and the
// launcher joins their files into one when the run ends.
TEST(LocalClusterTest, JoinsTheProcessesTracesIntoOne) {
  const std::string trace = TempPath("job.json");
  ChildProcess cluster(
      "cluster", Launcher({"--num_ps=2", "--num_workers=2", "--mode=async", "--trace_file=" + trace,
                           "--", "--epochs=1", "--hidden=64", "--trace_steps=5:9"}));
  EXPECT_EQ(cluster.Wait(absl::Seconds(120)), 0);
  EXPECT_TRUE(cluster.HasLine("trace of 4 process(es) written to " + trace));
  const std::string text = ReadWholeFile(trace);
  for (const std::string process : {"ps 0", "ps 1", "worker 0", "worker 1"}) {
    EXPECT_THAT(text, HasSubstr("\"args\": {\"name\": \"" + process + "\"}")) << process;
  }
  // 5 steps of each worker, and the parts' files gone.
  EXPECT_EQ(CountOf(text, "\"name\": \"step 9\""), 2);
  EXPECT_EQ(CountOf(text, "\"name\": \"step 10\""), 0);
  EXPECT_FALSE(std::filesystem::exists(TempPath("job.ps0.json")));
  EXPECT_FALSE(std::filesystem::exists(TempPath("job.worker1.json")));
}

TEST(LocalClusterTest, AFailingWorkerStopsTheClusterWithItsStatus) {
  // The workers reject the flag; the servers must not be left running.
  ChildProcess cluster("cluster", Launcher({"--num_ps=1", "--num_workers=2", "--", "--model=cnn"}));
  EXPECT_EQ(cluster.Wait(absl::Seconds(120)), 2);
  EXPECT_TRUE(cluster.HasLine("--model: 'cnn' is not one of mlp, softmax"));
  EXPECT_TRUE(cluster.HasLine("failed; stopping every process"));
  EXPECT_TRUE(cluster.HasLine("[launcher] ps 0 exited with status 0"));
}

// A durable cluster: kill -9 of a server is survived by restarting it on its
// port; it restores the newest checkpoint and the job completes.
TEST(LocalClusterTest, AKilledServerIsRestartedRestoresAndTheJobCompletes) {
  const std::string summary = TempPath("restart-summary.json");
  ChildProcess cluster(
      "cluster",
      Launcher({"--num_ps=2", "--num_workers=2", "--mode=sync",
                "--checkpoint_dir=" + TempPath("restart-checkpoints"), "--max_restarts=2",
                "--ps_args=--lease_timeout_ms=5000 --max_memory_mb=512",
                "--summary_json=" + summary, "--", "--epochs=2", "--hidden=64",
                "--checkpoint_every_steps=100", "--log_every_steps=50"}));
  const pid_t ps1 = StartedPs1(cluster);
  ASSERT_GT(ps1, 0);
  std::smatch match;
  ASSERT_TRUE(cluster.WaitForLine("complete:", absl::Seconds(120)));  // one to restore
  ASSERT_EQ(kill(ps1, SIGKILL), 0);
  EXPECT_EQ(cluster.Wait(absl::Seconds(300)), 0);
  EXPECT_TRUE(cluster.HasLine("[launcher] ps 1 exited with status 137"));
  EXPECT_TRUE(cluster.HasLine("[launcher] restarting ps 1 (restart 1 of 2)"));
  EXPECT_TRUE(cluster.HasLine("restoring from checkpoint"));
  const std::string json = ReadWholeFile(summary);
  ASSERT_TRUE(std::regex_search(json, match, std::regex("\"test_accuracy\": ([0-9.]+)"))) << json;
  EXPECT_GT(std::stod(match[1]), 0.80);
}

TEST(LocalClusterTest, WorkerRefusesServersInAnotherMode) {
  // The workers are told async (the last --mode wins); the servers run sync.
  ChildProcess cluster(
      "cluster", Launcher({"--num_ps=1", "--num_workers=1", "--mode=sync", "--", "--mode=async"}));
  EXPECT_EQ(cluster.Wait(absl::Seconds(120)), 1);
  EXPECT_TRUE(cluster.HasLine("worker --mode=async but ps 0"));
  EXPECT_TRUE(cluster.HasLine("runs sync; start both with the same --mode"));
}

// MultiWorkerMirroredStrategy: no parameter servers; the workers
// all-reduce. The chief checkpoints in the servers' format, and a second
// run with the same directory resumes there.
// The first run shards the optimizer; the second restores its checkpoint
// with every slot on every worker.
TEST(LocalClusterTest, TrainsWithoutServersByAllReduceAndResumes) {
  const std::string summary = TempPath("mwms-summary.json");
  const std::string checkpoints = TempPath("mwms-checkpoints");
  const std::vector<std::string> flags = {"--num_ps=0",
                                          "--num_workers=3",
                                          "--strategy=multi_worker_mirrored",
                                          "--checkpoint_dir=" + checkpoints,
                                          "--summary_json=" + summary,
                                          "--"};
  std::vector<std::string> first = flags;
  first.insert(first.end(),
               {"--epochs=1", "--hidden=64", "--checkpoint_every_steps=100", "--shard_optimizer"});
  ChildProcess cluster("cluster", Launcher(first));
  ASSERT_EQ(cluster.Wait(absl::Seconds(240)), 0);
  EXPECT_FALSE(cluster.HasLine("[ps 0]"));
  EXPECT_TRUE(cluster.HasLine("all-reduce: rank 2 of 3"));
  EXPECT_TRUE(cluster.HasLine("on this worker (3 of 3)"));
  const std::string json = ReadWholeFile(summary);
  std::smatch match;
  ASSERT_TRUE(std::regex_search(json, match, std::regex("\"test_accuracy\": ([0-9.]+)"))) << json;
  EXPECT_GT(std::stod(match[1]), 0.80);
  EXPECT_THAT(json, HasSubstr("\"mode\": \"multi_worker_mirrored\""));
  EXPECT_THAT(json, HasSubstr("\"num_ps\": 0"));

  // 312 steps an epoch for 3 workers of 64: the last checkpoint is step 312.
  std::vector<std::string> second = flags;
  second.insert(second.end(), {"--epochs=2", "--hidden=64"});
  ChildProcess resumed("resumed", Launcher(second));
  ASSERT_EQ(resumed.Wait(absl::Seconds(240)), 0);
  EXPECT_TRUE(resumed.HasLine("restored 4 variable(s) at step 312"));
  EXPECT_TRUE(resumed.HasLine("resuming at step 312 of 624 (epoch 2)"));
  EXPECT_TRUE(resumed.HasLine("after 624 global steps"));
  EXPECT_FALSE(resumed.HasLine("the optimizer updates floats"));
}

// An all-reduce worker killed under the launcher: the launcher lets the
// others go on (they regroup), and exits with the chief's status.
// Plaintext (--insecure): the workers' streams to each other carry the
// run's cluster token.
TEST(LocalClusterTest, AKilledAllReduceWorkerIsLeftBehind) {
  ChildProcess cluster("cluster", Launcher({"--num_ps=0", "--num_workers=3",
                                            "--strategy=multi_worker_mirrored", "--insecure", "--",
                                            "--epochs=2", "--hidden=64", "--log_every_steps=50"}));
  const std::optional<std::string> started =
      cluster.WaitForLine("[launcher] started worker 2 (pid ", absl::Seconds(60));
  ASSERT_TRUE(started.has_value());
  const pid_t pid = std::stoi(started->substr(started->rfind("pid ") + 4));
  ASSERT_TRUE(cluster.WaitForLine("[worker 2] ", absl::Seconds(60)).has_value());
  ASSERT_TRUE(cluster.WaitForLine("step 100/", absl::Seconds(120)).has_value());
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_EQ(cluster.Wait(absl::Seconds(240)), 0);
  EXPECT_TRUE(cluster.HasLine("[launcher] worker 2 exited with status 137"));
  EXPECT_TRUE(cluster.HasLine("the group is now ranks 0, 1"));
  EXPECT_FALSE(cluster.HasLine("stopping every process"));
  EXPECT_FALSE(cluster.HasLine("refused a collective stream"));
}

// With --max_restarts the launcher starts a killed all-reduce worker again,
// and it rejoins the running group. The optimizer is sharded: the killed
// worker's part of the slots starts again, and the rejoined one is dealt
// its part from the others. The two left are held (SIGSTOP) from their
// regroup until the restarted worker is up: on a fast machine they would
// otherwise finish the job before it has loaded its data.
TEST(LocalClusterTest, ARestartedAllReduceWorkerRejoins) {
  ChildProcess cluster(
      "cluster", Launcher({"--num_ps=0", "--num_workers=3", "--strategy=multi_worker_mirrored",
                           "--max_restarts=1", "--", "--epochs=4", "--hidden=64",
                           "--log_every_steps=50", "--shard_optimizer"}));
  std::vector<pid_t> pids;
  for (int w = 0; w < 3; ++w) {
    const std::optional<std::string> started = cluster.WaitForLine(
        absl::StrCat("[launcher] started worker ", w, " (pid "), absl::Seconds(60));
    ASSERT_TRUE(started.has_value());
    pids.push_back(std::stoi(started->substr(started->rfind("pid ") + 4)));
  }
  ASSERT_TRUE(cluster.WaitForLine("[worker 1] ", absl::Seconds(60)).has_value());
  ASSERT_TRUE(cluster.WaitForLine("step 100/", absl::Seconds(120)).has_value());
  const size_t killed = cluster.lines().size();
  ASSERT_EQ(kill(pids[1], SIGKILL), 0);
  ASSERT_TRUE(cluster.WaitForLine("the group is now ranks 0, 2 (leader 0)", absl::Seconds(120))
                  .has_value());
  ASSERT_EQ(kill(pids[0], SIGSTOP), 0);
  ASSERT_EQ(kill(pids[2], SIGSTOP), 0);
  // Only the restarted worker starts serving after the kill (before or
  // after the regroup's line was read).
  const bool restarted =
      cluster.WaitForLine("serving peers on", absl::Seconds(120), killed).has_value();
  ASSERT_EQ(kill(pids[0], SIGCONT), 0);
  ASSERT_EQ(kill(pids[2], SIGCONT), 0);
  ASSERT_TRUE(restarted);
  ASSERT_EQ(cluster.Wait(absl::Seconds(240)), 0);
  EXPECT_TRUE(cluster.HasLine("[launcher] restarting worker 1 (restart 1 of 1)"));
  EXPECT_TRUE(cluster.HasLine("the group is now ranks 0, 2 (leader 0)"));
  EXPECT_TRUE(cluster.HasLine("the group is now ranks 0, 1, 2 (leader 0)"));
  EXPECT_TRUE(cluster.HasLine("were held by the worker(s) lost"));
  EXPECT_TRUE(cluster.HasLine("[launcher] worker 1 exited with status 0"));
}

// An all-reduce job is complete once its chief has finished: a worker
// still running after the grace (one restarted after the group's last step
// waits to be invited into a group that has ended) is stopped, and the
// launcher exits with the chief's status. The workers here are a script:
// the chief (the one given --summary_json) finishes at once, the other
// never does.
TEST(LocalClusterTest, AnAllReduceWorkerStillRunningOnceTheChiefFinishedIsStopped) {
  const std::string script = TempPath("worker.sh");
  std::ofstream(script) << "#!/bin/sh\n"
                           "case \" $* \" in *' --summary_json='*) echo trained; exit 0;; esac\n"
                           "echo joining; exec sleep 600\n";
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  ChildProcess cluster(
      "cluster", Launcher({"--num_ps=0", "--num_workers=2", "--strategy=multi_worker_mirrored",
                           "--insecure", "--stop_timeout_secs=1", "--worker_command=" + script,
                           "--summary_json=" + TempPath("summary.json")}));
  ASSERT_EQ(cluster.Wait(absl::Seconds(60)), 0);
  EXPECT_TRUE(cluster.HasLine("[worker 1] joining"));
  EXPECT_TRUE(cluster.HasLine("[launcher] worker 1 is still running 1s after the chief finished"));
}

// MirroredStrategy: one worker, two local replicas, nothing else.
TEST(LocalClusterTest, MirroredTrainsOneWorkerAlone) {
  ChildProcess cluster("cluster",
                       Launcher({"--num_ps=0", "--num_workers=1", "--strategy=mirrored", "--",
                                 "--epochs=1", "--hidden=64", "--local_replicas=2"}));
  ASSERT_EQ(cluster.Wait(absl::Seconds(240)), 0);
  EXPECT_TRUE(cluster.HasLine("on 2 local replica(s), mirrored"));
  EXPECT_TRUE(cluster.HasLine("final test accuracy 0.8"));
}

TEST(LocalClusterTest, StrategyMistakesAreFlagErrors) {
  ChildProcess no_servers("no_servers", Launcher({"--num_ps=0", "--num_workers=1"}));
  EXPECT_EQ(no_servers.Wait(absl::Seconds(60)), 2);
  EXPECT_TRUE(no_servers.HasLine("use --num_ps=0 with --strategy=multi_worker_mirrored"));
  ChildProcess unknown("unknown", Launcher({"--num_ps=0", "--num_workers=1", "--strategy=ring"}));
  EXPECT_EQ(unknown.Wait(absl::Seconds(60)), 2);
  EXPECT_TRUE(unknown.HasLine("--strategy: 'ring' is not one of parameter_server"));
  ChildProcess two("two", Launcher({"--num_ps=0", "--num_workers=2", "--strategy=mirrored"}));
  EXPECT_EQ(two.Wait(absl::Seconds(60)), 2);
  EXPECT_TRUE(two.HasLine("--strategy=mirrored trains on one worker, but the cluster has 2"));
  ChildProcess async("async", Launcher({"--num_ps=0", "--num_workers=2",
                                        "--strategy=multi_worker_mirrored", "--", "--mode=async"}));
  EXPECT_EQ(async.Wait(absl::Seconds(60)), 2);
  EXPECT_TRUE(async.HasLine("is synchronous; leave --mode at sync"));
}

TEST(LocalClusterTest, MissingDataIsNamed) {
  ChildProcess cluster("cluster", Launcher({"--num_ps=1", "--num_workers=1", "--",
                                            "--data_dir=" + TempPath("no-such-dir")}));
  EXPECT_NE(cluster.Wait(absl::Seconds(120)), 0);
  EXPECT_TRUE(cluster.HasLine("apt-get install dataset-fashion-mnist"));
}

// The CTR model through the launcher: embedding tables on two servers,
// bounded to a fifth of the ids they see, three async workers, synthetic
// data whose best AUC the summary reports.
TEST(LocalClusterTest, TrainsTheCtrModelWithBoundedTables) {
  const std::string summary = TempPath("ctr-summary.json");
  ChildProcess cluster(
      "cluster",
      Launcher({"--num_ps=2", "--num_workers=3", "--mode=async", "--summary_json=" + summary, "--",
                "--model=ctr", "--dataset=synthetic_ctr", "--ctr_vocabulary=100000",
                "--ctr_train_examples=150000", "--ctr_test_examples=20000", "--epochs=2",
                "--hidden=32", "--batch_size=256", "--learning_rate=0.002",
                "--embedding_learning_rate=0.1", "--embedding_max_rows=5000",
                "--log_every_steps=100"}));
  ASSERT_EQ(cluster.Wait(absl::Seconds(300)), 0);
  const std::string json = ReadWholeFile(summary);
  std::smatch auc, best;
  ASSERT_TRUE(std::regex_search(json, auc, std::regex("\"test_auc\": ([0-9.]+)"))) << json;
  ASSERT_TRUE(std::regex_search(json, best, std::regex("\"ground_truth_auc\": ([0-9.]+)")));
  // Untrained is 0.5, the data's best about 0.9; measured 0.85-0.86.
  EXPECT_GT(std::stod(auc[1]), 0.82);
  EXPECT_LT(std::stod(auc[1]), std::stod(best[1]) + 0.01);
  EXPECT_THAT(json, HasSubstr("\"test_logloss\""));
  // Each server kept its bound, evicting the rest.
  EXPECT_TRUE(cluster.HasLine("[ps 1] "));
  std::smatch table;
  const auto line =
      std::find_if(cluster.lines().begin(), cluster.lines().end(), [&](const std::string& l) {
        return std::regex_search(l, table,
                                 std::regex("embedding table 'field_0': (\\d+) rows of 5000, \\d+ "
                                            "candidates, (\\d+) evictions"));
      });
  ASSERT_NE(line, cluster.lines().end());
  EXPECT_EQ(std::stoi(table[1]), 5000);
  EXPECT_GT(std::stoi(table[2]), 0);
}

// Criteo TSV files the test writes: the model learns their signal from the
// training file streamed (--stream_data, a buffer of 1,000 of the 6,000),
// and a malformed line stops the worker naming the file and the line.
TEST(LocalClusterTest, TrainsOnCriteoFilesAndNamesABadLine) {
  const std::string dir = TempPath("criteo");
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  // The label is 1 when the first category is one of a few values or the
  // first integer is large; the rest is noise, some of it missing.
  auto write = [&](const std::string& name, int lines, uint32_t seed) {
    std::ofstream out(dir + "/" + name);
    uint32_t x = seed;
    auto next = [&x] { return x = x * 1664525u + 1013904223u; };
    for (int i = 0; i < lines; ++i) {
      const uint32_t category = next() % 40, count = next() % 100;
      const bool click = category < 8 || count > 90;
      out << (click ? 1 : 0) << '\t' << count;
      for (int f = 1; f < 13; ++f)
        out << '\t' << (next() % 3 == 0 ? "" : std::to_string(next() % 50));
      out << '\t' << std::hex << 0x1000 + category << std::dec;
      for (int f = 1; f < 26; ++f) {
        out << '\t';
        if (next() % 4 != 0) out << std::hex << (next() % 5000) << std::dec;
      }
      out << '\n';
    }
  };
  write("train.txt", 6000, 1);
  write("test.txt", 1000, 2);
  const std::string summary = TempPath("criteo-summary.json");
  ChildProcess cluster(
      "cluster",
      Launcher({"--num_ps=1", "--num_workers=1", "--mode=async", "--summary_json=" + summary, "--",
                "--model=ctr", "--dataset=criteo", "--data_dir=" + dir, "--stream_data",
                "--shuffle_buffer=1000", "--epochs=3", "--hidden=16", "--batch_size=64",
                "--embedding_dim=4", "--learning_rate=0.005", "--embedding_learning_rate=0.2"}));
  ASSERT_EQ(cluster.Wait(absl::Seconds(240)), 0);
  EXPECT_TRUE(cluster.HasLine("6000 training examples of 13 features (streamed, shuffled 1000"));
  std::smatch auc;
  const std::string json = ReadWholeFile(summary);
  ASSERT_TRUE(std::regex_search(json, auc, std::regex("\"test_auc\": ([0-9.]+)"))) << json;
  EXPECT_GT(std::stod(auc[1]), 0.9);  // the rule is learnable; untrained is 0.5

  std::ofstream(dir + "/train.txt", std::ios::app) << "1\t2\t3\n";
  ChildProcess bad("bad", Launcher({"--num_ps=1", "--num_workers=1", "--", "--model=ctr",
                                    "--dataset=criteo", "--data_dir=" + dir}));
  EXPECT_EQ(bad.Wait(absl::Seconds(120)), 1);
  EXPECT_TRUE(bad.HasLine(dir + "/train.txt:6001: "));
}

// --model=ctr needs categorical data and parameter servers: flag errors.
TEST(LocalClusterTest, CtrMistakesAreFlagErrors) {
  ChildProcess dense("dense", Launcher({"--num_ps=1", "--num_workers=1", "--", "--model=ctr"}));
  EXPECT_NE(dense.Wait(absl::Seconds(60)), 0);
  EXPECT_TRUE(dense.HasLine("--model=ctr needs categorical fields"));
  ChildProcess mlp("mlp",
                   Launcher({"--num_ps=1", "--num_workers=1", "--", "--dataset=synthetic_ctr"}));
  EXPECT_NE(mlp.Wait(absl::Seconds(60)), 0);
  EXPECT_TRUE(mlp.HasLine("train it with --model=ctr"));
}

}  // namespace
}  // namespace fulcrum
