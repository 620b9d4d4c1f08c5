// Finite-difference gradient checks for the model layers on a Device, shared
// by the CPU and CUDA backends' tests. Failures are reported through
// GoogleTest's EXPECT_*.
#ifndef FULCRUM_WORKER_GRADIENT_CHECK_H_
#define FULCRUM_WORKER_GRADIENT_CHECK_H_

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "worker/device.h"

namespace fulcrum {

// n normal samples of standard deviation `scale`.
std::vector<float> RandomVector(int64_t n, std::mt19937& gen, float scale = 1.0f);

// Central differences of `loss` with respect to each element of `values`
// (which `loss` reads), compared with `analytic`.
void ExpectGradientMatches(std::vector<float>& values, const std::vector<float>& analytic,
                           const std::function<double()>& loss, const std::string& what,
                           float eps = 1e-2f);

// dW, db and dx of a dense layer.
void CheckDenseLayerGradients(Device* device);
// dx of ReLU.
void CheckReluGradients(Device* device);
// dlogits of softmax cross-entropy, and its accuracy count.
void CheckSoftmaxCrossEntropyGradients(Device* device);
// Every variable's gradient, and the input's, in small MLP and softmax
// models.
void CheckModelGradients(Device* device);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_GRADIENT_CHECK_H_
