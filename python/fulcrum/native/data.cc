// fulcrum._fulcrum's dealing of training examples: the C++ worker's own
// BatchDealer (worker/data/dealing.h), so that a Python job trains the
// batches a C++ job of the same seed would.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "python/fulcrum/native/errors.h"
#include "python/fulcrum/native/module.h"
#include "worker/data/dealing.h"

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

 private:
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

  BatchDealer dealer_;
};

}  // namespace

void RegisterData(py::module_& m) {
  py::class_<PyBatchDealer>(m, "BatchDealer")
      .def(py::init<int64_t, int, int, int64_t, int64_t, uint64_t, int64_t, py::object>(),
           py::arg("num_examples"), py::arg("shard_index"), py::arg("num_shards"),
           py::arg("batch_size"), py::arg("epochs"), py::arg("seed"), py::arg("skip"),
           py::arg("deal"))
      .def("next", &PyBatchDealer::Next)
      .def_property_readonly("steps_per_epoch", &PyBatchDealer::steps_per_epoch);
}

}  // namespace fulcrum::native
