#include "common/tensor.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/optimizer/spec.h"
#include "common/vector_loops.h"

namespace fulcrum {

int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> shape,
                                           const std::string& what) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": shape ", ShapeString(shape), " has rank ", shape.size(), "; at most ", kMaxRank));
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": every dimension must be >= 1, got shape ", ShapeString(shape)));
    }
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeString(shape),
                                                     " has more than ", kMaxElements, " elements"));
    }
  }
  return n;
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t RowElements(absl::Span<const int64_t> shape) {
  return shape.empty() ? 1 : NumElements(shape.subspan(1));
}

absl::Status ValidateVariableSpec(const VariableSpec& spec) {
  const std::string where = absl::StrCat("variable '", spec.name(), "'");
  if (spec.name().empty()) return absl::InvalidArgumentError("variable: name is empty");
  if (spec.shape_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": shape must have rank >= 1"));
  }
  if (auto elements = CheckedNumElements(spec.shape(), where); !elements.ok()) {
    return elements.status();
  }
  if (spec.dtype() != DT_FLOAT) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": dtype must be DT_FLOAT, got ", DataType_Name(spec.dtype())));
  }
  if (!InitializerSpec::Kind_IsValid(spec.initializer().kind()) ||
      !PartitionerSpec::Kind_IsValid(spec.partitioner().kind())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": unknown initializer or partitioner kind"));
  }
  const InitializerSpec& init = spec.initializer();
  if (!(init.stddev() >= 0) || !(init.minval() <= init.maxval()) || !std::isfinite(init.value()) ||
      !std::isfinite(init.mean())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": initializer needs finite values, stddev >= 0 and minval <= maxval"));
  }
  if (absl::Status s = ValidateOptimizerSpec(spec.optimizer(), where); !s.ok()) return s;
  const PartitionerSpec& part = spec.partitioner();
  if (part.min_shard_bytes() < 0 || part.max_shards() < 0 || part.num_shards() < 0 ||
      part.max_shard_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": partitioner sizes and counts must be >= 0"));
  }
  if (part.kind() == PartitionerSpec::FIXED_SHARDS && part.num_shards() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": FIXED_SHARDS partitioner needs num_shards >= 1"));
  }
  if (part.kind() == PartitionerSpec::MAX_SIZE && part.max_shard_bytes() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": MAX_SIZE partitioner needs max_shard_bytes >= 1"));
  }
  return absl::OkStatus();
}

VariableSpec CanonicalSpec(const VariableSpec& spec) {
  VariableSpec out = spec;
  *out.mutable_optimizer() = CanonicalOptimizer(spec.optimizer());
  PartitionerSpec* part = out.mutable_partitioner();
  if (part->kind() == PartitionerSpec::MIN_SIZE) {
    if (part->min_shard_bytes() == 0) part->set_min_shard_bytes(256 << 10);
    if (part->max_shards() == 0) part->set_max_shards(1);
  }
  return out;
}

namespace {

// Branch-free, so that the loops over it vectorise.
uint16_t ToBfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;  // nearest, ties even
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// Over a tensor, vectorised: SSE2 lacks the unsigned compare and packing
// that the loop needs, and runs a float at a time.
FULCRUM_VECTOR_CLONES void ToBfloat16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = ToBfloat16(in[i]);
}

float FromBfloat16(uint16_t half) {
  const uint32_t bits = static_cast<uint32_t>(half) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// IEEE binary16, rounded to nearest even: with the F16C instructions where
// the CPU has them (every x86-64 since 2013), else bit by bit
// (FloatToHalf, HalfToFloat), which gives the same bits far more slowly.
#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void ToFloat16F16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = _cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("avx,f16c"))) void FromFloat16F16c(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  for (; i < n; ++i) out[i] = _cvtsh_ss(in[i]);
}

