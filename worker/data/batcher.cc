#include "worker/data/batcher.h"

#include <algorithm>
#include <cstring>
#include <memory>
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

Batcher::Batcher(const Dataset& data, DealingOptions dealing, int prefetch)
    : Batcher(
          [&data, dealer = std::make_shared<BatchDealer>(data.num_examples, std::move(dealing))]()
              -> absl::StatusOr<std::optional<Batch>> {
            std::optional<DealtBatch> dealt = dealer->Next();
            if (!dealt) return std::nullopt;
            Batch batch = GatherBatch(data, dealt->indices);
            batch.epoch = dealt->epoch;
            batch.step_in_epoch = dealt->step_in_epoch;
            batch.steps_in_epoch = dealt->steps_in_epoch;
            return batch;
          },
          prefetch) {}

Batcher::Batcher(Produce produce, int prefetch)
    : prefetch_(prefetch), produce_(std::move(produce)) {
  producer_ = std::thread([this] { Run(); });
}

Batcher::~Batcher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  producer_.join();
}

void Batcher::Run() {
  for (;;) {
    absl::StatusOr<std::optional<Batch>> made = produce_();
    absl::MutexLock lock(&mu_);
    if (!made.ok() || !*made) {
      status_ = made.status();
      done_ = true;
      return;
    }
    auto room = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stop_ || static_cast<int>(ready_.size()) < prefetch_;
    };
    mu_.Await(absl::Condition(&room));
    if (stop_) return;
    ready_.push_back(**std::move(made));
  }
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

absl::Status Batcher::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

}  // namespace fulcrum
