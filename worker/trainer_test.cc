// The trainer in-process: workers (threads) and parameter servers in one
// process over the in-process transport, training on real Fashion-MNIST.
#include "worker/trainer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cmath>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "worker/cpu/cpu_device.h"
#include "worker/data/batcher.h"
#include "worker/in_process_ps_transport.h"

namespace fulcrum {
namespace {

Dataset Head(const Dataset& data, int64_t n) {
  Dataset out = data;
  out.num_examples = n;
  out.features.resize(n * data.feature_dim);
  out.labels.resize(n);
  return out;
}

ModelConfig SmallMlp(int num_ps) {
  ModelConfig config;
  config.hidden = {64};
  config.optimizer.set_kind(OptimizerSpec::ADAM);
  config.optimizer.set_learning_rate(2e-3f);
  config.seed = 7;
  config.num_ps = num_ps;
  return config;
}

class FashionMnistTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto train = LoadTrainingSet(DataSource{});
    ASSERT_TRUE(train.ok()) << train.status();
    auto test = LoadTestSet(DataSource{}, train->feature_dim);
    ASSERT_TRUE(test.ok()) << test.status();
    train_ = new Dataset(Head(*train, 12000));
    test_ = new Dataset(Head(*test, 2000));
  }
  static Dataset* train_;
  static Dataset* test_;
};
Dataset* FashionMnistTest::train_ = nullptr;
Dataset* FashionMnistTest::test_ = nullptr;

TEST_F(FashionMnistTest, InProcessSyncClusterTrainsPastTheBar) {
  constexpr int kWorkers = 2, kServers = 2;
  PsServerConfig server_config;
  server_config.set_mode(SYNC);
  server_config.set_num_replicas(kWorkers);
  server_config.set_replicas_to_aggregate(kWorkers);
  server_config.set_lease_timeout_ms(30000);
  server_config.set_max_message_bytes(64 << 20);
  std::vector<std::unique_ptr<ParameterServer>> servers;
  for (int i = 0; i < kServers; ++i) servers.push_back(std::make_unique<ParameterServer>(server_config));

  const std::string metrics = std::string(std::getenv("TEST_TMPDIR")) + "/metrics.jsonl";
  const std::string summary_path = std::string(std::getenv("TEST_TMPDIR")) + "/summary.json";
  std::vector<absl::StatusOr<TrainingSummary>> results(kWorkers, absl::UnknownError("not run"));
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      std::vector<std::unique_ptr<PsTransport>> transports;
      for (auto& server : servers) {
        transports.push_back(std::make_unique<InProcessPsTransport>(server.get()));
      }
      PsClientOptions options;
      options.worker_id = w;
      options.mode = SYNC;
      PsClient client(std::move(transports), options);
      const ModelConfig model = SmallMlp(kServers);
      if (absl::Status s = client.CreateVariables(ModelVariables(model)); !s.ok()) {
        results[w] = s;
        return;
      }
      auto device = MakeCpuDevice(1);
      Mlp mlp(device.get(), model, 32);
      auto reducer = MakeHostReducer();
      TrainerOptions options_t;
      options_t.mode = SYNC;
      options_t.epochs = 2;
      options_t.batch_size = 32;
      options_t.log_every_steps = 50;
      options_t.is_chief = w == 0;
      options_t.shard_index = w;
      options_t.num_workers = kWorkers;
      options_t.num_ps = kServers;
      if (w == 0) {
        options_t.metrics_jsonl = metrics;
        options_t.summary_json = summary_path;
      }
      Trainer trainer(&client, {&mlp}, reducer.get(), *train_, w == 0 ? test_ : nullptr, options_t);
      results[w] = trainer.Run();
    });
  }
  for (auto& t : workers) t.join();
  for (int w = 0; w < kWorkers; ++w) ASSERT_TRUE(results[w].ok()) << results[w].status();

  const TrainingSummary& chief = *results[0];
  ASSERT_EQ(chief.epochs.size(), 2u);
  EXPECT_GT(chief.epochs.back().test_accuracy, 0.80);
  EXPECT_LT(chief.epochs.back().test_loss, chief.epochs.front().test_loss + 0.05);
  // Sync: one update per step, 12000 / 2 workers / 32 = 187 steps per epoch.
  EXPECT_EQ(chief.global_steps, 2 * 187);
  EXPECT_EQ(chief.stale_gradients_dropped, 0);
  // The servers end the job once both workers have finished.
  for (auto& server : servers) EXPECT_TRUE(server->WaitForJobDone(absl::Seconds(10)));

  std::ifstream metrics_file(metrics);
  int progress = 0, epochs = 0;
  for (std::string line; std::getline(metrics_file, line);) {
    progress += line.find("\"type\": \"progress\"") != std::string::npos;
    epochs += line.find("\"type\": \"epoch\"") != std::string::npos;
  }
  EXPECT_GE(progress, 6);
  EXPECT_EQ(epochs, 2);
  std::ifstream summary_file(summary_path);
  std::string summary((std::istreambuf_iterator<char>(summary_file)),
                      std::istreambuf_iterator<char>());
  for (const char* key : {"test_accuracy", "test_loss", "epochs", "global_steps",
                          "examples_per_sec", "mode", "num_workers", "num_ps",
                          "stale_gradients_dropped", "wall_seconds"}) {
    EXPECT_NE(summary.find(absl::StrCat("\"", key, "\"")), std::string::npos) << key;
  }
}

