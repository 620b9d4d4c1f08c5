#include "worker/strategy/all_reduce_strategy.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint/restore.h"
#include "common/checkpoint/restored_variables.h"
#include "common/initializer.h"
#include "common/logging.h"
#include "common/tensor.h"

namespace fulcrum {
namespace {

// Rows of a variable as a whole shard holds them.
int64_t Rows(const VariableSpec& spec) {
  return NumElements(spec.shape()) / std::max<int64_t>(1, RowElements(spec.shape()));
}

// What the chief sends first: its step and completed collective steps, a
// fingerprint of its model and the size of the state that follows.
constexpr int kHeaderFloats = 8;

// After the gradients in the fused buffer: the contributors, then the
// batch's place (summed epoch, summed ends-the-epoch, members telling).
constexpr int kTailFloats = 4;

}  // namespace

AllReduceStrategy::AllReduceStrategy(PeerLinks* links, const std::vector<VariableSpec>& specs,
                                     AllReduceStrategyOptions options)
    : links_(links), options_(std::move(options)) {
  std::vector<int> everyone(links->size());
  for (int r = 0; r < links->size(); ++r) everyone[r] = r;
  group_ = std::make_unique<SubgroupLinks>(links, everyone);
  generations_.push_back({0, everyone});
  int64_t offset = 0;
  for (const VariableSpec& spec : specs) {
    Variable& variable = variables_.emplace_back();
    variable.spec = CanonicalSpec(spec);
    variable.offset = offset;
    offset += NumElements(spec.shape());
  }
  fused_.resize(offset + kTailFloats);
}

absl::Status AllReduceStrategy::Restore() {
  if (!options_.checkpoint_dir.empty()) {
    bool other_model = false;
    const AcceptVariables fits = [&](const RestoredVariables& restored) {
      for (const Variable& v : variables_) {
        auto it = restored.find(v.spec.name());
        absl::Status s = it == restored.end() ? absl::FailedPreconditionError(absl::StrCat(
                                                    "it holds no variable '", v.spec.name(), "'"))
                                              : CheckRestorable(it->second.spec, v.spec);
        if (!s.ok()) {
          other_model = true;
          return s;
        }
      }
      return absl::OkStatus();
    };
    std::vector<std::string> problems;
    auto loaded = LoadRestorePoint(*options_.fs, options_.checkpoint_dir, nullptr, fits, &problems);
    if (loaded.ok()) {
      for (Variable& v : variables_) {
        ShardContents contents;
        contents.values.resize(v.values.size());
        contents.slots = MakeSlots(v.spec.optimizer(), static_cast<int64_t>(v.values.size()));
        if (absl::Status s = loaded->variables.at(v.spec.name()).Read(0, Rows(v.spec), &contents);
            !s.ok()) {
          return s;
        }
        v.values = std::move(contents.values);
        v.slots = std::move(contents.slots);
      }
      step_ = std::max(step_, loaded->step);
      LOG_INFO("restored {} variable(s) at step {} from {} ({} file(s))", variables_.size(), step_,
               options_.checkpoint_dir, loaded->files.size());
      return absl::OkStatus();
    }
    if (other_model) {
      return absl::FailedPreconditionError(
          absl::StrCat("the checkpoints in ", options_.checkpoint_dir, " hold another model (",
                       absl::StrJoin(problems, "; "),
                       "); use another --checkpoint_dir or the model they were written for"));
    }
    LOG_INFO("no complete checkpoint in {}: starting from the initializers",
             options_.checkpoint_dir);
  }
  for (Variable& v : variables_) {
    auto given = options_.initial_values.find(v.spec.name());
    if (given == options_.initial_values.end()) {
      InitializeRows(v.spec, 0, Rows(v.spec), absl::MakeSpan(v.values));
    } else if (given->second.values.size() != v.values.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("initial value of '", v.spec.name(), "': ", given->second.values.size(),
                       " elements where ", v.values.size(), " were expected"));
    } else {
      v.values = given->second.values;
    }
  }
  return absl::OkStatus();
}

