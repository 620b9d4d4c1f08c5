#include "ps_server/replicator.h"

#include <algorithm>
#include <set>

#include "common/logging.h"

namespace fulcrum {

Replicator::Replicator(std::string own_address, ReplicaLinkFactory connect,
                       CaughtUpCallback caught_up, ReplicatorOptions options)
    : own_address_(std::move(own_address)),
      connect_(std::move(connect)),
      caught_up_(std::move(caught_up)),
      options_(options) {}

Replicator::~Replicator() {
  std::map<std::string, std::unique_ptr<Peer>> peers;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [unit, copies] : copies_) unit->ForwardUpdates({});
    peers.swap(peers_);
  }
  for (auto& [address, peer] : peers) Stop(*peer);
}

void Replicator::Stop(Peer& peer) {
  {
    absl::MutexLock lock(&peer.mu);
    peer.stopping = true;
    if (peer.stream != nullptr) peer.stream->Cancel();  // a Write held up by the backup
  }
  peer.sender.join();
}

void Replicator::DropUnusedPeers() {
  std::vector<std::unique_ptr<Peer>> unused;
  {
    absl::MutexLock lock(&mu_);
    std::set<const Peer*> used;
    for (const auto& [unit, copies] : copies_) {
      for (const Copy& copy : copies) used.insert(copy.peer);
    }
    for (auto it = peers_.begin(); it != peers_.end();) {
      if (used.count(it->second.get()) > 0) {
        ++it;
        continue;
      }
      LOG_INFO("replicating to {}: no unit's backup is there any more; stopped",
               it->second->address);
      unused.push_back(std::move(it->second));
      it = peers_.erase(it);
    }
  }
  for (const auto& peer : unused) Stop(*peer);
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

void Replicator::Replicate(ReplicatedUnit* unit, const std::vector<std::string>& backups,
                           const std::vector<std::string>& catching_up, bool fill) {
  if (backups.empty() && catching_up.empty()) {
    std::vector<Peer*> dropped;
    {
      absl::MutexLock lock(&mu_);
      const auto found = copies_.find(unit);
      if (found != copies_.end()) {
        for (const Copy& copy : found->second) dropped.push_back(copy.peer);
        copies_.erase(found);
      }
    }
    for (Peer* peer : dropped) Unqueue(peer, unit);
    unit->ForwardUpdates({});  // commits what it has, if still a primary
    DropUnusedPeers();
    return;
  }
  // Every copy's server, and the snapshot it takes first (null: none).
  std::vector<std::pair<Peer*, std::shared_ptr<Filling>>> targets;
  std::vector<std::pair<Peer*, Queued>> snapshots;  // to queue, of the copies new here
  std::vector<Peer*> dropped;                       // copies it had that it no longer has
  bool waited_for = !backups.empty();
  int64_t committed = 0;
  {
    absl::MutexLock lock(&mu_);
    const int64_t version = unit->version();
    const auto before = copies_.find(unit);
    Copies next;
    auto add = [&](const std::string& address, bool catching) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      Copy copy;
      copy.peer = PeerLocked(address);
      copy.catching_up = catching;
      const Copy* kept = nullptr;
      if (before != copies_.end()) {
        // A ready copy now catching up is another: its server came back.
        for (const Copy& old : before->second) {
          if (old.peer == copy.peer && (old.catching_up || !catching)) kept = &old;
        }
      }
      if (kept != nullptr) {
        copy.acked = kept->acked;
        copy.filling = kept->filling;
        copy.waited = kept->waited;
        waited_for = waited_for || copy.waited;
      } else if (fill || catching) {
        copy.acked = -1;
        copy.filling = std::make_shared<Filling>();
        snapshots.emplace_back(copy.peer, Queued{unit, ShardUpdate(), catching, copy.filling});
      } else {
        copy.acked = version;  // created alike
      }
      targets.emplace_back(copy.peer, copy.filling);
      next.push_back(std::move(copy));
    };
    for (const std::string& address : backups) add(address, false);
    for (const std::string& address : catching_up) add(address, true);
    if (before != copies_.end()) {
      for (const Copy& old : before->second) {
        if (std::none_of(targets.begin(), targets.end(),
                         [&](const auto& target) { return target.first == old.peer; }))
          dropped.push_back(old.peer);
      }
    }
    committed = CommittedOf(next, version);
    copies_[unit] = std::move(next);
  }
  for (Peer* peer : dropped) Unqueue(peer, unit);
  ReplicatedUnit::Forwarding forwarding;
  forwarding.forward = [targets = std::move(targets), unit](ShardUpdate update) {
    // Under the unit's lock, as the snapshots are taken: a copy whose
    // snapshot is not taken yet will have this update in it.
    std::vector<Peer*> to;
    for (const auto& [peer, filling] : targets) {
      if (filling == nullptr || filling->taken) to.push_back(peer);
    }
    for (size_t i = 0; i + 1 < to.size(); ++i) Enqueue(to[i], {unit, update, false, nullptr});
    if (!to.empty()) Enqueue(to.back(), {unit, std::move(update), false, nullptr});
  };
  forwarding.commits_wait = waited_for;
  unit->ForwardUpdates(std::move(forwarding));
  for (auto& [peer, snapshot] : snapshots) Enqueue(peer, std::move(snapshot));
  unit->Committed(committed);  // a backup that went may have held it back
  DropUnusedPeers();
}

