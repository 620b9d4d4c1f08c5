#include "worker/data/batcher.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

namespace fulcrum {

Batch GatherBatch(const Dataset& data, const std::vector<int64_t>& indices) {
  Batch batch;
  batch.size = static_cast<int64_t>(indices.size());
  batch.feature_dim = data.feature_dim;
  batch.features.resize(batch.size * data.feature_dim);
  batch.labels.resize(batch.size);
  batch.ids_per_example = data.ids_per_example;
  batch.ids.resize(batch.size * data.ids_per_example);
  for (int64_t i = 0; i < batch.size; ++i) {
    std::memcpy(&batch.features[i * data.feature_dim],
                &data.features[indices[i] * data.feature_dim], data.feature_dim * sizeof(float));
    batch.labels[i] = data.labels[indices[i]];
    if (data.ids_per_example == 0) continue;  // dense data: no ids, and no element to point at
    std::memcpy(&batch.ids[i * data.ids_per_example], &data.ids[indices[i] * data.ids_per_example],
                data.ids_per_example * sizeof(int64_t));
  }
  return batch;
}

std::vector<Batch> SequentialBatches(const Dataset& data, int64_t batch_size) {
  std::vector<Batch> batches;
  for (int64_t start = 0; start < data.num_examples; start += batch_size) {
    std::vector<int64_t> indices(std::min(batch_size, data.num_examples - start));
    std::iota(indices.begin(), indices.end(), start);
    batches.push_back(GatherBatch(data, indices));
  }
  return batches;
}

Batcher::Batcher(const Dataset& data, BatcherOptions options)
    : data_(data),
      options_(std::move(options)),
      steps_per_epoch_(StepsPerEpoch(data.num_examples, options_.num_shards, options_.batch_size)) {
  producer_ = std::thread([this] { Produce(); });
}

Batcher::~Batcher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  producer_.join();
}

void Batcher::Produce() {
  bool first = true;
  for (int64_t epoch = 0; epoch < options_.epochs; ++epoch) {
    if ((epoch + 1) * steps_per_epoch_ <= options_.skip) continue;  // resumed past it
    // The first epoch keeps the first dealing (the skip counts in it),
    // unless the skip ends exactly where it begins.
    const bool keep = first && (options_.skip == 0 || epoch * steps_per_epoch_ < options_.skip);
    Dealing dealing{options_.shard_index, options_.num_shards};
    if (!keep && options_.deal) dealing = options_.deal(epoch);
    first = false;
    const std::vector<int64_t> shard =
        DealtExamples(data_.num_examples, dealing, epoch, options_.seed, options_.batch_size);
    const int64_t steps = static_cast<int64_t>(shard.size()) / options_.batch_size;
    for (int64_t step = 0; step < steps; ++step) {
      if (epoch * steps_per_epoch_ + step < options_.skip) continue;
      std::vector<int64_t> indices(shard.begin() + step * options_.batch_size,
                                   shard.begin() + (step + 1) * options_.batch_size);
      Batch batch = GatherBatch(data_, indices);
      batch.epoch = epoch;
      batch.step_in_epoch = step;
      batch.steps_in_epoch = steps;
      absl::MutexLock lock(&mu_);
      auto room = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_ || static_cast<int>(ready_.size()) < options_.prefetch;
      };
      mu_.Await(absl::Condition(&room));
      if (stop_) return;
      ready_.push_back(std::move(batch));
    }
  }
  absl::MutexLock lock(&mu_);
  done_ = true;
}

std::optional<Batch> Batcher::Next() {
  absl::MutexLock lock(&mu_);
  auto available = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_ || !ready_.empty(); };
  mu_.Await(absl::Condition(&available));
  if (ready_.empty()) return std::nullopt;
  Batch batch = std::move(ready_.front());
  ready_.pop_front();
  return batch;
}

}  // namespace fulcrum
