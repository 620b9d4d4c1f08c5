// ps_server: holds a share of the model's variables and applies the
// optimizer to pushed gradients. See docs/flags.md, "ps_server".
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cluster_flags.h"
#include "common/cluster_spec.h"
#include "common/consistency_mode.h"
#include "common/etcd/etcd_client.h"
#include "common/file_system.h"
#include "common/logging.h"
#include "common/memory_size.h"
#include "common/metrics_server.h"
#include "common/process_tuning.h"
#include "common/rpc/authorization.h"
#include "common/rpc/security_flags.h"
#include "common/trace.h"
#include "ps_server/grpc/ps_grpc_server.h"
#include "ps_server/grpc/replica_link.h"
#include "ps_server/membership.h"
#include "ps_server/parameter_server.h"
#include "ps_server/status_page.h"

ABSL_FLAG(std::string, log_format, "text",
          "text (one line per event: time, role:index, level, message) or json (one JSON object "
          "per line, for log shippers).");
ABSL_FLAG(int, port, -1,
          "Port to listen on; -1 takes it from this task's address in the cluster spec; 0 picks "
          "a free port (printed in the 'listening on' line).");
ABSL_FLAG(std::string, bind_host, "0.0.0.0",
          "Address to bind: 0.0.0.0 for every interface, 127.0.0.1 for this machine only.");
ABSL_FLAG(std::string, mode, "async",
          "Consistency mode: async (apply every push at once), sync (average the gradients "
          "of a step, then apply once) or ssp (apply at once; a worker may lead the slowest by "
          "--staleness clocks).");
ABSL_FLAG(int, replicas_to_aggregate, 0,
          "sync: gradients averaged per step; 0 means every training worker (chief included). "
          "Fewer than the workers makes the rest backup workers.");
ABSL_FLAG(int64_t, max_staleness, -1,
          "async: drop pushes computed more than this many versions ago; -1 keeps all.");
ABSL_FLAG(int64_t, staleness, 2, "ssp: the bound k, in clocks (steps). 0 is lock-step.");
ABSL_FLAG(int64_t, lease_timeout_ms, 10000,
          "A worker silent this long (milliseconds) is presumed dead: sync steps complete "
          "without it and ssp stops waiting for it. It rejoins when it calls again.");
ABSL_FLAG(int64_t, startup_timeout_secs, 600,
          "sync and ssp: how long steps wait, from this server's start, for every training "
          "worker to make its first contact (workers may start minutes apart on Kubernetes). "
          "Then the job goes on with those present and the log names who is missing.");
ABSL_FLAG(int64_t, max_message_mb, 256, "Largest gRPC message accepted or sent, in MiB.");
ABSL_FLAG(int64_t, max_memory_mb, 0,
          "Memory the variables may take on this server, in MiB: values, optimizer slots and, "
          "in sync mode, each step's accumulated gradients. Creating a variable past it fails "
          "RESOURCE_EXHAUSTED. 0: 80% of the machine's memory (or the container's limit).");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Where checkpoints are written and restored from, shared with the other servers and "
          "the chief (a shared volume). On start the newest complete checkpoint is restored "
          "(this server's final checkpoint in its place when newer; without one, the servers' "
          "final checkpoints); on SIGTERM/SIGINT and at the job's end the server writes its "
          "own final checkpoint there. \"\" = none.");
ABSL_FLAG(bool, keep_serving_after_job_done, false,
          "Keep serving (for inspection) after the chief says the job is done; SIGTERM stops it.");
ABSL_FLAG(int, metrics_port, -1,
          "Serve Prometheus metrics at http://<bind_host>:<port>/metrics and the server's status "
          "page at / (with TLS, to loopback clients only: reach it through ssh -L or kubectl "
          "port-forward); 0 picks a free port (printed in the 'metrics on' line); -1: none.");
ABSL_FLAG(std::string, trace_file, "",
          "Write a Chrome trace (Perfetto, chrome://tracing) of how this server handles the "
          "pushes of the steps workers trace (their --trace_file and --trace_steps), one span "
          "per push on the track of its worker, linked to the worker's call; join the job's "
          "files with `fulcrumctl merge-traces`. \"\": none.");
