// Click-through-rate examples (synthetic_ctr.h, criteo.h) as the trainer's
// Dataset: the numeric features as its dense features, one id per field,
// labels 0 and 1.
#ifndef FULCRUM_WORKER_DATA_CTR_DATA_H_
#define FULCRUM_WORKER_DATA_CTR_DATA_H_

#include <string>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"
#include "worker/data/synthetic_ctr.h"

namespace fulcrum {

// `examples` as a two-class Dataset; with true probabilities, their AUC
// is its oracle_auc.
Dataset CtrDataset(const CtrExamples& examples);

// A whole Criteo TSV file, read in bounded chunks; errors name the file
// and line.
absl::StatusOr<Dataset> ReadCriteoFile(FileSystem& fs, const std::string& path);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_DATA_CTR_DATA_H_
