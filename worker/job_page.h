// A worker's status page (GET / on its metrics port): the job as this
// worker trains it (epoch and step out of their totals, examples/s, the
// ETA), its loss and accuracy curves so far, on the chief the test set's
// after each epoch, where its steps' time goes, and the servers: each
// one's share of the updates, and a link to its own page. The trainer
// records into a JobStatus; the page is rendered from it at each request.
#ifndef FULCRUM_WORKER_JOB_PAGE_H_
#define FULCRUM_WORKER_JOB_PAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/ps_service.pb.h"
#include "proto/training_log.pb.h"
#include "worker/step_parts.h"

namespace fulcrum {

// What a worker's page shows. Thread-safe: the trainer records, the
// metrics server's threads read.
class JobStatus {
 public:
  // The most progress records kept: past it every other one is dropped,
  // so a long run's curves keep their shape in bounded memory.
  static constexpr size_t kMaxPoints = 1000;

  struct View {
    // Set once, as the worker starts.
    std::string title;   // "worker 0 (chief)"
    std::string job;     // "mlp 64 · async · 2 workers · parameter_server over 2 servers"
    int64_t epochs = 0;  // to train
    // Recorded as it trains.
    int64_t total_steps = 0;  // this worker's, as last known (re-dealing changes it)
    double eta_secs = -1;     // -1: not known yet
    bool finished = false;
    std::vector<ProgressRecord> progress;
    std::vector<EpochRecord> evaluations;  // the chief's
    // The steps' parts, summed over the last window (at most kWindowSteps
    // steps; the one before while a new one fills), and their count.
    StepParts parts;
    int64_t parts_steps = 0;
    // The parameter servers as last asked (none under all-reduce).
    struct Server {
      std::string address;
      std::string page;  // its status page's URL; "": it serves none
      int shards = 0;    // primaries
      int ranges = 0;    // tables' ranges, primaries
      int64_t updates_applied = 0;
      int64_t bytes = 0;  // pushed to it and pulled from it
      int64_t memory_bytes = 0;
      int64_t max_memory_bytes = 0;
    };
    std::vector<Server> servers;
  };
  // The steps a window of step parts covers.
  static constexpr int64_t kWindowSteps = 200;

  explicit JobStatus(View start) : view_(std::move(start)) {}

  void Progress(const ProgressRecord& record, int64_t total_steps, double eta_secs)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Evaluated(const EpochRecord& record) ABSL_LOCKS_EXCLUDED(mu_);
  // After every step: where its time went.
  void Step(const StepParts& parts) ABSL_LOCKS_EXCLUDED(mu_);
  void Finished() ABSL_LOCKS_EXCLUDED(mu_);
  // The servers' Describe answers, in the order of `addresses` (the
  // cluster spec's; an answer past them, a server added since, is left
  // out): each one's share of the work, and where its page is.
  void SetServers(const std::vector<DescribeResponse>& described,
                  const std::vector<std::string>& addresses) ABSL_LOCKS_EXCLUDED(mu_);
  View view() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  View view_ ABSL_GUARDED_BY(mu_);
  StepParts filling_ ABSL_GUARDED_BY(mu_);  // the window being summed
  int64_t filling_steps_ ABSL_GUARDED_BY(mu_) = 0;
};

// A duration or an ETA: "45s", "3m07s", "1h05m"; "unknown" when negative
// or not finite.
std::string FormatDuration(double secs);

// The page of `view`.
std::string RenderJobPage(const JobStatus::View& view);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_JOB_PAGE_H_
