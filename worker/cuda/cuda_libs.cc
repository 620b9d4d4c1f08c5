#include "worker/cuda/cuda_libs.h"

#include <dlfcn.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace fulcrum::cuda {
namespace {

#ifndef FULCRUM_CUDA_LIB_DIR  // BUILD sets it from CUDA_PATH
#define FULCRUM_CUDA_LIB_DIR "/usr/local/cuda/lib64"
#endif

#define FULCRUM_STRINGIFY_(x) #x
#define FULCRUM_STRINGIFY(x) FULCRUM_STRINGIFY_(x)

// Opens `soname` from the loader's search path, else from the toolkit's
// directory the build used.
absl::StatusOr<void*> Open(const std::string& soname) {
  if (void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string first_error = dlerror();
  if (void* handle = dlopen((FULCRUM_CUDA_LIB_DIR "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL)) {
    return handle;
  }
  return absl::UnavailableError(
      absl::StrCat("cannot load ", soname, " (", first_error,
                   "); install CUDA's libraries or add their folder to LD_LIBRARY_PATH"));
}

// Sets *fn to `symbol` of `handle`; when it is missing, names it in *error
// (the first such).
template <typename Fn>
void Find(void* handle, const char* symbol, Fn* fn, std::string* error) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  if (*fn == nullptr && error->empty()) error->assign(absl::StrCat("no symbol ", symbol));
}

template <typename Api>
struct Loaded {
  Api api{};
  absl::Status status;
};

// Loads `soname` and lets `bind` find each symbol; never freed.
template <typename Api>
const Loaded<Api>* Load(const std::string& soname,
                        void (*bind)(void* handle, Api* api, std::string* error)) {
  auto* out = new Loaded<Api>;
  auto handle = Open(soname);
  if (!handle.ok()) {
    out->status = handle.status();
    return out;
  }
  std::string error;
  bind(*handle, &out->api, &error);
  if (!error.empty()) out->status = absl::UnavailableError(absl::StrCat(soname, ": ", error));
  return out;
}

template <typename Api>
absl::StatusOr<const Api*> ApiOf(const Loaded<Api>* loaded) {
  if (!loaded->status.ok()) return loaded->status;
  return &loaded->api;
}

}  // namespace

absl::StatusOr<const CublasApi*> Cublas() {
  static const auto* const loaded =
      Load<CublasApi>("libcublas.so." FULCRUM_STRINGIFY(CUBLAS_VER_MAJOR),
                      [](void* handle, CublasApi* api, std::string* error) {
                        Find(handle, "cublasCreate_v2", &api->create, error);
                        Find(handle, "cublasDestroy_v2", &api->destroy, error);
                        Find(handle, "cublasSetStream_v2", &api->set_stream, error);
                        Find(handle, "cublasSgemm_v2", &api->sgemm, error);
                      });
  return ApiOf(loaded);
}

absl::StatusOr<const NcclApi*> Nccl() {
  static const auto* const loaded =
      Load<NcclApi>("libnccl.so." FULCRUM_STRINGIFY(NCCL_MAJOR),
                    [](void* handle, NcclApi* api, std::string* error) {
                      Find(handle, "ncclCommInitAll", &api->comm_init_all, error);
                      Find(handle, "ncclCommDestroy", &api->comm_destroy, error);
                      Find(handle, "ncclGroupStart", &api->group_start, error);
                      Find(handle, "ncclGroupEnd", &api->group_end, error);
                      Find(handle, "ncclAllReduce", &api->all_reduce, error);
                      Find(handle, "ncclGetErrorString", &api->error_string, error);
                    });
  return ApiOf(loaded);
}

}  // namespace fulcrum::cuda
