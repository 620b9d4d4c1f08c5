// The trainer in-process: workers (threads) and parameter servers in one
// process over the in-process transport, training on real Fashion-MNIST.
#include "worker/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/ps_client_impl.h"
#include "client/transport/in_process_ps_transport.h"
#include "worker/cpu/cpu_device.h"
#include "worker/data/batcher.h"
#include "worker/data/ctr_data.h"
#include "worker/strategy/parameter_server_strategy.h"

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
    auto train = LoadTrainingSet(*MakeLocalFileSystem(), DataSource{});
    ASSERT_TRUE(train.ok()) << train.status();
    auto test = LoadTestSet(*MakeLocalFileSystem(), DataSource{}, train->feature_dim);
    ASSERT_TRUE(test.ok()) << test.status();
    train_ = new Dataset(Head(*train, 12000));
    test_ = new Dataset(Head(*test, 2000));
  }
  static Dataset* train_;
  static Dataset* test_;
};
Dataset* FashionMnistTest::train_ = nullptr;
Dataset* FashionMnistTest::test_ = nullptr;

struct ClusterShape {
  ConsistencyMode mode;
  int workers;
  int servers;
  int local_replicas;
};

// What a run trains besides SmallMlp.
struct RunModel {
  const ModelConfig* model = nullptr;           // none: SmallMlp
  const EmbeddingConfig* embeddings = nullptr;  // the CTR model's tables
  int64_t batch_size = 32;
};

// Trains SmallMlp (or `run`'s model) for `epochs` on an in-process
// cluster of `shape`; the chief's summary. Worker 0 (the chief) writes
// `metrics` and `summary`.
absl::StatusOr<TrainingSummary> TrainInProcess(const ClusterShape& shape, int64_t epochs,
                                               const Dataset& train, const Dataset& test,
                                               const std::string& metrics = "",
                                               const std::string& summary = "",
                                               int max_consecutive_skips = 100,
                                               const RunModel& run = {}) {
  PsServerConfig server_config;
  server_config.set_mode(shape.mode);
  server_config.set_num_replicas(shape.workers);
  server_config.set_replicas_to_aggregate(shape.workers);
  server_config.set_staleness_bound(1);
  server_config.set_max_staleness(-1);
  server_config.set_lease_timeout_ms(30000);
  server_config.set_startup_timeout_ms(30000);
  server_config.set_max_message_bytes(64 << 20);
  std::vector<std::unique_ptr<ParameterServer>> servers;
  for (int i = 0; i < shape.servers; ++i) {
    servers.push_back(std::make_unique<ParameterServer>(server_config));
  }
  std::vector<absl::StatusOr<TrainingSummary>> results(shape.workers,
                                                       absl::UnknownError("not run"));
  std::vector<std::thread> workers;
  for (int w = 0; w < shape.workers; ++w) {
    workers.emplace_back([&, w] {
      std::vector<std::unique_ptr<PsTransport>> transports;
      for (auto& server : servers) {
        transports.push_back(std::make_unique<InProcessPsTransport>(server.get()));
      }
      PsClientOptions client_options;
      client_options.worker_id = w;
      client_options.mode = shape.mode;
      PsClientImpl client(std::move(transports), client_options);
      const ModelConfig model = run.model != nullptr ? *run.model : SmallMlp(shape.servers);
      if (absl::Status s = client.CreateVariables(ModelVariables(model)); !s.ok()) {
        results[w] = s;
        return;
      }
      std::optional<EmbeddingInputs> embeddings;
      if (run.embeddings != nullptr) {
        embeddings.emplace(&client, *run.embeddings);
        if (absl::Status s = embeddings->CreateTables(); !s.ok()) {
          results[w] = s;
          return;
        }
      }
      std::vector<std::unique_ptr<Device>> devices;
      std::vector<std::unique_ptr<Mlp>> models;
      std::vector<Mlp*> replicas;
      for (int r = 0; r < shape.local_replicas; ++r) {
        devices.push_back(MakeCpuDevice(1));
        models.push_back(std::make_unique<Mlp>(devices.back().get(), model, run.batch_size));
        replicas.push_back(models.back().get());
      }
      auto reducer = MakeHostReducer();
      TrainerOptions options;
      options.epochs = epochs;
      options.batch_size = run.batch_size;
      if (embeddings) options.embeddings = &*embeddings;
      options.log_every_steps = 50;
      options.is_chief = w == 0;
      options.shard_index = w;
      options.num_workers = shape.workers;
      options.num_ps = shape.servers;
      options.max_consecutive_skips = max_consecutive_skips;
      const std::unique_ptr<FileSystem> fs = MakeLocalFileSystem();
      if (w == 0) {
        options.metrics_jsonl = metrics;
        options.summary_json = summary;
        options.fs = fs.get();
      }
      ParameterServerStrategy strategy(&client, w, shape.workers, /*resume=*/false);
      Trainer trainer(&strategy, replicas, reducer.get(), train, w == 0 ? &test : nullptr, options);
      results[w] = trainer.Run();
    });
  }
  for (auto& t : workers) t.join();
  for (int w = 0; w < shape.workers; ++w) {
    if (!results[w].ok()) return results[w].status();
  }
  // The servers end the job once every worker has finished.
  for (auto& server : servers) {
    if (!server->WaitForJobDone(absl::Seconds(10))) {
      return absl::DeadlineExceededError("a server did not end the job");
    }
  }
  return results[0];
}

