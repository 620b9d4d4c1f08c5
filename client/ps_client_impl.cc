#include "client/ps_client_impl.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/consistency_mode.h"
#include "common/logging.h"
#include "common/slices.h"
#include "common/thread_pool.h"

namespace fulcrum {

namespace {

// Shards larger than this are worth splitting: a server applies a push,
// and answers a pull, a whole shard at a time (see CreateVariables).
constexpr int64_t kLargeShardBytes = int64_t{16} << 20;

// A server that lost what this client created there: it restarted.
bool LostState(const absl::Status& status) {
  return status.code() == absl::StatusCode::kNotFound ||
         status.code() == absl::StatusCode::kAborted;
}

// A caller's buffer for `spec`: its shape and a buffer. `what` names it in
// the error ("gradient of variable 'w'").
absl::Status CheckView(const std::string& what, const VariableSpec& spec, const Shape& shape,
                       const void* data) {
  if (!std::equal(shape.begin(), shape.end(), spec.shape().begin(), spec.shape().end())) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": expected shape ", ShapeString(spec.shape()), ", got ", ShapeString(shape)));
  }
  if (data == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": no buffer"));
  return absl::OkStatus();
}

}  // namespace

PsClientImpl::PsClientImpl(std::vector<std::unique_ptr<PsTransport>> servers,
                           PsClientOptions options)
    : servers_(std::move(servers)),
      options_(std::move(options)),
      policy_(MakeClientPolicy(options_.mode).value_or(nullptr)),
      fan_out_(static_cast<int>(servers_.size()) - 1),
      incarnations_(servers_.size(), 0),
      push_ids_(std::random_device()()) {
  CHECK(!servers_.empty());
  CHECK(policy_ != nullptr && "PsClientOptions::mode must be ASYNC, SYNC or SSP");
}

PsClientImpl::~PsClientImpl() {
  stop_heartbeats_.Notify();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

absl::Status PsClientImpl::ForEachServer(
    const std::vector<bool>& involved, const std::string& what,
    const std::function<absl::Status(int ps, absl::Time deadline)>& call) {
  std::vector<absl::Status> results(servers_.size());
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
      if (attempt == 1 || attempt % 10 == 0) {
        LOG_WARN("ps {} ({}) unavailable for {}: {}; retrying for up to {}", ps,
                 servers_[ps]->address(), what, status.message(),
                 absl::FormatDuration(give_up - absl::Now()));
      }
      absl::SleepFor(backoff);  // backoff between attempts, not synchronisation
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
  };
  std::vector<int> calls;
  for (int ps = 0; ps < num_servers(); ++ps) {
    if (involved[ps]) calls.push_back(ps);
  }
  ParallelFor(fan_out_, static_cast<int>(calls.size()), [&](int i) { run(calls[i]); });
  for (int ps = 0; ps < num_servers(); ++ps) {
    if (!results[ps].ok()) {
      return absl::Status(results[ps].code(),
                          absl::StrCat("ps ", ps, " (", servers_[ps]->address(), "): ", what, ": ",
                                       results[ps].message()));
    }
  }
  return absl::OkStatus();
}

absl::Status PsClientImpl::CreateVariables(const std::vector<VariableSpec>& specs,
                                           const ConstTensorViews& initial_values) {
  auto placed = PlaceVariables(specs, num_servers());
  if (!placed.ok()) return placed.status();
  std::map<std::string, const VariableSpec*> by_name;
  for (const VariablePlacement& variable : *placed) by_name[variable.spec.name()] = &variable.spec;
  for (const auto& [name, view] : initial_values) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("initial value of '", name, "': no such variable among the specs"));
    }
    if (absl::Status s = CheckView(absl::StrCat("initial value of '", name, "'"), *it->second,
                                   view.shape, view.data);
        !s.ok()) {
      return s;
    }
  }
  std::vector<CreateShardsRequest> requests(servers_.size());
  for (const VariablePlacement& variable : *placed) {
    auto value = initial_values.find(variable.spec.name());
    const int64_t row_bytes =
        RowElements(variable.spec.shape()) * static_cast<int64_t>(sizeof(float));
    int64_t largest = 0;
    for (const ShardPlacement& shard : variable.shards) largest = std::max(largest, shard.rows);
    if (largest * row_bytes > kLargeShardBytes) {
      LOG_WARN(
          "variable '{}' has a shard of {:.1f} MiB: a server applies pushes, and pipelines "
          "push-pulls, a whole shard at a time, so shards of a few MiB are faster and hold "
          "less memory (partitioner MAX_SIZE, e.g. max_shard_bytes 4194304)",
          variable.spec.name(), static_cast<double>(largest * row_bytes) / (1 << 20));
    }
    for (const ShardPlacement& shard : variable.shards) {
      CreateShardsRequest& request = requests[shard.ps];
      if (value != initial_values.end()) {
        // One entry per shard once any shard of the request has values.
        while (request.initial_values_size() < request.shards_size()) request.add_initial_values();
        request.add_initial_values()->assign(
            reinterpret_cast<const char*>(value->second.data) + shard.row_offset * row_bytes,
            shard.rows * row_bytes);
      } else if (request.initial_values_size() > 0) {
        request.add_initial_values();
      }
      ShardSpec* spec = request.add_shards();
      *spec->mutable_variable() = variable.spec;
      spec->set_shard(shard.shard);
      spec->set_num_shards(static_cast<int>(variable.shards.size()));
      spec->set_row_offset(shard.row_offset);
      spec->set_rows(shard.rows);
    }
  }
  // Tables created before stay in what a restarted server is given again.
  for (const auto& [name, table] : tables_) {
    for (CreateShardsRequest& request : requests) *request.add_tables() = table;
  }
  std::vector<bool> involved(servers_.size());
  for (size_t ps = 0; ps < servers_.size(); ++ps) involved[ps] = requests[ps].shards_size() > 0;
  std::vector<uint64_t> incarnations(servers_.size(), 0);
  absl::Status status =
      ForEachServer(involved, "create variables", [&](int ps, absl::Time deadline) {
        auto created = servers_[ps]->CreateShards(requests[ps], deadline);
        if (created.ok()) {
          incarnations[ps] = created->incarnation();
          if (created->restored() > 0) {
            LOG_INFO("ps {} ({}): {} shard(s) restored from its checkpoint", ps,
                     servers_[ps]->address(), created->restored());
          }
        }
        return created.status();
      });
  if (!status.ok()) return status;
  placement_ = *std::move(placed);
  create_requests_ = std::move(requests);
  incarnations_ = std::move(incarnations);
  index_.clear();
  shard_state_.clear();
  for (size_t i = 0; i < placement_.size(); ++i) index_[placement_[i].spec.name()] = i;
  return absl::OkStatus();
}