absl::Status AllReduceStrategy::BroadcastState(int root, const AllReduceOptions& options) {
  uint32_t fingerprint = 0;
  int64_t state_floats = 0;
  for (const Variable& v : variables_) {
    fingerprint = Crc32(v.spec.SerializeAsString(), fingerprint);
    state_floats += static_cast<int64_t>(v.values.size() * (1 + v.slots.size()));
  }
  float header[kHeaderFloats] = {};
  PutBits(static_cast<uint64_t>(step_), header);
  PutBits(static_cast<uint64_t>(completed_), header + 2);
  PutBits(fingerprint, header + 4);
  PutBits(static_cast<uint64_t>(state_floats), header + 6);
  if (absl::Status s = Broadcast(*group_, root, absl::MakeSpan(header), options); !s.ok()) {
    return s;
  }
  if (GetBits(header + 4) != fingerprint || GetBits(header + 6) != uint64_t(state_floats)) {
    return absl::FailedPreconditionError(
        "this worker's model (--model, --hidden, --optimizer, --learning_rate, --seed, the data "
        "set's features and classes) differs from the chief's; start every worker with the "
        "same flags");
  }
  step_ = static_cast<int64_t>(GetBits(header));
  completed_ = static_cast<int64_t>(GetBits(header + 2));
  // Every variable's values, then its slots, in spec order: the root's
  // go out, and the others take them.
  auto each_tensor = [this](const auto& visit) {
    for (Variable& v : variables_) {
      visit(v.values);
      for (std::vector<float>& slot : v.slots) visit(slot);
    }
  };
  std::vector<float> state(state_floats);
  auto next = state.begin();
  const bool sending = group_->rank() == root;
  if (sending) {
    each_tensor(
        [&](std::vector<float>& tensor) { next = std::copy(tensor.begin(), tensor.end(), next); });
  }
  if (absl::Status s = Broadcast(*group_, root, absl::MakeSpan(state), options); !s.ok()) {
    return s;
  }
  if (!sending) {
    next = state.begin();
    each_tensor([&](std::vector<float>& tensor) {
      const auto end = next + static_cast<int64_t>(tensor.size());
      std::copy(next, end, tensor.begin());
      next = end;
    });
  }
  return absl::OkStatus();
}

absl::Status AllReduceStrategy::Start(TensorMap* weights) {
  for (Variable& v : variables_) {
    v.values.assign(NumElements(v.spec.shape()), 0.0f);
    v.slots = MakeSlots(v.spec.optimizer(), static_cast<int64_t>(v.values.size()));
  }
  const bool chief = links_->rank() == 0;
  if (chief) {
    if (absl::Status s = Restore(); !s.ok()) return s;
  }
  // A running group invites a worker that restarted. Else a new group
  // starts: the chief once every worker has linked to it (or the start-up
  // timeout passed), the others with the chief's state, in round 0: they
  // wait twice as long, as the chief may start that much after them.
  const absl::Duration wait = (chief ? 1 : 2) * options_.startup_timeout;
  const absl::Time deadline = absl::Now() + wait;
  auto invited = links_->AwaitRound(0, deadline);
  if (!invited.ok() && !chief) {
    return absl::DeadlineExceededError(absl::StrCat(
        "no state from the chief (rank 0), and no running group invited this worker, in ",
        absl::FormatDuration(wait), " (twice --startup_timeout_secs)"));
  }
  if (!invited.ok()) {
    // Those missing fail the first all-reduce, and the group goes on
    // without them.
    LOG_WARN(
        "not every worker had started after {} (--startup_timeout_secs); starting without "
        "those missing",
        absl::FormatDuration(options_.startup_timeout));
  }
  if (invited.ok() && invited->second > 0) {
    if (absl::Status s = Join(invited->first, invited->second, deadline); !s.ok()) return s;
  } else {
    AllReduceOptions startup = options_.collective;
    startup.timeout = options_.startup_timeout;
    if (absl::Status s = BroadcastState(0, startup); !s.ok()) return s;
    completed_ = step_;
  }
  restored_step_ = step_;
  CopyValues(weights);
  return absl::OkStatus();
}

int64_t AllReduceStrategy::ResumedBatches(int num_workers, int64_t steps_per_epoch) const {
  if (first_epoch_ > 0) return std::min(first_epoch_, options_.epochs) * steps_per_epoch;
  return restored_step_;
}

void AllReduceStrategy::CopyValues(TensorMap* weights) const {
  for (const Variable& v : variables_) {
    DenseTensor& tensor = (*weights)[v.spec.name()];
    tensor.shape.assign(v.spec.shape().begin(), v.spec.shape().end());
    tensor.values = v.values;
  }
}

absl::StatusOr<int> AllReduceStrategy::Step(const TensorMap* gradients, const StepPlace& place,
                                            TensorMap* weights) {
  if (gradients != nullptr) {
    for (const Variable& v : variables_) {
      auto it = gradients->find(v.spec.name());
      if (it == gradients->end() || it->second.values.size() != v.values.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "gradient of '", v.spec.name(), "': ",
            it == gradients->end() ? std::string("missing")
                                   : absl::StrCat(it->second.values.size(), " elements where ",
                                                  v.values.size(), " were expected")));
      }
    }
  }
  if (auto reduced = Reduce(gradients, &place); !reduced.ok()) return reduced.status();
  CopyValues(weights);
  return 0;
}

