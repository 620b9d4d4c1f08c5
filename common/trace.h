// Chrome traces: spans of a process's work as the JSON that Perfetto
// (ui.perfetto.dev) and chrome://tracing open, a worker's calls to each
// server and each server's handling of them, linked by flow arrows.
//
// A file is the trace format's "JSON Array Format", one event per line,
// its closing bracket optional: a process killed mid-trace leaves a file
// that still opens. Each process writes its own; MergeTraces joins the
// files of a job into one (`fulcrumctl merge-traces`). Times are the
// wall clock's, in microseconds since the Unix epoch, so the files of a
// job's processes line up as far as their machines' clocks agree.
#ifndef FULCRUM_COMMON_TRACE_H_
#define FULCRUM_COMMON_TRACE_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fulcrum {

// One span: what, on which track of the process (a thread row in the
// viewer: "step", "ps 1", "worker 0"), when, and its arguments.
struct TraceSpan {
  std::string track;
  std::string name;
  absl::Time start;
  absl::Time end;
  std::vector<std::pair<std::string, std::string>> args;
  // Where the span sends an arrow from (kFrom) or takes one in (kTo): the
  // call and the server's handling of it share `flow` (FlowId).
  enum Flow { kNone, kFrom, kTo };
  Flow flow_end = kNone;
  std::string flow;
};

// The flow id that links a worker's call with a push id to server `ps`
// with that server's handling of it.
std::string FlowId(uint64_t push_id, int ps);

class TraceFile {
 public:
  // Creates (truncates) `path`, naming the process `process` ("worker 1",
  // "ps 0"): its events carry a process id derived from that name, the same
  // in every file and machine, so merged files keep their processes apart.
  static absl::StatusOr<std::unique_ptr<TraceFile>> Open(const std::string& path,
                                                         const std::string& process);
  ~TraceFile();  // closes the array

  // Whether callers record now: a worker records the steps it traces only,
  // and marks their calls for the servers to trace too.
  void SetRecording(bool on) { recording_.store(on, std::memory_order_relaxed); }
  bool recording() const { return recording_.load(std::memory_order_relaxed); }

  // Writes the span at once (a line), whether or not recording. Thread-safe.
  void Add(const TraceSpan& span) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& path() const { return path_; }

 private:
  TraceFile(std::string path, FILE* file, const std::string& process);
  // The thread id of `track`, naming it in the file on its first use.
  int TrackId(absl::string_view track) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const int pid_;
  std::atomic<bool> recording_{false};
  absl::Mutex mu_;
  FILE* const file_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> tracks_ ABSL_GUARDED_BY(mu_);
};

// Joins trace files (TraceFile's, or any in the JSON Array Format with one
// event per line) into `output`, one array, in order. An input that is
// not such a file fails naming it; `output` is then not written.
absl::Status MergeTraces(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_TRACE_H_
