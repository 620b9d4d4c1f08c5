#include "worker/strategy/all_reduce_strategy.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint.h"
#include "common/checkpoint_file.h"
#include "common/initializer.h"
#include "common/logging.h"
#include "common/restored_variables.h"
#include "common/tensor.h"

namespace fulcrum {
namespace {

// Rows of a variable as a whole shard holds them.
int64_t Rows(const VariableSpec& spec) {
  return NumElements(spec.shape()) / std::max<int64_t>(1, RowElements(spec.shape()));
}

// Integers travel through float buffers by their bits.
void PutBits(uint64_t value, float* out) { std::memcpy(out, &value, sizeof(value)); }
uint64_t GetBits(const float* in) {
  uint64_t value = 0;
  std::memcpy(&value, in, sizeof(value));
  return value;
}

// What the chief sends first: its step, a fingerprint of its model and the
// size of the state that follows.
constexpr int kHeaderFloats = 6;

}  // namespace

AllReduceStrategy::AllReduceStrategy(PeerLinks* links, const std::vector<VariableSpec>& specs,
                                     AllReduceStrategyOptions options)
    : links_(links), options_(std::move(options)) {
  int64_t offset = 0;
  for (const VariableSpec& spec : specs) {
    Variable& variable = variables_.emplace_back();
    variable.spec = CanonicalSpec(spec);
    variable.offset = offset;
    offset += NumElements(spec.shape());
  }
  fused_.resize(offset + 1);
}

absl::Status AllReduceStrategy::Restore() {
  if (!options_.checkpoint_dir.empty()) {
    RestoredVariables restored;
    bool other_model = false;
    auto fits = [&](const CheckpointFiles& files) -> absl::Status {
      auto regrouped = RegroupCheckpoint(files);
      if (!regrouped.ok()) return regrouped.status();
      for (const Variable& v : variables_) {
        auto it = regrouped->find(v.spec.name());
        absl::Status s = it == regrouped->end() ? absl::FailedPreconditionError(absl::StrCat(
                                                      "it holds no variable '", v.spec.name(), "'"))
                                                : CheckRestorable(it->second.spec, v.spec);
        if (!s.ok()) {
          other_model = true;
          return s;
        }
      }
      restored = *std::move(regrouped);
      return absl::OkStatus();
    };
    std::vector<std::string> problems;
    auto loaded = LoadNewestCheckpoint(*options_.fs, options_.checkpoint_dir, fits, &problems);
    for (const std::string& problem : problems) LOG_ERROR("checkpoint: {}", problem);
    if (loaded.ok()) {
      for (Variable& v : variables_) {
        ShardContents contents;
        contents.values.resize(v.values.size());
        contents.slots = MakeSlots(v.spec.optimizer(), static_cast<int64_t>(v.values.size()));
        if (absl::Status s = restored.at(v.spec.name()).Read(0, Rows(v.spec), &contents); !s.ok()) {
          return s;
        }
        v.values = std::move(contents.values);
        v.slots = std::move(contents.slots);
      }
      for (const auto& file : *loaded) step_ = std::max(step_, file->header().step());
      LOG_INFO("restored {} variable(s) at step {} from {} ({} file(s))", variables_.size(), step_,
               options_.checkpoint_dir, loaded->size());
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
  for (Variable& v : variables_) InitializeRows(v.spec, 0, Rows(v.spec), absl::MakeSpan(v.values));
  return absl::OkStatus();
}

absl::Status AllReduceStrategy::BroadcastState() {
  AllReduceOptions startup = options_.collective;
  startup.timeout = options_.startup_timeout;
  uint32_t fingerprint = 0;
  int64_t state_floats = 0;
  for (const Variable& v : variables_) {
    fingerprint = Crc32(v.spec.SerializeAsString(), fingerprint);
    state_floats += static_cast<int64_t>(v.values.size() * (1 + v.slots.size()));
  }
  float header[kHeaderFloats] = {};
  PutBits(static_cast<uint64_t>(step_), header);
  PutBits(fingerprint, header + 2);
  PutBits(static_cast<uint64_t>(state_floats), header + 4);
  if (absl::Status s = Broadcast(*links_, 0, absl::MakeSpan(header), startup); !s.ok()) {
    return s;
  }
  if (GetBits(header + 2) != fingerprint || GetBits(header + 4) != uint64_t(state_floats)) {
    return absl::FailedPreconditionError(
        "this worker's model (--model, --hidden, --optimizer, --learning_rate, --seed, the data "
        "set's features and classes) differs from the chief's; start every worker with the "
        "same flags");
  }
  step_ = static_cast<int64_t>(GetBits(header));
  // Every variable's values, then its slots, in spec order.
  std::vector<float> state(state_floats);
  const bool root = links_->rank() == 0;
  auto next = state.begin();
  auto pass = [&](std::vector<float>& tensor) {
    if (root) std::copy(tensor.begin(), tensor.end(), next);
    next += static_cast<int64_t>(tensor.size());
  };
  for (Variable& v : variables_) {
    pass(v.values);
    for (std::vector<float>& slot : v.slots) pass(slot);
  }
  if (absl::Status s = Broadcast(*links_, 0, absl::MakeSpan(state), options_.collective); !s.ok()) {
    return s;
  }
  next = state.begin();
  auto take = [&](std::vector<float>& tensor) {
    std::copy(next, next + static_cast<int64_t>(tensor.size()), tensor.begin());
    next += static_cast<int64_t>(tensor.size());
  };
  for (Variable& v : variables_) {
    take(v.values);
    for (std::vector<float>& slot : v.slots) take(slot);
  }
  return absl::OkStatus();
}

absl::Status AllReduceStrategy::Start(TensorMap* weights) {
  for (Variable& v : variables_) {
    v.values.assign(NumElements(v.spec.shape()), 0.0f);
    v.slots = MakeSlots(v.spec.optimizer(), static_cast<int64_t>(v.values.size()));
  }
  if (links_->rank() == 0) {
    if (absl::Status s = Restore(); !s.ok()) return s;
  }
  if (absl::Status s = BroadcastState(); !s.ok()) return s;
  restored_step_ = step_;
  CopyValues(weights);
  return absl::OkStatus();
}

void AllReduceStrategy::CopyValues(TensorMap* weights) const {
  for (const Variable& v : variables_) {
    DenseTensor& tensor = (*weights)[v.spec.name()];
    tensor.shape.assign(v.spec.shape().begin(), v.spec.shape().end());
    tensor.values = v.values;
  }
}

absl::StatusOr<int> AllReduceStrategy::Step(const TensorMap* gradients, TensorMap* weights) {
  std::fill(fused_.begin(), fused_.end(), 0.0f);
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
      std::copy(it->second.values.begin(), it->second.values.end(), fused_.begin() + v.offset);
    }
    fused_.back() = 1.0f;
  }
  if (absl::Status s = AllReduce(*links_, absl::MakeSpan(fused_), options_.collective); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("all-reduce of step ", step_ + 1, " (rank ", links_->rank(), " of ",
                               links_->size(), "): ", s.message()));
  }
  const int averaged = static_cast<int>(fused_.back());
  if (averaged == 0) return 0;  // every worker's batch was skipped
  ++step_;
  const float scale = 1.0f / static_cast<float>(averaged);
  for (Variable& v : variables_) {
    absl::Span<float> grad = absl::MakeSpan(fused_).subspan(v.offset, v.values.size());
    for (float& g : grad) g *= scale;
    const absl::Span<const float> parts[] = {grad};
    ApplyGradient(v.spec.optimizer(), step_, averaged, parts, absl::MakeSpan(v.values), v.slots);
  }
  CopyValues(weights);
  return 0;
}