absl::StatusOr<bool> AllReduceStrategy::Reduce(const TensorMap* gradients, const StepPlace* place) {
  const size_t tail = fused_.size() - kTailFloats;
  for (;;) {
    std::fill(fused_.begin(), fused_.end(), 0.0f);
    if (gradients != nullptr) {
      for (const Variable& v : variables_) {
        const std::vector<float>& grad = gradients->at(v.spec.name()).values;
        std::copy(grad.begin(), grad.end(), fused_.begin() + v.offset);
      }
      fused_[tail] = 1.0f;
    }
    if (place != nullptr) {
      fused_[tail + 1] = static_cast<float>(place->epoch);
      fused_[tail + 2] = place->ends_epoch ? 1.0f : 0.0f;
      fused_[tail + 3] = 1.0f;
    }
    // Ranks that reconnected ask to join; the leader admits them.
    std::vector<int> joiners = links_->TakeReconnected();
    if (group_->rank() != 0) joiners.clear();
    absl::Status reduced = joiners.empty()
                               ? AllReduce(*group_, absl::MakeSpan(fused_), options_.collective)
                               : absl::AbortedError(absl::StrCat(
                                     "rank(s) ", absl::StrJoin(joiners, ", "), " asked to join"));
    if (reduced.ok()) break;
    auto done = Regroup(reduced, joiners);
    if (!done.ok()) return done.status();
    if (*done) return false;
  }
  ++completed_;
  const int averaged = static_cast<int>(fused_[tail]);
  batches_averaged_ += averaged;
  if (averaged == 0) return true;  // every worker's batch was skipped
  ++step_;
  const float scale = 1.0f / static_cast<float>(averaged);
  for (Variable& v : variables_) {
    absl::Span<float> grad = absl::MakeSpan(fused_).subspan(v.offset, v.values.size());
    for (float& g : grad) g *= scale;
    const FloatBytes parts[] = {AsFloatBytes(grad)};
    ApplyGradient(v.spec.optimizer(), step_, averaged, parts, absl::MakeSpan(v.values), v.slots);
  }
  return true;
}

absl::Status AllReduceStrategy::TakeState(const Regrouping& decision) {
  group_ = std::make_unique<SubgroupLinks>(links_, decision.members);
  const int root = static_cast<int>(
      std::find(decision.members.begin(), decision.members.end(), decision.source) -
      decision.members.begin());
  return BroadcastState(root, options_.collective);
}

absl::StatusOr<bool> AllReduceStrategy::Regroup(const absl::Status& failure,
                                                const std::vector<int>& joiners) {
  MemberState mine;
  mine.completed = completed_;
  std::vector<int> current;
  {
    absl::MutexLock lock(&mu_);
    regrouping_ = true;  // no epoch is dealt meanwhile
    mine.dealt_epoch = dealt_epoch_;
    current = generations_.back().members;
  }
  LOG_WARN("all-reduce of step {}: {}; regrouping", completed_ + 1, failure.message());
  const int64_t before = completed_;
  std::vector<int> asking = joiners;
  for (;;) {
    auto regrouped = fulcrum::Regroup(*links_, current, asking, mine, options_.collective.timeout);
    absl::Status status = regrouped.status();
    // Members differ by a step at most: a member further behind restarted
    // (or was cut off) while the group ran on, and must rejoin as new.
    if (status.ok() && regrouped->completed > before + 1) {
      status = absl::FailedPreconditionError(
          absl::StrCat("the group ran on to step ", regrouped->completed,
                       " without this worker (at ", before, "); restart it to rejoin"));
    }
    if (!status.ok()) {
      absl::MutexLock lock(&mu_);
      regrouping_ = false;  // this worker stops; its prefetching must not wait on
      return absl::Status(status.code(),
                          absl::StrCat("all-reduce of step ", before + 1, " (", failure.message(),
                                       "), and then ", status.message()));
    }
    absl::Status taken = TakeState(*regrouped);
    if (taken.ok()) {
      absl::MutexLock lock(&mu_);
      generations_.push_back({regrouped->first_epoch, regrouped->members});
      regrouping_ = false;
      LOG_WARN("going on with {} worker(s) from step {}; epochs from {} are dealt over them",
               regrouped->members.size(), completed_, regrouped->first_epoch + 1);
      break;
    }
    if (taken.code() == absl::StatusCode::kFailedPrecondition) return taken;  // another model
    LOG_WARN("taking the state from rank {} failed: {}; regrouping again", regrouped->source,
             taken.message());
    current = regrouped->members;
    asking.clear();
  }
  return completed_ > before;
}

