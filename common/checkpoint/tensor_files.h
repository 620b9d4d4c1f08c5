// An exported checkpoint (exported.h) written as a file other tools read,
// streamed a few MiB at a time, atomically (a reader never sees half a
// file):
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
#include "common/checkpoint/exported.h"
#include "common/file_system.h"

namespace fulcrum {

absl::Status WriteSafetensors(const ExportedCheckpoint& checkpoint, FileSystem& fs,
                              const std::string& path);

absl::Status WriteNpz(const ExportedCheckpoint& checkpoint, FileSystem& fs,
                      const std::string& path);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CHECKPOINT_TENSOR_FILES_H_