TEST_F(FashionMnistTest, LocalReplicasMatchOneReplicaWithTheWholeBatch) {
  const ModelConfig model = SmallMlp(1);
  std::mt19937 gen(5);
  TensorMap params;
  for (const VariableSpec& spec : ModelVariables(model)) {
    DenseTensor& t = params[spec.name()];
    t.shape.assign(spec.shape().begin(), spec.shape().end());
    std::normal_distribution<float> normal(0.0f, 0.05f);
    for (int64_t i = 0; i < NumElements(t.shape); ++i) t.values.push_back(normal(gen));
  }
  std::vector<int64_t> indices(60);
  for (int i = 0; i < 60; ++i) indices[i] = i * 7;
  const Batch batch = GatherBatch(*train_, indices);

  auto one_device = MakeCpuDevice(1);
  Mlp one(one_device.get(), model, 60);
  ASSERT_TRUE(one.SetParameters(params).ok());
  one.ComputeGradients(batch);
  TensorMap expected;
  one.CopyGradients(&expected);

  // Three replicas of 20 examples each, averaged by the host reducer.
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<std::unique_ptr<Mlp>> replicas;
  std::vector<Mlp*> pointers;
  for (int r = 0; r < 3; ++r) {
    devices.push_back(MakeCpuDevice(1));
    replicas.push_back(std::make_unique<Mlp>(devices.back().get(), model, 20));
    ASSERT_TRUE(replicas.back()->SetParameters(params).ok());
    std::vector<int64_t> part(indices.begin() + 20 * r, indices.begin() + 20 * (r + 1));
    replicas.back()->ComputeGradients(GatherBatch(*train_, part));
    pointers.push_back(replicas.back().get());
  }
  TensorMap reduced;
  MakeHostReducer()->Reduce(pointers, {1.0f / 3, 1.0f / 3, 1.0f / 3}, &reduced);
  ASSERT_EQ(reduced.size(), expected.size());
  for (const auto& [name, tensor] : expected) {
    for (size_t i = 0; i < tensor.values.size(); ++i) {
      ASSERT_NEAR(reduced[name].values[i], tensor.values[i], 1e-5 + 1e-4 * std::fabs(tensor.values[i]))
          << name << " [" << i << "]";
    }
  }
}

}  // namespace
}  // namespace fulcrum
