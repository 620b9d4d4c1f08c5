#include "common/optimizer/optimizer.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <thread>

#include "common/logging.h"
#include "common/thread_pool.h"
#include "common/vector_loops.h"

namespace fulcrum {

int NumSlots(const OptimizerSpec& spec) {
  switch (spec.kind()) {
    case OptimizerSpec::MOMENTUM:
    case OptimizerSpec::ADAGRAD:
      return 1;
    case OptimizerSpec::ADAM:
    case OptimizerSpec::FTRL:
      return 2;
    default:
      return 0;
  }
}

OptimizerSlots MakeSlots(const OptimizerSpec& spec, int64_t num_elements) {
  OptimizerSlots slots(NumSlots(spec), std::vector<float>(num_elements, 0.0f));
  // Adagrad's accumulator, and FTRL's n (its second slot), start at
  // initial_accumulator_value.
  if (spec.kind() == OptimizerSpec::ADAGRAD || spec.kind() == OptimizerSpec::FTRL) {
    std::fill(slots.back().begin(), slots.back().end(), spec.initial_accumulator_value());
  }
  return slots;
}

namespace {

// Elements below which one thread applies a whole shard: splitting smaller
// updates costs more in handoffs than it saves.
constexpr size_t kParallelElements = size_t{1} << 20;

// While one lives, this thread's float arithmetic reads denormal values
// as zero and writes zero for them (x86's DAZ and FTZ), as TensorFlow's
// kernels run. The decaying slots (Adam's moments, momentum's
// accumulator) of elements whose gradient stays zero, such as the MLP's
// weights from Fashion-MNIST's always-blank border pixels, turn denormal
// after some 700 steps of beta1 = 0.9; on Intel CPUs every operation on
// one then takes a microcode assist of about a hundred cycles. Adam over
// the MLP's variables went from 27% of a 2-server job's samples to 4%,
// and the job from 28,200 to 36,300 examples/s. Elsewhere (not x86):
// IEEE arithmetic, denormals kept.
class FlushDenormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
#else
  FlushDenormals() = default;
#endif
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

#if defined(__x86_64__) || defined(__i386__)
 private:
  static constexpr unsigned kFlushToZero = 0x8000;     // MXCSR.FTZ
  static constexpr unsigned kDenormalsAreZero = 0x40;  // MXCSR.DAZ
  const unsigned saved_;
#endif
};

// The update rule on elements [0, n) of the shard's arrays; the gradient's
// floats may lie at any address (LoadFloat), and each is multiplied by
// `scale` as it is read. The arrays never overlap; `__restrict` lets the
// compiler vectorise (FULCRUM_VECTOR_CLONES, with -fno-math-errno for sqrt
// set in BUILD).
FULCRUM_VECTOR_CLONES void ApplyRange(const OptimizerSpec& spec, float lr, float scale, size_t n,
                                      const char* __restrict grad_bytes, float* __restrict var,
                                      float* __restrict slot0, float* __restrict slot1) {
  const auto grad = [grad_bytes, scale](size_t i) { return LoadFloat(grad_bytes, i) * scale; };
  switch (spec.kind()) {
    case OptimizerSpec::SGD:
      for (size_t i = 0; i < n; ++i) var[i] -= lr * grad(i);
      break;
    case OptimizerSpec::MOMENTUM: {
      const float m = spec.momentum();
      if (spec.nesterov()) {
        for (size_t i = 0; i < n; ++i) {
          slot0[i] = m * slot0[i] + grad(i);
          var[i] -= lr * (grad(i) + m * slot0[i]);
        }
      } else {
        for (size_t i = 0; i < n; ++i) {
          slot0[i] = m * slot0[i] + grad(i);
          var[i] -= lr * slot0[i];
        }
      }
      break;
    }
    case OptimizerSpec::ADAGRAD: {
      const float eps = spec.epsilon();
      for (size_t i = 0; i < n; ++i) {
        slot0[i] += grad(i) * grad(i);
        var[i] -= lr * grad(i) / (std::sqrt(slot0[i]) + eps);
      }
      break;
    }
    case OptimizerSpec::ADAM: {
      const float eps = spec.epsilon();
      const float b1 = spec.beta1();
      const float b2 = spec.beta2();
      for (size_t i = 0; i < n; ++i) {
        slot0[i] = b1 * slot0[i] + (1.0f - b1) * grad(i);
        slot1[i] = b2 * slot1[i] + (1.0f - b2) * grad(i) * grad(i);
        var[i] -= lr * slot0[i] / (std::sqrt(slot1[i]) + eps);
      }
      break;
    }
    case OptimizerSpec::FTRL: {  // slot0 z, slot1 n
      const float l1 = spec.l1();
      const float two_l2 = 2.0f * spec.l2();
      const float beta = spec.ftrl_beta();
      for (size_t i = 0; i < n; ++i) {
        const float n_new = slot1[i] + grad(i) * grad(i);
        const float sqrt_new = std::sqrt(n_new);
        slot0[i] += grad(i) - (sqrt_new - std::sqrt(slot1[i])) / lr * var[i];
        slot1[i] = n_new;
        const float z = slot0[i];
        const float shrunk = z > l1 ? l1 - z : (z < -l1 ? -l1 - z : 0.0f);
        var[i] = shrunk / ((beta + sqrt_new) / lr + two_l2);
      }
      break;
    }
    default:
      CHECK(false && "unknown optimizer kind");
  }
}

// The rate of this update: scaled, and for Adam bias-corrected (in double,
// as Keras does).
float UpdateRate(const OptimizerSpec& spec, int64_t iteration, int averaged) {
  float lr = ScaledLearningRate(spec, averaged);
  if (spec.kind() == OptimizerSpec::ADAM) {
    const double t = static_cast<double>(iteration);
    const double b1 = spec.beta1();
    const double b2 = spec.beta2();
    lr = static_cast<float>(lr * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t)));
  }
  return lr;
}

}  // namespace

