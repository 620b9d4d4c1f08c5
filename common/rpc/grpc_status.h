// The one place where absl::Status and grpc::Status are converted.
#ifndef FULCRUM_COMMON_RPC_GRPC_STATUS_H_
#define FULCRUM_COMMON_RPC_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace fulcrum {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_RPC_GRPC_STATUS_H_
