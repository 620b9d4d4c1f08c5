#include "worker/cpu/cpu_device.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/vector_loops.h"

namespace fulcrum {
namespace {

// The elementwise kernels, vectorised (FULCRUM_VECTOR_CLONES; -O3, set in
// BUILD): the model calls them in place, so each takes the array it writes
// as its only non-const one.

FULCRUM_VECTOR_CLONES void ReluInPlace(int64_t n, float* __restrict y) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] > 0 ? y[i] : 0.0f;
}

// dx[i] is kept where y[i] > 0, else zeroed.
FULCRUM_VECTOR_CLONES void MaskByPositive(int64_t n, const float* __restrict y,
                                          float* __restrict dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0 ? dx[i] : 0.0f;
}

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int blas_threads) : threads_(std::max(1, blas_threads)) {
    openblas_set_num_threads(threads_);
  }

  std::string name() const override {
    return absl::StrCat("cpu (OpenBLAS ", openblas_get_corename(), ", ", threads_, " thread",
                        threads_ == 1 ? "" : "s", ")");
  }

  void* AllocateBytes(size_t bytes) override { return std::calloc(std::max<size_t>(bytes, 1), 1); }
  void FreeBytes(void* ptr) override { std::free(ptr); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }

  void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
                static_cast<blasint>(ta ? m : k), b, static_cast<blasint>(tb ? k : n), beta, c,
                static_cast<blasint>(n));
  }

  void AddBias(int64_t rows, int64_t cols, const float* bias, float* x) override {
    for (int64_t r = 0; r < rows; ++r) AddInto(x + r * cols, bias, cols);
  }

  void ColumnSums(int64_t rows, int64_t cols, const float* x, float* out) override {
    std::fill(out, out + cols, 0.0f);
    for (int64_t r = 0; r < rows; ++r) AddInto(out, x + r * cols, cols);
  }

  void Relu(int64_t n, const float* x, float* y) override {
    if (x != y) std::copy_n(x, n, y);
    ReluInPlace(n, y);
  }

  void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) override {
    if (dy != dx) std::copy_n(dy, n, dx);
    MaskByPositive(n, y, dx);
  }

  void SoftmaxCrossEntropy(int64_t rows, int64_t cols, const float* logits, const int32_t* labels,
                           float* dlogits, float* loss, int32_t* correct) override {
    double total = 0;
    int32_t right = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* z = logits + r * cols;
      float* dz = dlogits + r * cols;
      const int64_t best = std::max_element(z, z + cols) - z;
      right += best == labels[r];
      const float top = z[best];
      double sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(z[c] - top));
      const double log_sum = std::log(sum);
      total += log_sum - (z[labels[r]] - top);
      for (int64_t c = 0; c < cols; ++c) {
        const double p = std::exp(z[c] - top - log_sum);
        dz[c] = static_cast<float>((p - (c == labels[r] ? 1.0 : 0.0)) / rows);
      }
    }
    loss[0] = static_cast<float>(total / rows);
    correct[0] = right;
  }

  void Synchronize() override {}

 private:
  const int threads_;
};

}  // namespace

std::unique_ptr<Device> MakeCpuDevice(int blas_threads) {
  return std::make_unique<CpuDevice>(blas_threads);
}

}  // namespace fulcrum
