// fulcrumctl: looks at and steers a running Fulcrum cluster.
//
//   fulcrumctl status     --ps_hosts=h:p,...   every server: health, mode, shards, workers
//   fulcrumctl variables  --ps_hosts=h:p,...   every variable: shape and where its shards are
//   fulcrumctl tables     --ps_hosts=h:p,...   every embedding table: rows, evictions, memory
//   fulcrumctl checkpoint --ps_hosts=h:p,... --checkpoint_dir=DIR [--step=N]
//   fulcrumctl stop       --ps_hosts=h:p,... [--reason=...]   job done: the servers exit 0
//   fulcrumctl export     --checkpoint_dir=DIR --out=FILE [--format=safetensors|npz] [--step=N]
//                         [--slots]   the trained model, as files other tools read
//   fulcrumctl merge-traces --out=FILE TRACE...   the daemons' --trace_file files as one
//   fulcrumctl health     --address=h:p        exit 0 when SERVING (a probe for images)
//   fulcrumctl add-server    h:p [--nowait]    the server (started with --etcd) takes its
//                                              share of the shards, moved live
//   fulcrumctl remove-server h:p [--nowait]    the server hands its shards to the others
//                                              and leaves the job
//
// The servers come from --ps_hosts, else from the cluster spec (--cluster_spec,
// else TF_CONFIG).
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/checkpoint/exported.h"
#include "common/checkpoint/tensor_files.h"
#include "common/cluster_flags.h"
#include "common/consistency_mode.h"
#include "common/describe_text.h"
#include "common/file_system.h"
#include "common/memory_size.h"
#include "common/placement.h"
#include "common/rpc/authorization.h"
#include "common/rpc/credentials.h"
#include "common/rpc/security_flags.h"
#include "common/tensor.h"
#include "common/trace.h"
#include "deploy/top_view.h"
#include "fulcrum/grpc_ps_client.h"
#include "fulcrum/job_checkpoints.h"
#include "fulcrum/ps_client.h"
#include "proto/health.grpc.pb.h"
#include "proto/ps_service.grpc.pb.h"

ABSL_FLAG(std::string, address, "", "health: the host:port to probe.");
ABSL_FLAG(int, timeout_secs, 5, "Deadline of each call, in seconds.");
ABSL_FLAG(std::string, checkpoint_dir, "", "checkpoint, export: the servers' --checkpoint_dir.");
ABSL_FLAG(int64_t, step, -1,
          "checkpoint: its step (name); -1 takes the servers' global step. export: the "
          "checkpoint of this step; -1: the job's last state (the newest complete checkpoint, "
          "with newer final files of its servers, else their final files).");
ABSL_FLAG(std::string, reason, "stopped with fulcrumctl", "stop: the reason the servers log.");
ABSL_FLAG(std::string, out, "", "export, merge-traces: the file to write.");
ABSL_FLAG(std::string, format, "",
          "export: safetensors or npz; empty: by --out's extension (.npz is npz, else "
          "safetensors).");
ABSL_FLAG(bool, slots, false, "export: the optimizer slots too (<name>.slot<k>, <table>.slots).");
ABSL_FLAG(bool, wait, true,
          "add-server, remove-server: wait until every copy has moved, showing progress; "
          "--nowait returns once the move has begun.");
ABSL_FLAG(int, wait_secs, 1800, "add-server, remove-server: how long to wait for the moves.");
ABSL_FLAG(double, interval_secs, 2, "top: seconds between refreshes.");
ABSL_FLAG(int, iterations, 0, "top: refreshes before it exits; 0: until q or Ctrl-C.");

namespace fulcrum {
namespace {

// How calls to the servers are secured (the --tls_* flags or --insecure),
// and the token they carry (--control_token_file, --auth_token_file).
TlsFiles g_tls;
std::string g_token;

// SERVING, NOT_SERVING, or why the probe failed.
std::string Health(const std::string& address, absl::Duration timeout, bool* serving) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, MakeChannelCredentials(g_tls)));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status =
      stub->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
  *serving = status.ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  if (!status.ok()) return absl::StrCat("UNREACHABLE (", status.error_message(), ")");
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

