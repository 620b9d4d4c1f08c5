#include "worker/data/synthetic_ctr.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "common/hash.h"
#include "common/logging.h"

namespace fulcrum {
namespace {

uint64_t Mix(uint64_t z) { return Mix64(z + kGoldenGamma); }

// A hash of (seed, what, a, b): what distinguishes the kinds of weight.
uint64_t Key(uint64_t seed, uint64_t what, int64_t a, int64_t b) {
  return Mix(seed ^ Mix(what ^ Mix(static_cast<uint64_t>(a) ^ Mix(static_cast<uint64_t>(b)))));
}

// A standard normal drawn from a hash (Box-Muller on two of its uniforms).
double HashNormal(uint64_t h) {
  const double u1 = (static_cast<double>(h >> 11) + 0.5) / 9007199254740992.0;  // (0, 1)
  const double u2 = static_cast<double>(Mix(h) >> 11) / 9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

enum What : uint64_t { kIdWeight = 1, kNumericWeight, kLeftFactor, kRightFactor, kId, kPair };

}  // namespace

SyntheticCtr::SyntheticCtr(const SyntheticCtrOptions& options) : options_(options) {
  CHECK(options.num_fields >= 1 && options.num_numeric >= 0 && options.vocabulary >= 1);
  cdf_.resize(options.vocabulary);
  double sum = 0;
  for (int64_t r = 0; r < options.vocabulary; ++r) {
    sum += std::pow(static_cast<double>(r + 1), -options.zipf_exponent);
    cdf_[r] = sum;
  }
  for (double& c : cdf_) c /= sum;
  for (int p = 0; p < options.num_pairs && options.num_fields >= 2; ++p) {
    const uint64_t h = Key(options.seed, kPair, p, 0);
    const int a = static_cast<int>(h % options.num_fields);
    const int b = static_cast<int>((a + 1 + (h >> 32) % (options.num_fields - 1)) %
                                   options.num_fields);  // another field
    pairs_.emplace_back(a, b);
  }
  paired_.assign(options.num_fields, false);
  for (const auto& [a, b] : pairs_) paired_[a] = paired_[b] = true;
  head_ranks_ = std::min<int64_t>(options.vocabulary, 1024);
  for (int f = 0; f < options.num_fields; ++f) {
    for (int64_t r = 0; r < head_ranks_; ++r) head_.push_back(Hashed(f, r));
  }
  for (int d = 0; d < options.num_numeric; ++d) {
    numeric_weights_.push_back(HashNormal(Key(options.seed, kNumericWeight, d, 0)));
  }
}

SyntheticCtr::RankWeights SyntheticCtr::Hashed(int field, int64_t rank) const {
  const uint64_t seed = options_.seed;
  RankWeights w;
  // Ids look like hashed features: spread over the int64 range, per field.
  w.id = static_cast<int64_t>(Key(seed, kId, field, rank) >> 1);
  w.weight = HashNormal(Key(seed, kIdWeight, field, rank));
  if (paired_[field]) {
    w.left = HashNormal(Key(seed, kLeftFactor, field, rank));
    w.right = HashNormal(Key(seed, kRightFactor, field, rank));
  }
  return w;
}

void SyntheticCtr::Ranks(const double* uniforms, int n, int64_t* ranks) const {
  const double* cdf = cdf_.data();
  for (int i = 0; i < n; ++i) ranks[i] = 0;
  // Each search keeps [ranks[i], ranks[i] + len) holding its answer's
  // predecessor..answer; len is the same for all.
  for (int64_t len = static_cast<int64_t>(cdf_.size()); len > 1;) {
    const int64_t half = len / 2;
    for (int i = 0; i < n; ++i) {
      ranks[i] += cdf[ranks[i] + half - 1] < uniforms[i] ? half : 0;
    }
    len -= half;
  }
  const int64_t last = static_cast<int64_t>(cdf_.size()) - 1;
  for (int i = 0; i < n; ++i) {
    ranks[i] = std::min(ranks[i] + (cdf[ranks[i]] < uniforms[i] ? 1 : 0), last);
  }
}

double SyntheticCtr::Logit(const int64_t* ranks, const RankWeights* weights,
                           const float* numeric) const {
  // How much of its weight rank r keeps: 1 up to signal_ranks, then
  // signal_ranks / r.
  const auto keep = [this](int64_t r) {
    return r < options_.signal_ranks
               ? 1.0
               : static_cast<double>(options_.signal_ranks) / static_cast<double>(r);
  };
  double logit = options_.bias;
  for (int f = 0; f < options_.num_fields; ++f) {
    logit += options_.id_scale * keep(ranks[f]) * weights[f].weight;
  }
  for (int d = 0; d < options_.num_numeric; ++d) {
    logit += 0.3 * numeric_weights_[d] * numeric[d];
  }
  for (const auto& [a, b] : pairs_) {
    logit += 0.5 * keep(ranks[a]) * weights[a].left * keep(ranks[b]) * weights[b].right;
  }
  return logit;
}

CtrExamples SyntheticCtr::Generate(int64_t count, int shard) const {
  CtrExamples out;
  out.num_examples = count;
  out.num_fields = options_.num_fields;
  out.num_numeric = options_.num_numeric;
  out.ids.resize(count * options_.num_fields);
  out.numeric.resize(count * options_.num_numeric);
  out.labels.resize(count);
  out.true_prob.resize(count);
  std::mt19937_64 gen(Mix(options_.seed ^ Mix(static_cast<uint64_t>(shard) + 7)));
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<double> uniforms(options_.num_fields);
  std::vector<int64_t> ranks(options_.num_fields);
  std::vector<RankWeights> weights(options_.num_fields);
  for (int64_t e = 0; e < count; ++e) {
    for (double& u : uniforms) u = uniform(gen);
    Ranks(uniforms.data(), options_.num_fields, ranks.data());
    for (int f = 0; f < options_.num_fields; ++f) {
      weights[f] = ranks[f] < head_ranks_ ? head_[f * head_ranks_ + ranks[f]] : Hashed(f, ranks[f]);
      out.ids[e * options_.num_fields + f] = weights[f].id;
    }
    float* numeric = out.numeric.data() + e * options_.num_numeric;
    for (int d = 0; d < options_.num_numeric; ++d) numeric[d] = normal(gen);
    const double p = 1.0 / (1.0 + std::exp(-Logit(ranks.data(), weights.data(), numeric)));
    out.true_prob[e] = static_cast<float>(p);
    out.labels[e] = uniform(gen) < p ? 1.0f : 0.0f;
  }
  return out;
}

}  // namespace fulcrum
