// A parameter server's status page (GET / on its metrics port): its
// shards and tables' ranges with their copies, the workers it knows, its
// memory against its budget, its checkpoint, its security, from what
// Describe says, and the rates of its shards' pushes and pulls.
// Refreshes itself every few seconds.
#ifndef FULCRUM_PS_SERVER_STATUS_PAGE_H_
#define FULCRUM_PS_SERVER_STATUS_PAGE_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

// What the page says beside Describe: where the server listens, and how
// its calls are secured ("mutual TLS, tokens", "plaintext").
struct ServerPageContext {
  std::string address;
  std::string security;
};

// The page, rendered on each request from what Describe says then, with
// the rates since the previous request (the page reloads itself every
// 2 s): each shard's pushes and pulls, each table range's updates, per
// second. Thread-safe.
class ServerPage {
 public:
  explicit ServerPage(ServerPageContext context) : context_(std::move(context)) {}

  std::string Render(const DescribeResponse& state, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const ServerPageContext context_;
  absl::Mutex mu_;
  absl::Time last_render_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Each unit's counts at the last render: a shard's pushes and pulls, a
  // range's updates (version) and 0.
  std::map<std::string, std::array<int64_t, 2>> last_counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_STATUS_PAGE_H_