int64_t Replicator::CommittedOf(const Copies& copies, int64_t version) {
  for (const Copy& copy : copies) {
    if (!copy.catching_up || copy.waited) version = std::min(version, copy.acked);
  }
  return version;
}

std::vector<std::string> Replicator::AddressesOf(const ReplicatedUnit* unit, bool catching_up) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  const auto found = copies_.find(const_cast<ReplicatedUnit*>(unit));
  if (found == copies_.end()) return out;
  for (const Copy& copy : found->second) {
    if (copy.catching_up == catching_up) out.push_back(copy.peer->address);
  }
  return out;
}

std::vector<std::string> Replicator::BackupsOf(const ReplicatedUnit* unit) {
  return AddressesOf(unit, false);
}

std::vector<std::string> Replicator::CatchingUpOf(const ReplicatedUnit* unit) {
  return AddressesOf(unit, true);
}

void Replicator::Enqueue(Peer* peer, Queued queued) {
  absl::MutexLock lock(&peer->mu);
  peer->queue.push_back(std::move(queued));
  ++peer->queued;
}

void Replicator::TakeSnapshot(Peer* peer, const Queued& queued) {
  queued.unit->Snapshot(ReplicatedUnit::kSnapshotPartBytes, [&](std::vector<ShardUpdate> parts) {
    queued.filling->at = parts.front().version();
    queued.filling->taken = true;
    absl::MutexLock lock(&peer->mu);
    if (peer->taking_dropped) return;
    for (auto part = parts.rbegin(); part != parts.rend(); ++part) {
      peer->queue.push_front({queued.unit, std::move(*part), queued.paced, nullptr});
    }
    peer->queued += parts.size();
  });
  absl::MutexLock lock(&peer->mu);
  peer->taking = nullptr;
  peer->taking_dropped = false;
}

Replicator::Batch Replicator::TakeBatchLocked(Peer* peer, Queued* snapshot) {
  Batch batch;
  auto made = std::make_shared<ReplicateRequest>();
  made->set_primary(own_address_);
  size_t bytes = 0;
  std::set<const ReplicatedUnit*> held;  // a part of theirs waits: their updates after it too
  const absl::Time now = absl::Now();
  for (auto it = peer->queue.begin();
       it != peer->queue.end() && (batch.units.empty() || bytes < kMaxCallBytes);) {
    const size_t size = UpdateBytes(it->update);
    if (held.count(it->unit) == 0 && it->paced && options_.catch_up_bytes_per_sec > 0) {
      absl::MutexLock lock(&pace_mu_);
      if (paced_until_ > now) {
        held.insert(it->unit);
      } else if (it->filling == nullptr) {
        paced_until_ = now + absl::Seconds(static_cast<double>(size) /
                                           static_cast<double>(options_.catch_up_bytes_per_sec));
      }
    }
    if (held.count(it->unit) > 0) {
      ++it;
      continue;
    }
    if (it->filling != nullptr) {  // a snapshot to take, once what goes before it is sent
      if (batch.units.empty()) {
        *snapshot = std::move(*it);
        peer->queue.erase(it);
        peer->taking = snapshot->unit;
      }
      break;
    }
    bytes += size;
    batch.units.push_back(it->unit);
    *made->add_updates() = std::move(it->update);
    it = peer->queue.erase(it);
  }
  batch.request = std::move(made);
  return batch;
}

