// The cluster spec: TensorFlow's TF_CONFIG, from JSON or from flags, validated.
//
// Daemons resolve it once in main and pass the TfConfig proto down; nothing
// here reads the environment or flags. Thread-compatible free functions.
#ifndef FULCRUM_COMMON_CLUSTER_SPEC_H_
#define FULCRUM_COMMON_CLUSTER_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/file_system.h"
#include "proto/config.pb.h"

namespace fulcrum {

// Parses TF_CONFIG JSON. Unknown fields are errors, so a typo is not ignored.
// The result is validated.
absl::StatusOr<TfConfig> ParseTfConfig(absl::string_view json);

// TF_CONFIG JSON of `config`, as TensorFlow writes it: the jobs that have
// tasks, and the task's type and index (0 included). ParseTfConfig reads it
// back the same.
std::string WriteTfConfig(const TfConfig& config);

// The cluster-spec flags of every daemon, as given (empty: not given).
struct ClusterFlags {
  std::string ps_hosts;      // comma-separated host:port
  std::string worker_hosts;  // comma-separated host:port
  std::string chief_host;    // host:port
  std::string task_type;     // chief, worker, ps or evaluator
  int task_index = 0;
};

// Where a daemon may find its cluster spec, in order of precedence.
struct ClusterSources {
  std::string cluster_spec_path;  // --cluster_spec: a file holding TF_CONFIG JSON
  ClusterFlags flags;             // used when any host flag is set
  std::string tf_config_env;      // the TF_CONFIG environment variable
};

// The first source given: the file (read through `fs`), else the flags,
// else TF_CONFIG. Errors name the source and the bad field.
absl::StatusOr<TfConfig> ResolveTfConfig(const ClusterSources& sources, FileSystem& fs);

// Checks roles, indices, host:port syntax and duplicates; errors name the
// field, e.g. "cluster.worker[2]: 'h' is not host:port".
absl::Status ValidateTfConfig(const TfConfig& config);

// Training replicas: the chief (if any) and the workers.
int NumReplicas(const ClusterDef& cluster);

// The replica id of a chief or worker task: the chief is 0, worker i is
// i + (number of chiefs). Other task types have none.
absl::StatusOr<int> ReplicaId(const TfConfig& config);

// The training replicas' "host:port", by replica id: the chief, then the
// workers.
std::vector<std::string> ReplicaAddresses(const ClusterDef& cluster);

// This task's own "host:port" from the cluster.
absl::StatusOr<std::string> TaskAddress(const TfConfig& config);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CLUSTER_SPEC_H_
