// A primary's side of replicated units (variables' shards, ranges of
// tables' ids: ReplicatedUnit): it sends the updates its units
// apply to the servers holding their backups, each server's in the order
// they were made, and marks a version committed on its unit (so that
// pushes that made it are answered, and pulls waiting for it served) once
// every backup has applied it. One stream per backup server, with up to a
// window of calls in flight on it, each carrying what queued meanwhile;
// a broken stream is opened again and what it had not answered is sent
// again (a backup takes an update it has already applied as a no-op).
// A copy that may differ from the primary (new to it, or catching up) is
// first sent the unit's snapshot, taken only when its sender comes to it
// (so the primary holds the snapshots being sent, not those of every copy
// waiting, and queues no update of the unit for the copy until then: the
// snapshot has them); one catching up holds back no commit
// until it has the snapshot, then every commit, and is reported caught up
// once it has every version acknowledged before: so a copy that takes
// another's place (a move) lacks no acknowledged push. A copy that goes
// is sent nothing more of its unit. The snapshots of copies that
// catch up go at a bounded rate, which the updates of other units
// overtake (those of the same unit wait behind them). Thread-safe.
#ifndef FULCRUM_PS_SERVER_REPLICATOR_H_
#define FULCRUM_PS_SERVER_REPLICATOR_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/ps_service.pb.h"
#include "ps_server/replicated_unit.h"

namespace fulcrum {

// A stream of Replicate calls to one backup server: answers come in the
// order of the calls. Write and Read may be called from two threads.
class ReplicaStream {
 public:
  virtual ~ReplicaStream() = default;
  // False once the stream is broken.
  virtual bool Write(const ReplicateRequest& request) = 0;
  // The next answer; false once the stream is broken or cancelled.
  virtual bool Read(ReplicateResponse* response) = 0;
  // Ends the stream: a Read waiting returns false.
  virtual void Cancel() = 0;
  // Why it ended, after Read returned false.
  virtual absl::Status Finish() = 0;
};

// The way to one backup server; the gRPC one is in grpc/.
class ReplicaLink {
 public:
  virtual ~ReplicaLink() = default;
  virtual std::unique_ptr<ReplicaStream> Open() = 0;
};

// Opens the link to the server at `address`.
using ReplicaLinkFactory = std::function<std::unique_ptr<ReplicaLink>(const std::string& address)>;

// How a Replicator sends: `window`: calls in flight on a stream;
// `retry_after`: how long a sender waits before opening a broken stream
// again; `catch_up_bytes_per_sec`: the rate of the snapshots sent to copies
// that catch up, to all servers together (0: unbounded).
struct ReplicatorOptions {
  int window = 4;
  absl::Duration retry_after = absl::Seconds(1);
  int64_t catch_up_bytes_per_sec = 0;
};

class Replicator {
 public:
  // A call carries updates (gradients, snapshot parts) up to about this
  // many bytes: it goes past it by one update at most.
  static constexpr size_t kMaxCallBytes = size_t{32} << 20;

