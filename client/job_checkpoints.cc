#include "fulcrum/job_checkpoints.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpointer.h"
#include "common/checkpoint/directory.h"
#include "common/file_system.h"

namespace fulcrum {
namespace {

class JobCheckpointsImpl final : public JobCheckpoints {
 public:
  JobCheckpointsImpl(PsClient* client, const JobCheckpointOptions& options)
      : client_(*client),
        dir_(options.dir),
        fs_(MakeLocalFileSystem()),
        checkpointer_([client](int64_t step) { return client->SaveCheckpoint(step); }, fs_.get(),
                      {options.dir, options.every_steps, options.every_secs, options.keep}) {}

  bool Due(int64_t step) const override { return checkpointer_.Due(step); }

  absl::Status Save(int64_t step, const CheckpointState& state) override {
    return checkpointer_.Save(step, state);
  }

  absl::StatusOr<CheckpointState> RestoredState() override {
    auto described = client_.Describe();
    if (!described.ok()) return described.status();
    const int64_t step = described->empty() ? -1 : described->front().restored_step();
    if (step < 0) return absl::NotFoundError("the servers restored no checkpoint");
    std::vector<std::string> problems;
    for (const CheckpointInfo& info : ListCompleteCheckpoints(*fs_, dir_, &problems)) {
      if (info.step == step) {
        return CheckpointState(info.manifest.chief_state().begin(),
                               info.manifest.chief_state().end());
      }
    }
    return absl::NotFoundError(absl::StrCat("the servers restored step ", step, ", but '", dir_,
                                            "' holds no complete checkpoint of it (they restored "
                                            "their final files)"));
  }

 private:
  PsClient& client_;
  const std::string dir_;
  const std::unique_ptr<FileSystem> fs_;
  Checkpointer checkpointer_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<JobCheckpoints>> JobCheckpoints::Create(
    PsClient* client, const JobCheckpointOptions& options) {
  if (options.dir.empty()) {
    return absl::InvalidArgumentError(
        "checkpoints need a directory (the servers' --checkpoint_dir)");
  }
  if (absl::Status s = CheckCheckpointOptions(
          {options.dir, options.every_steps, options.every_secs, options.keep});
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<JobCheckpoints>(new JobCheckpointsImpl(client, options));
}

}  // namespace fulcrum
