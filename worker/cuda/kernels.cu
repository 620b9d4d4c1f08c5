#include "worker/cuda/kernels.h"

#include <cfloat>

namespace fulcrum::cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__global__ void AddBiasKernel(int64_t rows, int64_t cols, const float* bias, float* x) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < rows * cols) x[i] += bias[i % cols];
}

// One thread per column, walking the rows (coalesced across threads).
__global__ void ColumnSumsKernel(int64_t rows, int64_t cols, const float* x, float* out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.0f;
  for (int64_t r = 0; r < rows; ++r) sum += x[r * cols + c];
  out[c] = sum;
}

__global__ void ReluKernel(int64_t n, const float* x, float* y) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void ReluGradKernel(int64_t n, const float* y, const float* dy, float* dx) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// One thread per row: softmax, its cross-entropy and gradient, and whether
// the argmax is the label; the loss and the count are summed atomically.
__global__ void SoftmaxCrossEntropyKernel(int64_t rows, int64_t cols, const float* logits,
                                          const int32_t* labels, float* dlogits, float* loss,
                                          int32_t* correct) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const float* z = logits + r * cols;
  float* dz = dlogits + r * cols;
  int64_t best = 0;
  for (int64_t c = 1; c < cols; ++c) {
    if (z[c] > z[best]) best = c;
  }
  const float top = z[best];
  float sum = 0.0f;
  for (int64_t c = 0; c < cols; ++c) sum += expf(z[c] - top);
  const float log_sum = logf(sum);
  const int32_t label = labels[r];
  for (int64_t c = 0; c < cols; ++c) {
    const float p = expf(z[c] - top - log_sum);
    dz[c] = (p - (c == label ? 1.0f : 0.0f)) / static_cast<float>(rows);
  }
  atomicAdd(loss, (log_sum - (z[label] - top)) / static_cast<float>(rows));
  if (best == label) atomicAdd(correct, 1);
}

__global__ void ScaleKernel(int64_t n, float alpha, float* x) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= alpha;
}

}  // namespace

cudaError_t AddBias(int64_t rows, int64_t cols, const float* bias, float* x, cudaStream_t stream) {
  if (rows * cols > 0) {
    AddBiasKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(rows, cols, bias, x);
  }
  return cudaGetLastError();
}

cudaError_t ColumnSums(int64_t rows, int64_t cols, const float* x, float* out,
                       cudaStream_t stream) {
  if (cols > 0) ColumnSumsKernel<<<Blocks(cols), kThreads, 0, stream>>>(rows, cols, x, out);
  return cudaGetLastError();
}

cudaError_t Relu(int64_t n, const float* x, float* y, cudaStream_t stream) {
  if (n > 0) ReluKernel<<<Blocks(n), kThreads, 0, stream>>>(n, x, y);
  return cudaGetLastError();
}

cudaError_t ReluGrad(int64_t n, const float* y, const float* dy, float* dx, cudaStream_t stream) {
  if (n > 0) ReluGradKernel<<<Blocks(n), kThreads, 0, stream>>>(n, y, dy, dx);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(int64_t rows, int64_t cols, const float* logits,
                                const int32_t* labels, float* dlogits, float* loss,
                                int32_t* correct, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(loss, 0, sizeof(float), stream);
  if (err == cudaSuccess) err = cudaMemsetAsync(correct, 0, sizeof(int32_t), stream);
  if (err != cudaSuccess) return err;
  if (rows > 0) {
    SoftmaxCrossEntropyKernel<<<Blocks(rows), kThreads, 0, stream>>>(rows, cols, logits, labels,
                                                                     dlogits, loss, correct);
  }
  return cudaGetLastError();
}

cudaError_t Scale(int64_t n, float alpha, float* x, cudaStream_t stream) {
  if (n > 0) ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(n, alpha, x);
  return cudaGetLastError();
}

}  // namespace fulcrum::cuda