ABSL_FLAG(std::string, chief_identity, fulcrum::kDefaultControlIdentities,
          "With mutual TLS: the identities whose certificates may make control calls "
          "(JobDone, SaveCheckpoint), comma-separated; a certificate has one when its subject's "
          "common name is it, or a SAN is it or fulcrum://<it> (scripts/make_certs.sh's). "
          "Others get PERMISSION_DENIED.");
ABSL_FLAG(int, replication, 1,
          "Copies of each shard, on that many servers (at most the number of ps tasks); give "
          "every server the same. A primary answers a push once every backup has applied it. "
          "With --etcd, a server lost for good fails over (docs/replication.md).");
ABSL_FLAG(std::string, zone, "",
          "With --replication >= 2: the failure zone of this server's machine (a rack, a cloud "
          "zone; letters, digits, '.', '_', '-'): the copies of each shard go to servers of "
          "different zones where there are enough, so that a zone lost loses no shard. \"\": "
          "a zone of its own.");
ABSL_FLAG(int64_t, catch_up_mib_per_sec, 256,
          "With --replication >= 2: the rate, in MiB/s, at which this server sends the "
          "snapshots that fill copies catching up (a restarted or new server's, after a loss), "
          "to all servers together, so that re-replication leaves training its bandwidth; the "
          "updates of other shards overtake them. 0: unbounded.");
ABSL_FLAG(std::string, etcd, "",
          "host:port of the etcd that coordinates the shards' copies: each server holds a lease "
          "there, and when one is lost (dead, or cut off) for longer than --etcd_lease_secs its "
          "shards' backups take over (--replication >= 2), with no restart; shards move between "
          "servers with fulcrumctl add-server and remove-server (any --replication). Give every "
          "server of the job the same etcd and --etcd_prefix; one not reachable yet is asked "
          "again for a minute. The server talks to it as to its peers: mutual TLS with its "
          "--tls_* files (etcd must present a certificate of the job's CA and require clients "
          "to, as docs/replication.md shows), plaintext only with --insecure. \"\": none (copies "
          "stay where the chief placed them).");
ABSL_FLAG(std::string, etcd_prefix, "/fulcrum/job/",
          "The job's keys in etcd (one prefix per job, ending with '/'): <prefix>servers/<address> "
          "and <prefix>placement, the placement table.");
ABSL_FLAG(int, etcd_lease_secs, 3,
          "A server whose lease in etcd has not been renewed for this long is taken for lost "
          "and its shards fail over; it takes no writes itself once its lease may have run out.");
ABSL_FLAG(std::string, server_identity, fulcrum::kDefaultServerIdentities,
          "With mutual TLS: the identities whose certificates may make calls between servers "
          "(Replicate, from the primary of a replicated shard to its backups), "
          "comma-separated, matched as --chief_identity is. A server calling another presents "
          "its own certificate, so it must name one of them.");
ABSL_FLAG(int, grace_period_secs, 10,
          "On SIGTERM, SIGINT or job done: seconds in-flight calls get to finish.");

namespace fulcrum {
namespace {

absl::StatusOr<PsServerConfig> ConfigFromFlags() {
  auto cluster = ResolveTfConfig(ClusterSourcesFromFlags("ps"), *MakeLocalFileSystem());
  if (!cluster.ok()) return cluster.status();
  if (cluster->task().type() != "ps") {
    return absl::InvalidArgumentError(
        absl::StrCat("task.type: ps_server runs ps tasks, the cluster spec says '",
                     cluster->task().type(), "'"));
  }
  auto address = TaskAddress(*cluster);
  if (!address.ok()) return address.status();
  std::string port = address->substr(address->rfind(':') + 1);
  if (absl::GetFlag(FLAGS_port) >= 0) port = absl::StrCat(absl::GetFlag(FLAGS_port));
  auto mode = ParseConsistencyMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) return mode.status();

