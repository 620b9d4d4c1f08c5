// fulcrum._fulcrum's reading of checkpoints as NumPy arrays: the tensors
// fulcrumctl export writes (common/checkpoint/exported.h), each read in
// pieces straight into its array.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "common/checkpoint/exported.h"
#include "common/file_system.h"
#include "python/fulcrum/native/errors.h"
#include "python/fulcrum/native/module.h"

namespace py = pybind11;

namespace fulcrum::native {
namespace {

// (description, {name: array}) of the checkpoint `step` (-1: the job's
// last state) in `dir`.
py::tuple LoadCheckpoint(const std::string& dir, int64_t step, bool slots) {
  auto fs = MakeLocalFileSystem();
  absl::StatusOr<ExportedCheckpoint> checkpoint = [&] {
    py::gil_scoped_release release;
    return ExportedCheckpoint::Open(*fs, dir, {step, slots});
  }();
  ThrowIfError(checkpoint.status());
  py::dict tensors;
  for (size_t i = 0; i < checkpoint->tensors().size(); ++i) {
    const ExportedTensor& tensor = checkpoint->tensors()[i];
    const std::vector<py::ssize_t> shape(tensor.shape.begin(), tensor.shape.end());
    py::array array = tensor.int64 ? py::array(py::dtype::of<int64_t>(), shape)
                                   : py::array(py::dtype::of<float>(), shape);
    auto* into = static_cast<char*>(array.mutable_data());
    int64_t filled = 0;  // Read gives no more than the array's bytes
    absl::Status read;
    {
      py::gil_scoped_release release;
      read = checkpoint->Read(i, [&](absl::string_view bytes) {
        std::memcpy(into + filled, bytes.data(), bytes.size());
        filled += static_cast<int64_t>(bytes.size());
        return absl::OkStatus();
      });
    }
    ThrowIfError(read);
    tensors[py::str(tensor.name)] = array;
  }
  return py::make_tuple(checkpoint->description(), tensors);
}

}  // namespace

void RegisterExport(py::module_& m) {
  m.def("load_checkpoint", &LoadCheckpoint, py::arg("dir"), py::arg("step"), py::arg("slots"));
}

}  // namespace fulcrum::native
