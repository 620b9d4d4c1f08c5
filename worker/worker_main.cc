// worker: trains a model on its share of the data, pulling variables from
// and pushing gradients to the parameter servers. See README.md, "worker
// flags".
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/consistency/policy.h"
#include "common/checkpoint/checkpointer.h"
#include "common/cluster_spec.h"
#include "common/consistency_mode.h"
#include "common/embedding.h"
#include "common/file_system.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/metrics_server.h"
#include "common/rpc/security_flags.h"
#include "common/tensor.h"
#include "fulcrum/grpc_ps_client.h"
#include "fulcrum/ps_client.h"
#include "worker/collective/grpc_peer_links.h"
#include "worker/cpu/cpu_device.h"
#include "worker/cuda/cuda.h"
#include "worker/data/dataset.h"
#include "worker/embedding_inputs.h"
#include "worker/local_reducer.h"
#include "worker/model.h"
#include "worker/strategy/all_reduce_strategy.h"
#include "worker/strategy/parameter_server_strategy.h"
#include "worker/trainer.h"

ABSL_FLAG(std::string, log_format, "text",
          "text (one line per event: time, role:index, level, message) or json (one JSON object "
          "per line, for log shippers).");
ABSL_FLAG(std::string, cluster_spec, "",
          "Path of a file holding the cluster spec as TF_CONFIG JSON. Takes precedence over "
          "the host flags and the TF_CONFIG environment variable.");
ABSL_FLAG(std::string, ps_hosts, "", "Comma-separated host:port of every parameter server.");
ABSL_FLAG(std::string, worker_hosts, "", "Comma-separated host:port of every worker.");
ABSL_FLAG(std::string, chief_host, "", "host:port of the chief, if the cluster has one.");
ABSL_FLAG(std::string, task_type, "worker",
          "This task's type with the host flags: chief or worker.");
ABSL_FLAG(int, task_index, 0, "This task's index among its type's tasks.");
ABSL_FLAG(std::string, strategy, "parameter_server",
          "Where the variables live. parameter_server: on the cluster's parameter servers, which "
          "apply the optimizer (sync, async or ssp; see --mode). multi_worker_mirrored: on every "
          "worker (no parameter servers), which all-reduce their gradients each step over gRPC "
          "between them and apply the same optimizer, so replicas stay identical. mirrored: one "
          "worker, its --local_replicas, no servers and no cluster spec needed.");
ABSL_FLAG(std::string, mode, "sync",
          "Consistency mode, as the parameter servers run it: sync, async or ssp. The all-reduce "
          "strategies are sync.");
ABSL_FLAG(int64_t, staleness, -1, "ssp: the bound k the servers must run with; -1 accepts theirs.");
ABSL_FLAG(int, replicas_to_aggregate, 0,
          "sync: the count the servers must run with; 0 accepts theirs.");
ABSL_FLAG(std::string, model, "mlp",
          "mlp (ReLU hidden layers), softmax (regression), or ctr (click-through rate: each "
          "categorical field's ids looked up in an embedding table on the parameter servers, the "
          "rows and the numeric features into an mlp of --hidden; for --dataset=criteo or "
          "synthetic_ctr).");
ABSL_FLAG(std::string, hidden, "256,128", "mlp: comma-separated hidden layer widths.");
ABSL_FLAG(std::string, dataset, "fashion_mnist",
          "fashion_mnist or idx ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] in "
          "--data_dir), libsvm (train.libsvm and test.libsvm in --data_dir), criteo (labelled "
          "Criteo TSV: train.txt and test.txt in --data_dir) or synthetic_ctr (generated, with a "
          "known best AUC).");
ABSL_FLAG(int64_t, ctr_vocabulary, 1000000, "synthetic_ctr: distinct ids per field (Zipf).");
ABSL_FLAG(int64_t, ctr_train_examples, 1000000,
          "synthetic_ctr: training examples; every worker draws the same from --seed and takes "
          "its share.");
ABSL_FLAG(int64_t, ctr_test_examples, 100000, "synthetic_ctr: test examples.");
ABSL_FLAG(int64_t, embedding_dim, 16, "ctr: the width of each field's embedding rows.");
ABSL_FLAG(std::string, embedding_optimizer, "adagrad",
          "ctr: the embedding tables' optimizer, applied on the servers to the rows a step "
          "touches only: sgd, adagrad (sparse), adam (lazy), ftrl (with --l1, --l2).");
ABSL_FLAG(double, embedding_learning_rate, 0.05, "ctr: the embedding tables' learning rate.");
ABSL_FLAG(int64_t, embedding_max_rows, 0,
          "ctr: rows each server keeps per table; past it the least recently used row goes. 0: "
          "no bound but the servers' --max_memory_mb.");
