#include "common/cluster_spec.h"

#include <google/protobuf/util/json_util.h>

#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace fulcrum {
namespace {

const google::protobuf::RepeatedPtrField<std::string>* JobHosts(const ClusterDef& cluster,
                                                                absl::string_view type) {
  if (type == "chief") return &cluster.chief();
  if (type == "worker") return &cluster.worker();
  if (type == "ps") return &cluster.ps();
  if (type == "evaluator") return &cluster.evaluator();
  return nullptr;
}

absl::Status ValidateHostPort(absl::string_view field, absl::string_view address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", address, "' is not host:port with a port in 0-65535"));
  }
  return absl::OkStatus();
}

void AddHosts(absl::string_view csv, google::protobuf::RepeatedPtrField<std::string>* hosts) {
  for (absl::string_view host : absl::StrSplit(csv, ',', absl::SkipWhitespace())) {
    hosts->Add(std::string(host));
  }
}

}  // namespace

absl::StatusOr<TfConfig> ParseTfConfig(absl::string_view json) {
  TfConfig config;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &config, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG is not valid: ", status.message().as_string()));
  }
  if (absl::Status valid = ValidateTfConfig(config); !valid.ok()) return valid;
  return config;
}

absl::StatusOr<TfConfig> ResolveTfConfig(const ClusterSources& sources, FileSystem& fs) {
  if (!sources.cluster_spec_path.empty()) {
    auto text = ReadFile(fs, sources.cluster_spec_path);
    if (!text.ok()) {
      return absl::NotFoundError(
          absl::StrCat("--cluster_spec: cannot read '", sources.cluster_spec_path, "'"));
    }
    auto config = ParseTfConfig(*text);
    if (!config.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--cluster_spec '", sources.cluster_spec_path,
                                                     "': ", config.status().message()));
    }
    return config;
  }
  const ClusterFlags& flags = sources.flags;
  if (!flags.ps_hosts.empty() || !flags.worker_hosts.empty() || !flags.chief_host.empty()) {
    TfConfig config;
    AddHosts(flags.ps_hosts, config.mutable_cluster()->mutable_ps());
    AddHosts(flags.worker_hosts, config.mutable_cluster()->mutable_worker());
    AddHosts(flags.chief_host, config.mutable_cluster()->mutable_chief());
    config.mutable_task()->set_type(flags.task_type);
    config.mutable_task()->set_index(flags.task_index);
    if (absl::Status valid = ValidateTfConfig(config); !valid.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("cluster flags: ", valid.message()));
    }
    return config;
  }
  if (!sources.tf_config_env.empty()) return ParseTfConfig(sources.tf_config_env);
  return absl::InvalidArgumentError(
      "no cluster spec: set TF_CONFIG, --cluster_spec, or --ps_hosts/--worker_hosts "
      "with --task_type and --task_index");
}

namespace {

// `text` as a JSON string.
std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out,
                      absl::StrFormat("\\u%04x", static_cast<int>(static_cast<unsigned char>(c))));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string WriteTfConfig(const TfConfig& config) {
  std::vector<std::string> jobs;
  for (const char* type : {"chief", "worker", "ps", "evaluator"}) {
    const auto& hosts = *JobHosts(config.cluster(), type);
    if (hosts.empty()) continue;
    std::vector<std::string> quoted;
    for (const std::string& host : hosts) quoted.push_back(JsonString(host));
    jobs.push_back(absl::StrCat(JsonString(type), ": [", absl::StrJoin(quoted, ", "), "]"));
  }
  std::string json = absl::StrCat("{\"cluster\": {", absl::StrJoin(jobs, ", "),
                                  "}, \"task\": {\"type\": ", JsonString(config.task().type()),
                                  ", \"index\": ", config.task().index(), "}");
  if (!config.environment().empty()) {
    absl::StrAppend(&json, ", \"environment\": ", JsonString(config.environment()));
  }
  if (!config.rpc_layer().empty()) {
    absl::StrAppend(&json, ", \"rpc_layer\": ", JsonString(config.rpc_layer()));
  }
  return json + "}";
}

absl::Status ValidateTfConfig(const TfConfig& config) {
  const ClusterDef& cluster = config.cluster();
  if (cluster.chief_size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster.chief: at most one chief, got ", cluster.chief_size()));
  }
  if (cluster.chief_size() + cluster.worker_size() == 0) {
    return absl::InvalidArgumentError("cluster: needs a chief or at least one worker");
  }
  std::set<std::string> seen;
  for (const char* type : {"chief", "worker", "ps", "evaluator"}) {
    const auto& hosts = *JobHosts(cluster, type);
    for (int i = 0; i < hosts.size(); ++i) {
      const std::string field = absl::StrCat("cluster.", type, "[", i, "]");
      if (absl::Status s = ValidateHostPort(field, hosts[i]); !s.ok()) return s;
      // Port 0 ("pick a free port") may repeat; a real address may not.
      if (!absl::EndsWith(hosts[i], ":0") && !seen.insert(hosts[i]).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": address '", hosts[i], "' is listed twice"));
      }
    }
  }
  const std::string& type = config.task().type();
  const auto* hosts = JobHosts(cluster, type);
  if (hosts == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("task.type: '", type, "' is not one of chief, worker, ps, evaluator"));
  }
  const int index = config.task().index();
  // An evaluator may run outside the training cluster, as in TensorFlow.
  if (index < 0 || (type != "evaluator" && index >= hosts->size())) {
    return absl::InvalidArgumentError(absl::StrCat("task.index: ", index, " is out of range for '",
                                                   type, "', which has ", hosts->size(),
                                                   " task(s)"));
  }
  if (!config.rpc_layer().empty() && config.rpc_layer() != "grpc") {
    return absl::InvalidArgumentError(
        absl::StrCat("rpc_layer: '", config.rpc_layer(), "' is not supported; use grpc"));
  }
  return absl::OkStatus();
}

int NumReplicas(const ClusterDef& cluster) { return cluster.chief_size() + cluster.worker_size(); }

absl::StatusOr<int> ReplicaId(const TfConfig& config) {
  if (config.task().type() == "chief") return 0;
  if (config.task().type() == "worker") {
    return config.task().index() + config.cluster().chief_size();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("task.type '", config.task().type(), "' is not a training replica"));
}

std::vector<std::string> ReplicaAddresses(const ClusterDef& cluster) {
  std::vector<std::string> addresses(cluster.chief().begin(), cluster.chief().end());
  addresses.insert(addresses.end(), cluster.worker().begin(), cluster.worker().end());
  return addresses;
}

absl::StatusOr<std::string> TaskAddress(const TfConfig& config) {
  const auto* hosts = JobHosts(config.cluster(), config.task().type());
  if (hosts == nullptr || config.task().index() >= hosts->size()) {
    return absl::NotFoundError(
        absl::StrCat("task ", config.task().type(), ":", config.task().index(), " has no address"));
  }
  return (*hosts)[config.task().index()];
}

}  // namespace fulcrum
