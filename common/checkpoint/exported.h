// A checkpoint's variables and embedding tables as named tensors, read on
// demand in pieces of a few MiB: what fulcrumctl export writes (as
// safetensors or npz, tensor_files.h) and fulcrum.load_checkpoint loads,
// never the whole model in memory at once.
//
// Names: a variable keeps its own ("fc1.weight"), and its optimizer slots
// with --slots are "<name>.slot<k>" (adam: 0 is m, 1 is v; adagrad: 0 is
// the accumulator). A table "t" becomes "t.ids" (int64, [rows]) and
// "t.rows" (float32, [rows, width]), row i the row of id i; with slots
// also "t.slots" ([rows, slot floats]). Thread-compatible once opened.
#ifndef FULCRUM_COMMON_CHECKPOINT_EXPORTED_H_
#define FULCRUM_COMMON_CHECKPOINT_EXPORTED_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint/restore.h"
#include "common/checkpoint/tensor_source.h"
#include "common/file_system.h"
#include "common/tensor.h"

namespace fulcrum {

struct ExportOptions {
  // The checkpoint of this step; -1: the job's last state (the newest
  // complete checkpoint with any newer final files of its servers in
  // place, else the final files alone).
  int64_t step = -1;
  bool slots = false;  // the optimizer slots too
};

class ExportedCheckpoint final : public TensorSource {
 public:
  // Opens the checkpoint `options` names under `dir`: NOT_FOUND when there
  // is none, DATA_LOSS naming a file that is truncated or corrupt or
  // variables whose files do not tile them.
  static absl::StatusOr<ExportedCheckpoint> Open(FileSystem& fs, const std::string& dir,
                                                 const ExportOptions& options);

  // What was opened: "checkpoint ckpt-000000000120 (2 files)".
  const std::string& description() const override { return description_; }
  const std::vector<ExportedTensor>& tensors() const override { return tensors_; }
  // DATA_LOSS when the files hold another length than the tensor's shape
  // needs.
  absl::Status Read(size_t i, BytesSink sink) const override;

 private:
  // Where a tensor's bytes come from.
  struct Source {
    const RestoredVariable* variable = nullptr;  // else a table
    uint32_t tensor = 0;                         // of the variable: 0 values, 1 + k slot k
    std::vector<std::pair<const CheckpointFile*, const CheckpointTable*>> parts;  // a table's
    enum class Column { kIds, kRows, kSlots } column = Column::kIds;
    int64_t width = 0;  // a table's row values
  };
  absl::Status ReadVariable(const Source& source, BytesSink sink) const;
  absl::Status ReadTable(const Source& source, BytesSink sink) const;

  RestorePoint point_;  // keeps the files open
  std::string description_;
  std::vector<ExportedTensor> tensors_;
  std::vector<Source> sources_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CHECKPOINT_EXPORTED_H_
