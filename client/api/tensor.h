// Fulcrum's public C++ API: dense tensors in host memory, as a client pulls
// variables into them and pushes gradients from them. Plain types with no
// dependencies. Include as "fulcrum/tensor.h". Thread-compatible.
#ifndef FULCRUM_CLIENT_API_TENSOR_H_
#define FULCRUM_CLIENT_API_TENSOR_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fulcrum {

// Dimensions, outermost first.
using Shape = std::vector<int64_t>;

// A dense float32 tensor, row-major: values.size() is the product of shape.
struct DenseTensor {
  Shape shape;
  std::vector<float> values;
};

// Whole variables (or their gradients) by name.
using TensorMap = std::map<std::string, DenseTensor>;

// A caller's float32 buffer seen as a tensor, row-major: `data` holds the
// product of `shape` floats. The client reads (ConstTensorView) or writes
// (TensorView) it in place during one call, and never keeps or frees it.
struct TensorView {
  Shape shape;
  float* data = nullptr;
};
struct ConstTensorView {
  Shape shape;
  const float* data = nullptr;
};

// Caller buffers by variable name.
using TensorViews = std::map<std::string, TensorView>;
using ConstTensorViews = std::map<std::string, ConstTensorView>;

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_API_TENSOR_H_