absl::StatusOr<const VariablePlacement*> PsClientImpl::Find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(
        absl::StrCat("variable '", name, "' was not created through this client"));
  }
  return &placement_[it->second];
}

absl::StatusOr<std::vector<const VariablePlacement*>> PsClientImpl::Resolve(
    const std::vector<std::string>& names) const {
  std::vector<const VariablePlacement*> variables;
  if (names.empty()) {
    for (const VariablePlacement& v : placement_) variables.push_back(&v);
    return variables;
  }
  for (const std::string& name : names) {
    auto found = Find(name);
    if (!found.ok()) return found.status();
    variables.push_back(*found);
  }
  return variables;
}

std::vector<PullRequest> PsClientImpl::BuildPulls(
    const std::vector<const VariablePlacement*>& variables,
    std::vector<int64_t>* response_bytes) const {
  std::vector<PullRequest> pulls(servers_.size());
  response_bytes->assign(servers_.size(), 0);
  for (size_t ps = 0; ps < pulls.size(); ++ps) {
    if (options_.worker_id >= 0) pulls[ps].set_worker_id(options_.worker_id);
    if (options_.worker_id >= 0 && policy_->CarriesClock()) pulls[ps].set_clock(clock_);
    pulls[ps].set_incarnation(incarnations_[ps]);
    pulls[ps].set_wire_dtype(options_.wire_dtype);
  }
  for (const VariablePlacement* variable : variables) {
    for (const ShardPlacement& shard : variable->shards) {
      ShardRef* ref = pulls[shard.ps].add_shards();
      ref->set_variable(variable->spec.name());
      ref->set_shard(shard.shard);
      (*response_bytes)[shard.ps] +=
          shard.rows * RowElements(variable->spec.shape()) * EncodedFloatBytes(options_.wire_dtype);
      auto it = shard_state_.find({variable->spec.name(), shard.shard});
      if (it != shard_state_.end()) ref->set_min_version(it->second.min_version);
    }
  }
  return pulls;
}

class PsClientImpl::Placer final : public SlicePlacer {
 public:
  // Rows [0, rows) of shard `shard` of `variable`, of `shape`, go to
  // `first_row` onwards.
  void Expect(const std::string& variable, int shard, float* first_row, Shape shape) {
    targets_[{variable, shard}] = Target{first_row, std::move(shape)};
  }
  // Forgets what an earlier attempt placed.
  void Reset() {
    absl::MutexLock lock(&mu_);
    placed_.clear();
  }

  // Called from the threads that read one server's parts in parallel.
  float* Place(const ShardSlice& slice, size_t bytes) override {
    auto it = targets_.find({slice.variable(), slice.shard()});
    if (it == targets_.end()) return nullptr;
    const Target& target = it->second;
    const TensorProto& tensor = slice.tensor();
    const int64_t rows = SliceRows(slice);
    const int64_t row_elems = RowElements(target.shape);
    // Anything unexpected stays in the message, for Assemble to name.
    if (tensor.shape_size() != static_cast<int>(target.shape.size()) || rows < 1 ||
        rows > target.shape[0] || slice.row_offset() < 0 ||
        slice.row_offset() > target.shape[0] - rows ||
        !std::equal(tensor.shape().begin() + 1, tensor.shape().end(), target.shape.begin() + 1) ||
        bytes != static_cast<size_t>(rows * row_elems) * sizeof(float)) {
      return nullptr;
    }
    {
      absl::MutexLock lock(&mu_);
      placed_.insert({slice.variable(), slice.shard(), slice.row_offset(), rows});
    }
    return target.first_row + slice.row_offset() * row_elems;
  }

