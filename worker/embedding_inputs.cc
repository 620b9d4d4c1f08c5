#include "worker/embedding_inputs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fulcrum {

std::vector<EmbeddingTableSpec> EmbeddingTables(const EmbeddingConfig& config) {
  std::vector<EmbeddingTableSpec> tables;
  for (int f = 0; f < config.fields; ++f) {
    EmbeddingTableSpec spec = config.table;
    spec.set_name(absl::StrCat("field_", f));
    tables.push_back(spec);
  }
  return tables;
}

EmbeddingInputs::EmbeddingInputs(PsClient* client, EmbeddingConfig config)
    : client_(client), config_(std::move(config)), tables_(EmbeddingTables(config_)) {}

absl::Status EmbeddingInputs::CreateTables() { return client_->CreateTables(tables_); }

int64_t EmbeddingInputs::InputDim(int64_t numeric) const {
  return numeric + config_.fields * config_.table.width();
}

std::vector<TableIds> EmbeddingInputs::Lookups(const Batch& batch) const {
  const int fields = config_.fields;
  std::vector<TableIds> lookups(fields);
  for (int f = 0; f < fields; ++f) {
    lookups[f].table = tables_[f].name();
    lookups[f].ids.resize(batch.size);
    for (int64_t i = 0; i < batch.size; ++i) lookups[f].ids[i] = batch.ids[i * fields + f];
  }
  return lookups;
}

absl::Status EmbeddingInputs::Gather(Batch* batch) {
  const int fields = config_.fields;
  const int64_t width = config_.table.width();
  if (batch->ids_per_example != fields) {
    return absl::InvalidArgumentError(absl::StrCat("the data has ", batch->ids_per_example,
                                                   " categorical fields; the model has ", fields));
  }
  const std::vector<TableIds> lookups = Lookups(*batch);
  std::vector<std::vector<float>> rows;
  if (absl::Status s = client_->PullRows(lookups, &rows); !s.ok()) return s;
  const int64_t numeric = batch->feature_dim;
  const int64_t dim = InputDim(numeric);
  std::vector<float> features(batch->size * dim);
  for (int64_t i = 0; i < batch->size; ++i) {
    float* out = features.data() + i * dim;
    std::copy_n(batch->features.data() + i * numeric, numeric, out);
    for (int f = 0; f < fields; ++f) {
      std::copy_n(rows[f].data() + i * width, width, out + numeric + f * width);
    }
  }
  batch->features = std::move(features);
  batch->feature_dim = dim;
  return absl::OkStatus();
}

absl::StatusOr<PushStats> EmbeddingInputs::Push(const Batch& batch,
                                                absl::Span<const float> input_grads) {
  const int fields = config_.fields;
  const int64_t width = config_.table.width();
  const int64_t dim = batch.feature_dim;
  const int64_t numeric = dim - fields * width;
  const std::vector<TableIds> lookups = Lookups(batch);
  std::vector<std::vector<float>> grads(fields);
  for (int f = 0; f < fields; ++f) {
    grads[f].resize(batch.size * width);
    for (int64_t i = 0; i < batch.size; ++i) {
      std::copy_n(input_grads.data() + i * dim + numeric + f * width, width,
                  grads[f].data() + i * width);
    }
  }
  return client_->PushRows(lookups, {grads.begin(), grads.end()});
}

absl::Status EmbeddingInputs::PushNothing() {
  return client_->PushRows(Lookups(Batch()), std::vector<absl::Span<const float>>(config_.fields))
      .status();
}

}  // namespace fulcrum
