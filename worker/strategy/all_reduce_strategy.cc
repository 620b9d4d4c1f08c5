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

// The floats of a part the optimizer updates at once, sharded: the slots
// (or values) it updates and drops stay in cache.
constexpr int64_t kChunkFloats = 4096;

// Where each of `slots` begins.
std::vector<float*> Pointers(OptimizerSlots& slots) {
  std::vector<float*> pointers;
  for (std::vector<float>& slot : slots) pointers.push_back(slot.data());
  return pointers;
}

// What the chief sends first: its step and completed collective steps, a
// fingerprint of its model and the size of the state that follows.
constexpr int kHeaderFloats = 8;

// After each part's gradients in the fused buffer: the contributors, the
// batch's place (summed epoch, summed ends-the-epoch, members telling),
// and the chief's checkpoint.
constexpr int kTailFloats = 5;

}  // namespace

AllReduceStrategy::AllReduceStrategy(PeerLinks* links, const std::vector<VariableSpec>& specs,
                                     AllReduceStrategyOptions options)
    : links_(links), options_(std::move(options)) {
  std::vector<int> everyone(links->size());
  for (int r = 0; r < links->size(); ++r) everyone[r] = r;
  group_ = std::make_unique<SubgroupLinks>(links, everyone);
  generations_.push_back({0, everyone});
  for (const VariableSpec& spec : specs) {
    Variable& variable = variables_.emplace_back();
    variable.spec = CanonicalSpec(spec);
    variable.offset = model_floats_;
    model_floats_ += NumElements(spec.shape());
  }
}

int64_t AllReduceStrategy::Layout::stride() const { return part + kTailFloats; }

int64_t AllReduceStrategy::Layout::Position(int64_t model_float) const {
  return model_float / part * stride() + model_float % part;
}

int64_t AllReduceStrategy::slot_floats() const {
  int64_t floats = 0;
  for (const Variable& v : variables_) {
    for (const std::vector<float>& slot : v.slots) floats += static_cast<int64_t>(slot.size());
  }
  return floats;
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
        v.slots = std::move(contents.slots);  // the chief holds them all until they are dealt
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
    state_floats += static_cast<int64_t>(v.values.size());
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
  // Every variable's values, in spec order: the root's go out, and the
  // others take them.
  std::vector<float> state(state_floats);
  const bool sending = group_->rank() == root;
  if (sending) {
    for (const Variable& v : variables_) {
      std::copy(v.values.begin(), v.values.end(), state.begin() + v.offset);
    }
  }
  if (absl::Status s = Broadcast(*group_, root, absl::MakeSpan(state), options); !s.ok()) {
    return s;
  }
  if (!sending) {
    for (Variable& v : variables_) {
      std::copy_n(state.begin() + v.offset, v.values.size(), v.values.begin());
    }
  }
  return absl::OkStatus();
}

