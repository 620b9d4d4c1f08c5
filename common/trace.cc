#include "common/trace.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/hash.h"
#include "common/json_escape.h"

namespace fulcrum {
namespace {

int ProcessId(absl::string_view process) {
  uint64_t h = 0;
  for (char c : process) h = Mix64(h ^ static_cast<unsigned char>(c));
  return static_cast<int>(h % 0x7fffffff) + 1;
}

// The events are written one a line, each after the first led by a comma,
// between a "[" line and a "]" line (absent while the file is written).
constexpr absl::string_view kOpen = "[";
constexpr absl::string_view kClose = "]";

}  // namespace

std::string FlowId(uint64_t push_id, int ps) { return absl::StrCat(absl::Hex(push_id), ":", ps); }

absl::StatusOr<std::unique_ptr<TraceFile>> TraceFile::Open(const std::string& path,
                                                           const std::string& process) {
  FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write the trace file ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<TraceFile>(new TraceFile(path, file, process));
}

TraceFile::TraceFile(std::string path, FILE* file, const std::string& process)
    : path_(std::move(path)), pid_(ProcessId(process)), file_(file) {
  absl::MutexLock lock(&mu_);
  std::fprintf(file_,
               "%s\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, "
               "\"args\": {\"name\": \"%s\"}}\n",
               std::string(kOpen).c_str(), pid_, JsonEscape(process).c_str());
  std::fflush(file_);
}

TraceFile::~TraceFile() {
  absl::MutexLock lock(&mu_);
  std::fprintf(file_, "%s\n", std::string(kClose).c_str());
  std::fclose(file_);
}

int TraceFile::TrackId(absl::string_view track) {
  auto [it, added] = tracks_.try_emplace(track, static_cast<int>(tracks_.size()) + 1);
  if (added) {
    // Named, and shown in the order first used.
    std::fprintf(file_,
                 ",{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                 "\"args\": {\"name\": \"%s\"}}\n"
                 ",{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                 "\"args\": {\"sort_index\": %d}}\n",
                 pid_, it->second, JsonEscape(track).c_str(), pid_, it->second, it->second);
  }
  return it->second;
}

void TraceFile::Add(const TraceSpan& span) {
  const int64_t ts = absl::ToUnixMicros(span.start);
  const int64_t dur = std::max<int64_t>(absl::ToInt64Microseconds(span.end - span.start), 0);
  std::string args;
  for (const auto& [key, value] : span.args) {
    absl::StrAppend(&args, args.empty() ? "" : ", ", "\"", JsonEscape(key), "\": \"",
                    JsonEscape(value), "\"");
  }
  absl::MutexLock lock(&mu_);
  const int tid = TrackId(span.track);
  std::string line =
      absl::StrCat(",{\"name\": \"", JsonEscape(span.name), "\", \"cat\": \"fulcrum\", ",
                   "\"ph\": \"X\", \"ts\": ", ts, ", \"dur\": ", dur, ", \"pid\": ", pid_,
                   ", \"tid\": ", tid, ", \"args\": {", args, "}}\n");
  if (span.flow_end != TraceSpan::kNone) {
    // A flow event at the span's start binds to it (bp "e": the enclosing
    // slice, for the arrow's end too).
    absl::StrAppend(&line, ",{\"name\": \"call\", \"cat\": \"push\", \"ph\": \"",
                    span.flow_end == TraceSpan::kFrom ? "s" : "f", "\", \"bp\": \"e\", \"id\": \"",
                    JsonEscape(span.flow), "\", \"ts\": ", ts, ", \"pid\": ", pid_,
                    ", \"tid\": ", tid, "}\n");
  }
  std::fputs(line.c_str(), file_);
  std::fflush(file_);  // a process killed mid-trace leaves its spans so far
}

absl::Status MergeTraces(const std::vector<std::string>& inputs, const std::string& output) {
  std::string merged = absl::StrCat(kOpen, "\n");
  bool first = true;
  for (const std::string& input : inputs) {
    std::ifstream in(input);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read the trace file ", input));
    std::string line;
    if (!std::getline(in, line) || line != kOpen) {
      return absl::InvalidArgumentError(absl::StrCat(
          input, " is not a trace file of one event a line (its first line is not \"[\")"));
    }
    while (std::getline(in, line)) {
      if (line == kClose || line.empty()) continue;
      absl::string_view event = line;
      absl::ConsumePrefix(&event, ",");
      if (!absl::StartsWith(event, "{") || !absl::EndsWith(event, "}")) {
        return absl::InvalidArgumentError(
            absl::StrCat(input, ": a line that is not one event: ", line.substr(0, 80)));
      }
      absl::StrAppend(&merged, first ? "" : ",", event, "\n");
      first = false;
    }
  }
  absl::StrAppend(&merged, kClose, "\n");
  std::ofstream out(output, std::ios::trunc);
  if (!out || !(out << merged) || !out.flush()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", output));
  }
  return absl::OkStatus();
}

}  // namespace fulcrum
