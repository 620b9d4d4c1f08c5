// The Criteo display-advertising data (issue 15's --dataset=criteo): TSV
// lines of a label (0 or 1), 13 integer features and 26 categorical
// features as hexadecimal strings, any feature possibly empty (missing).
// Read streaming, a bounded number of examples at a time, so a file far
// larger than memory can be trained on.
//
// What a line becomes: an integer x turns into log(1 + x) (0 for x <= 0 or
// missing), as the Criteo baselines do; a categorical value into an id of
// its field, a fixed hash of (field, value), a missing one into its
// field's own "missing" id.
#ifndef FULCRUM_WORKER_DATA_CRITEO_H_
#define FULCRUM_WORKER_DATA_CRITEO_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/file_system.h"
#include "worker/data/synthetic_ctr.h"

namespace fulcrum {

class CriteoReader {
 public:
  static constexpr int kNumeric = 13;
  static constexpr int kFields = 26;

  // NOT_FOUND naming `path` when it cannot be opened (through `fs`).
  static absl::StatusOr<std::unique_ptr<CriteoReader>> Open(FileSystem& fs,
                                                            const std::string& path);

  // Up to `max_examples` more examples (none at the end of the file).
  // INVALID_ARGUMENT naming the file and line of a line that is not a
  // Criteo line, and what is wrong with it.
  absl::StatusOr<CtrExamples> Next(int64_t max_examples);

 private:
  CriteoReader(std::string path, std::unique_ptr<LineReader> in)
      : path_(std::move(path)), in_(std::move(in)) {}
  absl::Status ParseLine(const std::string& line, CtrExamples* out);

  const std::string path_;
  const std::unique_ptr<LineReader> in_;
  int64_t line_ = 0;  // lines read so far
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_DATA_CRITEO_H_
