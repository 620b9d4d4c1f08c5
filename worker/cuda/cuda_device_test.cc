// The CUDA backend on a real GPU: the same gradient checks as the CPU
// backend, and CPU-vs-CUDA parity of a whole model's loss and gradients.
// Tagged gpu/manual: run it where a GPU exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/tensor.h"
#include "worker/cpu/cpu_device.h"
#include "worker/cuda/cuda.h"
#include "worker/gradient_check.h"
#include "worker/model.h"

namespace fulcrum {
namespace {

std::unique_ptr<Device> Gpu() {
  auto device = MakeCudaDevice(0);
  if (!device.ok()) {
    ADD_FAILURE() << "this test needs a GPU: " << device.status();
    return nullptr;
  }
  return *std::move(device);
}

TEST(CudaGradientCheckTest, DenseLayer) {
  if (auto gpu = Gpu()) CheckDenseLayerGradients(gpu.get());
}
TEST(CudaGradientCheckTest, Relu) {
  if (auto gpu = Gpu()) CheckReluGradients(gpu.get());
}
TEST(CudaGradientCheckTest, SoftmaxCrossEntropy) {
  if (auto gpu = Gpu()) CheckSoftmaxCrossEntropyGradients(gpu.get());
}
TEST(CudaGradientCheckTest, WholeModels) {
  if (auto gpu = Gpu()) CheckModelGradients(gpu.get());
}

TEST(CudaParityTest, MlpMatchesTheCpuBackend) {
  auto gpu = Gpu();
  if (!gpu) return;
  auto cpu = MakeCpuDevice(2);
  ModelConfig config;  // 784-256-128-10
  std::mt19937 gen(11);
  TensorMap params;
  for (const VariableSpec& spec : ModelVariables(config)) {
    DenseTensor& t = params[spec.name()];
    t.shape.assign(spec.shape().begin(), spec.shape().end());
    t.values = RandomVector(NumElements(t.shape), gen, 0.05f);
  }
  Batch batch;
  batch.size = 64;
  batch.feature_dim = 784;
  batch.features = RandomVector(int64_t{64} * 784, gen);
  for (int i = 0; i < 64; ++i) batch.labels.push_back(i % 10);

  TensorMap grads[2];
  BatchStats stats[2];
  Device* devices[2] = {cpu.get(), gpu.get()};
  for (int d = 0; d < 2; ++d) {
    Mlp model(devices[d], config, 64);
    ASSERT_TRUE(model.SetParameters(params).ok());
    stats[d] = model.ComputeGradients(batch);
    model.CopyGradients(&grads[d]);
  }
  // Both compute in float32; only the order of the sums (at most 784 terms)
  // differs, which moves a result by ~1e-6 of the terms' size. The bounds
  // leave 10x room for that and none for a scaling bug: a gradient 0.01%
  // too large fails the projection check.
  EXPECT_NEAR(stats[0].loss, stats[1].loss, 1e-5 * std::fabs(stats[0].loss));
  EXPECT_EQ(stats[0].correct, stats[1].correct);
  for (const auto& [name, cpu_grad] : grads[0]) {
    const std::vector<float>& cpu_values = cpu_grad.values;
    const std::vector<float>& gpu_values = grads[1][name].values;
    ASSERT_EQ(gpu_values.size(), cpu_values.size()) << name;
    double dot = 0, norm = 0, largest = 0;
    for (size_t i = 0; i < cpu_values.size(); ++i) {
      dot += double{gpu_values[i]} * cpu_values[i];
      norm += double{cpu_values[i]} * cpu_values[i];
      largest = std::max(largest, std::fabs(double{cpu_values[i]}));
    }
    ASSERT_GT(norm, 0) << name;
    EXPECT_NEAR(dot / norm, 1.0, 1e-5) << name << ": the CUDA gradient is scaled";
    for (size_t i = 0; i < cpu_values.size(); ++i) {
      ASSERT_NEAR(gpu_values[i], cpu_values[i], 1e-4 * std::fabs(cpu_values[i]) + 1e-5 * largest)
          << name << " [" << i << "]";
    }
  }
}

}  // namespace
}  // namespace fulcrum
