// worker: trains a model on its share of the data, pulling variables from
// and pushing gradients to the parameter servers, or all-reducing them with
// the other workers. See docs/flags.md, "worker". The flags are read in
// worker_flags.cc, the pieces built in worker_setup.cc, the metrics kept
// in worker_metrics.cc.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <optional>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint/checkpointer.h"
#include "common/cluster_flags.h"
#include "common/file_system.h"
#include "common/logging.h"
#include "common/metrics_server.h"
#include "common/process_tuning.h"
#include "common/rpc/security_flags.h"
#include "worker/job_page.h"
#include "worker/trainer.h"
#include "worker/worker_flags.h"
#include "worker/worker_metrics.h"
#include "worker/worker_setup.h"

namespace fulcrum {
namespace {

// Set by SIGTERM/SIGINT: the trainer stops after its current step.
std::atomic<bool> g_stop{false};
void OnStopSignal(int) { g_stop = true; }

// The security flags, for this strategy: every strategy but mirrored (one
// process) talks to peers.
absl::StatusOr<WorkerSecurity> SecurityFromFlags(const WorkerFlags& flags) {
  WorkerSecurity security;
  if (flags.strategy != "mirrored") {
    auto tls = TlsFilesFromFlags();
    if (!tls.ok()) return tls.status();
    security.tls = *tls;
  }
  auto token = ClientTokenFromFlags();
  if (!token.ok()) return token.status();
  security.token = *token;
  if (flags.strategy == "parameter_server") return security;
  // The all-reduce peers' streams carry the cluster token, which every
  // worker holds (the chief's control token is not the others' to check).
  std::string control_token;
  if (absl::Status s = ServerTokensFromFlags(&security.cluster_token, &control_token); !s.ok()) {
    return s;
  }
  return security;
}

// Logs the chief's final figures.
void LogFinal(const TrainingSummary& summary, const Dataset& test) {
  const EpochResult& last = summary.epochs.back();
  if (last.test_auc >= 0) {
    LOG_INFO("final test AUC {:.4f}{} (log loss {:.4f}) after {} global steps in {:.1f}s",
             last.test_auc,
             test.oracle_auc >= 0 ? absl::StrFormat(", the data's best %.4f", test.oracle_auc) : "",
             last.test_loss, summary.global_steps, summary.wall_seconds);
  } else {
    LOG_INFO("final test accuracy {:.4f} (test loss {:.4f}) after {} global steps in {:.1f}s",
             last.test_accuracy, last.test_loss, summary.global_steps, summary.wall_seconds);
  }
}

// Sets *configured once the flags are checked and the run begins: errors
// after that are the run's, not the flags'.
absl::Status Run(const WorkerFlags& flags, bool* configured) {
  std::unique_ptr<FileSystem> fs = MakeLocalFileSystem();
  auto cluster = ResolveCluster(flags, ClusterSourcesFromFlags("worker"), *fs);
  if (!cluster.ok()) return cluster.status();
  auto replica = ReplicaId(*cluster);
  if (!replica.ok()) return replica.status();
  const bool is_chief = cluster->task().type() == "chief" ||
                        (cluster->cluster().chief_size() == 0 && cluster->task().index() == 0);
  if (absl::Status s =
          InitLogging(cluster->task().type(), cluster->task().index(), flags.log_format);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckStrategy(flags, *cluster); !s.ok()) return s;
  // The model and its tables are checked before the slow load.
  auto model = ModelFromFlags(flags, *cluster);
  if (!model.ok()) return model.status();
  auto embeddings = EmbeddingsFromFlags(flags, *model);
  if (!embeddings.ok()) return embeddings.status();
  auto security = SecurityFromFlags(flags);
  if (!security.ok()) return security.status();
  // Declared before the client that records in it.
  auto trace = TraceFromFlags(flags, *cluster);
  if (!trace.ok()) return trace.status();
  auto data = LoadData(flags, *model, is_chief, *fs);
  if (!data.ok()) return data.status();
  if (absl::Status s = FitToData(data->train, &*model, &*embeddings); !s.ok()) return s;

  auto devices = MakeDevices(flags);
  if (!devices.ok()) return devices.status();
  const int64_t per_replica = (flags.batch_size + flags.local_replicas - 1) / flags.local_replicas;
  std::vector<std::unique_ptr<Mlp>> models;
  std::vector<Mlp*> replicas;
  for (auto& device : devices->devices) {
    models.push_back(std::make_unique<Mlp>(device.get(), *model, per_replica));
    replicas.push_back(models.back().get());
  }

  auto parts = MakeStrategy(flags, *cluster, *replica, is_chief, *model, *embeddings, *security,
                            fs.get(), &g_stop, trace->file.get());
  if (!parts.ok()) return parts.status();
  Strategy* strategy = parts->strategy.get();

  TrainerOptions options;
  options.epochs = flags.epochs;
  options.batch_size = flags.batch_size;
  options.seed = flags.seed;
  options.log_every_steps = flags.log_every_steps;
  options.is_chief = is_chief;
  options.shard_index = *replica;
  options.num_workers = NumReplicas(cluster->cluster());
  options.num_ps = flags.strategy == "parameter_server" ? cluster->cluster().ps_size() : 0;
  options.summary_json = flags.summary_json;
  options.metrics_jsonl = flags.metrics_jsonl;
  options.model_name =
      model->kind == "softmax" ? model->kind : absl::StrCat(model->kind, " ", flags.hidden);
  options.embeddings = parts->embeddings.get();
  options.stream = data->stream ? &*data->stream : nullptr;
  options.device_name = devices->devices[0]->name();
  options.fs = fs.get();
  std::optional<Checkpointer> checkpointer;
  if (is_chief && !flags.checkpoint_dir.empty()) {
    CheckpointOptions checkpoint_options{flags.checkpoint_dir, flags.checkpoint_every_steps,
                                         flags.checkpoint_every_secs, flags.keep_checkpoints};
    if (checkpoint_options.keep < 1) {
      return absl::InvalidArgumentError("--keep_checkpoints: must be >= 1");
    }
    if (absl::Status s = CheckWritableDir(*fs, checkpoint_options.dir); !s.ok()) return s;
    checkpointer.emplace([strategy](int64_t step) { return strategy->SaveCheckpoint(step); },
                         fs.get(), checkpoint_options);
    options.checkpointer = &*checkpointer;
  }
  // What the status page shows, declared before the server that shows it
  // (so destroyed after it).
  std::optional<JobStatus> status;
  std::unique_ptr<MetricsServer> metrics_server;
  std::optional<WorkerMetrics> metrics;
  if (flags.metrics_port >= 0) {
    auto started = MetricsServer::Start(flags.metrics_host, flags.metrics_port);
    if (!started.ok()) return started.status();
    metrics_server = *std::move(started);
    metrics.emplace(metrics_server->registry());
    status.emplace(JobStatus::View{
        absl::StrCat(cluster->task().type(), " ", cluster->task().index(),
                     is_chief ? " (chief)" : ""),
        absl::StrCat(options.model_name, " · ", strategy->name(), " · ", options.num_workers,
                     " worker(s)",
                     options.num_ps > 0 ? absl::StrCat(" · ", options.num_ps, " server(s)") : ""),
        flags.epochs});
    options.status = &*status;
    PsClient* client = parts->client.get();
    const std::vector<std::string> addresses(cluster->cluster().ps().begin(),
                                             cluster->cluster().ps().end());
    int64_t steps = 0;
    options.on_step = [&, client, addresses, steps](const StepInfo& step) mutable {
      metrics->OnStep(step);
      // Every kServersEvery steps, the servers' shares and pages (a call
      // to each: nothing beside a step).
      constexpr int64_t kServersEvery = 100;
      if (client == nullptr || steps++ % kServersEvery != 0) return;
      if (auto described = client->Describe(); described.ok()) {
        status->SetServers(*described, addresses);
      }
    };
    metrics_server->SetPage([&] { return RenderJobPage(status->view()); },
                            /*loopback_only=*/security->tls.enabled());
    LOG_INFO("metrics on http://{}:{}/metrics, status page at /", flags.metrics_host,
             metrics_server->port());
  }
  options.stop = &g_stop;
  options.compute_delay = absl::Milliseconds(flags.debug_step_delay_ms);
  options.trace = trace->file.get();
  options.trace_first = trace->first;
  options.trace_last = trace->last;
  *configured = true;
  Trainer trainer(strategy, replicas, devices->reducer.get(), data->train,
                  data->test ? &*data->test : nullptr, options);
  auto summary = trainer.Run();
  if (status) status->Finished();
  if (!summary.ok()) return summary.status();
  if (!summary->stopped && is_chief && !summary->epochs.empty()) LogFinal(*summary, *data->test);
  return absl::OkStatus();
}

}  // namespace
}  // namespace fulcrum

