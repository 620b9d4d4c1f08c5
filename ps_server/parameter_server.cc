#include "ps_server/parameter_server.h"

#include <algorithm>
#include <deque>
#include <map>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint/restored_variables.h"
#include "common/embedding.h"
#include "common/logging.h"
#include "common/memory_size.h"
#include "common/partitioner.h"
#include "common/placement.h"
#include "common/row_push.h"
#include "common/tensor.h"

namespace fulcrum {

namespace {

// How errors name the unit of `key`: "variable 'w' shard 0", "embedding
// table 't' range 1".
std::string UnitName(const std::string& key) {
  std::string name;
  int index = 0;
  if (ParseShardKey(key, &name, &index)) return absl::StrCat("variable '", name, "' shard ", index);
  if (ParseTableKey(key, &name, &index)) {
    return absl::StrCat("embedding table '", name, "' range ", index);
  }
  return absl::StrCat("unit '", key, "'");
}

// This server's address in `config`'s cluster spec; "" when it has none.
std::string OwnAddress(const PsServerConfig& config) {
  const auto& ps = config.cluster().cluster().ps();
  const int index = config.cluster().task().index();
  return index >= 0 && index < ps.size() ? ps.Get(index) : "";
}

}  // namespace

absl::Status ValidatePsServerConfig(const PsServerConfig& config) {
  auto mode = FindMode(config.mode());
  if (!mode.ok()) return mode.status();
  if (config.num_replicas() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_replicas: must be >= 1, got ", config.num_replicas()));
  }
  if (absl::Status s = (*mode)->validate(config); !s.ok()) return s;
  if (config.lease_timeout_ms() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease_timeout_ms: must be > 0, got ", config.lease_timeout_ms()));
  }
  if (config.startup_timeout_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("startup_timeout_ms: must be >= 0, got ", config.startup_timeout_ms()));
  }
  if (config.max_memory_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_memory_bytes: must be >= 0, got ", config.max_memory_bytes()));
  }
  const int num_ps = config.cluster().cluster().ps_size();
  if (config.replication() < 0 || (num_ps > 0 && config.replication() > num_ps)) {
    return absl::InvalidArgumentError(absl::StrCat("replication: must be in [1, ", num_ps,
                                                   "] (one copy per server), got ",
                                                   config.replication()));
  }
  if (config.max_message_bytes() < (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes: must be >= 1 MiB, got ", config.max_message_bytes()));
  }
  if (config.zone().size() > 63 ||
      config.zone().find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789._-") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zone: at most 63 letters, digits, '.', '_' or '-', got '", config.zone(), "'"));
  }
  if (!config.etcd_endpoint().empty()) {
    if (config.etcd_lease_ms() < 1000 || config.etcd_lease_ms() % 1000 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd_lease_ms: etcd's leases are whole seconds, at least 1; got ",
                       config.etcd_lease_ms(), " ms"));
    }
    if (config.etcd_prefix().empty() || config.etcd_prefix().back() != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd_prefix: must end with '/' (the job's keys lie under it), got '",
                       config.etcd_prefix(), "'"));
    }
    if (OwnAddress(config).empty()) {
      return absl::InvalidArgumentError(
          "etcd_endpoint: coordination needs this server's address in the cluster spec's ps list");
    }
  }
  return absl::OkStatus();
}

namespace {

// The policy of `config`'s mode, over `store` and `workers`.
std::unique_ptr<ConsistencyPolicy> MakePolicy(const PsServerConfig& config, VariableStore* store,
                                              WorkerTable* workers) {
  CHECK(ValidatePsServerConfig(config).ok());
  return (*FindMode(config.mode()))->make(PolicyContext{&config, store, workers});
}

uint64_t NewIncarnation() {
  std::random_device device;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{device()} << 32) | device();
  return id;
}

// How long a push waits for its updates to reach every backup.
constexpr absl::Duration kReplicationTimeout = absl::Seconds(60);

}  // namespace

ParameterServer::ParameterServer(const PsServerConfig& config, std::function<absl::Time()> now,
                                 ReplicaLinkFactory replicas)
    : config_(config),
      incarnation_(NewIncarnation()),
      own_address_(OwnAddress(config)),
      store_(config.max_memory_bytes() > 0 ? config.max_memory_bytes()
                                           : UsableMemoryBytes() / 5 * 4),
      checkpoints_(config_, &store_),
      workers_(config.num_replicas(), absl::Milliseconds(config.lease_timeout_ms()),
               absl::Milliseconds(config.startup_timeout_ms()), std::move(now)),
      policy_(MakePolicy(config_, &store_, &workers_)),
      tables_(
          config_, &store_, policy_.get(),
          [this](const std::string& table, int partition) { return FindRange(table, partition); }),
      replicas_(std::move(replicas)) {
  {
    absl::MutexLock lock(&checkpoints_mu_);
    checkpoint_info_.set_last_step(-1);
  }
  if (replicas_) MakeReplicator();
  const absl::Duration period = std::max(absl::Milliseconds(5), workers_.lease_timeout() / 4);
  lease_thread_ = std::thread([this, period] {
    while (!stop_lease_thread_.WaitForNotificationWithTimeout(period)) CheckLeases();
  });
}

ParameterServer::~ParameterServer() {
  stop_lease_thread_.Notify();
  lease_thread_.join();
  CancelWaits();
}

void ParameterServer::ServeAt(const std::string& address) {
  own_address_ = address;
  if (replicas_) MakeReplicator();
}

void ParameterServer::MakeReplicator() {
  ReplicatorOptions options;
  options.catch_up_bytes_per_sec = config_.catch_up_bytes_per_sec();
  replicator_ = std::make_unique<Replicator>(
      own_address_, replicas_,
      [this](ReplicatedUnit* unit, const std::string& address) {
        LOG_INFO("{}: the copy on {} has caught up", unit->label(), address);
        Coordination* coordination = coordination_.load();
        if (coordination != nullptr) coordination->CaughtUp(unit->key(), address);
      },
      options);
}

absl::Status ParameterServer::CheckServing() const {
  const Coordination* coordination = coordination_.load();
  if (coordination != nullptr) return coordination->CheckServing();
  if (config_.etcd_endpoint().empty()) return absl::OkStatus();
  return absl::UnavailableError("this server has not yet joined the job in etcd");
}

void ParameterServer::ApplyPlacement(const Placement& table) {
  absl::MutexLock applying(&apply_mu_);
  {
    absl::MutexLock lock(&placement_mu_);
    if (table.epoch() <= placement_.epoch()) return;
    placement_ = table;
  }
  ApplyUnits(table, store_.Units());
  placement_applied_ = table.epoch();
  policy_->OnPlacementApplied(table.epoch());
}

