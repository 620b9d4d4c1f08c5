#include "client/dense_calls.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/placement.h"
#include "common/slices.h"

namespace fulcrum {
namespace {

// Shards larger than this are worth splitting: a server applies a push,
// and answers a pull, a whole shard at a time (see CreateVariables).
constexpr int64_t kLargeShardBytes = int64_t{16} << 20;

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

absl::Status DenseCalls::CreateVariables(const std::vector<VariableSpec>& specs,
                                         const ConstTensorViews& initial_values) {
  auto placed = PlaceVariables(specs, servers_.size());
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
  const auto row_bytes_of = [](const VariablePlacement& variable) {
    return RowElements(variable.spec.shape()) * static_cast<int64_t>(sizeof(float));
  };
  std::vector<PlacementUnitSpec> units;
  for (const VariablePlacement& variable : *placed) {
    const int64_t row_bytes = row_bytes_of(variable);
    for (const ShardPlacement& shard : variable.shards) {
      units.push_back({ShardKey(variable.spec.name(), shard.shard), shard.rows * row_bytes});
    }
  }
  // Of the copies; none unreplicated.
  absl::StatusOr<Placement> table = servers_.PlaceCopies(units);
  if (!table.ok()) return table.status();
  std::vector<CreateShardsRequest> requests(servers_.size());
  int unit = 0;  // the shard's index among all variables' shards
  for (const VariablePlacement& variable : *placed) {
    auto value = initial_values.find(variable.spec.name());
    const int64_t row_bytes = row_bytes_of(variable);
    int64_t largest = 0;
    for (const ShardPlacement& shard : variable.shards) largest = std::max(largest, shard.rows);
    if (largest * row_bytes > kLargeShardBytes) {
      LOG_WARN(
          "variable '{}' has a shard of {:.1f} MiB: a server applies pushes, and pipelines "
          "push-pulls, a whole shard at a time, so shards of a few MiB are faster and hold "
          "less memory (partitioner MAX_SIZE, e.g. max_shard_bytes 4194304)",
          variable.spec.name(), static_cast<double>(largest * row_bytes) / (1 << 20));
    }
    if (value != initial_values.end() && largest * row_bytes > kMaxInitialShardBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "initial value of '%s': a shard of %.1f MiB, more than one call carries (%d MiB); "
          "give the variable a partitioner (MAX_SIZE, e.g. max_shard_bytes 4194304: "
          "fulcrum.max_size(4 << 20) in Python)",
          variable.spec.name(), static_cast<double>(largest * row_bytes) / (1 << 20),
          kMaxInitialShardBytes >> 20));
    }
    for (const ShardPlacement& shard : variable.shards) {
      // The shard on server `ps`, as `copy` of it (none: unreplicated);
      // every copy starts from the same values.
      auto add = [&](int ps, const ShardCopy& copy) {
        CreateShardsRequest& request = requests[ps];
        if (value != initial_values.end()) {
          // One entry per shard once any shard of the request has values.
          while (request.initial_values_size() < request.shards_size()) {
            request.add_initial_values();
          }
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
        if (table->units_size() > 0) *request.add_copies() = copy;
      };
      if (table->units_size() == 0) {
        add(shard.ps, ShardCopy());
        continue;
      }
      for (const auto& [ps, copy] : servers_.CopiesOf(table->units(unit++))) add(ps, copy);
    }
  }
  absl::StatusOr<std::vector<uint64_t>> incarnations =
      servers_.CreateEverywhere(&requests, *table, "create variables");
  if (!incarnations.ok()) return incarnations.status();
  placement_ = *std::move(placed);
  servers_.RememberCreated(std::move(requests), *std::move(incarnations));
  index_.clear();
  shard_state_.clear();
  for (size_t i = 0; i < placement_.size(); ++i) index_[placement_[i].spec.name()] = i;
  routed_epoch_ = 0;
  if (table->units_size() > 0) Reroute();
  return absl::OkStatus();
}

bool DenseCalls::Reroute(const absl::Status& failed) {
  if (!servers_.PlacementMovedOn(failed, routed_epoch_)) return false;
  const Placement table = servers_.placement();
  routed_epoch_ = table.epoch();
  std::map<int32_t, std::string> addresses;  // of each server id
  for (const PlacedServer& server : table.servers()) {
    addresses[server.id()] = server.address();
    // A server added to the running job joins this client's set (ssp:
    // every push reaches it, so that it keeps every worker's clock).
    servers_.Add(server.address());
  }
  std::map<std::string, std::string> primaries;  // by unit key
  std::map<std::string, std::string> readable;   // by unit key: a ready backup's address
  for (const PlacedUnit& unit : table.units()) {
    primaries[unit.key()] = addresses[unit.copies(0).server()];
    for (int c = 1; c < unit.copies_size(); ++c) {
      if (!unit.copies(c).catching_up()) {
        readable[unit.key()] = addresses[unit.copies(c).server()];
        break;
      }
    }
  }
  read_from_.clear();
  if (servers_.options().read_from_backups && servers_.options().worker_id < 0) {
    for (const VariablePlacement& variable : placement_) {
      for (const ShardPlacement& shard : variable.shards) {
        const auto found = readable.find(ShardKey(variable.spec.name(), shard.shard));
        const int ps = found == readable.end() ? -1 : servers_.IndexOf(found->second);
        if (ps >= 0) read_from_[{variable.spec.name(), shard.shard}] = ps;
      }
    }
  }
  for (VariablePlacement& variable : placement_) {
    for (ShardPlacement& shard : variable.shards) {
      const auto found = primaries.find(ShardKey(variable.spec.name(), shard.shard));
      if (found == primaries.end() || found->second == servers_.address(shard.ps)) continue;
      const int ps = servers_.IndexOf(found->second);
      if (ps < 0) {
        LOG_ERROR(
            "variable '{}' shard {}: its primary in the placement table (epoch {}) is {}, a "
            "server this client was not given",
            variable.spec.name(), shard.shard, table.epoch(), found->second);
        continue;
      }
      LOG_INFO("variable '{}' shard {}: its primary is now ps {} ({}), placement epoch {}",
               variable.spec.name(), shard.shard, ps, found->second, table.epoch());
      shard.ps = ps;
    }
  }
  return true;
}

int DenseCalls::PullServer(const std::string& variable, const ShardPlacement& shard) const {
  const auto found = read_from_.find({variable, shard.shard});
  return found == read_from_.end() ? shard.ps : found->second;
}

absl::StatusOr<const VariablePlacement*> DenseCalls::Find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(
        absl::StrCat("variable '", name, "' was not created through this client"));
  }
  return &placement_[it->second];
}

