#include "ps_server/optimizer.h"

#include <cmath>

#include "common/logging.h"

namespace fulcrum {

OptimizerSlots MakeSlots(const OptimizerSpec& spec, int64_t num_elements) {
  switch (spec.kind()) {
    case OptimizerSpec::MOMENTUM:
      return OptimizerSlots(1, std::vector<float>(num_elements, 0.0f));
    case OptimizerSpec::ADAGRAD:
      return OptimizerSlots(1, std::vector<float>(num_elements, spec.initial_accumulator_value()));
    case OptimizerSpec::ADAM:
      return OptimizerSlots(2, std::vector<float>(num_elements, 0.0f));
    default:
      return {};
  }
}

void ApplyGradient(const OptimizerSpec& spec, int64_t iteration, absl::Span<const float> grad,
                   absl::Span<float> var, OptimizerSlots& slots) {
  CHECK(grad.size() == var.size());
  const float lr = spec.learning_rate();
  const size_t n = var.size();
  switch (spec.kind()) {
    case OptimizerSpec::SGD:
      for (size_t i = 0; i < n; ++i) var[i] -= lr * grad[i];
      break;
    case OptimizerSpec::MOMENTUM: {
      float* accum = slots[0].data();
      const float m = spec.momentum();
      for (size_t i = 0; i < n; ++i) {
        accum[i] = m * accum[i] + grad[i];
        var[i] -= spec.nesterov() ? lr * (grad[i] + m * accum[i]) : lr * accum[i];
      }
      break;
    }
    case OptimizerSpec::ADAGRAD: {
      float* accum = slots[0].data();
      const float eps = spec.epsilon();
      for (size_t i = 0; i < n; ++i) {
        accum[i] += grad[i] * grad[i];
        var[i] -= lr * grad[i] / (std::sqrt(accum[i]) + eps);
      }
      break;
    }
    case OptimizerSpec::ADAM: {
      float* m = slots[0].data();
      float* v = slots[1].data();
      const double b1 = spec.beta1();
      const double b2 = spec.beta2();
      const double t = static_cast<double>(iteration);
      const float lr_t =
          static_cast<float>(lr * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t)));
      const float eps = spec.epsilon();
      const float fb1 = static_cast<float>(b1);
      const float fb2 = static_cast<float>(b2);
      for (size_t i = 0; i < n; ++i) {
        m[i] = fb1 * m[i] + (1.0f - fb1) * grad[i];
        v[i] = fb2 * v[i] + (1.0f - fb2) * grad[i] * grad[i];
        var[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
      }
      break;
    }
    default:
      CHECK(false && "unknown optimizer kind");
  }
}

}  // namespace fulcrum
