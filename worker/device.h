// A compute device (a CPU, a GPU) and the math the models need on it. The
// model code is written once against this interface; cpu/ and cuda/
// implement it. Pointers passed to the math are device memory from
// Allocate. Matrices are row-major.
//
// Thread-compatible: each model replica owns its Device.
#ifndef FULCRUM_WORKER_DEVICE_H_
#define FULCRUM_WORKER_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace fulcrum {

class Device {
 public:
  virtual ~Device() = default;

  // "cpu (OpenBLAS, 2 threads)", "cuda:0 (NVIDIA H200)".
  virtual std::string name() const = 0;

  virtual void* AllocateBytes(size_t bytes) = 0;  // zeroed
  virtual void FreeBytes(void* ptr) = 0;
  virtual void CopyToDevice(void* dst, const void* host_src, size_t bytes) = 0;
  // Completes before returning: `host_dst` is filled.
  virtual void CopyToHost(void* host_dst, const void* src, size_t bytes) = 0;

  // C[m x n] = alpha * op(A) * op(B) + beta * C, op transposing when asked;
  // op(A) is m x k, op(B) is k x n.
  virtual void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float* a, const float* b, float beta, float* c) = 0;
  // x[r][c] += bias[c].
  virtual void AddBias(int64_t rows, int64_t cols, const float* bias, float* x) = 0;
  // out[c] = sum over r of x[r][c].
  virtual void ColumnSums(int64_t rows, int64_t cols, const float* x, float* out) = 0;
  // y = max(x, 0) (in place allowed).
  virtual void Relu(int64_t n, const float* x, float* y) = 0;
  // dx = dy where y > 0, else 0 (in place allowed).
  virtual void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) = 0;
  // For logits [rows x cols] and labels: dlogits = (softmax - onehot) / rows,
  // loss[0] = mean cross-entropy, correct[0] = rows whose argmax is the label.
  virtual void SoftmaxCrossEntropy(int64_t rows, int64_t cols, const float* logits,
                                   const int32_t* labels, float* dlogits, float* loss,
                                   int32_t* correct) = 0;
  // Waits for the work queued so far.
  virtual void Synchronize() = 0;
};

// Device memory of `n` elements of T, freed with its device.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(Device* device, int64_t n)
      : device_(device), data_(static_cast<T*>(device->AllocateBytes(n * sizeof(T)))), size_(n) {}
  ~DeviceArray() {
    if (data_ != nullptr) device_->FreeBytes(data_);
  }
  DeviceArray(DeviceArray&& other) noexcept { *this = std::move(other); }
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    std::swap(device_, other.device_);
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    return *this;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t size() const { return size_; }

  void CopyFrom(const T* host, int64_t n) { device_->CopyToDevice(data_, host, n * sizeof(T)); }
  void CopyTo(T* host, int64_t n) const { device_->CopyToHost(host, data_, n * sizeof(T)); }

 private:
  Device* device_ = nullptr;
  T* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_DEVICE_H_
