#include "worker/data/dealing.h"

#include <algorithm>
#include <random>
#include <utility>

#include "common/describe_text.h"

namespace fulcrum {

std::mt19937_64 EpochShuffle(uint64_t seed, int64_t epoch, const Dealing& dealing) {
  return std::mt19937_64(seed * 1000003 + epoch * 7919 + dealing.shard_index);
}

std::vector<int64_t> DealtExamples(int64_t num_examples, const Dealing& dealing, int64_t epoch,
                                   uint64_t seed, int64_t batch_size) {
  std::vector<int64_t> share;
  for (int64_t i = dealing.shard_index; i < num_examples; i += dealing.num_shards) {
    share.push_back(i);
  }
  std::mt19937_64 gen = EpochShuffle(seed, epoch, dealing);
  std::shuffle(share.begin(), share.end(), gen);
  share.resize(StepsPerEpoch(num_examples, dealing.num_shards, batch_size) * batch_size);
  return share;
}

EpochPlanner::EpochPlanner(int64_t num_examples, DealingOptions options)
    : num_examples_(num_examples),
      options_(std::move(options)),
      steps_per_epoch_(StepsPerEpoch(num_examples, options_.num_shards, options_.batch_size)) {}

std::optional<EpochPlan> EpochPlanner::Next() {
  while (++epoch_ < options_.epochs) {
    if ((epoch_ + 1) * steps_per_epoch_ <= options_.skip) continue;  // resumed past it
    // The first epoch keeps the first dealing (the skip counts in it),
    // unless the skip ends exactly where it begins.
    const bool keep = first_ && (options_.skip == 0 || epoch_ * steps_per_epoch_ < options_.skip);
    first_ = false;
    EpochPlan plan;
    plan.epoch = epoch_;
    plan.dealing = Dealing{options_.shard_index, options_.num_shards};
    if (!keep && options_.deal) plan.dealing = options_.deal(epoch_);
    plan.steps = StepsPerEpoch(num_examples_, plan.dealing.num_shards, options_.batch_size);
    plan.first_step = std::max<int64_t>(0, options_.skip - epoch_ * steps_per_epoch_);
    return plan;
  }
  return std::nullopt;
}

BatchDealer::BatchDealer(int64_t num_examples, DealingOptions options)
    : num_examples_(num_examples), planner_(num_examples, std::move(options)) {}

std::optional<DealtBatch> BatchDealer::Next() {
  const int64_t batch_size = planner_.options().batch_size;
  while (!epoch_ || step_ >= epoch_->steps) {
    epoch_ = planner_.Next();
    if (!epoch_) return std::nullopt;
    share_ = DealtExamples(num_examples_, epoch_->dealing, epoch_->epoch, planner_.options().seed,
                           batch_size);
    step_ = epoch_->first_step;
  }
  DealtBatch batch;
  batch.indices.assign(share_.begin() + step_ * batch_size,
                       share_.begin() + (step_ + 1) * batch_size);
  batch.epoch = epoch_->epoch;
  batch.step_in_epoch = step_;
  batch.steps_in_epoch = epoch_->steps;
  ++step_;
  return batch;
}

Dealing DealOverWorkersLeft(const std::vector<DescribeResponse>& servers, int worker,
                            int num_workers, std::vector<int>* gone) {
  gone->clear();
  std::vector<int> left;
  for (int w = 0; w < num_workers; ++w) {
    bool is_gone = w != worker;
    int asked = 0;
    for (const DescribeResponse& server : servers) {
      if (!WasAsked(server)) continue;  // a server lost for good
      ++asked;
      if (w >= server.workers_size()) {
        is_gone = false;
        break;
      }
      const WorkerInfo& info = server.workers(w);
      is_gone = is_gone && !info.live() && !info.finished() && !info.awaited();
    }
    is_gone = is_gone && asked > 0;
    (is_gone ? *gone : left).push_back(w);
  }
  if (gone->empty()) return Dealing{worker, num_workers};
  const int rank = static_cast<int>(std::find(left.begin(), left.end(), worker) - left.begin());
  return Dealing{rank, static_cast<int>(left.size())};
}

}  // namespace fulcrum
