// The chief's record of a run: progress and per-epoch lines appended to a
// JSON-lines file, and a summary written at the end, each printed by
// protobuf's JSON printer from proto/training_log.proto, so that a NaN loss
// or any model name still gives valid JSON. Thread-compatible.
#ifndef FULCRUM_WORKER_TRAINING_LOG_H_
#define FULCRUM_WORKER_TRAINING_LOG_H_

#include <google/protobuf/message.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/file_system.h"
#include "proto/training_log.pb.h"

namespace fulcrum {

// One line of JSON for `record`, its fields in proto order under their
// proto names, zeros included.
std::string JsonLine(const google::protobuf::Message& record);

class TrainingLog {
 public:
  // "" for a path: that file is not written. The files are written
  // through `fs`, which must outlive the log (and may be null when neither
  // is written).
  TrainingLog(FileSystem* fs, std::string metrics_jsonl, std::string summary_json);

  // Empties the metrics file, for a run that starts afresh (a resumed run
  // appends to what it wrote before).
  absl::Status StartAfresh();

  // Appends one line to the metrics file; a failure is logged, not
  // returned: the run goes on without its curves.
  void Append(const google::protobuf::Message& record);

  // Writes the summary (indented JSON); UNAVAILABLE naming the file when it
  // cannot.
  absl::Status WriteSummary(const SummaryRecord& summary);

 private:
  // The metrics file, opened by StartAfresh or the first Append.
  absl::Status OpenMetrics(bool afresh);

  FileSystem* const fs_;
  const std::string metrics_jsonl_;
  const std::string summary_json_;
  std::unique_ptr<WritableFile> metrics_;
  bool append_failed_ = false;  // logged once
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_TRAINING_LOG_H_
