#include "worker/binary_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace fulcrum {
namespace {

TEST(AucTest, OrderedRevertedAndTiedScores) {
  const std::vector<float> labels = {0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(Auc({0.1f, 0.2f, 0.8f, 0.9f}, labels), 1.0);
  EXPECT_DOUBLE_EQ(Auc({0.9f, 0.8f, 0.2f, 0.1f}, labels), 0.0);
  EXPECT_DOUBLE_EQ(Auc({0.5f, 0.5f, 0.5f, 0.5f}, labels), 0.5);
  EXPECT_DOUBLE_EQ(Auc({0.3f, 0.7f}, {1, 1}), 0.5);  // one class only
}

// By hand: positives score 0.4, 0.6, 0.6; negatives 0.2, 0.6, 0.8. Of the
// nine pairs, the positives win (0.4 > 0.2), (0.6 > 0.2) twice, tie
// (0.6, 0.6) twice: (1 + 2 + 2 x 0.5) / 9 = 4 / 9.
TEST(AucTest, TiesCountHalf) {
  EXPECT_NEAR(Auc({0.4f, 0.6f, 0.6f, 0.2f, 0.6f, 0.8f}, {1, 1, 1, 0, 0, 0}), 4.0 / 9.0, 1e-12);
}

// Against counting every pair, on random scores with many ties.
TEST(AucTest, EqualsThePairCount) {
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> score(0, 20);
  std::bernoulli_distribution click(0.3);
  std::vector<float> scores(500), labels(500);
  for (size_t i = 0; i < scores.size(); ++i) {
    scores[i] = static_cast<float>(score(gen));
    labels[i] = click(gen) ? 1.0f : 0.0f;
  }
  double wins = 0, pairs = 0;
  for (size_t p = 0; p < scores.size(); ++p) {
    for (size_t n = 0; n < scores.size(); ++n) {
      if (labels[p] != 1 || labels[n] != 0) continue;
      pairs += 1;
      wins += scores[p] > scores[n] ? 1 : (scores[p] == scores[n] ? 0.5 : 0);
    }
  }
  EXPECT_NEAR(Auc(scores, labels), wins / pairs, 1e-12);
}

TEST(LogLossTest, KnownValuesAndClamping) {
  EXPECT_NEAR(LogLoss({0.5f, 0.5f}, {1, 0}), std::log(2.0), 1e-7);
  EXPECT_NEAR(LogLoss({0.9f}, {1}), -std::log(0.9), 1e-6);
  EXPECT_NEAR(LogLoss({0.0f}, {1}), -std::log(1e-7), 1e-6);  // not infinite
}

}  // namespace
}  // namespace fulcrum