  // True when `slice` (which arrived without data) was read into place.
  bool WasPlaced(const ShardSlice& slice) const {
    const auto key =
        std::make_tuple(slice.variable(), slice.shard(), slice.row_offset(), SliceRows(slice));
    absl::MutexLock lock(&mu_);
    return slice.tensor().data().empty() && placed_.count(key) > 0;
  }

 private:
  struct Target {
    float* first_row;
    Shape shape;  // of the shard
  };
  std::map<std::pair<std::string, int>, Target> targets_;
  mutable absl::Mutex mu_;
  // variable, shard, row, rows
  std::set<std::tuple<std::string, int, int64_t, int64_t>> placed_ ABSL_GUARDED_BY(mu_);
};

std::vector<PsClientImpl::Placer> PsClientImpl::PrepareOutputs(
    const std::vector<const VariablePlacement*>& variables, const TensorViews& out) const {
  std::vector<Placer> placers(servers_.size());
  for (const VariablePlacement* variable : variables) {
    const VariableSpec& spec = variable->spec;
    const TensorView& tensor = out.at(spec.name());
    const int64_t row_elems = RowElements(tensor.shape);
    for (const ShardPlacement& shard : variable->shards) {
      Shape shard_shape = tensor.shape;
      shard_shape[0] = shard.rows;
      placers[shard.ps].Expect(spec.name(), shard.shard, tensor.data + shard.row_offset * row_elems,
                               std::move(shard_shape));
    }
  }
  return placers;
}

TensorViews PsClientImpl::SizeOutputs(const std::vector<const VariablePlacement*>& variables,
                                      TensorMap* out) {
  TensorViews views;
  for (const VariablePlacement* variable : variables) {
    const VariableSpec& spec = variable->spec;
    DenseTensor& tensor = (*out)[spec.name()];
    tensor.shape.assign(spec.shape().begin(), spec.shape().end());
    tensor.values.resize(NumElements(tensor.shape));
    views[spec.name()] = TensorView{tensor.shape, tensor.values.data()};
  }
  return views;
}

absl::StatusOr<std::vector<const VariablePlacement*>> PsClientImpl::ResolveViews(
    const TensorViews& out) const {
  std::vector<const VariablePlacement*> variables;
  for (const auto& [name, view] : out) {
    auto found = Find(name);
    if (!found.ok()) return found.status();
    if (absl::Status s = CheckView(absl::StrCat("pull into variable '", name, "'"), (*found)->spec,
                                   view.shape, view.data);
        !s.ok()) {
      return s;
    }
    variables.push_back(*found);
  }
  return variables;
}

absl::StatusOr<ConstTensorViews> PsClientImpl::ViewGradients(const TensorMap& gradients) {
  ConstTensorViews views;
  for (const auto& [name, grad] : gradients) {
    if (static_cast<int64_t>(grad.values.size()) != NumElements(grad.shape)) {
      return absl::InvalidArgumentError(absl::StrCat("gradient of variable '", name, "': shape ",
                                                     ShapeString(grad.shape), " with ",
                                                     grad.values.size(), " values"));
    }
    views[name] = ConstTensorView{grad.shape, grad.values.data()};
  }
  return views;
}

absl::Status PsClientImpl::Assemble(const std::vector<const VariablePlacement*>& variables,
                                    std::vector<PullResponse>& responses,
                                    const std::vector<Placer>& placers, const TensorViews& out) {
  // Each shard's slices, copied straight into place (where they were not
  // read into place already): no joining first.
  std::map<std::pair<std::string, int>, std::vector<const ShardSlice*>> received;
  for (const PullResponse& response : responses) {
    for (const ShardSlice& slice : response.slices()) {
      received[{slice.variable(), slice.shard()}].push_back(&slice);
    }
  }
  int64_t step = std::numeric_limits<int64_t>::max();
  std::vector<float> widened;  // a shard that came as bfloat16 or float16
  for (const VariablePlacement* variable : variables) {
    const VariableSpec& spec = variable->spec;
    const TensorView& tensor = out.at(spec.name());
    const int64_t row_elems = RowElements(tensor.shape);
    for (const ShardPlacement& shard : variable->shards) {
      auto it = received.find({spec.name(), shard.shard});
      const std::string what = absl::StrCat("ps ", shard.ps, " (", servers_[shard.ps]->address(),
                                            "): variable '", spec.name(), "' shard ", shard.shard);
      if (it == received.end()) {
        return absl::DataLossError(absl::StrCat(what, ": missing from the pull response"));
      }
      std::vector<const ShardSlice*>& slices = it->second;
      std::sort(slices.begin(), slices.end(), [](const ShardSlice* a, const ShardSlice* b) {
        return a->row_offset() < b->row_offset();
      });
      const int64_t version = slices[0]->version();
      int64_t row = 0;  // rows placed so far
      for (const ShardSlice* slice : slices) {
        const int64_t rows = SliceRows(*slice);
        if (slice->row_offset() != row || rows < 1 || row + rows > shard.rows ||
            slice->version() != version) {
          return absl::DataLossError(
              absl::StrCat(what, ": slice of ", rows, " rows at row ", slice->row_offset(),
                           ", version ", slice->version(), " does not continue rows [0, ", row,
                           ") of ", shard.rows, " at version ", version));
        }
        if (placers[shard.ps].WasPlaced(*slice)) {
          row += rows;
          continue;
        }
        Shape slice_shape = tensor.shape;
        slice_shape[0] = rows;
        auto values = DecodeFloatTensor(slice->tensor(), slice_shape, what, &widened);
        if (!values.ok()) return values.status();
        std::memcpy(tensor.data + (shard.row_offset + row) * row_elems, values->data(),
                    values->size() * sizeof(float));
        row += rows;
      }
      if (row != shard.rows) {
        return absl::DataLossError(
            absl::StrCat(what, ": rows [", row, ", ", shard.rows, ") missing from the pull"));
      }
      ShardState& state = shard_state_[{spec.name(), shard.shard}];
      if (version < state.pulled_version) {
        LOG_WARN(
            "{}: went back from version {} to {}: {} update(s) lost with its server's "
            "restart",
            what, state.pulled_version, version, state.pulled_version - version);
      }
      state.pulled_version = version;
      step = std::min(step, state.pulled_version);
    }
  }
  if (!variables.empty()) step_ = step;
  return absl::OkStatus();
}

