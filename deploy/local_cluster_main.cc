// local_cluster: runs a whole Fulcrum cluster on this machine -- parameter
// servers and workers on 127.0.0.1, each with a TF_CONFIG -- prefixes every
// output line with its process's role and index, restarts a process that
// dies (up to --max_restarts times, as torchrun does), stops every process
// on Ctrl-C or when one fails for good (but a server of replicated shards,
// --replication above 1, whose shards fail over to their backups through
// the etcd the launcher starts), and exits with the chief's status (when
// another process failed first, with that one's).
//
//   local_cluster --num_ps=2 --num_workers=3 --mode=sync -- --epochs=10
//   local_cluster --num_ps=0 --num_workers=3 --strategy=multi_worker_mirrored -- --epochs=10
//   local_cluster --worker_command="python3 examples/torch_fashion_mnist.py" -- --epochs=10
//
// Everything after `--` is passed to every worker; --ps_args to every server.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "common/etcd/local_etcd.h"
#include "common/loopback.h"
#include "common/rpc/credentials.h"
#include "common/subprocess.h"
#include "common/trace.h"
#include "tools/cpp/runfiles/runfiles.h"

ABSL_FLAG(int, num_ps, 2,
          "Parameter servers to start; 0 with the all-reduce strategies, which use none.");
ABSL_FLAG(std::string, strategy, "parameter_server",
          "The workers' --strategy: parameter_server, multi_worker_mirrored (all-reduce between "
          "the workers, --num_ps=0) or mirrored (one worker, --num_ps=0).");
ABSL_FLAG(int, num_workers, 3, "Workers to start; worker 0 is the chief.");
ABSL_FLAG(std::string, mode, "sync", "Consistency mode of servers and workers: sync, async, ssp.");
ABSL_FLAG(int64_t, staleness, 2, "ssp: the bound k.");
ABSL_FLAG(int, replicas_to_aggregate, 0, "sync: gradients per step; 0 means every worker.");
ABSL_FLAG(int, replication, 1,
          "The servers' --replication: copies of each shard, on that many of the --num_ps "
          "servers (docs/replication.md). Above 1 the launcher also starts an etcd on "
          "127.0.0.1 (Debian's etcd-server) for the servers to coordinate through, so that a "
          "server lost for good fails over to its shards' backups and the job goes on.");
ABSL_FLAG(std::string, summary_json, "", "Passed to the chief: where it writes the run's summary.");
ABSL_FLAG(std::string, metrics_jsonl, "",
          "Passed to the chief: where it writes progress and per-epoch metrics.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "A durable cluster: every server restores from and checkpoints to this directory, "
          "and the chief writes checkpoints there (see --ps_args and the worker's "
          "--checkpoint_every_secs). \"\" = none.");
ABSL_FLAG(std::string, ps_args, "",
          "Flags for every parameter server, separated by spaces, e.g. "
          "\"--lease_timeout_ms=3000 --max_memory_mb=512\" (see ps_server --help).");
ABSL_FLAG(std::string, trace_file, "",
          "Write a Chrome trace (Perfetto, chrome://tracing) of the workers' traced steps "
          "(their --trace_steps, after --; 1:100 by default) and the servers' handling of "
          "them here: each process writes its own file beside it (PATH without .json, then "
          ".ps0.json, .worker1.json, ...), joined into PATH when the run ends. Fulcrum's own "
          "workers only (not with --worker_command). \"\" = none.");
ABSL_FLAG(int, max_restarts, 0,
          "A process that exits non-zero or is killed is started again with the same command, "
          "up to this many times each; a server comes back on its port and restores the newest "
          "checkpoint (with --checkpoint_dir), a worker resumes. 0: any failure stops them all, "
          "except that of an all-reduce worker other than the chief: the others go on without "
          "it.");
