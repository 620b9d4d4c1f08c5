#include "client/server_set.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/transport/tracing_ps_transport.h"
#include "common/consistency_mode.h"
#include "common/embedding.h"
#include "common/logging.h"
#include "common/partitioner.h"
#include "common/trace.h"

namespace fulcrum {
namespace {

// A server that lost what this client created there: it restarted.
bool LostState(const absl::Status& status) {
  return status.code() == absl::StatusCode::kNotFound ||
         status.code() == absl::StatusCode::kAborted;
}

// The longest wait between retries of a server that does not answer while
// the client follows a placement table: each retry first asks the others
// whether it left.
constexpr absl::Duration kFollowingMaxBackoff = absl::Milliseconds(200);

// How long a client asks each server for the cluster's placement table
// before creating variables or tables: a server that does not answer by
// then is passed over (one not yet started has no table to give).
constexpr absl::Duration kPlacementProbe = absl::Seconds(2);

// How long a client that was told a unit moved asks the servers for the
// newer table, and how often.
constexpr absl::Duration kMovedTableWait = absl::Seconds(5);
constexpr absl::Duration kMovedTableRetry = absl::Milliseconds(20);

}  // namespace

PushStats AddPushResults(const google::protobuf::RepeatedPtrField<ShardPushResult>& results,
                         PushStats stats) {
  for (const ShardPushResult& result : results) {
    switch (result.outcome()) {
      case ShardPushResult::APPLIED:
        ++stats.applied;
        break;
      case ShardPushResult::ACCUMULATED:
        ++stats.accumulated;
        break;
      case ShardPushResult::STALE:
        ++stats.stale;
        break;
      case ShardPushResult::DUPLICATE:
        ++stats.duplicate;
        break;
      default:
        break;
    }
    stats.max_staleness = std::max(stats.max_staleness, result.staleness());
  }
  return stats;
}

ServerSet::ServerSet(std::vector<std::unique_ptr<PsTransport>> servers,
                     const PsClientOptions& options, const ClientConsistencyPolicy& policy,
                     Connect connect)
    : servers_(std::make_move_iterator(servers.begin()), std::make_move_iterator(servers.end())),
      connect_(std::move(connect)),
      options_(options),
      policy_(policy),
      fan_out_(static_cast<int>(servers.size()) - 1),
      incarnations_(servers.size(), 0),
      create_requests_(servers.size()),
      push_ids_(std::random_device()()) {
  CHECK(!servers.empty());
  absl::MutexLock lock(&servers_mu_);
  for (size_t ps = 0; ps < servers_.size(); ++ps)
    servers_[ps] = Traced(std::move(servers_[ps]), static_cast<int>(ps));
}

std::unique_ptr<PsTransport> ServerSet::Traced(std::unique_ptr<PsTransport> transport,
                                               int ps) const {
  if (options_.trace == nullptr) return transport;
  return std::make_unique<TracingPsTransport>(std::move(transport), options_.trace, ps);
}

bool ServerSet::Tracing() const { return options_.trace != nullptr && options_.trace->recording(); }

int ServerSet::size() const {
  absl::ReaderMutexLock lock(&servers_mu_);
  return static_cast<int>(servers_.size());
}

PsTransport& ServerSet::server(int ps) const {
  absl::ReaderMutexLock lock(&servers_mu_);
  return *servers_[ps];
}

int ServerSet::Add(const std::string& address) {
  if (const int known = IndexOf(address); known >= 0 || !connect_) return known;
  std::unique_ptr<PsTransport> transport = connect_(address);
  if (following_) transport->FailFast();
  incarnations_.push_back(0);
  create_requests_.emplace_back();
  absl::MutexLock lock(&servers_mu_);
  const int ps = static_cast<int>(servers_.size());
  servers_.push_back(Traced(std::move(transport), ps));
  LOG_INFO("ps {} ({}): a server that joined the cluster", ps, address);
  return ps;
}

ServerSet::~ServerSet() {
  closing_.Notify();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

uint64_t ServerSet::NewPushId() {
  uint64_t push_id = 0;
  while (push_id == 0) push_id = push_ids_();
  return push_id;
}

absl::Status ServerSet::ForEachServer(const std::vector<bool>& involved, const std::string& what,
                                      const ServerCall& call) {
  const int n = static_cast<int>(involved.size());
  std::vector<absl::Status> results(n);
  auto run = [&](int ps) {
    const absl::Time give_up = absl::Now() + options_.retry_timeout;
    absl::Duration backoff = options_.initial_backoff;
    for (int attempt = 1;; ++attempt) {
      absl::Status status = call(ps, absl::Now() + options_.call_timeout);
      // A server going away cancels its calls: as retryable as unavailable
      // (this client never cancels its own).
      const bool retryable = status.code() == absl::StatusCode::kUnavailable ||
                             status.code() == absl::StatusCode::kCancelled;
      if (!retryable || absl::Now() + backoff > give_up) {
        results[ps] = status;
        return;
      }
      if (HasLeft(ps, absl::Now() + options_.call_timeout)) {
        results[ps] = LeftError(ps);
        return;
      }
      if (attempt == 1 || attempt % 10 == 0) {
        LOG_WARN("ps {} ({}) unavailable for {}: {}; retrying for up to {}", ps, address(ps), what,
                 status.message(), absl::FormatDuration(give_up - absl::Now()));
      }
      if (closing_.WaitForNotificationWithTimeout(backoff)) {  // the backoff, unless closing
        results[ps] = status;
        return;
      }
      // Following a table, a server that does not answer may have been
      // lost for good: the table is asked again soon, so that the call
      // moves to the shards' new primaries as soon as they take over.
      backoff = std::min({backoff * 2, options_.max_backoff,
                          following_ ? kFollowingMaxBackoff : absl::InfiniteDuration()});
    }
  };
  std::vector<int> calls;
  for (int ps = 0; ps < n; ++ps) {
    if (involved[ps]) calls.push_back(ps);
  }
  ParallelFor(fan_out_, static_cast<int>(calls.size()), [&](int i) { run(calls[i]); });
  for (int ps = 0; ps < n; ++ps) {
    if (!results[ps].ok()) {
      return absl::Status(
          results[ps].code(),
          absl::StrCat("ps ", ps, " (", address(ps), "): ", what, ": ", results[ps].message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ServerSet::ForEveryServer(const std::string& what, const ServerCall& call,
                                       const std::function<void(size_t servers)>& sized) {
  constexpr int kTries = 5;
  std::vector<uint8_t> answered;  // by server, across the rounds
  for (int attempt = 1;; ++attempt) {
    const std::vector<bool> live = NotLeft();
    answered.resize(live.size());
    if (sized) sized(live.size());
    std::vector<bool> involved(live.size());
    for (size_t ps = 0; ps < live.size(); ++ps) involved[ps] = live[ps] && !answered[ps];
    absl::Status status = ForEachServer(involved, what, [&](int ps, absl::Time deadline) {
      absl::Status called = call(ps, deadline);
      if (called.ok()) answered[ps] = 1;
      return called;
    });
    if (status.ok() || NotLeft() == live || attempt == kTries) return status;
    LOG_WARN("{}; called again on the servers left", status.message());
  }
}

std::vector<bool> ServerSet::NotLeft() const {
  std::vector<bool> involved(size());
  for (size_t ps = 0; ps < involved.size(); ++ps) involved[ps] = !Left(static_cast<int>(ps));
  return involved;
}

void ServerSet::FollowPlacement() {
  if (following_.exchange(true)) return;
  // A server that cannot be reached is looked up in the table between
  // attempts, instead of being waited for through each whole attempt.
  absl::ReaderMutexLock lock(&servers_mu_);
  for (const auto& server : servers_) server->FailFast();
}

Placement ServerSet::placement() const {
  absl::MutexLock lock(&placement_mu_);
  return placement_;
}

int ServerSet::IndexOf(const std::string& address) const {
  for (int ps = 0; ps < size(); ++ps) {
    if (server(ps).address() == address) return ps;
  }
  return -1;
}

bool ServerSet::Left(int ps) const {
  const std::string own = address(ps);
  absl::MutexLock lock(&placement_mu_);
  if (placement_.epoch() == 0) return false;
  for (const PlacedServer& server : placement_.servers()) {
    if (server.address() == own) return false;
  }
  return true;
}

void ServerSet::RefreshPlacement(absl::Time deadline, int skip) {
  for (int ps = 0; ps < size(); ++ps) {
    if (ps == skip || Left(ps)) continue;
    absl::StatusOr<DescribeResponse> described = server(ps).Describe(deadline);
    if (!described.ok()) continue;
    absl::MutexLock lock(&placement_mu_);
    if (described->placement().epoch() > placement_.epoch()) {
      placement_ = described->placement();
      LOG_INFO("placement table epoch {} (from ps {}): {} server(s)", placement_.epoch(), ps,
               placement_.servers_size());
    }
    return;
  }
}

void ServerSet::FindTable() {
  RefreshPlacement(absl::Now() + kPlacementProbe);
  if (placement().epoch() > 0) FollowPlacement();
}

bool ServerSet::HasLeft(int ps, absl::Time deadline) {
  if (!following_) return false;
  if (!Left(ps)) RefreshPlacement(deadline, ps);
  return Left(ps);
}

absl::Status ServerSet::LeftError(int ps) const {
  return absl::UnavailableError(absl::StrCat("left the cluster (placement table epoch ",
                                             placement().epoch(),
                                             "): its shards are on the others now"));
}

absl::Status ServerSet::ForEachServerRecovering(const std::vector<bool>& involved,
                                                const std::string& what, const ServerCall& call,
                                                const ServerCall& after_recovery,
                                                std::vector<bool>* recovered) {
  recovered->assign(involved.size(), false);
  absl::Status status = ForEachServer(involved, what, [&](int ps, absl::Time deadline) {
    absl::Status called = call(ps, deadline);
    if (!LostState(called)) return called;
    // A server that restarted and left the table holds nothing of ours.
    if (HasLeft(ps, deadline)) return LeftError(ps);
    (*recovered)[ps] = true;
    if (absl::Status s = Recover(ps, deadline); !s.ok()) return s;
    if (following_ && !KeptItsPlace(ps)) {
      // It rejoined the table holding nothing: the call is made again by
      // the table (DenseCalls::Rerouting), the shards' copies elsewhere.
      return absl::AbortedError(absl::StrCat("restarted and rejoined the placement table (epoch ",
                                             placement().epoch(), ")"));
    }
    return after_recovery ? after_recovery(ps, deadline) : absl::OkStatus();
  });
  if (forget_) forget_(*recovered);
  return status;
}

absl::StatusOr<Placement> ServerSet::PlaceCopies(const std::vector<PlacementUnitSpec>& units) {
  if (size() == 1) return Placement();
  FindTable();
  // The servers' --replication, which they must agree on.
  absl::StatusOr<std::vector<DescribeResponse>> described = Describe();
  if (!described.ok()) return described.status();
  int first = 0;  // the first server asked
  while (Left(first)) ++first;
  const int replication = std::max(1, (*described)[first].replication());
  for (int ps = 1; ps < size(); ++ps) {
    if (Left(ps)) continue;  // not asked
    if (std::max(1, (*described)[ps].replication()) != replication) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the servers disagree on --replication: ps ", first, " (", address(first), ") has ",
          replication, ", ps ", ps, " (", address(ps), ") ", (*described)[ps].replication()));
    }
  }
  // Servers that coordinate through etcd keep a table of single copies
  // too, so that shards can move (fulcrumctl add-server, remove-server).
  const bool coordinated = std::any_of(described->begin(), described->end(),
                                       [](const DescribeResponse& d) { return d.coordinated(); });
  if (replication == 1 && !coordinated) return Placement();
  std::vector<PlacementServer> servers;
  for (int ps = 0; ps < size(); ++ps) {
    servers.push_back({address(ps), Left(ps) ? "" : (*described)[ps].zone()});
  }
  return InitialPlacement(servers, units, replication);
}

std::vector<std::pair<int, ShardCopy>> ServerSet::CopiesOf(const PlacedUnit& unit) const {
  const int primary = unit.copies(0).server();
  std::vector<std::pair<int, ShardCopy>> copies(1, {primary, ShardCopy()});
  for (int c = 1; c < unit.copies_size(); ++c) {
    const int backup = unit.copies(c).server();
    copies[0].second.add_backups(address(backup));
    copies.emplace_back(backup, ShardCopy());
    copies.back().second.set_primary(address(primary));
  }
  return copies;
}

absl::StatusOr<std::vector<uint64_t>> ServerSet::CreateEverywhere(
    std::vector<CreateShardsRequest>* requests, const Placement& table, const std::string& what) {
  std::vector<bool> involved(size());
  for (int ps = 0; ps < size(); ++ps) {
    CreateShardsRequest& request = (*requests)[ps];
    // The units of a server that left are elsewhere, as the table says.
    involved[ps] = (request.shards_size() > 0 || request.ranges_size() > 0) && !Left(ps);
    if (involved[ps] && table.units_size() > 0) *request.mutable_placement() = table;
  }
  std::vector<uint64_t> incarnations(size(), 0);
  absl::Status status = ForEachServer(involved, what, [&](int ps, absl::Time deadline) {
    auto created = CreateOn(ps, (*requests)[ps], deadline);
    if (created.ok()) {
      incarnations[ps] = created->incarnation();
      if (created->restored() > 0) {
        LOG_INFO("ps {} ({}): {} shard(s) restored from its checkpoint", ps, address(ps),
                 created->restored());
      }
    }
    return created.status();
  });
  if (!status.ok()) return status;
  if (table.units_size() > 0) {
    // Where the servers coordinate, their table has the copies now; it may
    // have moved primaries already (a server lost before this client came).
    FollowPlacement();
    RefreshPlacement(absl::Now() + options().call_timeout);
  }
  return incarnations;
}

void ServerSet::RememberCreated(std::vector<CreateShardsRequest> requests,
                                std::vector<uint64_t> incarnations) {
  // The tables created before stay in what a server is given again.
  for (size_t ps = 0; ps < requests.size() && ps < create_requests_.size(); ++ps) {
    *requests[ps].mutable_tables() = create_requests_[ps].tables();
    *requests[ps].mutable_ranges() = create_requests_[ps].ranges();
  }
  create_requests_ = std::move(requests);
  incarnations_ = std::move(incarnations);
}

void ServerSet::RememberTables(const std::vector<CreateShardsRequest>& requests,
                               const std::vector<uint64_t>& incarnations) {
  for (size_t ps = 0; ps < requests.size(); ++ps) {
    // A server that restarted since the variables were made keeps its old
    // incarnation here: the next call is ABORTED and recovers it whole.
    if (incarnations_[ps] == 0) incarnations_[ps] = incarnations[ps];
    CreateShardsRequest& remembered = create_requests_[ps];
    for (const EmbeddingTableSpec& spec : requests[ps].tables()) *remembered.add_tables() = spec;
    for (const TableRange& range : requests[ps].ranges()) *remembered.add_ranges() = range;
  }
}

bool ServerSet::PlacementMovedOn(const absl::Status& failed, int64_t routed_epoch) {
  if (failed.code() == absl::StatusCode::kFailedPrecondition && following_) {
    // A server that holds no primary of a unit any more (it moved) says
    // so: it applied a table newer than this client's, which the server
    // that answers first may not have yet. Asked again, for a while.
    const absl::Time deadline = absl::Now() + kMovedTableWait;
    while (placement().epoch() <= routed_epoch && absl::Now() < deadline) {
      RefreshPlacement(deadline);
      if (placement().epoch() <= routed_epoch) absl::SleepFor(kMovedTableRetry);
    }
  }
  return placement().epoch() > routed_epoch;
}

namespace {

// `request` cut, in order, into requests of at most about kCreatePartBytes
// of initial values (a shard at least), the tables with the first.
std::vector<CreateShardsRequest> SplitCreate(const CreateShardsRequest& request) {
  int64_t total = 0;
  for (const std::string& value : request.initial_values()) total += value.size();
  if (total <= kCreatePartBytes) return {request};
  std::vector<CreateShardsRequest> parts(1);
  *parts[0].mutable_tables() = request.tables();
  int64_t bytes = 0;
  for (int i = 0; i < request.shards_size(); ++i) {
    const int64_t size = static_cast<int64_t>(request.initial_values(i).size());
    if (parts.back().shards_size() > 0 && bytes + size > kCreatePartBytes) {
      parts.emplace_back();
      bytes = 0;
    }
    *parts.back().add_shards() = request.shards(i);
    *parts.back().add_initial_values() = request.initial_values(i);
    if (request.copies_size() > 0) *parts.back().add_copies() = request.copies(i);
    bytes += size;
  }
  // The placement table once every shard of it exists.
  *parts.back().mutable_placement() = request.placement();
  return parts;
}

}  // namespace

absl::StatusOr<CreateShardsResponse> ServerSet::CreateOn(int ps, const CreateShardsRequest& request,
                                                         absl::Time deadline) {
  const std::vector<CreateShardsRequest> parts = SplitCreate(request);
  for (int attempt = 0; attempt < 3; ++attempt) {
    CreateShardsResponse sum;
    bool one_incarnation = true;
    for (const CreateShardsRequest& part : parts) {
      auto created = server(ps).CreateShards(part, deadline);
      if (!created.ok()) return created.status();
      if (sum.incarnation() != 0 && created->incarnation() != sum.incarnation()) {
        one_incarnation = false;  // it restarted meanwhile: the parts before are gone
        break;
      }
      sum.set_incarnation(created->incarnation());
      sum.set_created(sum.created() + created->created());
      sum.set_existing(sum.existing() + created->existing());
      sum.set_restored(sum.restored() + created->restored());
      sum.set_tables_created(sum.tables_created() + created->tables_created());
      sum.set_tables_restored(sum.tables_restored() + created->tables_restored());
    }
    if (one_incarnation) return sum;
  }
  return absl::UnavailableError(
      absl::StrCat("ps ", ps, " (", address(ps), ") restarted while its variables were created"));
}

bool ServerSet::KeptItsPlace(int ps) const {
  const Placement table = placement();
  const std::string at = address(ps);
  for (const PlacedServer& server : table.servers()) {
    if (server.address() != at) continue;
    for (const PlacedUnit& unit : table.units()) {
      if (unit.copies(0).server() == server.id()) return true;
    }
  }
  return false;
}

CreateShardsRequest ServerSet::RecoveryRequest(int ps) const {
  const CreateShardsRequest& own = create_requests_[ps];
  if (!following_) return own;
  const Placement table = placement();
  const std::string at = address(ps);
  std::map<int32_t, std::string> addresses;
  for (const PlacedServer& server : table.servers()) addresses[server.id()] = server.address();
  std::set<std::string> placed;  // every unit of the table; those whose primary it is:
  std::set<std::string> primary_here;
  for (const PlacedUnit& unit : table.units()) {
    placed.insert(unit.key());
    if (addresses[unit.copies(0).server()] == at) primary_here.insert(unit.key());
  }
  CreateShardsRequest out = own;
  out.clear_shards();
  out.clear_copies();
  out.clear_initial_values();
  out.clear_placement();
  out.clear_tables();
  out.clear_ranges();
  bool values = false;
  auto add = [&](const CreateShardsRequest& from, int i) {
    *out.add_shards() = from.shards(i);
    *out.add_copies() = from.copies_size() > 0 ? from.copies(i) : ShardCopy();
    out.add_initial_values(from.initial_values_size() > 0 ? from.initial_values(i) : "");
    values = values || !out.initial_values().rbegin()->empty();
  };
  for (int i = 0; i < own.shards_size(); ++i) {
    const ShardSpec& spec = own.shards(i);
    if (placed.count(ShardKey(spec.variable().name(), spec.shard())) == 0) add(own, i);
  }
  for (const CreateShardsRequest& request : create_requests_) {
    for (int i = 0; i < request.shards_size(); ++i) {
      const ShardSpec& spec = request.shards(i);
      if (primary_here.erase(ShardKey(spec.variable().name(), spec.shard())) > 0) add(request, i);
    }
  }
  if (!values) out.clear_initial_values();
  // The same of the tables' ranges, each with its table's spec.
  std::set<std::string> specs;
  auto add_range = [&](const CreateShardsRequest& from, const TableRange& range) {
    *out.add_ranges() = range;
    for (const EmbeddingTableSpec& spec : from.tables()) {
      if (spec.name() == range.table() && specs.insert(spec.name()).second) {
        *out.add_tables() = spec;
      }
    }
  };
  for (const TableRange& range : own.ranges()) {
    if (placed.count(TableKey(range.table(), range.partition())) == 0) add_range(own, range);
  }
  for (const CreateShardsRequest& request : create_requests_) {
    for (const TableRange& range : request.ranges()) {
      if (primary_here.erase(TableKey(range.table(), range.partition())) > 0) {
        add_range(request, range);
      }
    }
  }
  return out;
}

absl::Status ServerSet::Recover(int ps, absl::Time deadline) {
  const CreateShardsRequest request = RecoveryRequest(ps);
  auto created = CreateOn(ps, request, deadline);
  if (!created.ok()) return created.status();
  incarnations_[ps] = created->incarnation();
  LOG_WARN("ps {} ({}) restarted: its {} shard(s) and {} table(s) are created again{}{}", ps,
           address(ps), request.shards_size(), request.tables_size(),
           created->restored() > 0 ? ", from its checkpoint" : "",
           following_ ? "; its copies of replicated shards are filled from their primaries" : "");
  return absl::OkStatus();
}

absl::Status ServerSet::AwaitJobStart(const std::atomic<bool>* stop) {
  if (options_.worker_id < 0 || !policy_.AwaitsEveryWorker()) return absl::OkStatus();
  absl::Time next_log = absl::Now() + absl::Seconds(2);
  while (stop == nullptr || !stop->load()) {
    auto answers = SendHeartbeat(false);
    if (!answers.ok()) return answers.status();
    std::set<int> awaited;
    int64_t remaining_ms = 0;
    for (const HeartbeatResponse& answer : *answers) {
      awaited.insert(answer.awaited_workers().begin(), answer.awaited_workers().end());
      remaining_ms = std::max(remaining_ms, answer.startup_remaining_ms());
    }
    if (awaited.empty()) return absl::OkStatus();
    if (absl::Now() >= next_log) {
      LOG_INFO(
          "waiting for worker(s) {} to start: {} steps wait for every training worker "
          "(for up to {} more, the servers' --startup_timeout_secs)",
          absl::StrJoin(awaited, ", "), ConsistencyModeName(options_.mode),
          absl::FormatDuration(absl::Milliseconds(remaining_ms)));
      next_log = absl::Now() + absl::Seconds(10);
    }
    absl::SleepFor(absl::Milliseconds(100));  // polls the servers' state
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<HeartbeatResponse>> ServerSet::SendHeartbeat(bool finished) {
  if (options_.worker_id < 0) {
    return absl::FailedPreconditionError("this client reads only (worker_id -1): it has no lease");
  }
  HeartbeatRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_finished(finished);
  // Sized each round: the training thread may add a server meanwhile.
  std::vector<HeartbeatResponse> answers;
  absl::Status status = ForEveryServer(
      "heartbeat",
      [&](int ps, absl::Time deadline) {
        return Keep(server(ps).Heartbeat(request, deadline), &answers[ps]);
      },
      [&](size_t servers) { answers.resize(servers); });
  if (!status.ok()) return status;
  return answers;
}

absl::Status ServerSet::Finish() {
  absl::Status status = SendHeartbeat(true).status();
  if (status.ok()) finished_ = true;
  return status;
}

void ServerSet::StartHeartbeats(absl::Duration interval) {
  CHECK(!heartbeat_thread_.joinable());
  heartbeat_thread_ = std::thread([this, interval] {
    while (!closing_.WaitForNotificationWithTimeout(interval) && !finished_) {
      if (absl::Status s = Heartbeat(); !s.ok() && !closing_.HasBeenNotified()) {
        LOG_WARN("heartbeat failed: {}", s.message());
      }
    }
  });
}

absl::StatusOr<std::vector<DescribeResponse>> ServerSet::Describe() {
  if (!following_ && size() > 1) FindTable();
  std::vector<DescribeResponse> responses;
  absl::Status status = ForEveryServer(
      "describe",
      [&](int ps, absl::Time deadline) {
        return Keep(server(ps).Describe(deadline), &responses[ps]);
      },
      [&](size_t servers) { responses.resize(servers); });
  if (!status.ok()) return status;
  return responses;
}

absl::StatusOr<std::vector<SaveCheckpointResponse>> ServerSet::SaveCheckpoint(int64_t step) {
  SaveCheckpointRequest request;
  request.set_step(step);
  // Each server writes the primaries its placement table places on it,
  // and names the table: files written by one table, the newest this
  // client knows (so that every server it names was asked), hold each
  // shard once. Shards that move or fail over meanwhile make the servers
  // write by different tables; then they write again, by the newest. A
  // client that did not follow the table yet (fulcrumctl) follows it once
  // the servers name one.
  constexpr int kTries = 10;
  for (int attempt = 1;; ++attempt) {
    int64_t newest = 0;
    if (following_) {
      RefreshPlacement(absl::Now() + options_.call_timeout);
      const Placement table = placement();
      newest = table.epoch();
      for (const PlacedServer& placed : table.servers()) Add(placed.address());
    }
    const std::vector<bool> involved = NotLeft();
    std::vector<SaveCheckpointResponse> responses(involved.size());
    absl::Status status = ForEachServer(involved, "checkpoint", [&](int ps, absl::Time deadline) {
      return Keep(server(ps).SaveCheckpoint(request, deadline), &responses[ps]);
    });
    if (!status.ok()) return status;
    // The files written: none by a server that left.
    std::vector<SaveCheckpointResponse> written;
    std::set<int64_t> epochs;
    for (size_t ps = 0; ps < involved.size(); ++ps) {
      if (!involved[ps] || Left(static_cast<int>(ps))) continue;
      epochs.insert(responses[ps].placement_epoch());
      written.push_back(std::move(responses[ps]));
    }
    if (epochs == std::set<int64_t>{0} || (epochs.size() == 1 && *epochs.begin() == newest)) {
      return written;
    }
    if (!following_) {  // now it knows that the servers hold a table
      FollowPlacement();
      continue;
    }
    const std::string seen = absl::StrJoin(epochs, ", ");
    if (attempt >= kTries) {
      return absl::UnavailableError(
          absl::StrCat("checkpoint ", step, ": in each of ", kTries,
                       " tries the servers wrote it by different placement tables (epochs ", seen,
                       ", the newest ", newest, "): shards kept moving; take it once they moved"));
    }
    LOG_WARN(
        "checkpoint {}: the servers wrote it by placement tables {} (the newest {}): shards "
        "moved meanwhile; writing it again",
        step, seen, newest);
    absl::SleepFor(absl::Milliseconds(100) * attempt);
  }
}

absl::Status ServerSet::JobDone(const std::string& reason) {
  return ForEveryServer("job done", [&](int ps, absl::Time deadline) {
    return server(ps).JobDone(reason, deadline);
  });
}

}  // namespace fulcrum