absl::Status PsClientImpl::Pull(const std::vector<std::string>& names, TensorMap* out) {
  auto variables = Resolve(names);
  if (!variables.ok()) return variables.status();
  return PullVariables(*variables, SizeOutputs(*variables, out));
}

absl::Status PsClientImpl::PullInto(const TensorViews& out) {
  auto variables = ResolveViews(out);
  if (!variables.ok()) return variables.status();
  return PullVariables(*variables, out);
}

absl::Status PsClientImpl::PullVariables(const std::vector<const VariablePlacement*>& variables,
                                         const TensorViews& out) {
  std::vector<int64_t> response_bytes;
  std::vector<PullRequest> pulls = BuildPulls(variables, &response_bytes);
  std::vector<Placer> placers = PrepareOutputs(variables, out);
  std::vector<PullResponse> responses(servers_.size());
  std::vector<bool> involved(servers_.size());
  for (size_t ps = 0; ps < servers_.size(); ++ps) involved[ps] = pulls[ps].shards_size() > 0;
  std::vector<bool> recovered(servers_.size());
  absl::Status status = ForEachServer(involved, "pull", [&](int ps, absl::Time deadline) {
    placers[ps].Reset();  // this may be a retry
    auto pulled = servers_[ps]->Pull(pulls[ps], response_bytes[ps], deadline, &placers[ps]);
    if (LostState(pulled.status())) {
      recovered[ps] = true;
      pulled = RecoverAndPull(ps, pulls[ps], response_bytes[ps], deadline, &placers[ps]);
    }
    if (!pulled.ok()) return pulled.status();
    responses[ps] = *std::move(pulled);
    return absl::OkStatus();
  });
  ForgetVersions(recovered);
  if (!status.ok()) return status;
  return Assemble(variables, responses, placers, out);
}

PsClientImpl::Pushes::Pushes(size_t servers) : live_(std::make_shared<Live>()) {
  for (size_t ps = 0; ps < servers; ++ps) {
    {
      absl::MutexLock lock(&live_->mu);
      ++live_->parts;
    }
    parts_.emplace_back(new OutgoingPush, [live = live_](OutgoingPush* part) {
      delete part;
      absl::MutexLock lock(&live->mu);
      --live->parts;
    });
  }
}

PsClientImpl::Pushes::~Pushes() {
  if (live_ == nullptr) return;  // moved from
  parts_.clear();
  absl::MutexLock lock(&live_->mu);
  live_->mu.Await(absl::Condition(
      +[](int* parts) { return *parts == 0; }, &live_->parts));
}

absl::StatusOr<PsClientImpl::Pushes> PsClientImpl::BuildPushes(const ConstTensorViews& gradients) {
  if (options_.worker_id < 0) {
    return absl::FailedPreconditionError(
        "this client reads only (worker_id -1): pushes need a worker's replica id");
  }
  // The push's idempotency key: the same on every retry and every part.
  uint64_t push_id = 0;
  while (push_id == 0) push_id = push_ids_();
  // New each step: a transport may still be sending the last step's bytes.
  Pushes per_ps(servers_.size());
  for (size_t ps = 0; ps < per_ps.size(); ++ps) {
    PushRequest& request = per_ps[ps]->request;
    request.set_worker_id(options_.worker_id);
    if (policy_->CarriesClock()) request.set_clock(clock_);
    request.set_push_id(push_id);
    request.set_incarnation(incarnations_[ps]);
  }
  for (const auto& [name, grad] : gradients) {
    auto found = Find(name);
    if (!found.ok()) return found.status();
    if (absl::Status s = CheckView(absl::StrCat("gradient of variable '", name, "'"),
                                   (*found)->spec, grad.shape, grad.data);
        !s.ok()) {
      return s;
    }
    const int64_t row_elems = RowElements(grad.shape);
    for (const ShardPlacement& shard : (*found)->shards) {
      auto it = shard_state_.find({name, shard.shard});
      Shape shard_shape = grad.shape;
      shard_shape[0] = shard.rows;
      if (absl::Status s = AppendShardSlices(
              name, shard.shard, it == shard_state_.end() ? 0 : it->second.pulled_version,
              shard_shape,
              absl::MakeConstSpan(grad.data + shard.row_offset * row_elems, shard.rows * row_elems),
              options_.wire_dtype, kChunkBytes, per_ps[shard.ps]->request.mutable_gradients(),
              options_.wire_dtype == DT_FLOAT ? &per_ps[shard.ps]->lent : nullptr);
          !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("gradient of ", s.message()));
      }
    }
  }
  return per_ps;
}

