#include "worker/model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/tensor.h"

namespace fulcrum {
namespace {

std::string KernelName(size_t layer) { return absl::StrCat("dense_", layer, "/kernel"); }
std::string BiasName(size_t layer) { return absl::StrCat("dense_", layer, "/bias"); }

std::vector<int64_t> Widths(const ModelConfig& config) {
  std::vector<int64_t> widths = {config.input_dim};
  if (config.kind != "softmax")
    widths.insert(widths.end(), config.hidden.begin(), config.hidden.end());
  widths.push_back(config.num_classes);
  return widths;
}

}  // namespace

absl::Status ValidateModelConfig(const ModelConfig& config) {
  if (config.kind != "mlp" && config.kind != "softmax" && config.kind != "ctr") {
    return absl::InvalidArgumentError(
        absl::StrCat("--model: '", config.kind, "' is not one of mlp, softmax, ctr"));
  }
  for (int64_t width : config.hidden) {
    if (width < 1 || width > (1 << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hidden: widths must be in [1, 1048576], got ", width));
    }
  }
  if (config.input_dim < 1 || config.num_classes < 2) {
    return absl::InvalidArgumentError(absl::StrCat("the data has ", config.input_dim,
                                                   " features and ", config.num_classes,
                                                   " classes; the model needs >= 1 and >= 2"));
  }
  return absl::OkStatus();
}

std::vector<VariableSpec> ModelVariables(const ModelConfig& config) {
  const std::vector<int64_t> widths = Widths(config);
  std::vector<VariableSpec> specs;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    for (bool kernel : {true, false}) {
      VariableSpec spec;
      spec.set_name(kernel ? KernelName(i) : BiasName(i));
      if (kernel) spec.add_shape(widths[i]);
      spec.add_shape(widths[i + 1]);
      spec.set_dtype(DT_FLOAT);
      spec.mutable_initializer()->set_kind(kernel ? InitializerSpec::GLOROT_UNIFORM
                                                  : InitializerSpec::ZEROS);
      spec.mutable_initializer()->set_seed(config.seed * 1000 + i);
      spec.mutable_partitioner()->set_kind(PartitionerSpec::MIN_SIZE);
      spec.mutable_partitioner()->set_min_shard_bytes(256 << 10);
      spec.mutable_partitioner()->set_max_shards(config.num_ps);
      *spec.mutable_optimizer() = config.optimizer;
      specs.push_back(spec);
    }
  }
  return specs;
}

DenseLayer::DenseLayer(Device* device, int64_t in, int64_t out, int64_t max_rows)
    : device_(device),
      in_(in),
      out_(out),
      kernel_(device, in * out),
      bias_(device, out),
      kernel_grad_(device, in * out),
      bias_grad_(device, out),
      output_(device, max_rows * out) {}

void DenseLayer::Forward(const float* x, int64_t rows) {
  device_->Gemm(false, false, rows, out_, in_, 1.0f, x, kernel_.data(), 0.0f, output_.data());
  device_->AddBias(rows, out_, bias_.data(), output_.data());
}

void DenseLayer::Backward(const float* x, const float* dy, int64_t rows, float* dx) {
  // dW = x^T dy, db = column sums of dy, dx = dy W^T.
  device_->Gemm(true, false, in_, out_, rows, 1.0f, x, dy, 0.0f, kernel_grad_.data());
  device_->ColumnSums(rows, out_, dy, bias_grad_.data());
  if (dx != nullptr)
    device_->Gemm(false, true, rows, in_, out_, 1.0f, dy, kernel_.data(), 0.0f, dx);
}

Mlp::Mlp(Device* device, const ModelConfig& config, int64_t max_batch)
    : device_(device), max_batch_(max_batch) {
  const std::vector<int64_t> widths = Widths(config);
  int64_t widest = 0;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    layers_.emplace_back(device, widths[i], widths[i + 1], max_batch);
    widest = std::max(widest, widths[i]);
  }
  input_ = DeviceArray<float>(device, max_batch * widths[0]);
  if (config.input_gradients) input_grad_ = DeviceArray<float>(device, max_batch * widths[0]);
  loss_grad_ = DeviceArray<float>(device, max_batch * widths.back());
  scratch_grad_a_ = DeviceArray<float>(device, max_batch * widest);
  scratch_grad_b_ = DeviceArray<float>(device, max_batch * widest);
  labels_ = DeviceArray<int32_t>(device, max_batch);
  loss_ = DeviceArray<float>(device, 1);
  correct_ = DeviceArray<int32_t>(device, 1);
}