ABSL_FLAG(int, embedding_admit_after, 0,
          "ctr: an id is stored only at its this-many-th push (before that it reads as its "
          "initial row and its gradients are dropped); 0 or 1: at the first.");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Where the data set is (Debian's dataset-fashion-mnist installs it here).");
ABSL_FLAG(int, num_classes, 10, "Classes of the labels (0 .. num_classes-1).");
ABSL_FLAG(int64_t, epochs, 10, "Passes over this worker's share of the training set.");
ABSL_FLAG(int64_t, batch_size, 64, "Examples per step on this worker (split over local replicas).");
ABSL_FLAG(std::string, optimizer, "adam",
          "sgd, momentum, adagrad, adam or ftrl (FTRL-Proximal), run on the servers (or on "
          "every worker under all-reduce).");
ABSL_FLAG(double, learning_rate, 1e-3, "The optimizer's learning rate.");
ABSL_FLAG(double, momentum, 0.9, "momentum: its coefficient.");
ABSL_FLAG(double, l1, 0.0, "ftrl: L1 regularisation strength (weights under it are exactly 0).");
ABSL_FLAG(double, l2, 0.0, "ftrl: L2 regularisation strength.");
ABSL_FLAG(std::string, learning_rate_scaling, "sqrt",
          "sync: how the learning rate grows with the n gradients a step averages, whose mean "
          "is one batch n times larger: sqrt (x sqrt(n), suits Adam), linear (x n, suits SGD), "
          "or none. The servers count n in each step (fewer when workers died or finished). "
          "async and ssp apply every push alone and never scale.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the initial weights and of the data shuffles.");
ABSL_FLAG(std::string, device, "auto",
          "auto (CUDA when a device is present, else CPU), cpu or cuda.");
ABSL_FLAG(int, local_replicas, 1,
          "Replicas inside this worker (GPUs with cuda; threads on the CPU). Each step's batch "
          "is split over them and their gradients averaged before one push.");
ABSL_FLAG(int, cpu_threads, 0,
          "CPU backend: BLAS threads per local replica; 0 means the cores over the replicas. "
          "Use 1 when other workers or servers share this machine's cores.");
ABSL_FLAG(std::string, summary_json, "", "Chief: write the run's summary here as JSON.");
ABSL_FLAG(std::string, metrics_jsonl, "",
          "Chief: write progress and per-epoch metrics here, one JSON object a line.");
ABSL_FLAG(int64_t, log_every_steps, 100, "Log progress every this many steps.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Chief: where checkpoints go. parameter_server: the servers' --checkpoint_dir (shared), "
          "where the chief writes each checkpoint's manifest. The all-reduce strategies: the "
          "chief writes whole checkpoints here (the servers' format) and restores the newest "
          "at start. \"\" = none.");
ABSL_FLAG(int64_t, checkpoint_every_steps, 0,
          "Chief: checkpoint every this many global steps; 0: not by steps.");
ABSL_FLAG(int64_t, checkpoint_every_secs, 600,
          "Chief: checkpoint every this many seconds; 0: not by time.");
ABSL_FLAG(int, keep_checkpoints, 5, "Chief: complete checkpoints kept; older ones are deleted.");
ABSL_FLAG(int, metrics_port, -1,
          "Serve Prometheus metrics at http://<metrics_host>:<port>/metrics; 0 picks a free "
          "port (printed in the 'metrics on' line); -1: none.");
ABSL_FLAG(std::string, metrics_host, "0.0.0.0", "Address the metrics endpoint binds.");
ABSL_FLAG(std::string, wire_dtype, "float32",
          "How gradients and pulled weights travel: float32, bfloat16 or float16 (half the "
          "bytes; rounding error at most 0.39% or 0.049% of each value; float16 fails on "
          "values beyond 65504). The servers keep float32 either way.");
ABSL_FLAG(int, channels_per_ps, 1,
          "gRPC channels (TCP connections) to each parameter server. With more than one, a "
          "pull or push of more than 4 MiB to a server is split by shard over them and sent "
          "in parallel: for servers holding several large shards, where one connection is "
          "the limit.");
ABSL_FLAG(int, collective_port, -1,
          "multi_worker_mirrored: the port this worker serves its peers on; -1: the port of its "
          "own entry in the cluster spec.");
ABSL_FLAG(std::string, bind_host, "0.0.0.0",
          "multi_worker_mirrored: the address the collective port binds (127.0.0.1: this "
          "machine only).");
ABSL_FLAG(int, collective_timeout_secs, 60,
          "multi_worker_mirrored: an all-reduce that has not completed in this long (a peer "
          "died, hangs or is cut off) fails, naming the peer.");
ABSL_FLAG(int, startup_timeout_secs, 600,
          "multi_worker_mirrored: how long the chief waits for every worker to start (pods "
          "start minutes apart) before it starts without those missing; the others wait twice "
          "as long for its initial variables, and a restarted worker to be admitted back.");
ABSL_FLAG(int, call_timeout_secs, 120,
          "Deadline of each call to a server, long polls included; servers not up yet are "
          "waited for this long.");

namespace fulcrum {
namespace {

// Set by SIGTERM/SIGINT: the trainer stops after its current step.
std::atomic<bool> g_stop{false};
void OnStopSignal(int) { g_stop = true; }

// The optimizer `name` at learning rate `lr`, as flags `flag` and
// `lr_flag` give them (for errors), with --momentum, --l1, --l2 and
// --learning_rate_scaling.
absl::StatusOr<OptimizerSpec> OptimizerFromFlags(const std::string& name, double lr,
                                                 const char* flag, const char* lr_flag) {
  OptimizerSpec spec;
  if (name == "sgd") {
    spec.set_kind(OptimizerSpec::SGD);
  } else if (name == "momentum") {
    spec.set_kind(OptimizerSpec::MOMENTUM);
    spec.set_momentum(static_cast<float>(absl::GetFlag(FLAGS_momentum)));
  } else if (name == "adagrad") {
    spec.set_kind(OptimizerSpec::ADAGRAD);
  } else if (name == "adam") {
    spec.set_kind(OptimizerSpec::ADAM);
  } else if (name == "ftrl") {
    spec.set_kind(OptimizerSpec::FTRL);
    spec.set_l1(static_cast<float>(absl::GetFlag(FLAGS_l1)));
    spec.set_l2(static_cast<float>(absl::GetFlag(FLAGS_l2)));
    if (!(spec.l1() >= 0) || !(spec.l2() >= 0)) {
      return absl::InvalidArgumentError("--l1 and --l2 must be >= 0");
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", name, "' is not one of sgd, momentum, adagrad, adam, ftrl"));
  }
  if (!(lr > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(lr_flag, ": must be > 0, got ", lr));
  }
  spec.set_learning_rate(static_cast<float>(lr));
  const std::string scaling = absl::GetFlag(FLAGS_learning_rate_scaling);
  if (scaling == "sqrt") {
    spec.set_learning_rate_scaling(OptimizerSpec::SQRT);
  } else if (scaling == "linear") {
    spec.set_learning_rate_scaling(OptimizerSpec::LINEAR);
  } else if (scaling != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--learning_rate_scaling: '", scaling, "' is not one of sqrt, linear, none"));
  }
  return spec;
}

absl::StatusOr<std::vector<int64_t>> ParseHidden(const std::string& text) {
  std::vector<int64_t> widths;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int64_t width = 0;
    if (!absl::SimpleAtoi(part, &width)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hidden: '", part, "' is not a layer width"));
    }
    widths.push_back(width);
  }
  return widths;
}

// The local replicas' devices, chosen by --device, and the reducer that
// averages their gradients.
struct Devices {
  std::vector<std::unique_ptr<Device>> devices;
  std::unique_ptr<LocalReducer> reducer;
};

// `replicas` CUDA devices, ordinals 0.., and their reducer (NCCL for more
// than one); the first failure otherwise.
absl::StatusOr<Devices> MakeCudaDevices(int replicas, int gpus, const std::string& why_not) {
  if (gpus < replicas) {
    return absl::FailedPreconditionError(absl::StrCat("--local_replicas=", replicas, " needs ",
                                                      replicas, " CUDA device(s); found ", gpus,
                                                      why_not.empty() ? "" : " (" + why_not + ")"));
  }
  Devices out;
  std::vector<int> ordinals;
  for (int r = 0; r < replicas; ++r) {
    auto device = MakeCudaDevice(r);
    if (!device.ok()) return device.status();
    out.devices.push_back(*std::move(device));
    ordinals.push_back(r);
  }
  if (replicas > 1) {
    auto reducer = MakeNcclReducer(ordinals);
    if (!reducer.ok()) return reducer.status();
    out.reducer = *std::move(reducer);
  } else {
    out.reducer = MakeHostReducer();
  }
  LOG_INFO("device: CUDA, {} GPU(s) of {} ({})", replicas, gpus, out.devices[0]->name());
  return out;
}

absl::StatusOr<Devices> MakeDevices(const std::string& kind, int replicas) {
  if (kind != "auto" && kind != "cpu" && kind != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: '", kind, "' is not one of auto, cpu, cuda"));
  }
  if (replicas < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--local_replicas: must be >= 1, got ", replicas));
  }
  if (absl::GetFlag(FLAGS_cpu_threads) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cpu_threads: must be >= 0, got ", absl::GetFlag(FLAGS_cpu_threads)));
  }
  std::string why_not;
  const int gpus = kind == "cpu" ? 0 : CudaDeviceCount(&why_not);
  if (kind == "cuda" || (kind == "auto" && gpus > 0)) {
    auto cuda = MakeCudaDevices(replicas, gpus, why_not);
    if (cuda.ok() || kind == "cuda") {
      if (!cuda.ok()) {
        return absl::Status(cuda.status().code(),
                            absl::StrCat("--device=cuda: ", cuda.status().message()));
      }
      return cuda;
    }
    why_not = std::string(cuda.status().message());  // a busy or full GPU: the CPU will do
  }
  Devices out;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = absl::GetFlag(FLAGS_cpu_threads) > 0 ? absl::GetFlag(FLAGS_cpu_threads)
                                                           : std::max(1, cores / replicas);
  for (int r = 0; r < replicas; ++r) out.devices.push_back(MakeCpuDevice(threads));
  out.reducer = MakeHostReducer();
  if (kind == "auto") {
    LOG_INFO("device: CPU backend, {} replica(s) of {}, because no CUDA device is usable: {}",
             replicas, out.devices[0]->name(), why_not);
  } else {
    LOG_INFO("device: CPU backend (--device=cpu), {} replica(s) of {}", replicas,
             out.devices[0]->name());
  }
  return out;
}

struct ServerState {
  // The job is under way already: the servers know this worker (it
  // restarted) or restored a checkpoint.
  bool resume = false;
};

// The servers must run the mode (and bounds) this worker was told.
absl::StatusOr<ServerState> CheckServers(PsClient& client, int replica,
                                         const std::vector<std::string>& ps) {
  auto described = client.Describe();
  if (!described.ok()) return described.status();
  auto made = MakeClientPolicy(client.mode());
  if (!made.ok()) return made.status();
  const ClientConsistencyPolicy& policy = **made;
  const ModeBounds expected{absl::GetFlag(FLAGS_replicas_to_aggregate),
                            absl::GetFlag(FLAGS_staleness)};
  for (size_t i = 0; i < described->size(); ++i) {
    const DescribeResponse& d = (*described)[i];
    const std::string where = absl::StrCat("ps ", i, " (", ps[i], ")");
    if (d.mode() != policy.mode()) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker --mode=", absl::GetFlag(FLAGS_mode), " but ", where, " runs ",
                       ConsistencyModeName(d.mode()), "; start both with the same --mode"));
    }
    if (absl::Status s = policy.CheckServer(d, expected); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": ", s.message(), "; see --replicas_to_aggregate, --staleness"));
    }
  }
  ServerState state;
  for (const DescribeResponse& d : *described) {
    const bool seen = replica < d.workers_size() && d.workers(replica).seen();
    state.resume = state.resume || seen || d.restored_step() >= 0;
  }
  return state;
}

