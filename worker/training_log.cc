#include "worker/training_log.h"

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace fulcrum {
namespace {

std::string Json(const google::protobuf::Message& record, bool indent) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = indent;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  // Fails only for messages this file does not print (Any of an unknown type).
  CHECK(google::protobuf::util::MessageToJsonString(record, &out, options).ok());
  return out;
}

}  // namespace

std::string JsonLine(const google::protobuf::Message& record) { return Json(record, false); }

TrainingLog::TrainingLog(FileSystem* fs, std::string metrics_jsonl, std::string summary_json)
    : fs_(fs), metrics_jsonl_(std::move(metrics_jsonl)), summary_json_(std::move(summary_json)) {
  CHECK((fs_ != nullptr || (metrics_jsonl_.empty() && summary_json_.empty())) &&
        "a training log that writes files needs a FileSystem");
}

absl::Status TrainingLog::OpenMetrics(bool afresh) {
  auto file =
      afresh ? fs_->NewWritableFile(metrics_jsonl_) : fs_->NewAppendableFile(metrics_jsonl_);
  if (!file.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot write --metrics_jsonl '", metrics_jsonl_,
                                               "': ", file.status().message()));
  }
  metrics_ = *std::move(file);
  return absl::OkStatus();
}

absl::Status TrainingLog::StartAfresh() {
  if (metrics_jsonl_.empty()) return absl::OkStatus();
  return OpenMetrics(true);
}

void TrainingLog::Append(const google::protobuf::Message& record) {
  if (metrics_jsonl_.empty() || append_failed_) return;
  absl::Status status = metrics_ != nullptr ? absl::OkStatus() : OpenMetrics(false);
  if (status.ok()) status = metrics_->Append(JsonLine(record) + "\n");
  if (!status.ok()) {
    append_failed_ = true;
    LOG_ERROR("{}; training goes on without these metrics", status.message());
  }
}

absl::Status TrainingLog::WriteSummary(const SummaryRecord& summary) {
  if (summary_json_.empty()) return absl::OkStatus();
  if (absl::Status s = WriteFile(*fs_, summary_json_, Json(summary, true)); !s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot write --summary_json '", summary_json_, "': ", s.message()));
  }
  LOG_INFO("summary written to {}", summary_json_);
  return absl::OkStatus();
}

}  // namespace fulcrum
