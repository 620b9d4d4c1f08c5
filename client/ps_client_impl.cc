#include "client/ps_client_impl.h"

#include <utility>

#include "common/logging.h"

namespace fulcrum {
namespace {

std::unique_ptr<ClientConsistencyPolicy> PolicyOf(ConsistencyMode mode) {
  auto policy = MakeClientPolicy(mode);
  CHECK(policy.ok() && "PsClientOptions::mode must be ASYNC, SYNC or SSP");
  return *std::move(policy);
}

}  // namespace

PsClientImpl::PsClientImpl(std::vector<std::unique_ptr<PsTransport>> servers,
                           PsClientOptions options, ServerSet::Connect connect)
    : options_(std::move(options)),
      policy_(PolicyOf(options_.mode)),
      servers_(std::move(servers), options_, *policy_, std::move(connect)),
      dense_(&servers_),
      rows_(&servers_) {
  servers_.SetForgetHook([this](const std::vector<bool>& recovered) {
    dense_.ForgetVersions(recovered);
    rows_.ForgetVersions(recovered);
  });
}

}  // namespace fulcrum