  PsServerConfig config;
  *config.mutable_cluster() = *cluster;
  config.set_listen_address(absl::StrCat(absl::GetFlag(FLAGS_bind_host), ":", port));
  config.set_mode(*mode);
  config.set_num_replicas(NumReplicas(cluster->cluster()));
  const int rta = absl::GetFlag(FLAGS_replicas_to_aggregate);
  config.set_replicas_to_aggregate(rta == 0 ? config.num_replicas() : rta);
  config.set_max_staleness(absl::GetFlag(FLAGS_max_staleness));
  config.set_staleness_bound(absl::GetFlag(FLAGS_staleness));
  config.set_lease_timeout_ms(absl::GetFlag(FLAGS_lease_timeout_ms));
  const int64_t startup_secs = absl::GetFlag(FLAGS_startup_timeout_secs);
  if (startup_secs < 0 || startup_secs > 1'000'000'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--startup_timeout_secs: must be in [0, 1000000000], got ", startup_secs));
  }
  config.set_startup_timeout_ms(startup_secs * 1000);
  const int64_t max_message_mb = absl::GetFlag(FLAGS_max_message_mb);
  if (max_message_mb < 1 || max_message_mb > 2047) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_message_mb: must be in [1, 2047], got ", max_message_mb));
  }
  config.set_max_message_bytes(max_message_mb << 20);
  const int64_t max_memory_mb = absl::GetFlag(FLAGS_max_memory_mb);
  if (max_memory_mb < 0 || max_memory_mb > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_memory_mb: must be in [0, 2^40], got ", max_memory_mb));
  }
  config.set_max_memory_bytes(max_memory_mb << 20);
  config.set_checkpoint_dir(absl::GetFlag(FLAGS_checkpoint_dir));
  config.set_keep_serving_after_job_done(absl::GetFlag(FLAGS_keep_serving_after_job_done));
  config.set_replication(absl::GetFlag(FLAGS_replication));
  config.set_etcd_endpoint(absl::GetFlag(FLAGS_etcd));
  config.set_etcd_prefix(absl::GetFlag(FLAGS_etcd_prefix));
  config.set_etcd_lease_ms(int64_t{absl::GetFlag(FLAGS_etcd_lease_secs)} * 1000);
  const int64_t catch_up_mib = absl::GetFlag(FLAGS_catch_up_mib_per_sec);
  if (catch_up_mib < 0 || catch_up_mib > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--catch_up_mib_per_sec: must be in [0, 2^30], got ", catch_up_mib));
  }
  config.set_catch_up_bytes_per_sec(catch_up_mib << 20);
  config.set_zone(absl::GetFlag(FLAGS_zone));
  if (absl::Status s = ValidatePsServerConfig(config); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("flags: ", s.message()));
  }
  return config;
}

