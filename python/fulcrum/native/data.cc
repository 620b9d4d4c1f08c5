// fulcrum._fulcrum's data: the C++ worker's own data sets
// (worker/data/dataset.h) and dealing of them (worker/data/dealing.h), so
// that a Python job trains on the batches a C++ job of the same seed would.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_system.h"
#include "python/fulcrum/native/errors.h"
#include "python/fulcrum/native/module.h"
#include "worker/data/dataset.h"
#include "worker/data/dealing.h"
#include "worker/data/stream_batcher.h"

namespace py = pybind11;

namespace fulcrum::native {
namespace {

// A BatchDealer whose later epochs' dealings come from `deal(epoch)`, a
// Python callable returning (shard_index, num_shards), or None.
class PyBatchDealer {
 public:
  PyBatchDealer(int64_t num_examples, int shard_index, int num_shards, int64_t batch_size,
                int64_t epochs, uint64_t seed, int64_t skip, py::object deal)
      : dealer_(num_examples, Options(num_examples, shard_index, num_shards, batch_size, epochs,
                                      seed, skip, std::move(deal))) {}

  int64_t steps_per_epoch() const { return dealer_.steps_per_epoch(); }

  // (indices, epoch, step_in_epoch, steps_in_epoch), or None after the last.
  py::object Next() {
    std::optional<DealtBatch> batch = dealer_.Next();
    if (!batch) return py::none();
    py::array_t<int64_t> indices(static_cast<py::ssize_t>(batch->indices.size()),
                                 batch->indices.data());
    return py::make_tuple(indices, batch->epoch, batch->step_in_epoch, batch->steps_in_epoch);
  }

  // Checked: INVALID_ARGUMENT naming what is wrong.
  static DealingOptions Options(int64_t num_examples, int shard_index, int num_shards,
                                int64_t batch_size, int64_t epochs, uint64_t seed, int64_t skip,
                                py::object deal) {
    if (num_examples < 0 || num_shards < 1 || shard_index < 0 || shard_index >= num_shards ||
        batch_size < 1 || epochs < 0 || skip < 0) {
      Throw(absl::InvalidArgumentError(absl::StrCat(
          "dealing ", num_examples, " examples: shard ", shard_index, " of ", num_shards,
          ", batch size ", batch_size, ", ", epochs, " epochs, skipping ", skip,
          " (need shard in [0, shards), batch size >= 1 and no negative count)")));
    }
    DealingOptions options{shard_index, num_shards, batch_size, epochs, seed, skip, nullptr};
    if (!deal.is_none()) {
      options.deal = [deal = std::move(deal)](int64_t epoch) {
        auto [index, shards] = deal(epoch).cast<std::pair<int, int>>();
        return Dealing{index, shards};
      };
    }
    return options;
  }

 private:
  BatchDealer dealer_;
};

// A worker's batches of a Criteo training file streamed as the C++
// worker's --stream_data streams it (worker/data/stream_batcher.h): the
// file counted and checked at construction, then read again each epoch.
class PyStreamDealer {
 public:
  PyStreamDealer(const std::string& data_dir, int64_t shuffle_buffer, int shard_index,
                 int num_shards, int64_t batch_size, int64_t epochs, uint64_t seed, int64_t skip,
                 py::object deal)
      : fs_(MakeLocalFileSystem()) {
    DataSource source;
    source.kind = "criteo";
    source.data_dir = data_dir;
    source.stream = true;
    source.shuffle_buffer = shuffle_buffer;
    absl::StatusOr<TrainingStream> opened = [&] {
      py::gil_scoped_release release;
      return OpenTrainingStream(*fs_, source);
    }();
    ThrowIfError(opened.status());
    stream_ = std::move(opened->stream);
    steps_per_epoch_ = StepsPerEpoch(stream_.num_examples, num_shards, batch_size);
    produce_ = StreamBatches(
        stream_, PyBatchDealer::Options(stream_.num_examples, shard_index, num_shards, batch_size,
                                        epochs, seed, skip, std::move(deal)));
  }

  int64_t num_examples() const { return stream_.num_examples; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }

