// Requests that tests of the server build again and again.
#ifndef FULCRUM_PS_SERVER_TEST_REQUESTS_H_
#define FULCRUM_PS_SERVER_TEST_REQUESTS_H_

#include <cstdint>
#include <string>

#include "proto/ps_service.pb.h"

namespace fulcrum {

// A pull of shard 0 of `variable` at `min_version`: a worker's (at
// `clock`, if >= 0) when `worker` >= 0, else a reader's.
inline PullRequest PullOf(const std::string& variable, int worker, int64_t min_version = 0,
                          int64_t clock = -1) {
  PullRequest request;
  if (worker >= 0) request.set_worker_id(worker);
  if (clock >= 0) request.set_clock(clock);
  ShardRef* ref = request.add_shards();
  ref->set_variable(variable);
  ref->set_min_version(min_version);
  return request;
}

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_TEST_REQUESTS_H_