absl::Status AllReduceStrategy::DealSlots(int root, bool all_give,
                                          const AllReduceOptions& options) {
  // Every variable's slots in spec order, then one float per model float:
  // how many members gave it.
  std::vector<int64_t> slot_offsets;
  int64_t slot_total = 0;
  for (const Variable& v : variables_) {
    slot_offsets.push_back(slot_total);
    slot_total += static_cast<int64_t>(v.values.size()) * NumSlots(v.spec.optimizer());
  }
  std::vector<float> dealt(slot_total + model_floats_, 0.0f);
  if (all_give || group_->rank() == root) {
    for (size_t i = 0; i < variables_.size(); ++i) {
      const Variable& v = variables_[i];
      const int64_t size = static_cast<int64_t>(v.values.size());
      for (size_t j = 0; j < v.slots.size(); ++j) {
        std::copy(v.slots[j].begin(), v.slots[j].end(),
                  dealt.begin() + slot_offsets[i] + j * size + v.own_begin);
      }
      std::fill(dealt.begin() + slot_total + v.offset + v.own_begin,
                dealt.begin() + slot_total + v.offset + v.own_end, 1.0f);
    }
  }
  if (absl::Status s = all_give ? AllReduce(*group_, absl::MakeSpan(dealt), options)
                                : Broadcast(*group_, root, absl::MakeSpan(dealt), options);
      !s.ok()) {
    return s;
  }

  const int n = options_.shard_optimizer ? group_->size() : 1;
  layout_.parts = n;
  layout_.part = std::max<int64_t>(1, (model_floats_ + n - 1) / n);
  const int64_t length = n * layout_.stride();
  layout_.own = static_cast<int>(RingPartOf(length, n, group_->rank()).begin / layout_.stride());
  fused_.assign(length, 0.0f);
  const int64_t own_first = layout_.own * layout_.part;
  const int64_t own_last = std::min(model_floats_, own_first + layout_.part);
  int64_t lost = 0;
  for (size_t i = 0; i < variables_.size(); ++i) {
    Variable& v = variables_[i];
    const int64_t size = static_cast<int64_t>(v.values.size());
    v.own_begin = std::clamp(own_first - v.offset, int64_t{0}, size);
    v.own_end = std::clamp(own_last - v.offset, v.own_begin, size);
    v.slots = MakeSlots(v.spec.optimizer(), v.own_end - v.own_begin);
    for (size_t j = 0; j < v.slots.size(); ++j) {
      for (int64_t e = v.own_begin; e < v.own_end; ++e) {
        const float givers = dealt[slot_total + v.offset + e];
        if (givers > 0) {
          v.slots[j][e - v.own_begin] = dealt[slot_offsets[i] + j * size + e] / givers;
        } else if (j == 0) {
          ++lost;
        }
      }
    }
  }
  if (lost > 0) {
    LOG_WARN(
        "the optimizer's slots of {} of the {} floats this worker updates were held by the "
        "worker(s) lost; they start again from their initial values (--shard_optimizer=false "
        "keeps every slot on every worker)",
        lost, own_last - own_first);
  }
  if (options_.shard_optimizer) {
    LOG_INFO("the optimizer updates floats [{}, {}) of the model's {} on this worker ({} of {})",
             own_first, own_last, model_floats_, layout_.own + 1, n);
  }
  return absl::OkStatus();
}

absl::Status AllReduceStrategy::Start(TensorMap* weights) {
  const bool chief = links_->rank() == 0;
  for (Variable& v : variables_) {
    v.values.assign(NumElements(v.spec.shape()), 0.0f);
    // The chief's slots are the group's until they are dealt.
    v.own_begin = 0;
    v.own_end = chief ? static_cast<int64_t>(v.values.size()) : 0;
    v.slots = MakeSlots(v.spec.optimizer(), v.own_end);
  }
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
    if (absl::Status s = DealSlots(0, /*all_give=*/false, startup); !s.ok()) return s;
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

absl::Status AllReduceStrategy::CheckOutputs(const TensorViews& values) const {
  for (const auto& [name, view] : values) {
    auto v = std::find_if(variables_.begin(), variables_.end(),
                          [&name = name](const Variable& v) { return v.spec.name() == name; });
    if (v == variables_.end()) {
      return absl::NotFoundError(absl::StrCat("variable '", name, "' is not in the group"));
    }
    if (NumElements(view.shape) != static_cast<int64_t>(v->values.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("output for '", name, "': ", NumElements(view.shape), " elements where ",
                       v->values.size(), " were expected"));
    }
  }
  return absl::OkStatus();
}

void AllReduceStrategy::WriteValues(const TensorViews& values) const {
  for (const Variable& v : variables_) {
    auto it = values.find(v.spec.name());
    if (it != values.end()) std::copy(v.values.begin(), v.values.end(), it->second.data);
  }
}

absl::Status AllReduceStrategy::ReadValues(const TensorViews& values) const {
  if (absl::Status s = CheckOutputs(values); !s.ok()) return s;
  WriteValues(values);
  return absl::OkStatus();
}

absl::StatusOr<int> AllReduceStrategy::Step(const TensorMap* gradients, const StepPlace& place,
                                            TensorMap* weights) {
  // Seen as flat buffers of the floats they hold, so that a tensor whose
  // shape does not match its values is refused by the floats it has.
  ConstTensorViews views;
  if (gradients != nullptr) {
    for (const auto& [name, tensor] : *gradients) {
      views[name] =
          ConstTensorView{{static_cast<int64_t>(tensor.values.size())}, tensor.values.data()};
    }
  }
  if (absl::Status s = StepInPlace(gradients != nullptr ? &views : nullptr, place, {}); !s.ok()) {
    return s;
  }
  CopyValues(weights);
  return 0;
}

absl::Status AllReduceStrategy::StepInPlace(const ConstTensorViews* gradients,
                                            const StepPlace& place, const TensorViews& values) {
  if (gradients != nullptr) {
    for (const Variable& v : variables_) {
      const int64_t size = static_cast<int64_t>(v.values.size());
      auto it = gradients->find(v.spec.name());
      if (it == gradients->end() || NumElements(it->second.shape) != size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "gradient of '", v.spec.name(), "': ",
            it == gradients->end() ? std::string("missing")
                                   : absl::StrCat(NumElements(it->second.shape), " elements where ",
                                                  size, " were expected")));
      }
    }
  }
  if (absl::Status s = CheckOutputs(values); !s.ok()) return s;
  if (auto reduced = Reduce(gradients, &place); !reduced.ok()) return reduced.status();
  WriteValues(values);
  return absl::OkStatus();
}