// Whether any cluster spec was given.
bool AnyClusterSource(const ClusterSources& sources) {
  const ClusterFlags& f = sources.flags;
  return !sources.cluster_spec_path.empty() || !sources.tf_config_env.empty() ||
         !f.ps_hosts.empty() || !f.worker_hosts.empty() || !f.chief_host.empty();
}

// mirrored without a cluster spec: one worker, alone.
TfConfig LoneWorker() {
  TfConfig config;
  config.mutable_cluster()->add_worker("localhost:0");
  config.mutable_task()->set_type("worker");
  return config;
}

// The cluster and flags fit the strategy.
absl::Status CheckStrategy(const std::string& strategy, const TfConfig& cluster) {
  const int ps = cluster.cluster().ps_size();
  if (strategy == "parameter_server") {
    if (ps == 0) {
      return absl::InvalidArgumentError(
          "cluster.ps: --strategy=parameter_server needs at least one parameter server (or "
          "train without: --strategy=multi_worker_mirrored)");
    }
    if (auto mode = ParseConsistencyMode(absl::GetFlag(FLAGS_mode)); !mode.ok()) {
      return mode.status();
    }
    if (auto wire = ParseFloatEncoding(absl::GetFlag(FLAGS_wire_dtype)); !wire.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--wire_dtype: ", wire.status().message()));
    }
    if (absl::GetFlag(FLAGS_channels_per_ps) < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--channels_per_ps: must be >= 1, got ",
                                                     absl::GetFlag(FLAGS_channels_per_ps)));
    }
    return absl::OkStatus();
  }
  if (absl::GetFlag(FLAGS_mode) != "sync") {
    return absl::InvalidArgumentError(absl::StrCat("--mode=", absl::GetFlag(FLAGS_mode),
                                                   ": --strategy=", strategy,
                                                   " is synchronous; leave --mode at sync"));
  }
  if (strategy == "mirrored" && NumReplicas(cluster.cluster()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--strategy=mirrored trains on one worker, but the cluster has ",
                     NumReplicas(cluster.cluster()), "; use --strategy=multi_worker_mirrored"));
  }
  if (ps > 0) {
    LOG_WARN("--strategy={} uses no parameter servers; the cluster's {} are ignored", strategy, ps);
  }
  if (absl::GetFlag(FLAGS_collective_timeout_secs) < 1 ||
      absl::GetFlag(FLAGS_startup_timeout_secs) < 1) {
    return absl::InvalidArgumentError(
        "--collective_timeout_secs and --startup_timeout_secs must be >= 1");
  }
  return absl::OkStatus();
}

