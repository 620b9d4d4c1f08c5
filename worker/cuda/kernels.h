// Launchers of the CUDA kernels (kernels.cu, compiled by nvcc). Every
// pointer is device memory; every launch is queued on `stream`. Each returns
// the launch's error (cudaGetLastError): a launch that fails is never
// skipped silently.
#ifndef FULCRUM_WORKER_CUDA_KERNELS_H_
#define FULCRUM_WORKER_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace fulcrum::cuda {

cudaError_t AddBias(int64_t rows, int64_t cols, const float* bias, float* x, cudaStream_t stream);
cudaError_t ColumnSums(int64_t rows, int64_t cols, const float* x, float* out, cudaStream_t stream);
cudaError_t Relu(int64_t n, const float* x, float* y, cudaStream_t stream);
cudaError_t ReluGrad(int64_t n, const float* y, const float* dy, float* dx, cudaStream_t stream);
// loss[0] and correct[0] are overwritten.
cudaError_t SoftmaxCrossEntropy(int64_t rows, int64_t cols, const float* logits,
                                const int32_t* labels, float* dlogits, float* loss,
                                int32_t* correct, cudaStream_t stream);
cudaError_t Scale(int64_t n, float alpha, float* x, cudaStream_t stream);

}  // namespace fulcrum::cuda

#endif  // FULCRUM_WORKER_CUDA_KERNELS_H_