void AllReduceStrategy::Fill(const ConstTensorViews* gradients, const StepPlace* place) {
  if (gradients == nullptr) {
    std::fill(fused_.begin(), fused_.end(), 0.0f);
  } else {
    // Every float of the model is written; those of the parts past its
    // end (the padding) are zeroed.
    for (int p = 0; p < layout_.parts; ++p) {
      const int64_t used = std::clamp(model_floats_ - p * layout_.part, int64_t{0}, layout_.part);
      std::fill_n(fused_.begin() + p * layout_.stride() + used, layout_.part - used, 0.0f);
    }
    for (const Variable& v : variables_) {
      const float* grad = gradients->at(v.spec.name()).data;
      const int64_t size = static_cast<int64_t>(v.values.size());
      // In pieces that end where a part does.
      for (int64_t e = 0; e < size;) {
        const int64_t at = v.offset + e;
        const int64_t count = std::min(size - e, layout_.part - at % layout_.part);
        std::copy_n(grad + e, count, fused_.begin() + layout_.Position(at));
        e += count;
      }
    }
  }
  float tail[kTailFloats] = {};
  tail[0] = gradients != nullptr ? 1.0f : 0.0f;
  if (place != nullptr) {
    tail[1] = static_cast<float>(place->epoch);
    tail[2] = place->ends_epoch ? 1.0f : 0.0f;
    tail[3] = 1.0f;
    tail[4] = place->checkpoint ? 1.0f : 0.0f;
  }
  for (int p = 0; p < layout_.parts; ++p) {
    std::copy_n(tail, kTailFloats, fused_.begin() + p * layout_.stride() + layout_.part);
  }
}

const float* AllReduceStrategy::Tail() const {
  return fused_.data() + layout_.own * layout_.stride() + layout_.part;
}

void AllReduceStrategy::ApplyOwnPart(int64_t iteration, int averaged) {
  const float scale = 1.0f / static_cast<float>(averaged);
  for (Variable& v : variables_) {
    const int64_t count = v.own_end - v.own_begin;
    if (count == 0) continue;
    const absl::Span<const float> part =
        absl::MakeConstSpan(fused_).subspan(layout_.Position(v.offset + v.own_begin), count);
    const FloatBytes grad[] = {AsFloatBytes(part)};
    ApplyGradient(v.spec.optimizer(), iteration, averaged, grad,
                  absl::MakeSpan(v.values).subspan(v.own_begin, count), v.slots, scale);
  }
}

int64_t AllReduceStrategy::OwnIndex(const Variable& v) const {
  return v.offset + v.own_begin - layout_.own * layout_.part;
}

void AllReduceStrategy::UpdateOwnValues(int64_t iteration, int averaged) {
  pending_iteration_ = iteration;
  pending_averaged_ = averaged;
  scratch_.resize(layout_.part);
  const float scale = 1.0f / static_cast<float>(averaged);
  float chunk[2][kChunkFloats];  // the slots' floats, updated and dropped
  for (Variable& v : variables_) {
    const int64_t count = v.own_end - v.own_begin;
    if (count == 0) continue;
    // The gradient moves aside, and the values take its place, to be
    // updated there and gathered.
    const absl::Span<float> part =
        absl::MakeSpan(fused_).subspan(layout_.Position(v.offset + v.own_begin), count);
    const absl::Span<float> grad = absl::MakeSpan(scratch_).subspan(OwnIndex(v), count);
    std::transform(part.begin(), part.end(), grad.begin(), [scale](float g) { return g * scale; });
    std::copy_n(v.values.begin() + v.own_begin, count, part.begin());
    float* pointers[2] = {chunk[0], chunk[1]};
    const absl::Span<float* const> slots(pointers, v.slots.size());
    for (int64_t c = 0; c < count; c += kChunkFloats) {
      const int64_t n = std::min(kChunkFloats, count - c);
      for (size_t j = 0; j < v.slots.size(); ++j) {
        std::copy_n(v.slots[j].begin() + c, n, chunk[j]);
      }
      const FloatBytes piece[] = {AsFloatBytes(grad.subspan(c, n))};
      ApplyGradient(v.spec.optimizer(), iteration, averaged, piece, part.subspan(c, n), slots);
    }
  }
}

