// A parameter server's status page (GET / on its metrics port): its
// shards and tables' ranges with their copies, the workers it knows, its
// memory against its budget, its checkpoint, its security, from what
// Describe says. Refreshes itself every few seconds.
#ifndef FULCRUM_PS_SERVER_STATUS_PAGE_H_
#define FULCRUM_PS_SERVER_STATUS_PAGE_H_

#include <string>

#include "proto/ps_service.pb.h"

namespace fulcrum {

// What the page says beside Describe: where the server listens, and how
// its calls are secured ("mutual TLS, tokens", "plaintext").
struct ServerPageContext {
  std::string address;
  std::string security;
};

std::string RenderServerPage(const DescribeResponse& state, const ServerPageContext& context);

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_STATUS_PAGE_H_