TEST_F(FashionMnistTest, InProcessSyncClusterTrainsPastTheBar) {
  const std::string metrics = std::string(std::getenv("TEST_TMPDIR")) + "/metrics.jsonl";
  const std::string summary_path = std::string(std::getenv("TEST_TMPDIR")) + "/summary.json";
  auto result = TrainInProcess({SYNC, 2, 2, 1}, 2, *train_, *test_, metrics, summary_path);
  ASSERT_TRUE(result.ok()) << result.status();
  const TrainingSummary& chief = *result;
  ASSERT_EQ(chief.epochs.size(), 2u);
  EXPECT_GT(chief.epochs.back().test_accuracy, 0.80);
  EXPECT_LT(chief.epochs.back().test_loss, chief.epochs.front().test_loss + 0.05);
  // Sync: one update per step, 12000 / 2 workers / 32 = 187 steps per epoch.
  EXPECT_EQ(chief.global_steps, 2 * 187);
  EXPECT_EQ(chief.stale_gradients_dropped, 0);

  std::ifstream metrics_file(metrics);
  int progress = 0, epochs = 0;
  for (std::string line; std::getline(metrics_file, line);) {
    progress += line.find("\"type\":\"progress\"") != std::string::npos;
    epochs += line.find("\"type\":\"epoch\"") != std::string::npos;
  }
  EXPECT_GE(progress, 6);
  EXPECT_EQ(epochs, 2);
  std::ifstream summary_file(summary_path);
  std::string summary((std::istreambuf_iterator<char>(summary_file)),
                      std::istreambuf_iterator<char>());
  for (const char* key :
       {"test_accuracy", "test_loss", "epochs", "global_steps", "examples_per_sec", "mode",
        "num_workers", "num_ps", "stale_gradients_dropped", "wall_seconds"}) {
    EXPECT_NE(summary.find(absl::StrCat("\"", key, "\"")), std::string::npos) << key;
  }
}

// A NaN in one example makes its batch's gradients NaN: that batch is
// skipped, not pushed (the servers would refuse it), and training goes on.
TEST_F(FashionMnistTest, BatchesWithNonFiniteGradientsAreSkippedAndTrainingGoesOn) {
  Dataset train = *train_;
  train.features[100 * train.feature_dim + 300] = std::nanf("");
  for (ConsistencyMode mode : {ASYNC, SYNC}) {
    auto result = TrainInProcess({mode, 2, 1, 1}, 1, train, *test_);
    ASSERT_TRUE(result.ok()) << result.status();
    // Worker 0 holds example 100 in one batch of the epoch.
    EXPECT_EQ(result->nonfinite_gradients_skipped, 1) << ConsistencyMode_Name(mode);
    // Untrained is 0.10. Async workers interleave as the machine's load
    // lets them: 0.736 once with a second test suite running beside it.
    EXPECT_GT(result->epochs.back().test_accuracy, 0.70);
    EXPECT_TRUE(std::isfinite(result->epochs.back().test_loss));
  }
}

// Gradients that are never finite end the run with a clear error, not a
// flag error.
TEST_F(FashionMnistTest, GradientsThatStayNonFiniteEndTheRun) {
  Dataset train = *train_;
  std::fill(train.features.begin(), train.features.end(), std::nanf(""));
  auto result = TrainInProcess({ASYNC, 1, 1, 1}, 1, train, *test_, "", "", 5);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(result.status().message()),
              ::testing::HasSubstr("not finite in 5 steps in a row"));
}