int Run() {
  // Signals are taken by sigwait below, never by a handler, so every thread
  // started from here on must have them blocked.
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&signals, sig);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto config = ConfigFromFlags();
  auto tls = TlsFilesFromFlags();
  // Who may call: control calls from the chief's and the operator's
  // certificates only (with TLS), and with the control token (when given).
  AccessPolicy policy;
  policy.tls = tls.ok() && tls->enabled();
  policy.control_identities =
      absl::StrSplit(absl::GetFlag(FLAGS_chief_identity), ',', absl::SkipWhitespace());
  policy.server_identities =
      absl::StrSplit(absl::GetFlag(FLAGS_server_identity), ',', absl::SkipWhitespace());
  const absl::Status tokens = ServerTokensFromFlags(&policy.cluster_token, &policy.control_token);
  for (const absl::Status& s : {config.status(), tls.status(), tokens}) {
    if (!s.ok()) {
      std::cerr << "ps_server: " << s.message() << "\n(see --help)\n";
      return 2;
    }
  }
  if (absl::Status s =
          InitLogging("ps", config->cluster().task().index(), absl::GetFlag(FLAGS_log_format));
      !s.ok()) {
    std::cerr << "ps_server: " << s.message() << "\n";
    return 2;
  }
  // Started before the server, whose Describe says its port.
  std::unique_ptr<MetricsServer> started_metrics;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    auto started =
        MetricsServer::Start(absl::GetFlag(FLAGS_bind_host), absl::GetFlag(FLAGS_metrics_port));
    if (!started.ok()) {
      LOG_ERROR("{}", started.status().message());
      return 1;
    }
    started_metrics = *std::move(started);
    config->set_metrics_port(started_metrics->port());
  }
  // A primary calls its shards' backups as the cluster's clients call it:
  // its certificate, and the token a control call needs.
  ParameterServer ps(
      *config, absl::Now,
      GrpcReplicaLinks(*tls,
                       policy.control_token.empty() ? policy.cluster_token : policy.control_token,
                       config->max_message_bytes()));
  std::unique_ptr<FileSystem> fs = MakeLocalFileSystem();
  if (!config->checkpoint_dir().empty()) {
    if (absl::Status s = ps.EnableCheckpoints(fs.get()); !s.ok()) {
      LOG_ERROR("{}", s.message());
      return 1;
    }
  }
  // Destroyed before the server whose state it shows (declared after it).
  std::unique_ptr<MetricsServer> metrics_server = std::move(started_metrics);
  std::optional<PsMetrics> metrics;
  if (metrics_server != nullptr) {
    metrics.emplace(&ps, metrics_server->registry());
    metrics_server->Add(metrics->state());
    LOG_INFO("metrics on http://{}:{}/metrics", absl::GetFlag(FLAGS_bind_host),
             metrics_server->port());
  }
  WarnIfPlaintext(*tls, absl::GetFlag(FLAGS_bind_host));
  const std::string security =
      absl::StrCat(tls->enabled() ? "mutual TLS" : "plaintext",
                   policy.cluster_token.empty() && policy.control_token.empty() ? "" : ", tokens");
  std::unique_ptr<TraceFile> trace;
  if (const std::string path = absl::GetFlag(FLAGS_trace_file); !path.empty()) {
    auto opened = TraceFile::Open(path, absl::StrCat("ps ", config->cluster().task().index()));
    if (!opened.ok()) {
      LOG_ERROR("--trace_file: {}", opened.status().message());
      return 2;
    }
    trace = *std::move(opened);
    LOG_INFO("tracing the pushes workers trace to {}", path);
  }
  auto server = PsGrpcServer::Start(&ps, config->listen_address(), metrics ? &*metrics : nullptr,
                                    *tls, Access(std::move(policy)), trace.get());
  if (!server.ok()) {
    LOG_ERROR("{}", server.status().message());
    return 1;
  }
  // The address the others know this server by; its port, when the
  // cluster spec left it to the system, the one picked.
  std::string address = config->cluster().cluster().ps(config->cluster().task().index());
  if (absl::EndsWith(address, ":0")) {
    address = absl::StrCat(address.substr(0, address.size() - 1), (*server)->port());
    ps.ServeAt(address);
  }
  if (metrics_server != nullptr) {
    // Metadata only (names, versions, workers, addresses), never values;
    // with TLS, to loopback clients only (docs/watching.md).
    auto page = std::make_shared<ServerPage>(ServerPageContext{address, security});
    metrics_server->SetPage([&ps, page] { return page->Render(ps.Describe(), absl::Now()); },
                            /*loopback_only=*/tls->enabled());
  }
  std::unique_ptr<Membership> membership;
  if (!config->etcd_endpoint().empty()) {
    Membership::Options options;
    options.prefix = config->etcd_prefix();
    options.address = address;
    options.zone = config->zone();
    options.ttl = absl::Milliseconds(config->etcd_lease_ms());
    // etcd may start after the servers (compose, Kubernetes): an etcd
    // not reachable yet is asked again, for a minute.
    const absl::Time patience = absl::Now() + absl::Minutes(1);
    absl::StatusOr<std::unique_ptr<Membership>> joined;
    for (;;) {
      joined = Membership::Join(
          std::make_unique<Etcd>(config->etcd_endpoint(), MakeChannelCredentials(*tls)), options,
          [&ps](const Placement& table) { ps.ApplyPlacement(table); });
      const absl::StatusCode code = joined.status().code();
      if (joined.ok() || absl::Now() > patience ||
          (code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kDeadlineExceeded)) {
        break;
      }
      LOG_WARN("etcd at {} is not reachable yet ({}); asking again", config->etcd_endpoint(),
               joined.status().message());
      absl::SleepFor(absl::Seconds(1));
    }
    if (!joined.ok()) {
      LOG_ERROR("joining the job in etcd at {}: {}", config->etcd_endpoint(),
                joined.status().message());
      return 1;
    }
    membership = *std::move(joined);
    ps.SetCoordination(membership.get());
    LOG_INFO("coordinated through etcd at {} under {} (lease {})", config->etcd_endpoint(),
             options.prefix, absl::FormatDuration(options.ttl));
  }
  LOG_INFO(
      "listening on {}:{} ({}) mode={} workers={} replicas_to_aggregate={} staleness={} "
      "memory budget {}",
      absl::GetFlag(FLAGS_bind_host), (*server)->port(), security, absl::GetFlag(FLAGS_mode),
      config->num_replicas(), config->replicas_to_aggregate(), config->staleness_bound(),
      FormatBytes(ps.Describe().max_memory_bytes()));

  // The job-done signal from the chief arrives as SIGUSR1 to this process.
  if (!config->keep_serving_after_job_done()) {
    std::thread([&ps] {
      ps.WaitForJobDone(absl::InfiniteDuration());
      kill(getpid(), SIGUSR1);
    }).detach();
  }
  int sig = 0;
  sigwait(&signals, &sig);
  LOG_INFO("{}: shutting down", sig == SIGUSR1 ? "job done" : strsignal(sig));
  // After job done no training call is left, and idle clients would hold a
  // graceful shutdown until their channels next poll: one second is enough.
  absl::Duration grace = absl::Seconds(absl::GetFlag(FLAGS_grace_period_secs));
  if (sig == SIGUSR1) grace = std::min(grace, absl::Seconds(1));
  (*server)->Shutdown(absl::Now() + grace);
  // The job's last state, whether it ended or was stopped: what a restart
  // or an export finds, with or without a chief that checkpoints.
  ps.SaveFinalCheckpoint().IgnoreError();  // logged
  const DescribeResponse final_state = ps.Describe();
  for (const TableInfo& t : final_state.tables()) {
    LOG_INFO("embedding table '{}': {} rows{}, {} candidates, {} evictions, {} admissions, {}",
             t.name(), t.rows(), t.max_rows() > 0 ? absl::StrCat(" of ", t.max_rows()) : "",
             t.candidates(), t.evictions(), t.admissions(), FormatBytes(t.memory_bytes()));
  }
  LOG_INFO("stopped: memory {} of its budget {}", FormatBytes(final_state.memory_bytes()),
           FormatBytes(final_state.max_memory_bytes()));
  // Every call has finished or been cancelled. gRPC 1.51's server destructor
  // can then stall for seconds after streamed calls (grpc/grpc#41050), so the
  // process ends here without tearing the server down.
  spdlog::shutdown();
  std::_Exit(0);
}

}  // namespace
}  // namespace fulcrum

int main(int argc, char** argv) {
  fulcrum::TuneProcess();
  // A peer that goes away mid-write is an error on that connection, never
  // a signal that ends the process.
  signal(SIGPIPE, SIG_IGN);
  absl::SetProgramUsageMessage(
      "Fulcrum parameter server.\n\n"
      "Holds shards of the model's variables, applies the optimizer to pushed gradients in "
      "async, sync or ssp mode, and exits 0 when the chief says the job is done or on "
      "SIGTERM/SIGINT.\n\n"
      "The cluster spec comes from --cluster_spec, else the host flags, else TF_CONFIG, e.g.\n"
      "  TF_CONFIG='{\"cluster\": {\"worker\": [\"h1:2222\"], \"ps\": [\"h2:2222\"]},\n"
      "              \"task\": {\"type\": \"ps\", \"index\": 0}}' ps_server --mode=sync\n"
      "  ps_server --ps_hosts=h2:2222 --worker_hosts=h1:2222 --task_index=0");
  absl::ParseCommandLine(argc, argv);
  return fulcrum::Run();
}