ABSL_FLAG(std::string, worker_command, "",
          "Runs each worker with this command instead of Fulcrum's worker binary, split on "
          "spaces and found on PATH, e.g. \"python3 examples/torch_fashion_mnist.py\" (a "
          "Python worker on the fulcrum package). It gets the same TF_CONFIG and flags: "
          "--cpu_threads, --strategy, --mode, --staleness, --replicas_to_aggregate, the chief's "
          "--summary_json, --metrics_jsonl and --checkpoint_dir when set, then those after --; "
          "the launcher's among them also as FULCRUM_<FLAG> environment variables "
          "(FULCRUM_TLS_CERT, FULCRUM_INSECURE=1, FULCRUM_AUTH_TOKEN_FILE, ...), which "
          "fulcrum.connect() reads; "
          "and the fulcrum package built under --bin_dir (python/site) ahead of PYTHONPATH. "
          "With --strategy=multi_worker_mirrored, also --bind_host: the program serves its "
          "peers at its TF_CONFIG address (fulcrum.tensorflow.MultiWorkerMirroredStrategy, "
          "fulcrum.collective).");
ABSL_FLAG(bool, tls, false,
          "Mutual TLS between the processes, with a CA and certificates made for this run in a "
          "temporary directory, removed when the launcher exits: what a cluster across "
          "machines runs. Without it (or --tls_dir) the processes, all on 127.0.0.1, talk "
          "plaintext, every call carrying a token made for the run (--auth_token_file, "
          "--control_token_file), as Jupyter guards localhost: other users of the machine "
          "cannot call in, and no TLS is paid for.");
ABSL_FLAG(std::string, tls_dir, "",
          "Mutual TLS from this directory of scripts/make_certs.sh's files: ca.pem, and ps, "
          "chief and worker .pem and .key (and etcd's, for the etcd of --replication >= 2).");
ABSL_FLAG(bool, insecure, false,
          "Plaintext with tokens made for the run: the default, named for scripts that ask for "
          "it; not with --tls or --tls_dir.");
ABSL_FLAG(std::string, bin_dir, "",
          "Directory holding ps_server/ps_server and worker/worker; default: the bazel-bin "
          "tree this launcher was built into.");
ABSL_FLAG(int, start_timeout_secs, 60, "How long a parameter server may take to start listening.");
ABSL_FLAG(int, stop_timeout_secs, 30,
          "After the workers are done (or on failure), how long processes get to exit before "
          "they are killed. Under the all-reduce strategies the job is done once the chief has "
          "finished: a worker still running this long after it is stopped.");

namespace {

volatile sig_atomic_t g_interrupted = 0;
void OnSignal(int) { g_interrupted = 1; }

struct Child {
  std::string label;  // "ps 0", "worker 2"
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "NAME=value": TF_CONFIG, and more for some
  int restarts = 0;
  std::unique_ptr<fulcrum::Subprocess> process;  // stdout and stderr read as lines
  std::optional<int> status;                     // exit code, or 128 + signal
};

// Starts (or starts again) `child` with its argv and environment.
void Start(Child& child) {
  child.status.reset();
  child.process = std::make_unique<fulcrum::Subprocess>(
      child.argv, fulcrum::SubprocessOptions{child.env, true});
  std::printf("[launcher] started %s (pid %d)\n", child.label.c_str(),
              static_cast<int>(child.process->pid()));
  std::fflush(stdout);
}

Child Spawn(const std::string& label, std::vector<std::string> argv, const std::string& tf_config,
            std::vector<std::string> env = {}) {
  Child child;
  child.label = label;
  child.argv = std::move(argv);
  child.env = std::move(env);
  child.env.push_back("TF_CONFIG=" + tf_config);
  Start(child);
  return child;
}

// Prints the child's complete lines with its label; returns them.
std::vector<std::string> Drain(Child& child) {
  std::vector<std::string> lines = child.process->ReadLines();
  for (const std::string& line : lines) {
    std::printf("[%s] %s\n", child.label.c_str(), line.c_str());
  }
  std::fflush(stdout);
  return lines;
}

void Reap(std::vector<Child>& children) {
  for (Child& child : children) {
    if (child.status) continue;
    child.status = child.process->Poll();
    if (child.status) {
      std::printf("[launcher] %s exited with status %d\n", child.label.c_str(), *child.status);
      std::fflush(stdout);
    }
  }
}

// Starts again each child that failed and may restart, once its output
// ended. The rest of the failed are left as they are.
void RestartFailed(std::vector<Child>& children, int max_restarts) {
  for (Child& child : children) {
    if (!child.status || *child.status == 0 || child.restarts >= max_restarts) continue;
    Drain(child);
    ++child.restarts;
    std::printf("[launcher] restarting %s (restart %d of %d)\n", child.label.c_str(),
                child.restarts, max_restarts);
    Start(child);
  }
}

// Relays output for up to `timeout` or until `done` holds; reaps exits.
template <typename Done>
void Pump(std::vector<Child>& children, absl::Duration timeout, Done done) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done() && absl::Now() < deadline) {
    std::vector<pollfd> fds;
    for (const Child& child : children) {
      if (child.process->output_fd() >= 0) {
        fds.push_back({child.process->output_fd(), POLLIN, 0});
      }
    }
    // Exits are noticed within 100 ms even when a child is silent.
    poll(fds.data(), fds.size(), 100);
    for (Child& child : children) Drain(child);
    Reap(children);
  }
}