std::unique_ptr<PsClient> Client(const std::vector<std::string>& hosts) {
  PsClientOptions options;
  options.worker_id = -1;
  options.call_timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_secs));
  options.retry_timeout = options.call_timeout;
  options.tls_cert = g_tls.cert;
  options.tls_key = g_tls.key;
  options.tls_ca = g_tls.ca;
  options.auth_token = g_token;
  return NewGrpcPsClient(hosts, options);
}

// Ctrl-C in top: ends its loop, so the terminal is put back as it was.
volatile std::sig_atomic_t g_interrupted = 0;

// A live view of the cluster, redrawn every --interval_secs, as top does
// (the screen cleared where stdout is a terminal); q (or Ctrl-C) quits.
int Top(const std::vector<std::string>& hosts) {
  auto client = Client(hosts);
  const bool tty = isatty(STDOUT_FILENO) != 0;
  // Keys read one at a time, unechoed, where stdin is a terminal.
  termios saved{};
  const bool raw = isatty(STDIN_FILENO) != 0 && tcgetattr(STDIN_FILENO, &saved) == 0;
  if (raw) {
    termios keys = saved;
    keys.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    tcsetattr(STDIN_FILENO, TCSANOW, &keys);
  }
  struct sigaction interrupt {};
  interrupt.sa_handler = [](int) { g_interrupted = 1; };
  sigaction(SIGINT, &interrupt, nullptr);
  const int iterations = absl::GetFlag(FLAGS_iterations);
  const absl::Duration interval = absl::Seconds(std::max(0.1, absl::GetFlag(FLAGS_interval_secs)));
  std::optional<TopSample> before;
  for (int i = 0; (iterations == 0 || i < iterations) && g_interrupted == 0; ++i) {
    const absl::Time at = absl::Now();
    auto described = client->Describe();
    std::string screen;
    if (described.ok()) {
      TopSample now{at, *std::move(described)};
      screen = RenderTop(hosts, now, before ? &*before : nullptr);
      before = std::move(now);
    } else {
      screen = absl::StrCat("fulcrumctl top: ", described.status().message(), "\n(asking again)\n");
    }
    std::cout << (tty ? "\033[H\033[2J" : "") << screen << (raw ? "\nq quits\n" : "") << std::flush;
    if (iterations != 0 && i + 1 == iterations) break;
    // The wait, which a key ends early.
    pollfd key{STDIN_FILENO, POLLIN, 0};
    const int64_t ms = absl::ToInt64Milliseconds(at + interval - absl::Now());
    if (raw && poll(&key, 1, static_cast<int>(std::max<int64_t>(ms, 0))) > 0) {
      char c = 0;
      if (read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q')) break;
    } else if (!raw) {
      absl::SleepFor(at + interval - absl::Now());
    }
  }
  if (raw) tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  return 0;
}

int Status(const std::vector<std::string>& hosts) {
  auto described = Client(hosts)->Describe();
  if (!described.ok()) {
    std::cerr << "fulcrumctl: " << described.status().message() << "\n";
    return 1;
  }
  for (size_t i = 0; i < hosts.size(); ++i) {
    const DescribeResponse& d = (*described)[i];
    if (!WasAsked(d)) {
      std::cout << absl::StrFormat(
          "ps %d %s  left the cluster's placement table (lost for good): its shards are on the "
          "others; fulcrumctl add-server brings it back once it runs again\n",
          i, hosts[i]);
      continue;
    }
    bool serving = false;
    std::cout << absl::StrFormat(
        "ps %d %s%s  health %s  mode %s  incarnation %x  restored step %d  updates %d  stale "
        "dropped %d  memory %s of %s%s\n",
        i, hosts[i], d.zone().empty() ? "" : absl::StrCat("  zone ", d.zone()),
        Health(hosts[i], absl::Seconds(absl::GetFlag(FLAGS_timeout_secs)), &serving),
        ConsistencyModeName(d.mode()), d.incarnation(), d.restored_step(), d.updates_applied(),
        d.stale_gradients_dropped(), FormatBytes(d.memory_bytes()),
        FormatBytes(d.max_memory_bytes()), d.job_done() ? "  JOB DONE" : "");
    // Two spaces before a copy's words, none for a single copy.
    auto copy_of = [](const auto& unit) {
      const std::string copy = CopyOf(unit);
      return copy.empty() ? copy : absl::StrCat("  ", copy);
    };
    for (const ShardInfo& s : d.shards()) {
      std::cout << absl::StrFormat("  shard %s/%d of %d  shape %s  version %d  pending %d  %s%s\n",
                                   s.variable(), s.shard(), s.num_shards(), ShapeString(s.shape()),
                                   s.version(), s.pending_gradients(), s.optimizer(), copy_of(s));
    }
    for (const TableInfo& t : d.tables()) {
      std::cout << absl::StrFormat(
          "  table %s range %d  width %d  rows %d of %s  candidates %d  evictions %d  "
          "admissions %d  memory %s  version %d  %s%s\n",
          t.name(), t.partition(), t.width(), t.rows(),
          t.max_rows() > 0 ? absl::StrCat(t.max_rows()) : std::string("unbounded"), t.candidates(),
          t.evictions(), t.admissions(), FormatBytes(t.memory_bytes()), t.version(), t.optimizer(),
          copy_of(t));
    }
    for (const WorkerInfo& w : d.workers()) {
      std::cout << absl::StrFormat("  worker %d  %s  clock %d  lease left %dms\n", w.worker_id(),
                                   WorkerState(w), w.clock(), w.lease_remaining_ms());
    }
  }
  return 0;
}

int Variables(const std::vector<std::string>& hosts) {
  auto described = Client(hosts)->Describe();
  if (!described.ok()) {
    std::cerr << "fulcrumctl: " << described.status().message() << "\n";
    return 1;
  }
  struct Variable {
    Shape shape;
    std::vector<std::string> shards;
  };
  std::map<std::string, Variable> variables;
  for (size_t i = 0; i < described->size(); ++i) {
    for (const ShardInfo& s : (*described)[i].shards()) {
      if (!s.primary().empty()) continue;  // a backup copy: its primary counts
      Variable& v = variables[s.variable()];
      if (v.shape.empty()) {
        v.shape.assign(s.shape().begin(), s.shape().end());
        v.shape[0] = 0;
      }
      v.shape[0] += s.shape(0);
      v.shards.push_back(absl::StrCat(s.shard(), "@ps", i, " v", s.version()));
    }
  }
  for (auto& [name, v] : variables) {
    std::sort(v.shards.begin(), v.shards.end());
    std::cout << absl::StrFormat("%-24s %-14s %s\n", name, ShapeString(v.shape),
                                 absl::StrJoin(v.shards, ", "));
  }
  return 0;
}

// Each table summed over the servers, with its bytes per stored row.
int Tables(const std::vector<std::string>& hosts) {
  auto described = Client(hosts)->Describe();
  if (!described.ok()) {
    std::cerr << "fulcrumctl: " << described.status().message() << "\n";
    return 1;
  }
  std::map<std::string, TableInfo> tables;
  for (const DescribeResponse& d : *described) {
    for (const TableInfo& t : d.tables()) {
      if (!t.primary().empty()) continue;  // a backup copy: its primary counts
      TableInfo& sum = tables[t.name()];
      sum.set_width(t.width());
      sum.set_rows(sum.rows() + t.rows());
      sum.set_candidates(sum.candidates() + t.candidates());
      sum.set_evictions(sum.evictions() + t.evictions());
      sum.set_admissions(sum.admissions() + t.admissions());
      sum.set_memory_bytes(sum.memory_bytes() + t.memory_bytes());
    }
  }
  std::cout << absl::StrFormat("%-20s %6s %12s %12s %12s %12s %10s %10s\n", "table", "width",
                               "rows", "candidates", "evictions", "admissions", "memory", "B/row");
  for (const auto& [name, t] : tables) {
    std::cout << absl::StrFormat(
        "%-20s %6d %12d %12d %12d %12d %10s %10s\n", name, t.width(), t.rows(), t.candidates(),
        t.evictions(), t.admissions(), FormatBytes(t.memory_bytes()),
        t.rows() > 0 ? absl::StrCat(t.memory_bytes() / t.rows()) : std::string("-"));
  }
  return 0;
}

int Checkpoint(const std::vector<std::string>& hosts) {
  if (absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    std::cerr << "fulcrumctl: checkpoint needs --checkpoint_dir (the servers' own)\n";
    return 2;
  }
  auto client = Client(hosts);
  int64_t step = absl::GetFlag(FLAGS_step);
  if (step < 0) {
    auto described = client->Describe();
    if (!described.ok()) {
      std::cerr << "fulcrumctl: " << described.status().message() << "\n";
      return 1;
    }
    step = 0;
    for (const DescribeResponse& d : *described) {
      for (const ShardInfo& s : d.shards()) step = std::max(step, s.version());
    }
  }
  auto checkpoints =
      JobCheckpoints::Create(client.get(), {absl::GetFlag(FLAGS_checkpoint_dir), 0, 0, 1 << 30});
  absl::Status s = checkpoints.ok() ? (*checkpoints)->Save(step, {}) : checkpoints.status();
  if (!s.ok()) {
    std::cerr << "fulcrumctl: " << s.message() << "\n";
    return 1;
  }
  std::cout << "checkpoint " << step << " complete in " << absl::GetFlag(FLAGS_checkpoint_dir)
            << "\n";
  return 0;
}

// The job's trace files (each daemon's --trace_file) as one, for Perfetto.
int MergeTraceFiles(const std::vector<std::string>& inputs) {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty() || inputs.empty()) {
    std::cerr << "fulcrumctl: merge-traces needs --out=FILE and the trace files to join\n";
    return 2;
  }
  if (absl::Status s = MergeTraces(inputs, out); !s.ok()) {
    std::cerr << "fulcrumctl: merge-traces: " << s.message() << "\n";
    return 1;
  }
  std::cout << "wrote " << out << " from " << inputs.size()
            << " trace file(s): open it in https://ui.perfetto.dev or chrome://tracing\n";
  return 0;
}