void ParameterServer::ApplyUnits(const Placement& table, const std::vector<ReplicatedUnit*>& held) {
  std::map<std::string, const PlacedUnit*> units;
  for (const PlacedUnit& unit : table.units()) units[unit.key()] = &unit;
  const std::map<int32_t, std::string> addresses = ServerAddresses(table);
  bool promoted = false;
  for (ReplicatedUnit* copy : held) {
    const auto found = units.find(copy->key());
    if (found != units.end()) ApplyUnit(table, addresses, *found->second, copy, &promoted);
  }
}

absl::Status ParameterServer::CheckPrimary(const Shard& shard, int64_t routed_by) const {
  return RoutedAhead(shard.CheckPrimary(), routed_by);
}

absl::Status ParameterServer::RoutedAhead(absl::Status status, int64_t routed_by) const {
  const int64_t applied = placement_applied_.load();
  if (status.code() != absl::StatusCode::kFailedPrecondition || routed_by <= applied) {
    return status;
  }
  // The client heard of a newer table than this server has applied: the
  // shard may be promoted here in a moment, so the call is worth retrying.
  return absl::UnavailableError(absl::StrCat(status.message(), " by placement table epoch ",
                                             applied, "; the call was routed by epoch ", routed_by,
                                             ", which this server has not applied yet"));
}

std::map<int32_t, std::string> ParameterServer::ServerAddresses(const Placement& table) {
  std::map<int32_t, std::string> addresses;
  for (const PlacedServer& server : table.servers()) addresses[server.id()] = server.address();
  return addresses;
}

void ParameterServer::ApplyUnit(const Placement& table,
                                const std::map<int32_t, std::string>& addresses,
                                const PlacedUnit& unit, ReplicatedUnit* copy, bool* promoted) {
  auto address_of = [&addresses](int32_t id) -> const std::string& {
    const auto found = addresses.find(id);
    return found == addresses.end() ? PlacedServer::default_instance().address() : found->second;
  };
  const std::string& primary = address_of(unit.copies(0).server());
  std::vector<std::string> backups;
  std::vector<std::string> catching_up;
  bool held = false;  // a copy of it is here
  for (int c = 0; c < unit.copies_size(); ++c) {
    const std::string& address = address_of(unit.copies(c).server());
    held = held || address == own_address_;
    if (c > 0) (unit.copies(c).catching_up() ? catching_up : backups).push_back(address);
  }
  if (primary != own_address_) {
    // A backup, or a copy the table no longer has. A primary made one
    // first fails the pushes waiting for versions its copies may lack
    // (their clients make them again at the new primary), then sends its
    // copies nothing more.
    const bool demoted = !copy->IsBackup();
    copy->MakeBackup(primary);
    if (demoted && replicator_ != nullptr) replicator_->Replicate(copy, {});
    if (!held && !own_address_.empty()) {
      LOG_INFO("{}: the table (epoch {}) has no copy here any more: freed", copy->label(),
               table.epoch());
      store_.RemoveUnit(copy->key());
    }
    return;
  }
  if (copy->IsBackup()) {
    // Before the copy serves a pull routed by this table.
    if (!*promoted) policy_->OnPromoted(table.epoch());
    *promoted = true;
    copy->Promote();
    LOG_INFO("{}: the primary now (epoch {}), at version {}", copy->label(), table.epoch(),
             copy->version());
  }
  if (replicator_ == nullptr) {
    if (!backups.empty() || !catching_up.empty())
      LOG_ERROR("{}: has backups, but this server replicates to none", copy->label());
    return;
  }
  if (replicator_->BackupsOf(copy) != backups || replicator_->CatchingUpOf(copy) != catching_up) {
    LOG_INFO("{}: backed up on {}{} (epoch {})", copy->label(),
             backups.empty() ? "no other server" : absl::StrJoin(backups, ", "),
             catching_up.empty()
                 ? ""
                 : absl::StrCat(", filling a copy on ", absl::StrJoin(catching_up, ", ")),
             table.epoch());
    // A copy new to this primary may differ from it (the other backups of
    // a promoted one) or hold nothing yet: it takes a snapshot first.
    replicator_->Replicate(copy, backups, catching_up, /*fill=*/true);
  }
}

void ParameterServer::PlaceCreated(
    const std::vector<std::pair<ReplicatedUnit*, const ShardCopy*>>& copies) {
  if (copies.empty()) return;
  absl::MutexLock applying(&apply_mu_);
  std::vector<ReplicatedUnit*> units;
  for (const auto& [unit, copy] : copies) {
    if (!copy->primary().empty()) unit->MakeBackup(copy->primary());
    if (!copy->backups().empty()) {
      replicator_->Replicate(unit, {copy->backups().begin(), copy->backups().end()});
    }
    units.push_back(unit);
  }
  // Created late (by a restarted worker, whose request follows the
  // chief's first placement): what the cluster's table says counts.
  Placement table;  // the cluster's, as this server knows it
  {
    absl::MutexLock lock(&placement_mu_);
    table = placement_;
  }
  ApplyUnits(table, units);
}

absl::StatusOr<RebalanceResponse> ParameterServer::Rebalance(const RebalanceRequest& request) {
  Coordination* coordination = coordination_.load();
  if (coordination == nullptr) {
    return absl::FailedPreconditionError(
        "rebalance: this server is not coordinated through etcd (ps_server --etcd): its shards "
        "cannot move");
  }
  if (request.drain()) {
    // What is not in the placement table cannot move.
    absl::MutexLock lock(&placement_mu_);
    for (const ReplicatedUnit* unit : store_.Units()) {
      if (UnitLocked(unit->key()) != nullptr) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          "rebalance: this server holds ", UnitName(unit->key()),
          ", which is not in the placement table (its client created it without the servers' "
          "table): it does not move, so this server cannot leave a running job"));
    }
  }
  absl::StatusOr<Placement> table = coordination->Rebalance(request.drain());
  if (!table.ok()) return table.status();
  RebalanceResponse response;
  response.set_moving(CopiesMoving(*table, own_address_, request.drain()));
  LOG_INFO("rebalance: {} {} cop{} {} this server (placement epoch {})",
           request.drain() ? "draining:" : "taking its share:", response.moving(),
           response.moving() == 1 ? "y" : "ies", request.drain() ? "off" : "onto", table->epoch());
  *response.mutable_placement() = *std::move(table);
  return response;
}

absl::Status ParameterServer::EnableCheckpoints(FileSystem* fs) { return checkpoints_.Enable(fs); }