void PsClientImpl::AfterPush(const Pushes& pushes, const std::vector<bool>& dropped) {
  for (size_t ps = 0; ps < pushes.size(); ++ps) {
    if (dropped[ps]) continue;
    for (const ShardSlice& slice : pushes[ps]->request.gradients()) {
      ShardState& state = shard_state_[{slice.variable(), slice.shard()}];
      state.min_version = policy_->MinVersionAfterPush(state.pulled_version);
    }
  }
  ++clock_;
}

PushStats PsClientImpl::Summarize(
    const google::protobuf::RepeatedPtrField<ShardPushResult>& results, PushStats stats) const {
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

absl::StatusOr<PushStats> PsClientImpl::Push(const TensorMap& gradients) {
  auto views = ViewGradients(gradients);
  if (!views.ok()) return views.status();
  return PushFrom(*views);
}

absl::StatusOr<PushStats> PsClientImpl::PushFrom(const ConstTensorViews& gradients) {
  absl::StatusOr<Pushes> built = BuildPushes(gradients);
  if (!built.ok()) return built.status();
  const Pushes& pushes = *built;
  std::vector<PushResponse> responses(servers_.size());
  std::vector<bool> involved(servers_.size());
  for (size_t ps = 0; ps < servers_.size(); ++ps) {
    involved[ps] = pushes[ps]->request.gradients_size() > 0 || policy_->PushReachesEveryServer();
  }
  std::vector<bool> recovered(servers_.size());
  absl::Status status = PushEach<PushResponse>(
      involved, "push",
      [&](int ps, absl::Time deadline) { return servers_[ps]->Push(pushes[ps], deadline); },
      &responses, &recovered);
  if (!status.ok()) return status;
  PushStats stats;
  for (const PushResponse& response : responses) stats = Summarize(response.results(), stats);
  for (size_t ps = 0; ps < servers_.size(); ++ps) {
    if (recovered[ps]) stats.lost += pushes[ps]->request.gradients_size();
  }
  AfterPush(pushes, recovered);
  return stats;
}

absl::StatusOr<PushStats> PsClientImpl::PushPull(const TensorMap& gradients,
                                                 const std::vector<std::string>& names,
                                                 TensorMap* out) {
  auto views = ViewGradients(gradients);
  if (!views.ok()) return views.status();
  auto variables = Resolve(names);
  if (!variables.ok()) return variables.status();
  return PushPullVariables(*views, *variables, SizeOutputs(*variables, out));
}

absl::StatusOr<PushStats> PsClientImpl::PushPullInto(const ConstTensorViews& gradients,
                                                     const TensorViews& out) {
  auto variables = ResolveViews(out);
  if (!variables.ok()) return variables.status();
  return PushPullVariables(gradients, *variables, out);
}

absl::StatusOr<PushStats> PsClientImpl::PushPullVariables(
    const ConstTensorViews& gradients, const std::vector<const VariablePlacement*>& variables,
    const TensorViews& out) {
  absl::StatusOr<Pushes> built = BuildPushes(gradients);
  if (!built.ok()) return built.status();
  const Pushes& pushes = *built;
  // The pull half runs after the push: it waits for the step the push joined
  // (sync) and runs at the next clock (SSP). Undone if the call fails.
  const auto state_before = shard_state_;
  const int64_t clock_before = clock_;
  AfterPush(pushes, std::vector<bool>(servers_.size(), false));
  std::vector<int64_t> response_bytes;
  std::vector<PullRequest> pulls = BuildPulls(variables, &response_bytes);
  std::vector<Placer> placers = PrepareOutputs(variables, out);
  std::vector<PullResponse> responses(servers_.size());
  std::vector<bool> involved(servers_.size());
  for (size_t ps = 0; ps < servers_.size(); ++ps) {
    involved[ps] = pushes[ps]->request.gradients_size() > 0 || pulls[ps].shards_size() > 0 ||
                   policy_->PushReachesEveryServer();
  }
  std::vector<bool> recovered(servers_.size());
  absl::Status status = ForEachServer(involved, "push-pull", [&](int ps, absl::Time deadline) {
    placers[ps].Reset();  // this may be a retry
    auto pulled =
        servers_[ps]->PushPull(pushes[ps], pulls[ps], response_bytes[ps], deadline, &placers[ps]);
    if (LostState(pulled.status())) {
      recovered[ps] = true;  // the push is dropped
      pulled = RecoverAndPull(ps, pulls[ps], response_bytes[ps], deadline, &placers[ps]);
    }
    if (!pulled.ok()) return pulled.status();
    responses[ps] = *std::move(pulled);
    return absl::OkStatus();
  });
  if (!status.ok()) {
    shard_state_ = state_before;
    clock_ = clock_before;
    ForgetVersions(recovered);
    return status;
  }
  ForgetVersions(recovered);
  PushStats stats;
  for (const PullResponse& response : responses) stats = Summarize(response.push_results(), stats);
  for (size_t ps = 0; ps < servers_.size(); ++ps) {
    if (recovered[ps]) stats.lost += pushes[ps]->request.gradients_size();
  }
  if (absl::Status s = Assemble(variables, responses, placers, out); !s.ok()) return s;
  return stats;
}

absl::Status PsClientImpl::CreateTables(const std::vector<EmbeddingTableSpec>& specs) {
  CreateShardsRequest request;
  for (const EmbeddingTableSpec& spec : specs) *request.add_tables() = spec;
  std::vector<uint64_t> incarnations(servers_.size(), 0);
  absl::Status status = ForEachServer(
      std::vector<bool>(servers_.size(), true), "create tables", [&](int ps, absl::Time deadline) {
        auto created = servers_[ps]->CreateShards(request, deadline);
        if (created.ok()) incarnations[ps] = created->incarnation();
        return created.status();
      });
  if (!status.ok()) return status;
  create_requests_.resize(servers_.size());
  for (size_t ps = 0; ps < servers_.size(); ++ps) {
    // A server that restarted since the variables were made keeps its old
    // incarnation here: the next call is ABORTED and recovers it whole.
    if (incarnations_[ps] == 0) incarnations_[ps] = incarnations[ps];
    for (const EmbeddingTableSpec& spec : specs) {
      if (tables_.count(spec.name()) == 0) *create_requests_[ps].add_tables() = spec;
    }
  }
  for (const EmbeddingTableSpec& spec : specs) tables_[spec.name()] = spec;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PsClientImpl::TableWidth(const std::string& table) const {
  auto it = tables_.find(table);
  if (it == tables_.end()) {
    return absl::NotFoundError(
        absl::StrCat("embedding table '", table, "' was not created by this client"));
  }
  return it->second.width();
}

absl::StatusOr<std::vector<RoutedIds>> PsClientImpl::RouteLookups(
    const std::vector<TableIds>& lookups, const std::vector<size_t>& row_floats,
    const std::string& what) const {
  if (row_floats.size() != lookups.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rows of embedding tables: ", lookups.size(),
                                                   " lookups with ", row_floats.size(), " ", what,
                                                   " buffers"));
  }
  std::vector<RoutedIds> routed;
  for (size_t i = 0; i < lookups.size(); ++i) {
    absl::StatusOr<int64_t> width = TableWidth(lookups[i].table);
    if (!width.ok()) return width.status();
    if (row_floats[i] != lookups[i].ids.size() * *width) {
      return absl::InvalidArgumentError(
          absl::StrCat("embedding table '", lookups[i].table, "': ", row_floats[i], " ", what,
                       " floats for ", lookups[i].ids.size(), " ids of width ", *width));
    }
    routed.push_back(RouteIds(lookups[i].ids, num_servers()));
  }
  return routed;
}