// A strategy and what it runs on.
struct StrategyParts {
  std::unique_ptr<PsClient> client;             // parameter_server
  std::unique_ptr<EmbeddingInputs> embeddings;  // parameter_server, --model=ctr
  std::unique_ptr<PeerLinks> links;             // the all-reduce strategies
  std::unique_ptr<Strategy> strategy;
};

// Connects to the servers, checks they run this worker's mode, creates the
// model's variables there and waits for the job to start. The flags are
// checked (CheckStrategy).
absl::StatusOr<StrategyParts> MakeParameterServerStrategy(
    const TfConfig& cluster, int replica, const ModelConfig& model,
    const std::optional<EmbeddingConfig>& embeddings, const TlsFiles& tls,
    const std::string& token) {
  PsClientOptions options;
  options.worker_id = replica;
  options.mode = *ParseConsistencyMode(absl::GetFlag(FLAGS_mode));
  options.wire_dtype = *ParseFloatEncoding(absl::GetFlag(FLAGS_wire_dtype));
  options.channels_per_server = absl::GetFlag(FLAGS_channels_per_ps);
  options.call_timeout = absl::Seconds(absl::GetFlag(FLAGS_call_timeout_secs));
  options.retry_timeout = options.call_timeout;
  options.tls_cert = tls.cert;
  options.tls_key = tls.key;
  options.tls_ca = tls.ca;
  options.auth_token = token;
  const std::vector<std::string> ps(cluster.cluster().ps().begin(), cluster.cluster().ps().end());
  StrategyParts parts;
  parts.client = NewGrpcPsClient(ps, options);
  LOG_INFO("waiting for {} parameter server(s): {}", ps.size(), absl::StrJoin(ps, ", "));
  auto servers = CheckServers(*parts.client, replica, ps);
  if (!servers.ok()) return servers.status();
  if (absl::Status s = parts.client->CreateVariables(ModelVariables(model)); !s.ok()) return s;
  if (embeddings) {
    parts.embeddings = std::make_unique<EmbeddingInputs>(parts.client.get(), *embeddings);
    if (absl::Status s = parts.embeddings->CreateTables(); !s.ok()) return s;
  }
  parts.client->StartHeartbeats(absl::Seconds(1));
  if (absl::Status s = parts.client->AwaitJobStart(&g_stop); !s.ok()) return s;
  parts.strategy = std::make_unique<ParameterServerStrategy>(
      parts.client.get(), replica, NumReplicas(cluster.cluster()), servers->resume);
  return parts;
}