TEST_F(FashionMnistTest, AsyncWorkerWithTwoLocalReplicasTrains) {
  auto result = TrainInProcess({ASYNC, 1, 1, 2}, 2, *train_, *test_);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->epochs.back().test_accuracy, 0.80);
  EXPECT_EQ(result->global_steps, 2 * (12000 / 32));  // one push per step, not per replica
}

TEST_F(FashionMnistTest, SspClusterTrains) {
  auto result = TrainInProcess({SSP, 3, 2, 1}, 2, *train_, *test_);
  ASSERT_TRUE(result.ok()) << result.status();
  // Three workers interleave as the machine's load lets them, and staler
  // updates cost accuracy: 0.80-0.835 over 14 runs, 0.796 once under the
  // full suite. Untrained is 0.10.
  EXPECT_GT(result->epochs.back().test_accuracy, 0.75);
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
  for (int64_t i = 0; i < 60; ++i) indices[i] = i * 7;
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
    std::vector<int64_t> part(indices.begin() + int64_t{20} * r,
                              indices.begin() + int64_t{20} * (r + 1));
    replicas.back()->ComputeGradients(GatherBatch(*train_, part));
    pointers.push_back(replicas.back().get());
  }
  TensorMap reduced;
  MakeHostReducer()->Reduce(pointers, {1.0f / 3, 1.0f / 3, 1.0f / 3}, &reduced);
  ASSERT_EQ(reduced.size(), expected.size());
  for (const auto& [name, tensor] : expected) {
    for (size_t i = 0; i < tensor.values.size(); ++i) {
      ASSERT_NEAR(reduced[name].values[i], tensor.values[i],
                  1e-5 + 1e-4 * std::fabs(tensor.values[i]))
          << name << " [" << i << "]";
    }
  }
}

// The CTR model: embedding rows pulled per batch from tables on two
// servers, their gradients pushed back; on synthetic data with a known
// best AUC, in each mode and with two local replicas (whose input
// gradients join into the batch's).
class CtrTest : public ::testing::TestWithParam<ClusterShape> {
 protected:
  static void SetUpTestSuite() {
    SyntheticCtrOptions options;
    options.vocabulary = 2000;
    options.seed = 3;
    const SyntheticCtr generator(options);
    train_ = new Dataset(CtrDataset(generator.Generate(24000, 0)));
    test_ = new Dataset(CtrDataset(generator.Generate(4000, -1)));
  }
  static Dataset* train_;
  static Dataset* test_;
};
Dataset* CtrTest::train_ = nullptr;
Dataset* CtrTest::test_ = nullptr;

TEST_P(CtrTest, LearnsTowardsTheBestAuc) {
  EmbeddingConfig embeddings;
  embeddings.fields = static_cast<int>(train_->ids_per_example);
  embeddings.table.set_width(4);
  embeddings.table.mutable_initializer()->set_kind(InitializerSpec::RANDOM_UNIFORM);
  embeddings.table.mutable_initializer()->set_minval(-0.05f);
  embeddings.table.mutable_initializer()->set_maxval(0.05f);
  embeddings.table.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  embeddings.table.mutable_optimizer()->set_learning_rate(0.1f);
  ModelConfig model = SmallMlp(GetParam().servers);
  model.kind = "ctr";
  model.hidden = {16};
  model.num_classes = 2;
  model.input_dim = train_->feature_dim + embeddings.fields * int64_t{4};
  model.input_gradients = true;
  const std::string summary_path = std::string(std::getenv("TEST_TMPDIR")) + "/ctr_summary.json";
  auto result = TrainInProcess(GetParam(), 2, *train_, *test_, "", summary_path, 100,
                               {&model, &embeddings, 64});
  ASSERT_TRUE(result.ok()) << result.status();
  const double auc = result->epochs.back().test_auc;
  // Untrained is 0.5; the data's best about 0.9. Measured 0.87-0.89.
  EXPECT_GT(auc, 0.8);
  EXPECT_LE(auc, test_->oracle_auc + 0.01);
  std::ifstream summary_file(summary_path);
  const std::string summary((std::istreambuf_iterator<char>(summary_file)),
                            std::istreambuf_iterator<char>());
  for (const char* key : {"\"test_auc\"", "\"test_logloss\"", "\"ground_truth_auc\""}) {
    EXPECT_NE(summary.find(key), std::string::npos) << key;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CtrTest,
                         ::testing::Values(ClusterShape{ASYNC, 2, 2, 1},
                                           ClusterShape{SYNC, 2, 2, 1},
                                           ClusterShape{ASYNC, 1, 2, 2}));

}  // namespace
}  // namespace fulcrum
