#include "worker/data/dealing.h"

#include <algorithm>
#include <random>
#include <utility>

namespace fulcrum {

std::vector<int64_t> DealtExamples(int64_t num_examples, const Dealing& dealing, int64_t epoch,
                                   uint64_t seed, int64_t batch_size) {
  std::vector<int64_t> share;
  for (int64_t i = dealing.shard_index; i < num_examples; i += dealing.num_shards) {
    share.push_back(i);
  }
  // The same permutation on every run with this seed, a different one each epoch.
  std::mt19937_64 gen(seed * 1000003 + epoch * 7919 + dealing.shard_index);
  std::shuffle(share.begin(), share.end(), gen);
  share.resize(StepsPerEpoch(num_examples, dealing.num_shards, batch_size) * batch_size);
  return share;
}

BatchDealer::BatchDealer(int64_t num_examples, DealingOptions options)
    : num_examples_(num_examples),
      options_(std::move(options)),
      steps_per_epoch_(StepsPerEpoch(num_examples, options_.num_shards, options_.batch_size)) {}

std::optional<DealtBatch> BatchDealer::Next() {
  while (epoch_ < 0 || step_ * options_.batch_size >= static_cast<int64_t>(share_.size())) {
    if (++epoch_ >= options_.epochs) return std::nullopt;
    if ((epoch_ + 1) * steps_per_epoch_ <= options_.skip) continue;  // resumed past it
    // The first epoch keeps the first dealing (the skip counts in it),
    // unless the skip ends exactly where it begins.
    const bool keep = first_ && (options_.skip == 0 || epoch_ * steps_per_epoch_ < options_.skip);
    Dealing dealing{options_.shard_index, options_.num_shards};
    if (!keep && options_.deal) dealing = options_.deal(epoch_);
    first_ = false;
    share_ = DealtExamples(num_examples_, dealing, epoch_, options_.seed, options_.batch_size);
    step_ = std::max<int64_t>(0, options_.skip - epoch_ * steps_per_epoch_);
  }
  DealtBatch batch;
  batch.indices.assign(share_.begin() + step_ * options_.batch_size,
                       share_.begin() + (step_ + 1) * options_.batch_size);
  batch.epoch = epoch_;
  batch.step_in_epoch = step_;
  batch.steps_in_epoch = static_cast<int64_t>(share_.size()) / options_.batch_size;
  ++step_;
  return batch;
}

Dealing DealOverWorkersLeft(const std::vector<DescribeResponse>& servers, int worker,
                            int num_workers, std::vector<int>* gone) {
  gone->clear();
  std::vector<int> left;
  for (int w = 0; w < num_workers; ++w) {
    bool is_gone = w != worker;
    for (const DescribeResponse& server : servers) {
      if (w >= server.workers_size()) {
        is_gone = false;
        break;
      }
      const WorkerInfo& info = server.workers(w);
      is_gone = is_gone && !info.live() && !info.finished() && !info.awaited();
    }
    (is_gone ? *gone : left).push_back(w);
  }
  if (gone->empty()) return Dealing{worker, num_workers};
  const int rank = static_cast<int>(std::find(left.begin(), left.end(), worker) - left.begin());
  return Dealing{rank, static_cast<int>(left.size())};
}

}  // namespace fulcrum