absl::Status PsClientImpl::PullRows(const std::vector<TableIds>& lookups,
                                    std::vector<std::vector<float>>* rows) {
  rows->resize(lookups.size());
  std::vector<absl::Span<float>> out;
  for (size_t i = 0; i < lookups.size(); ++i) {
    absl::StatusOr<int64_t> width = TableWidth(lookups[i].table);
    if (!width.ok()) return width.status();
    (*rows)[i].resize(lookups[i].ids.size() * *width);
    out.emplace_back((*rows)[i]);
  }
  return PullRowsInto(lookups, out);
}

absl::Status PsClientImpl::PullRowsInto(const std::vector<TableIds>& lookups,
                                        const std::vector<absl::Span<float>>& out) {
  std::vector<size_t> row_floats;
  for (absl::Span<float> rows : out) row_floats.push_back(rows.size());
  auto routed = RouteLookups(lookups, row_floats, "output");
  if (!routed.ok()) return routed.status();
  std::vector<PullRowsRequest> requests(servers_.size());
  std::vector<bool> involved(servers_.size());
  for (size_t ps = 0; ps < servers_.size(); ++ps) {
    PullRowsRequest& request = requests[ps];
    if (options_.worker_id >= 0) request.set_worker_id(options_.worker_id);
    if (policy_->CarriesClock() && options_.worker_id >= 0) request.set_clock(clock_);
    request.set_incarnation(incarnations_[ps]);
    for (size_t i = 0; i < lookups.size(); ++i) {
      TableRows* part = request.add_tables();
      part->set_table(lookups[i].table);
      for (int32_t u : (*routed)[i].by_server[ps]) part->add_ids((*routed)[i].unique[u]);
      auto it = table_state_.find({lookups[i].table, static_cast<int>(ps)});
      if (it != table_state_.end()) part->set_version(it->second.min_version);
      involved[ps] = involved[ps] || part->ids_size() > 0;
    }
  }
  std::vector<PullRowsResponse> responses(servers_.size());
  std::vector<bool> recovered(servers_.size());
  absl::Status status = ForEachServer(involved, "pull rows", [&](int ps, absl::Time deadline) {
    auto pulled = servers_[ps]->PullRows(requests[ps], deadline);
    if (LostState(pulled.status())) {
      recovered[ps] = true;
      if (absl::Status s = Recover(ps, deadline); !s.ok()) return s;
      PullRowsRequest again = requests[ps];
      again.set_incarnation(incarnations_[ps]);
      for (TableRows& part : *again.mutable_tables()) part.set_version(0);
      pulled = servers_[ps]->PullRows(again, deadline);
    }
    if (!pulled.ok()) return pulled.status();
    if (pulled->tables_size() != requests[ps].tables_size()) {
      return absl::DataLossError(absl::StrCat("pull of rows answered ", pulled->tables_size(),
                                              " tables of ", requests[ps].tables_size()));
    }
    responses[ps] = *std::move(pulled);
    return absl::OkStatus();
  });
  ForgetVersions(recovered);
  if (!status.ok()) return status;
  for (size_t i = 0; i < lookups.size(); ++i) {
    const int64_t width = *TableWidth(lookups[i].table);
    const RoutedIds& r = (*routed)[i];
    std::vector<float> unique_rows(r.unique.size() * width);
    for (size_t ps = 0; ps < servers_.size(); ++ps) {
      if (!involved[ps]) continue;
      const TableRows& part = responses[ps].tables(static_cast<int>(i));
      if (part.values_size() != static_cast<int64_t>(r.by_server[ps].size()) * width) {
        return absl::DataLossError(absl::StrCat("ps ", ps, ": embedding table '", lookups[i].table,
                                                "' answered ", part.values_size(), " floats for ",
                                                r.by_server[ps].size(), " ids of width ", width));
      }
      for (size_t k = 0; k < r.by_server[ps].size(); ++k) {
        std::copy_n(part.values().data() + k * width, width,
                    unique_rows.begin() + r.by_server[ps][k] * width);
      }
      table_state_[{lookups[i].table, static_cast<int>(ps)}].pulled_version = part.version();
    }
    ScatterRows(r, unique_rows, width, out[i]);
  }
  return absl::OkStatus();
}

