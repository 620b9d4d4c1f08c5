// Every flag of the worker daemon but the cluster's (common/cluster_flags.h)
// and the security flags (common/rpc/security_flags.h), read once into
// WorkerFlags: the rest of the daemon takes that struct, never the flags.
// Only for worker_main.cc.
#ifndef FULCRUM_WORKER_WORKER_FLAGS_H_
#define FULCRUM_WORKER_WORKER_FLAGS_H_

#include <cstdint>
#include <string>

namespace fulcrum {

// Each field holds the flag of its name (--<field>); the flag's help, in
// worker_flags.cc and `worker --help`, gives its default, unit and meaning.
struct WorkerFlags {
  std::string log_format;
  std::string strategy;
  std::string mode;
  int64_t staleness;
  int replicas_to_aggregate;
  std::string model;
  std::string hidden;
  std::string dataset;
  int64_t ctr_vocabulary;
  int64_t ctr_train_examples;
  int64_t ctr_test_examples;
  int64_t embedding_dim;
  std::string embedding_optimizer;
  double embedding_learning_rate;
  int64_t embedding_max_rows;
  int embedding_admit_after;
  std::string data_dir;
  bool stream_data;
  int64_t shuffle_buffer;
  int num_classes;
  int64_t epochs;
  int64_t batch_size;
  std::string optimizer;
  double learning_rate;
  double momentum;
  double l1;
  double l2;
  std::string learning_rate_scaling;
  uint64_t seed;
  std::string device;
  int local_replicas;
  int cpu_threads;
  std::string summary_json;
  std::string metrics_jsonl;
  int64_t log_every_steps;
  std::string checkpoint_dir;
  int64_t checkpoint_every_steps;
  int64_t checkpoint_every_secs;
  int keep_checkpoints;
  int metrics_port;
  int debug_step_delay_ms;
  std::string trace_file;
  std::string trace_steps;
  std::string metrics_host;
  std::string wire_dtype;
  int channels_per_ps;
  int collective_port;
  std::string bind_host;
  int collective_timeout_secs;
  bool shard_optimizer;
  int startup_timeout_secs;
  int call_timeout_secs;
};

// The flags as parsed.
WorkerFlags WorkerFlagsFromCommandLine();

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_WORKER_FLAGS_H_
