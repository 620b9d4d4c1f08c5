#include "worker/worker_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, log_format, "text",
          "text (one line per event: time, role:index, level, message) or json (one JSON object "
          "per line, for log shippers).");
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
ABSL_FLAG(bool, stream_data, false,
          "criteo: stream the training file instead of reading it into memory: each epoch reads "
          "it again and mixes this worker's share through --shuffle_buffer examples, so memory "
          "does not grow with the file (the test file is still read whole).");
ABSL_FLAG(int64_t, shuffle_buffer, 65536,
          "--stream_data: examples of the share shuffled at once (about 270 bytes each).");
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
          "Serve Prometheus metrics at http://<metrics_host>:<port>/metrics and the worker's "
          "status page at / (the job's progress, curves and the servers' pages; with TLS, to "
          "loopback clients only); 0 picks a free port (printed in the 'metrics on' line); -1: "
          "none.");
ABSL_FLAG(std::string, metrics_host, "0.0.0.0", "Address the metrics endpoint binds.");
ABSL_FLAG(int, debug_step_delay_ms, 0,
          "For tests and drills: adds this many milliseconds to each step's compute, as a slow "
          "device or a loaded machine would (a straggler: its compute shows high in the step's "
          "parts, and in sync mode the others' exchange too). 0: none.");
ABSL_FLAG(std::string, trace_file, "",
          "Write a Chrome trace (Perfetto, chrome://tracing) of the steps --trace_steps picks: "
          "each step and its parts, and this worker's calls to each server, which then trace "
          "their handling of them if they have a --trace_file of their own (`fulcrumctl "
          "merge-traces` joins the files; arrows link each call to its handling). \"\": none.");
ABSL_FLAG(std::string, trace_steps, "1:100",
          "With --trace_file: the steps to trace, N:M, this worker's steps N to M (counted from 1 "
          "in this run).");
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
ABSL_FLAG(bool, shard_optimizer, false,
          "multi_worker_mirrored: each worker keeps and updates only its part of the optimizer's "
          "slots (ZeRO stage 1): their memory per worker falls by the group's size, for a model "
          "whose slots do not fit on every worker. A worker lost for good then takes its part "
          "with it; its slots start again from their initial values. Off by default: every "
          "worker holds every slot, and a step costs no more (see docs/strategies.md).");
ABSL_FLAG(int, startup_timeout_secs, 600,
          "multi_worker_mirrored: how long the chief waits for every worker to start (pods "
          "start minutes apart) before it starts without those missing; the others wait twice "
          "as long for its initial variables, and a restarted worker to be admitted back.");
ABSL_FLAG(int, call_timeout_secs, 120,
          "Deadline of each call to a server, long polls included; servers not up yet are "
          "waited for this long.");

namespace fulcrum {

WorkerFlags WorkerFlagsFromCommandLine() {
  WorkerFlags flags;
  flags.log_format = absl::GetFlag(FLAGS_log_format);
  flags.strategy = absl::GetFlag(FLAGS_strategy);
  flags.mode = absl::GetFlag(FLAGS_mode);
  flags.staleness = absl::GetFlag(FLAGS_staleness);
  flags.replicas_to_aggregate = absl::GetFlag(FLAGS_replicas_to_aggregate);
  flags.model = absl::GetFlag(FLAGS_model);
  flags.hidden = absl::GetFlag(FLAGS_hidden);
  flags.dataset = absl::GetFlag(FLAGS_dataset);
  flags.ctr_vocabulary = absl::GetFlag(FLAGS_ctr_vocabulary);
  flags.ctr_train_examples = absl::GetFlag(FLAGS_ctr_train_examples);
  flags.ctr_test_examples = absl::GetFlag(FLAGS_ctr_test_examples);
  flags.embedding_dim = absl::GetFlag(FLAGS_embedding_dim);
  flags.embedding_optimizer = absl::GetFlag(FLAGS_embedding_optimizer);
  flags.embedding_learning_rate = absl::GetFlag(FLAGS_embedding_learning_rate);
  flags.embedding_max_rows = absl::GetFlag(FLAGS_embedding_max_rows);
  flags.embedding_admit_after = absl::GetFlag(FLAGS_embedding_admit_after);
  flags.data_dir = absl::GetFlag(FLAGS_data_dir);
  flags.stream_data = absl::GetFlag(FLAGS_stream_data);
  flags.shuffle_buffer = absl::GetFlag(FLAGS_shuffle_buffer);
  flags.num_classes = absl::GetFlag(FLAGS_num_classes);
  flags.epochs = absl::GetFlag(FLAGS_epochs);
  flags.batch_size = absl::GetFlag(FLAGS_batch_size);
  flags.optimizer = absl::GetFlag(FLAGS_optimizer);
  flags.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  flags.momentum = absl::GetFlag(FLAGS_momentum);
  flags.l1 = absl::GetFlag(FLAGS_l1);
  flags.l2 = absl::GetFlag(FLAGS_l2);
  flags.learning_rate_scaling = absl::GetFlag(FLAGS_learning_rate_scaling);
  flags.seed = absl::GetFlag(FLAGS_seed);
  flags.device = absl::GetFlag(FLAGS_device);
  flags.local_replicas = absl::GetFlag(FLAGS_local_replicas);
  flags.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  flags.summary_json = absl::GetFlag(FLAGS_summary_json);
  flags.metrics_jsonl = absl::GetFlag(FLAGS_metrics_jsonl);
  flags.log_every_steps = absl::GetFlag(FLAGS_log_every_steps);
  flags.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  flags.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  flags.checkpoint_every_secs = absl::GetFlag(FLAGS_checkpoint_every_secs);
  flags.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  flags.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  flags.debug_step_delay_ms = absl::GetFlag(FLAGS_debug_step_delay_ms);
  flags.trace_file = absl::GetFlag(FLAGS_trace_file);
  flags.trace_steps = absl::GetFlag(FLAGS_trace_steps);
  flags.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  flags.wire_dtype = absl::GetFlag(FLAGS_wire_dtype);
  flags.channels_per_ps = absl::GetFlag(FLAGS_channels_per_ps);
  flags.collective_port = absl::GetFlag(FLAGS_collective_port);
  flags.shard_optimizer = absl::GetFlag(FLAGS_shard_optimizer);
  flags.bind_host = absl::GetFlag(FLAGS_bind_host);
  flags.collective_timeout_secs = absl::GetFlag(FLAGS_collective_timeout_secs);
  flags.startup_timeout_secs = absl::GetFlag(FLAGS_startup_timeout_secs);
  flags.call_timeout_secs = absl::GetFlag(FLAGS_call_timeout_secs);
  return flags;
}

}  // namespace fulcrum