void Replicator::DropUnqueued(Batch& batch) {
  if (std::find(batch.units.begin(), batch.units.end(), nullptr) == batch.units.end()) return;
  auto kept = std::make_shared<ReplicateRequest>();
  kept->set_primary(batch.request->primary());
  std::vector<ReplicatedUnit*> units;
  for (size_t i = 0; i < batch.units.size(); ++i) {
    if (batch.units[i] == nullptr) continue;
    units.push_back(batch.units[i]);
    *kept->add_updates() = batch.request->updates(static_cast<int>(i));
  }
  batch.units = std::move(units);
  batch.request = std::move(kept);
}

void Replicator::Send(Peer* peer) {
  for (;;) {
    std::unique_ptr<ReplicaStream> stream = peer->link->Open();
    {
      absl::MutexLock lock(&peer->mu);
      if (peer->stopping) {
        stream->Cancel();
        stream->Finish().IgnoreError();
        return;
      }
      peer->broken = false;
      peer->stream = stream.get();
    }
    std::thread receiver([this, peer, s = stream.get()] { Receive(peer, s); });
    SendOn(peer, stream.get());
    stream->Cancel();
    receiver.join();
    const absl::Status ended = stream->Finish();
    absl::MutexLock lock(&peer->mu);
    peer->stream = nullptr;
    if (peer->stopping) return;
    LOG_WARN("replicating to {}: {}; {} call(s) unanswered, sent again in {}", peer->address,
             ended.ok() ? "the stream ended" : ended.ToString(), peer->in_flight.size(),
             absl::FormatDuration(options_.retry_after));
    if (peer->mu.AwaitWithTimeout(
            absl::Condition(
                +[](Peer* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu) { return p->stopping; }, peer),
            options_.retry_after)) {
      return;
    }
  }
}

void Replicator::SendOn(Peer* peer, ReplicaStream* stream) {
  // What the last stream left unanswered goes first, in its order: a
  // backup takes what it has applied already as a no-op.
  std::vector<std::shared_ptr<const ReplicateRequest>> again;
  {
    absl::MutexLock lock(&peer->mu);
    for (Batch& batch : peer->in_flight) {
      DropUnqueued(batch);
      again.push_back(batch.request);
    }
  }
  for (const auto& request : again) {
    if (!stream->Write(*request)) return;
  }
  // When all the queue holds waits for the rate: the count of updates
  // queued then, and when the rate allows the next part.
  constexpr uint64_t kNone = ~uint64_t{0};
  uint64_t waiting_at = kNone;
  absl::Time wake = absl::InfiniteFuture();
  for (;;) {
    std::shared_ptr<const ReplicateRequest> request;
    {
      absl::ReleasableMutexLock lock(&peer->mu);
      auto ready = [peer, this, waiting_at]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(peer->mu) {
        return peer->stopping || peer->broken ||
               (!peer->queue.empty() &&
                static_cast<int>(peer->in_flight.size()) < options_.window &&
                peer->queued != waiting_at);
      };
      peer->mu.AwaitWithDeadline(absl::Condition(&ready), wake);
      if (peer->stopping || peer->broken) return;
      waiting_at = kNone;
      wake = absl::InfiniteFuture();
      if (peer->queue.empty() || static_cast<int>(peer->in_flight.size()) >= options_.window) {
        continue;
      }
      Queued snapshot{nullptr, ShardUpdate(), false, nullptr};
      Batch batch = TakeBatchLocked(peer, &snapshot);
      if (snapshot.unit != nullptr) {
        // Out of the peer's lock, which the unit's forwarding takes under
        // the unit's.
        lock.Release();
        TakeSnapshot(peer, snapshot);
        continue;
      }
      if (batch.units.empty()) {
        waiting_at = peer->queued;
        absl::MutexLock pacing(&pace_mu_);
        wake = paced_until_;
        continue;
      }
      request = batch.request;
      peer->in_flight.push_back(std::move(batch));
    }
    if (!stream->Write(*request)) return;
  }
}

