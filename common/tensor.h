// Shapes, specs and float32 tensors on the wire. Thread-compatible.
#ifndef FULCRUM_COMMON_TENSOR_H_
#define FULCRUM_COMMON_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/tensor.pb.h"

namespace fulcrum {

using Shape = std::vector<int64_t>;

// A dense float32 tensor in host memory, row-major.
struct DenseTensor {
  Shape shape;
  std::vector<float> values;
};

// Product of dims; 1 for a scalar.
int64_t NumElements(absl::Span<const int64_t> shape);

// "[13, 4]".
std::string ShapeString(absl::Span<const int64_t> shape);

// Elements in one row along axis 0 (product of the trailing dims).
int64_t RowElements(absl::Span<const int64_t> shape);

// Checks a variable spec: name, shape (rank >= 1, dims >= 1), dtype float32,
// optimizer hyper-parameters. Errors name the variable and the field.
absl::Status ValidateVariableSpec(const VariableSpec& spec);

// The spec with every documented default made explicit (epsilon, betas, ...),
// so two specs that mean the same compare equal.
VariableSpec CanonicalSpec(const VariableSpec& spec);

// Encodes float32 `values` of `shape` into `out`.
void EncodeFloatTensor(absl::Span<const int64_t> shape, absl::Span<const float> values,
                       TensorProto* out);

// Checks that `tensor` is float32 of `expected_shape` with matching byte
// size; errors say "<what>: expected ..., got ...".
absl::Status CheckFloatTensor(const TensorProto& tensor, absl::Span<const int64_t> expected_shape,
                              const std::string& what);

// The float32 values of a tensor already checked by CheckFloatTensor.
absl::Span<const float> FloatValues(const TensorProto& tensor);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_TENSOR_H_
