// Training data in memory, and the readers that load it: IDX (plain or
// gzip, as Debian's dataset-fashion-mnist installs Fashion-MNIST) and libsvm
// text. Every file is read through a FileSystem (common/file_system.h), so
// tests can make reads fail. Thread-compatible.
#ifndef FULCRUM_WORKER_DATA_DATASET_H_
#define FULCRUM_WORKER_DATA_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_system.h"

namespace fulcrum {

// Examples with integer class labels: dense features and, for
// click-through-rate data, categorical ids.
struct Dataset {
  int64_t num_examples = 0;
  int64_t feature_dim = 0;
  int num_classes = 0;
  std::vector<float> features;  // num_examples x feature_dim, row-major
  std::vector<int32_t> labels;  // num_examples, each in [0, num_classes)
  // Categorical features: ids_per_example ids per example, one per field
  // (each field's ids its own); none for dense data.
  int64_t ids_per_example = 0;
  std::vector<int64_t> ids;  // num_examples x ids_per_example
  // The AUC of the true click probabilities on this set, where the data's
  // generator knows them (synthetic_ctr's test split); else negative.
  double oracle_auc = -1;
};

// Reads an IDX images file (magic 0x00000803, unsigned bytes, 3 dims) and an
// IDX labels file (0x00000801), each plain or gzip. Pixels are scaled to
// [0, 1]. Errors name the file and what is wrong: missing, wrong magic,
// truncated, counts that differ, a label >= num_classes.
absl::StatusOr<Dataset> ReadIdx(FileSystem& fs, const std::string& images_path,
                                const std::string& labels_path, int num_classes);

// Reads libsvm text: "label index:value ..." per line, 1-based indices, `#`
// comments. Labels must be integers in [0, num_classes). feature_dim 0 takes
// the largest index seen. Errors name the file and line.
absl::StatusOr<Dataset> ReadLibsvm(FileSystem& fs, const std::string& path, int num_classes,
                                   int64_t feature_dim = 0);

// Which data set, and where.
struct DataSource {
  // fashion_mnist, idx, libsvm, criteo or synthetic_ctr
  std::string kind = "fashion_mnist";
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int num_classes = 10;
  int64_t feature_dim = 0;  // libsvm: 0 infers it from the training file
  // synthetic_ctr: ids per field, and the examples of each split, drawn
  // from `seed` (the same on every worker).
  int64_t ctr_vocabulary = 1000000;
  int64_t ctr_train_examples = 1000000;
  int64_t ctr_test_examples = 100000;
  uint64_t seed = 0;
  // criteo: the training file is streamed (TrainingStream), not read into
  // memory, its share mixed through a buffer of this many examples.
  bool stream = false;
  int64_t shuffle_buffer = 1 << 16;
};

// INVALID_ARGUMENT naming the flag when `source` names no known data set,
// synthetic_ctr sizes below 1, a stream of another data set than criteo or
// a shuffle buffer below 1.
absl::Status ValidateDataSource(const DataSource& source);

// The training and test sets of a source. fashion_mnist and idx read
// {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from data_dir; libsvm
// reads train.libsvm and test.libsvm; criteo reads train.txt and test.txt
// (labelled Criteo TSV, streamed); synthetic_ctr generates both, the test
// split with its oracle AUC. A missing Fashion-MNIST names the Debian
// package that provides it.
absl::StatusOr<Dataset> LoadTrainingSet(FileSystem& fs, const DataSource& source);
absl::StatusOr<Dataset> LoadTestSet(FileSystem& fs, const DataSource& source, int64_t feature_dim);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_DATA_DATASET_H_
