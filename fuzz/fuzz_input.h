// What the fuzz targets share: fuzzer bytes as gRPC would hand them over,
// and as files.
#ifndef FULCRUM_FUZZ_FUZZ_INPUT_H_
#define FULCRUM_FUZZ_FUZZ_INPUT_H_

#include <grpcpp/support/byte_buffer.h>

#include <string>

#include "absl/strings/string_view.h"

namespace fulcrum::fuzz {

// `bytes` in several gRPC slices of uneven sizes, which follow from the
// number of bytes, so one input is always cut the same way.
grpc::ByteBuffer AsReceived(absl::string_view bytes);

// Writes `bytes` to the file `name` in a directory of this process's own
// (made once, removed at exit) and returns its path. Aborts if it cannot.
std::string WriteScratchFile(const std::string& name, absl::string_view bytes);

// Aborts, naming `what`, unless `condition` holds: the targets' own checks,
// which a fuzzer reports as crashes.
void Check(bool condition, const char* what);

}  // namespace fulcrum::fuzz

#endif  // FULCRUM_FUZZ_FUZZ_INPUT_H_
