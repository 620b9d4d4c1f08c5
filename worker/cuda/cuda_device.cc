#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "worker/cuda/cuda.h"
#include "worker/cuda/cuda_libs.h"
#include "worker/cuda/kernels.h"

namespace fulcrum {
namespace {

// CUDA, cuBLAS and NCCL failures inside the math are device faults, not bad
// input: they abort with the call and the error. Creating a device or a
// reducer returns its failure instead (a busy or full GPU), so that
// --device=auto can fall back to the CPU.
#define CUDA_CHECK(call)                                                                  \
  do {                                                                                    \
    const cudaError_t err = (call);                                                       \
    if (err != cudaSuccess) {                                                             \
      ::fulcrum::CheckFailed(__FILE__, __LINE__,                                          \
                             absl::StrCat(#call, ": ", cudaGetErrorString(err)).c_str()); \
    }                                                                                     \
  } while (false)

#define CUBLAS_CHECK(call)                                                             \
  do {                                                                                 \
    const cublasStatus_t status = (call);                                              \
    if (status != CUBLAS_STATUS_SUCCESS) {                                             \
      ::fulcrum::CheckFailed(__FILE__, __LINE__,                                       \
                             absl::StrCat(#call, ": cuBLAS status ", status).c_str()); \
    }                                                                                  \
  } while (false)

#define NCCL_CHECK(call)                                                                      \
  do {                                                                                        \
    const ncclResult_t result = (call);                                                       \
    if (result != ncclSuccess) {                                                              \
      ::fulcrum::CheckFailed(__FILE__, __LINE__,                                              \
                             absl::StrCat(#call, ": ", nccl_->error_string(result)).c_str()); \
    }                                                                                         \
  } while (false)

absl::Status CudaError(const std::string& what, cudaError_t err) {
  return absl::UnavailableError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

class CudaDevice final : public Device {
 public:
  // The device, with its stream and cuBLAS handle; UNAVAILABLE naming the
  // call that failed.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(int ordinal) {
    cudaDeviceProp props;
    if (cudaError_t err = cudaGetDeviceProperties(&props, ordinal); err != cudaSuccess) {
      return CudaError(absl::StrCat("CUDA device ", ordinal, ": cudaGetDeviceProperties"), err);
    }
    const std::string where = absl::StrCat("CUDA device ", ordinal, " (", props.name, ")");
    auto blas = cuda::Cublas();
    if (!blas.ok())
      return absl::UnavailableError(absl::StrCat(where, ": ", blas.status().message()));
    auto device = std::unique_ptr<CudaDevice>(new CudaDevice(ordinal, props.name, *blas));
    if (cudaError_t err = cudaSetDevice(ordinal); err != cudaSuccess) {
      return CudaError(where + ": cudaSetDevice", err);
    }
    if (cudaError_t err = cudaStreamCreateWithFlags(&device->stream_, cudaStreamNonBlocking);
        err != cudaSuccess) {
      return CudaError(where + ": cudaStreamCreate", err);
    }
    if (cublasStatus_t status = (*blas)->create(&device->blas_); status != CUBLAS_STATUS_SUCCESS) {
      device->blas_ = nullptr;
      return absl::UnavailableError(
          absl::StrCat(where, ": cublasCreate: cuBLAS status ", status,
                       status == CUBLAS_STATUS_ALLOC_FAILED ? " (out of GPU memory)" : ""));
    }
    CUBLAS_CHECK((*blas)->set_stream(device->blas_, device->stream_));
    return device;
  }

  ~CudaDevice() override {
    cudaSetDevice(ordinal_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
    if (blas_ != nullptr) blas_api_->destroy(blas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::string name() const override {
    return absl::StrCat("cuda:", ordinal_, " (", gpu_name_, ")");
  }
  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return stream_; }

  void* AllocateBytes(size_t bytes) override {
    Use();
    void* ptr = nullptr;
    CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(bytes, 1)));
    CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_));
    return ptr;
  }

  void FreeBytes(void* ptr) override {
    Use();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaFree(ptr));
  }

  // Host data goes through a pinned buffer, so the copy is a true DMA.
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    Use();
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // the pinned buffer is free again
    std::memcpy(Pinned(bytes), src, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, pinned_, bytes, cudaMemcpyHostToDevice, stream_));
  }

  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    Use();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaMemcpyAsync(Pinned(bytes), src, bytes, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(dst, pinned_, bytes);
  }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    Use();
    CUBLAS_CHECK(blas_api_->sgemm(
        blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
        static_cast<int>(m), static_cast<int>(k), &alpha, b, static_cast<int>(tb ? k : n), a,
        static_cast<int>(ta ? m : k), &beta, c, static_cast<int>(n)));
  }

  void AddBias(int64_t rows, int64_t cols, const float* bias, float* x) override {
    Use();
    CUDA_CHECK(cuda::AddBias(rows, cols, bias, x, stream_));
  }
  void ColumnSums(int64_t rows, int64_t cols, const float* x, float* out) override {
    Use();
    CUDA_CHECK(cuda::ColumnSums(rows, cols, x, out, stream_));
  }
  void Relu(int64_t n, const float* x, float* y) override {
    Use();
    CUDA_CHECK(cuda::Relu(n, x, y, stream_));
  }
  void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) override {
    Use();
    CUDA_CHECK(cuda::ReluGrad(n, y, dy, dx, stream_));
  }
  void SoftmaxCrossEntropy(int64_t rows, int64_t cols, const float* logits, const int32_t* labels,
                           float* dlogits, float* loss, int32_t* correct) override {
    Use();
    CUDA_CHECK(
        cuda::SoftmaxCrossEntropy(rows, cols, logits, labels, dlogits, loss, correct, stream_));
  }
  void Synchronize() override {
    Use();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  // Replica threads share devices' state through the CUDA runtime's
  // per-thread current device, so every entry point selects ours.
  void Use() const { CUDA_CHECK(cudaSetDevice(ordinal_)); }

  CudaDevice(int ordinal, std::string gpu_name, const cuda::CublasApi* blas_api)
      : ordinal_(ordinal), gpu_name_(std::move(gpu_name)), blas_api_(blas_api) {}

  void* Pinned(size_t bytes) {
    if (bytes > pinned_bytes_) {
      if (pinned_ != nullptr) CUDA_CHECK(cudaFreeHost(pinned_));
      pinned_bytes_ = std::max(bytes, 2 * pinned_bytes_);
      CUDA_CHECK(cudaMallocHost(&pinned_, pinned_bytes_));
    }
    return pinned_;
  }

  const int ordinal_;
  const std::string gpu_name_;
  const cuda::CublasApi* const blas_api_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
};

class NcclReducer final : public LocalReducer {
 public:
  // UNAVAILABLE naming NCCL's error when its communicators cannot be made.
  static absl::StatusOr<std::unique_ptr<NcclReducer>> Create(const std::vector<int>& ordinals) {
    auto nccl = cuda::Nccl();
    if (!nccl.ok()) return nccl.status();
    std::vector<ncclComm_t> comms(ordinals.size());
    const ncclResult_t result =
        (*nccl)->comm_init_all(comms.data(), static_cast<int>(ordinals.size()), ordinals.data());
    if (result != ncclSuccess) {
      return absl::UnavailableError(
          absl::StrCat("NCCL over ", ordinals.size(),
                       " GPUs: ncclCommInitAll: ", (*nccl)->error_string(result)));
    }
    return std::unique_ptr<NcclReducer>(new NcclReducer(*nccl, std::move(comms)));
  }
  ~NcclReducer() override {
    for (ncclComm_t comm : comms_) nccl_->comm_destroy(comm);
  }