absl::Status ParameterServer::CheckIncarnation(uint64_t incarnation) const {
  if (incarnation != 0 && incarnation != incarnation_) {
    return absl::AbortedError(
        "this parameter server restarted since the caller last created its variables here");
  }
  return absl::OkStatus();
}

absl::StatusOr<CreateShardsResponse> ParameterServer::CreateShards(
    const CreateShardsRequest& request) {
  CreateShardsResponse response;
  response.set_incarnation(incarnation_);
  if (request.initial_values_size() != 0 &&
      request.initial_values_size() != request.shards_size()) {
    return absl::InvalidArgumentError(absl::StrCat("create shards: ", request.initial_values_size(),
                                                   " initial values for ", request.shards_size(),
                                                   " shards; send none or one per shard"));
  }
  if (request.copies_size() != 0 && request.copies_size() != request.shards_size()) {
    return absl::InvalidArgumentError(absl::StrCat("create shards: ", request.copies_size(),
                                                   " copies for ", request.shards_size(),
                                                   " shards; send none or one per shard"));
  }
  for (int i = 0; i < request.copies_size(); ++i) {
    const ShardCopy& copy = request.copies(i);
    if (absl::Status s = CheckCopyRequest(copy); !s.ok()) return s;
    if (copy.backups().empty()) continue;
    // An update travels to the backups in one message.
    const ShardSpec& spec = request.shards(i);
    const int64_t bytes =
        spec.rows() * RowElements(spec.variable().shape()) * static_cast<int64_t>(sizeof(float));
    if (bytes > config_.max_message_bytes() / 2) {
      return absl::FailedPreconditionError(absl::StrCat(
          "create shards: variable '", spec.variable().name(), "' shard ", spec.shard(), " has ",
          bytes, " bytes; a replicated shard may have at most half a message (",
          config_.max_message_bytes() / 2, "): give the variable a partitioner (MAX_SIZE)"));
    }
  }
  absl::StatusOr<std::vector<const EmbeddingTableSpec*>> range_specs = CheckRanges(request);
  if (!range_specs.ok()) return range_specs.status();
  // Created, of a replicated shard or range.
  std::vector<std::pair<ReplicatedUnit*, const ShardCopy*>> copies;
  for (int i = 0; i < request.shards_size(); ++i) {
    const ShardSpec& spec = request.shards(i);
    const std::string empty;
    const std::string& initial =
        request.initial_values_size() > 0 ? request.initial_values(i) : empty;
    const RestoredVariable* restored = checkpoints_.Find(spec);
    if (restored != nullptr) {
      if (absl::Status s = CheckRestorable(restored->spec, spec.variable()); !s.ok()) return s;
    }
    absl::StatusOr<bool> created =
        store_.Create(spec, restored, initial, policy_->ExtraFloatsPerElement());
    if (!created.ok()) return created.status();
    if (*created) {
      response.set_created(response.created() + 1);
      if (restored != nullptr) response.set_restored(response.restored() + 1);
      const ShardCopy& copy =
          request.copies_size() > 0 ? request.copies(i) : ShardCopy::default_instance();
      if (!copy.primary().empty() || !copy.backups().empty()) {
        copies.emplace_back(*store_.Find(spec.variable().name(), spec.shard()), &copy);
      }
      LOG_INFO("created variable '{}' shard {}/{} rows [{}, {}){}{}", spec.variable().name(),
               spec.shard(), spec.num_shards(), spec.row_offset(), spec.row_offset() + spec.rows(),
               restored          ? " from the checkpoint"
               : initial.empty() ? ""
                                 : " from the request's values",
               !copy.primary().empty() ? absl::StrCat(", a backup of ", copy.primary())
               : !copy.backups().empty()
                   ? absl::StrCat(", backed up on ", absl::StrJoin(copy.backups(), ", "))
                   : "");
    } else {
      response.set_existing(response.existing() + 1);
    }
  }
  if (absl::Status s = CreateRanges(request, *range_specs, &response, &copies); !s.ok()) return s;
  PlaceCreated(copies);
  if (request.placement().units_size() > 0) {
    if (absl::Status s = CheckServing(); !s.ok()) return s;
    Coordination* coordination = coordination_.load();
    if (coordination == nullptr) {
      LOG_WARN(
          "create shards: replicated shards, but no --etcd to coordinate them: a server lost for "
          "good is not failed over");
    } else if (absl::Status s = coordination->AddUnits(request.placement()); !s.ok()) {
      return s;
    }
  }
  return response;
}

absl::Status ParameterServer::CheckCopyRequest(const ShardCopy& copy) const {
  if (copy.backups().empty()) return absl::OkStatus();
  if (!copy.primary().empty()) {
    return absl::InvalidArgumentError(
        "create shards: a copy is a primary (with backups) or a backup (of a primary), not both");
  }
  if (replicator_ == nullptr) {
    return absl::FailedPreconditionError(
        "create shards: a copy with backups, but this server replicates to none");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<const EmbeddingTableSpec*>> ParameterServer::CheckRanges(
    const CreateShardsRequest& request) const {
  std::map<std::string, const EmbeddingTableSpec*> specs;
  for (const EmbeddingTableSpec& spec : request.tables()) specs[spec.name()] = &spec;
  const int num_ps = config_.cluster().cluster().ps_size();
  std::vector<const EmbeddingTableSpec*> of_ranges;
  for (const TableRange& range : request.ranges()) {
    const auto spec = specs.find(range.table());
    if (spec == specs.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "create shards: a range of table '", range.table(), "', which is not among its tables"));
    }
    if (const int partitions = TablePartitions(*spec->second, num_ps);
        range.partition() < 0 || range.partition() >= partitions) {
      return absl::InvalidArgumentError(absl::StrCat("create shards: range ", range.partition(),
                                                     " of table '", range.table(),
                                                     "', which has ranges [0, ", partitions, ")"));
    }
    if (absl::Status s = CheckCopyRequest(range.copy()); !s.ok()) return s;
    of_ranges.push_back(spec->second);
  }
  return of_ranges;
}

