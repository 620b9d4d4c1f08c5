#include "common/optimizer/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "common/tensor.h"

namespace fulcrum {
namespace {

// Expected weights after each of three steps with gradients 1, -2, 0.5 from
// w = 1, computed by hand (in double precision) from each optimizer's rule.
struct Case {
  const char* name;
  OptimizerSpec::Kind kind;
  bool nesterov;
  std::vector<double> expected;
};

class OptimizerTest : public ::testing::TestWithParam<Case> {};

TEST_P(OptimizerTest, MatchesHandComputedSteps) {
  const Case& c = GetParam();
  VariableSpec spec;
  spec.set_name("w");
  spec.add_shape(2);
  spec.set_dtype(DT_FLOAT);
  spec.mutable_optimizer()->set_kind(c.kind);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.mutable_optimizer()->set_momentum(0.9f);
  spec.mutable_optimizer()->set_nesterov(c.nesterov);
  const OptimizerSpec opt = CanonicalSpec(spec).optimizer();

  std::vector<float> var = {1.0f, 1.0f};
  OptimizerSlots slots = MakeSlots(opt, 2);
  const float grads[] = {1.0f, -2.0f, 0.5f};
  for (int step = 0; step < 3; ++step) {
    // The second element gets the negated gradient: every rule here is odd
    // in the gradient, so it must move by the same amount the other way.
    const std::vector<float> grad = {grads[step], -grads[step]};
    const FloatBytes whole = AsFloatBytes(grad);
    ApplyGradient(opt, step + 1, 1, {whole}, absl::MakeSpan(var), slots);
    EXPECT_NEAR(var[0], c.expected[step], 2e-6) << c.name << " step " << step + 1;
    EXPECT_NEAR(var[1], 2.0 - c.expected[step], 2e-6) << c.name << " step " << step + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllOptimizers, OptimizerTest,
    ::testing::Values(
        Case{"sgd", OptimizerSpec::SGD, false, {0.9, 1.1, 1.05}},
        Case{"momentum", OptimizerSpec::MOMENTUM, false, {0.9, 1.01, 1.059}},
        Case{"nesterov", OptimizerSpec::MOMENTUM, true, {0.81, 1.109, 1.1031}},
        Case{"adagrad", OptimizerSpec::ADAGRAD, false, {0.9046538, 0.9932152, 0.9715984}},
        Case{"adam", OptimizerSpec::ADAM, false, {0.9000003, 0.9366106, 0.9502797}}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// A shard large enough to be split over threads (and vectorised), with its
// gradient in parts as slices bring it, at odd addresses as gRPC's buffers
// hold them, must be updated exactly as small aligned updates of the same
// rule would, and as updates of its ranges in place (the pointer form).
TEST_P(OptimizerTest, LargeShardMatchesSmallUpdates) {
  const Case& c = GetParam();
  VariableSpec spec;
  spec.set_name("w");
  spec.add_shape(1);
  spec.mutable_optimizer()->set_kind(c.kind);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.mutable_optimizer()->set_momentum(0.9f);
  spec.mutable_optimizer()->set_nesterov(c.nesterov);
  const OptimizerSpec opt = CanonicalSpec(spec).optimizer();
  const size_t n = (size_t{3} << 20) + 7;  // odd: parts of unequal size
  std::vector<float> big(n), grad(n);
  for (size_t i = 0; i < n; ++i) {
    big[i] = std::sin(0.001f * i);
    grad[i] = std::cos(0.003f * i);
  }
  // The reference: the same shard updated in pieces too small to be split,
  // each with its own slots.
  constexpr size_t kPiece = 1 << 16;
  std::vector<float> small = big, ranged = big;
  OptimizerSlots big_slots = MakeSlots(opt, n), ranged_slots = MakeSlots(opt, n);
  std::vector<OptimizerSlots> piece_slots;
  for (size_t begin = 0; begin < n; begin += kPiece) {
    piece_slots.push_back(MakeSlots(opt, std::min(kPiece, n - begin)));
  }
  // Parts that straddle the threads' ranges: one element, then uneven
  // sizes; all one byte off alignment.
  const absl::Span<const float> all(grad);
  std::string misaligned(1 + n * sizeof(float), '\0');
  std::memcpy(&misaligned[1], grad.data(), n * sizeof(float));
  const FloatBytes bytes(misaligned.data() + 1, n * sizeof(float));
  const auto floats = [&](size_t begin, size_t count) {
    return bytes.subspan(begin * sizeof(float), count * sizeof(float));
  };
  const std::vector<FloatBytes> parts = {floats(0, 1), floats(1, (size_t{1} << 20) + 3),
                                         floats((size_t{1} << 20) + 4, size_t{1} << 20),
                                         floats((size_t{2} << 20) + 4, n - (size_t{2} << 20) - 4)};
  for (int step = 1; step <= 3; ++step) {
    ApplyGradient(opt, step, 1, parts, absl::MakeSpan(big), big_slots);
    for (size_t begin = 0, p = 0; begin < n; begin += kPiece, ++p) {
      const size_t len = std::min(kPiece, n - begin);
      const FloatBytes piece = AsFloatBytes(all.subspan(begin, len));
      ApplyGradient(opt, step, 1, {piece}, absl::MakeSpan(&small[begin], len), piece_slots[p]);
      std::vector<float*> at;
      for (std::vector<float>& slot : ranged_slots) at.push_back(slot.data() + begin);
      ApplyGradient(opt, step, 1, {piece}, absl::MakeSpan(&ranged[begin], len), at);
    }
    EXPECT_EQ(ranged_slots, big_slots) << c.name << " step " << step;
    size_t differ = 0, first = n;
    for (size_t i = 0; i < n; ++i) {
      if (big[i] != small[i] || big[i] != ranged[i]) {
        ++differ;
        first = std::min(first, i);
      }
    }
    EXPECT_EQ(differ, 0u) << c.name << " step " << step << ": first at element " << first;
  }
}

// A sum of gradients applied with scale 1 / averaged is their mean applied,
// to the bit: the all-reduce strategy hands the optimizer the group's sum.
TEST_P(OptimizerTest, AScaledSumIsTheMeanToTheBit) {
  const Case& c = GetParam();
  VariableSpec spec;
  spec.set_name("w");
  spec.add_shape(1);
  spec.mutable_optimizer()->set_kind(c.kind);
  spec.mutable_optimizer()->set_nesterov(c.nesterov);
  const OptimizerSpec opt = CanonicalSpec(spec).optimizer();
  const size_t n = 1000;
  const int averaged = 3;
  std::vector<float> scaled(n), meaned(n), sum(n), mean(n);
  for (size_t i = 0; i < n; ++i) scaled[i] = meaned[i] = std::sin(0.01f * i);
  OptimizerSlots scaled_slots = MakeSlots(opt, n), meaned_slots = MakeSlots(opt, n);
  const float scale = 1.0f / averaged;
  for (int step = 1; step <= 3; ++step) {
    for (size_t i = 0; i < n; ++i) {
      sum[i] = std::cos(0.003f * i * step) + 0.5f * std::sin(0.007f * i) + 0.25f * step;
      mean[i] = sum[i] * scale;
    }
    const FloatBytes sum_bytes = AsFloatBytes(sum), mean_bytes = AsFloatBytes(mean);
    ApplyGradient(opt, step, averaged, {sum_bytes}, absl::MakeSpan(scaled), scaled_slots, scale);
    ApplyGradient(opt, step, averaged, {mean_bytes}, absl::MakeSpan(meaned), meaned_slots);
    EXPECT_EQ(scaled, meaned) << c.name << " step " << step;
    EXPECT_EQ(scaled_slots, meaned_slots) << c.name << " step " << step;
  }
  EXPECT_NE(scaled[10], std::sin(0.1f)) << c.name << ": the values moved";
}

// The vectorised rule (AVX-512, AVX2 or SSE2, whichever this CPU runs)
// rounds every element as the rule written one float at a time does, to
// the bit: replicas on CPUs with different vector units stay identical.
// Adam and Adagrad, whose square roots and divisions a fused or
// approximate instruction would round otherwise; lengths that leave an
// epilogue after every vector width.
TEST(OptimizerTest, VectorisedRulesRoundAsTheScalarRule) {
  constexpr float kRate = 0.01f, kBeta1 = 0.9f, kBeta2 = 0.999f, kEpsilon = 1e-7f;
  for (OptimizerSpec::Kind kind : {OptimizerSpec::ADAM, OptimizerSpec::ADAGRAD}) {
    for (size_t n : {size_t{1}, size_t{15}, size_t{1000} + 3}) {
      OptimizerSpec spec;
      spec.set_kind(kind);
      spec.set_learning_rate(kRate);
      spec.set_beta1(kBeta1);
      spec.set_beta2(kBeta2);
      spec.set_epsilon(kEpsilon);
      spec.set_initial_accumulator_value(0.1f);
      std::vector<float> var(n), expected(n), grad(n);
      for (size_t i = 0; i < n; ++i) var[i] = expected[i] = std::sin(0.37f * i);
      OptimizerSlots slots = MakeSlots(spec, n), expected_slots = MakeSlots(spec, n);
      for (int step = 1; step <= 3; ++step) {
        for (size_t i = 0; i < n; ++i) grad[i] = std::cos(0.011f * i * step) - 0.3f;
        ApplyGradient(spec, step, 1, {AsFloatBytes(grad)}, absl::MakeSpan(var), slots);
        // Adam's bias-corrected rate, in double as the optimizer computes it.
        const float lr =
            kind == OptimizerSpec::ADAM
                ? static_cast<float>(kRate * std::sqrt(1.0 - std::pow(double{kBeta2}, step)) /
                                     (1.0 - std::pow(double{kBeta1}, step)))
                : kRate;
        for (size_t i = 0; i < n; ++i) {
          volatile float g = grad[i];  // one float at a time, never vectorised
          float& m = expected_slots[0][i];
          if (kind == OptimizerSpec::ADAM) {
            float& v = expected_slots[1][i];
            m = kBeta1 * m + (1.0f - kBeta1) * g;
            v = kBeta2 * v + (1.0f - kBeta2) * g * g;
            expected[i] -= lr * m / (std::sqrt(v) + kEpsilon);
          } else {
            m += g * g;
            expected[i] -= lr * g / (std::sqrt(m) + kEpsilon);
          }
        }
        EXPECT_EQ(var, expected) << OptimizerSpec::Kind_Name(kind) << " n " << n << " step "
                                 << step;
        EXPECT_EQ(slots, expected_slots) << OptimizerSpec::Kind_Name(kind) << " n " << n;
      }
    }
  }
}

// Slots that decay below the smallest normal float are flushed to zero,
// as TensorFlow's kernels flush them (on x86; elsewhere they are kept), in
// both the dense and the rows' update; the caller's own arithmetic keeps
// its denormals.
TEST(OptimizerTest, DecayedSlotsFlushToZeroAndTheCallerKeepsDenormals) {
  constexpr float kNearLeastNormal = 1.2e-38f;  // times 0.9: under FLT_MIN
  OptimizerSpec spec;
  spec.set_kind(OptimizerSpec::ADAM);
  spec.set_learning_rate(0.01f);
  spec.set_beta1(0.9f);
  spec.set_beta2(0.999f);
  spec.set_epsilon(1e-7f);
  std::vector<float> var(3, 1.0f), grad(3, 0.0f);
  OptimizerSlots slots = MakeSlots(spec, 3);
  slots[0].assign(3, kNearLeastNormal);
  slots[1].assign(3, 1.0f);
  ApplyGradient(spec, 5, 1, {AsFloatBytes(grad)}, absl::MakeSpan(var), slots);
  std::vector<float> row = {1.0f, kNearLeastNormal, 1.0f};  // value, m, v
  float* rows[] = {row.data()};
  const float row_grad[] = {0.0f};
  ApplyGradientToRows(spec, 5, 1, 1, row_grad, rows);
  volatile float decayed = kNearLeastNormal;
  decayed = decayed * 0.9f;  // this thread's own arithmetic, after both
  EXPECT_GT(decayed, 0.0f);
  EXPECT_LT(decayed, std::numeric_limits<float>::min());
#if defined(__x86_64__) || defined(__i386__)
  EXPECT_EQ(slots[0], std::vector<float>(3, 0.0f));
  EXPECT_EQ(row[1], 0.0f);
#else
  EXPECT_EQ(slots[0], std::vector<float>(3, decayed));
  EXPECT_EQ(row[1], decayed);
#endif
}

TEST(OptimizerTest, LearningRateScalesWithTheGradientsAveraged) {
  OptimizerSpec spec;
  spec.set_learning_rate(1e-3f);
  spec.set_learning_rate_scaling(OptimizerSpec::SQRT);
  EXPECT_FLOAT_EQ(ScaledLearningRate(spec, 4), 2e-3f);
  EXPECT_FLOAT_EQ(ScaledLearningRate(spec, 1), 1e-3f);
  spec.set_learning_rate_scaling(OptimizerSpec::LINEAR);
  EXPECT_FLOAT_EQ(ScaledLearningRate(spec, 4), 4e-3f);
  EXPECT_FLOAT_EQ(ScaledLearningRate(spec, 3), 3e-3f);
  spec.set_learning_rate_scaling(OptimizerSpec::UNSCALED);
  EXPECT_FLOAT_EQ(ScaledLearningRate(spec, 4), 1e-3f);

  // SGD of the mean of 4 gradients takes the scaled rate.
  spec.set_learning_rate_scaling(OptimizerSpec::LINEAR);
  std::vector<float> var = {1.0f};
  OptimizerSlots slots = MakeSlots(spec, 1);
  const std::vector<float> grad = {10.0f};
  const FloatBytes whole = AsFloatBytes(grad);
  ApplyGradient(spec, 1, 4, {whole}, absl::MakeSpan(var), slots);
  EXPECT_FLOAT_EQ(var[0], 1.0f - 4e-3f * 10.0f);
}

// FTRL-Proximal against a reference in double precision, written from the
// rule in McMahan et al. (2013) as Keras's Ftrl states it, over several
// steps with L1, L2 and beta.
TEST(FtrlTest, MatchesAReferenceInDouble) {
  VariableSpec spec;
  spec.set_name("w");
  spec.add_shape(4);
  spec.set_dtype(DT_FLOAT);
  OptimizerSpec* ftrl = spec.mutable_optimizer();
  ftrl->set_kind(OptimizerSpec::FTRL);
  ftrl->set_learning_rate(0.1f);
  ftrl->set_l1(0.05f);
  ftrl->set_l2(0.01f);
  ftrl->set_ftrl_beta(0.5f);
  const OptimizerSpec opt = CanonicalSpec(spec).optimizer();
  std::vector<float> var = {0.0f, 0.3f, -0.2f, 0.0f};
  OptimizerSlots slots = MakeSlots(opt, 4);
  std::vector<double> w(var.begin(), var.end()), z(4, 0.0), n(4, 0.1);
  const double grads[5][4] = {{1.0, -0.5, 0.02, 0.0},
                              {0.5, -0.5, -0.01, 0.0},
                              {-2.0, 0.25, 0.03, 0.0},
                              {0.1, 1.0, -0.04, 0.0},
                              {0.3, -0.7, 0.01, 0.0}};
  for (int step = 0; step < 5; ++step) {
    std::vector<float> grad(grads[step], grads[step] + 4);
    const FloatBytes whole = AsFloatBytes(grad);
    ApplyGradient(opt, step + 1, 1, {whole}, absl::MakeSpan(var), slots);
    for (int i = 0; i < 4; ++i) {
      const double g = grads[step][i], n_new = n[i] + g * g;
      z[i] += g - (std::sqrt(n_new) - std::sqrt(n[i])) / 0.1 * w[i];
      n[i] = n_new;
      w[i] = std::abs(z[i]) <= 0.05
                 ? 0.0
                 : ((z[i] > 0 ? 0.05 : -0.05) - z[i]) / ((0.5 + std::sqrt(n[i])) / 0.1 + 2 * 0.01);
      EXPECT_NEAR(var[i], w[i], 1e-6 + 1e-5 * std::abs(w[i]))
          << "step " << step + 1 << " [" << i << "]";
      EXPECT_NEAR(slots[0][i], z[i], 1e-5 + 1e-5 * std::abs(z[i]));
      EXPECT_NEAR(slots[1][i], n[i], 1e-6 * n[i]);
    }
  }
  EXPECT_EQ(var[2], 0.0f);  // its small gradients never lift |z| over l1: exactly 0
  EXPECT_EQ(var[3], 0.0f);
  EXPECT_NE(var[0], 0.0f);
}

TEST(OptimizerSlotsTest, SlotsMatchTheOptimizer) {
  OptimizerSpec spec;
  spec.set_kind(OptimizerSpec::SGD);
  EXPECT_TRUE(MakeSlots(spec, 3).empty());
  spec.set_kind(OptimizerSpec::ADAM);
  EXPECT_EQ(MakeSlots(spec, 3).size(), 2u);
  spec.set_kind(OptimizerSpec::ADAGRAD);
  spec.set_initial_accumulator_value(0.5f);
  EXPECT_EQ(MakeSlots(spec, 3)[0], std::vector<float>(3, 0.5f));
  spec.set_kind(OptimizerSpec::FTRL);  // z from 0, n from the accumulator value
  const OptimizerSlots ftrl = MakeSlots(spec, 3);
  ASSERT_EQ(ftrl.size(), 2u);
  EXPECT_EQ(ftrl[0], std::vector<float>(3, 0.0f));
  EXPECT_EQ(ftrl[1], std::vector<float>(3, 0.5f));
}

}  // namespace
}  // namespace fulcrum