  void Reduce(const std::vector<Mlp*>& replicas, const std::vector<float>& weights,
              TensorMap* out) override {
    CHECK(replicas.size() == comms_.size() && weights.size() == comms_.size());
    // Each replica scales its gradients by its share; the all-reduce sums them.
    NCCL_CHECK(nccl_->group_start());
    for (size_t r = 0; r < replicas.size(); ++r) {
      auto* device = dynamic_cast<CudaDevice*>(replicas[r]->device());
      CHECK(device != nullptr);
      CUDA_CHECK(cudaSetDevice(device->ordinal()));
      for (DenseLayer& layer : replicas[r]->layers()) {
        for (DeviceArray<float>* grad : {&layer.kernel_grad(), &layer.bias_grad()}) {
          CUDA_CHECK(cuda::Scale(grad->size(), weights[r], grad->data(), device->stream()));
          NCCL_CHECK(nccl_->all_reduce(grad->data(), grad->data(), grad->size(), ncclFloat, ncclSum,
                                       comms_[r], device->stream()));
        }
      }
    }
    NCCL_CHECK(nccl_->group_end());
    replicas[0]->CopyGradients(out);
  }

 private:
  NcclReducer(const cuda::NcclApi* nccl, std::vector<ncclComm_t> comms)
      : nccl_(nccl), comms_(std::move(comms)) {}

  const cuda::NcclApi* const nccl_;
  std::vector<ncclComm_t> comms_;
};

}  // namespace

int CudaDeviceCount(std::string* why_not) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    *why_not = absl::StrCat("the CUDA runtime says: ", cudaGetErrorString(err));
    return 0;
  }
  if (count == 0) *why_not = "the CUDA runtime found no device";
  return count;
}

absl::StatusOr<std::unique_ptr<Device>> MakeCudaDevice(int ordinal) {
  std::string why_not;
  const int count = CudaDeviceCount(&why_not);
  if (ordinal < 0 || ordinal >= count) {
    return absl::FailedPreconditionError(absl::StrCat("CUDA device ", ordinal,
                                                      " is not available (", count, " device(s)",
                                                      why_not.empty() ? "" : ": " + why_not, ")"));
  }
  auto device = CudaDevice::Create(ordinal);
  if (!device.ok()) return device.status();
  return std::unique_ptr<Device>(*std::move(device));
}

absl::StatusOr<std::unique_ptr<LocalReducer>> MakeNcclReducer(const std::vector<int>& ordinals) {
  std::string why_not;
  const int count = CudaDeviceCount(&why_not);
  if (static_cast<int>(ordinals.size()) > count) {
    return absl::FailedPreconditionError(
        absl::StrCat(ordinals.size(), " local replicas on CUDA need as many GPUs; found ", count));
  }
  auto reducer = NcclReducer::Create(ordinals);
  if (!reducer.ok()) return reducer.status();
  return std::unique_ptr<LocalReducer>(*std::move(reducer));
}

}  // namespace fulcrum
