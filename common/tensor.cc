#include "common/tensor.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fulcrum {

int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
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
  for (int64_t d : spec.shape()) {
    if (d < 1 || d > (int64_t{1} << 40)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": every dimension must be >= 1, got shape ",
                       ShapeString(spec.shape())));
    }
  }
  if (NumElements(spec.shape()) > (int64_t{1} << 34)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": shape ", ShapeString(spec.shape()), " is too large"));
  }
  if (spec.dtype() != DT_FLOAT) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": dtype must be DT_FLOAT, got ", DataType_Name(spec.dtype())));
  }
  if (!InitializerSpec::Kind_IsValid(spec.initializer().kind()) ||
      !OptimizerSpec::Kind_IsValid(spec.optimizer().kind()) ||
      !PartitionerSpec::Kind_IsValid(spec.partitioner().kind())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": unknown initializer, optimizer or partitioner kind"));
  }
  const InitializerSpec& init = spec.initializer();
  if (!(init.stddev() >= 0) || !(init.minval() <= init.maxval()) || !std::isfinite(init.value()) ||
      !std::isfinite(init.mean())) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": initializer needs finite values, stddev >= 0 and minval <= maxval"));
  }
  const OptimizerSpec& opt = spec.optimizer();
  if (!(opt.learning_rate() > 0) || !std::isfinite(opt.learning_rate())) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": optimizer.learning_rate must be a positive number, got ", opt.learning_rate()));
  }
  for (float v : {opt.momentum(), opt.beta1(), opt.beta2()}) {
    if (!(v >= 0 && v < 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": optimizer momentum, beta1 and beta2 must be in [0, 1), got ", v));
    }
  }
  if (!(opt.epsilon() >= 0) || !(opt.initial_accumulator_value() >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": optimizer epsilon and initial_accumulator_value must be >= 0"));
  }
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
  OptimizerSpec* opt = out.mutable_optimizer();
  if (opt->epsilon() == 0) opt->set_epsilon(1e-7f);
  if (opt->beta1() == 0) opt->set_beta1(0.9f);
  if (opt->beta2() == 0) opt->set_beta2(0.999f);
  if (opt->initial_accumulator_value() == 0) opt->set_initial_accumulator_value(0.1f);
  PartitionerSpec* part = out.mutable_partitioner();
  if (part->kind() == PartitionerSpec::MIN_SIZE) {
    if (part->min_shard_bytes() == 0) part->set_min_shard_bytes(256 << 10);
    if (part->max_shards() == 0) part->set_max_shards(1);
  }
  return out;
}

void EncodeFloatTensor(absl::Span<const int64_t> shape, absl::Span<const float> values,
                       TensorProto* out) {
  out->set_dtype(DT_FLOAT);
  out->mutable_shape()->Assign(shape.begin(), shape.end());
  out->mutable_data()->assign(reinterpret_cast<const char*>(values.data()),
                              values.size() * sizeof(float));
}

absl::Status CheckFloatTensor(const TensorProto& tensor, absl::Span<const int64_t> expected_shape,
                              const std::string& what) {
  if (tensor.dtype() != DT_FLOAT) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected dtype DT_FLOAT, got ",
                                                   DataType_Name(tensor.dtype())));
  }
  if (!std::equal(tensor.shape().begin(), tensor.shape().end(), expected_shape.begin(),
                  expected_shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected shape ",
                                                   ShapeString(expected_shape), ", got ",
                                                   ShapeString(tensor.shape())));
  }
  const size_t expected_bytes = NumElements(expected_shape) * sizeof(float);
  if (tensor.data().size() != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeString(expected_shape),
                                                   " needs ", expected_bytes, " bytes, got ",
                                                   tensor.data().size()));
  }
  return absl::OkStatus();
}

absl::Span<const float> FloatValues(const TensorProto& tensor) {
  return absl::Span<const float>(reinterpret_cast<const float*>(tensor.data().data()),
                                 tensor.data().size() / sizeof(float));
}

}  // namespace fulcrum