absl::Status ParameterServer::CreateRanges(
    const CreateShardsRequest& request, const std::vector<const EmbeddingTableSpec*>& specs,
    CreateShardsResponse* response,
    std::vector<std::pair<ReplicatedUnit*, const ShardCopy*>>* copies) {
  for (int i = 0; i < request.ranges_size(); ++i) {
    const TableRange& range = request.ranges(i);
    const EmbeddingTableSpec& spec = *specs[i];
    absl::StatusOr<bool> created = store_.CreateTable(spec, range.partition());
    if (!created.ok()) return created.status();
    if (!*created) continue;
    response->set_tables_created(response->tables_created() + 1);
    absl::StatusOr<EmbeddingTable*> table = store_.FindTable(spec.name(), range.partition());
    if (!table.ok()) return table.status();
    auto restored = checkpoints_.RestoreTable(**table);
    if (!restored.ok()) return restored.status();
    if (*restored > 0) response->set_tables_restored(response->tables_restored() + 1);
    const ShardCopy& copy = range.copy();
    if (!copy.primary().empty() || !copy.backups().empty()) copies->emplace_back(*table, &copy);
    LOG_INFO("created {} (width {}, {}, max_rows {}){}", (*table)->label(), spec.width(),
             OptimizerSpec::Kind_Name(spec.optimizer().kind()),
             spec.max_rows() > 0 ? absl::StrCat(spec.max_rows()) : "unbounded",
             !copy.primary().empty() ? absl::StrCat(", a backup of ", copy.primary())
             : !copy.backups().empty()
                 ? absl::StrCat(", backed up on ", absl::StrJoin(copy.backups(), ", "))
                 : "");
  }
  return absl::OkStatus();
}

absl::StatusOr<ReplicateResponse> ParameterServer::Replicate(const ReplicateRequest& request) {
  ReplicateResponse response;
  for (const ShardUpdate& update : request.updates()) {
    absl::StatusOr<ReplicatedUnit*> copy = CopyFor(update, request.primary());
    if (!copy.ok()) return copy.status();
    if (*copy == nullptr) {
      // A copy still to come, with the snapshot queued behind this update
      // (sent to this server's last process, say): nothing to apply yet.
      response.add_versions(-1);
      continue;
    }
    absl::StatusOr<int64_t> version = (*copy)->ApplyReplicated(update, request.primary());
    if (!version.ok()) return version.status();
    response.add_versions(*version);
  }
  return response;
}

bool ParameterServer::LacksOwnPrimaries() const {
  std::set<std::string> primaries;
  {
    absl::MutexLock lock(&placement_mu_);
    primaries = PrimariesHereLocked();
  }
  return !FirstMissing(primaries).empty();
}

std::set<std::string> ParameterServer::PrimariesHereLocked() const {
  std::set<std::string> keys;
  const std::map<int32_t, std::string> addresses = ServerAddresses(placement_);
  for (const PlacedUnit& unit : placement_.units()) {
    const auto primary = addresses.find(unit.copies(0).server());
    if (primary != addresses.end() && primary->second == own_address_) keys.insert(unit.key());
  }
  return keys;
}

std::string ParameterServer::FirstMissing(const std::set<std::string>& keys) const {
  for (const std::string& key : keys) {
    if (!store_.Holds(key)) return key;
  }
  return "";
}

absl::StatusOr<Shard*> ParameterServer::FindShard(const std::string& variable, int shard) const {
  absl::StatusOr<Shard*> found = store_.Find(variable, shard);
  if (found.ok()) return found;
  return Moved(ShardKey(variable, shard), found.status());
}

absl::StatusOr<EmbeddingTable*> ParameterServer::FindRange(const std::string& table,
                                                           int partition) const {
  absl::StatusOr<EmbeddingTable*> found = store_.FindTable(table, partition);
  if (found.ok()) return found;
  return Moved(TableKey(table, partition), found.status());
}

absl::Status ParameterServer::Moved(const std::string& key, absl::Status missing) const {
  if (missing.code() != absl::StatusCode::kNotFound) return missing;
  absl::MutexLock lock(&placement_mu_);
  const PlacedUnit* unit = UnitLocked(key);
  if (unit == nullptr) return missing;
  const std::string primary = ServerAddresses(placement_)[unit->copies(0).server()];
  if (primary == own_address_) return missing;  // lost with a restart: NOT_FOUND
  // Not NOT_FOUND, which says this server lost the caller's state.
  return absl::FailedPreconditionError(
      absl::StrCat(UnitName(key), " has no copy here: by placement table epoch ",
                   placement_.epoch(), " its primary is ", primary));
}

const PlacedUnit* ParameterServer::UnitLocked(const std::string& key) const {
  for (const PlacedUnit& unit : placement_.units()) {
    if (unit.key() == key) return &unit;
  }
  return nullptr;
}

absl::StatusOr<ReplicatedUnit*> ParameterServer::CopyFor(const ShardUpdate& update,
                                                         const std::string& primary) {
  if (!update.table().empty()) {
    absl::StatusOr<EmbeddingTable*> range = store_.FindTable(update.table(), update.partition());
    if (range.ok()) return *range;
    if (update.table_snapshot().has_spec()) {
      return CreateTableCopy(update.table_snapshot().spec(), update.partition(), primary);
    }
    if (CheckCopyHere(TableKey(update.table(), update.partition()), primary).ok()) return nullptr;
    return range.status();
  }
  absl::StatusOr<Shard*> shard = store_.Find(update.variable(), update.shard());
  if (shard.ok()) return *shard;
  if (update.snapshot().has_spec()) return CreateCopy(update.snapshot().spec(), primary);
  if (CheckCopyHere(ShardKey(update.variable(), update.shard()), primary).ok()) return nullptr;
  return shard.status();
}

absl::Status ParameterServer::CheckCopyHere(const std::string& key,
                                            const std::string& primary) const {
  absl::MutexLock lock(&placement_mu_);
  std::map<int32_t, std::string> addresses = ServerAddresses(placement_);
  const PlacedUnit* unit = UnitLocked(key);
  bool here = false;
  for (int c = 1; unit != nullptr && c < unit->copies_size(); ++c) {
    here = here || addresses[unit->copies(c).server()] == own_address_;
  }
  if (here && addresses[unit->copies(0).server()] == primary) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("replicate: unit '", key, "' has no copy here of ", primary,
                   " in this server's placement table (epoch ", placement_.epoch(), ")"));
}

