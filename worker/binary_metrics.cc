#include "worker/binary_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/logging.h"

namespace fulcrum {

double Auc(const std::vector<float>& scores, const std::vector<float>& labels) {
  CHECK(scores.size() == labels.size());
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // The positives' ranks (1-based), each run of equal scores taking the
  // mean rank of the run.
  double positive_ranks = 0;
  double positives = 0;
  for (size_t begin = 0; begin < order.size();) {
    size_t end = begin;
    double run_positives = 0;
    while (end < order.size() && scores[order[end]] == scores[order[begin]]) {
      run_positives += labels[order[end]] > 0.5f ? 1 : 0;
      ++end;
    }
    positive_ranks += run_positives * (static_cast<double>(begin + 1 + end) / 2.0);
    positives += run_positives;
    begin = end;
  }
  const double negatives = static_cast<double>(scores.size()) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (positive_ranks - positives * (positives + 1) / 2.0) / (positives * negatives);
}

double LogLoss(const std::vector<float>& probs, const std::vector<float>& labels) {
  CHECK(probs.size() == labels.size());
  if (probs.empty()) return 0;
  double sum = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double p = std::clamp(static_cast<double>(probs[i]), 1e-7, 1 - 1e-7);
    sum -= labels[i] > 0.5f ? std::log(p) : std::log(1 - p);
  }
  return sum / static_cast<double>(probs.size());
}

}  // namespace fulcrum
