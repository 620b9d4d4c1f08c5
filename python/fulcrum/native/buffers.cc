#include "python/fulcrum/native/buffers.h"

#include "absl/strings/str_cat.h"
#include "python/fulcrum/native/errors.h"

namespace py = pybind11;

namespace fulcrum::native {
namespace {

bool BufferFormatIs(const char* format, Element e) {
  if (format == nullptr) return false;
  std::string f = format;
  if (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@')) f = f.substr(1);
  if (e == Element::kFloat32) return f == "f";
  return f == "q" || f == "l";  // with itemsize 8, checked by the caller
}

}  // namespace

const char* ElementName(Element e) { return e == Element::kFloat32 ? "float32" : "int64"; }

HeldBuffer::HeldBuffer(const py::handle& object, Element element, bool writable,
                       const std::string& what) {
  if (PyObject_CheckBuffer(object.ptr())) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
    if (writable) flags |= PyBUF_WRITABLE;
    if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) {
      const std::string why = py::error_already_set().what();
      Throw(absl::InvalidArgumentError(absl::StrCat(what, ": needs a C-contiguous",
                                                    writable ? ", writable " : " ",
                                                    ElementName(element), " buffer (", why, ")")));
    }
    has_view_ = true;
    const Py_ssize_t itemsize = element == Element::kFloat32 ? 4 : 8;
    if (view_.itemsize != itemsize || !BufferFormatIs(view_.format, element)) {
      const std::string format = view_.format != nullptr ? view_.format : "?";
      Release();
      Throw(absl::InvalidArgumentError(absl::StrCat(what, ": a buffer of format '", format,
                                                    "'; Fulcrum takes ", ElementName(element),
                                                    " and converts nothing")));
    }
    data_ = view_.buf;
    for (int i = 0; i < view_.ndim; ++i) shape_.push_back(view_.shape[i]);
    return;
  }
  if (!py::hasattr(object, "__dlpack__")) {
    Throw(absl::InvalidArgumentError(absl::StrCat(
        what, ": a ", py::str(py::type::of(object).attr("__name__")).cast<std::string>(),
        "; Fulcrum takes NumPy arrays, CPU torch tensors or other objects with the buffer "
        "protocol or __dlpack__")));
  }
  py::object capsule;
  try {
    capsule = object.attr("__dlpack__")();
  } catch (py::error_already_set& e) {
    const std::string why = py::str(e.value());
    Throw(absl::InvalidArgumentError(absl::StrCat(what, ": ", why)));
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) {
    PyErr_Clear();
    Throw(absl::InvalidArgumentError(absl::StrCat(what, ": __dlpack__ gave no DLPack tensor")));
  }
  // Ours now: the capsule must not free it again.
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  managed_ = managed;
  const DLTensor& t = managed->dl_tensor;
  const bool type_ok = t.dtype.lanes == 1 && (element == Element::kFloat32
                                                  ? t.dtype.code == kDLFloat && t.dtype.bits == 32
                                                  : t.dtype.code == kDLInt && t.dtype.bits == 64);
  if (t.device.device_type != kDLCPU) {
    Release();
    Throw(absl::InvalidArgumentError(
        absl::StrCat(what, ": a tensor on device type ", t.device.device_type,
                     "; Fulcrum reads and writes host memory (move it with .cpu())")));
  }
  if (!type_ok) {
    const int code = t.dtype.code, bits = t.dtype.bits;
    Release();
    Throw(absl::InvalidArgumentError(absl::StrCat(what, ": a DLPack tensor of type code ", code,
                                                  " and ", bits, " bits; Fulcrum takes ",
                                                  ElementName(element), " and converts nothing")));
  }
  for (int i = 0; i < t.ndim; ++i) shape_.push_back(t.shape[i]);
  // A tensor of no elements has nothing to lay out (torch gives it strides
  // of its own making).
  if (t.strides != nullptr && elements() > 0) {
    int64_t expected = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expected) {
        Release();
        Throw(absl::InvalidArgumentError(
            absl::StrCat(what, ": not C-contiguous (call .contiguous() first)")));
      }
      expected *= t.shape[i];
    }
  }
  data_ = static_cast<char*>(t.data) + t.byte_offset;
}

// Holds each tensor of `tensors` (float32, writable for outputs) and views
// it by name: in `into->out` for outputs, in `into->in` for inputs. `role`
// names them in errors ("gradient", "output").
void Hold(const py::dict& tensors, const char* role, bool output, HeldTensors* into) {
  for (const auto& [key, value] : tensors) {
    const std::string name = py::str(key);
    into->held.push_back(std::make_unique<HeldBuffer>(value, Element::kFloat32, output,
                                                      absl::StrCat(role, " '", name, "'")));
    const HeldBuffer& b = *into->held.back();
    if (output) {
      into->out[name] = TensorView{b.shape(), static_cast<float*>(b.data())};
    } else {
      into->in[name] = ConstTensorView{b.shape(), static_cast<const float*>(b.data())};
    }
  }
}

}  // namespace fulcrum::native
