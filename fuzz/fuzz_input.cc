#include "fuzz/fuzz_input.h"

#include <google/protobuf/stubs/logging.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "common/file_system.h"

namespace fulcrum::fuzz {

grpc::ByteBuffer AsReceived(absl::string_view bytes) {
  std::vector<grpc::Slice> slices;
  size_t size = 1 + bytes.size() % 13;
  for (size_t at = 0; at < bytes.size(); at += size, size = size * 3 + 5) {
    slices.emplace_back(bytes.data() + at, std::min(size, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

namespace {

// Protobuf logs every string field that is not UTF-8, which hostile
// inputs are full of; the parse's failure is what the targets look at.
const bool kQuietProtobuf = [] {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}();

// This process's scratch directory, removed at exit.
const std::string& ScratchDir() {
  static const std::string* dir = [] {
    char name[] = "/tmp/fulcrum-fuzz-XXXXXX";
    Check(mkdtemp(name) != nullptr, "making a scratch directory");
    std::atexit([] { std::filesystem::remove_all(ScratchDir()); });
    return new std::string(name);
  }();
  return *dir;
}

}  // namespace

std::string WriteScratchFile(const std::string& name, absl::string_view bytes) {
  static FileSystem* fs = MakeLocalFileSystem().release();
  std::string path = ScratchDir() + "/" + name;
  Check(fs->MakeDirs(DirName(path)).ok() && WriteFile(*fs, path, bytes).ok(),
        "writing a scratch file");
  return path;
}

void Check(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "fuzz target check failed: %s\n", what);
  std::abort();
}

}  // namespace fulcrum::fuzz