void StopAll(std::vector<Child>& children, absl::Duration grace) {
  for (Child& child : children) {
    if (!child.status) child.process->Signal(SIGTERM);
  }
  auto all_exited = [&] {
    for (const Child& child : children) {
      if (!child.status) return false;
    }
    return true;
  };
  Pump(children, grace, all_exited);
  for (Child& child : children) {
    if (!child.status) {
      std::printf("[launcher] %s did not stop within %s; killing it\n", child.label.c_str(),
                  absl::FormatDuration(grace).c_str());
      child.process->Signal(SIGKILL);
    }
  }
  Pump(children, absl::Seconds(5), all_exited);
}

// The TF_CONFIG of task `index` of `type` in a cluster of `ps` and
// `workers`.
std::string TaskTfConfig(const std::vector<std::string>& ps,
                         const std::vector<std::string>& workers, const std::string& type,
                         int index) {
  fulcrum::TfConfig config;
  for (const std::string& host : ps) config.mutable_cluster()->add_ps(host);
  for (const std::string& host : workers) config.mutable_cluster()->add_worker(host);
  config.mutable_task()->set_type(type);
  config.mutable_task()->set_index(index);
  return fulcrum::WriteTfConfig(config);
}

using bazel::tools::cpp::runfiles::Runfiles;

// This program's path.
std::string SelfPath() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  return n <= 0 ? std::string() : std::string(self, n);
}

std::string DefaultBinDir() {
  std::string path = SelfPath();
  if (path.empty()) return ".";
  path = path.substr(0, path.rfind('/'));  // .../bazel-bin/deploy
  return path.substr(0, path.rfind('/'));  // .../bazel-bin
}

// A Python --worker_command finds the fulcrum package built beside the
// binaries (<bin>/python/site), before whatever PYTHONPATH held; none when
// it was not built (an installed wheel serves).
std::vector<std::string> PackagePath(const std::string& bin) {
  const std::string site = bin + "/python/site";
  if (!std::filesystem::exists(site + "/fulcrum/__init__.py")) return {};
  const char* inherited = std::getenv("PYTHONPATH");
  return {absl::StrCat("PYTHONPATH=", site, inherited != nullptr && *inherited != '\0' ? ":" : "",
                       inherited != nullptr ? inherited : "")};
}

// The flags a --worker_command gets, also as its environment: "--tls_cert=F"
// as FULCRUM_TLS_CERT=F, "--insecure" as FULCRUM_INSECURE=1, so a program
// that parses no flags (fulcrum.connect(), fulcrum.tensorflow) finds its
// security settings, mode and the chief's files all the same.
std::vector<std::string> FlagsAsEnvironment(const std::vector<std::string>& flags) {
  std::vector<std::string> env;
  for (const std::string& flag : flags) {
    if (!absl::StartsWith(flag, "--")) continue;
    const size_t equals = flag.find('=');
    std::string name = flag.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    env.push_back(absl::StrCat("FULCRUM_", name, "=",
                               equals == std::string::npos ? "1" : flag.substr(equals + 1)));
  }
  return env;
}

// A directory of this run's own (certificates, tokens), in `made`, which
// the caller removes; "" when it cannot be made (printed).
std::string MakeRunDir(std::string* made) {
  char temp[] = "/tmp/fulcrum-run-XXXXXX";
  if (mkdtemp(temp) == nullptr) {
    std::fprintf(stderr, "local_cluster: cannot make a directory in /tmp: %s\n",
                 std::strerror(errno));
    return "";
  }
  return *made = temp;
}

