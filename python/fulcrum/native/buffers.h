// The caller's own buffers, held for one call: NumPy arrays, memoryviews
// (the buffer protocol) and CPU torch tensors (DLPack), float32 or int64,
// C-contiguous and never converted: anything else is refused, so no call
// copies behind the caller's back.
#ifndef FULCRUM_PYTHON_FULCRUM_NATIVE_BUFFERS_H_
#define FULCRUM_PYTHON_FULCRUM_NATIVE_BUFFERS_H_

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fulcrum/tensor.h"

namespace fulcrum::native {

// The element types tensors and ids come in.
enum class Element { kFloat32, kInt64 };

// The name of `e` in errors.
const char* ElementName(Element e);

// A caller's buffer, held for one call: through the buffer protocol or
// DLPack. Must be acquired and released with the GIL held.
class HeldBuffer {
 public:
  // `what` names it in errors ("variable 'w'"); `writable` for outputs.
  HeldBuffer(const pybind11::handle& object, Element element, bool writable,
             const std::string& what);

  ~HeldBuffer() { Release(); }
  HeldBuffer(const HeldBuffer&) = delete;
  HeldBuffer& operator=(const HeldBuffer&) = delete;

  void* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return n;
  }

 private:
  void Release() {
    if (has_view_) PyBuffer_Release(&view_);
    has_view_ = false;
    if (managed_ != nullptr && managed_->deleter != nullptr) managed_->deleter(managed_);
    managed_ = nullptr;
  }

  Py_buffer view_{};
  bool has_view_ = false;
  DLManagedTensor* managed_ = nullptr;
  void* data_ = nullptr;
  Shape shape_;
};

// The buffers of one call, and views of them for PsClient.
struct HeldTensors {
  std::vector<std::unique_ptr<HeldBuffer>> held;
  TensorViews out;
  ConstTensorViews in;
};

// Holds each tensor of `tensors` (float32, writable for outputs) and views
// it by name: in `into->out` for outputs, in `into->in` for inputs. `role`
// names them in errors ("gradient", "output").
void Hold(const pybind11::dict& tensors, const char* role, bool output, HeldTensors* into);

}  // namespace fulcrum::native

#endif  // FULCRUM_PYTHON_FULCRUM_NATIVE_BUFFERS_H_
