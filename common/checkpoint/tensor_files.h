// Named tensors (tensor_source.h: a checkpoint's, live servers') written as a file other tools
// read, streamed a few MiB at a time, atomically (a reader never sees half a file):
//  - safetensors (https://huggingface.co/docs/safetensors): an 8-byte
//    little-endian header length, a JSON header naming each tensor's dtype
//    (F32, I64), shape and byte range, then the bytes. PyTorch users load it
//    with safetensors.torch.load_file; the header's __metadata__ says what
//    was exported.
//  - npz: NumPy's zip of .npy files (stored, not compressed), loaded with
//    numpy.load. Entries are limited to 4 GiB (no zip64): use safetensors
//    for more.
#ifndef FULCRUM_COMMON_CHECKPOINT_TENSOR_FILES_H_
#define FULCRUM_COMMON_CHECKPOINT_TENSOR_FILES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/checkpoint/tensor_source.h"
#include "common/file_system.h"

namespace fulcrum {

enum class TensorFileFormat { kSafetensors, kNpz };

// The format `name` says ("safetensors", "npz"); when empty, by `path`'s
// extension (.npz is npz, else safetensors). INVALID_ARGUMENT for another
// name.
absl::StatusOr<TensorFileFormat> ChooseTensorFileFormat(const std::string& name,
                                                        const std::string& path);
const char* TensorFileFormatName(TensorFileFormat format);

// Writes `source`'s tensors to `path` in `format`; INTERNAL when the source
// gives a tensor another length than its shape (the file is not made).
absl::Status WriteTensorFile(const TensorSource& source, TensorFileFormat format, FileSystem& fs,
                             const std::string& path);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CHECKPOINT_TENSOR_FILES_H_