absl::StatusOr<PushStats> PsClientImpl::PushRows(
    const std::vector<TableIds>& lookups, const std::vector<absl::Span<const float>>& grads) {
  std::vector<size_t> row_floats;
  for (absl::Span<const float> rows : grads) row_floats.push_back(rows.size());
  auto routed = RouteLookups(lookups, row_floats, "gradient");
  if (!routed.ok()) return routed.status();
  std::vector<PushRowsRequest> requests(servers_.size());
  std::vector<bool> involved(servers_.size(), policy_->PushReachesEveryServer());
  uint64_t push_id = 0;  // the same on every retry
  while (push_id == 0) push_id = push_ids_();
  for (size_t ps = 0; ps < servers_.size(); ++ps) {
    requests[ps].set_worker_id(options_.worker_id);
    requests[ps].set_incarnation(incarnations_[ps]);
    requests[ps].set_push_id(push_id);
  }
  for (size_t i = 0; i < lookups.size(); ++i) {
    const int64_t width = *TableWidth(lookups[i].table);
    const RoutedIds& r = (*routed)[i];
    const std::vector<float> sums = SumRowsPerId(r, grads[i], width);
    for (size_t ps = 0; ps < servers_.size(); ++ps) {
      if (r.by_server[ps].empty() && !policy_->PushReachesEveryServer()) continue;
      TableRows* part = requests[ps].add_tables();
      part->set_table(lookups[i].table);
      auto it = table_state_.find({lookups[i].table, static_cast<int>(ps)});
      part->set_version(it == table_state_.end() ? 0 : it->second.pulled_version);
      part->mutable_ids()->Reserve(static_cast<int>(r.by_server[ps].size()));
      part->mutable_values()->Reserve(static_cast<int>(r.by_server[ps].size() * width));
      for (int32_t u : r.by_server[ps]) {
        part->add_ids(r.unique[u]);
        part->mutable_values()->Add(sums.begin() + u * width, sums.begin() + (u + 1) * width);
      }
      involved[ps] = true;
    }
  }
  std::vector<PushRowsResponse> responses(servers_.size());
  std::vector<bool> recovered(servers_.size());
  absl::Status status = PushEach<PushRowsResponse>(
      involved, "push rows",
      [&](int ps, absl::Time deadline) { return servers_[ps]->PushRows(requests[ps], deadline); },
      &responses, &recovered);
  if (!status.ok()) return status;
  PushStats stats;
  for (size_t ps = 0; ps < servers_.size(); ++ps) {
    stats = Summarize(responses[ps].results(), stats);
    if (recovered[ps]) {
      stats.lost += requests[ps].tables_size();
      continue;
    }
    for (const TableRows& part : requests[ps].tables()) {
      ShardState& state = table_state_[{part.table(), static_cast<int>(ps)}];
      state.min_version = policy_->MinVersionAfterPush(state.pulled_version);
    }
  }
  return stats;
}

