#include "common/optimizer/spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

TEST(OptimizerSpecTest, NamesRoundTripAndTheUnknownOnesAreListed) {
  EXPECT_EQ(OptimizerNames(), "sgd, momentum, adagrad, adam, ftrl");
  for (int kind = OptimizerSpec::Kind_MIN; kind <= OptimizerSpec::Kind_MAX; ++kind) {
    const auto k = static_cast<OptimizerSpec::Kind>(kind);
    EXPECT_EQ(*OptimizerKindFromName(OptimizerName(k)), k);
  }
  EXPECT_EQ(*OptimizerKindFromName("Adam"), OptimizerSpec::ADAM);
  const absl::Status unknown = OptimizerKindFromName("lamb").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.message()),
              HasSubstr("'lamb' is not one of sgd, momentum, adagrad, adam, ftrl"));
}

TEST(OptimizerSpecTest, ZeroFieldsTakeTheDefaultsAndOthersStay) {
  OptimizerSpec adam;
  adam.set_kind(OptimizerSpec::ADAM);
  adam.set_beta2(0.98f);
  const OptimizerSpec canonical = CanonicalOptimizer(adam);
  EXPECT_EQ(canonical.beta1(), OptimizerDefaults().beta1());
  EXPECT_EQ(canonical.beta2(), 0.98f);
  EXPECT_EQ(canonical.epsilon(), 1e-7f);
  EXPECT_EQ(canonical.initial_accumulator_value(), 0.1f);
  EXPECT_EQ(canonical.momentum(), 0.0f) << "momentum has no default";
}

TEST(OptimizerSpecTest, OutOfRangeHyperparametersNameTheField) {
  OptimizerSpec spec;
  spec.set_learning_rate(0.1f);
  EXPECT_TRUE(ValidateOptimizerSpec(spec, "variable 'w'").ok());
  const auto error = [](const OptimizerSpec& s) {
    return std::string(ValidateOptimizerSpec(s, "variable 'w'").message());
  };
  OptimizerSpec no_rate = spec;
  no_rate.set_learning_rate(0);
  EXPECT_THAT(error(no_rate), HasSubstr("variable 'w': optimizer.learning_rate"));
  OptimizerSpec beta = spec;
  beta.set_beta1(1.0f);
  EXPECT_THAT(error(beta), HasSubstr("beta1 and beta2 must be in [0, 1)"));
  OptimizerSpec l1 = spec;
  l1.set_l1(std::numeric_limits<float>::infinity());
  EXPECT_THAT(error(l1), HasSubstr("l1, l2 and ftrl_beta must be finite"));
  OptimizerSpec kind = spec;
  kind.set_kind(static_cast<OptimizerSpec::Kind>(42));
  EXPECT_THAT(error(kind), HasSubstr("unknown optimizer kind 42"));
}

}  // namespace
}  // namespace fulcrum
