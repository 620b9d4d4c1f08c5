// The cluster flags of the daemons and tools, defined once: --cluster_spec,
// --ps_hosts, --worker_hosts, --chief_host, --task_type, --task_index. Only
// for *_main.cc files: libraries take the ClusterSources or the TfConfig.
#ifndef FULCRUM_COMMON_CLUSTER_FLAGS_H_
#define FULCRUM_COMMON_CLUSTER_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cluster_spec.h"

namespace fulcrum {

// Where this process may find its cluster spec: the flags, and the TF_CONFIG
// environment variable. `role` is the task type when --task_type is not
// given: "ps" for a ps_server, "worker" for a worker.
ClusterSources ClusterSourcesFromFlags(const std::string& role);

// The parameter servers, for clients and tools that need only them:
// --ps_hosts, else the cluster spec's (--cluster_spec, else TF_CONFIG).
// INVALID_ARGUMENT when none are given, naming what to give.
absl::StatusOr<std::vector<std::string>> PsHostsFromFlags();

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CLUSTER_FLAGS_H_