// Writes a random token (32 bytes, in hex) to `path`, readable by its owner
// only. False when it cannot (printed).
bool WriteToken(const std::string& path) {
  unsigned char bytes[32];
  FILE* random = std::fopen("/dev/urandom", "rb");
  const bool read =
      random != nullptr && std::fread(bytes, 1, sizeof(bytes), random) == sizeof(bytes);
  if (random != nullptr) std::fclose(random);
  std::string token;
  for (unsigned char byte : bytes) token += absl::StrFormat("%02x", byte);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const bool written = read && fd >= 0 &&
                       write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  if (fd >= 0) close(fd);
  if (!written) std::fprintf(stderr, "local_cluster: cannot write a token to %s\n", path.c_str());
  return written;
}

// Plaintext, and tokens made for the run in `made`: every process holds
// the cluster token, the servers and the chief the control token too.
std::map<std::string, std::vector<std::string>> InsecureFlags(std::string* made) {
  const std::string dir = MakeRunDir(made);
  const std::string cluster = dir + "/cluster.token", control = dir + "/control.token";
  if (dir.empty() || !WriteToken(cluster) || !WriteToken(control)) return {};
  std::printf(
      "[launcher] plaintext on 127.0.0.1, every call carrying a token made for this run in %s "
      "(--tls for mutual TLS; fulcrumctl --insecure --control_token_file=%s)\n",
      dir.c_str(), control.c_str());
  const std::vector<std::string> both = {"--insecure", "--auth_token_file=" + cluster,
                                         "--control_token_file=" + control};
  return {
      {"ps", both}, {"chief", both}, {"worker", {"--insecure", "--auth_token_file=" + cluster}}};
}

// The security flags of each role ("ps", "chief", "worker"): InsecureFlags
// by default, or mutual TLS (--tls, --tls_dir) from the files in
// --tls_dir, else in `made` (made with
// scripts/make_certs.sh, from this program's runfiles), and then in `etcd`
// the files the run's etcd serves with. Empty on an error, which is
// printed.
std::map<std::string, std::vector<std::string>> SecurityFlags(std::string* made,
                                                              fulcrum::TlsFiles* etcd) {
  if (!absl::GetFlag(FLAGS_tls) && absl::GetFlag(FLAGS_tls_dir).empty()) {
    return InsecureFlags(made);
  }
  const std::vector<std::string> roles = {"ps", "chief", "worker"};
  std::map<std::string, std::vector<std::string>> flags;
  std::string dir = absl::GetFlag(FLAGS_tls_dir);
  if (dir.empty()) {
    dir = MakeRunDir(made);
    if (dir.empty()) return {};
    // Bazel's runfiles: this program's own tree, or the one of the test or
    // tool that runs it (RUNFILES_DIR), which holds this program's data too.
    std::string error;
    std::unique_ptr<Runfiles> runfiles(Runfiles::Create(SelfPath(), &error));
    const std::string script =
        runfiles ? runfiles->Rlocation("fulcrum/scripts/make_certs.sh") : std::string();
    if (script.empty() || access(script.c_str(), X_OK) != 0) {
      std::fprintf(stderr,
                   "local_cluster: scripts/make_certs.sh is not among this program's runfiles "
                   "(%s); run the local_cluster that Bazel built, pass --tls_dir, or leave out "
                   "--tls\n",
                   runfiles ? script.c_str() : error.c_str());
      return {};
    }
    const std::string command =
        absl::StrCat(script, " ", dir, " --roles ps,chief,worker,fulcrumctl,etcd > /dev/null");
    if (std::system(command.c_str()) != 0) {
      std::fprintf(stderr,
                   "local_cluster: making certificates with %s failed (its error is above); "
                   "pass --tls_dir, or leave out --tls\n",
                   script.c_str());
      return {};
    }
  }
  std::printf(
      "[launcher] mutual TLS, with certificates in %s (fulcrumctl --tls_cert=%s/fulcrumctl.pem "
      "--tls_key=%s/fulcrumctl.key --tls_ca=%s/ca.pem)\n",
      dir.c_str(), dir.c_str(), dir.c_str(), dir.c_str());
  for (const std::string& role : roles) {
    flags[role] = {absl::StrCat("--tls_cert=", dir, "/", role, ".pem"),
                   absl::StrCat("--tls_key=", dir, "/", role, ".key"),
                   absl::StrCat("--tls_ca=", dir, "/ca.pem")};
  }
  *etcd = {dir + "/etcd.pem", dir + "/etcd.key", dir + "/ca.pem"};
  return flags;
}

