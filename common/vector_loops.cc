#include "common/vector_loops.h"

namespace fulcrum {

FULCRUM_VECTOR_CLONES void AddInto(float* __restrict to, const float* __restrict from, int64_t n) {
  for (int64_t i = 0; i < n; ++i) to[i] += from[i];
}

}  // namespace fulcrum
