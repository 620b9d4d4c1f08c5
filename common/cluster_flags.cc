#include "common/cluster_flags.h"

#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(std::string, cluster_spec, "",
          "Path of a file holding the cluster spec as TF_CONFIG JSON. Takes precedence over "
          "the host flags and the TF_CONFIG environment variable.");
ABSL_FLAG(std::string, ps_hosts, "", "Comma-separated host:port of every parameter server.");
ABSL_FLAG(std::string, worker_hosts, "", "Comma-separated host:port of every worker.");
ABSL_FLAG(std::string, chief_host, "", "host:port of the chief, if the cluster has one.");
ABSL_FLAG(std::string, task_type, "",
          "This task's type with the host flags: chief, worker or ps; \"\" is the program's own "
          "(ps for ps_server, worker for worker).");
ABSL_FLAG(int, task_index, 0, "This task's index among the tasks of its type.");

namespace fulcrum {

ClusterSources ClusterSourcesFromFlags(const std::string& role) {
  ClusterSources sources;
  sources.cluster_spec_path = absl::GetFlag(FLAGS_cluster_spec);
  const std::string task_type = absl::GetFlag(FLAGS_task_type);
  sources.flags = {absl::GetFlag(FLAGS_ps_hosts), absl::GetFlag(FLAGS_worker_hosts),
                   absl::GetFlag(FLAGS_chief_host), task_type.empty() ? role : task_type,
                   absl::GetFlag(FLAGS_task_index)};
  if (const char* env = std::getenv("TF_CONFIG")) sources.tf_config_env = env;
  return sources;
}

absl::StatusOr<std::vector<std::string>> PsHostsFromFlags() {
  std::vector<std::string> hosts =
      absl::StrSplit(absl::GetFlag(FLAGS_ps_hosts), ',', absl::SkipWhitespace());
  if (!hosts.empty()) return hosts;
  ClusterSources sources = ClusterSourcesFromFlags("");
  sources.flags = ClusterFlags();  // the spec's file or TF_CONFIG, whole
  if (!sources.cluster_spec_path.empty() || !sources.tf_config_env.empty()) {
    auto config = ResolveTfConfig(sources, *MakeLocalFileSystem());
    if (!config.ok()) return config.status();
    hosts.assign(config->cluster().ps().begin(), config->cluster().ps().end());
  }
  if (hosts.empty()) {
    return absl::InvalidArgumentError(
        "no servers: pass --ps_hosts, or a cluster spec with ps tasks (--cluster_spec or "
        "TF_CONFIG)");
  }
  return hosts;
}

}  // namespace fulcrum
