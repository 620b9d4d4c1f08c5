#include "worker/worker_setup.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/consistency/policy.h"
#include "common/consistency_mode.h"
#include "common/describe_text.h"
#include "common/embedding.h"
#include "common/logging.h"
#include "common/optimizer/spec.h"
#include "common/rpc/security_flags.h"
#include "common/tensor.h"
#include "fulcrum/grpc_ps_client.h"
#include "worker/collective/grpc/grpc_peer_links.h"
#include "worker/cpu/cpu_device.h"
#include "worker/cuda/cuda.h"
#include "worker/strategy/all_reduce_strategy.h"
#include "worker/strategy/parameter_server_strategy.h"

namespace fulcrum {
namespace {

// The optimizer `name` at learning rate `lr`, as flags `flag` and
// `lr_flag` give them (for errors), with --momentum, --l1, --l2 and
// --learning_rate_scaling.
absl::StatusOr<OptimizerSpec> OptimizerFromFlags(const WorkerFlags& flags, const std::string& name,
                                                 double lr, const char* flag, const char* lr_flag) {
  auto kind = OptimizerKindFromName(name);
  if (!kind.ok())
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", kind.status().message()));
  OptimizerSpec spec;
  spec.set_kind(*kind);
  if (*kind == OptimizerSpec::MOMENTUM) spec.set_momentum(static_cast<float>(flags.momentum));
  if (*kind == OptimizerSpec::FTRL) {
    spec.set_l1(static_cast<float>(flags.l1));
    spec.set_l2(static_cast<float>(flags.l2));
    if (!(spec.l1() >= 0) || !(spec.l2() >= 0)) {
      return absl::InvalidArgumentError("--l1 and --l2 must be >= 0");
    }
  }
  if (!(lr > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(lr_flag, ": must be > 0, got ", lr));
  }
  spec.set_learning_rate(static_cast<float>(lr));
  const std::string scaling = flags.learning_rate_scaling;
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

struct ServerState {
  // The job is under way already: the servers know this worker (it
  // restarted) or restored a checkpoint.
  bool resume = false;
};

// The servers must run the mode (and bounds) this worker was told.
absl::StatusOr<ServerState> CheckServers(const WorkerFlags& flags, PsClient& client, int replica,
                                         const std::vector<std::string>& ps) {
  auto described = client.Describe();
  if (!described.ok()) return described.status();
  auto made = MakeClientPolicy(client.mode());
  if (!made.ok()) return made.status();
  const ClientConsistencyPolicy& policy = **made;
  const ModeBounds expected{flags.replicas_to_aggregate, flags.staleness};
  for (size_t i = 0; i < described->size(); ++i) {
    const DescribeResponse& d = (*described)[i];
    if (!WasAsked(d)) continue;  // lost for good: its shards are on the others
    const std::string where = absl::StrCat("ps ", i, " (", ps[i], ")");
    if (d.mode() != policy.mode()) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker --mode=", flags.mode, " but ", where, " runs ",
                       ConsistencyModeName(d.mode()), "; start both with the same --mode"));
    }
    if (absl::Status s = policy.CheckServer(d, expected); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": ", s.message(), "; see --replicas_to_aggregate, --staleness"));
    }
  }
  ServerState state;
  for (const DescribeResponse& d : *described) {
    if (!WasAsked(d)) continue;  // its empty entry tells nothing (restored step 0)
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

// Connects to the servers, checks they run this worker's mode, creates the
// model's variables there and waits for the job to start. The flags are
// checked (CheckStrategy).
absl::StatusOr<StrategyParts> MakeParameterServerStrategy(
    const WorkerFlags& flags, const TfConfig& cluster, int replica, const ModelConfig& model,
    const std::optional<EmbeddingConfig>& embeddings, const WorkerSecurity& security,
    const std::atomic<bool>* stop, TraceFile* trace) {
  PsClientOptions options;
  options.trace = trace;
  options.worker_id = replica;
  options.mode = *ParseConsistencyMode(flags.mode);
  options.wire_dtype = *ParseFloatEncoding(flags.wire_dtype);
  options.channels_per_server = flags.channels_per_ps;
  options.call_timeout = absl::Seconds(flags.call_timeout_secs);
  options.retry_timeout = options.call_timeout;
  options.tls_cert = security.tls.cert;
  options.tls_key = security.tls.key;
  options.tls_ca = security.tls.ca;
  options.auth_token = security.token;
  const std::vector<std::string> ps(cluster.cluster().ps().begin(), cluster.cluster().ps().end());
  StrategyParts parts;
  parts.client = NewGrpcPsClient(ps, options);
  LOG_INFO("waiting for {} parameter server(s): {}", ps.size(), absl::StrJoin(ps, ", "));
  auto servers = CheckServers(flags, *parts.client, replica, ps);
  if (!servers.ok()) return servers.status();
  if (absl::Status s = parts.client->CreateVariables(ModelVariables(model)); !s.ok()) return s;
  if (embeddings) {
    parts.embeddings = std::make_unique<EmbeddingInputs>(parts.client.get(), *embeddings);
    if (absl::Status s = parts.embeddings->CreateTables(); !s.ok()) return s;
  }
  parts.client->StartHeartbeats(absl::Seconds(1));
  if (absl::Status s = parts.client->AwaitJobStart(stop); !s.ok()) return s;
  parts.strategy = std::make_unique<ParameterServerStrategy>(
      parts.client.get(), replica, NumReplicas(cluster.cluster()), servers->resume);
  return parts;
}

// mirrored: a group of one. multi_worker_mirrored: serves the collective
// port and links to every other training replica of the cluster; with a
// cluster token, the links carry it and need it.
absl::StatusOr<StrategyParts> MakeAllReduceStrategy(const WorkerFlags& flags,
                                                    const TfConfig& cluster, int replica,
                                                    bool is_chief, const ModelConfig& model,
                                                    const WorkerSecurity& security,
                                                    FileSystem* fs) {
  const std::string& name = flags.strategy;
  StrategyParts parts;
  if (name == "mirrored") {
    parts.links = std::make_unique<SoloLinks>();
  } else {
    int port = flags.collective_port;
    if (port < 0) {
      auto own = TaskAddress(cluster);
      if (!own.ok()) return own.status();
      const std::string port_text = own->substr(own->rfind(':') + 1);
      if (!absl::SimpleAtoi(port_text, &port)) {
        return absl::InvalidArgumentError(
            absl::StrCat("cluster spec: this task's address '", *own, "' has no port"));
      }
    }
    WarnIfPlaintext(security.tls, flags.bind_host);
    auto links = GrpcPeerLinks::Start(replica, NumReplicas(cluster.cluster()),
                                      absl::StrCat(flags.bind_host, ":", port), security.tls,
                                      security.cluster_token);
    if (!links.ok()) return links.status();
    const std::vector<std::string> peers = ReplicaAddresses(cluster.cluster());
    (*links)->Connect(peers);
    LOG_INFO("all-reduce: rank {} of {}, serving peers on {}:{}; peers {}", replica, peers.size(),
             flags.bind_host, (*links)->port(), absl::StrJoin(peers, ", "));
    parts.links = *std::move(links);
  }
  AllReduceStrategyOptions options;
  options.name = name;
  options.collective.timeout = absl::Seconds(flags.collective_timeout_secs);
  options.startup_timeout = absl::Seconds(flags.startup_timeout_secs);
  options.epochs = flags.epochs;
  options.shard_optimizer = flags.shard_optimizer;
  if (is_chief) {
    options.checkpoint_dir = flags.checkpoint_dir;
    options.fs = fs;
  }
  parts.strategy =
      std::make_unique<AllReduceStrategy>(parts.links.get(), ModelVariables(model), options);
  return parts;
}

}  // namespace

