#include "worker/local_reducer.h"

#include "common/logging.h"

namespace fulcrum {
namespace {

class HostReducer final : public LocalReducer {
 public:
  void Reduce(const std::vector<Mlp*>& replicas, const std::vector<float>& weights,
              TensorMap* out) override {
    CHECK(!replicas.empty() && replicas.size() == weights.size());
    replicas[0]->CopyGradients(out);
    if (replicas.size() == 1) return;  // its share is the whole batch
    for (auto& [name, tensor] : *out) {
      for (float& v : tensor.values) v *= weights[0];
    }
    for (size_t r = 1; r < replicas.size(); ++r) {
      replicas[r]->CopyGradients(&scratch_);
      for (auto& [name, tensor] : *out) {
        const std::vector<float>& other = scratch_[name].values;
        for (size_t i = 0; i < tensor.values.size(); ++i) tensor.values[i] += weights[r] * other[i];
      }
    }
  }

 private:
  TensorMap scratch_;
};

}  // namespace

std::unique_ptr<LocalReducer> MakeHostReducer() { return std::make_unique<HostReducer>(); }

}  // namespace fulcrum
