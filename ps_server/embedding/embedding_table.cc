#include "ps_server/embedding/embedding_table.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/embedding.h"
#include "common/optimizer/optimizer.h"
#include "common/tensor.h"

namespace fulcrum {
namespace {

// The spec with the optimizer's defaults filled in.
EmbeddingTableSpec Canonical(const EmbeddingTableSpec& spec) {
  VariableSpec variable;
  *variable.mutable_optimizer() = spec.optimizer();
  EmbeddingTableSpec out = spec;
  *out.mutable_optimizer() = CanonicalSpec(variable).optimizer();
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EmbeddingTable>> EmbeddingTable::Create(
    const EmbeddingTableSpec& spec) {
  if (absl::Status s = ValidateEmbeddingTableSpec(spec); !s.ok()) return s;
  return std::unique_ptr<EmbeddingTable>(new EmbeddingTable(Canonical(spec)));
}

EmbeddingTable::EmbeddingTable(const EmbeddingTableSpec& spec)
    : spec_(spec),
      store_({spec.width(), NumSlots(spec.optimizer()), spec.max_rows(),
              std::max(1, spec.admit_after())}) {
  // The slots as MakeSlots starts them (Adagrad's and FTRL's accumulators
  // at initial_accumulator_value), for every new row.
  for (const std::vector<float>& slot : MakeSlots(spec.optimizer(), spec.width())) {
    initial_slots_.insert(initial_slots_.end(), slot.begin(), slot.end());
  }
}

absl::Status EmbeddingTable::CheckIds(absl::Span<const int64_t> ids, size_t floats,
                                      const char* what) const {
  if (static_cast<int64_t>(ids.size()) > kMaxIdsPerRequest) {
    return absl::ResourceExhaustedError(absl::StrCat("embedding table '", spec_.name(),
                                                     "': ", ids.size(), " ids in one ", what,
                                                     ", past the limit of ", kMaxIdsPerRequest));
  }
  if (floats != ids.size() * static_cast<size_t>(spec_.width())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "embedding table '", spec_.name(), "': a ", what, " of ", ids.size(), " ids with ", floats,
        " floats, not ", ids.size(), " rows of width ", spec_.width()));
  }
  return absl::OkStatus();
}

absl::Status EmbeddingTable::Pull(absl::Span<const int64_t> ids, absl::Span<float> out) {
  if (absl::Status s = CheckIds(ids, out.size(), "pull"); !s.ok()) return s;
  const int64_t width = spec_.width();
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < ids.size(); ++i) {
    absl::Span<float> to = out.subspan(i * width, width);
    if (const float* row = store_.Find(ids[i])) {
      std::copy(row, row + width, to.begin());
    } else {
      InitialEmbeddingRow(spec_, ids[i], to);
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingTable::Push(absl::Span<const int64_t> ids, absl::Span<const float> grads,
                                  int averaged) {
  if (absl::Status s = CheckIds(ids, grads.size(), "push"); !s.ok()) return s;
  const int64_t width = spec_.width();
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!seen.insert(ids[i]).second) {
      return absl::InvalidArgumentError(absl::StrCat("embedding table '", spec_.name(), "': id ",
                                                     ids[i],
                                                     " twice in one push (sum its gradients)"));
    }
    const auto row = grads.subspan(i * width, width);
    if (!std::all_of(row.begin(), row.end(), [](float g) { return std::isfinite(g); })) {
      return absl::InvalidArgumentError(absl::StrCat(
          "embedding table '", spec_.name(), "': the gradient of id ", ids[i], " is not finite"));
    }
  }
  absl::MutexLock lock(&mu_);
  ++step_;
  const auto init = [this](int64_t id, absl::Span<float> row) {
    InitialEmbeddingRow(spec_, id, row.subspan(0, spec_.width()));
    std::copy(initial_slots_.begin(), initial_slots_.end(), row.begin() + spec_.width());
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    float* row = store_.Touch(ids[i], init);
    if (row == nullptr) continue;  // not admitted yet
    ApplyGradientToRow(spec_.optimizer(), step_, averaged, grads.subspan(i * width, width),
                       absl::MakeSpan(row, store_.row_floats()));
  }
  return absl::OkStatus();
}

EmbeddingTable::Stats EmbeddingTable::stats() const {
  absl::MutexLock lock(&mu_);
  return {store_.size(),       store_.candidates(),  store_.evictions(),
          store_.admissions(), store_.MemoryBytes(), step_};
}

}  // namespace fulcrum