void AllReduceStrategy::UpdateSlots(const Variable& v, absl::Span<const float> before,
                                    absl::Span<float* const> slots) const {
  const absl::Span<const float> grad =
      absl::MakeConstSpan(scratch_).subspan(OwnIndex(v), before.size());
  float values[kChunkFloats];  // updated and dropped
  std::vector<float*> at(slots.begin(), slots.end());
  for (int64_t c = 0; c < static_cast<int64_t>(before.size()); c += kChunkFloats) {
    const int64_t n = std::min<int64_t>(kChunkFloats, before.size() - c);
    std::copy_n(before.begin() + c, n, values);
    for (size_t j = 0; j < at.size(); ++j) at[j] = slots[j] + c;
    const FloatBytes piece[] = {AsFloatBytes(grad.subspan(c, n))};
    ApplyGradient(v.spec.optimizer(), pending_iteration_, pending_averaged_, piece,
                  absl::MakeSpan(values, n), at);
  }
}

absl::Status AllReduceStrategy::UpdateOwnPart() {
  const float* tail = Tail();
  const int averaged = static_cast<int>(tail[0]);
  if (averaged == 0) return absl::OkStatus();  // every batch skipped: nothing moves
  UpdateOwnValues(step_ + 1, averaged);
  pending_completed_ = completed_ + 1;
  if (absl::Status s = RingAllGather(*group_, absl::MakeSpan(fused_), options_.collective);
      !s.ok()) {
    return s;
  }
  return tail[4] > 0 ? GatherSlots() : absl::OkStatus();
}

absl::Status AllReduceStrategy::GatherSlots() {
  // Part p holds, for each variable in p in spec order, each of its slots'
  // floats in p.
  int max_slots = 0;
  for (const Variable& v : variables_)
    max_slots = std::max(max_slots, NumSlots(v.spec.optimizer()));
  const int64_t stride = layout_.part * max_slots;
  std::vector<float> gathered(layout_.parts * stride);
  // Calls visit(variable, slot, [begin, end) of its elements, position).
  auto each_piece = [&](int p, const auto& visit) {
    int64_t at = p * stride;
    for (Variable& v : variables_) {
      const int64_t size = static_cast<int64_t>(v.values.size());
      const int64_t begin = std::clamp(p * layout_.part - v.offset, int64_t{0}, size);
      const int64_t end = std::clamp((p + 1) * layout_.part - v.offset, begin, size);
      for (int j = 0; j < NumSlots(v.spec.optimizer()) && begin < end; ++j) {
        visit(v, j, begin, end, at);
        at += end - begin;
      }
    }
  };
  // This member's slots as the step in flight leaves them.
  std::vector<float*> updated;
  each_piece(layout_.own, [&](Variable& v, int j, int64_t begin, int64_t end, int64_t at) {
    std::copy(v.slots[j].begin() + (begin - v.own_begin), v.slots[j].begin() + (end - v.own_begin),
              gathered.begin() + at);
    updated.push_back(gathered.data() + at);
    if (updated.size() == v.slots.size()) {
      UpdateSlots(v, absl::MakeConstSpan(v.values).subspan(begin, end - begin), updated);
      updated.clear();
    }
  });
  if (absl::Status s = RingAllGather(*group_, absl::MakeSpan(gathered), options_.collective);
      !s.ok()) {
    return s;
  }
  if (group_->rank() != 0 || options_.checkpoint_dir.empty()) return absl::OkStatus();
  checkpoint_slots_.clear();
  for (const Variable& v : variables_) {
    checkpoint_slots_.push_back(
        OptimizerSlots(NumSlots(v.spec.optimizer()), std::vector<float>(v.values.size())));
  }
  for (int p = 0; p < layout_.parts; ++p) {
    each_piece(p, [&](Variable& v, int j, int64_t begin, int64_t end, int64_t at) {
      std::copy_n(gathered.begin() + at, end - begin,
                  checkpoint_slots_[&v - variables_.data()][j].begin() + begin);
    });
  }
  checkpoint_step_ = step_ + 1;
  return absl::OkStatus();
}

