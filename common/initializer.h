// Variable initialisation from an InitializerSpec and its seed.
// Pure functions; thread-safe.
#ifndef FULCRUM_COMMON_INITIALIZER_H_
#define FULCRUM_COMMON_INITIALIZER_H_

#include <cstdint>

#include "absl/types/span.h"
#include "proto/tensor.pb.h"

namespace fulcrum {

// Fills `out` with rows [row_offset, row_offset + rows) of the variable's
// initial value. Each row is drawn from a generator seeded by (seed, row), so
// the value does not depend on how the variable is sharded.
void InitializeRows(const VariableSpec& spec, int64_t row_offset, int64_t rows,
                    absl::Span<float> out);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_INITIALIZER_H_
