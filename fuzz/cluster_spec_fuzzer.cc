// Fuzz target: the cluster spec as a daemon reads it -- TF_CONFIG JSON (in
// the environment or a --cluster_spec file) and the cluster flags (the
// input's lines: --ps_hosts, --worker_hosts, --chief_host, --task_type,
// --task_index). Whatever resolves must be valid, and what daemons then
// ask of it must answer.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/cluster_spec.h"
#include "common/file_system.h"
#include "fuzz/fuzz_input.h"

namespace fulcrum::fuzz {
namespace {

void Use(const absl::StatusOr<TfConfig>& config) {
  if (!config.ok()) return;
  Check(ValidateTfConfig(*config).ok(), "a resolved cluster spec does not validate");
  const int replicas = NumReplicas(config->cluster());
  Check(static_cast<int>(ReplicaAddresses(config->cluster()).size()) == replicas,
        "replica addresses and replicas differ");
  if (absl::StatusOr<int> id = ReplicaId(*config); id.ok()) {
    Check(*id >= 0 && *id < replicas, "a replica id out of range");
  }
  (void)TaskAddress(*config);
}

}  // namespace
}  // namespace fulcrum::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fulcrum;  // NOLINT(google-build-using-namespace)
  const std::string input(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<TfConfig> parsed = ParseTfConfig(input);
  fuzz::Use(parsed);
  // What parses, written again, reads back the same.
  if (parsed.ok()) {
    const absl::StatusOr<TfConfig> again = ParseTfConfig(WriteTfConfig(*parsed));
    fuzz::Check(again.ok(), "a written TF_CONFIG does not parse");
    fuzz::Check(again->SerializeAsString() == parsed->SerializeAsString(),
                "a written TF_CONFIG reads back another");
  }
  const std::unique_ptr<FileSystem> fs = MakeLocalFileSystem();

  ClusterSources from_env;
  from_env.tf_config_env = input;
  fuzz::Use(ResolveTfConfig(from_env, *fs));

  ClusterSources from_file;
  from_file.cluster_spec_path = fuzz::WriteScratchFile("tf_config.json", input);
  fuzz::Use(ResolveTfConfig(from_file, *fs));

  std::vector<std::string> lines = absl::StrSplit(input, '\n');
  lines.resize(5);
  ClusterSources from_flags;
  from_flags.flags = {lines[0], lines[1], lines[2], lines[3], 0};
  if (!absl::SimpleAtoi(lines[4], &from_flags.flags.task_index)) from_flags.flags.task_index = 0;
  fuzz::Use(ResolveTfConfig(from_flags, *fs));
  return 0;
}
