// How the worker daemon builds what it trains with from its flags: the
// cluster it is a task of, the model and its embedding tables, the data,
// the local devices and the strategy (parameter servers or all-reduce).
// Each flag is checked here, and errors name it. worker_main.cc puts the
// pieces together. Thread-compatible free functions.
#ifndef FULCRUM_WORKER_WORKER_SETUP_H_
#define FULCRUM_WORKER_WORKER_SETUP_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cluster_spec.h"
#include "common/file_system.h"
#include "common/rpc/credentials.h"
#include "common/trace.h"
#include "fulcrum/ps_client.h"
#include "proto/config.pb.h"
#include "worker/collective/peer_links.h"
#include "worker/data/dataset.h"
#include "worker/data/stream_batcher.h"
#include "worker/device.h"
#include "worker/embedding_inputs.h"
#include "worker/local_reducer.h"
#include "worker/model.h"
#include "worker/strategy/strategy.h"
#include "worker/worker_flags.h"

namespace fulcrum {

// The cluster spec from `sources` (a file of them read through `fs`; or,
// for --strategy=mirrored without one, a worker alone), after checking
// --strategy.
absl::StatusOr<TfConfig> ResolveCluster(const WorkerFlags& flags, const ClusterSources& sources,
                                        FileSystem& fs);

// Whether the cluster and the flags fit the strategy.
absl::Status CheckStrategy(const WorkerFlags& flags, const TfConfig& cluster);

// The model of the flags, checked; its input width is the data's, set by
// FitToData.
absl::StatusOr<ModelConfig> ModelFromFlags(const WorkerFlags& flags, const TfConfig& cluster);

// The CTR model's embedding tables on the servers; none for other models.
// Their fields are the data's, set by FitToData.
absl::StatusOr<std::optional<EmbeddingConfig>> EmbeddingsFromFlags(const WorkerFlags& flags,
                                                                   const ModelConfig& model);

struct TrainingData {
  Dataset train;                        // streamed: its shape only
  std::optional<Dataset> test;          // the chief's
  std::optional<ExampleStream> stream;  // --stream_data: where the training examples come from
};

// The training set and, for the chief, the test set, read through `fs`. A
// data file that does not parse is DATA_LOSS: the run's error, not the
// flags'.
absl::StatusOr<TrainingData> LoadData(const WorkerFlags& flags, const ModelConfig& model,
                                      bool is_chief, FileSystem& fs);

// The model's input width and the tables' fields, from the training set.
absl::Status FitToData(const Dataset& train, ModelConfig* model,
                       std::optional<EmbeddingConfig>* embeddings);

// The local replicas' devices, chosen by --device, and the reducer that
// averages their gradients.
struct Devices {
  std::vector<std::unique_ptr<Device>> devices;
  std::unique_ptr<LocalReducer> reducer;
};
absl::StatusOr<Devices> MakeDevices(const WorkerFlags& flags);

// How this worker's calls are secured: the TLS files, the token its calls
// to the servers carry, and the cluster token of the all-reduce links.
struct WorkerSecurity {
  TlsFiles tls;
  std::string token;
  std::string cluster_token;
};

// A strategy and what it runs on.
struct StrategyParts {
  std::unique_ptr<PsClient> client;             // parameter_server
  std::unique_ptr<EmbeddingInputs> embeddings;  // parameter_server, --model=ctr
  std::unique_ptr<PeerLinks> links;             // the all-reduce strategies
  std::unique_ptr<Strategy> strategy;
};

// --trace_file and --trace_steps: the file (null without one), named for
// `cluster`'s task, and the steps to trace. InvalidArgument for steps not
// N:M with 1 <= N <= M, or a file that cannot be written.
struct WorkerTrace {
  std::unique_ptr<TraceFile> file;
  int64_t first = 0;
  int64_t last = -1;
};
absl::StatusOr<WorkerTrace> TraceFromFlags(const WorkerFlags& flags, const TfConfig& cluster);

// The strategy of --strategy. parameter_server: connects to the servers,
// checks they run this worker's mode, creates the model's variables and
// tables there and waits (until *stop) for the job to start. The all-reduce
// strategies: links to the other replicas (multi_worker_mirrored) and
// restores the chief's checkpoints from `fs`. The servers' client records
// its calls in `trace` (which must outlive it), if given.
absl::StatusOr<StrategyParts> MakeStrategy(const WorkerFlags& flags, const TfConfig& cluster,
                                           int replica, bool is_chief, const ModelConfig& model,
                                           const std::optional<EmbeddingConfig>& embeddings,
                                           const WorkerSecurity& security, FileSystem* fs,
                                           const std::atomic<bool>* stop,
                                           TraceFile* trace = nullptr);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_WORKER_SETUP_H_