absl::StatusOr<Shard*> ParameterServer::CreateCopy(const ShardSpec& spec,
                                                   const std::string& primary) {
  if (absl::Status s = CheckCopyHere(ShardKey(spec.variable().name(), spec.shard()), primary);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<bool> created = store_.Create(spec, nullptr, "", policy_->ExtraFloatsPerElement());
  if (!created.ok()) return created.status();
  absl::StatusOr<Shard*> shard = store_.Find(spec.variable().name(), spec.shard());
  if (!shard.ok()) return shard.status();
  (*shard)->MakeBackup(primary);
  LOG_INFO("created variable '{}' shard {}/{} rows [{}, {}), a copy of {} being filled",
           spec.variable().name(), spec.shard(), spec.num_shards(), spec.row_offset(),
           spec.row_offset() + spec.rows(), primary);
  return shard;
}

absl::StatusOr<EmbeddingTable*> ParameterServer::CreateTableCopy(const EmbeddingTableSpec& spec,
                                                                 int partition,
                                                                 const std::string& primary) {
  if (absl::Status s = CheckCopyHere(TableKey(spec.name(), partition), primary); !s.ok()) return s;
  absl::StatusOr<bool> created = store_.CreateTable(spec, partition);
  if (!created.ok()) return created.status();
  absl::StatusOr<EmbeddingTable*> range = store_.FindTable(spec.name(), partition);
  if (!range.ok()) return range.status();
  (*range)->MakeBackup(primary);
  LOG_INFO("created {}, a copy of {} being filled", (*range)->label(), primary);
  return range;
}

absl::StatusOr<PullRowsResponse> ParameterServer::PullRows(const PullRowsRequest& request,
                                                           absl::Time deadline) {
  if (absl::Status s = CheckIncarnation(request.incarnation()); !s.ok()) return s;
  PullRequest waits;  // what the policy waits for: the worker's clock
  if (request.has_worker_id()) {
    if (absl::Status s = workers_.CheckWorkerId(request.worker_id()); !s.ok()) return s;
    Renew(request.worker_id());
    waits.set_worker_id(request.worker_id());
    if (request.has_clock()) waits.set_clock(request.clock());
  }
  absl::StatusOr<PullRowsResponse> pulled = tables_.Pull(request, waits, deadline);
  if (!pulled.ok()) return RoutedAhead(pulled.status(), request.placement_epoch());
  return pulled;
}

absl::StatusOr<PushRowsResponse> ParameterServer::PushRows(const PushRowsRequest& request) {
  if (absl::Status s = CheckIncarnation(request.incarnation()); !s.ok()) return s;
  if (!request.has_worker_id()) {
    return absl::InvalidArgumentError("push of rows: carries no worker_id; only workers push");
  }
  const int worker = request.worker_id();
  if (absl::Status s = workers_.CheckWorkerId(worker); !s.ok()) return s;
  Renew(worker);
  absl::StatusOr<PushRowsResponse> response =
      tables_.Push(request, worker, absl::Now() + kReplicationTimeout);
  if (!response.ok()) return RoutedAhead(response.status(), request.placement_epoch());
  for (const ShardPushResult& result : response->results()) RecordOutcome(result);
  return response;
}

absl::StatusOr<PushRowsResponse> ParameterServer::PushRows(std::vector<PushRowsRequest> parts) {
  absl::StatusOr<PushRowsRequest> merged = MergeRowPush(std::move(parts));
  if (!merged.ok()) return merged.status();
  return PushRows(*merged);
}

absl::StatusOr<ReadRowsResponse> ParameterServer::ReadRows(const ReadRowsRequest& request) const {
  if (absl::Status s = CheckIncarnation(request.incarnation()); !s.ok()) return s;
  absl::StatusOr<ReadRowsResponse> page = tables_.Read(request);
  if (page.ok()) page->set_incarnation(incarnation_);
  return page;
}

absl::StatusOr<PullResponse> ParameterServer::Pull(const PullRequest& request, absl::Time deadline,
                                                   const CallLimits& limits) {
  absl::StatusOr<OutgoingPull> pulled = PullLending(request, deadline, limits);
  if (!pulled.ok()) return pulled.status();
  return std::move(*pulled).Materialize();
}

absl::StatusOr<OutgoingPull> ParameterServer::PullLending(const PullRequest& request,
                                                          absl::Time deadline,
                                                          const CallLimits& limits) {
  if (absl::Status s = CheckIncarnation(request.incarnation()); !s.ok()) return s;
  if (request.has_worker_id()) {
    if (absl::Status s = CheckServing(); !s.ok()) return s;
    if (absl::Status s = workers_.CheckWorkerId(request.worker_id()); !s.ok()) return s;
    Renew(request.worker_id());
  }
  const DataType encoding = request.wire_dtype() == DT_INVALID ? DT_FLOAT : request.wire_dtype();
  if (!IsFloatEncoding(encoding)) {
    return absl::InvalidArgumentError(absl::StrCat("pull: wire_dtype ", DataType_Name(encoding),
                                                   " is not DT_FLOAT, DT_BFLOAT16 or DT_FLOAT16"));
  }
  std::vector<Shard*> shards;
  int64_t checked_by = 0;  // the placement table the shards were found by
  auto find_shards = [&]() -> absl::Status {
    checked_by = placement_applied_.load();
    shards.clear();
    for (const ShardRef& ref : request.shards()) {
      absl::StatusOr<Shard*> shard = FindShard(ref.variable(), ref.shard());
      if (!shard.ok()) return shard.status();
      // A backup copy serves readers (tools, evaluators), not workers.
      if (request.has_worker_id()) {
        if (absl::Status s = CheckPrimary(**shard, request.placement_epoch()); !s.ok()) return s;
      }
      shards.push_back(*shard);
    }
    return absl::OkStatus();
  };
  if (absl::Status s = find_shards(); !s.ok()) return s;
  // Checked before waiting or copying anything: the answer's size follows
  // from the shards asked for.
  int64_t bytes = 0;
  for (const Shard* shard : shards) {
    bytes += NumElements(shard->shape()) * EncodedFloatBytes(encoding);
  }
  if (bytes > limits.max_pull_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("pull: answers ", bytes, " bytes of tensors; this call carries at most ",
                     limits.max_pull_bytes, " (larger transfers stream)"));
  }
  // A pull may name a shard more than once, but never ask for more than
  // every shard here once: the answer may be a copy (encoded, or of a
  // snapshot a push did not wait for), and must fit beside them.
  if (bytes > store_.value_bytes()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("pull: asks for ", bytes, " bytes of tensors, more than the ",
                     store_.value_bytes(), " bytes of variables this server holds"));
  }
  absl::Duration held;  // by the policy, for the other workers
  for (;;) {
    const absl::Status waited = policy_->AwaitPull(request, deadline, checked_by, &held);
    if (!absl::IsAborted(waited)) {
      if (!waited.ok()) return waited;
      break;
    }
    // A placement table came meanwhile: the shards may have moved away.
    if (absl::Status s = find_shards(); !s.ok()) return s;
  }
  OutgoingPull pulled;
  // The reads add their waits for the shards' versions.
  pulled.response.set_waited_us(absl::ToInt64Microseconds(held));
  for (size_t i = 0; i < shards.size(); ++i) {
    if (absl::Status s = shards[i]->Read(request.shards(i).min_version(), deadline, encoding,
                                         limits.max_slice_bytes, &pulled);
        !s.ok()) {
      return s;
    }
  }
  return pulled;
}

