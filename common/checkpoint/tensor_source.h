// Named tensors read on demand in pieces, never whole: what the tensor
// files (tensor_files.h) are written from. A checkpoint's (exported.h) and
// live servers' (client/live_model.h) variables and tables are sources.
#ifndef FULCRUM_COMMON_CHECKPOINT_TENSOR_SOURCE_H_
#define FULCRUM_COMMON_CHECKPOINT_TENSOR_SOURCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/tensor.h"

namespace fulcrum {

struct ExportedTensor {
  std::string name;
  bool int64 = false;  // int64 ids; else float32
  Shape shape;
  int64_t bytes() const {
    int64_t elements = 1;
    for (int64_t d : shape) elements *= d;
    return elements * (int64 ? 8 : 4);
  }
};

// Receives a tensor's bytes in order (little-endian, row-major).
using BytesSink = absl::FunctionRef<absl::Status(absl::string_view bytes)>;

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // Where the tensors come from, for messages and the files' metadata:
  // "checkpoint ckpt-000000000120 (2 files)".
  virtual const std::string& description() const = 0;
  // The tensors, variables first (by name), then tables (by name).
  virtual const std::vector<ExportedTensor>& tensors() const = 0;
  // Streams tensor `i`'s bytes to `sink`, exactly its bytes() on success;
  // the first error of a read or of the sink.
  virtual absl::Status Read(size_t i, BytesSink sink) const = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CHECKPOINT_TENSOR_SOURCE_H_
