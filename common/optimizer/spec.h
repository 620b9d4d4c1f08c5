// An optimizer's spec (proto/tensor.proto's OptimizerSpec) apart from its
// update rule (optimizer.h): its names, the defaults a 0 field stands for,
// and the checks of its hyperparameters. With the rules, the one place an
// optimizer is added. Thread-safe free functions.
#ifndef FULCRUM_COMMON_OPTIMIZER_SPEC_H_
#define FULCRUM_COMMON_OPTIMIZER_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/tensor.pb.h"

namespace fulcrum {

// The optimizer's name on flags and in messages: "sgd", "momentum",
// "adagrad", "adam", "ftrl".
std::string OptimizerName(OptimizerSpec::Kind kind);
// Every optimizer's name, "sgd, momentum, adagrad, adam, ftrl".
std::string OptimizerNames();
// The kind named `name` (OptimizerName's, any case); INVALID_ARGUMENT
// naming it and every name when there is none.
absl::StatusOr<OptimizerSpec::Kind> OptimizerKindFromName(absl::string_view name);

// The values a 0 field stands for: epsilon 1e-7, beta1 0.9, beta2 0.999,
// initial_accumulator_value 0.1 (as Keras's optimizers). The other fields
// have no default: 0 is 0.
OptimizerSpec OptimizerDefaults();
// `spec` with those defaults made explicit.
OptimizerSpec CanonicalOptimizer(const OptimizerSpec& spec);

// INVALID_ARGUMENT naming `where` and the field when a hyperparameter is out
// of its range: a positive learning rate, momentum and betas in [0, 1),
// the others >= 0, all finite.
absl::Status ValidateOptimizerSpec(const OptimizerSpec& spec, const std::string& where);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_OPTIMIZER_SPEC_H_
