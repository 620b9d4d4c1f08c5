#include "worker/data/synthetic_ctr.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "worker/binary_metrics.h"

namespace fulcrum {
namespace {

SyntheticCtrOptions Small() {
  SyntheticCtrOptions options;
  options.vocabulary = 100000;
  options.seed = 9;
  return options;
}

TEST(SyntheticCtrTest, IsReproducibleAndEachShardDrawsItsOwn) {
  const SyntheticCtr generator(Small());
  const CtrExamples a = generator.Generate(200, 0);
  const CtrExamples again = SyntheticCtr(Small()).Generate(200, 0);
  const CtrExamples other = generator.Generate(200, 1);
  EXPECT_EQ(a.ids, again.ids);
  EXPECT_EQ(a.labels, again.labels);
  EXPECT_EQ(a.numeric, again.numeric);
  EXPECT_NE(a.ids, other.ids);
  EXPECT_EQ(a.ids.size(), 200u * 26);
  EXPECT_EQ(a.numeric.size(), 200u * 13);
}

// A job resumed by a newer build trains on the same examples: the
// generator's output is pinned, bit for bit, by a fingerprint of a
// shard's ids, numeric features, labels and true probabilities taken from
// the build before its sampling was made faster.
TEST(SyntheticCtrTest, DrawsTheSameExamplesAsEarlierBuilds) {
  const CtrExamples data = SyntheticCtr(Small()).Generate(5000, 3);
  uint64_t fingerprint = 14695981039346656037ull;
  const auto add = [&fingerprint](uint64_t bits) {
    fingerprint = (fingerprint ^ bits) * 1099511628211ull;
  };
  for (const int64_t id : data.ids) add(static_cast<uint64_t>(id));
  for (const std::vector<float>* floats : {&data.numeric, &data.labels, &data.true_prob}) {
    for (const float x : *floats) {
      uint32_t bits;
      std::memcpy(&bits, &x, sizeof(bits));
      add(bits);
    }
  }
  EXPECT_EQ(fingerprint, 1874507829888580870ull);
}

// Zipf-skewed ids: a field's most frequent id is far more frequent than
// its median one, and most ids are rare.
TEST(SyntheticCtrTest, IdsAreSkewed) {
  const CtrExamples data = SyntheticCtr(Small()).Generate(20000, 0);
  std::map<int64_t, int> count;
  for (int64_t e = 0; e < data.num_examples; ++e) ++count[data.ids[e * data.num_fields]];
  std::vector<int> counts;
  for (const auto& [id, c] : count) counts.push_back(c);
  std::sort(counts.rbegin(), counts.rend());
  EXPECT_GT(counts.front(), 50 * counts[counts.size() / 2]);
  EXPECT_GT(count.size(), 2000u);  // sparse: thousands of ids in 20,000 examples
}

// The labels follow the true probabilities: their rate matches the mean
// probability, and the true probabilities rank them well (the oracle AUC
// the CTR model is judged against).
TEST(SyntheticCtrTest, LabelsFollowTheTrueProbabilities) {
  const CtrExamples data = SyntheticCtr(Small()).Generate(20000, -1);
  const double rate = std::accumulate(data.labels.begin(), data.labels.end(), 0.0) / 20000;
  const double mean = std::accumulate(data.true_prob.begin(), data.true_prob.end(), 0.0) / 20000;
  EXPECT_NEAR(rate, mean, 0.015);
  EXPECT_GT(rate, 0.1);
  EXPECT_LT(rate, 0.6);
  const double oracle = Auc(data.true_prob, data.labels);
  EXPECT_GT(oracle, 0.75);
  EXPECT_LT(oracle, 0.98);
  EXPECT_LT(LogLoss(data.true_prob, data.labels), std::log(2.0));
}

// Ranks, searching in step, finds what a search of each one finds,
// for random uniforms and at the edges: each rank's cumulative probability
// exactly, the doubles either side of it, 0 and 1.
TEST(SyntheticCtrTest, RanksAreTheFirstWhoseCumulativeProbabilityReachesTheUniform) {
  for (const int64_t vocabulary : {1, 7, 1000, 100000}) {
    SyntheticCtrOptions options = Small();
    options.vocabulary = vocabulary;
    const SyntheticCtr generator(options);
    std::vector<double> cdf(vocabulary);
    double sum = 0;
    for (int64_t r = 0; r < vocabulary; ++r) {
      sum += std::pow(static_cast<double>(r + 1), -options.zipf_exponent);
      cdf[r] = sum;
    }
    for (double& c : cdf) c /= sum;
    const auto searched = [&](double u) {
      return std::min<int64_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin(),
                               vocabulary - 1);
    };
    std::vector<double> uniforms = {0.0, 1.0, std::nextafter(1.0, 0.0)};
    for (int64_t r = 0; r < vocabulary; r += std::max<int64_t>(1, vocabulary / 5000)) {
      uniforms.insert(uniforms.end(),
                      {cdf[r], std::nextafter(cdf[r], 0.0), std::nextafter(cdf[r], 2.0)});
    }
    std::mt19937_64 gen(vocabulary);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (int i = 0; i < 200000; ++i) uniforms.push_back(uniform(gen));
    std::vector<int64_t> ranks(uniforms.size());
    generator.Ranks(uniforms.data(), static_cast<int>(uniforms.size()), ranks.data());
    for (size_t i = 0; i < uniforms.size(); ++i) {
      ASSERT_EQ(ranks[i], searched(uniforms[i]))
          << "u=" << uniforms[i] << " vocabulary=" << vocabulary;
    }
  }
}

}  // namespace
}  // namespace fulcrum
