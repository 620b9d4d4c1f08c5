#include "tests/pushers.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fulcrum {

VariableSpec Ones(int shards) {
  VariableSpec spec;
  spec.set_name("w");
  spec.add_shape(64);
  spec.add_shape(8);
  spec.set_dtype(DT_FLOAT);
  spec.mutable_partitioner()->set_kind(PartitionerSpec::FIXED_SHARDS);
  spec.mutable_partitioner()->set_num_shards(shards);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  return spec;
}

void Pushers::Run(PsClient* client, ConsistencyMode mode, int steps, bool until_stopped, int w) {
  TensorMap gradient;
  gradient["w"] = DenseTensor{{64, 8}, std::vector<float>(kElements, 0.0f)};
  for (size_t i = 0; i < kElements; ++i) {
    if (i / 8 % kWorkers == static_cast<size_t>(w)) gradient["w"].values[i] = 1.0f;
  }
  TensorMap values;
  // A sync step waits for every worker once all have come.
  if (absl::Status s = client->AwaitJobStart(nullptr); !s.ok()) {
    absl::MutexLock lock(&mu_);
    failed_[w] = s;
    return;
  }
  for (int step = 0;; ++step) {
    {
      absl::MutexLock lock(&mu_);
      if (step >= std::max<int64_t>(steps, until_stopped ? stop_at_ : 0)) return;
    }
    absl::Status pulled = client->Pull({"w"}, &values);
    if (pulled.ok() && mode == SSP) {
      // At clock `step`, every worker's first step - k pushes are in.
      const float at_most = -static_cast<float>(std::max(step - kStaleness, 0));
      for (size_t i = 0; i < kElements; i += 8) {
        if (values["w"].values[i] <= at_most) continue;
        absl::MutexLock lock(&mu_);
        too_stale_.push_back(absl::StrCat("worker ", w, " at clock ", step, " read ",
                                          values["w"].values[i], " in row ", i / 8, ", at most ",
                                          at_most));
      }
    }
    absl::StatusOr<PushStats> pushed =
        pulled.ok() ? client->Push(gradient) : absl::StatusOr<PushStats>(pulled);
    absl::MutexLock lock(&mu_);
    if (!pushed.ok()) {
      failed_[w] = pushed.status();
      return;
    }
    ++acknowledged_[w];
  }
}

::testing::AssertionResult EachPushAppliedOnce(PsClient& reader, ConsistencyMode mode,
                                               const std::vector<int64_t>& acknowledged) {
  TensorMap values;
  if (absl::Status s = reader.Pull({"w"}, &values); !s.ok()) {
    return ::testing::AssertionFailure() << "pull: " << s;
  }
  if (values["w"].values.size() != Pushers::kElements)
    return ::testing::AssertionFailure() << "size";
  for (size_t i = 0; i < Pushers::kElements; ++i) {
    const float expected = -static_cast<float>(acknowledged[i / 8 % Pushers::kWorkers]) *
                           (mode == SYNC ? 0.25f : 1.0f);
    if (values["w"].values[i] != expected) {
      return ::testing::AssertionFailure()
             << "element " << i << " is " << values["w"].values[i] << ", not " << expected;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace fulcrum