absl::StatusOr<TfConfig> ResolveCluster(const WorkerFlags& flags, const ClusterSources& sources,
                                        FileSystem& fs) {
  if (flags.strategy != "parameter_server" && flags.strategy != "multi_worker_mirrored" &&
      flags.strategy != "mirrored") {
    return absl::InvalidArgumentError(
        absl::StrCat("--strategy: '", flags.strategy,
                     "' is not one of parameter_server, multi_worker_mirrored, mirrored"));
  }
  if (flags.strategy == "mirrored" && !AnyClusterSource(sources)) return LoneWorker();
  return ResolveTfConfig(sources, fs);
}

absl::Status CheckStrategy(const WorkerFlags& flags, const TfConfig& cluster) {
  const std::string& strategy = flags.strategy;
  const int ps = cluster.cluster().ps_size();
  if (strategy == "parameter_server") {
    if (ps == 0) {
      return absl::InvalidArgumentError(
          "cluster.ps: --strategy=parameter_server needs at least one parameter server (or "
          "train without: --strategy=multi_worker_mirrored)");
    }
    if (auto mode = ParseConsistencyMode(flags.mode); !mode.ok()) {
      return mode.status();
    }
    if (auto wire = ParseFloatEncoding(flags.wire_dtype); !wire.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--wire_dtype: ", wire.status().message()));
    }
    if (flags.channels_per_ps < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--channels_per_ps: must be >= 1, got ", flags.channels_per_ps));
    }
    return absl::OkStatus();
  }
  if (flags.mode != "sync") {
    return absl::InvalidArgumentError(absl::StrCat("--mode=", flags.mode, ": --strategy=", strategy,
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
  if (flags.collective_timeout_secs < 1 || flags.startup_timeout_secs < 1) {
    return absl::InvalidArgumentError(
        "--collective_timeout_secs and --startup_timeout_secs must be >= 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ModelFromFlags(const WorkerFlags& flags, const TfConfig& cluster) {
  auto optimizer = OptimizerFromFlags(flags, flags.optimizer, flags.learning_rate, "--optimizer",
                                      "--learning_rate");
  if (!optimizer.ok()) return optimizer.status();
  auto hidden = ParseHidden(flags.hidden);
  if (!hidden.ok()) return hidden.status();
  if (flags.epochs < 1 || flags.batch_size < 1 || flags.log_every_steps < 1) {
    return absl::InvalidArgumentError("--epochs, --batch_size and --log_every_steps must be >= 1");
  }
  ModelConfig model;
  model.kind = flags.model;
  model.hidden = *hidden;
  model.num_classes = flags.num_classes;
  model.optimizer = *optimizer;
  model.seed = flags.seed;
  model.num_ps = std::max(1, cluster.cluster().ps_size());  // shards per variable
  if (absl::Status s = ValidateModelConfig(model); !s.ok()) return s;
  return model;
}

absl::StatusOr<std::optional<EmbeddingConfig>> EmbeddingsFromFlags(const WorkerFlags& flags,
                                                                   const ModelConfig& model) {
  std::optional<EmbeddingConfig> embeddings;
  if (model.kind != "ctr") return embeddings;
  if (flags.strategy != "parameter_server") {
    return absl::InvalidArgumentError(
        "--model=ctr keeps its embedding tables on parameter servers: use "
        "--strategy=parameter_server");
  }
  auto table_optimizer =
      OptimizerFromFlags(flags, flags.embedding_optimizer, flags.embedding_learning_rate,
                         "--embedding_optimizer", "--embedding_learning_rate");
  if (!table_optimizer.ok()) return table_optimizer.status();
  if (table_optimizer->kind() == OptimizerSpec::MOMENTUM) {
    return absl::InvalidArgumentError(
        "--embedding_optimizer: momentum has no sparse form; use sgd, adagrad, adam or ftrl");
  }
  embeddings.emplace();
  EmbeddingTableSpec& table = embeddings->table;
  table.set_width(flags.embedding_dim);
  table.mutable_initializer()->set_kind(InitializerSpec::RANDOM_UNIFORM);
  table.mutable_initializer()->set_minval(-0.05f);
  table.mutable_initializer()->set_maxval(0.05f);
  table.mutable_initializer()->set_seed(flags.seed);
  *table.mutable_optimizer() = *table_optimizer;
  table.set_max_rows(flags.embedding_max_rows);
  table.set_admit_after(flags.embedding_admit_after);
  table.set_name("field");
  if (absl::Status s = ValidateEmbeddingTableSpec(table); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--embedding_*: ", s.message()));
  }
  return embeddings;
}

absl::StatusOr<TrainingData> LoadData(const WorkerFlags& flags, const ModelConfig& model,
                                      bool is_chief, FileSystem& fs) {
  DataSource source;
  source.kind = flags.dataset;
  source.data_dir = flags.data_dir;
  source.num_classes = flags.num_classes;
  source.ctr_vocabulary = flags.ctr_vocabulary;
  source.ctr_train_examples = flags.ctr_train_examples;
  source.ctr_test_examples = flags.ctr_test_examples;
  source.seed = flags.seed;
  source.stream = flags.stream_data;
  source.shuffle_buffer = flags.shuffle_buffer;
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
  const auto data_error = [](const absl::Status& s) {
    return s.code() == absl::StatusCode::kInvalidArgument ? absl::DataLossError(s.message()) : s;
  };
  TrainingData data;
  if (source.stream) {
    auto stream = OpenTrainingStream(fs, source);
    if (!stream.ok()) return data_error(stream.status());
    data.train = std::move(stream->shape);
    data.stream = std::move(stream->stream);
  } else {
    auto train = LoadTrainingSet(fs, source);
    if (!train.ok()) return data_error(train.status());
    data.train = *std::move(train);
  }
  if (is_chief) {
    auto test = LoadTestSet(fs, source, data.train.feature_dim);
    if (!test.ok()) return data_error(test.status());
    data.test = *std::move(test);
  }
  LOG_INFO("data: {} training examples of {} features{}{}", data.train.num_examples,
           data.train.feature_dim,
           data.stream
               ? absl::StrCat(" (streamed, shuffled ", data.stream->shuffle_buffer, " at a time)")
               : "",
           data.test ? absl::StrCat(", ", data.test->num_examples, " test examples") : "");
  return data;
}

absl::Status FitToData(const Dataset& train, ModelConfig* model,
                       std::optional<EmbeddingConfig>* embeddings) {
  model->input_dim = train.feature_dim;
  if (*embeddings) {
    EmbeddingConfig& tables = **embeddings;
    tables.fields = static_cast<int>(train.ids_per_example);
    model->input_dim += tables.fields * tables.table.width();
    model->num_classes = 2;  // click or not
    model->input_gradients = true;
    LOG_INFO("ctr model: {} fields of {} floats from the servers' tables and {} numeric features",
             tables.fields, tables.table.width(), train.feature_dim);
  }
  return ValidateModelConfig(*model);
}

absl::StatusOr<Devices> MakeDevices(const WorkerFlags& flags) {
  const std::string& kind = flags.device;
  const int replicas = flags.local_replicas;
  if (kind != "auto" && kind != "cpu" && kind != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: '", kind, "' is not one of auto, cpu, cuda"));
  }
  if (replicas < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--local_replicas: must be >= 1, got ", replicas));
  }
  if (flags.cpu_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cpu_threads: must be >= 0, got ", flags.cpu_threads));
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
  const int threads = flags.cpu_threads > 0 ? flags.cpu_threads : std::max(1, cores / replicas);
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

absl::StatusOr<WorkerTrace> TraceFromFlags(const WorkerFlags& flags, const TfConfig& cluster) {
  WorkerTrace trace;
  if (flags.trace_file.empty()) return trace;
  const std::vector<std::string> range = absl::StrSplit(flags.trace_steps, ':');
  if (range.size() != 2 || !absl::SimpleAtoi(range[0], &trace.first) ||
      !absl::SimpleAtoi(range[1], &trace.last) || trace.first < 1 || trace.last < trace.first) {
    return absl::InvalidArgumentError(absl::StrCat("--trace_steps=", flags.trace_steps,
                                                   ": want N:M, steps N to M with 1 <= N <= M"));
  }
  auto file = TraceFile::Open(flags.trace_file,
                              absl::StrCat(cluster.task().type(), " ", cluster.task().index()));
  if (!file.ok())
    return absl::InvalidArgumentError(absl::StrCat("--trace_file: ", file.status().message()));
  trace.file = *std::move(file);
  LOG_INFO("tracing steps {} to {} to {}", trace.first, trace.last, flags.trace_file);
  return trace;
}

absl::StatusOr<StrategyParts> MakeStrategy(const WorkerFlags& flags, const TfConfig& cluster,
                                           int replica, bool is_chief, const ModelConfig& model,
                                           const std::optional<EmbeddingConfig>& embeddings,
                                           const WorkerSecurity& security, FileSystem* fs,
                                           const std::atomic<bool>* stop, TraceFile* trace) {
  if (flags.strategy == "parameter_server") {
    return MakeParameterServerStrategy(flags, cluster, replica, model, embeddings, security, stop,
                                       trace);
  }
  return MakeAllReduceStrategy(flags, cluster, replica, is_chief, model, security, fs);
}

}  // namespace fulcrum
