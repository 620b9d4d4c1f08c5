#include "python/fulcrum/native/errors.h"

#include <cctype>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"

namespace py = pybind11;

namespace fulcrum::native {
namespace {

// fulcrum.Error and one subclass per status code, by code.
std::map<absl::StatusCode, py::object>& ErrorClasses() {
  static auto* classes = new std::map<absl::StatusCode, py::object>();
  return *classes;
}

std::string CodeName(absl::StatusCode code) {
  // absl's names, in CamelCase: "INVALID_ARGUMENT" -> "InvalidArgument".
  const std::string upper = absl::StatusCodeToString(code);
  std::string name;
  bool start = true;
  for (char c : upper) {
    if (c == '_') {
      start = true;
      continue;
    }
    name += start ? c : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    start = false;
  }
  return name;
}

}  // namespace

[[noreturn]] void Throw(const absl::Status& status) { throw StatusError{status}; }

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) Throw(status);
}

void RegisterErrors(py::module_& m) {
  py::object base = py::reinterpret_steal<py::object>(
      PyErr_NewExceptionWithDoc("fulcrum.Error",
                                "A failed Fulcrum call: .code is the gRPC status code's name "
                                "(\"UNAVAILABLE\", ...), str() the server's or client's message.",
                                PyExc_RuntimeError, nullptr));
  m.attr("Error") = base;
  for (int c = 1; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    const std::string name = CodeName(code);
    py::object cls = py::reinterpret_steal<py::object>(
        PyErr_NewException(absl::StrCat("fulcrum.", name).c_str(), base.ptr(), nullptr));
    m.attr(name.c_str()) = cls;
    ErrorClasses()[code] = cls;
  }
  ErrorClasses()[absl::StatusCode::kOk] = base;
  // NOLINTNEXTLINE(performance-unnecessary-value-param): pybind11's signature
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      auto it = ErrorClasses().find(e.status.code());
      py::object cls =
          it != ErrorClasses().end() ? it->second : ErrorClasses()[absl::StatusCode::kOk];
      py::object error = cls(std::string(e.status.message()));
      error.attr("code") = absl::StatusCodeToString(e.status.code());
      PyErr_SetObject(cls.ptr(), error.ptr());
    }
  });
}

}  // namespace fulcrum::native
