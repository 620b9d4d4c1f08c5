// The optimizers: the update rule and the slots kept beside a variable's
// values (a parameter server's shard, or an all-reduce worker's replica).
// Elementwise, so a shard is updated independently of the others, and a
// large one in parallel parts on several cores.
// Thread-compatible: callers hold the shard's lock.
#ifndef FULCRUM_COMMON_OPTIMIZER_OPTIMIZER_H_
#define FULCRUM_COMMON_OPTIMIZER_OPTIMIZER_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/tensor.h"
#include "proto/tensor.pb.h"

namespace fulcrum {

// The slot tensors of one shard (momentum accumulators, Adam's m and v, ...),
// each as large as the shard.
using OptimizerSlots = std::vector<std::vector<float>>;

// How many slots the optimizer keeps, each as large as the shard.
int NumSlots(const OptimizerSpec& spec);

// Slots for a shard of `num_elements`, initialised as the optimizer wants
// (Adagrad's accumulators start at initial_accumulator_value). `spec` must be
// canonical (CanonicalSpec).
OptimizerSlots MakeSlots(const OptimizerSpec& spec, int64_t num_elements);

// A shard's gradient as consecutive parts (the slices it arrived in, or the
// pieces of gRPC's buffers they lie in) whose concatenation is as long as
// the shard. Parts may lie at any address.
using GradientParts = absl::Span<const FloatBytes>;

// The learning rate of an update that averages `averaged` (>= 1) gradients:
// spec.learning_rate scaled as spec.learning_rate_scaling says.
float ScaledLearningRate(const OptimizerSpec& spec, int averaged);

// Applies `grad` times `scale`, the mean of `averaged` gradients, to `var`
// (a caller holding their sum passes 1 / averaged: the product is the
// float a scaled copy would hold). `iteration` is 1 for the first update of
// the shard (Adam's bias correction uses it).
void ApplyGradient(const OptimizerSpec& spec, int64_t iteration, int averaged, GradientParts grad,
                   absl::Span<float> var, OptimizerSlots& slots, float scale = 1.0f);

// The same on a range of a shard: slots[j] points at slot j's float of
// var's first element (NumSlots(spec) of them, each as long as `var`).
void ApplyGradient(const OptimizerSpec& spec, int64_t iteration, int averaged, GradientParts grad,
                   absl::Span<float> var, absl::Span<float* const> slots, float scale = 1.0f);

// The same rule on embedding rows of `width`, as one update: grads[i *
// width, (i + 1) * width) to rows[i] (skipped where null), which holds the
// values, then each of NumSlots(spec) slots, each `width` floats (so only
// the rows a push touches move: sparse Adagrad, lazy Adam, FTRL). One
// thread.
void ApplyGradientToRows(const OptimizerSpec& spec, int64_t iteration, int averaged, int64_t width,
                         absl::Span<const float> grads, absl::Span<float* const> rows);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_OPTIMIZER_OPTIMIZER_H_
