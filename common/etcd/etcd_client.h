// A client of etcd's v3 API (proto/etcd_rpc.proto): the keys, leases and
// watches that the cluster's coordination is built on (replicated shards:
// which servers are alive, the placement table, who changes it). etcd is
// the coordination service Kubernetes clusters already run, and Debian
// packages it; Fulcrum runs no consensus of its own.
//
// Every call is bounded by the client's call timeout, and fails with
// etcd's status (UNAVAILABLE when it cannot be reached). Thread-safe.
#ifndef FULCRUM_COMMON_ETCD_ETCD_CLIENT_H_
#define FULCRUM_COMMON_ETCD_ETCD_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/etcd_rpc.grpc.pb.h"

namespace fulcrum {

struct EtcdValue {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;  // the store's revision that last wrote it
  int64_t lease = 0;         // 0: none
};

struct EtcdEvent {
  bool deleted = false;  // else put
  EtcdValue kv;          // a deletion's value is empty
};

// The keys under a prefix, as of one revision of the store.
struct EtcdListing {
  std::vector<EtcdValue> values;  // by key
  int64_t revision = 0;
};

class EtcdWatch;

class Etcd {
 public:
  // A client of the etcd at `endpoint` ("host:port") over `credentials`.
  Etcd(const std::string& endpoint, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
       absl::Duration call_timeout = absl::Seconds(5));

  // NOT_FOUND naming the key when it is absent.
  absl::StatusOr<EtcdValue> Get(absl::string_view key);
  absl::StatusOr<EtcdListing> List(absl::string_view prefix);

  // Writes the key (attached to `lease`, when not 0: deleted when the
  // lease expires); the store's new revision.
  absl::StatusOr<int64_t> Put(absl::string_view key, absl::string_view value, int64_t lease = 0);
  // Writes the key only if its mod revision is still `expected` (0: only
  // if it does not exist), so that of two writers who read the same
  // revision one wins; the new revision, or FAILED_PRECONDITION when
  // another write came first.
  absl::StatusOr<int64_t> CompareAndPut(absl::string_view key, absl::string_view value,
                                        int64_t expected, int64_t lease = 0);
  // Deletes the key, if it is there.
  absl::Status Delete(absl::string_view key);

  // A new lease of `ttl` (whole seconds, at least 1): its id.
  absl::StatusOr<int64_t> GrantLease(absl::Duration ttl);
  // Renews the lease; its time to live from now, or NOT_FOUND once it has
  // expired (its keys are gone then).
  absl::StatusOr<absl::Duration> KeepAlive(int64_t lease);
  absl::Status RevokeLease(int64_t lease);

  // Calls `on_events` with each change to the keys under `prefix` from
  // revision `from` on (0: from now), in the store's order, from a thread
  // of the watch's own, until the watch is destroyed. When the watch
  // breaks (etcd unreachable, the revision compacted), `on_error` is
  // called once with the reason and no event follows: list and watch
  // again.
  std::unique_ptr<EtcdWatch> Watch(absl::string_view prefix, int64_t from,
                                   std::function<void(const std::vector<EtcdEvent>&)> on_events,
                                   std::function<void(const absl::Status&)> on_error);

 private:
  std::unique_ptr<grpc::ClientContext> Context() const;

  const std::string endpoint_;
  const absl::Duration call_timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease_;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch_;
};

// A running watch (Etcd::Watch); destroying it stops it.
class EtcdWatch {
 public:
  ~EtcdWatch();
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;

 private:
  friend class Etcd;
  EtcdWatch() = default;

  std::atomic<bool> stopping_{false};
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::WatchRequest, etcdserverpb::WatchResponse>>
      stream_;
  std::thread reader_;
};

// The range end of etcd's prefix queries: `prefix` with its last byte
// that is not 0xff incremented (and what follows dropped).
std::string EtcdPrefixEnd(absl::string_view prefix);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_ETCD_ETCD_CLIENT_H_