absl::Status AllReduceStrategy::Join(int leader, uint64_t round, absl::Time deadline) {
  LOG_WARN("the group is running (rank {} invites this worker, in round {}): joining it", leader,
           round);
  for (;;) {
    auto decision = JoinGroup(*links_, leader, round, options_.collective.timeout);
    absl::Status status = decision.ok() ? TakeState(*decision) : decision.status();
    if (status.ok()) {
      absl::MutexLock lock(&mu_);
      first_epoch_ = decision->first_epoch;
      dealt_epoch_ = first_epoch_ - 1;
      generations_.push_back({first_epoch_, decision->members});
      break;
    }
    // The state's model differs from this one: asking again cannot help.
    if (decision.ok() && status.code() == absl::StatusCode::kFailedPrecondition) return status;
    LOG_WARN("joining failed: {}; asking again", status.message());
    // A later round is on: its leader invites this worker, or tells it
    // that it moved on. Else reconnecting asks the leader again.
    if (status.code() != absl::StatusCode::kAborted) {
      for (int peer = 0; peer < links_->size(); ++peer) {
        if (peer != links_->rank()) links_->Reconnect(peer).IgnoreError();
      }
    }
    auto invited = links_->AwaitRound(-1, deadline);
    if (!invited.ok()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no running group admitted this worker by the startup deadline (last: ", status.message(),
          ")"));
    }
    std::tie(leader, round) = *invited;
  }
  // Its data begins at the first epoch dealt over it (none when that is
  // past the last): until then it takes part with no gradients, and
  // learns from the members' places when the group gets there.
  const int64_t until = std::min(first_epoch_, options_.epochs);
  LOG_WARN("joined at step {}; no gradients from this worker until {}", completed_,
           until < options_.epochs ? absl::StrCat("epoch ", until + 1, ", the first dealt over it")
                                   : std::string("the job ends: it joined in the last epoch"));
  const size_t tail = fused_.size() - kTailFloats;
  for (;;) {
    auto reduced = Reduce(nullptr, nullptr);
    if (!reduced.ok()) return reduced.status();
    const float telling = fused_[tail + 3];
    if (*reduced && telling > 0 && fused_[tail + 2] == telling &&
        static_cast<int64_t>(fused_[tail + 1] / telling) + 1 >= until) {
      return absl::OkStatus();
    }
  }
}

Dealing AllReduceStrategy::DealEpoch(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  auto settled = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !regrouping_; };
  mu_.Await(absl::Condition(&settled));
  dealt_epoch_ = std::max(dealt_epoch_, epoch);
  const Generation* in_force = &generations_.front();
  for (const Generation& g : generations_) {
    if (g.first_epoch <= epoch) in_force = &g;
  }
  const std::vector<int>& members = in_force->members;
  if (in_force != &generations_.front() && epoch == in_force->first_epoch) {
    LOG_WARN("epoch {}: dealt over the group's {} worker(s) (ranks {})", epoch + 1, members.size(),
             absl::StrJoin(members, ", "));
  }
  const int index =
      static_cast<int>(std::find(members.begin(), members.end(), links_->rank()) - members.begin());
  return Dealing{index, static_cast<int>(members.size())};
}

absl::StatusOr<std::vector<SaveCheckpointResponse>> AllReduceStrategy::SaveCheckpoint(
    int64_t step) {
  if (group_->rank() != 0 || options_.checkpoint_dir.empty()) {
    return absl::FailedPreconditionError(
        "only the chief writes checkpoints, into its --checkpoint_dir");
  }
  // The replica, as one server holding every variable in one shard.
  auto saved = SaveServerFile(
      *options_.fs, options_.checkpoint_dir, step, 0, 1, [&](CheckpointFileWriter& writer) {
        for (const Variable& v : variables_) {
          ShardCheckpoint meta;
          ShardSpec* spec = meta.mutable_spec();
          *spec->mutable_variable() = v.spec;
          spec->set_shard(0);
          spec->set_num_shards(1);
          spec->set_rows(Rows(v.spec));
          meta.set_version(step_);
          meta.set_num_slots(static_cast<int>(v.slots.size()));
          std::vector<absl::Span<const float>> slots(v.slots.begin(), v.slots.end());
          if (absl::Status s = writer.AddShard(meta, v.values, slots); !s.ok()) return s;
        }
        return absl::OkStatus();
      });
  if (!saved.ok()) return saved.status();
  return std::vector<SaveCheckpointResponse>{*std::move(saved)};
}

}  // namespace fulcrum
