// A custom training loop on Fulcrum's parameter servers, in plain C++: the
// counterpart of TensorFlow's custom loop with a ParameterServerStrategy.
//
// It fits a linear regression y = X w + b to synthetic data whose true
// weights it knows, computing gradients itself and letting the servers apply
// Adam. Start the servers, then run it as worker 0 (the chief):
//
//   ps_server --ps_hosts=127.0.0.1:2222 --worker_hosts=127.0.0.1:2223 --task_index=0 --insecure &
//   custom_loop --ps_hosts=127.0.0.1:2222
//
// It prints the loss as it goes, says it has finished (worker 0 also tells
// the servers the job is done), and exits 0 when the weights it learned are
// within --tolerance of the true ones.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "fulcrum/grpc_ps_client.h"
#include "fulcrum/ps_client.h"

ABSL_FLAG(std::string, ps_hosts, "127.0.0.1:2222", "Comma-separated host:port of the servers.");
ABSL_FLAG(std::string, mode, "async", "The servers' mode: async, sync or ssp.");
ABSL_FLAG(int, worker_id, 0, "This worker's replica id.");
ABSL_FLAG(int, steps, 300, "Training steps.");
ABSL_FLAG(int, features, 64, "Features of the synthetic problem.");
ABSL_FLAG(double, tolerance, 0.05, "Largest error in any learned weight for success.");

namespace {

using fulcrum::DenseTensor;
using fulcrum::TensorMap;
using fulcrum::VariableSpec;

VariableSpec Variable(const std::string& name, std::vector<int64_t> shape, int shards) {
  VariableSpec spec;
  spec.set_name(name);
  spec.mutable_shape()->Assign(shape.begin(), shape.end());
  spec.set_dtype(fulcrum::DT_FLOAT);
  spec.mutable_partitioner()->set_kind(fulcrum::PartitionerSpec::FIXED_SHARDS);
  spec.mutable_partitioner()->set_num_shards(shards);
  spec.mutable_optimizer()->set_kind(fulcrum::OptimizerSpec::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.05f);
  return spec;  // zeros: the default initializer
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Fits a linear regression through Fulcrum parameter servers.");
  absl::ParseCommandLine(argc, argv);
  const int n = absl::GetFlag(FLAGS_features);
  const std::string mode = absl::GetFlag(FLAGS_mode);

  fulcrum::PsClientOptions options;
  options.worker_id = absl::GetFlag(FLAGS_worker_id);
  options.mode = mode == "sync" ? fulcrum::SYNC : mode == "ssp" ? fulcrum::SSP : fulcrum::ASYNC;
  auto client = fulcrum::NewGrpcPsClient(
      absl::StrSplit(absl::GetFlag(FLAGS_ps_hosts), ',', absl::SkipEmpty()), options);
  if (auto s = client->CreateVariables({Variable("w", {n}, 2), Variable("b", {1}, 1)}); !s.ok()) {
    std::fprintf(stderr, "create variables: %s\n", s.ToString().c_str());
    return 1;
  }

  // The problem: true weights w* = sin(i), b* = 0.5, and noiseless data.
  std::mt19937 gen(7 + options.worker_id);
  std::normal_distribution<float> normal;
  std::vector<float> true_w(n);
  for (int i = 0; i < n; ++i) true_w[i] = std::sin(static_cast<float>(i));
  const float true_b = 0.5f;
  constexpr int kBatch = 32;

  TensorMap weights;
  if (auto s = client->Pull({}, &weights); !s.ok()) {
    std::fprintf(stderr, "pull: %s\n", s.ToString().c_str());
    return 1;
  }
  for (int step = 0; step < absl::GetFlag(FLAGS_steps); ++step) {
    // Forward and backward of the mean squared error on one batch.
    TensorMap grads = {{"w", DenseTensor{{n}, std::vector<float>(n, 0.0f)}},
                       {"b", DenseTensor{{1}, {0.0f}}}};
    double loss = 0;
    for (int e = 0; e < kBatch; ++e) {
      std::vector<float> x(n);
      float target = true_b, predicted = weights["b"].values[0];
      for (int i = 0; i < n; ++i) {
        x[i] = normal(gen);
        target += true_w[i] * x[i];
        predicted += weights["w"].values[i] * x[i];
      }
      const float error = predicted - target;
      loss += 0.5 * error * error / kBatch;
      for (int i = 0; i < n; ++i) grads["w"].values[i] += error * x[i] / kBatch;
      grads["b"].values[0] += error / kBatch;
    }
    auto pushed = client->PushPull(grads, {}, &weights);
    if (!pushed.ok()) {
      std::fprintf(stderr, "step %d: %s\n", step, pushed.status().ToString().c_str());
      return 1;
    }
    if (step % 50 == 0) std::printf("step %d loss %.5f\n", step, loss);
  }

  double max_error = std::fabs(weights["b"].values[0] - true_b);
  for (int i = 0; i < n; ++i) {
    max_error = std::max<double>(max_error, std::fabs(weights["w"].values[i] - true_w[i]));
  }
  std::printf("final max weight error %.5f after %lld updates\n", max_error,
              static_cast<long long>(client->step()));
  if (auto s = client->Finish(); !s.ok()) {
    std::fprintf(stderr, "finish: %s\n", s.ToString().c_str());
    return 1;
  }
  if (options.worker_id == 0) {
    if (auto s = client->JobDone("custom_loop finished"); !s.ok()) {
      std::fprintf(stderr, "job done: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  return max_error <= absl::GetFlag(FLAGS_tolerance) ? 0 : 3;
}
