// cuBLAS and NCCL, loaded (dlopen) when a CUDA device or reducer is first
// made, so that the worker starts on machines that have neither: it then
// trains on the CPU. The CUDA runtime is linked statically and finds the
// driver itself.
#ifndef FULCRUM_WORKER_CUDA_CUDA_LIBS_H_
#define FULCRUM_WORKER_CUDA_CUDA_LIBS_H_

#include <cublas_v2.h>
#include <nccl.h>

#include "absl/status/statusor.h"

namespace fulcrum::cuda {

// The cuBLAS calls the backend makes (cublas_v2.h's names are macros for
// these _v2 symbols).
struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSgemm_v2) sgemm;
};

struct NcclApi {
  decltype(&ncclCommInitAll) comm_init_all;
  decltype(&ncclCommDestroy) comm_destroy;
  decltype(&ncclGroupStart) group_start;
  decltype(&ncclGroupEnd) group_end;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclGetErrorString) error_string;
};

// The library of the major version built against (libcublas.so.13,
// libnccl.so.2), loaded once; UNAVAILABLE naming the library and dlerror's
// reason when it or a symbol is missing.
absl::StatusOr<const CublasApi*> Cublas();
absl::StatusOr<const NcclApi*> Nccl();

}  // namespace fulcrum::cuda

#endif  // FULCRUM_WORKER_CUDA_CUDA_LIBS_H_