void AllReduceStrategy::Commit() {
  for (Variable& v : variables_) {
    const int64_t count = v.own_end - v.own_begin;
    if (count > 0) {
      UpdateSlots(v, absl::MakeConstSpan(v.values).subspan(v.own_begin, count), Pointers(v.slots));
    }
    for (int64_t e = 0; e < static_cast<int64_t>(v.values.size());) {
      const int64_t at = v.offset + e;
      const int64_t count =
          std::min(static_cast<int64_t>(v.values.size()) - e, layout_.part - at % layout_.part);
      std::copy_n(fused_.begin() + layout_.Position(at), count, v.values.begin() + e);
      e += count;
    }
  }
  pending_completed_ = 0;
}

absl::StatusOr<bool> AllReduceStrategy::Reduce(const ConstTensorViews* gradients,
                                               const StepPlace* place) {
  for (;;) {
    Fill(gradients, place);
    // Ranks that reconnected ask to join; the leader admits them.
    std::vector<int> joiners = links_->TakeReconnected();
    if (group_->rank() != 0) joiners.clear();
    absl::Status reduced = absl::OkStatus();
    if (!joiners.empty()) {
      reduced = absl::AbortedError(
          absl::StrCat("rank(s) ", absl::StrJoin(joiners, ", "), " asked to join"));
    } else if (!sharded()) {
      reduced = AllReduce(*group_, absl::MakeSpan(fused_), options_.collective);
    } else {
      reduced = RingReduceScatter(*group_, absl::MakeSpan(fused_), options_.collective);
      if (reduced.ok()) reduced = UpdateOwnPart();
    }
    if (reduced.ok()) break;
    auto done = Regroup(reduced, joiners);
    if (!done.ok()) return done.status();
    if (*done) return false;
  }
  ++completed_;
  const int averaged = static_cast<int>(Tail()[0]);
  batches_averaged_ += averaged;
  if (averaged == 0) return true;  // every worker's batch was skipped
  ++step_;
  if (sharded()) {
    Commit();
  } else {
    ApplyOwnPart(step_, averaged);
  }
  return true;
}

absl::Status AllReduceStrategy::TakeState(const Regrouping& decision) {
  group_ = std::make_unique<SubgroupLinks>(links_, decision.members);
  const int root = static_cast<int>(
      std::find(decision.members.begin(), decision.members.end(), decision.source) -
      decision.members.begin());
  // A member whose all-gather failed updates its slots when the group's
  // values include its update: from its values before the step.
  std::vector<float> before;
  if (pending_completed_ > 0) {
    for (const Variable& v : variables_) {
      before.insert(before.end(), v.values.begin() + v.own_begin, v.values.begin() + v.own_end);
    }
  }
  if (absl::Status s = BroadcastState(root, options_.collective); !s.ok()) return s;
  if (pending_completed_ > 0 && completed_ == pending_completed_) {
    int64_t at = 0;
    for (Variable& v : variables_) {
      const int64_t count = v.own_end - v.own_begin;
      if (count == 0) continue;
      UpdateSlots(v, absl::MakeConstSpan(before).subspan(at, count), Pointers(v.slots));
      at += count;
    }
  }
  pending_completed_ = 0;
  return DealSlots(root, /*all_give=*/options_.shard_optimizer, options_.collective);
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
  // The group's slots are its members': this worker gives none.
  for (Variable& v : variables_) {
    v.own_begin = v.own_end = 0;
    v.slots = MakeSlots(v.spec.optimizer(), 0);
  }
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
  for (;;) {
    auto reduced = Reduce(nullptr, nullptr);
    if (!reduced.ok()) return reduced.status();
    const float* tail = Tail();
    const float telling = tail[3];
    if (*reduced && telling > 0 && tail[2] == telling &&
        static_cast<int64_t>(tail[1] / telling) + 1 >= until) {
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
  // Sharded over several, the slots are those gathered at this step.
  const bool holds_all = !sharded();
  if (!holds_all && checkpoint_step_ != step_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the optimizer's slots are sharded over the workers, and were not gathered at step ", step_,
        " (a checkpoint is written at a step whose place asks for one)"));
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
          const OptimizerSlots& held =
              holds_all ? v.slots : checkpoint_slots_[&v - variables_.data()];
          std::vector<absl::Span<const float>> slots(held.begin(), held.end());
          if (absl::Status s = writer.AddShard(meta, v.values, slots); !s.ok()) return s;
        }
        return absl::OkStatus();
      });
  checkpoint_slots_.clear();
  checkpoint_step_ = -1;
  if (!saved.ok()) return saved.status();
  return std::vector<SaveCheckpointResponse>{*std::move(saved)};
}

}  // namespace fulcrum
