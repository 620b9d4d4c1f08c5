// The models on the CPU backend: gradient checks of every layer and model,
// the variables a model declares, and its errors.
#include "worker/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "worker/cpu/cpu_device.h"
#include "worker/gradient_check.h"

namespace fulcrum {
namespace {

TEST(CpuGradientCheckTest, DenseLayer) { CheckDenseLayerGradients(MakeCpuDevice(1).get()); }
TEST(CpuGradientCheckTest, Relu) { CheckReluGradients(MakeCpuDevice(1).get()); }
TEST(CpuGradientCheckTest, SoftmaxCrossEntropy) {
  CheckSoftmaxCrossEntropyGradients(MakeCpuDevice(1).get());
}
TEST(CpuGradientCheckTest, WholeModels) { CheckModelGradients(MakeCpuDevice(1).get()); }

TEST(ModelTest, VariablesAndErrors) {
  ModelConfig config;
  config.num_ps = 2;
  const auto specs = ModelVariables(config);
  ASSERT_EQ(specs.size(), 6u);  // 3 dense layers: kernel and bias each
  EXPECT_EQ(specs[0].name(), "dense_0/kernel");
  EXPECT_EQ(specs[0].shape(0), 784);
  EXPECT_EQ(specs[0].shape(1), 256);
  EXPECT_EQ(specs[5].name(), "dense_2/bias");
  EXPECT_EQ(specs[5].shape(0), 10);
  config.kind = "cnn";
  EXPECT_FALSE(ValidateModelConfig(config).ok());

  auto device = MakeCpuDevice(1);
  config.kind = "softmax";
  Mlp model(device.get(), config, 4);
  EXPECT_EQ(model.SetParameters({}).code(), absl::StatusCode::kNotFound);
  TensorMap wrong = {{"dense_0/kernel", DenseTensor{{3}, {1, 2, 3}}}};
  EXPECT_EQ(model.SetParameters(wrong).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fulcrum