// F16C and AVX, with the AVX registers' state saved by the OS.
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool f16c = (ecx & bit_F16C) != 0, avx = (ecx & bit_AVX) != 0;
  if (!f16c || !avx || (ecx & bit_OSXSAVE) == 0) return false;
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  return (xcr0_low & 6) == 6;  // SSE and AVX state
}

const bool kHasF16c = CpuHasF16c();
#endif

void ToFloat16(const float* in, uint16_t* out, size_t n) {
#if defined(__x86_64__)
  if (kHasF16c) return ToFloat16F16c(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = internal::FloatToHalf(in[i]);
}

void FromFloat16(const uint16_t* in, float* out, size_t n) {
#if defined(__x86_64__)
  if (kHasF16c) return FromFloat16F16c(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = internal::HalfToFloat(in[i]);
}

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

namespace internal {

uint16_t FloatToHalf(float value) {
  uint32_t bits = Bits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  bits &= 0x7fffffffu;
  if (bits >= 0x47800000u) {  // 2^16 and beyond: infinity; NaN stays NaN, made quiet
    return sign | (bits > 0x7f800000u ? 0x7e00u | ((bits >> 13) & 0x1ffu) : 0x7c00u);
  }
  if (bits < 0x38800000u) {
    // Below 2^-14 the half is subnormal: adding 0.5 (as 2^-1 scaled to the
    // half's last place) lets the float unit round the mantissa, to even.
    const uint32_t magic = (127 - 15 + 23 - 10 + 1) << 23;
    return sign | static_cast<uint16_t>(Bits(FromBits(bits) + FromBits(magic)) - magic);
  }
  // Normal: rebias the exponent, then round the 13 dropped bits to even.
  const uint32_t odd = (bits >> 13) & 1u;
  bits += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;
  return sign | static_cast<uint16_t>(bits >> 13);  // 65520 and up round to infinity here
}

float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  uint32_t bits = static_cast<uint32_t>(half & 0x7fffu) << 13;
  const uint32_t exponent = bits & (0x7c00u << 13);
  bits += static_cast<uint32_t>(127 - 15) << 23;  // rebias
  if (exponent == 0x7c00u << 13) {
    bits += static_cast<uint32_t>(128 - 16) << 23;  // infinity and NaN
  } else if (exponent == 0) {
    // Zero or subnormal: renormalise by subtracting the implicit one.
    bits = Bits(FromBits(bits + (1u << 23)) - FromBits(113u << 23));
  }
  return FromBits(bits | sign);
}

}  // namespace internal

bool IsFloatEncoding(DataType dtype) {
  return dtype == DT_FLOAT || dtype == DT_BFLOAT16 || dtype == DT_FLOAT16;
}

int64_t EncodedFloatBytes(DataType dtype) { return dtype == DT_FLOAT ? 4 : 2; }

absl::StatusOr<DataType> ParseFloatEncoding(const std::string& name) {
  if (name == "float32") return DT_FLOAT;
  if (name == "bfloat16") return DT_BFLOAT16;
  if (name == "float16") return DT_FLOAT16;
  return absl::InvalidArgumentError(
      absl::StrCat("'", name, "' is not one of float32, bfloat16, float16"));
}

void EncodeFloatTensor(absl::Span<const int64_t> shape, absl::Span<const float> values,
                       TensorProto* out) {
  out->set_dtype(DT_FLOAT);
  out->mutable_shape()->Assign(shape.begin(), shape.end());
  out->mutable_data()->assign(reinterpret_cast<const char*>(values.data()),
                              values.size() * sizeof(float));
}

absl::Status EncodeFloatTensor(absl::Span<const int64_t> shape, absl::Span<const float> values,
                               DataType encoding, const std::string& what, TensorProto* out) {
  if (encoding == DT_FLOAT) {
    EncodeFloatTensor(shape, values, out);
    return absl::OkStatus();
  }
  if (!IsFloatEncoding(encoding)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", DataType_Name(encoding), " is not a float encoding"));
  }
  out->set_dtype(encoding);
  out->mutable_shape()->Assign(shape.begin(), shape.end());
  std::string* data = out->mutable_data();
  data->resize(values.size() * sizeof(uint16_t));
  uint16_t* halves = reinterpret_cast<uint16_t*>(data->data());
  const float* in = values.data();
  if (encoding == DT_BFLOAT16) {
    ToBfloat16(in, halves, values.size());
    return absl::OkStatus();
  }
  ToFloat16(values.data(), halves, values.size());
  bool infinite = false;  // a cheap pass first: overflow is rare
  for (size_t i = 0; i < values.size(); ++i) infinite |= (halves[i] & 0x7fffu) == 0x7c00u;
  for (size_t i = 0; infinite && i < values.size(); ++i) {
    if ((halves[i] & 0x7fffu) == 0x7c00u && std::isfinite(values[i])) {
      return absl::OutOfRangeError(
          absl::StrCat(what, ": element ", i, " is ", values[i],
                       ", beyond float16's range (65504); send bfloat16 or float32 instead"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFloatTensor(const TensorProto& tensor, absl::Span<const int64_t> expected_shape,
                              const std::string& what, size_t data_bytes) {
  if (!IsFloatEncoding(tensor.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected dtype DT_FLOAT, DT_BFLOAT16 or DT_FLOAT16, got ",
                     DataType_Name(tensor.dtype())));
  }
  if (!std::equal(tensor.shape().begin(), tensor.shape().end(), expected_shape.begin(),
                  expected_shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected shape ",
                                                   ShapeString(expected_shape), ", got ",
                                                   ShapeString(tensor.shape())));
  }
  const size_t expected_bytes = NumElements(expected_shape) * EncodedFloatBytes(tensor.dtype());
  if (data_bytes != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeString(expected_shape),
                                                   " in ", DataType_Name(tensor.dtype()), " needs ",
                                                   expected_bytes, " bytes, got ", data_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const float>> DecodeFloatTensor(const TensorProto& tensor,
                                                          absl::Span<const int64_t> expected_shape,
                                                          const std::string& what,
                                                          std::vector<float>* storage) {
  if (absl::Status s = CheckFloatTensor(tensor, expected_shape, what, tensor.data().size());
      !s.ok()) {
    return s;
  }
  const int64_t elements = NumElements(expected_shape);
  if (tensor.dtype() == DT_FLOAT) return FloatValues(tensor);
  const auto* halves = reinterpret_cast<const uint16_t*>(tensor.data().data());
  storage->resize(elements);
  if (tensor.dtype() == DT_BFLOAT16) {
    for (int64_t i = 0; i < elements; ++i) (*storage)[i] = FromBfloat16(halves[i]);
  } else {
    FromFloat16(halves, storage->data(), elements);
  }
  return absl::MakeConstSpan(*storage);
}

int64_t FirstNonFinite(FloatBytes values) {
  // Raw pointers: Debian's Abseil bounds-checks Span's [], which keeps
  // loops from vectorising.
  const char* data = values.data();
  const size_t n = values.size() / sizeof(float);
  constexpr size_t kBlock = 4096;
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t end = std::min(n, start + kBlock);
    uint32_t non_finite = 0;  // a branch-free pass over the block, then the search
    for (size_t i = start; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, data + i * sizeof(bits), sizeof(bits));
      non_finite |= (bits & 0x7f800000u) == 0x7f800000u;
    }
    for (size_t i = start; non_finite != 0 && i < end; ++i) {
      if (!std::isfinite(LoadFloat(data, i))) return static_cast<int64_t>(i);
    }
  }
  return -1;
}

absl::Span<const float> FloatValues(const TensorProto& tensor) {
  return absl::Span<const float>(reinterpret_cast<const float*>(tensor.data().data()),
                                 tensor.data().size() / sizeof(float));
}

}  // namespace fulcrum