void ParameterServer::Renew(int worker) {
  if (workers_.Renew(worker)) OnWorkersChanged();
}

void ParameterServer::RecordOutcome(const ShardPushResult& result) {
  switch (result.outcome()) {
    case ShardPushResult::APPLIED:
    case ShardPushResult::ACCUMULATED: {
      if (result.outcome() == ShardPushResult::APPLIED) ++updates_applied_;
      const int64_t bucket = std::min<int64_t>(result.staleness(), kStalenessBuckets - 1);
      ++staleness_histogram_[bucket];
      break;
    }
    case ShardPushResult::STALE:
      ++stale_dropped_;
      break;
    default:
      break;
  }
}

absl::StatusOr<std::vector<ParameterServer::PushedShard>> ParameterServer::DecodePush(
    const PushRequest& request, const ReceivedBytes& received,
    std::deque<std::vector<float>>* widened) const {
  std::vector<PushedShard> pushed;
  std::map<Shard*, std::vector<int>> slices;  // indices into request.gradients()
  for (int i = 0; i < request.gradients_size(); ++i) {
    const ShardSlice& grad = request.gradients(i);
    absl::StatusOr<Shard*> found = FindShard(grad.variable(), grad.shard());
    if (!found.ok()) return found.status();
    if (absl::Status s = CheckPrimary(**found, request.placement_epoch()); !s.ok()) return s;
    std::vector<int>& list = slices[*found];
    if (list.empty()) {
      pushed.push_back(
          {*found, ShardGradient{request.worker_id(), request.push_id(), grad.version(), {}}});
    }
    list.push_back(i);
  }
  for (PushedShard& grad : pushed) {
    Shard* shard = grad.shard;
    std::vector<int>& list = slices[shard];
    std::sort(list.begin(), list.end(), [&](int a, int b) {
      return request.gradients(a).row_offset() < request.gradients(b).row_offset();
    });
    // The slices must tile the shard's rows in order: each starts where the
    // one before ends and the last ends with the shard, all computed from
    // one version.
    const int64_t rows = shard->shape()[0];
    int64_t next_row = 0;
    for (const int index : list) {
      const ShardSlice* slice = &request.gradients(index);
      const std::string what =
          list.size() == 1
              ? absl::StrCat(shard->label(), " gradient")
              : absl::StrCat(shard->label(), " gradient rows from ", slice->row_offset());
      if (slice->row_offset() != next_row) {
        return absl::InvalidArgumentError(absl::StrCat(
            shard->label(), ": gradient ",
            slice->row_offset() < next_row ? "slices overlap at row " : "lacks rows from ",
            std::min(next_row, slice->row_offset()), "; a push must cover whole shards"));
      }
      if (slice->version() != grad.gradient.computed_at) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": computed at version ", slice->version(),
                         ", the shard's other slices at ", grad.gradient.computed_at));
      }
      // The last slice must hold the rows left; the others, any of them.
      Shape part_shape = shard->shape();
      part_shape[0] = index == list.back() || slice->tensor().shape_size() == 0
                          ? rows - next_row
                          : std::clamp<int64_t>(slice->tensor().shape(0), 0, rows - next_row);
      // Its float32 values, in one part or in the pieces they arrived in.
      FloatBytes held;
      absl::Span<const FloatBytes> parts;
      if (!received.empty() && received[index].owner != nullptr) {
        const ReceivedSlice& data = received[index];
        if (absl::Status s = CheckFloatTensor(slice->tensor(), part_shape, what, data.bytes);
            !s.ok()) {
          return s;
        }
        parts = data.pieces;
      } else {
        auto decoded =
            DecodeFloatTensor(slice->tensor(), part_shape, what, &widened->emplace_back());
        if (!decoded.ok()) return decoded.status();
        held = AsFloatBytes(*decoded);
        parts = absl::MakeConstSpan(&held, 1);
      }
      int64_t element = next_row * RowElements(part_shape);
      for (const FloatBytes part : parts) {
        if (int64_t bad = FirstNonFinite(part); bad >= 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(shard->label(), ": gradient element ", element + bad, " is ",
                           LoadFloat(part.data(), bad), "; the push is rejected, nothing applied"));
        }
        element += static_cast<int64_t>(part.size() / sizeof(float));
        grad.gradient.parts.push_back(part);
      }
      next_row += part_shape[0];
    }
    if (absl::Status s = shard->CheckComputedAt(grad.gradient.computed_at); !s.ok()) return s;
  }
  return pushed;
}

absl::Status ParameterServer::AdmitPushBytes(uint64_t incarnation, int64_t bytes) const {
  if (absl::Status s = CheckIncarnation(incarnation); !s.ok()) return s;
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  const int64_t held = store_.value_bytes();
  if (bytes > held && placement_applied_.load() > 0 && !LacksOwnPrimaries()) {
    // Not NOT_FOUND or RESOURCE_EXHAUSTED: the caller's shards moved away.
    return absl::FailedPreconditionError(
        absl::StrCat("push carries ", bytes, " bytes of gradients; this server holds ", held,
                     " bytes of variables since placement table epoch ", placement_applied_.load(),
                     ": its shards moved to other servers"));
  }
  if (held == 0 && bytes > 0) {
    return absl::NotFoundError("this server holds no variables (did it restart?)");
  }
  if (bytes > held) {
    return absl::ResourceExhaustedError(absl::StrCat("push carries over ", bytes,
                                                     " bytes of gradients; this server holds only ",
                                                     held, " bytes of variables"));
  }
  return absl::OkStatus();
}

absl::Status ParameterServer::StartPush(const PushRequest& header, int64_t bytes,
                                        const CallLimits& limits) {
  if (absl::Status s = AdmitPushBytes(header.incarnation(), bytes); !s.ok()) return s;
  if (bytes > limits.max_push_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("push carries ", bytes, " bytes of gradients; this call carries at most ",
                     limits.max_push_bytes, " (larger transfers stream)"));
  }
  if (!header.has_worker_id()) {
    return absl::InvalidArgumentError("push: carries no worker_id; only workers push");
  }
  const int worker = header.worker_id();
  if (absl::Status s = workers_.CheckWorkerId(worker); !s.ok()) return s;
  if (absl::Status s = policy_->CheckPush(header); !s.ok()) return s;
  Renew(worker);
  return absl::OkStatus();
}