template <typename Response>
absl::Status PsClientImpl::PushEach(
    const std::vector<bool>& involved, const std::string& what,
    const std::function<absl::StatusOr<Response>(int ps, absl::Time deadline)>& push,
    std::vector<Response>* responses, std::vector<bool>* recovered) {
  absl::Status status = ForEachServer(involved, what, [&](int ps, absl::Time deadline) {
    absl::StatusOr<Response> pushed = push(ps, deadline);
    if (LostState(pushed.status())) {
      (*recovered)[ps] = true;  // computed from values it no longer has
      return Recover(ps, deadline);
    }
    if (!pushed.ok()) return pushed.status();
    (*responses)[ps] = *std::move(pushed);
    return absl::OkStatus();
  });
  ForgetVersions(*recovered);
  return status;
}

absl::Status PsClientImpl::Recover(int ps, absl::Time deadline) {
  auto created = servers_[ps]->CreateShards(create_requests_[ps], deadline);
  if (!created.ok()) return created.status();
  incarnations_[ps] = created->incarnation();
  LOG_WARN("ps {} ({}) restarted: its {} shard(s) and {} table(s) are created again{}", ps,
           servers_[ps]->address(), create_requests_[ps].shards_size(),
           create_requests_[ps].tables_size(),
           created->restored() > 0 ? ", from its checkpoint" : "");
  return absl::OkStatus();
}

absl::StatusOr<PullResponse> PsClientImpl::RecoverAndPull(int ps, PullRequest pull,
                                                          int64_t response_bytes,
                                                          absl::Time deadline, Placer* placer) {
  if (absl::Status s = Recover(ps, deadline); !s.ok()) return s;
  // What the restarted server has, with no versions to wait for.
  pull.set_incarnation(incarnations_[ps]);
  for (ShardRef& ref : *pull.mutable_shards()) ref.set_min_version(0);
  placer->Reset();
  return servers_[ps]->Pull(pull, response_bytes, deadline, placer);
}

void PsClientImpl::ForgetVersions(const std::vector<bool>& recovered) {
  for (const VariablePlacement& variable : placement_) {
    for (const ShardPlacement& shard : variable.shards) {
      if (recovered[shard.ps]) shard_state_[{variable.spec.name(), shard.shard}].min_version = 0;
    }
  }
  for (auto& [key, state] : table_state_) {
    if (recovered[key.second]) state = ShardState();
  }
}

absl::Status PsClientImpl::Heartbeat() { return SendHeartbeat(false).status(); }

absl::Status PsClientImpl::Finish() { return SendHeartbeat(true).status(); }

absl::Status PsClientImpl::AwaitJobStart(const std::atomic<bool>* stop) {
  if (options_.worker_id < 0 || !policy_->AwaitsEveryWorker()) return absl::OkStatus();
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

absl::StatusOr<std::vector<HeartbeatResponse>> PsClientImpl::SendHeartbeat(bool finished) {
  if (options_.worker_id < 0) {
    return absl::FailedPreconditionError("this client reads only (worker_id -1): it has no lease");
  }
  HeartbeatRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_finished(finished);
  std::vector<HeartbeatResponse> answers(servers_.size());
  absl::Status status = ForEachServer(std::vector<bool>(servers_.size(), true), "heartbeat",
                                      [&](int ps, absl::Time deadline) {
                                        auto answer = servers_[ps]->Heartbeat(request, deadline);
                                        if (!answer.ok()) return answer.status();
                                        answers[ps] = *std::move(answer);
                                        return absl::OkStatus();
                                      });
  if (!status.ok()) return status;
  return answers;
}

void PsClientImpl::StartHeartbeats(absl::Duration interval) {
  CHECK(!heartbeat_thread_.joinable());
  heartbeat_thread_ = std::thread([this, interval] {
    while (!stop_heartbeats_.WaitForNotificationWithTimeout(interval)) {
      if (absl::Status s = Heartbeat(); !s.ok()) LOG_WARN("heartbeat failed: {}", s.message());
    }
  });
}

absl::StatusOr<std::vector<DescribeResponse>> PsClientImpl::Describe() {
  std::vector<DescribeResponse> responses(servers_.size());
  absl::Status status = ForEachServer(std::vector<bool>(servers_.size(), true), "describe",
                                      [&](int ps, absl::Time deadline) {
                                        auto described = servers_[ps]->Describe(deadline);
                                        if (described.ok()) responses[ps] = *described;
                                        return described.status();
                                      });
  if (!status.ok()) return status;
  return responses;
}

absl::StatusOr<std::vector<SaveCheckpointResponse>> PsClientImpl::SaveCheckpoint(int64_t step) {
  SaveCheckpointRequest request;
  request.set_step(step);
  std::vector<SaveCheckpointResponse> responses(servers_.size());
  absl::Status status = ForEachServer(
      std::vector<bool>(servers_.size(), true), "checkpoint", [&](int ps, absl::Time deadline) {
        auto saved = servers_[ps]->SaveCheckpoint(request, deadline);
        if (saved.ok()) responses[ps] = *saved;
        return saved.status();
      });
  if (!status.ok()) return status;
  return responses;
}

absl::Status PsClientImpl::JobDone(const std::string& reason) {
  return ForEachServer(
      std::vector<bool>(servers_.size(), true), "job done",
      [&](int ps, absl::Time deadline) { return servers_[ps]->JobDone(reason, deadline); });
}

}  // namespace fulcrum