  // `own_address`: this server's, which its calls carry (a backup takes
  // updates only from its primary). `caught_up` is told, from a thread of the replicator's, of each
  // catching-up copy (its unit, its server's address) once it has applied the snapshot; it must
  // not call back into the replicator.
  using CaughtUpCallback = std::function<void(ReplicatedUnit* unit, const std::string& address)>;
  Replicator(std::string own_address, ReplicaLinkFactory connect, CaughtUpCallback caught_up = {},
             ReplicatorOptions options = {});
  // Stops the senders (what they had not sent is dropped) and the units'
  // forwarding to them.
  ~Replicator();

  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // From now on `unit`'s updates go to `backups` and `catching_up`
  // (addresses), and its versions are committed as all of `backups` apply
  // them: a copy it had before keeps the versions it answered; a new one
  // first takes the unit's snapshot when `fill` or catching up (else it
  // starts at the unit's version: created alike, it holds the same
  // state). With no backups each version is committed as it is made (what
  // the backups that went held back too).
  void Replicate(ReplicatedUnit* unit, const std::vector<std::string>& backups,
                 const std::vector<std::string>& catching_up = {}, bool fill = false)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The addresses `unit`'s updates go to and its commits wait for; none
  // when it is not replicated.
  std::vector<std::string> BackupsOf(const ReplicatedUnit* unit) ABSL_LOCKS_EXCLUDED(mu_);
  // Those its updates go to that are catching up.
  std::vector<std::string> CatchingUpOf(const ReplicatedUnit* unit) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One call's updates, and the unit of each.
  struct Batch {
    std::vector<ReplicatedUnit*> units;  // null: dropped (Unqueue)
    // Shared with the Write that sends it, so that it is never copied.
    std::shared_ptr<const ReplicateRequest> request;
  };
  // A copy's snapshot: when it was taken, and its version.
  struct Filling {
    // Set, under the unit's lock, once the sender took it: the unit's
    // updates are queued for the copy from then on.
    std::atomic<bool> taken{false};
    // Its version once taken; -1 before, and once the copy is reported
    // caught up.
    std::atomic<int64_t> at{-1};
  };
  // An update queued for a server, or the snapshot to take there when the
  // sender comes to it (`filling` set, `update` empty); `paced`: of a copy
  // that catches up, so sent at the rate.
  struct Queued {
    ReplicatedUnit* unit;
    ShardUpdate update;
    bool paced;
    std::shared_ptr<Filling> filling;
  };
  struct Peer {
    std::string address;
    std::unique_ptr<ReplicaLink> link;
    absl::Mutex mu;
    std::deque<Queued> queue ABSL_GUARDED_BY(mu);
    uint64_t queued ABSL_GUARDED_BY(mu) = 0;  // updates ever queued
    // Sent on the stream and not answered yet, oldest first.
    std::deque<Batch> in_flight ABSL_GUARDED_BY(mu);
    bool broken ABSL_GUARDED_BY(mu) = false;  // the stream's reader saw it end
    bool stopping ABSL_GUARDED_BY(mu) = false;
    ReplicaStream* stream ABSL_GUARDED_BY(mu) = nullptr;  // the open one
    // The unit whose snapshot the sender is taking (null: none), and
    // whether its copy went meanwhile (its parts are dropped).
    const ReplicatedUnit* taking ABSL_GUARDED_BY(mu) = nullptr;
    bool taking_dropped ABSL_GUARDED_BY(mu) = false;
    std::thread sender;
  };
  // One copy of a replicated unit: its server and the version it has.
  struct Copy {
    Peer* peer = nullptr;
    int64_t acked = 0;  // -1: it is taking a snapshot
    bool catching_up = false;
    // A catching-up copy that has its snapshot: the unit's commits wait
    // for it too, before it is reported caught up.
    bool waited = false;
    // Of the snapshot it is sent; null: none.
    std::shared_ptr<Filling> filling;
  };
  // Per replicated unit: its copies, the ready ones first.
  using Copies = std::vector<Copy>;
  // The least version the ready copies have (the unit's `version` when
  // there are none).
  static int64_t CommittedOf(const Copies& copies, int64_t version);
  std::vector<std::string> AddressesOf(const ReplicatedUnit* unit, bool catching_up)
      ABSL_LOCKS_EXCLUDED(mu_);

  Peer* PeerLocked(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops `peer`'s sender (what it had not sent is dropped).
  static void Stop(Peer& peer);
  // Stops the senders to servers that hold no unit's backup any more (the
  // table dropped them), which would otherwise call a lost server for ever.
  void DropUnusedPeers() ABSL_LOCKS_EXCLUDED(mu_);
  static void Enqueue(Peer* peer, Queued queued);
  // `unit`'s copy on `peer` went: what is queued for it there is dropped,
  // and what is in flight is not sent again (its entries in the batches
  // become null: the server may refuse them now). Waits while the sender
  // takes the unit's snapshot, so that the unit may go once it returns.
  static void Unqueue(Peer* peer, const ReplicatedUnit* unit);
  // The sender takes the snapshot `queued` stands for: its parts go first
  // in the queue.
  static void TakeSnapshot(Peer* peer, const Queued& queued);
  // `batch` without the updates Unqueue dropped.
  static void DropUnqueued(Batch& batch);
  // The next call to `peer`: what its queue holds, in order, up to about
  // kMaxCallBytes, but for paced parts the rate does not allow yet, and the
  // updates of their units after them. It ends before a snapshot to take;
  // when that comes first it is taken out of the queue into *snapshot
  // (peer->taking set) and the batch is empty. Empty when nothing may go
  // now.
  Batch TakeBatchLocked(Peer* peer, Queued* snapshot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(peer->mu);
  // The sender's loop: opens the stream, sends again what it had in flight,
  // then what queues, in order, until stopped.
  void Send(Peer* peer);
  // Over one open stream, until it breaks or the replicator stops.
  void SendOn(Peer* peer, ReplicaStream* stream);
  // The stream's answers, each for the oldest batch in flight.
  void Receive(Peer* peer, ReplicaStream* stream);
  // `peer` has `unit` at `version`: commits what every backup has.
  void Acked(ReplicatedUnit* unit, const Peer* peer, int64_t version) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string own_address_;
  const ReplicaLinkFactory connect_;
  const CaughtUpCallback caught_up_;
  const ReplicatorOptions options_;
  // Paced parts go once this time has come; each moves it on by its bytes
  // at the rate.
  absl::Mutex pace_mu_;  // taken under a peer's mu
  absl::Time paced_until_ ABSL_GUARDED_BY(pace_mu_) = absl::InfinitePast();
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Peer>> peers_ ABSL_GUARDED_BY(mu_);
  std::map<ReplicatedUnit*, Copies> copies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_REPLICATOR_H_
