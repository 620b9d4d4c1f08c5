#include "worker/data/ctr_data.h"

#include "worker/binary_metrics.h"
#include "worker/data/criteo.h"

namespace fulcrum {
namespace {

// Appends `examples` to `data`.
void Append(const CtrExamples& examples, Dataset* data) {
  data->num_examples += examples.num_examples;
  data->feature_dim = examples.num_numeric;
  data->ids_per_example = examples.num_fields;
  data->num_classes = 2;
  data->features.insert(data->features.end(), examples.numeric.begin(), examples.numeric.end());
  data->ids.insert(data->ids.end(), examples.ids.begin(), examples.ids.end());
  for (float label : examples.labels) data->labels.push_back(label > 0.5f ? 1 : 0);
}

}  // namespace

Dataset CtrDataset(const CtrExamples& examples) {
  Dataset data;
  Append(examples, &data);
  if (!examples.true_prob.empty()) data.oracle_auc = Auc(examples.true_prob, examples.labels);
  return data;
}

absl::StatusOr<Dataset> ReadCriteoFile(FileSystem& fs, const std::string& path) {
  auto reader = CriteoReader::Open(fs, path);
  if (!reader.ok()) return reader.status();
  Dataset data;
  data.feature_dim = CriteoReader::kNumeric;
  data.ids_per_example = CriteoReader::kFields;
  data.num_classes = 2;
  while (true) {
    absl::StatusOr<CtrExamples> chunk = (*reader)->Next(1 << 16);
    if (!chunk.ok()) return chunk.status();
    if (chunk->num_examples == 0) break;
    Append(*chunk, &data);
  }
  return data;
}

}  // namespace fulcrum
