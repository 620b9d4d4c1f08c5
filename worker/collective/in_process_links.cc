#include "worker/collective/in_process_links.h"

#include "absl/strings/str_cat.h"

namespace fulcrum {

void Mailbox::Put(int from, int to, std::vector<float> message) {
  absl::MutexLock lock(&mu_);
  queues_[{from, to}].push_back(std::move(message));
}

bool Mailbox::Take(int from, int to, absl::Time deadline, std::vector<float>* message) {
  absl::MutexLock lock(&mu_);
  std::deque<std::vector<float>>& queue = queues_[{from, to}];
  auto ready = [&queue]() { return !queue.empty(); };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (queue.empty()) return false;
  *message = std::move(queue.front());
  queue.pop_front();
  return true;
}

absl::Status InProcessLinks::Send(int peer, absl::Span<const float> data) {
  mailbox_->Put(rank_, peer, std::vector<float>(data.begin(), data.end()));
  return absl::OkStatus();
}

absl::Status InProcessLinks::Recv(int peer, absl::Span<float> into, absl::Time deadline) {
  std::vector<float> message;
  if (!mailbox_->Take(peer, rank_, deadline, &message)) {
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", rank_, ": nothing from rank ", peer, " by the deadline"));
  }
  if (message.size() != into.size()) {
    return absl::InternalError(absl::StrCat("rank ", rank_, ": rank ", peer, " sent ",
                                            message.size(), " floats where ", into.size(),
                                            " were expected"));
  }
  std::copy(message.begin(), message.end(), into.begin());
  return absl::OkStatus();
}

}  // namespace fulcrum
