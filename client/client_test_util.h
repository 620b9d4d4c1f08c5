// Servers, variables and gradients for the client-side tests.
#ifndef FULCRUM_CLIENT_CLIENT_TEST_UTIL_H_
#define FULCRUM_CLIENT_CLIENT_TEST_UTIL_H_

#include <string>

#include "common/tensor.h"
#include "proto/config.pb.h"
#include "proto/tensor.pb.h"

namespace fulcrum {

// A server in `mode` for `replicas` workers, all aggregated in sync mode;
// no staleness limit, ssp bound 1, 10 s leases, 64 MiB messages.
PsServerConfig TestServerConfig(ConsistencyMode mode, int replicas);

// A float32 variable of `shape` filled with `init`, in `shards` shards
// (FIXED_SHARDS), updated by SGD at learning rate 1.
VariableSpec TestVariable(const std::string& name, Shape shape, int shards, float init);

// A tensor of `shape` filled with `value`.
DenseTensor Filled(const Shape& shape, float value);

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_CLIENT_TEST_UTIL_H_
