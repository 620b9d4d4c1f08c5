#include "common/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// `values` encoded as `encoding` and decoded back.
std::vector<float> RoundTrip(const std::vector<float>& values, DataType encoding) {
  TensorProto tensor;
  const Shape shape = {static_cast<int64_t>(values.size())};
  EXPECT_TRUE(EncodeFloatTensor(shape, values, encoding, "t", &tensor).ok());
  EXPECT_EQ(tensor.data().size(), values.size() * EncodedFloatBytes(encoding));
  std::vector<float> storage;
  auto decoded = DecodeFloatTensor(tensor, shape, "t", &storage);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  return std::vector<float>(decoded->begin(), decoded->end());
}

TEST(FloatEncodingTest, RoundsToNearestEven) {
  const float one = 1.0f;
  // bfloat16 keeps 8 significant bits: 1 + 2^-8 is halfway between 1 and
  // 1 + 2^-7, and goes to the even one; 1 + 3 * 2^-8 goes up to 1 + 2^-6.
  EXPECT_EQ(RoundTrip({one + std::ldexp(1.0f, -8), one + 3 * std::ldexp(1.0f, -8),
                       one + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)},
                      DT_BFLOAT16),
            (std::vector<float>{one, one + std::ldexp(1.0f, -6), one + std::ldexp(1.0f, -7)}));
  // float16 keeps 11.
  EXPECT_EQ(RoundTrip({one + std::ldexp(1.0f, -11), one + 3 * std::ldexp(1.0f, -11)}, DT_FLOAT16),
            (std::vector<float>{one, one + std::ldexp(1.0f, -9)}));
  EXPECT_EQ(RoundTrip({0.1f, -2.5f}, DT_FLOAT), (std::vector<float>{0.1f, -2.5f}));
}

TEST(FloatEncodingTest, ErrorStaysWithinTheDocumentedBounds) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> sign(0, 1);
  std::vector<float> wide, half_range, tiny;
  for (int i = 0; i < 20000; ++i) {
    const float s = sign(rng) ? -1.0f : 1.0f;
    wide.push_back(s * std::ldexp(mantissa(rng), i % 200 - 100));      // 2^-100 .. 2^100
    half_range.push_back(s * std::ldexp(mantissa(rng), i % 29 - 14));  // 2^-14 .. 2^15
    tiny.push_back(s * std::ldexp(mantissa(rng), -(i % 10) - 15));     // below 2^-14
  }
  const std::vector<float> bf16 = RoundTrip(wide, DT_BFLOAT16);
  for (size_t i = 0; i < wide.size(); ++i) {
    ASSERT_LE(std::abs(bf16[i] - wide[i]), std::ldexp(std::abs(wide[i]), -8)) << wide[i];
  }
  const std::vector<float> f16 = RoundTrip(half_range, DT_FLOAT16);
  for (size_t i = 0; i < half_range.size(); ++i) {
    ASSERT_LE(std::abs(f16[i] - half_range[i]), std::ldexp(std::abs(half_range[i]), -11))
        << half_range[i];
  }
  const std::vector<float> f16_tiny = RoundTrip(tiny, DT_FLOAT16);
  for (size_t i = 0; i < tiny.size(); ++i) {
    ASSERT_LE(std::abs(f16_tiny[i] - tiny[i]), std::ldexp(1.0f, -25)) << tiny[i];
  }
}

// The vectorised float16 path (8 at a time, then the rest) gives the same
// bits as the compiler's own conversion, for every kind of value.
TEST(FloatEncodingTest, Float16MatchesTheCompilersConversion) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> values;
  for (int i = 0; i < 10003; ++i) {
    float v;
    const uint32_t b = bits(rng);
    std::memcpy(&v, &b, sizeof(v));
    v = std::isfinite(v) ? std::fmod(v, 65000.0f) : v;
    values.push_back(v);
  }
  TensorProto tensor;
  ASSERT_TRUE(
      EncodeFloatTensor({static_cast<int64_t>(values.size())}, values, DT_FLOAT16, "t", &tensor)
          .ok());
  const auto* halves = reinterpret_cast<const uint16_t*>(tensor.data().data());
  for (size_t i = 0; i < values.size(); ++i) {
#if defined(__FLT16_MAX__)  // the compiler's own conversion, where it has _Float16
    const _Float16 expected = static_cast<_Float16>(values[i]);
    uint16_t expected_bits;
    std::memcpy(&expected_bits, &expected, sizeof(expected_bits));
#else
    const uint16_t expected_bits = internal::FloatToHalf(values[i]);
#endif
    if (std::isnan(values[i])) {
      EXPECT_EQ(halves[i] & 0x7c00u, 0x7c00u);
      EXPECT_NE(halves[i] & 0x3ffu, 0u);
    } else {
      ASSERT_EQ(halves[i], expected_bits) << values[i];
    }
  }
}

