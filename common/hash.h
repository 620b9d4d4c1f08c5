// A fixed 64-bit mix (splitmix64's finaliser, Steele et al.): a bijection
// that spreads neighbouring inputs, the same in every process and run
// (std::hash and absl::Hash are neither). Seeds rows' generators, places
// embedding rows on servers, draws synthetic data.
#ifndef FULCRUM_COMMON_HASH_H_
#define FULCRUM_COMMON_HASH_H_

#include <cstdint>

namespace fulcrum {

inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// splitmix64's step: what to mix for the k-th value after `seed`.
constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_HASH_H_