void Replicator::Receive(Peer* peer, ReplicaStream* stream) {
  ReplicateResponse response;
  while (stream->Read(&response)) {
    Batch batch;
    {
      absl::MutexLock lock(&peer->mu);
      if (peer->in_flight.empty()) break;  // an answer to no call: start again
      batch = std::move(peer->in_flight.front());
      peer->in_flight.pop_front();
      if (response.versions_size() != static_cast<int>(batch.units.size())) {
        LOG_WARN("replicating to {}: {} version(s) answered for {} update(s)", peer->address,
                 response.versions_size(), batch.units.size());
        peer->in_flight.push_front(std::move(batch));
        break;
      }
    }
    for (size_t i = 0; i < batch.units.size(); ++i) {
      if (batch.units[i] == nullptr) continue;  // its copy there went meanwhile
      Acked(batch.units[i], peer, response.versions(static_cast<int>(i)));
    }
  }
  absl::MutexLock lock(&peer->mu);
  peer->broken = true;
}

void Replicator::Acked(ReplicatedUnit* unit, const Peer* peer, int64_t version) {
  int64_t committed = 0;
  bool filled = false;  // a catching-up copy has its snapshot: it is waited for from now on
  bool caught_up = false;
  {
    absl::MutexLock lock(&mu_);
    const auto found = copies_.find(unit);
    if (found == copies_.end()) return;  // no longer replicated
    for (Copy& copy : found->second) {
      if (copy.peer != peer) continue;
      copy.acked = std::max(copy.acked, version);
      if (copy.catching_up && copy.filling != nullptr) {
        const int64_t at = copy.filling->at;
        filled = !copy.waited && at >= 0 && version >= at;
        caught_up = copy.waited && at >= 0 && version >= at;
        if (caught_up) copy.filling->at = -1;  // reported once
      }
    }
    committed = CommittedOf(found->second, unit->version());
  }
  unit->Committed(committed);
  if (filled) {
    // From here every version the unit makes waits for the copy, and it
    // is reported once it has every version acknowledged before: so a copy
    // that takes this one's place (a move) lacks no acknowledged push.
    unit->WaitForCommits();
    absl::MutexLock lock(&mu_);
    const auto found = copies_.find(unit);
    if (found == copies_.end()) return;
    for (Copy& copy : found->second) {
      if (copy.peer != peer || !copy.catching_up || copy.waited || copy.filling == nullptr)
        continue;
      copy.waited = true;
      const int64_t at = unit->version();  // >= any version committed without it
      caught_up = copy.acked >= at;
      copy.filling->at = caught_up ? -1 : at;
    }
  }
  if (caught_up && caught_up_) caught_up_(unit, peer->address);
}

void Replicator::Unqueue(Peer* peer, const ReplicatedUnit* unit) {
  absl::MutexLock lock(&peer->mu);
  peer->queue.erase(std::remove_if(peer->queue.begin(), peer->queue.end(),
                                   [unit](const Queued& q) { return q.unit == unit; }),
                    peer->queue.end());
  if (peer->taking == unit) {
    peer->taking_dropped = true;
    auto taken = [peer, unit]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(peer->mu) { return peer->taking != unit; };
    peer->mu.Await(absl::Condition(&taken));
  }
  for (Batch& batch : peer->in_flight) {
    std::replace(batch.units.begin(), batch.units.end(), const_cast<ReplicatedUnit*>(unit),
                 static_cast<ReplicatedUnit*>(nullptr));
  }
}

}  // namespace fulcrum
