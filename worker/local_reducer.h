// Averages the gradients of a worker's local replicas (TensorFlow's
// MirroredStrategy inside one worker) so the worker pushes once per step.
#ifndef FULCRUM_WORKER_LOCAL_REDUCER_H_
#define FULCRUM_WORKER_LOCAL_REDUCER_H_

#include <memory>
#include <vector>

#include "worker/model.h"

namespace fulcrum {

class LocalReducer {
 public:
  virtual ~LocalReducer() = default;

  // Writes sum over r of weights[r] * (replica r's gradients) to `out`
  // (host), after every replica's ComputeGradients. weights[r] is replica
  // r's share of the batch.
  virtual void Reduce(const std::vector<Mlp*>& replicas, const std::vector<float>& weights,
                      TensorMap* out) = 0;
};

// Sums in host memory: for CPU replicas (threads).
std::unique_ptr<LocalReducer> MakeHostReducer();

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_LOCAL_REDUCER_H_
