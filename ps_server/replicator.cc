#include "ps_server/replicator.h"

#include <algorithm>

#include "common/logging.h"

namespace fulcrum {
namespace {

// A call carries updates up to about this many bytes of gradients.
constexpr size_t kMaxCallBytes = size_t{32} << 20;

}  // namespace

Replicator::Replicator(ReplicaLinkFactory connect, absl::Duration retry_after)
    : connect_(std::move(connect)), retry_after_(retry_after) {}

Replicator::~Replicator() {
  std::map<std::string, std::unique_ptr<Peer>> peers;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [shard, copies] : copies_) shard->ForwardUpdates(nullptr);
    peers.swap(peers_);
  }
  for (auto& [address, peer] : peers) {
    {
      absl::MutexLock lock(&peer->mu);
      peer->stopping = true;
    }
    peer->sender.join();
  }
}

Replicator::Peer* Replicator::PeerLocked(const std::string& address) {
  std::unique_ptr<Peer>& peer = peers_[address];
  if (peer == nullptr) {
    peer = std::make_unique<Peer>();
    peer->address = address;
    peer->link = connect_(address);
    peer->sender = std::thread([this, p = peer.get()] { Send(p); });
  }
  return peer.get();
}

void Replicator::Replicate(Shard* shard, const std::vector<std::string>& backups) {
  CHECK(!backups.empty());
  std::vector<Peer*> peers;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& address : backups) peers.push_back(PeerLocked(address));
    const int64_t version = shard->version();
    copies_[shard] = Copies{peers, std::vector<int64_t>(peers.size(), version)};
  }
  shard->ForwardUpdates([peers, shard](ShardUpdate update) {
    for (size_t i = 0; i + 1 < peers.size(); ++i) Enqueue(peers[i], shard, update);
    Enqueue(peers.back(), shard, std::move(update));
  });
}

void Replicator::Enqueue(Peer* peer, Shard* shard, ShardUpdate update) {
  absl::MutexLock lock(&peer->mu);
  peer->queue.emplace_back(shard, std::move(update));
}

void Replicator::Send(Peer* peer) {
  for (;;) {
    std::vector<std::pair<Shard*, ShardUpdate>> batch;
    {
      absl::MutexLock lock(&peer->mu);
      peer->mu.Await(absl::Condition(
          +[](Peer* p)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu) { return p->stopping || !p->queue.empty(); },
          peer));
      if (peer->stopping) return;
      size_t bytes = 0;
      while (!peer->queue.empty() && (batch.empty() || bytes < kMaxCallBytes)) {
        bytes += peer->queue.front().second.gradient().size();
        batch.push_back(std::move(peer->queue.front()));
        peer->queue.pop_front();
      }
    }
    ReplicateRequest request;
    for (const auto& [shard, update] : batch) *request.add_updates() = update;
    for (;;) {
      absl::StatusOr<ReplicateResponse> response = peer->link->Replicate(request);
      if (response.ok() && response->versions_size() == request.updates_size()) {
        for (int i = 0; i < request.updates_size(); ++i) {
          Acked(batch[i].first, peer, response->versions(i));
        }
        break;
      }
      LOG_WARN(
          "replicating {} update(s) to {}: {}; trying again in {}", request.updates_size(),
          peer->address,
          response.ok() ? "an answer for another number of updates" : response.status().ToString(),
          absl::FormatDuration(retry_after_));
      absl::MutexLock lock(&peer->mu);
      if (peer->mu.AwaitWithTimeout(
              absl::Condition(
                  +[](Peer* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu) { return p->stopping; }, peer),
              retry_after_)) {
        return;
      }
    }
  }
}

void Replicator::Acked(Shard* shard, const Peer* peer, int64_t version) {
  int64_t committed = 0;
  {
    absl::MutexLock lock(&mu_);
    Copies& copies = copies_.at(shard);
    for (size_t i = 0; i < copies.peers.size(); ++i) {
      if (copies.peers[i] == peer) copies.acked[i] = std::max(copies.acked[i], version);
    }
    committed = *std::min_element(copies.acked.begin(), copies.acked.end());
  }
  shard->Committed(committed);
}

}  // namespace fulcrum
