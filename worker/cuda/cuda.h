// The CUDA backend: cuBLAS SGEMM and nvcc-compiled kernels on a stream, with
// pinned host buffers for transfers, and NCCL to reduce local replicas.
// Builds without the CUDA toolkit keep this API and report that they have
// no CUDA.
#ifndef FULCRUM_WORKER_CUDA_CUDA_H_
#define FULCRUM_WORKER_CUDA_CUDA_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/device.h"
#include "worker/local_reducer.h"

namespace fulcrum {

// Usable CUDA devices; when 0, `why_not` says why (no driver, no device,
// a build without CUDA).
int CudaDeviceCount(std::string* why_not);

// CUDA device `ordinal`, with its own stream and cuBLAS handle.
absl::StatusOr<std::unique_ptr<Device>> MakeCudaDevice(int ordinal);

// Reduces the gradients of replicas on CUDA devices `ordinals` (one replica
// per device, in order) with an NCCL all-reduce, then copies the result to
// the host.
absl::StatusOr<std::unique_ptr<LocalReducer>> MakeNcclReducer(const std::vector<int>& ordinals);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_CUDA_CUDA_H_
