// Metrics of a binary classifier (the CTR model's): AUC and log loss.
// Pure functions; thread-safe.
#ifndef FULCRUM_WORKER_BINARY_METRICS_H_
#define FULCRUM_WORKER_BINARY_METRICS_H_

#include <vector>

namespace fulcrum {

// The area under the ROC curve of `scores` against `labels` (0 or 1): the
// probability that a random positive scores above a random negative, ties
// counting half (the Mann-Whitney rank sum). 0.5 when a class is empty.
double Auc(const std::vector<float>& scores, const std::vector<float>& labels);

// The mean logistic loss of probabilities `probs` (clamped to
// [1e-7, 1 - 1e-7]) against `labels`.
double LogLoss(const std::vector<float>& probs, const std::vector<float>& labels);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_BINARY_METRICS_H_