TEST(FloatEncodingTest, NanAndInfinityKeepTheirKind) {
  const float inf = std::numeric_limits<float>::infinity();
  for (DataType encoding : {DT_BFLOAT16, DT_FLOAT16}) {
    const std::vector<float> back = RoundTrip({std::nanf(""), inf, -inf}, encoding);
    EXPECT_TRUE(std::isnan(back[0])) << DataType_Name(encoding);
    EXPECT_EQ(back[1], inf);
    EXPECT_EQ(back[2], -inf);
  }
}

TEST(FloatEncodingTest, Float16OverflowIsOutOfRangeNamingTheElement) {
  TensorProto tensor;
  // 65519 rounds down to 65504, float16's largest; 70000 cannot be encoded.
  EXPECT_TRUE(
      EncodeFloatTensor({2}, std::vector<float>{65519.0f, -1.0f}, DT_FLOAT16, "g", &tensor).ok());
  absl::Status s =
      EncodeFloatTensor({3}, std::vector<float>{1.0f, -70000.0f, 2.0f}, DT_FLOAT16, "g", &tensor);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("g: element 1 is -70000"));
  EXPECT_THAT(s.message(), HasSubstr("bfloat16"));
  // bfloat16 has float32's range.
  EXPECT_EQ(RoundTrip({-70000.0f}, DT_BFLOAT16)[0], -70144.0f);
}

TEST(FloatEncodingTest, DecodeChecksDtypeShapeAndSize) {
  TensorProto tensor;
  ASSERT_TRUE(
      EncodeFloatTensor({2, 2}, std::vector<float>(4, 1.0f), DT_BFLOAT16, "t", &tensor).ok());
  std::vector<float> storage;
  EXPECT_THAT(DecodeFloatTensor(tensor, {4}, "w", &storage).status().message(),
              HasSubstr("w: expected shape [4], got [2, 2]"));
  tensor.mutable_data()->resize(7);
  EXPECT_THAT(DecodeFloatTensor(tensor, {2, 2}, "w", &storage).status().message(),
              HasSubstr("in DT_BFLOAT16 needs 8 bytes, got 7"));
  tensor.set_dtype(DT_INT64);
  EXPECT_EQ(DecodeFloatTensor(tensor, {2, 2}, "w", &storage).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FloatEncodingTest, Float32DecodesInPlace) {
  TensorProto tensor;
  EncodeFloatTensor({3}, std::vector<float>{1, 2, 3}, &tensor);
  std::vector<float> storage;
  auto values = DecodeFloatTensor(tensor, {3}, "t", &storage);
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(reinterpret_cast<const char*>(values->data()), tensor.data().data());
  EXPECT_TRUE(storage.empty());
}

TEST(FirstNonFiniteTest, FindsTheFirstAcrossBlocks) {
  std::vector<float> values(10000, 1.0f);
  EXPECT_EQ(FirstNonFinite(values), -1);
  EXPECT_EQ(FirstNonFinite(absl::Span<const float>()), -1);
  values[9999] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(FirstNonFinite(values), 9999);
  values[5000] = std::nanf("");
  EXPECT_EQ(FirstNonFinite(values), 5000);
  values[3] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FirstNonFinite(values), 3);
  EXPECT_EQ(FirstNonFinite(std::vector<float>{std::numeric_limits<float>::max(), -0.0f, 1e-45f}),
            -1);
}

