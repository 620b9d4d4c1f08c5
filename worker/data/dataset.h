// Training data in memory, and the readers that load it: IDX (plain or
// gzip, as Debian's dataset-fashion-mnist installs Fashion-MNIST) and libsvm
// text. Thread-compatible.
#ifndef FULCRUM_WORKER_DATA_DATASET_H_
#define FULCRUM_WORKER_DATA_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fulcrum {

// Dense examples with integer class labels.
struct Dataset {
  int64_t num_examples = 0;
  int64_t feature_dim = 0;
  int num_classes = 0;
  std::vector<float> features;  // num_examples x feature_dim, row-major
  std::vector<int32_t> labels;  // num_examples, each in [0, num_classes)
};

// Reads an IDX images file (magic 0x00000803, unsigned bytes, 3 dims) and an
// IDX labels file (0x00000801), each plain or gzip. Pixels are scaled to
// [0, 1]. Errors name the file and what is wrong: missing, wrong magic,
// truncated, counts that differ, a label >= num_classes.
absl::StatusOr<Dataset> ReadIdx(const std::string& images_path, const std::string& labels_path,
                                int num_classes);

// Reads libsvm text: "label index:value ..." per line, 1-based indices, `#`
// comments. Labels must be integers in [0, num_classes). feature_dim 0 takes
// the largest index seen. Errors name the file and line.
absl::StatusOr<Dataset> ReadLibsvm(const std::string& path, int num_classes,
                                   int64_t feature_dim = 0);

// Which data set, and where.
struct DataSource {
  std::string kind = "fashion_mnist";  // fashion_mnist, idx or libsvm
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int num_classes = 10;
  int64_t feature_dim = 0;  // libsvm: 0 infers it from the training file
};

// The training and test sets of a source. fashion_mnist and idx read
// {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from data_dir; libsvm
// reads train.libsvm and test.libsvm. A missing Fashion-MNIST names the
// Debian package that provides it.
absl::StatusOr<Dataset> LoadTrainingSet(const DataSource& source);
absl::StatusOr<Dataset> LoadTestSet(const DataSource& source, int64_t feature_dim);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_DATA_DATASET_H_