int Export() {
  const std::string dir = absl::GetFlag(FLAGS_checkpoint_dir);
  const std::string out = absl::GetFlag(FLAGS_out);
  absl::StatusOr<TensorFileFormat> format =
      ChooseTensorFileFormat(absl::GetFlag(FLAGS_format), out);
  if (dir.empty() || out.empty() || !format.ok()) {
    std::cerr << "fulcrumctl: export needs --checkpoint_dir, --out and a --format of "
                 "safetensors or npz\n";
    return 2;
  }
  const absl::Time start = absl::Now();
  auto fs = MakeLocalFileSystem();
  auto checkpoint =
      ExportedCheckpoint::Open(*fs, dir, {absl::GetFlag(FLAGS_step), absl::GetFlag(FLAGS_slots)});
  absl::Status s = checkpoint.status();
  if (s.ok()) {
    std::cout << "exporting " << checkpoint->description() << ": " << checkpoint->tensors().size()
              << " tensors" << std::endl;
    s = WriteTensorFile(*checkpoint, *format, *fs, out);
  }
  if (!s.ok()) {
    std::cerr << "fulcrumctl: export: " << s.message() << "\n";
    return 1;
  }
  int64_t bytes = 0;
  for (const ExportedTensor& tensor : checkpoint->tensors()) bytes += tensor.bytes();
  std::cout << "wrote " << out << " (" << TensorFileFormatName(*format) << ", "
            << FormatBytes(bytes) << " of tensors) in "
            << absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1)))
            << "\n";
  return 0;
}