int Run(const std::vector<std::string>& worker_args) {
  const int num_ps = absl::GetFlag(FLAGS_num_ps);
  const int num_workers = absl::GetFlag(FLAGS_num_workers);
  const std::string strategy = absl::GetFlag(FLAGS_strategy);
  const bool all_reduce = strategy != "parameter_server";
  if (num_workers < 1 || num_ps < 0) {
    std::fprintf(stderr, "local_cluster: --num_workers must be >= 1 and --num_ps >= 0\n");
    return 2;
  }
  if (all_reduce != (num_ps == 0)) {
    std::fprintf(stderr,
                 "local_cluster: --strategy=%s %s; use --num_ps=0 with --strategy="
                 "multi_worker_mirrored or mirrored, and --num_ps >= 1 with parameter_server\n",
                 strategy.c_str(), all_reduce ? "uses no parameter servers" : "needs servers");
    return 2;
  }
  const int replication = absl::GetFlag(FLAGS_replication);
  if (!all_reduce && (replication < 1 || replication > num_ps)) {
    std::fprintf(stderr,
                 "local_cluster: --replication=%d needs between 1 and --num_ps (%d) servers, one "
                 "per copy\n",
                 replication, num_ps);
    return 2;
  }
  if (absl::GetFlag(FLAGS_insecure) &&
      (absl::GetFlag(FLAGS_tls) || !absl::GetFlag(FLAGS_tls_dir).empty())) {
    std::fprintf(stderr,
                 "local_cluster: --insecure (plaintext) cannot go with --tls or --tls_dir\n");
    return 2;
  }
  const std::vector<std::string> worker_command =
      absl::StrSplit(absl::GetFlag(FLAGS_worker_command), ' ', absl::SkipWhitespace());
  std::string bin = absl::GetFlag(FLAGS_bin_dir);
  if (bin.empty()) bin = DefaultBinDir();
  std::string run_dir;  // certificates or tokens made for the run, removed at exit
  const auto remove_run_dir = absl::MakeCleanup([&] {
    if (!run_dir.empty()) std::filesystem::remove_all(run_dir);
  });
  fulcrum::TlsFiles etcd_tls;  // plaintext without --tls or --tls_dir
  std::map<std::string, std::vector<std::string>> security = SecurityFlags(&run_dir, &etcd_tls);
  if (security.empty()) return 1;
  const std::string mode = all_reduce ? "sync" : absl::GetFlag(FLAGS_mode);
  // The all-reduce strategies are synchronous, and take no mode flags.
  const std::vector<std::string> mode_flags =
      all_reduce
          ? std::vector<std::string>{}
          : std::vector<std::string>{"--mode=" + mode,
                                     absl::StrCat("--staleness=", absl::GetFlag(FLAGS_staleness)),
                                     absl::StrCat("--replicas_to_aggregate=",
                                                  absl::GetFlag(FLAGS_replicas_to_aggregate))};
  const int max_restarts = absl::GetFlag(FLAGS_max_restarts);
  if (max_restarts < 0) {
    std::fprintf(stderr, "local_cluster: --max_restarts must be >= 0\n");
    return 2;
  }
  // --trace_file: each process's own file, joined into it at the end.
  const std::string trace_file = absl::GetFlag(FLAGS_trace_file);
  if (!trace_file.empty() && !worker_command.empty()) {
    std::fprintf(stderr,
                 "local_cluster: --trace_file traces Fulcrum's own workers; not with "
                 "--worker_command\n");
    return 2;
  }
  std::vector<std::string> trace_parts;
  const auto trace_flag = [&](const std::string& process) {
    trace_parts.push_back(
        absl::StrCat(absl::StripSuffix(trace_file, ".json"), ".", process, ".json"));
    return "--trace_file=" + trace_parts.back();
  };
  const auto join_traces = absl::MakeCleanup([&] {
    std::vector<std::string> written;
    for (const std::string& part : trace_parts) {
      if (std::filesystem::exists(part)) written.push_back(part);
    }
    if (written.empty()) return;
    if (absl::Status s = fulcrum::MergeTraces(written, trace_file); !s.ok()) {
      std::printf("[launcher] the trace files were not joined: %s\n",
                  std::string(s.message()).c_str());
      return;
    }
    for (const std::string& part : written) std::filesystem::remove(part);
    std::printf(
        "[launcher] trace of %zu process(es) written to %s: open it in "
        "https://ui.perfetto.dev or chrome://tracing\n",
        written.size(), trace_file.c_str());
  });
  const std::string checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  std::vector<std::string> ps_flags = mode_flags;
  if (!checkpoint_dir.empty()) ps_flags.push_back("--checkpoint_dir=" + checkpoint_dir);
  // Replicated shards coordinate through an etcd of the run's own.
  std::unique_ptr<fulcrum::LocalEtcd> etcd;
  std::string etcd_dir;
  const auto remove_etcd_dir = absl::MakeCleanup([&] {
    etcd.reset();
    if (!etcd_dir.empty()) std::filesystem::remove_all(etcd_dir);
  });
  const bool replicated = !all_reduce && replication > 1;
  if (replicated) {
    etcd_dir = (std::filesystem::temp_directory_path() / "fulcrum-etcd-XXXXXX").string();
    if (mkdtemp(etcd_dir.data()) == nullptr) {
      std::fprintf(stderr, "local_cluster: cannot make a directory for etcd: %s\n",
                   std::strerror(errno));
      etcd_dir.clear();
      return 1;
    }
    if (etcd_tls.enabled() &&
        (access(etcd_tls.cert.c_str(), R_OK) != 0 || access(etcd_tls.key.c_str(), R_OK) != 0)) {
      std::fprintf(stderr,
                   "local_cluster: --replication=%d runs an etcd over mutual TLS with etcd.pem "
                   "and etcd.key of --tls_dir, and %s is not readable (scripts/make_certs.sh "
                   "DIR --roles etcd makes them with the same CA)\n",
                   replication, etcd_tls.cert.c_str());
      return 1;
    }
    absl::StatusOr<std::unique_ptr<fulcrum::LocalEtcd>> started =
        fulcrum::LocalEtcd::Start(etcd_dir, etcd_tls);
    if (!started.ok()) {
      std::fprintf(stderr, "local_cluster: --replication=%d: %s\n", replication,
                   std::string(started.status().message()).c_str());
      return 1;
    }
    etcd = *std::move(started);
    std::printf("[launcher] etcd on %s (%s) coordinates the replicated shards\n",
                etcd->endpoint().c_str(), etcd_tls.enabled() ? "mutual TLS" : "plaintext");
    ps_flags.push_back(absl::StrCat("--replication=", replication));
    ps_flags.push_back("--etcd=" + etcd->endpoint());
  }
  for (absl::string_view arg :
       absl::StrSplit(absl::GetFlag(FLAGS_ps_args), ' ', absl::SkipWhitespace())) {
    ps_flags.emplace_back(arg);
  }

  // Servers listen on ports they pick (--port=0); parameter-server workers
  // do not listen, so their entries only count them.
  const std::vector<std::string> placeholders_ps(num_ps, "127.0.0.1:0");
  const std::vector<std::string> placeholders_workers(num_workers, "127.0.0.1:0");
  std::vector<Child> children;
  std::vector<std::string> ps_addresses;
  const std::regex listening("listening on (\\S+:\\d+)");
  for (int i = 0; i < num_ps; ++i) {
    std::vector<std::string> argv = {bin + "/ps_server/ps_server", "--port=0",
                                     "--bind_host=127.0.0.1"};
    argv.insert(argv.end(), security["ps"].begin(), security["ps"].end());
    argv.insert(argv.end(), ps_flags.begin(), ps_flags.end());
    if (!trace_file.empty()) argv.push_back(trace_flag(absl::StrCat("ps", i)));
    children.push_back(Spawn(absl::StrCat("ps ", i), argv,
                             TaskTfConfig(placeholders_ps, placeholders_workers, "ps", i)));
    std::string address;
    const absl::Time deadline =
        absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_start_timeout_secs));
    while (address.empty() && !children.back().status && absl::Now() < deadline && !g_interrupted) {
      pollfd fd{children.back().process->output_fd(), POLLIN, 0};
      poll(&fd, 1, 100);
      for (const std::string& line : Drain(children.back())) {
        std::smatch match;
        if (std::regex_search(line, match, listening)) address = match[1];
      }
      Reap(children);
    }
    if (address.empty()) {
      std::printf("[launcher] ps %d did not start listening; stopping\n", i);
      StopAll(children, absl::Seconds(5));
      return 1;
    }
    ps_addresses.push_back(address);
    // Started again, it comes back where the workers know it.
    std::replace(children.back().argv.begin(), children.back().argv.end(), std::string("--port=0"),
                 "--port=" + address.substr(address.rfind(':') + 1));
  }
  // All-reduce workers serve each other on ports picked here, which every
  // worker's TF_CONFIG lists.
  std::vector<std::string> worker_addresses = placeholders_workers;
  if (all_reduce) {
    const std::vector<int> ports = fulcrum::FreeLoopbackPorts(num_workers);
    for (size_t i = 0; i < worker_addresses.size(); ++i) {
      worker_addresses[i] = absl::StrCat("127.0.0.1:", ports[i]);
    }
    std::printf("[launcher] starting %d worker(s), %s, on %s\n", num_workers, strategy.c_str(),
                absl::StrJoin(worker_addresses, ", ").c_str());
  } else {
    std::printf("[launcher] parameter servers: %s; starting %d worker(s), mode %s\n",
                absl::StrJoin(ps_addresses, ", ").c_str(), num_workers, mode.c_str());
  }
  std::fflush(stdout);

  // The workers share this machine's cores: BLAS threads that spin while
  // others wait cost more than they compute (on 2 cores, 2 workers train
  // ~25% faster with 1 thread each than with 2). A --cpu_threads after `--`
  // overrides it (the last flag wins).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::string cpu_threads = absl::StrCat("--cpu_threads=", std::max(1, cores / num_workers));
  const size_t first_worker = children.size();
  const std::vector<std::string> worker_env =
      worker_command.empty() ? std::vector<std::string>{} : PackagePath(bin);
  for (int w = 0; w < num_workers; ++w) {
    std::vector<std::string> argv = worker_command;
    if (argv.empty()) argv.push_back(bin + "/worker/worker");
    argv.push_back(cpu_threads);
    argv.push_back("--strategy=" + strategy);
    if (all_reduce) argv.emplace_back("--bind_host=127.0.0.1");
    argv.insert(argv.end(), mode_flags.begin(), mode_flags.end());
    const std::vector<std::string>& flags = security[w == 0 ? "chief" : "worker"];
    argv.insert(argv.end(), flags.begin(), flags.end());
    if (w == 0) {
      if (!checkpoint_dir.empty()) argv.push_back("--checkpoint_dir=" + checkpoint_dir);
      if (!absl::GetFlag(FLAGS_summary_json).empty()) {
        argv.push_back("--summary_json=" + absl::GetFlag(FLAGS_summary_json));
      }
      if (!absl::GetFlag(FLAGS_metrics_jsonl).empty()) {
        argv.push_back("--metrics_jsonl=" + absl::GetFlag(FLAGS_metrics_jsonl));
      }
    }
    if (!trace_file.empty()) argv.push_back(trace_flag(absl::StrCat("worker", w)));
    std::vector<std::string> env = worker_env;
    if (!worker_command.empty()) {
      const std::vector<std::string> launcher_flags(argv.begin() + worker_command.size(),
                                                    argv.end());
      for (std::string& variable : FlagsAsEnvironment(launcher_flags)) {
        env.push_back(std::move(variable));
      }
    }
    argv.insert(argv.end(), worker_args.begin(), worker_args.end());
    children.push_back(Spawn(absl::StrCat("worker ", w), argv,
                             TaskTfConfig(ps_addresses, worker_addresses, "worker", w), env));
  }

  // Run until every process has exited, one fails for good, or Ctrl-C.
  // All-reduce workers other than the chief may fail: the others regroup
  // without them and go on.
  auto failed = [&]() -> const Child* {
    for (size_t i = 0; i < children.size(); ++i) {
      const Child& child = children[i];
      if (all_reduce && i > first_worker) continue;
      // A server lost for good fails over to its shards' backups.
      if (replicated && i < first_worker) continue;
      if (child.status && *child.status != 0 && child.restarts >= max_restarts) return &child;
    }
    return nullptr;
  };
  auto workers_done = [&] {
    for (size_t i = first_worker; i < children.size(); ++i) {
      if (!children[i].status) return false;
    }
    return true;
  };
  // An all-reduce job is complete once its chief has finished it.
  auto chief_finished = [&] {
    const Child& chief = children[first_worker];
    return all_reduce && chief.status && *chief.status == 0;
  };
  Pump(children, absl::InfiniteDuration(), [&] {
    RestartFailed(children, max_restarts);
    return g_interrupted || failed() != nullptr || workers_done() || chief_finished();
  });
  const absl::Duration grace = absl::Seconds(absl::GetFlag(FLAGS_stop_timeout_secs));
  if (g_interrupted) {
    std::printf("[launcher] interrupted; stopping every process\n");
    StopAll(children, grace);
    return 130;
  }
  if (const Child* bad = failed()) {
    // The chief's own failure, else the first failure: the chief stopped by
    // the launcher says nothing.
    const Child& chief = children[first_worker];
    const int status = chief.status ? *chief.status : *bad->status;
    std::printf("[launcher] %s failed; stopping every process\n", bad->label.c_str());
    StopAll(children, grace);
    return status;
  }
  if (!workers_done()) {
    // The others finish the group's last step with the chief; one still
    // running after the grace restarted too late to be invited into the
    // group, which has ended, and would wait for it until its start-up
    // timeout.
    Pump(children, grace, workers_done);
    for (size_t i = first_worker; i < children.size(); ++i) {
      if (children[i].status) continue;
      std::printf(
          "[launcher] %s is still running %s after the chief finished the job "
          "(restarted after the group's last step?); stopping it\n",
          children[i].label.c_str(), absl::FormatDuration(grace).c_str());
    }
    if (!workers_done()) StopAll(children, absl::Seconds(5));
  }
  // The workers are done: the servers exit on the chief's job-done word.
  auto all_exited = [&] {
    for (const Child& child : children) {
      if (!child.status) return false;
    }
    return true;
  };
  Pump(children, grace, all_exited);
  if (!all_exited()) {
    std::printf("[launcher] a parameter server is still running after the workers finished\n");
    StopAll(children, absl::Seconds(5));
  }
  return *children[first_worker].status;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Runs a Fulcrum cluster on this machine: --num_ps parameter servers (none with the "
      "all-reduce strategies) and --num_workers workers on 127.0.0.1, each with its TF_CONFIG. "
      "Every output line is prefixed with its "
      "process's role and index. A process that dies is started again up to --max_restarts "
      "times; Ctrl-C, or a process failing for good, stops them all. Exits with the chief's "
      "(worker 0's) status.\n\n"
      "  local_cluster --num_ps=2 --num_workers=3 --mode=sync -- --epochs=10\n"
      "  local_cluster --num_ps=0 --num_workers=3 --strategy=multi_worker_mirrored -- --epochs=10\n"
      "  local_cluster --worker_command=\"python3 examples/torch_fashion_mnist.py\" -- "
      "--epochs=10\n"
      "  local_cluster --checkpoint_dir=/tmp/ckpt --max_restarts=3 \\\n"
      "      --ps_args=\"--lease_timeout_ms=5000\" -- --epochs=10 --checkpoint_every_secs=30\n\n"
      "Arguments after -- go to every worker (see worker --help), --ps_args to every server "
      "(see ps_server --help). The processes, all on 127.0.0.1, talk plaintext with tokens "
      "made for the run, or mutual TLS with --tls (certificates made for the run) or "
      "--tls_dir.");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> worker_args(rest.begin() + 1, rest.end());
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  return Run(worker_args);
}
