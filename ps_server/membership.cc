#include "ps_server/membership.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/placement.h"

namespace fulcrum {
namespace {

// How long the watcher waits before listing again after etcd failed it.
constexpr absl::Duration kWatchRetry = absl::Seconds(1);

}  // namespace

Membership::Membership(std::unique_ptr<Etcd> etcd, Options options, TableCallback on_table)
    : etcd_(std::move(etcd)), options_(std::move(options)), on_table_(std::move(on_table)) {}

absl::StatusOr<std::unique_ptr<Membership>> Membership::Join(std::unique_ptr<Etcd> etcd,
                                                             Options options,
                                                             TableCallback on_table) {
  std::unique_ptr<Membership> membership(
      new Membership(std::move(etcd), std::move(options), std::move(on_table)));
  if (absl::Status s = membership->Register(); !s.ok()) return s;
  membership->renewer_ = std::thread([m = membership.get()] { m->Renew(); });
  membership->watcher_ = std::thread([m = membership.get()] { m->Watch(); });
  membership->marker_ = std::thread([m = membership.get()] { m->MarkCaughtUp(); });
  return membership;
}

Membership::~Membership() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (renewer_.joinable()) renewer_.join();
  if (watcher_.joinable()) watcher_.join();
  if (marker_.joinable()) marker_.join();
}

std::string Membership::ServerKey(const std::string& address) const {
  return absl::StrCat(options_.prefix, "servers/", address);
}

std::string Membership::TableKey() const { return absl::StrCat(options_.prefix, "placement"); }

absl::Status Membership::Register() {
  const absl::Time asked = absl::Now();
  absl::StatusOr<int64_t> lease = etcd_->GrantLease(options_.ttl);
  if (!lease.ok()) return lease.status();
  absl::StatusOr<int64_t> put = etcd_->Put(ServerKey(options_.address), "", *lease);
  if (!put.ok()) return put.status();
  {
    absl::MutexLock lock(&mu_);
    lease_ = *lease;
    serving_until_ = asked + options_.ttl;
  }
  JoinTable();
  return absl::OkStatus();
}

void Membership::JoinTable() {
  {
    absl::MutexLock lock(&mu_);
    if (drained_) return;  // it left for good
  }
  absl::Status status = ChangeTable([&](const Placement& current) -> absl::StatusOr<Placement> {
    if (current.servers().empty()) return current;  // the chief's first table makes it
    // What the table says this address holds is gone with its last
    // process (or is stale, its lease having run out): out with it, in
    // again as a new server, which takes the copies the table then lacks.
    Placement next = current;
    for (const PlacedServer& server : current.servers()) {
      if (server.address() != options_.address) continue;
      absl::StatusOr<Placement> without = WithoutServer(current, server.id());
      if (without.status().code() == absl::StatusCode::kDataLoss) {
        // Its copies are the only ones (--replication=1): it keeps its
        // place, and its clients create its shards again, from the
        // checkpoint, as they do for a restarted unreplicated server.
        LOG_INFO("rejoining the placement table at its place: {}", without.status().message());
        return current;
      }
      if (!without.ok()) return without.status();
      next = *std::move(without);
    }
    absl::StatusOr<Placement> with =
        WithServer(next, {options_.address, options_.zone}, /*balance=*/false);
    if (!with.ok()) return with.status();
    return Repaired(*with);
  });
  if (status.ok()) return;
  LOG_ERROR("joining the placement table as server {}: {}", options_.address, status.ToString());
}

absl::Status Membership::ChangeTable(
    const std::function<absl::StatusOr<Placement>(const Placement&)>& change, Placement* written) {
  for (;;) {
    Placement current;
    int64_t revision = 0;  // 0: no table yet
    absl::StatusOr<EtcdValue> got = etcd_->Get(TableKey());
    if (got.ok()) {
      if (!current.ParseFromString(got->value)) {
        return absl::DataLossError(
            absl::StrCat("etcd's ", TableKey(), " is not a placement table"));
      }
      revision = got->mod_revision;
    } else if (got.status().code() != absl::StatusCode::kNotFound) {
      return got.status();
    }
    absl::StatusOr<Placement> next = change(current);
    if (!next.ok()) return next.status();
    if (written != nullptr) *written = *next;
    if (next->epoch() == current.epoch()) return absl::OkStatus();  // nothing to change
    absl::StatusOr<int64_t> put =
        etcd_->CompareAndPut(TableKey(), next->SerializeAsString(), revision);
    if (put.ok()) {
      Seen(*next);
      return absl::OkStatus();
    }
    // FAILED_PRECONDITION: another server changed it first; read it again.
    if (put.status().code() != absl::StatusCode::kFailedPrecondition) return put.status();
  }
}

absl::Status Membership::AddUnits(const Placement& table) {
  return ChangeTable([&](const Placement& current) { return WithUnits(current, table); });
}

absl::StatusOr<Placement> Membership::Rebalance(bool drain) {
  Placement written;
  absl::Status status = ChangeTable(
      [&](const Placement& current) -> absl::StatusOr<Placement> {
        for (const PlacedServer& server : current.servers()) {
          if (server.address() != options_.address) continue;
          if (server.draining() && !drain) {
            return absl::FailedPreconditionError(
                absl::StrCat("server ", options_.address, " is being drained"));
          }
          return drain ? Draining(current, server.id()) : Balanced(current, server.id());
        }
        return absl::FailedPreconditionError(
            absl::StrCat("server ", options_.address, " is not in the placement table (epoch ",
                         current.epoch(), "): ",
                         current.servers().empty() ? "no replicated shard has been created yet"
                                                   : "it has left, or not joined yet"));
      },
      &written);
  if (!status.ok()) return status;
  if (drain) {
    absl::MutexLock lock(&mu_);
    drained_ = true;
  }
  return written;
}