  // (features, labels, ids, epoch, step_in_epoch, steps_in_epoch), or None
  // after the last. Read with the GIL held: the dealing of a new epoch asks
  // Python.
  py::object Next() {
    absl::StatusOr<std::optional<Batch>> made = produce_();
    ThrowIfError(made.status());
    if (!*made) return py::none();
    const Batch& batch = **made;
    return py::make_tuple(
        py::array_t<float>({batch.size, batch.feature_dim}, batch.features.data()),
        py::array_t<int32_t>(static_cast<py::ssize_t>(batch.labels.size()), batch.labels.data()),
        py::array_t<int64_t>({batch.size, batch.ids_per_example}, batch.ids.data()), batch.epoch,
        batch.step_in_epoch, batch.steps_in_epoch);
  }

 private:
  const std::unique_ptr<FileSystem> fs_;  // the stream reads through it
  ExampleStream stream_;
  int64_t steps_per_epoch_ = 0;
  Batcher::Produce produce_;
};

// {"features", "labels", "ids", "num_classes", "oracle_auc"} of a data
// set's split, as the C++ worker loads it (worker/data/dataset.h). The test
// split must have the training set's `feature_dim`; < 0 loads the
// training set to learn it.
py::dict LoadDataset(const std::string& kind, const std::string& split, const std::string& data_dir,
                     int num_classes, int64_t ctr_vocabulary, int64_t ctr_train_examples,
                     int64_t ctr_test_examples, uint64_t seed, int64_t feature_dim) {
  if (split != "train" && split != "test") {
    Throw(absl::InvalidArgumentError(absl::StrCat("split '", split, "': train or test")));
  }
  DataSource source;
  source.kind = kind;
  source.data_dir = data_dir;
  source.num_classes = num_classes;
  source.ctr_vocabulary = ctr_vocabulary;
  source.ctr_train_examples = ctr_train_examples;
  source.ctr_test_examples = ctr_test_examples;
  source.seed = seed;
  ThrowIfError(ValidateDataSource(source));
  absl::StatusOr<Dataset> data = [&]() -> absl::StatusOr<Dataset> {
    py::gil_scoped_release release;
    auto fs = MakeLocalFileSystem();
    if (split == "train") return LoadTrainingSet(*fs, source);
    if (feature_dim < 0) {
      auto train = LoadTrainingSet(*fs, source);  // the test set takes its width
      if (!train.ok()) return train.status();
      feature_dim = train->feature_dim;
    }
    return LoadTestSet(*fs, source, feature_dim);
  }();
  ThrowIfError(data.status());
  py::dict out;
  out["features"] =
      py::array_t<float>({data->num_examples, data->feature_dim}, data->features.data());
  out["labels"] =
      py::array_t<int32_t>(static_cast<py::ssize_t>(data->labels.size()), data->labels.data());
  out["ids"] = py::array_t<int64_t>({data->num_examples, data->ids_per_example}, data->ids.data());
  out["num_classes"] = data->num_classes;
  out["oracle_auc"] = data->oracle_auc;
  return out;
}

}  // namespace

void RegisterData(py::module_& m) {
  m.def("load_dataset", &LoadDataset, py::arg("kind"), py::arg("split"), py::arg("data_dir"),
        py::arg("num_classes"), py::arg("ctr_vocabulary"), py::arg("ctr_train_examples"),
        py::arg("ctr_test_examples"), py::arg("seed"), py::arg("feature_dim"));
  py::class_<PyBatchDealer>(m, "BatchDealer")
      .def(py::init<int64_t, int, int, int64_t, int64_t, uint64_t, int64_t, py::object>(),
           py::arg("num_examples"), py::arg("shard_index"), py::arg("num_shards"),
           py::arg("batch_size"), py::arg("epochs"), py::arg("seed"), py::arg("skip"),
           py::arg("deal"))
      .def("next", &PyBatchDealer::Next)
      .def_property_readonly("steps_per_epoch", &PyBatchDealer::steps_per_epoch);
  py::class_<PyStreamDealer>(m, "StreamDealer")
      .def(py::init<const std::string&, int64_t, int, int, int64_t, int64_t, uint64_t, int64_t,
                    py::object>(),
           py::arg("data_dir"), py::arg("shuffle_buffer"), py::arg("shard_index"),
           py::arg("num_shards"), py::arg("batch_size"), py::arg("epochs"), py::arg("seed"),
           py::arg("skip"), py::arg("deal"))
      .def("next", &PyStreamDealer::Next)
      .def_property_readonly("num_examples", &PyStreamDealer::num_examples)
      .def_property_readonly("steps_per_epoch", &PyStreamDealer::steps_per_epoch);
}

}  // namespace fulcrum::native
