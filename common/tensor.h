// Shapes, specs and float32 tensors on the wire (the tensor types
// themselves are the public API's, fulcrum/tensor.h). Thread-compatible.
#ifndef FULCRUM_COMMON_TENSOR_H_
#define FULCRUM_COMMON_TENSOR_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "fulcrum/tensor.h"
#include "proto/tensor.pb.h"

namespace fulcrum {

// The most elements a variable may have (64 GiB of float32), and the most
// dimensions. Every size derived from a shape within them fits an int64_t.
constexpr int64_t kMaxElements = int64_t{1} << 34;
constexpr int kMaxRank = 8;

// Product of dims; 1 for a scalar. The shape must be checked
// (CheckedNumElements or ValidateVariableSpec): the product is not.
int64_t NumElements(absl::Span<const int64_t> shape);

// Product of dims, computed without overflow; INVALID_ARGUMENT "<what>: ..."
// when the rank exceeds kMaxRank, a dim is < 1, or the product exceeds
// kMaxElements.
absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> shape,
                                           const std::string& what);

// "[13, 4]".
std::string ShapeString(absl::Span<const int64_t> shape);

// Elements in one row along axis 0 (product of the trailing dims).
int64_t RowElements(absl::Span<const int64_t> shape);

// Checks a variable spec: name, shape (CheckedNumElements, rank >= 1), dtype float32,
// initializer, partitioner, and the optimizer (ValidateOptimizerSpec).
// Errors name the variable and the field.
absl::Status ValidateVariableSpec(const VariableSpec& spec);

// The spec with every documented default made explicit: the optimizer's
// (CanonicalOptimizer) and the MIN_SIZE partitioner's (256 KiB shards, at
// most 1), so two specs that mean the same compare equal.
VariableSpec CanonicalSpec(const VariableSpec& spec);

// Float32 values travel as one of the float encodings (tensor.proto):
// DT_FLOAT as they are, DT_BFLOAT16 or DT_FLOAT16 in half the bytes, rounded
// to nearest even. The rounding error of one value x is at most
//   bfloat16: 2^-8 |x| (0.39%), over float32's whole range;
//   float16:  2^-11 |x| (0.049%) for 6.1e-5 <= |x| <= 65504, and 2^-25
//             absolute below that; beyond 65504 a value cannot be encoded.
// NaN and infinities keep their kind.
bool IsFloatEncoding(DataType dtype);
// Bytes per element of a float encoding: 4 or 2.
int64_t EncodedFloatBytes(DataType dtype);
// "float32", "bfloat16" or "float16" (flags) as a float encoding.
absl::StatusOr<DataType> ParseFloatEncoding(const std::string& name);

// Encodes float32 `values` of `shape` into `out`, as float32.
void EncodeFloatTensor(absl::Span<const int64_t> shape, absl::Span<const float> values,
                       TensorProto* out);
// The same in `encoding`. float16: OUT_OF_RANGE "<what>: element i is x ..."
// when a finite value is beyond its range (bfloat16 covers float32's).
absl::Status EncodeFloatTensor(absl::Span<const int64_t> shape, absl::Span<const float> values,
                               DataType encoding, const std::string& what, TensorProto* out);

// Checks that `tensor` holds `expected_shape` in a float encoding whose
// data, held in the tensor or not, is `data_bytes` long; errors say
// "<what>: expected ..., got ...".
absl::Status CheckFloatTensor(const TensorProto& tensor, absl::Span<const int64_t> expected_shape,
                              const std::string& what, size_t data_bytes);

// The float32 values of `tensor`, which must hold `expected_shape` in a
// float encoding with the matching byte size (CheckFloatTensor); errors say "<what>: expected
// ..., got ...". float32 is read in place, without a copy; bfloat16 and
// float16 are widened into `storage`. The span lives as long as both.
absl::StatusOr<absl::Span<const float>> DecodeFloatTensor(const TensorProto& tensor,
                                                          absl::Span<const int64_t> expected_shape,
                                                          const std::string& what,
                                                          std::vector<float>* storage);

// float32 values that may lie at any address (a gradient still in gRPC's
// receive buffers, say): their bytes, a whole number of floats, read with
// LoadFloat.
using FloatBytes = absl::Span<const char>;

inline FloatBytes AsFloatBytes(absl::Span<const float> values) {
  return {reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)};
}

// Float i of `bytes`; compiles to one (unaligned) load.
inline float LoadFloat(const char* bytes, size_t i) {
  float value;
  std::memcpy(&value, bytes + i * sizeof(float), sizeof(float));
  return value;
}

// The index of the first NaN or infinity in `values`, or -1. Vectorised:
// it runs on every pushed gradient.
int64_t FirstNonFinite(FloatBytes values);
inline int64_t FirstNonFinite(absl::Span<const float> values) {
  return FirstNonFinite(AsFloatBytes(values));
}

namespace internal {
// IEEE binary16 conversions bit by bit, rounded to nearest even (NaN stays
// NaN): what F16C does where a CPU lacks it. For the encodings above and
// their tests.
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t half);
}  // namespace internal

// The values of a float32 tensor whose size is already checked.
absl::Span<const float> FloatValues(const TensorProto& tensor);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_TENSOR_H_