// mirrored: a group of one. multi_worker_mirrored: serves the collective
// port and links to every other training replica of the cluster; with a
// `cluster_token`, the links carry it and need it.
absl::StatusOr<StrategyParts> MakeAllReduceStrategy(const std::string& name,
                                                    const TfConfig& cluster, int replica,
                                                    bool is_chief, const ModelConfig& model,
                                                    FileSystem* fs, const TlsFiles& tls,
                                                    const std::string& cluster_token) {
  StrategyParts parts;
  if (name == "mirrored") {
    parts.links = std::make_unique<SoloLinks>();
  } else {
    int port = absl::GetFlag(FLAGS_collective_port);
    if (port < 0) {
      auto own = TaskAddress(cluster);
      if (!own.ok()) return own.status();
      const std::string port_text = own->substr(own->rfind(':') + 1);
      if (!absl::SimpleAtoi(port_text, &port)) {
        return absl::InvalidArgumentError(
            absl::StrCat("cluster spec: this task's address '", *own, "' has no port"));
      }
    }
    WarnIfPlaintext(tls, absl::GetFlag(FLAGS_bind_host));
    auto links = GrpcPeerLinks::Start(replica, NumReplicas(cluster.cluster()),
                                      absl::StrCat(absl::GetFlag(FLAGS_bind_host), ":", port), tls,
                                      cluster_token);
    if (!links.ok()) return links.status();
    const std::vector<std::string> peers = ReplicaAddresses(cluster.cluster());
    (*links)->Connect(peers);
    LOG_INFO("all-reduce: rank {} of {}, serving peers on {}:{}; peers {}", replica, peers.size(),
             absl::GetFlag(FLAGS_bind_host), (*links)->port(), absl::StrJoin(peers, ", "));
    parts.links = *std::move(links);
  }
  AllReduceStrategyOptions options;
  options.name = name;
  options.collective.timeout = absl::Seconds(absl::GetFlag(FLAGS_collective_timeout_secs));
  options.startup_timeout = absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_secs));
  options.epochs = absl::GetFlag(FLAGS_epochs);
  if (is_chief) {
    options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
    options.fs = fs;
  }
  parts.strategy =
      std::make_unique<AllReduceStrategy>(parts.links.get(), ModelVariables(model), options);
  return parts;
}