absl::StatusOr<std::vector<const VariablePlacement*>> DenseCalls::Resolve(
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

std::vector<PullRequest> DenseCalls::BuildPulls(
    const std::vector<const VariablePlacement*>& variables,
    std::vector<int64_t>* response_bytes) const {
  const PsClientOptions& options = servers_.options();
  std::vector<PullRequest> pulls(servers_.size());
  response_bytes->assign(servers_.size(), 0);
  for (int ps = 0; ps < servers_.size(); ++ps) {
    if (options.worker_id >= 0) pulls[ps].set_worker_id(options.worker_id);
    if (options.worker_id >= 0 && servers_.policy().CarriesClock()) {
      pulls[ps].set_clock(servers_.clock());
    }
    pulls[ps].set_incarnation(servers_.incarnation(ps));
    pulls[ps].set_wire_dtype(options.wire_dtype);
    pulls[ps].set_placement_epoch(routed_epoch_);
  }
  for (const VariablePlacement* variable : variables) {
    for (const ShardPlacement& shard : variable->shards) {
      const int ps = PullServer(variable->spec.name(), shard);
      ShardRef* ref = pulls[ps].add_shards();
      ref->set_variable(variable->spec.name());
      ref->set_shard(shard.shard);
      (*response_bytes)[ps] +=
          shard.rows * RowElements(variable->spec.shape()) * EncodedFloatBytes(options.wire_dtype);
      auto it = shard_state_.find({variable->spec.name(), shard.shard});
      if (it != shard_state_.end()) ref->set_min_version(it->second.min_version);
    }
  }
  return pulls;
}

class DenseCalls::Placer final : public SlicePlacer {
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

std::vector<DenseCalls::Placer> DenseCalls::PrepareOutputs(
    const std::vector<const VariablePlacement*>& variables, const TensorViews& out) const {
  std::vector<Placer> placers(servers_.size());
  for (const VariablePlacement* variable : variables) {
    const VariableSpec& spec = variable->spec;
    const TensorView& tensor = out.at(spec.name());
    const int64_t row_elems = RowElements(tensor.shape);
    for (const ShardPlacement& shard : variable->shards) {
      Shape shard_shape = tensor.shape;
      shard_shape[0] = shard.rows;
      placers[PullServer(spec.name(), shard)].Expect(spec.name(), shard.shard,
                                                     tensor.data + shard.row_offset * row_elems,
                                                     std::move(shard_shape));
    }
  }
  return placers;
}

TensorViews DenseCalls::SizeOutputs(const std::vector<const VariablePlacement*>& variables,
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

absl::StatusOr<std::vector<const VariablePlacement*>> DenseCalls::ResolveViews(
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

absl::StatusOr<ConstTensorViews> DenseCalls::ViewGradients(const TensorMap& gradients) {
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

absl::Status DenseCalls::Assemble(const std::vector<const VariablePlacement*>& variables,
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
      const int ps = PullServer(spec.name(), shard);
      const std::string what = absl::StrCat("ps ", ps, " (", servers_.address(ps), "): variable '",
                                            spec.name(), "' shard ", shard.shard);
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
        if (placers[ps].WasPlaced(*slice)) {
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
      ShardVersions& state = shard_state_[{spec.name(), shard.shard}];
      if (version < state.pulled_version) {
        LOG_WARN(
            "{}: went back from version {} to {}: {} update(s) lost with its server's "
            "restart",
            what, state.pulled_version, version, state.pulled_version - version);
      }
      state.pulled_version = version;
      state.restarted = false;
      step = std::min(step, state.pulled_version);
    }
  }
  if (!variables.empty()) step_ = step;
  return absl::OkStatus();
}

absl::Status DenseCalls::Pull(const std::vector<std::string>& names, TensorMap* out) {
  auto variables = Resolve(names);
  if (!variables.ok()) return variables.status();
  return PullVariables(*variables, SizeOutputs(*variables, out));
}

absl::Status DenseCalls::PullInto(const TensorViews& out) {
  auto variables = ResolveViews(out);
  if (!variables.ok()) return variables.status();
  return PullVariables(*variables, out);
}

absl::Status DenseCalls::PullVariables(const std::vector<const VariablePlacement*>& variables,
                                       const TensorViews& out) {
  return Rerouting("pull", [&] { return PullOnce(variables, out); });
}

absl::Status DenseCalls::PullOnce(const std::vector<const VariablePlacement*>& variables,
                                  const TensorViews& out) {
  std::vector<int64_t> response_bytes;
  std::vector<PullRequest> pulls = BuildPulls(variables, &response_bytes);
  std::vector<Placer> placers = PrepareOutputs(variables, out);
  std::vector<PullResponse> responses(servers_.size());
  std::vector<bool> involved(servers_.size());
  for (int ps = 0; ps < servers_.size(); ++ps) involved[ps] = pulls[ps].shards_size() > 0;
  std::vector<bool> recovered;
  absl::Status status = servers_.ForEachServerRecovering(
      involved, "pull",
      [&](int ps, absl::Time deadline) {
        placers[ps].Reset();  // this may be a retry
        return Keep(servers_.server(ps).Pull(pulls[ps], response_bytes[ps], deadline, &placers[ps]),
                    &responses[ps]);
      },
      [&](int ps, absl::Time deadline) {
        return Keep(PullRecovered(ps, pulls[ps], response_bytes[ps], deadline, &placers[ps]),
                    &responses[ps]);
      },
      &recovered);
  if (!status.ok()) return status;
  return Assemble(variables, responses, placers, out);
}

absl::StatusOr<PullResponse> DenseCalls::PullRecovered(int ps, PullRequest pull,
                                                       int64_t response_bytes, absl::Time deadline,
                                                       Placer* placer) {
  pull.set_incarnation(servers_.incarnation(ps));
  for (ShardRef& ref : *pull.mutable_shards()) ref.set_min_version(0);
  placer->Reset();
  return servers_.server(ps).Pull(pull, response_bytes, deadline, placer);
}

DenseCalls::Pushes::Pushes(size_t servers) : live_(std::make_shared<Live>()) {
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

DenseCalls::Pushes::~Pushes() {
  if (live_ == nullptr) return;  // moved from
  parts_.clear();
  absl::MutexLock lock(&live_->mu);
  live_->mu.Await(absl::Condition(
      +[](int* parts) { return *parts == 0; }, &live_->parts));
}

absl::StatusOr<DenseCalls::Pushes> DenseCalls::BuildPushes(const ConstTensorViews& gradients,
                                                           uint64_t push_id) {
  const PsClientOptions& options = servers_.options();
  if (options.worker_id < 0) {
    return absl::FailedPreconditionError(
        "this client reads only (worker_id -1): pushes need a worker's replica id");
  }
  // New each step: a transport may still be sending the last step's bytes.
  Pushes per_ps(servers_.size());
  for (int ps = 0; ps < servers_.size(); ++ps) {
    PushRequest& request = per_ps[ps]->request;
    request.set_worker_id(options.worker_id);
    if (servers_.policy().CarriesClock()) request.set_clock(servers_.clock());
    request.set_push_id(push_id);
    request.set_incarnation(servers_.incarnation(ps));
    request.set_placement_epoch(routed_epoch_);
    request.set_trace(servers_.Tracing());
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
      const int64_t computed_at =
          it == shard_state_.end() || it->second.restarted ? 0 : it->second.pulled_version;
      Shape shard_shape = grad.shape;
      shard_shape[0] = shard.rows;
      if (absl::Status s = AppendShardSlices(
              name, shard.shard, computed_at, shard_shape,
              absl::MakeConstSpan(grad.data + shard.row_offset * row_elems, shard.rows * row_elems),
              options.wire_dtype, kChunkBytes, per_ps[shard.ps]->request.mutable_gradients(),
              options.wire_dtype == DT_FLOAT ? &per_ps[shard.ps]->lent : nullptr);
          !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("gradient of ", s.message()));
      }
    }
  }
  return per_ps;
}

void DenseCalls::KeepAccumulated(
    const Pushes& pushes,
    const std::vector<const google::protobuf::RepeatedPtrField<ShardPushResult>*>& results) {
  accumulated_.clear();
  if (routed_epoch_ == 0) return;  // not following a table
  for (size_t ps = 0; ps < pushes.size(); ++ps) {
    std::set<std::pair<std::string, int>> accumulated;
    for (const ShardPushResult& result : *results[ps]) {
      if (result.outcome() == ShardPushResult::ACCUMULATED)
        accumulated.insert({result.variable(), result.shard()});
    }
    if (accumulated.empty()) continue;
    const OutgoingPush& push = *pushes[ps];
    accumulated_push_id_ = push.request.push_id();
    accumulated_clock_ = push.request.clock();
    for (int i = 0; i < push.request.gradients_size(); ++i) {
      const ShardSlice& slice = push.request.gradients(i);
      if (accumulated.count({slice.variable(), slice.shard()}) == 0) continue;
      ShardSlice& kept = accumulated_.emplace_back(slice);
      const absl::Span<const char> data = push.SliceData(i);
      kept.mutable_tensor()->set_data(data.data(), data.size());
    }
  }
}

absl::Status DenseCalls::PushAccumulatedAgain() {
  if (accumulated_.empty()) return absl::OkStatus();
  std::vector<PushRequest> requests(servers_.size());
  std::vector<bool> involved(servers_.size());
  for (const ShardSlice& slice : accumulated_) {
    absl::StatusOr<const VariablePlacement*> variable = Find(slice.variable());
    if (!variable.ok()) continue;
    const int ps = (*variable)->shards[slice.shard()].ps;
    *requests[ps].add_gradients() = slice;
    involved[ps] = true;
  }
  for (int ps = 0; ps < servers_.size(); ++ps) {
    PushRequest& request = requests[ps];
    request.set_worker_id(servers_.options().worker_id);
    request.set_push_id(accumulated_push_id_);
    if (servers_.policy().CarriesClock()) request.set_clock(accumulated_clock_);
    request.set_incarnation(servers_.incarnation(ps));
    request.set_placement_epoch(routed_epoch_);
  }
  std::vector<PushResponse> responses(servers_.size());
  absl::Status status = servers_.ForEachServer(
      involved, "push of the step's gradients again", [&](int ps, absl::Time deadline) {
        auto push = std::make_shared<OutgoingPush>();
        push->request = requests[ps];
        return Keep(servers_.server(ps).Push(std::move(push), deadline), &responses[ps]);
      });
  PushStats stats;
  for (const PushResponse& response : responses) stats = AddPushResults(response.results(), stats);
  if (!status.ok()) {
    LOG_WARN("pushing the step's gradients again to the shards' new primaries: {}",
             status.message());
    return status;
  }
  LOG_INFO(
      "the step's gradients pushed again to the shards' primaries: {} accumulated, {} applied, "
      "{} already there",
      stats.accumulated, stats.applied, stats.duplicate + stats.stale);
  return absl::OkStatus();
}

void DenseCalls::AfterPush(const Pushes& pushes, const std::vector<bool>& dropped) {
  for (size_t ps = 0; ps < pushes.size(); ++ps) {
    if (dropped[ps]) continue;
    for (const ShardSlice& slice : pushes[ps]->request.gradients()) {
      ShardVersions& state = shard_state_[{slice.variable(), slice.shard()}];
      state.min_version = servers_.policy().MinVersionAfterPush(state.pulled_version);
    }
  }
  servers_.set_clock(servers_.clock() + 1);
}

absl::StatusOr<PushStats> DenseCalls::Push(const TensorMap& gradients) {
  auto views = ViewGradients(gradients);
  if (!views.ok()) return views.status();
  return PushFrom(*views);
}

absl::StatusOr<PushStats> DenseCalls::PushFrom(const ConstTensorViews& gradients) {
  const uint64_t push_id = servers_.NewPushId();
  return Rerouting("push", [&] { return PushOnce(gradients, push_id); });
}

absl::StatusOr<PushStats> DenseCalls::PushOnce(const ConstTensorViews& gradients,
                                               uint64_t push_id) {
  absl::StatusOr<Pushes> built = BuildPushes(gradients, push_id);
  if (!built.ok()) return built.status();
  const Pushes& pushes = *built;
  std::vector<PushResponse> responses(servers_.size());
  std::vector<bool> involved(servers_.size());
  for (int ps = 0; ps < servers_.size(); ++ps) {
    involved[ps] = pushes[ps]->request.gradients_size() > 0 || servers_.EveryPushReaches(ps);
  }
  std::vector<bool> recovered;  // their pushes are lost
  absl::Status status = servers_.ForEachServerRecovering(
      involved, "push",
      [&](int ps, absl::Time deadline) {
        return Keep(servers_.server(ps).Push(pushes[ps], deadline), &responses[ps]);
      },
      nullptr, &recovered);
  if (!status.ok()) return status;
  PushStats stats;
  std::vector<const google::protobuf::RepeatedPtrField<ShardPushResult>*> results;
  for (const PushResponse& response : responses) {
    stats = AddPushResults(response.results(), stats);
    results.push_back(&response.results());
  }
  KeepAccumulated(pushes, results);
  for (int ps = 0; ps < servers_.size(); ++ps) {
    if (recovered[ps]) stats.lost += pushes[ps]->request.gradients_size();
  }
  AfterPush(pushes, recovered);
  return stats;
}

absl::StatusOr<PushStats> DenseCalls::PushPull(const TensorMap& gradients,
                                               const std::vector<std::string>& names,
                                               TensorMap* out) {
  auto views = ViewGradients(gradients);
  if (!views.ok()) return views.status();
  auto variables = Resolve(names);
  if (!variables.ok()) return variables.status();
  return PushPullVariables(*views, *variables, SizeOutputs(*variables, out));
}

absl::StatusOr<PushStats> DenseCalls::PushPullInto(const ConstTensorViews& gradients,
                                                   const TensorViews& out) {
  auto variables = ResolveViews(out);
  if (!variables.ok()) return variables.status();
  return PushPullVariables(gradients, *variables, out);
}

absl::StatusOr<PushStats> DenseCalls::PushPullVariables(
    const ConstTensorViews& gradients, const std::vector<const VariablePlacement*>& variables,
    const TensorViews& out) {
  const uint64_t push_id = servers_.NewPushId();
  return Rerouting("push-pull", [&] { return PushPullOnce(gradients, variables, out, push_id); });
}

absl::StatusOr<PushStats> DenseCalls::PushPullOnce(
    const ConstTensorViews& gradients, const std::vector<const VariablePlacement*>& variables,
    const TensorViews& out, uint64_t push_id) {
  absl::StatusOr<Pushes> built = BuildPushes(gradients, push_id);
  if (!built.ok()) return built.status();
  const Pushes& pushes = *built;
  // The pull half runs after the push: it waits for the step the push joined
  // (sync) and runs at the next clock (SSP). Undone if the call fails.
  const auto state_before = shard_state_;
  const int64_t clock_before = servers_.clock();
  AfterPush(pushes, std::vector<bool>(servers_.size(), false));
  std::vector<int64_t> response_bytes;
  std::vector<PullRequest> pulls = BuildPulls(variables, &response_bytes);
  std::vector<Placer> placers = PrepareOutputs(variables, out);
  std::vector<PullResponse> responses(servers_.size());
  std::vector<bool> involved(servers_.size());
  for (int ps = 0; ps < servers_.size(); ++ps) {
    involved[ps] = pushes[ps]->request.gradients_size() > 0 || pulls[ps].shards_size() > 0 ||
                   servers_.EveryPushReaches(ps);
  }
  std::vector<bool> recovered;  // their pushes are dropped
  absl::Status status = servers_.ForEachServerRecovering(
      involved, "push-pull",
      [&](int ps, absl::Time deadline) {
        placers[ps].Reset();  // this may be a retry
        return Keep(servers_.server(ps).PushPull(pushes[ps], pulls[ps], response_bytes[ps],
                                                 deadline, &placers[ps]),
                    &responses[ps]);
      },
      [&](int ps, absl::Time deadline) {
        return Keep(PullRecovered(ps, pulls[ps], response_bytes[ps], deadline, &placers[ps]),
                    &responses[ps]);
      },
      &recovered);
  if (!status.ok()) {
    shard_state_ = state_before;
    servers_.set_clock(clock_before);
    ForgetVersions(recovered);
    return status;
  }
  PushStats stats;
  std::vector<const google::protobuf::RepeatedPtrField<ShardPushResult>*> results;
  for (const PullResponse& response : responses) {
    stats = AddPushResults(response.push_results(), stats);
    results.push_back(&response.push_results());
    stats.waited = std::max(stats.waited, absl::Microseconds(response.waited_us()));
  }
  KeepAccumulated(pushes, results);
  for (int ps = 0; ps < servers_.size(); ++ps) {
    if (recovered[ps]) stats.lost += pushes[ps]->request.gradients_size();
  }
  if (absl::Status s = Assemble(variables, responses, placers, out); !s.ok()) return s;
  return stats;
}

void DenseCalls::ForgetVersions(const std::vector<bool>& recovered) {
  for (const VariablePlacement& variable : placement_) {
    for (const ShardPlacement& shard : variable.shards) {
      if (!recovered[shard.ps]) continue;
      ShardVersions& state = shard_state_[{variable.spec.name(), shard.shard}];
      state.min_version = 0;
      state.restarted = true;
    }
  }
}

}  // namespace fulcrum