// A stub to the server at `address`, and a context for one call to it.
std::unique_ptr<PsService::Stub> Stub(const std::string& address) {
  return PsService::NewStub(grpc::CreateChannel(address, MakeChannelCredentials(g_tls)));
}
void Prepare(grpc::ClientContext* context) {
  context->set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_secs))));
  if (!g_token.empty()) context->AddMetadata(kTokenMetadataKey, TokenMetadata(g_token));
}

// add-server (`drain` false) and remove-server.
int Rebalance(const std::string& address, bool drain) {
  const char* command = drain ? "remove-server" : "add-server";
  if (address.empty()) {
    std::cerr << "fulcrumctl: " << command << " needs the server's host:port\n";
    return 2;
  }
  auto stub = Stub(address);
  RebalanceRequest request;
  request.set_drain(drain);
  RebalanceResponse response;
  grpc::ClientContext context;
  Prepare(&context);
  const grpc::Status status = stub->Rebalance(&context, request, &response);
  if (!status.ok()) {
    std::cerr << "fulcrumctl: " << command << " " << address << ": " << status.error_message()
              << "\n";
    return 1;
  }
  const int total = response.moving();
  std::cout << absl::StrFormat("%s: %d cop%s moving %s %s (placement epoch %d)\n", command, total,
                               total == 1 ? "y" : "ies", drain ? "off" : "onto", address,
                               response.placement().epoch())
            << std::flush;
  if (!absl::GetFlag(FLAGS_wait)) return 0;
  const absl::Time start = absl::Now();
  const absl::Time give_up = start + absl::Seconds(absl::GetFlag(FLAGS_wait_secs));
  int left = total;
  while (left > 0) {
    if (absl::Now() > give_up) {
      std::cerr << absl::StrFormat("fulcrumctl: %s: %d of %d cop%s still moving after %s\n",
                                   command, left, total, total == 1 ? "y" : "ies",
                                   absl::FormatDuration(absl::Now() - start));
      return 1;
    }
    absl::SleepFor(absl::Milliseconds(500));  // polls the server's table
    grpc::ClientContext describe;
    Prepare(&describe);
    DescribeResponse described;
    const grpc::Status asked = stub->Describe(&describe, DescribeRequest(), &described);
    if (!asked.ok()) {
      std::cerr << "fulcrumctl: " << command << ": asking " << address << ": "
                << asked.error_message() << "; asking again\n";
      continue;
    }
    const int now = CopiesMoving(described.placement(), address, drain);
    if (now == left) continue;
    left = std::max(now, 0);
    std::cout << absl::StrFormat("  %d of %d moved (%s)\n", total - left, total,
                                 absl::FormatDuration(
                                     absl::Trunc(absl::Now() - start, absl::Milliseconds(100))))
              << std::flush;
  }
  std::cout << (drain ? absl::StrCat(address,
                                     " holds no copy and has left the job: it may be stopped now\n")
                      : absl::StrCat(address, " holds its share\n"));
  return 0;
}

