// Fuzz target: the training-data readers a worker points at files it did
// not make: IDX (plain or gzip), libsvm and Criteo TSV. The input's first
// line names the reader ("idx", "libsvm" or "criteo"); the rest is the
// file, for IDX the images file followed by the labels file, which starts
// at the labels' magic (0x00000801). Whatever reads must be consistent.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "common/file_system.h"
#include "fuzz/fuzz_input.h"
#include "worker/data/ctr_data.h"
#include "worker/data/dataset.h"

namespace fulcrum::fuzz {
namespace {

constexpr int kNumClasses = 10;
constexpr char kLabelsMagic[] = {0, 0, 8, 1};

void CheckRead(const absl::StatusOr<Dataset>& read) {
  if (!read.ok()) return;
  Check(read->num_examples >= 0 && read->feature_dim >= 0, "negative sizes");
  Check(read->features.size() == static_cast<size_t>(read->num_examples * read->feature_dim),
        "features and examples disagree");
  Check(read->labels.size() == static_cast<size_t>(read->num_examples),
        "labels and examples disagree");
  for (int32_t label : read->labels) {
    Check(label >= 0 && label < read->num_classes, "a label out of range");
  }
  Check(read->ids.size() == static_cast<size_t>(read->num_examples * read->ids_per_example),
        "ids and examples disagree");
}

}  // namespace
}  // namespace fulcrum::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fulcrum;  // NOLINT(google-build-using-namespace)
  static FileSystem* const fs = MakeLocalFileSystem().release();
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  if (newline == absl::string_view::npos) return 0;
  const absl::string_view reader = input.substr(0, newline);
  const absl::string_view file = input.substr(newline + 1);
  if (reader == "idx") {
    const size_t labels_at = file.find(absl::string_view(fuzz::kLabelsMagic, 4));
    const absl::string_view images = file.substr(0, labels_at);
    const absl::string_view labels =
        labels_at == absl::string_view::npos ? absl::string_view() : file.substr(labels_at);
    fuzz::CheckRead(ReadIdx(*fs, fuzz::WriteScratchFile("images.idx", images),
                            fuzz::WriteScratchFile("labels.idx", labels), fuzz::kNumClasses));
  } else if (reader == "libsvm") {
    const std::string path = fuzz::WriteScratchFile("data.libsvm", file);
    fuzz::CheckRead(ReadLibsvm(*fs, path, fuzz::kNumClasses));
    fuzz::CheckRead(ReadLibsvm(*fs, path, fuzz::kNumClasses, /*feature_dim=*/8));
  } else if (reader == "criteo") {
    fuzz::CheckRead(ReadCriteoFile(*fs, fuzz::WriteScratchFile("data.tsv", file)));
  }
  return 0;
}