TEST(FirstNonFiniteTest, ReadsFloatsAtAnyAddress) {
  std::vector<float> values(100, 1.0f);
  values[42] = std::nanf("");
  std::string bytes(1 + values.size() * sizeof(float), '\0');  // one byte in: misaligned
  std::memcpy(&bytes[1], values.data(), values.size() * sizeof(float));
  const FloatBytes unaligned(bytes.data() + 1, values.size() * sizeof(float));
  EXPECT_EQ(FirstNonFinite(unaligned), 42);
  EXPECT_TRUE(std::isnan(LoadFloat(unaligned.data(), 42)));
  EXPECT_EQ(LoadFloat(unaligned.data(), 41), 1.0f);
}

TEST(FloatEncodingTest, ParsesFlagNames) {
  EXPECT_EQ(*ParseFloatEncoding("bfloat16"), DT_BFLOAT16);
  EXPECT_EQ(*ParseFloatEncoding("float16"), DT_FLOAT16);
  EXPECT_EQ(*ParseFloatEncoding("float32"), DT_FLOAT);
  EXPECT_THAT(ParseFloatEncoding("fp8").status().message(),
              HasSubstr("'fp8' is not one of float32, bfloat16, float16"));
}

// The bit-by-bit float16 conversions, which CPUs without F16C use, give
// the bits EncodeFloatTensor and DecodeFloatTensor give (F16C where the CPU
// has it): every half, and a spread of floats across the whole range.
TEST(Float16Test, BitByBitConversionsMatchTheEncodings) {
  std::vector<float> floats;
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4093) {
    float value;
    const uint32_t b = static_cast<uint32_t>(bits);
    std::memcpy(&value, &b, sizeof(value));
    if (!std::isnan(value)) floats.push_back(value);
  }
  for (float edge : {65504.0f, 65519.99f, 65520.0f, 6.1035156e-5f, 5.9604645e-8f, 2.9802322e-8f,
                     2.9802326e-8f, -0.0f, std::numeric_limits<float>::infinity()}) {
    floats.push_back(edge);
  }
  // The encoder refuses values beyond float16's range: compare within it.
  TensorProto encoded;
  std::vector<float> in_range;
  for (float f : floats) {
    if (std::fabs(f) < 65520.0f) in_range.push_back(f);
  }
  ASSERT_TRUE(EncodeFloatTensor({static_cast<int64_t>(in_range.size())}, in_range, DT_FLOAT16, "f",
                                &encoded)
                  .ok());
  const auto* halves = reinterpret_cast<const uint16_t*>(encoded.data().data());
  for (size_t i = 0; i < in_range.size(); ++i) {
    ASSERT_EQ(internal::FloatToHalf(in_range[i]), halves[i]) << in_range[i];
  }
  EXPECT_EQ(internal::FloatToHalf(65520.0f), 0x7c00);  // rounds up to infinity
  EXPECT_EQ(internal::FloatToHalf(-1e30f), 0xfc00);
  EXPECT_TRUE(std::isnan(internal::HalfToFloat(internal::FloatToHalf(std::nanf("")))));
  std::vector<uint16_t> all(65536);
  for (size_t h = 0; h < all.size(); ++h) all[h] = static_cast<uint16_t>(h);
  TensorProto every;
  every.set_dtype(DT_FLOAT16);
  every.add_shape(65536);
  every.set_data(all.data(), all.size() * 2);
  std::vector<float> storage;
  auto decoded = DecodeFloatTensor(every, {65536}, "every half", &storage);
  ASSERT_TRUE(decoded.ok());
  for (size_t h = 0; h < all.size(); ++h) {
    const float bitwise = internal::HalfToFloat(all[h]);
    if (std::isnan(bitwise)) {
      EXPECT_TRUE(std::isnan((*decoded)[h])) << h;
    } else {
      uint32_t expected_bits, decoded_bits;
      std::memcpy(&expected_bits, &bitwise, sizeof(float));
      std::memcpy(&decoded_bits, &(*decoded)[h], sizeof(float));
      ASSERT_EQ(expected_bits, decoded_bits) << "half " << h;  // -0 and +0 differ
    }
  }
}

}  // namespace
}  // namespace fulcrum