int main(int argc, char** argv) {
  fulcrum::TuneProcess();
  // A peer that goes away mid-write is an error on that connection, never
  // a signal that ends the process.
  signal(SIGPIPE, SIG_IGN);
  absl::SetProgramUsageMessage(
      "Fulcrum worker.\n\n"
      "Trains a model on its share of the training set: pulls the variables from the "
      "parameter servers, computes gradients on a GPU (cuBLAS) or the CPU (OpenBLAS), "
      "averages them over --local_replicas, and pushes them, in the servers' consistency "
      "mode. The chief (the chief task, else worker 0) also evaluates on the test set after "
      "every epoch, writes --summary_json and --metrics_jsonl, and ends the job.\n\n"
      "The cluster spec comes from --cluster_spec, else the host flags, else TF_CONFIG.");
  absl::ParseCommandLine(argc, argv);
  struct sigaction action {};
  action.sa_handler = fulcrum::OnStopSignal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  bool configured = false;
  const absl::Status status = fulcrum::Run(fulcrum::WorkerFlagsFromCommandLine(), &configured);
  if (!status.ok()) {
    spdlog::error("{}", status.ToString());
    std::cerr << "worker: " << status.message() << "\n";
    // 2: the flags (or cluster spec) are wrong; 1: the run failed.
    return !configured && status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