absl::Status ParameterServer::ApplyShards(const PushRequest& request, const ReceivedBytes& received,
                                          PushResponse* response) {
  std::deque<std::vector<float>> widened;  // of 16-bit encodings; never moves
  auto pushed = DecodePush(request, received, &widened);
  if (!pushed.ok()) return pushed.status();
  for (const PushedShard& grad : *pushed) {
    absl::StatusOr<ShardPushResult> result = policy_->PushShard(*grad.shard, grad.gradient);
    if (!result.ok()) return result.status();
    RecordOutcome(*result);
    *response->add_results() = *std::move(result);
  }
  // What this push applied is answered once every backup has it.
  const absl::Time deadline = absl::Now() + kReplicationTimeout;
  for (size_t i = 0; i < pushed->size(); ++i) {
    const ShardPushResult& result =
        response->results(response->results_size() - pushed->size() + i);
    // A retry's DUPLICATE too: its push may be applied but not yet there.
    if (result.outcome() != ShardPushResult::APPLIED &&
        result.outcome() != ShardPushResult::DUPLICATE) {
      continue;
    }
    if (absl::Status s = (*pushed)[i].shard->AwaitCommitted(result.version(), deadline); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PushResponse> ParameterServer::Push(const PushRequest& request,
                                                   const CallLimits& limits,
                                                   const ReceivedBytes& received) {
  CHECK(received.empty() || static_cast<int>(received.size()) == request.gradients_size());
  if (absl::Status s = StartPush(request, TensorBytes(request.gradients(), received), limits);
      !s.ok()) {
    return s;
  }
  // The whole request is checked before any shard is touched.
  PushResponse response;
  if (absl::Status s = ApplyShards(request, received, &response); !s.ok()) return s;
  policy_->AfterPush(request);
  return response;
}

absl::Status ParameterServer::IncomingPush::Add(PushRequest* part, ReceivedBytes received) {
  CHECK(received.empty() || static_cast<int>(received.size()) == part->gradients_size());
  bytes_ += TensorBytes(part->gradients(), received);
  if (!started_) {
    if (absl::Status s = ps_->StartPush(*part, bytes_, limits_); !s.ok()) return s;
    CopyPushHeader(*part, &pending_);
    started_ = true;
  } else if (absl::Status s = ps_->AdmitPushBytes(part->incarnation(), bytes_); !s.ok()) {
    return s;
  } else if (!SamePushHeader(*part, pending_)) {
    PushRequest a, b;  // the headers alone, without the tensors
    CopyPushHeader(pending_, &a);
    CopyPushHeader(*part, &b);
    return absl::InvalidArgumentError(absl::StrCat(
        "push stream mixes headers {", a.ShortDebugString(), "} and {", b.ShortDebugString(), "}"));
  }
  for (int i = 0; i < part->gradients_size(); ++i) {
    ShardSlice& slice = *part->mutable_gradients(i);
    absl::StatusOr<Shard*> shard = ps_->FindShard(slice.variable(), slice.shard());
    if (!shard.ok()) return shard.status();
    if (applied_.contains(*shard)) {
      return absl::InvalidArgumentError(
          absl::StrCat((*shard)->label(),
                       ": gradient slices after the whole shard's; a push covers each shard once"));
    }
    // Counted up to the shard's rows (whether they tile it, DecodePush
    // checks), so no claim of a hostile slice overflows.
    const int64_t rows = (*shard)->shape()[0];
    int64_t& counted = pending_rows_[*shard];
    counted = std::min(rows, counted + std::clamp<int64_t>(SliceRows(slice), 0, rows));
    *pending_.add_gradients() = std::move(slice);  // moved, not copied
    pending_received_.push_back(received.empty() ? ReceivedSlice() : std::move(received[i]));
    pending_shards_.push_back(*shard);
  }
  // The shards now whole go to the policy; the others wait.
  PushRequest whole;
  CopyPushHeader(pending_, &whole);
  ReceivedBytes whole_received;
  PushRequest waiting;
  CopyPushHeader(pending_, &waiting);
  ReceivedBytes waiting_received;
  std::vector<const Shard*> waiting_shards;
  const size_t applied_before = applied_.size();
  for (int i = 0; i < pending_.gradients_size(); ++i) {
    const Shard* shard = pending_shards_[i];
    if (pending_rows_[shard] >= shard->shape()[0]) {
      *whole.add_gradients() = std::move(*pending_.mutable_gradients(i));
      whole_received.push_back(std::move(pending_received_[i]));
      applied_.insert(shard);
    } else {
      *waiting.add_gradients() = std::move(*pending_.mutable_gradients(i));
      waiting_received.push_back(std::move(pending_received_[i]));
      waiting_shards.push_back(shard);
    }
  }
  pending_ = std::move(waiting);
  pending_received_ = std::move(waiting_received);
  pending_shards_ = std::move(waiting_shards);
  for (auto it = pending_rows_.begin(); it != pending_rows_.end();) {
    it = it->second >= it->first->shape()[0] ? pending_rows_.erase(it) : std::next(it);
  }
  if (whole.gradients().empty()) return absl::OkStatus();
  return EarlierShardsStay(ps_->ApplyShards(whole, whole_received, &response_), applied_before);
}

absl::Status ParameterServer::IncomingPush::EarlierShardsStay(absl::Status status, size_t applied) {
  if (status.ok() || applied == 0) return status;
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), " (but ", applied,
                                   " shard(s) of this push, whole in its earlier messages, "
                                   "were applied before it)"));
}

bool ParameterServer::IncomingPush::Applied(const ShardRef& ref) const {
  absl::StatusOr<Shard*> shard = ps_->store_.Find(ref.variable(), ref.shard());
  return shard.ok() && applied_.contains(*shard);
}

absl::StatusOr<PushResponse> ParameterServer::IncomingPush::Finish() {
  if (!started_) return ps_->Push(PushRequest(), limits_);  // says what an empty push lacks
  // Shards still waiting lack rows: DecodePush says which.
  if (!pending_.gradients().empty()) {
    absl::Status s = EarlierShardsStay(ps_->ApplyShards(pending_, pending_received_, &response_),
                                       applied_.size());
    if (!s.ok()) return s;
  }
  ps_->policy_->AfterPush(pending_);
  return std::move(response_);
}

absl::StatusOr<HeartbeatResponse> ParameterServer::Heartbeat(const HeartbeatRequest& request) {
  if (!request.has_worker_id()) {
    return absl::InvalidArgumentError("heartbeat: carries no worker_id");
  }
  if (absl::Status s = workers_.CheckWorkerId(request.worker_id()); !s.ok()) return s;
  Renew(request.worker_id());
  if (request.finished()) {
    LOG_INFO("worker {} finished training", request.worker_id());
    workers_.MarkFinished(request.worker_id());
    OnWorkersChanged();
  }
  HeartbeatResponse response;
  response.set_lease_timeout_ms(config_.lease_timeout_ms());
  for (int id : workers_.Awaited()) response.add_awaited_workers(id);
  response.set_startup_remaining_ms(
      std::max<int64_t>(0, absl::ToInt64Milliseconds(workers_.StartupRemaining())));
  return response;
}