int Stop(const std::vector<std::string>& hosts) {
  if (absl::Status s = Client(hosts)->JobDone(absl::GetFlag(FLAGS_reason)); !s.ok()) {
    std::cerr << "fulcrumctl: " << s.message() << "\n";
    return 1;
  }
  std::cout << "job done sent to " << hosts.size()
            << " server(s); each exits once every worker has finished or its lease ran out\n";
  return 0;
}

}  // namespace
}  // namespace fulcrum

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Looks at and steers a running Fulcrum cluster.\n\n"
      "  fulcrumctl status     --ps_hosts=h:p,...\n"
      "  fulcrumctl top        --ps_hosts=h:p,... [--interval_secs=2] [--iterations=N]\n"
      "                        (live: servers, workers, tables, rates; q quits)\n"
      "  fulcrumctl variables  --ps_hosts=h:p,...\n"
      "  fulcrumctl tables     --ps_hosts=h:p,...\n"
      "  fulcrumctl checkpoint --ps_hosts=h:p,... --checkpoint_dir=DIR [--step=N]\n"
      "  fulcrumctl stop       --ps_hosts=h:p,... [--reason=TEXT]\n"
      "  fulcrumctl export     --checkpoint_dir=DIR --out=FILE [--format=safetensors|npz]\n"
      "                        [--step=N] [--slots]   (the model, for other tools)\n"
      "  fulcrumctl merge-traces --out=FILE TRACE...   (the daemons' --trace_file files,\n"
      "                        joined for Perfetto or chrome://tracing)\n"
      "  fulcrumctl health     --address=h:p    (exit 0 when SERVING: a probe)\n"
      "  fulcrumctl add-server    h:p [--nowait] [--wait_secs=N]\n"
      "  fulcrumctl remove-server h:p [--nowait] [--wait_secs=N]\n"
      "      shards move live onto a server (started with the job's --etcd; it joined\n"
      "      holding nothing) or off one, which then leaves the job\n\n"
      "The servers come from --ps_hosts, else from the cluster spec (--cluster_spec, else\n"
      "TF_CONFIG). Calls are secured with --tls_cert, --tls_key and --tls_ca (mutual TLS),\n"
      "or plaintext with --insecure.");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const std::string command = args.size() > 1 ? args[1] : "";
  // Files only: no servers, no TLS.
  if (command == "export") return fulcrum::Export();
  if (command == "merge-traces") {
    return fulcrum::MergeTraceFiles(std::vector<std::string>(args.begin() + 2, args.end()));
  }
  auto tls = fulcrum::TlsFilesFromFlags();
  if (!tls.ok()) {
    std::cerr << "fulcrumctl: " << tls.status().message() << "\n";
    return 2;
  }
  fulcrum::g_tls = *tls;
  auto token = fulcrum::ClientTokenFromFlags();
  if (!token.ok()) {
    std::cerr << "fulcrumctl: " << token.status().message() << "\n";
    return 2;
  }
  fulcrum::g_token = *token;
  if (command == "health") {
    if (absl::GetFlag(FLAGS_address).empty()) {
      std::cerr << "fulcrumctl: health needs --address=host:port\n";
      return 2;
    }
    bool serving = false;
    std::cout << fulcrum::Health(absl::GetFlag(FLAGS_address),
                                 absl::Seconds(absl::GetFlag(FLAGS_timeout_secs)), &serving)
              << "\n";
    return serving ? 0 : 1;
  }
  if (command == "add-server" || command == "remove-server") {
    return fulcrum::Rebalance(args.size() > 2 ? args[2] : "", command == "remove-server");
  }
  auto hosts = fulcrum::PsHostsFromFlags();
  if (!hosts.ok()) {
    std::cerr << "fulcrumctl: " << hosts.status().message() << "\n";
    return 2;
  }
  if (command == "status") return fulcrum::Status(*hosts);
  if (command == "top") return fulcrum::Top(*hosts);
  if (command == "variables") return fulcrum::Variables(*hosts);
  if (command == "tables") return fulcrum::Tables(*hosts);
  if (command == "checkpoint") return fulcrum::Checkpoint(*hosts);
  if (command == "stop") return fulcrum::Stop(*hosts);
  std::cerr << "fulcrumctl: unknown command '" << command
            << "'; one of status, top, variables, tables, checkpoint, stop, export, "
               "merge-traces, health, add-server, remove-server (see --help)\n";
  return 2;
}
