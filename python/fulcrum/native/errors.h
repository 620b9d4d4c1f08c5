// Errors on their way from Fulcrum's C++ to Python: fulcrum.Error and a
// subclass per status code (fulcrum.Unavailable, ...), with .code (the
// name) and the message.
#ifndef FULCRUM_PYTHON_FULCRUM_NATIVE_ERRORS_H_
#define FULCRUM_PYTHON_FULCRUM_NATIVE_ERRORS_H_

#include <pybind11/pybind11.h>

#include "absl/status/status.h"

namespace fulcrum::native {

// A failed absl::Status on its way to Python.
struct StatusError {
  absl::Status status;
};

// Raises `status` (not OK) in Python, as its fulcrum.Error subclass.
[[noreturn]] void Throw(const absl::Status& status);
void ThrowIfError(const absl::Status& status);

// Adds fulcrum.Error and its subclasses to `m`, and their translation.
void RegisterErrors(pybind11::module_& m);

}  // namespace fulcrum::native

#endif  // FULCRUM_PYTHON_FULCRUM_NATIVE_ERRORS_H_
