#include "common/embedding.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/initializer.h"
#include "common/logging.h"
#include "common/tensor.h"
#include "common/vector_loops.h"

namespace fulcrum {
namespace {

// Widest row accepted: its floats and slots stay far from overflowing.
constexpr int64_t kMaxWidth = int64_t{1} << 20;

// The table as a variable of one row: what the initializer and the
// variable checks take. Its seed mixes in the table's name (FNV-1a), so
// two tables of one seed start apart.
VariableSpec AsVariable(const EmbeddingTableSpec& spec) {
  VariableSpec variable;
  variable.set_name(spec.name());
  variable.add_shape(1);
  variable.add_shape(spec.width());
  variable.set_dtype(DT_FLOAT);
  *variable.mutable_initializer() = spec.initializer();
  *variable.mutable_optimizer() = spec.optimizer();
  uint64_t name_hash = 0xCBF29CE484222325ull;
  for (unsigned char c : spec.name()) name_hash = (name_hash ^ c) * 0x100000001B3ull;
  variable.mutable_initializer()->set_seed(spec.initializer().seed() ^ Mix64(name_hash));
  return variable;
}

// The k-th uniform (k >= 1) of the row seeded `row`, in [0, 1): 53 bits
// of a hash, which convert to double exactly.
double UniformAt(uint64_t row, uint64_t k) {
  return static_cast<double>(static_cast<int64_t>(Mix64(row + k * kGoldenGamma) >> 11)) * 0x1.0p-53;
}

// out[i] = lo + span * the row's (i + 1)-th uniform, in double, then
// rounded to float: vectorised, each value exactly as one at a time (no
// fused multiply-add).
FULCRUM_VECTOR_CLONES void UniformRow(uint64_t row, float lo, float span, float* __restrict out,
                                      int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(static_cast<double>(lo) +
                                static_cast<double>(span) * UniformAt(row, i + 1));
  }
}

}  // namespace

int EmbeddingOwner(int64_t id, int num_servers) {
  CHECK(num_servers >= 1);
  return static_cast<int>(Mix64(static_cast<uint64_t>(id) + kGoldenGamma) %
                          static_cast<uint64_t>(num_servers));
}

int TablePartitions(const EmbeddingTableSpec& spec, int num_servers) {
  return spec.partitions() > 0 ? spec.partitions() : std::max(1, num_servers);
}

std::string TableKey(absl::string_view table, int partition) {
  return absl::StrCat(table, "#", partition);
}

bool ParseTableKey(absl::string_view key, std::string* table, int* partition) {
  const size_t hash = key.rfind('#');
  if (hash == absl::string_view::npos || !absl::SimpleAtoi(key.substr(hash + 1), partition)) {
    return false;
  }
  *table = std::string(key.substr(0, hash));
  return true;
}

absl::Status ValidateEmbeddingTableSpec(const EmbeddingTableSpec& spec) {
  if (spec.name().empty()) return absl::InvalidArgumentError("an embedding table needs a name");
  const std::string where = absl::StrCat("embedding table '", spec.name(), "'");
  if (spec.width() < 1 || spec.width() > kMaxWidth) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": width must be in [1, ", kMaxWidth, "], got ", spec.width()));
  }
  if (spec.initializer().kind() == InitializerSpec::GLOROT_UNIFORM) {
    return absl::InvalidArgumentError(
        absl::StrCat(where,
                     ": GLOROT_UNIFORM needs a variable's fans, which a table has not; use "
                     "RANDOM_UNIFORM (Keras's embeddings take -0.05 to 0.05), RANDOM_NORMAL, "
                     "TRUNCATED_NORMAL, ZEROS or CONSTANT"));
  }
  if (spec.max_rows() < 0 || spec.admit_after() < 0 || spec.partitions() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": max_rows, admit_after and partitions must be >= 0"));
  }
  return ValidateVariableSpec(AsVariable(spec));
}

void InitialEmbeddingRow(const EmbeddingTableSpec& spec, int64_t id, absl::Span<float> out) {
  EmbeddingRowInitializer(spec).Row(id, out);
}

EmbeddingRowInitializer::EmbeddingRowInitializer(const EmbeddingTableSpec& spec)
    : init_(spec.initializer()), seed_(AsVariable(spec).initializer().seed()) {}

void EmbeddingRowInitializer::Row(int64_t id, absl::Span<float> out) const {
  // The k-th uniform of the row, in [0, 1), and (0, 1] for logarithms.
  const uint64_t row = Mix64(seed_ ^ Mix64(static_cast<uint64_t>(id) + kGoldenGamma));
  uint64_t k = 0;
  const auto uniform = [&] { return UniformAt(row, ++k); };
  switch (init_.kind()) {
    case InitializerSpec::CONSTANT:
      std::fill(out.begin(), out.end(), init_.value());
      break;
    case InitializerSpec::RANDOM_UNIFORM:
      UniformRow(row, init_.minval(), init_.maxval() - init_.minval(), out.data(),
                 static_cast<int64_t>(out.size()));
      break;
    case InitializerSpec::RANDOM_NORMAL:
    case InitializerSpec::TRUNCATED_NORMAL: {
      const bool truncate = init_.kind() == InitializerSpec::TRUNCATED_NORMAL;
      for (float& x : out) {
        double z;
        do {  // Box-Muller: one normal from two uniforms
          z = std::sqrt(-2.0 * std::log(1.0 - uniform())) * std::cos(6.283185307179586 * uniform());
        } while (truncate && std::fabs(z) > 2.0);
        x = static_cast<float>(init_.mean() + init_.stddev() * z);
      }
      break;
    }
    default:  // ZEROS; GLOROT_UNIFORM is refused for tables
      std::fill(out.begin(), out.end(), 0.0f);
  }
}

}  // namespace fulcrum
