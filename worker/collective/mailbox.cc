#include "worker/collective/mailbox.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fulcrum {

uint64_t Mailbox::Open(int from, int to, StreamOrder order) {
  absl::MutexLock lock(&mu_);
  Queue& queue = queues_[{from, to}];
  if (order.sender != 0 && order.sender == queue.order.sender &&
      order.sequence < queue.order.sequence) {
    return 0;
  }
  queue.order = order;
  if (++queue.streams > 1) {
    queue.messages.clear();
    queue.broken = absl::OkStatus();
    reconnected_[to].insert(from);
  }
  return queue.streams;
}

void Mailbox::Put(int from, int to, uint64_t stream, uint64_t tag, Message message) {
  absl::MutexLock lock(&mu_);
  Queue& queue = queues_[{from, to}];
  if (queue.streams != stream) return;
  queue.messages.push_back({tag, std::move(message)});
  newest_tag_[to] = std::max(newest_tag_[to], tag);
}

uint64_t Mailbox::NewestTag(int to) const {
  absl::MutexLock lock(&mu_);
  auto it = newest_tag_.find(to);
  return it == newest_tag_.end() ? 0 : it->second;
}

void Mailbox::Break(int from, int to, uint64_t stream, absl::Status why) {
  absl::MutexLock lock(&mu_);
  Queue& queue = queues_[{from, to}];
  if (queue.streams == stream && queue.broken.ok()) queue.broken = std::move(why);
}

absl::StatusOr<Message> Mailbox::Take(int from, int to, uint64_t tag, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  Queue& queue = queues_[{from, to}];
  // Ready: a message of this round, one of a later round, or a broken link.
  // Messages of earlier rounds, and notices (empty) of this one, are
  // dropped on the way.
  auto ready = [&queue, tag]() {
    for (const Queued& message : queue.messages) {
      if (message.tag > tag || (message.tag == tag && !message.data.empty())) return true;
    }
    return !queue.broken.ok();
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  while (!queue.messages.empty() && queue.messages.front().tag <= tag &&
         (queue.messages.front().tag < tag || queue.messages.front().data.empty())) {
    queue.messages.pop_front();
  }
  if (queue.messages.empty()) {
    if (!queue.broken.ok()) return queue.broken;
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", to, ": nothing from rank ", from, " by the deadline"));
  }
  if (queue.messages.front().tag > tag) {
    return absl::AbortedError(absl::StrCat("rank ", to, ": rank ", from, " moved on to round ",
                                           queue.messages.front().tag, " from round ", tag));
  }
  Message message = std::move(queue.messages.front().data);
  queue.messages.pop_front();
  return message;
}

absl::StatusOr<std::pair<int, uint64_t>> Mailbox::AwaitRound(int to, int root, uint64_t tag,
                                                             absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  std::pair<int, uint64_t> found;
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    found = {-1, 0};
    int connected = 0;
    for (const auto& [link, queue] : queues_) {
      if (link.second != to) continue;
      if (queue.streams > 0) ++connected;
      for (const Queued& message : queue.messages) {
        if (message.tag > tag ||
            (link.first == root && message.tag == tag && !message.data.empty())) {
          if (found.first < 0 || message.tag > found.second) found = {link.first, message.tag};
        }
      }
    }
    if (found.first < 0 && root == to && connected == size_ - 1) found = {to, tag};
    return found.first >= 0;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", to, ": no message of a round after ", tag, " by the deadline"));
  }
  return found;
}

std::vector<int> Mailbox::TakeReconnected(int to) {
  absl::MutexLock lock(&mu_);
  std::set<int> ranks;
  ranks.swap(reconnected_[to]);
  return {ranks.begin(), ranks.end()};
}

void Mailbox::Forget(int to) {
  absl::MutexLock lock(&mu_);
  for (auto& [link, queue] : queues_) {
    if (link.second == to) queue.messages.clear();
  }
  newest_tag_.erase(to);
}

}  // namespace fulcrum
