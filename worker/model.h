// The models a worker trains: a multilayer perceptron (ReLU hidden layers)
// and softmax regression (an MLP without hidden layers), written once
// against Device. Thread-compatible: one Mlp per replica.
#ifndef FULCRUM_WORKER_MODEL_H_
#define FULCRUM_WORKER_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fulcrum/tensor.h"
#include "proto/config.pb.h"
#include "proto/tensor.pb.h"
#include "worker/data/batcher.h"
#include "worker/device.h"

namespace fulcrum {

struct ModelConfig {
  // mlp, softmax, or ctr (an mlp over numeric features and embedding
  // rows; see embedding_inputs.h)
  std::string kind = "mlp";
  std::vector<int64_t> hidden = {256, 128};  // mlp: widths of the hidden layers
  int64_t input_dim = 784;
  int num_classes = 10;
  OptimizerSpec optimizer;  // applied on the parameter servers
  uint64_t seed = 0;        // of the initializers
  int num_ps = 1;           // kernels are sharded over at most this many servers
  // Also the gradient with respect to the input (CopyInputGradients): for
  // inputs that are themselves trained, as embedding rows are.
  bool input_gradients = false;
};

// Checks kind, widths and sizes; errors name the flag.
absl::Status ValidateModelConfig(const ModelConfig& config);

// The variables: dense_<i>/kernel [in, out] (Glorot uniform) and
// dense_<i>/bias [out] (zeros), partitioned like TensorFlow's
// MinSizePartitioner(256 KiB, max_shards = num_ps).
std::vector<VariableSpec> ModelVariables(const ModelConfig& config);

// y = x W + b on a device, with its gradients.
class DenseLayer {
 public:
  DenseLayer(Device* device, int64_t in, int64_t out, int64_t max_rows);

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  DeviceArray<float>& kernel() { return kernel_; }
  DeviceArray<float>& bias() { return bias_; }
  DeviceArray<float>& kernel_grad() { return kernel_grad_; }
  DeviceArray<float>& bias_grad() { return bias_grad_; }
  // [rows x out] after Forward.
  DeviceArray<float>& output() { return output_; }

  void Forward(const float* x, int64_t rows);
  // From dy = dLoss/dy: the kernel and bias gradients, and dx (unless null).
  void Backward(const float* x, const float* dy, int64_t rows, float* dx);

 private:
  Device* const device_;
  const int64_t in_, out_;
  DeviceArray<float> kernel_, bias_, kernel_grad_, bias_grad_, output_;
};

// What one batch gave.
struct BatchStats {
  double loss = 0;      // mean cross-entropy over the batch
  int64_t correct = 0;  // examples whose argmax is the label
  int64_t examples = 0;
};

class Mlp {
 public:
  // Buffers for batches of up to max_batch examples. `device` outlives it.
  Mlp(Device* device, const ModelConfig& config, int64_t max_batch);

  // Loads the variables' values (as pulled). Errors name a missing variable
  // or a wrong shape.
  absl::Status SetParameters(const TensorMap& values);

  // Forward and backward on `batch`: the gradients of the mean loss stay on
  // the device, in the layers' kernel_grad and bias_grad.
  BatchStats ComputeGradients(const Batch& batch);

  // Copies the gradients of the last ComputeGradients to `grads` (host), one
  // entry per variable.
  void CopyGradients(TensorMap* grads);

  // After ComputeGradients, with config.input_gradients: the gradient of
  // the batch's mean loss with respect to each input, rows x input_dim.
  void CopyInputGradients(int64_t rows, float* out);

  // Forward only.
  BatchStats Evaluate(const Batch& batch);

  // After Evaluate or ComputeGradients: the logits, rows x num_classes.
  void CopyLogits(int64_t rows, float* out);

  std::vector<DenseLayer>& layers() { return layers_; }
  Device* device() const { return device_; }

 private:
  // Runs the layers and the loss; leaves dlogits in loss_grad_.
  BatchStats Forward(const Batch& batch);

  Device* const device_;
  const int64_t max_batch_;
  std::vector<DenseLayer> layers_;
  DeviceArray<float> input_, loss_grad_, scratch_grad_a_, scratch_grad_b_;
  DeviceArray<float> input_grad_;  // with config.input_gradients
  DeviceArray<int32_t> labels_;
  DeviceArray<float> loss_;
  DeviceArray<int32_t> correct_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_MODEL_H_