float ScaledLearningRate(const OptimizerSpec& spec, int averaged) {
  const float lr = spec.learning_rate();
  if (averaged <= 1) return lr;
  switch (spec.learning_rate_scaling()) {
    case OptimizerSpec::SQRT:
      return lr * std::sqrt(static_cast<float>(averaged));
    case OptimizerSpec::LINEAR:
      return lr * static_cast<float>(averaged);
    default:
      return lr;
  }
}

void ApplyGradientToRows(const OptimizerSpec& spec, int64_t iteration, int averaged, int64_t width,
                         absl::Span<const float> grads, absl::Span<float* const> rows) {
  CHECK(grads.size() == rows.size() * static_cast<size_t>(width));
  const int slots = NumSlots(spec);
  const float lr = UpdateRate(spec, iteration, averaged);
  const char* grad_bytes = AsFloatBytes(grads).data();
  const FlushDenormals flush;
  for (size_t i = 0; i < rows.size(); ++i) {
    float* row = rows[i];
    if (row == nullptr) continue;
    ApplyRange(spec, lr, 1.0f, width, grad_bytes + i * width * sizeof(float), row,
               slots > 0 ? row + width : nullptr, slots > 1 ? row + 2 * width : nullptr);
  }
}

void ApplyGradient(const OptimizerSpec& spec, int64_t iteration, int averaged, GradientParts grad,
                   absl::Span<float> var, OptimizerSlots& slots, float scale) {
  float* pointers[2] = {nullptr, nullptr};
  for (size_t j = 0; j < slots.size() && j < 2; ++j) pointers[j] = slots[j].data();
  ApplyGradient(spec, iteration, averaged, grad, var, absl::MakeConstSpan(pointers, slots.size()),
                scale);
}

void ApplyGradient(const OptimizerSpec& spec, int64_t iteration, int averaged, GradientParts grad,
                   absl::Span<float> var, absl::Span<float* const> slots, float scale) {
  size_t grad_size = 0;
  for (FloatBytes part : grad) grad_size += part.size() / sizeof(float);
  CHECK(grad_size == var.size());
  CHECK(slots.size() == static_cast<size_t>(NumSlots(spec)));
  const float lr = UpdateRate(spec, iteration, averaged);
  float* slot0 = slots.size() > 0 ? slots[0] : nullptr;
  float* slot1 = slots.size() > 1 ? slots[1] : nullptr;
  const size_t n = var.size();
  // Large shards are split over the cores: the rule is elementwise.
  static const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  static ThreadPool* const helpers = new ThreadPool(cores - 1);  // lives as long as the process
  const size_t parts =
      n < kParallelElements ? 1 : std::min<size_t>(n / (kParallelElements / 2), cores);
  const size_t per_part = (n + parts - 1) / parts;
  ParallelFor(*helpers, static_cast<int>(parts), [&](int p) {
    const FlushDenormals flush;  // on each thread that applies a part
    const size_t begin = p * per_part;
    const size_t end = std::min(n, begin + per_part);
    // Elements [begin, end) of the shard, from whichever gradient parts hold them.
    size_t part_begin = 0;
    for (FloatBytes part : grad) {
      const size_t size = part.size() / sizeof(float);
      const size_t lo = std::max(begin, part_begin);
      const size_t hi = std::min(end, part_begin + size);
      if (lo < hi) {
        ApplyRange(spec, lr, scale, hi - lo, part.data() + (lo - part_begin) * sizeof(float),
                   var.data() + lo, slot0 == nullptr ? nullptr : slot0 + lo,
                   slot1 == nullptr ? nullptr : slot1 + lo);
      }
      part_begin += size;
    }
  });
}

}  // namespace fulcrum