void Membership::Remove(const std::string& address) {
  absl::Status status = ChangeTable([&](const Placement& current) -> absl::StatusOr<Placement> {
    for (const PlacedServer& server : current.servers()) {
      if (server.address() != address) continue;
      absl::StatusOr<Placement> without = WithoutServer(current, server.id());
      if (!without.ok()) return without.status();
      return Repaired(*without);
    }
    return current;  // not in it (any more)
  });
  if (status.code() == absl::StatusCode::kDataLoss) {
    LOG_WARN("server {} keeps its place in the placement table until it restarts: {}", address,
             status.message());
    return;
  }
  if (status.ok()) return;
  LOG_ERROR("taking server {} out of the placement table: {}", address, status.ToString());
}

void Membership::Seen(const Placement& table) {
  {
    absl::MutexLock lock(&mu_);
    if (table.epoch() <= table_.epoch()) return;
    table_ = table;
  }
  on_table_(table);
}

Placement Membership::table() const {
  absl::MutexLock lock(&mu_);
  return table_;
}

absl::Status Membership::CheckServing() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (now < serving_until_) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "this server's lease in etcd ran out ", absl::FormatDuration(now - serving_until_),
      " ago: it takes no writes, since another server may hold its shards now"));
}

void Membership::CaughtUp(const std::string& key, const std::string& address) {
  absl::MutexLock lock(&mu_);
  caught_up_.emplace_back(key, address);
}

void Membership::MarkCaughtUp() {
  for (;;) {
    std::pair<std::string, std::string> copy;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Membership* m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m->mu_) {
            return m->stopping_ || !m->caught_up_.empty();
          },
          this));
      if (stopping_) return;
      copy = caught_up_.front();
    }
    const std::string& key = copy.first;
    const std::string& address = copy.second;
    absl::Status status = ChangeTable([&](const Placement& current) -> absl::StatusOr<Placement> {
      for (const PlacedServer& server : current.servers()) {
        if (server.address() == address) return fulcrum::CaughtUp(current, key, server.id());
      }
      return absl::NotFoundError(absl::StrCat("server ", address, " is not in the table"));
    });
    if (status.code() == absl::StatusCode::kUnavailable) {
      LOG_WARN("marking the copy of {} on {} ready: {}; trying again", key, address,
               status.ToString());
      Stopping(kWatchRetry);
      continue;
    }
    if (status.ok()) {
      LOG_INFO("the copy of {} on {} is ready", key, address);
    } else {
      // The table changed meanwhile (that copy went, or is ready already).
      LOG_INFO("the copy of {} on {} is not marked ready: {}", key, address, status.ToString());
    }
    absl::MutexLock lock(&mu_);
    caught_up_.pop_front();
  }
}

bool Membership::Stopping(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), timeout);
  return stopping_;
}

void Membership::Renew() {
  while (!Stopping(options_.ttl / 3)) {
    int64_t lease = 0;
    {
      absl::MutexLock lock(&mu_);
      lease = lease_;
    }
    const absl::Time asked = absl::Now();
    absl::StatusOr<absl::Duration> left = etcd_->KeepAlive(lease);
    if (left.ok()) {
      absl::MutexLock lock(&mu_);
      serving_until_ = asked + *left;
      continue;
    }
    if (left.status().code() != absl::StatusCode::kNotFound) {
      LOG_WARN("renewing this server's lease in etcd: {}", left.status().ToString());
      continue;
    }
    LOG_ERROR(
        "this server's lease in etcd ran out: the others took its shards; it joins again, "
        "holding none");
    if (absl::Status s = Register(); !s.ok()) {
      LOG_WARN("joining again: {}", s.ToString());
    }
  }
}

void Membership::Watch() {
  const std::string servers = absl::StrCat(options_.prefix, "servers/");
  while (!Stopping(absl::ZeroDuration())) {
    absl::StatusOr<EtcdListing> listing = etcd_->List(options_.prefix);
    if (!listing.ok()) {
      LOG_WARN("reading the job's keys in etcd: {}", listing.status().ToString());
      Stopping(kWatchRetry);
      continue;
    }
    Placement table;
    std::set<std::string> alive;
    for (const EtcdValue& value : listing->values) {
      if (value.key == TableKey()) {
        if (!table.ParseFromString(value.value)) table.Clear();
      } else if (absl::StartsWith(value.key, servers)) {
        alive.insert(value.key.substr(servers.size()));
      }
    }
    Seen(table);
    // Servers lost while nobody watched.
    for (const PlacedServer& server : table.servers()) {
      if (alive.count(server.address()) == 0) Remove(server.address());
    }
    {
      absl::MutexLock lock(&mu_);
      watch_broken_ = false;
    }
    std::unique_ptr<EtcdWatch> watch = etcd_->Watch(
        options_.prefix, listing->revision + 1,
        [&](const std::vector<EtcdEvent>& events) {
          for (const EtcdEvent& event : events) {
            if (event.kv.key == TableKey() && !event.deleted) {
              Placement next;
              if (next.ParseFromString(event.kv.value)) Seen(next);
            } else if (event.deleted && absl::StartsWith(event.kv.key, servers)) {
              const std::string address = event.kv.key.substr(servers.size());
              LOG_WARN("server {} lost its lease in etcd: its shards fail over", address);
              Remove(address);
            }
          }
        },
        [&](const absl::Status& status) {
          LOG_WARN("watching the job's keys in etcd: {}; reading them again", status.ToString());
          absl::MutexLock lock(&mu_);
          watch_broken_ = true;
        });
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Membership* m)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(m->mu_) { return m->stopping_ || m->watch_broken_; },
          this));
    }
    watch.reset();
  }
}

}  // namespace fulcrum
