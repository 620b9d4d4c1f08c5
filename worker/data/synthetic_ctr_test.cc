#include "worker/data/synthetic_ctr.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

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

}  // namespace
}  // namespace fulcrum