// Sets *configured once the flags are checked and the run begins: errors
// after that are the run's, not the flags'.
absl::Status Run(bool* configured) {
  ClusterSources sources;
  sources.cluster_spec_path = absl::GetFlag(FLAGS_cluster_spec);
  sources.flags = {absl::GetFlag(FLAGS_ps_hosts), absl::GetFlag(FLAGS_worker_hosts),
                   absl::GetFlag(FLAGS_chief_host), absl::GetFlag(FLAGS_task_type),
                   absl::GetFlag(FLAGS_task_index)};
  if (const char* env = std::getenv("TF_CONFIG")) sources.tf_config_env = env;
  const std::string strategy_name = absl::GetFlag(FLAGS_strategy);
  if (strategy_name != "parameter_server" && strategy_name != "multi_worker_mirrored" &&
      strategy_name != "mirrored") {
    return absl::InvalidArgumentError(
        absl::StrCat("--strategy: '", strategy_name,
                     "' is not one of parameter_server, multi_worker_mirrored, mirrored"));
  }
  const bool all_reduce = strategy_name != "parameter_server";
  auto cluster = strategy_name == "mirrored" && !AnyClusterSource(sources)
                     ? absl::StatusOr<TfConfig>(LoneWorker())
                     : ResolveTfConfig(sources);
  if (!cluster.ok()) return cluster.status();
  auto replica = ReplicaId(*cluster);
  if (!replica.ok()) return replica.status();
  const bool is_chief = cluster->task().type() == "chief" ||
                        (cluster->cluster().chief_size() == 0 && cluster->task().index() == 0);
  if (absl::Status s = InitLogging(cluster->task().type(), cluster->task().index(),
                                   absl::GetFlag(FLAGS_log_format));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckStrategy(strategy_name, *cluster); !s.ok()) return s;

  auto optimizer =
      OptimizerFromFlags(absl::GetFlag(FLAGS_optimizer), absl::GetFlag(FLAGS_learning_rate),
                         "--optimizer", "--learning_rate");
  if (!optimizer.ok()) return optimizer.status();
  auto hidden = ParseHidden(absl::GetFlag(FLAGS_hidden));
  if (!hidden.ok()) return hidden.status();
  if (absl::GetFlag(FLAGS_epochs) < 1 || absl::GetFlag(FLAGS_batch_size) < 1 ||
      absl::GetFlag(FLAGS_log_every_steps) < 1) {
    return absl::InvalidArgumentError("--epochs, --batch_size and --log_every_steps must be >= 1");
  }

  ModelConfig model;
  model.kind = absl::GetFlag(FLAGS_model);
  model.hidden = *hidden;
  model.num_classes = absl::GetFlag(FLAGS_num_classes);
  model.optimizer = *optimizer;
  model.seed = absl::GetFlag(FLAGS_seed);
  model.num_ps = std::max(1, cluster->cluster().ps_size());            // shards per variable
  if (absl::Status s = ValidateModelConfig(model); !s.ok()) return s;  // before the slow load

  // The CTR model's tables, checked before the slow load.
  std::optional<EmbeddingConfig> embeddings;
  if (model.kind == "ctr") {
    if (all_reduce) {
      return absl::InvalidArgumentError(
          "--model=ctr keeps its embedding tables on parameter servers: use "
          "--strategy=parameter_server");
    }
    auto table_optimizer = OptimizerFromFlags(absl::GetFlag(FLAGS_embedding_optimizer),
                                              absl::GetFlag(FLAGS_embedding_learning_rate),
                                              "--embedding_optimizer", "--embedding_learning_rate");
    if (!table_optimizer.ok()) return table_optimizer.status();
    if (table_optimizer->kind() == OptimizerSpec::MOMENTUM) {
      return absl::InvalidArgumentError(
          "--embedding_optimizer: momentum has no sparse form; use sgd, adagrad, adam or ftrl");
    }
    embeddings.emplace();
    EmbeddingTableSpec& table = embeddings->table;
    table.set_width(absl::GetFlag(FLAGS_embedding_dim));
    table.mutable_initializer()->set_kind(InitializerSpec::RANDOM_UNIFORM);
    table.mutable_initializer()->set_minval(-0.05f);
    table.mutable_initializer()->set_maxval(0.05f);
    table.mutable_initializer()->set_seed(absl::GetFlag(FLAGS_seed));
    *table.mutable_optimizer() = *table_optimizer;
    table.set_max_rows(absl::GetFlag(FLAGS_embedding_max_rows));
    table.set_admit_after(absl::GetFlag(FLAGS_embedding_admit_after));
    table.set_name("field");
    if (absl::Status s = ValidateEmbeddingTableSpec(table); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--embedding_*: ", s.message()));
    }
  }

  // Every strategy but mirrored (one process) talks to peers.
  TlsFiles tls;
  if (!(all_reduce && strategy_name == "mirrored")) {
    auto from_flags = TlsFilesFromFlags();
    if (!from_flags.ok()) return from_flags.status();
    tls = *from_flags;
  }
  auto token = ClientTokenFromFlags();
  if (!token.ok()) return token.status();

  DataSource source;
  source.kind = absl::GetFlag(FLAGS_dataset);
  source.data_dir = absl::GetFlag(FLAGS_data_dir);
  source.num_classes = absl::GetFlag(FLAGS_num_classes);
  source.ctr_vocabulary = absl::GetFlag(FLAGS_ctr_vocabulary);
  source.ctr_train_examples = absl::GetFlag(FLAGS_ctr_train_examples);
  source.ctr_test_examples = absl::GetFlag(FLAGS_ctr_test_examples);
  source.seed = absl::GetFlag(FLAGS_seed);
  if (absl::Status s = ValidateDataSource(source); !s.ok()) return s;
  const bool ctr_data = source.kind == "criteo" || source.kind == "synthetic_ctr";
  if (ctr_data != (model.kind == "ctr")) {
    return absl::InvalidArgumentError(
        ctr_data ? absl::StrCat("--dataset=", source.kind,
                                " has categorical fields: train it with --model=ctr")
                 : absl::StrCat("--model=ctr needs categorical fields: --dataset=criteo or "
                                "synthetic_ctr, not ",
                                source.kind));
  }
  // A data file that does not parse is the run's error (exit 1), not the
  // flags'.
  const auto data_error = [](const absl::Status& s) {
    return s.code() == absl::StatusCode::kInvalidArgument ? absl::DataLossError(s.message()) : s;
  };
  auto train = LoadTrainingSet(source);
  if (!train.ok()) return data_error(train.status());
  std::optional<Dataset> test;
  if (is_chief) {
    auto loaded = LoadTestSet(source, train->feature_dim);
    if (!loaded.ok()) return data_error(loaded.status());
    test = *std::move(loaded);
  }
  LOG_INFO("data: {} training examples of {} features{}", train->num_examples, train->feature_dim,
           test ? absl::StrCat(", ", test->num_examples, " test examples") : "");

  model.input_dim = train->feature_dim;
  if (embeddings) {
    embeddings->fields = static_cast<int>(train->ids_per_example);
    model.input_dim += embeddings->fields * embeddings->table.width();
    model.num_classes = 2;  // click or not
    model.input_gradients = true;
    LOG_INFO("ctr model: {} fields of {} floats from the servers' tables and {} numeric features",
             embeddings->fields, embeddings->table.width(), train->feature_dim);
  }
  if (absl::Status s = ValidateModelConfig(model); !s.ok()) return s;

  const int local_replicas = absl::GetFlag(FLAGS_local_replicas);
  auto devices = MakeDevices(absl::GetFlag(FLAGS_device), local_replicas);
  if (!devices.ok()) return devices.status();
  const int64_t per_replica =
      (absl::GetFlag(FLAGS_batch_size) + local_replicas - 1) / local_replicas;
  std::vector<std::unique_ptr<Mlp>> models;
  std::vector<Mlp*> replicas;
  for (auto& device : devices->devices) {
    models.push_back(std::make_unique<Mlp>(device.get(), model, per_replica));
    replicas.push_back(models.back().get());
  }

  std::unique_ptr<FileSystem> fs = MakeLocalFileSystem();
  StrategyParts parts;
  if (all_reduce) {
    // The peers' streams carry the cluster token, which every worker holds
    // (the chief's control token is not the other workers' to check).
    std::string cluster_token, control_token;
    if (absl::Status s = ServerTokensFromFlags(&cluster_token, &control_token); !s.ok()) return s;
    auto made = MakeAllReduceStrategy(strategy_name, *cluster, *replica, is_chief, model, fs.get(),
                                      tls, cluster_token);
    if (!made.ok()) return made.status();
    parts = *std::move(made);
  } else {
    auto made = MakeParameterServerStrategy(*cluster, *replica, model, embeddings, tls, *token);
    if (!made.ok()) return made.status();
    parts = *std::move(made);
  }
  Strategy* strategy = parts.strategy.get();

  TrainerOptions trainer_options;
  trainer_options.epochs = absl::GetFlag(FLAGS_epochs);
  trainer_options.batch_size = absl::GetFlag(FLAGS_batch_size);
  trainer_options.seed = absl::GetFlag(FLAGS_seed);
  trainer_options.log_every_steps = absl::GetFlag(FLAGS_log_every_steps);
  trainer_options.is_chief = is_chief;
  trainer_options.shard_index = *replica;
  trainer_options.num_workers = NumReplicas(cluster->cluster());
  trainer_options.num_ps = all_reduce ? 0 : cluster->cluster().ps_size();
  trainer_options.summary_json = absl::GetFlag(FLAGS_summary_json);
  trainer_options.metrics_jsonl = absl::GetFlag(FLAGS_metrics_jsonl);
  trainer_options.model_name = model.kind == "softmax"
                                   ? model.kind
                                   : absl::StrCat(model.kind, " ", absl::GetFlag(FLAGS_hidden));
  trainer_options.embeddings = parts.embeddings.get();
  trainer_options.device_name = devices->devices[0]->name();
  std::optional<Checkpointer> checkpointer;
  if (is_chief && !absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    CheckpointOptions checkpoint_options{
        absl::GetFlag(FLAGS_checkpoint_dir), absl::GetFlag(FLAGS_checkpoint_every_steps),
        absl::GetFlag(FLAGS_checkpoint_every_secs), absl::GetFlag(FLAGS_keep_checkpoints)};
    if (checkpoint_options.keep < 1) {
      return absl::InvalidArgumentError("--keep_checkpoints: must be >= 1");
    }
    if (absl::Status s = CheckWritableDir(*fs, checkpoint_options.dir); !s.ok()) return s;
    checkpointer.emplace([strategy](int64_t step) { return strategy->SaveCheckpoint(step); },
                         fs.get(), checkpoint_options);
    trainer_options.checkpointer = &*checkpointer;
  }
  std::unique_ptr<MetricsServer> metrics;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    auto started =
        MetricsServer::Start(absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port));
    if (!started.ok()) return started.status();
    metrics = *std::move(started);
    prometheus::Registry& registry = metrics->registry();
    auto& steps = prometheus::BuildCounter()
                      .Name("fulcrum_worker_steps_total")
                      .Help("Training steps this worker finished.")
                      .Register(registry)
                      .Add({});
    auto& examples = prometheus::BuildCounter()
                         .Name("fulcrum_worker_examples_total")
                         .Help("Training examples this worker processed.")
                         .Register(registry)
                         .Add({});
    auto& step_seconds =
        prometheus::BuildHistogram()
            .Name("fulcrum_worker_step_duration_seconds")
            .Help("Time of one step: compute, reduce, push and pull.")
            .Register(registry)
            .Add({}, prometheus::Histogram::BucketBoundaries{1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2,
                                                             0.1, 0.25, 0.5, 1, 2.5, 5, 10});
    auto& global_step = prometheus::BuildGauge()
                            .Name("fulcrum_worker_global_step")
                            .Help("The servers' step, as this worker last pulled it.")
                            .Register(registry)
                            .Add({});
    auto& rate = prometheus::BuildGauge()
                     .Name("fulcrum_worker_examples_per_second")
                     .Help("This worker's examples per second over its last step.")
                     .Register(registry)
                     .Add({});
    auto& skipped = prometheus::BuildCounter()
                        .Name("fulcrum_worker_nonfinite_gradients_skipped_total")
                        .Help("Batches whose gradients were not finite, so not pushed.")
                        .Register(registry)
                        .Add({});
    trainer_options.on_step = [&](const StepInfo& step) {
      steps.Increment();
      examples.Increment(static_cast<double>(step.examples));
      if (step.skipped) skipped.Increment();
      step_seconds.Observe(absl::ToDoubleSeconds(step.time));
      global_step.Set(static_cast<double>(step.global_step));
      rate.Set(static_cast<double>(step.examples) /
               std::max(1e-9, absl::ToDoubleSeconds(step.time)));
    };
    LOG_INFO("metrics on http://{}:{}/metrics", absl::GetFlag(FLAGS_metrics_host), metrics->port());
  }
  trainer_options.stop = &g_stop;
  *configured = true;
  Trainer trainer(strategy, replicas, devices->reducer.get(), *train, test ? &*test : nullptr,
                  trainer_options);
  auto summary = trainer.Run();
  if (!summary.ok()) return summary.status();
  if (summary->stopped) return absl::OkStatus();
  if (is_chief && !summary->epochs.empty()) {
    const EpochResult& last = summary->epochs.back();
    if (last.test_auc >= 0) {
      LOG_INFO(
          "final test AUC {:.4f}{} (log loss {:.4f}) after {} global steps in {:.1f}s",
          last.test_auc,
          test->oracle_auc >= 0 ? absl::StrFormat(", the data's best %.4f", test->oracle_auc) : "",
          last.test_loss, summary->global_steps, summary->wall_seconds);
    } else {
      LOG_INFO("final test accuracy {:.4f} (test loss {:.4f}) after {} global steps in {:.1f}s",
               last.test_accuracy, last.test_loss, summary->global_steps, summary->wall_seconds);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace fulcrum

int main(int argc, char** argv) {
  fulcrum::KeepFreedMemoryForReuse();
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
  const absl::Status status = fulcrum::Run(&configured);
  if (!status.ok()) {
    spdlog::error("{}", status.ToString());
    std::cerr << "worker: " << status.message() << "\n";
    // 2: the flags (or cluster spec) are wrong; 1: the run failed.
    return !configured && status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