Dealing AllReduceStrategy::DealEpoch(int64_t epoch) {
  return Dealing{links_->rank(), links_->size()};
}

absl::StatusOr<std::vector<SaveCheckpointResponse>> AllReduceStrategy::SaveCheckpoint(
    int64_t step) {
  if (links_->rank() != 0 || options_.checkpoint_dir.empty()) {
    return absl::FailedPreconditionError(
        "only the chief writes checkpoints, into its --checkpoint_dir");
  }
  const std::string dir = absl::StrCat(options_.checkpoint_dir, "/", CheckpointDirName(step));
  if (absl::Status s = options_.fs->MakeDirs(dir); !s.ok()) return s;
  SaveCheckpointResponse response;
  response.set_file(PsFileName(0, 1));
  PsCheckpointHeader header;
  header.set_ps_index(0);
  header.set_num_ps(1);
  header.set_step(step);
  header.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  auto writer =
      CheckpointFileWriter::Open(*options_.fs, absl::StrCat(dir, "/", response.file()), header);
  if (!writer.ok()) return writer.status();
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
    if (absl::Status s = (*writer)->AddShard(meta, v.values, slots); !s.ok()) return s;
  }
  auto written = (*writer)->Commit();
  if (!written.ok()) return written.status();
  response.set_bytes(written->bytes);
  response.set_crc32(written->crc32);
  response.set_shards(written->shards);
  return std::vector<SaveCheckpointResponse>{response};
}

}  // namespace fulcrum
