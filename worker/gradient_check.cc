// Finite-difference gradient checks of every layer and of whole models, on
// any Device: the CPU backend's tests and the CUDA backend's run the same.
#include "worker/gradient_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "common/tensor.h"
#include "worker/model.h"

namespace fulcrum {

std::vector<float> RandomVector(int64_t n, std::mt19937& gen, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

void ExpectGradientMatches(std::vector<float>& values, const std::vector<float>& analytic,
                           const std::function<double()>& loss, const std::string& what,
                           float eps) {
  ASSERT_EQ(values.size(), analytic.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const float saved = values[i];
    values[i] = saved + eps;
    const double up = loss();
    values[i] = saved - eps;
    const double down = loss();
    values[i] = saved;
    const double numeric = (up - down) / (2 * eps);
    EXPECT_NEAR(analytic[i], numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << what << " [" << i << "]";
  }
}

void CheckDenseLayerGradients(Device* device) {
  std::mt19937 gen(3);
  constexpr int64_t kRows = 3, kIn = 4, kOut = 5;
  DenseLayer layer(device, kIn, kOut, kRows);
  std::vector<float> x = RandomVector(kRows * kIn, gen), w = RandomVector(kIn * kOut, gen),
                     b = RandomVector(kOut, gen), r = RandomVector(kRows * kOut, gen);
  DeviceArray<float> x_dev(device, x.size()), dy(device, r.size()), dx(device, x.size());
  // loss = sum(y * r), so dLoss/dy = r.
  auto loss = [&] {
    layer.kernel().CopyFrom(w.data(), w.size());
    layer.bias().CopyFrom(b.data(), b.size());
    x_dev.CopyFrom(x.data(), x.size());
    layer.Forward(x_dev.data(), kRows);
    std::vector<float> y(kRows * kOut);
    layer.output().CopyTo(y.data(), y.size());
    double total = 0;
    for (size_t i = 0; i < y.size(); ++i) total += y[i] * r[i];
    return total;
  };
  loss();
  dy.CopyFrom(r.data(), r.size());
  layer.Backward(x_dev.data(), dy.data(), kRows, dx.data());
  std::vector<float> dw(w.size()), db(b.size()), dxv(x.size());
  layer.kernel_grad().CopyTo(dw.data(), dw.size());
  layer.bias_grad().CopyTo(db.data(), db.size());
  dx.CopyTo(dxv.data(), dxv.size());
  ExpectGradientMatches(w, dw, loss, "dW");
  ExpectGradientMatches(b, db, loss, "db");
  ExpectGradientMatches(x, dxv, loss, "dx");
}

void CheckReluGradients(Device* device) {
  std::mt19937 gen(3);
  std::vector<float> x = {-1.5f, -0.2f, 0.3f, 2.0f}, r = RandomVector(4, gen);
  DeviceArray<float> x_dev(device, 4), y(device, 4), dy(device, 4), dx(device, 4);
  auto loss = [&] {
    x_dev.CopyFrom(x.data(), 4);
    device->Relu(4, x_dev.data(), y.data());
    std::vector<float> out(4);
    y.CopyTo(out.data(), 4);
    double total = 0;
    for (int i = 0; i < 4; ++i) total += out[i] * r[i];
    return total;
  };
  loss();
  dy.CopyFrom(r.data(), 4);
  device->ReluGrad(4, y.data(), dy.data(), dx.data());
  std::vector<float> analytic(4);
  dx.CopyTo(analytic.data(), 4);
  EXPECT_EQ(analytic[0], 0.0f);
  ExpectGradientMatches(x, analytic, loss, "relu dx");
}

void CheckSoftmaxCrossEntropyGradients(Device* device) {
  std::mt19937 gen(3);
  constexpr int64_t kRows = 4, kClasses = 3;
  std::vector<float> logits = RandomVector(kRows * kClasses, gen, 2.0f);
  std::vector<int32_t> labels = {0, 2, 1, 2};
  DeviceArray<float> z(device, logits.size()), dz(device, logits.size()), loss_dev(device, 1);
  DeviceArray<int32_t> labels_dev(device, kRows), correct(device, 1);
  labels_dev.CopyFrom(labels.data(), kRows);
  auto loss = [&] {
    z.CopyFrom(logits.data(), logits.size());
    device->SoftmaxCrossEntropy(kRows, kClasses, z.data(), labels_dev.data(), dz.data(),
                                loss_dev.data(), correct.data());
    float value = 0;
    loss_dev.CopyTo(&value, 1);
    return static_cast<double>(value);
  };
  loss();
  std::vector<float> analytic(logits.size());
  dz.CopyTo(analytic.data(), analytic.size());
  ExpectGradientMatches(logits, analytic, loss, "dlogits");

  // Accuracy: make rows 0 and 1 confidently right, the others wrong.
  logits = {5, 0, 0, 0, 0, 5, 5, 0, 0, 5, 0, 0};
  loss();
  int32_t right = 0;
  correct.CopyTo(&right, 1);
  EXPECT_EQ(right, 2);
}

void CheckModelGradients(Device* device) {
  std::mt19937 gen(3);
  for (const char* kind : {"mlp", "softmax"}) {
    ModelConfig config;
    config.kind = kind;
    config.hidden = {5, 4};
    config.input_dim = 6;
    config.num_classes = 3;
    config.input_gradients = true;
    Mlp model(device, config, 8);
    TensorMap params;
    for (const VariableSpec& spec : ModelVariables(config)) {
      DenseTensor& t = params[spec.name()];
      t.shape.assign(spec.shape().begin(), spec.shape().end());
      t.values = RandomVector(NumElements(t.shape), gen, 0.5f);
    }
    Batch batch;
    batch.size = 8;
    batch.feature_dim = 6;
    batch.features = RandomVector(48, gen);
    batch.labels = {0, 1, 2, 0, 1, 2, 0, 1};
    ASSERT_TRUE(model.SetParameters(params).ok());
    TensorMap grads;
    model.ComputeGradients(batch);
    model.CopyGradients(&grads);
    ASSERT_EQ(grads.size(), params.size());
    for (auto& [name, tensor] : params) {
      auto loss = [&] {
        EXPECT_TRUE(model.SetParameters(params).ok());
        return model.Evaluate(batch).loss;
      };
      // A small step, so that no ReLU input crosses zero between the two sides.
      ExpectGradientMatches(tensor.values, grads[name].values, loss, std::string(kind) + " " + name,
                            1e-3f);
    }
    // The inputs' gradient, as embedding rows take it.
    ASSERT_TRUE(model.SetParameters(params).ok());
    model.ComputeGradients(batch);
    std::vector<float> input_grads(batch.features.size());
    model.CopyInputGradients(batch.size, input_grads.data());
    ExpectGradientMatches(
        batch.features, input_grads, [&] { return model.Evaluate(batch).loss; },
        std::string(kind) + " input", 1e-3f);
  }
}

}  // namespace fulcrum
