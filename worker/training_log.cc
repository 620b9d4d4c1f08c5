#include "worker/training_log.h"

#include <google/protobuf/util/json_util.h>

#include <fstream>

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

absl::Status WriteText(const std::string& path, const std::string& text, std::ios::openmode mode,
                       const char* flag) {
  std::ofstream out(path, mode);
  out << text;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", flag, " '", path, "'"));
  return absl::OkStatus();
}

}  // namespace

std::string JsonLine(const google::protobuf::Message& record) { return Json(record, false); }

absl::Status TrainingLog::StartAfresh() {
  if (metrics_jsonl_.empty()) return absl::OkStatus();
  return WriteText(metrics_jsonl_, "", std::ios::trunc, "--metrics_jsonl");
}

void TrainingLog::Append(const google::protobuf::Message& record) {
  if (metrics_jsonl_.empty()) return;
  absl::Status status =
      WriteText(metrics_jsonl_, JsonLine(record) + "\n", std::ios::app, "--metrics_jsonl");
  if (!status.ok() && !append_failed_) {
    append_failed_ = true;
    LOG_ERROR("{}; training goes on without these metrics", status.message());
  }
}

absl::Status TrainingLog::WriteSummary(const SummaryRecord& summary) {
  if (summary_json_.empty()) return absl::OkStatus();
  if (absl::Status s =
          WriteText(summary_json_, Json(summary, true), std::ios::trunc, "--summary_json");
      !s.ok()) {
    return s;
  }
  LOG_INFO("summary written to {}", summary_json_);
  return absl::OkStatus();
}

}  // namespace fulcrum
