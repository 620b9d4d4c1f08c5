// How a consistency mode behaves in a worker: which version a pull waits
// for, whether calls carry the worker's clock, where a push goes, and what
// the mode means for resuming and for the learning rate. One implementation
// per mode, each in a file of its own (async.cc, sync.cc, ssp.cc), listed in
// MakeClientPolicy (policy.cc). Implementations are immutable and
// thread-safe.
#ifndef FULCRUM_CLIENT_CONSISTENCY_POLICY_H_
#define FULCRUM_CLIENT_CONSISTENCY_POLICY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

// The mode's bounds a worker was told to expect of the servers.
struct ModeBounds {
  int replicas_to_aggregate = 0;  // sync; 0: whatever the servers run
  int64_t staleness = -1;         // ssp; -1: whatever the servers run
};

class ClientConsistencyPolicy {
 public:
  virtual ~ClientConsistencyPolicy() = default;

  virtual ConsistencyMode mode() const = 0;

  // The version the next pull of a shard waits for, once this worker has
  // pushed a gradient computed from `pulled_version`; 0: no wait.
  virtual int64_t MinVersionAfterPush(int64_t pulled_version) const { return 0; }

  // Whether pulls and pushes carry this worker's clock (its pushes so far).
  virtual bool CarriesClock() const { return false; }

  // Whether a push goes to every server, gradients for it or not.
  virtual bool PushReachesEveryServer() const { return false; }

  // The batches a worker that joins a job whose servers are at
  // `global_step` has done already, of `num_workers` workers.
  virtual int64_t ResumedBatches(int64_t global_step, int num_workers) const = 0;

  // Whether a worker waits, before its first step, until every training
  // worker has contacted the servers (whose steps wait for them anyway).
  virtual bool AwaitsEveryWorker() const { return false; }

  // OK when `server` (which runs this mode) runs it with `expected`;
  // FAILED_PRECONDITION naming both otherwise.
  virtual absl::Status CheckServer(const DescribeResponse& server,
                                   const ModeBounds& expected) const {
    return absl::OkStatus();
  }
};

// Defined by async.cc, sync.cc and ssp.cc.
std::unique_ptr<ClientConsistencyPolicy> MakeAsyncClientPolicy();
std::unique_ptr<ClientConsistencyPolicy> MakeSyncClientPolicy();
std::unique_ptr<ClientConsistencyPolicy> MakeSspClientPolicy();

// The policy of `mode`; INVALID_ARGUMENT naming it when there is none.
absl::StatusOr<std::unique_ptr<ClientConsistencyPolicy>> MakeClientPolicy(ConsistencyMode mode);

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_CONSISTENCY_POLICY_H_
