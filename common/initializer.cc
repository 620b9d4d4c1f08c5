#include "common/initializer.h"

#include <cmath>
#include <random>

#include "common/hash.h"
#include "common/logging.h"
#include "common/tensor.h"

namespace fulcrum {
namespace {

// Keras' fans: the last two dims, times the receptive field for rank > 2.
void Fans(absl::Span<const int64_t> shape, double* fan_in, double* fan_out) {
  if (shape.size() == 1) {
    *fan_in = *fan_out = static_cast<double>(shape[0]);
    return;
  }
  double receptive = 1;
  for (size_t i = 0; i + 2 < shape.size(); ++i) receptive *= static_cast<double>(shape[i]);
  *fan_in = static_cast<double>(shape[shape.size() - 2]) * receptive;
  *fan_out = static_cast<double>(shape[shape.size() - 1]) * receptive;
}

uint64_t RowSeed(uint64_t seed, int64_t row) {
  // splitmix64 of (seed, row): well-spread seeds for neighbouring rows.
  return Mix64(seed + kGoldenGamma * (static_cast<uint64_t>(row) + 1));
}

}  // namespace

void InitializeRows(const VariableSpec& spec, int64_t row_offset, int64_t rows,
                    absl::Span<float> out) {
  const int64_t row_elems = RowElements(spec.shape());
  CHECK(static_cast<int64_t>(out.size()) == rows * row_elems);
  const InitializerSpec& init = spec.initializer();
  for (int64_t r = 0; r < rows; ++r) {
    std::mt19937_64 gen(RowSeed(init.seed(), row_offset + r));
    float* row = out.data() + r * row_elems;
    switch (init.kind()) {
      case InitializerSpec::ZEROS:
        std::fill(row, row + row_elems, 0.0f);
        break;
      case InitializerSpec::CONSTANT:
        std::fill(row, row + row_elems, init.value());
        break;
      case InitializerSpec::RANDOM_UNIFORM: {
        std::uniform_real_distribution<float> dist(init.minval(), init.maxval());
        for (int64_t i = 0; i < row_elems; ++i) row[i] = dist(gen);
        break;
      }
      case InitializerSpec::RANDOM_NORMAL:
      case InitializerSpec::TRUNCATED_NORMAL: {
        std::normal_distribution<float> dist(init.mean(), init.stddev());
        const bool truncate = init.kind() == InitializerSpec::TRUNCATED_NORMAL;
        for (int64_t i = 0; i < row_elems; ++i) {
          float x = dist(gen);
          while (truncate && std::fabs(x - init.mean()) > 2 * init.stddev()) x = dist(gen);
          row[i] = x;
        }
        break;
      }
      case InitializerSpec::GLOROT_UNIFORM: {
        double fan_in = 0, fan_out = 0;
        Fans(spec.shape(), &fan_in, &fan_out);
        const float limit = static_cast<float>(std::sqrt(6.0 / (fan_in + fan_out)));
        std::uniform_real_distribution<float> dist(-limit, limit);
        for (int64_t i = 0; i < row_elems; ++i) row[i] = dist(gen);
        break;
      }
      default:
        CHECK(false && "unknown initializer kind");
    }
  }
}

}  // namespace fulcrum
