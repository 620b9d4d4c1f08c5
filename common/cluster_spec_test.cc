#include "common/cluster_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "common/faulty_file_system.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

TEST(ClusterSpecTest, ParsesTfConfigJson) {
  auto config = ParseTfConfig(R"({"cluster": {"chief": ["c:1"], "worker": ["w0:2", "w1:3"],
      "ps": ["p0:4", "p1:5"]}, "task": {"type": "worker", "index": 1}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cluster().worker_size(), 2);
  EXPECT_EQ(config->cluster().ps(1), "p1:5");
  EXPECT_EQ(NumReplicas(config->cluster()), 3);
  EXPECT_EQ(*ReplicaId(*config), 2);  // worker 1 after the chief
  EXPECT_EQ(*TaskAddress(*config), "w1:3");
  EXPECT_EQ(ReplicaAddresses(config->cluster()), (std::vector<std::string>{"c:1", "w0:2", "w1:3"}));
}

TEST(ClusterSpecTest, WritesTfConfigThatReadsBackTheSame) {
  auto config = ParseTfConfig(R"({"cluster": {"chief": ["c:1"], "worker": ["w0:2"],
      "ps": ["p0:4", "p1:5"]}, "task": {"type": "ps", "index": 0}, "rpc_layer": "grpc"})");
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string json = WriteTfConfig(*config);
  EXPECT_EQ(json, R"({"cluster": {"chief": ["c:1"], "worker": ["w0:2"], "ps": ["p0:4", "p1:5"]}, )"
                  R"("task": {"type": "ps", "index": 0}, "rpc_layer": "grpc"})");
  auto again = ParseTfConfig(json);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->SerializeAsString(), config->SerializeAsString());
  // Strings are escaped as JSON's.
  TfConfig odd = *config;
  odd.set_environment("a \"quoted\"\\ path\n");
  auto back = ParseTfConfig(WriteTfConfig(odd));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->environment(), odd.environment());
}

TEST(ClusterSpecTest, RejectsUnknownFieldsAndBadJson) {
  EXPECT_THAT(ParseTfConfig(R"({"cluster": {"workers": ["a:1"]}})").status().message(),
              HasSubstr("workers"));
  EXPECT_FALSE(ParseTfConfig("{not json").ok());
}

TEST(ClusterSpecTest, ErrorsNameTheBadField) {
  auto bad_host = ParseTfConfig(
      R"({"cluster": {"worker": ["a:1", "nohost"]}, "task": {"type": "worker", "index": 0}})");
  EXPECT_THAT(bad_host.status().message(), HasSubstr("cluster.worker[1]"));
  auto bad_index =
      ParseTfConfig(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}})");
  EXPECT_THAT(bad_index.status().message(), HasSubstr("task.index"));
  auto bad_type =
      ParseTfConfig(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "master", "index": 0}})");
  EXPECT_THAT(bad_type.status().message(), HasSubstr("task.type"));
  auto duplicate = ParseTfConfig(
      R"({"cluster": {"worker": ["a:1"], "ps": ["a:1"]}, "task": {"type": "ps", "index": 0}})");
  EXPECT_THAT(duplicate.status().message(), HasSubstr("listed twice"));
  auto no_workers = ParseTfConfig(R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps"}})");
  EXPECT_THAT(no_workers.status().message(), HasSubstr("chief or at least one worker"));
  auto bad_port = ParseTfConfig(
      R"({"cluster": {"worker": ["a:99999"]}, "task": {"type": "worker", "index": 0}})");
  EXPECT_THAT(bad_port.status().message(), HasSubstr("0-65535"));
}

TEST(ClusterSpecTest, FlagsBuildTheSameConfig) {
  FaultyFileSystem fs;
  ClusterSources sources;
  sources.flags.ps_hosts = "p0:4,p1:5";
  sources.flags.worker_hosts = "w0:2,w1:3";
  sources.flags.chief_host = "c:1";
  sources.flags.task_type = "ps";
  sources.flags.task_index = 1;
  sources.tf_config_env = "ignored because flags come first";
  auto config = ResolveTfConfig(sources, fs);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cluster().chief(0), "c:1");
  EXPECT_EQ(*TaskAddress(*config), "p1:5");
  EXPECT_FALSE(ReplicaId(*config).ok());

  sources.flags.task_index = 2;
  EXPECT_THAT(ResolveTfConfig(sources, fs).status().message(), HasSubstr("cluster flags"));
}

TEST(ClusterSpecTest, ReadsClusterSpecFileFirst) {
  FaultyFileSystem fs;
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/cluster.json";
  std::ofstream(path) << R"({"cluster": {"worker": ["w:1"]}, "task": {"type": "worker"}})";
  ClusterSources sources;
  sources.cluster_spec_path = path;
  sources.flags.worker_hosts = "other:2";
  auto config = ResolveTfConfig(sources, fs);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cluster().worker(0), "w:1");

  sources.cluster_spec_path = path + ".missing";
  EXPECT_THAT(ResolveTfConfig(sources, fs).status().message(), HasSubstr("--cluster_spec"));
  sources.cluster_spec_path = path;
  FaultyFileSystem::Faults unreadable;
  unreadable.fail_reads = true;
  fs.SetFaults(unreadable);
  EXPECT_THAT(ResolveTfConfig(sources, fs).status().message(),
              HasSubstr("--cluster_spec: cannot read '" + path + "'"));
}

TEST(ClusterSpecTest, FallsBackToEnvironmentThenFails) {
  FaultyFileSystem fs;
  ClusterSources sources;
  sources.tf_config_env = R"({"cluster": {"worker": ["w:1"]}, "task": {"type": "worker"}})";
  EXPECT_TRUE(ResolveTfConfig(sources, fs).ok());
  EXPECT_THAT(ResolveTfConfig(ClusterSources{}, fs).status().message(), HasSubstr("TF_CONFIG"));
}

}  // namespace
}  // namespace fulcrum
