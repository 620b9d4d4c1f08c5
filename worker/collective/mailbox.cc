#include "worker/collective/mailbox.h"

#include "absl/strings/str_cat.h"

namespace fulcrum {

void Mailbox::Put(int from, int to, std::vector<float> message) {
  absl::MutexLock lock(&mu_);
  queues_[{from, to}].messages.push_back(std::move(message));
}

void Mailbox::Break(int from, int to, absl::Status why) {
  absl::MutexLock lock(&mu_);
  Queue& queue = queues_[{from, to}];
  if (queue.broken.ok()) queue.broken = std::move(why);
}

absl::StatusOr<std::vector<float>> Mailbox::Take(int from, int to, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  Queue& queue = queues_[{from, to}];
  auto ready = [&queue]() { return !queue.messages.empty() || !queue.broken.ok(); };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (queue.messages.empty()) {
    if (!queue.broken.ok()) return queue.broken;
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", to, ": nothing from rank ", from, " by the deadline"));
  }
  std::vector<float> message = std::move(queue.messages.front());
  queue.messages.pop_front();
  return message;
}

}  // namespace fulcrum
