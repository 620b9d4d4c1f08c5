// Elementwise loops in the vector units the CPU has. FULCRUM_VECTOR_CLONES
// names the instruction sets such a loop is compiled for, each chosen as the
// program loads by what the CPU has: x86-64-v4's AVX-512 (16 floats a step,
// with 64-bit integer multiplies and conversions), AVX2 (8), and the
// baseline's SSE2. Put on a loop's function, in a file built with -O3
// (GCC's -O2 does not vectorise a loop whose length it does not know) and
// -ffp-contract=off where it multiplies and adds: each path then rounds
// every operation alike, so that replicas on different CPUs stay
// bit-identical. The loops that more than one library runs are here.
#ifndef FULCRUM_COMMON_VECTOR_LOOPS_H_
#define FULCRUM_COMMON_VECTOR_LOOPS_H_

#include <cstdint>

#define FULCRUM_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))

namespace fulcrum {

// to[i] = to[i] + from[i] for i < n; the arrays do not overlap. Each sum
// rounds as the scalar one does, and b + a == a + b, so ranks of an
// all-reduce that add in either order agree.
void AddInto(float* __restrict to, const float* __restrict from, int64_t n);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_VECTOR_LOOPS_H_