absl::Status Mlp::SetParameters(const TensorMap& values) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    DenseLayer& layer = layers_[i];
    for (bool kernel : {true, false}) {
      const std::string name = kernel ? KernelName(i) : BiasName(i);
      auto it = values.find(name);
      const int64_t expected = kernel ? layer.in() * layer.out() : layer.out();
      if (it == values.end()) {
        return absl::NotFoundError(absl::StrCat("model variable '", name, "' was not pulled"));
      }
      if (static_cast<int64_t>(it->second.values.size()) != expected) {
        return absl::InvalidArgumentError(
            absl::StrCat("model variable '", name, "': expected ", expected, " values, got ",
                         it->second.values.size(), " (shape ", ShapeString(it->second.shape), ")"));
      }
      (kernel ? layer.kernel() : layer.bias()).CopyFrom(it->second.values.data(), expected);
    }
  }
  return absl::OkStatus();
}

BatchStats Mlp::Forward(const Batch& batch) {
  CHECK(batch.size <= max_batch_ && batch.feature_dim == layers_.front().in());
  input_.CopyFrom(batch.features.data(), batch.size * batch.feature_dim);
  labels_.CopyFrom(batch.labels.data(), batch.size);
  const float* x = input_.data();
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i].Forward(x, batch.size);
    float* y = layers_[i].output().data();
    if (i + 1 < layers_.size()) device_->Relu(batch.size * layers_[i].out(), y, y);
    x = y;
  }
  device_->SoftmaxCrossEntropy(batch.size, layers_.back().out(), x, labels_.data(),
                               loss_grad_.data(), loss_.data(), correct_.data());
  BatchStats stats;
  float loss = 0;
  int32_t correct = 0;
  loss_.CopyTo(&loss, 1);
  correct_.CopyTo(&correct, 1);
  stats.loss = loss;
  stats.correct = correct;
  stats.examples = batch.size;
  return stats;
}

BatchStats Mlp::ComputeGradients(const Batch& batch) {
  const BatchStats stats = Forward(batch);
  // dy of the last layer is dlogits; each earlier layer's dy is the next
  // layer's dx, masked by its ReLU.
  float* dy = loss_grad_.data();
  float* buffers[2] = {scratch_grad_a_.data(), scratch_grad_b_.data()};
  for (size_t i = layers_.size(); i-- > 0;) {
    const float* x = i == 0 ? input_.data() : layers_[i - 1].output().data();
    float* dx = i > 0 ? buffers[i % 2] : input_grad_.data();  // null: no input gradient
    layers_[i].Backward(x, dy, batch.size, dx);
    if (i > 0) {
      device_->ReluGrad(batch.size * layers_[i].in(), layers_[i - 1].output().data(), dx, dx);
      dy = dx;
    }
  }
  return stats;
}

void Mlp::CopyGradients(TensorMap* grads) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    DenseLayer& layer = layers_[i];
    DenseTensor& kernel = (*grads)[KernelName(i)];
    kernel.shape = {layer.in(), layer.out()};
    kernel.values.resize(layer.in() * layer.out());
    layer.kernel_grad().CopyTo(kernel.values.data(), kernel.values.size());
    DenseTensor& bias = (*grads)[BiasName(i)];
    bias.shape = {layer.out()};
    bias.values.resize(layer.out());
    layer.bias_grad().CopyTo(bias.values.data(), bias.values.size());
  }
}

BatchStats Mlp::Evaluate(const Batch& batch) { return Forward(batch); }

void Mlp::CopyInputGradients(int64_t rows, float* out) {
  CHECK(input_grad_.data() != nullptr && rows <= max_batch_);
  input_grad_.CopyTo(out, rows * layers_.front().in());
}

void Mlp::CopyLogits(int64_t rows, float* out) {
  CHECK(rows <= max_batch_);
  layers_.back().output().CopyTo(out, rows * layers_.back().out());
}

}  // namespace fulcrum
