// The CUDA API in a build made without the CUDA toolkit.
#include "worker/cuda/cuda.h"

namespace fulcrum {
namespace {

constexpr char kNoCuda[] =
    "this build has no CUDA: nvcc was not found when it was built (set CUDA_PATH or install the "
    "CUDA toolkit at /usr/local/cuda, then rebuild)";

}  // namespace

int CudaDeviceCount(std::string* why_not) {
  *why_not = kNoCuda;
  return 0;
}

absl::StatusOr<std::unique_ptr<Device>> MakeCudaDevice(int) {
  return absl::FailedPreconditionError(kNoCuda);
}

absl::StatusOr<std::unique_ptr<LocalReducer>> MakeNcclReducer(const std::vector<int>&) {
  return absl::FailedPreconditionError(kNoCuda);
}

}  // namespace fulcrum
