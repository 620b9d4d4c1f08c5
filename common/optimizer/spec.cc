#include "common/optimizer/spec.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fulcrum {

std::string OptimizerName(OptimizerSpec::Kind kind) {
  return absl::AsciiStrToLower(OptimizerSpec::Kind_Name(kind));
}

std::string OptimizerNames() {
  std::vector<std::string> names;
  for (int kind = OptimizerSpec::Kind_MIN; kind <= OptimizerSpec::Kind_MAX; ++kind) {
    if (OptimizerSpec::Kind_IsValid(kind)) {
      names.push_back(OptimizerName(static_cast<OptimizerSpec::Kind>(kind)));
    }
  }
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<OptimizerSpec::Kind> OptimizerKindFromName(absl::string_view name) {
  OptimizerSpec::Kind kind;
  if (!OptimizerSpec::Kind_Parse(absl::AsciiStrToUpper(name), &kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is not one of ", OptimizerNames()));
  }
  return kind;
}

OptimizerSpec OptimizerDefaults() {
  OptimizerSpec defaults;
  defaults.set_epsilon(1e-7f);
  defaults.set_beta1(0.9f);
  defaults.set_beta2(0.999f);
  defaults.set_initial_accumulator_value(0.1f);
  return defaults;
}

OptimizerSpec CanonicalOptimizer(const OptimizerSpec& spec) {
  static const OptimizerSpec defaults = OptimizerDefaults();
  OptimizerSpec out = spec;
  if (out.epsilon() == 0) out.set_epsilon(defaults.epsilon());
  if (out.beta1() == 0) out.set_beta1(defaults.beta1());
  if (out.beta2() == 0) out.set_beta2(defaults.beta2());
  if (out.initial_accumulator_value() == 0) {
    out.set_initial_accumulator_value(defaults.initial_accumulator_value());
  }
  return out;
}

absl::Status ValidateOptimizerSpec(const OptimizerSpec& spec, const std::string& where) {
  if (!OptimizerSpec::Kind_IsValid(spec.kind())) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": unknown optimizer kind ", spec.kind(),
                                                   "; one of ", OptimizerNames()));
  }
  if (!(spec.learning_rate() > 0) || !std::isfinite(spec.learning_rate())) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": optimizer.learning_rate must be a positive number, got ", spec.learning_rate()));
  }
  for (float v : {spec.momentum(), spec.beta1(), spec.beta2()}) {
    if (!(v >= 0 && v < 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": optimizer momentum, beta1 and beta2 must be in [0, 1), got ", v));
    }
  }
  if (!(spec.epsilon() >= 0) || !(spec.initial_accumulator_value() >= 0) || !(spec.l1() >= 0) ||
      !(spec.l2() >= 0) || !(spec.ftrl_beta() >= 0) || !std::isfinite(spec.epsilon()) ||
      !std::isfinite(spec.initial_accumulator_value()) || !std::isfinite(spec.l1()) ||
      !std::isfinite(spec.l2()) || !std::isfinite(spec.ftrl_beta())) {
    return absl::InvalidArgumentError(absl::StrCat(
        where,
        ": optimizer epsilon, initial_accumulator_value, l1, l2 and ftrl_beta must be finite "
        "and >= 0"));
  }
  return absl::OkStatus();
}

}  // namespace fulcrum
