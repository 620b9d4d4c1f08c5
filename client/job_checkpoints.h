// The chief's checkpoints of a parameter-server job, for programs that
// train through a PsClient of their own (the Python package, custom
// training loops): the two-phase, checksummed checkpoints the C++ chief
// writes (every server writes its file, then the chief the manifest), with
// the program's own state in the manifest, and that state back after a
// restart. Thread-compatible; calls go through the client.
//
//   auto checkpoints = JobCheckpoints::Create(client.get(), {dir, 0, 600, 5});
//   auto state = (*checkpoints)->RestoredState();  // NOT_FOUND on a fresh job
//   ... each step: if ((*checkpoints)->Due(step)) (*checkpoints)->Save(step, my_state);
#ifndef FULCRUM_CLIENT_JOB_CHECKPOINTS_H_
#define FULCRUM_CLIENT_JOB_CHECKPOINTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fulcrum/ps_client.h"

namespace fulcrum {

struct JobCheckpointOptions {
  std::string dir;          // the servers' --checkpoint_dir, shared with them
  int64_t every_steps = 0;  // Due every this many steps; 0: not by steps
  int64_t every_secs = 0;   // Due every this many seconds; 0: not by time
  int keep = 5;             // complete checkpoints kept; older ones are deleted
};

// A program's own state kept in a checkpoint's manifest, by name.
using CheckpointState = std::map<std::string, std::string>;

class JobCheckpoints {
 public:
  // For the chief's `client`, which must outlive it. INVALID_ARGUMENT for
  // an empty dir, negative intervals or keep < 1.
  static absl::StatusOr<std::unique_ptr<JobCheckpoints>> Create(
      PsClient* client, const JobCheckpointOptions& options);
  virtual ~JobCheckpoints() = default;

  // Whether every_steps steps or every_secs seconds have passed, at `step`,
  // since the last checkpoint (or since Create).
  virtual bool Due(int64_t step) const = 0;

  // Checkpoint `step` now, with `state` in its manifest. On failure (a full
  // disk, a server gone) the previous complete checkpoint stays valid, and
  // the error says why.
  virtual absl::Status Save(int64_t step, const CheckpointState& state) = 0;

  // The state saved with the checkpoint the servers restored from when they
  // started. NOT_FOUND when they restored none, or one with no manifest
  // (their final files).
  virtual absl::StatusOr<CheckpointState> RestoredState() = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_JOB_CHECKPOINTS_H_
