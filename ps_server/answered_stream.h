// For tests: a ReplicaStream whose Write (a subclass's) makes each call's
// answer at once and queues it, for Read to take in order.
#ifndef FULCRUM_PS_SERVER_ANSWERED_STREAM_H_
#define FULCRUM_PS_SERVER_ANSWERED_STREAM_H_

#include <deque>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ps_server/replicator.h"

namespace fulcrum {

class AnsweredStream : public ReplicaStream {
 public:
  // `closed`: broken from the start. `ended`: what Finish says once the
  // stream ended without an answer that failed.
  explicit AnsweredStream(bool closed = false, absl::Status ended = absl::OkStatus())
      : closed_(closed), status_(std::move(ended)) {}

  bool Read(ReplicateResponse* response) override {
    absl::MutexLock lock(&mu_);
    auto readable = [this]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_ || !answers_.empty(); };
    mu_.Await(absl::Condition(&readable));
    if (answers_.empty()) return false;
    *response = std::move(answers_.front());
    answers_.pop_front();
    return true;
  }
  void Cancel() override {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  absl::Status Finish() override {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 protected:
  // What Write does: unless the stream is closed, makes the answer (under
  // the stream's lock, so a Cancel waits for it) and queues it; an answer
  // that fails closes the stream with its status. Whether it was queued.
  template <typename Answer>
  bool AnswerWith(Answer answer) {
    absl::MutexLock lock(&mu_);
    if (closed_) return false;
    absl::StatusOr<ReplicateResponse> made = answer();
    if (!made.ok()) {
      status_ = made.status();
      closed_ = true;
      return false;
    }
    answers_.push_back(*std::move(made));
    return true;
  }

 private:
  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_);
  std::deque<ReplicateResponse> answers_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_ANSWERED_STREAM_H_
