// async: every push applies at once; the pull returns the current values.
// An optional max_staleness drops pushes computed too many versions ago.
#include "absl/strings/str_cat.h"
#include "ps_server/consistency/policy.h"

namespace fulcrum {
namespace {

class AsyncPolicy final : public ConsistencyPolicy {
 public:
  explicit AsyncPolicy(const PolicyContext& context)
      : max_staleness_(context.config->max_staleness()) {}

  absl::StatusOr<ShardPushResult> PushShard(Shard& shard, const ShardGradient& grad) override {
    return shard.ApplyNow(grad, max_staleness_);
  }

  // A pull waits for nothing the rest of the push does.
  bool PullsOverlapPush() const override { return true; }

 private:
  const int64_t max_staleness_;  // -1: keep every push
};

absl::Status Validate(const PsServerConfig& config) {
  if (config.max_staleness() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_staleness: must be >= -1, got ", config.max_staleness()));
  }
  return absl::OkStatus();
}

std::unique_ptr<ConsistencyPolicy> Make(const PolicyContext& context) {
  return std::make_unique<AsyncPolicy>(context);
}

}  // namespace

const ModeDefinition kAsyncMode = {ASYNC, &Validate, &Make};

}  // namespace fulcrum