DescribeResponse ParameterServer::Describe() const {
  DescribeResponse response;
  response.set_mode(config_.mode());
  response.set_ps_index(config_.cluster().task().index());
  response.set_num_ps(config_.cluster().cluster().ps_size());
  response.set_replication(std::max(1, config_.replication()));
  response.set_zone(config_.zone());
  response.set_coordinated(!config_.etcd_endpoint().empty());
  response.set_metrics_port(config_.metrics_port());
  {
    absl::MutexLock lock(&placement_mu_);
    *response.mutable_placement() = placement_;
  }
  // A primary's copies elsewhere, into a ShardInfo or TableInfo.
  auto add_copies = [this](const ReplicatedUnit* unit, auto* info) {
    if (replicator_ == nullptr) return;
    for (std::string& backup : replicator_->BackupsOf(unit)) info->add_backups(std::move(backup));
    for (std::string& copy : replicator_->CatchingUpOf(unit))
      info->add_catching_up(std::move(copy));
  };
  for (const Shard* shard : store_.All()) {
    ShardInfo* info = response.add_shards();
    *info = shard->Describe();
    add_copies(shard, info);
  }
  for (const EmbeddingTable* table : store_.AllTables()) {
    const EmbeddingTable::Stats stats = table->stats();
    TableInfo* info = response.add_tables();
    info->set_name(table->spec().name());
    info->set_width(table->spec().width());
    info->set_optimizer(OptimizerSpec::Kind_Name(table->spec().optimizer().kind()));
    info->set_version(stats.step);
    info->set_rows(stats.rows);
    info->set_max_rows(table->spec().max_rows());
    info->set_candidates(stats.candidates);
    info->set_evictions(stats.evictions);
    info->set_admissions(stats.admissions);
    info->set_memory_bytes(stats.bytes);
    info->set_partition(table->partition());
    info->set_primary(table->primary());
    for (const HeavyHitters::Hitter& hot : table->hottest()) {
      HotId* hot_id = info->add_hottest();
      hot_id->set_id(hot.id);
      hot_id->set_pushes(hot.count);
      hot_id->set_error(hot.error);
    }
    add_copies(table, info);
  }
  for (const WorkerInfo& info : workers_.Describe()) *response.add_workers() = info;
  policy_->Describe(&response);
  response.set_updates_applied(updates_applied_.load());
  response.set_bytes_pushed(bytes_pushed_.load(std::memory_order_relaxed));
  response.set_bytes_pulled(bytes_pulled_.load(std::memory_order_relaxed));
  {
    absl::MutexLock lock(&checkpoints_mu_);
    *response.mutable_checkpoints() = checkpoint_info_;
  }
  response.set_stale_gradients_dropped(stale_dropped_.load());
  for (const auto& bucket : staleness_histogram_) response.add_staleness_histogram(bucket.load());
  response.set_job_done(job_done_requested_.load());
  response.set_shutting_down(job_done_.HasBeenNotified());
  response.set_incarnation(incarnation_);
  response.set_restored_step(checkpoints_.restored_step());
  response.set_memory_bytes(store_.memory_bytes());
  response.set_max_memory_bytes(store_.max_memory_bytes());
  return response;
}

absl::StatusOr<SaveCheckpointResponse> ParameterServer::SaveCheckpoint(
    const SaveCheckpointRequest& request) {
  const absl::Time start = absl::Now();
  absl::StatusOr<SaveCheckpointResponse> saved = SaveCheckpointHere(request);
  absl::MutexLock lock(&checkpoints_mu_);
  if (saved.ok()) {
    checkpoint_info_.set_last_step(request.step());
    checkpoint_info_.set_last_seconds(absl::ToDoubleSeconds(absl::Now() - start));
    checkpoint_info_.set_last_unix_secs(absl::ToUnixSeconds(absl::Now()));
  } else {
    checkpoint_info_.set_failures(checkpoint_info_.failures() + 1);
    checkpoint_info_.set_last_error(
        absl::StrCat("step ", request.step(), ": ", saved.status().message()));
  }
  return saved;
}

absl::StatusOr<SaveCheckpointResponse> ParameterServer::SaveCheckpointHere(
    const SaveCheckpointRequest& request) {
  std::set<std::string> primaries;
  int64_t epoch = 0;
  {
    absl::MutexLock lock(&placement_mu_);
    epoch = placement_.epoch();
    primaries = PrimariesHereLocked();
  }
  if (epoch == 0) return checkpoints_.Save(request.step());
  if (const std::string missing = FirstMissing(primaries); !missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", request.step(), ": by placement table epoch ", epoch,
        " this server is the primary of ", UnitName(missing),
        ", which it lacks (it restarted, and its clients have not created it again yet)"));
  }
  absl::StatusOr<SaveCheckpointResponse> saved = checkpoints_.Save(
      request.step(), [&](const ReplicatedUnit& unit) { return primaries.count(unit.key()) > 0; });
  if (saved.ok()) saved->set_placement_epoch(epoch);
  return saved;
}

absl::Status ParameterServer::SaveFinalCheckpoint() { return checkpoints_.SaveFinal(); }

void ParameterServer::JobDone(const std::string& reason) {
  if (job_done_requested_.exchange(true)) return;
  LOG_INFO("job done: {}", reason.empty() ? "(no reason given)" : reason);
  OnWorkersChanged();
}

bool ParameterServer::WaitForJobDone(absl::Duration timeout) const {
  return job_done_.WaitForNotificationWithTimeout(timeout);
}

void ParameterServer::CancelWaits() {
  policy_->Cancel();
  for (Shard* shard : store_.All()) shard->Cancel();
  for (EmbeddingTable* table : store_.AllTables()) table->Cancel();
}

void ParameterServer::CheckLeases() {
  const LeaseChanges changes = workers_.ExpireLeases();
  if (!changes.any()) return;
  LOG_WARN("{}; {} of {} workers active", changes.ToString(), workers_.ActiveCount(),
           workers_.num_workers());
  OnWorkersChanged();
}

void ParameterServer::OnWorkersChanged() {
  policy_->OnWorkersChanged();
  if (job_done_requested_.load() && workers_.AllFinishedOrDead() &&
      !job_done_notified_.exchange(true)) {
    job_done_.Notify();
  }
}

}  // namespace fulcrum
