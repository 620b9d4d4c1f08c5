// Who may call a server. Data calls (pulls, pushes, CreateShards,
// heartbeats, Describe), control calls (JobDone, SaveCheckpoint: they end
// the job and write checkpoints) and calls between servers (Replicate:
// they change a backup's shards) are checked apart:
//  - Under mutual TLS, control calls need a certificate that names one of
//    the control identities, calls between servers one of the server
//    identities: as its subject's common name, or as a subject alternative
//    name (the identity itself, or the URI fulcrum://<identity> that
//    scripts/make_certs.sh writes). Any certificate the CA signed may make
//    data calls (the handshake checked it).
//  - With tokens, every call carries "authorization: Bearer <token>":
//    control calls and calls between servers need the control token, data
//    calls the cluster token or the control token. A server with only the
//    cluster token takes the others with that token: with any token
//    configured, none is taken without one. Compared in constant time.
// A check that is not configured passes. The health service is not checked
// here: it answers probes (kubelet's carry no token) with the serving state
// alone.
#ifndef FULCRUM_COMMON_RPC_AUTHORIZATION_H_
#define FULCRUM_COMMON_RPC_AUTHORIZATION_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace fulcrum {

// The identities of --chief_identity's default: the chief and the operator.
inline const char kDefaultControlIdentities[] = "chief,fulcrumctl";
// --server_identity's default: what scripts/make_certs.sh names servers.
inline const char kDefaultServerIdentities[] = "ps";

// The metadata key a call's token travels in.
inline const char kTokenMetadataKey[] = "authorization";

struct AccessPolicy {
  // Mutual TLS: the identities that may make control calls.
  bool tls = false;
  std::vector<std::string> control_identities;
  // Mutual TLS: the identities that may make calls between servers.
  std::vector<std::string> server_identities;
  // Tokens; empty: not needed.
  std::string cluster_token;
  std::string control_token;
};

class Access {
 public:
  Access() = default;  // every call passes
  explicit Access(AccessPolicy policy) : policy_(std::move(policy)) {}

  // OK, or UNAUTHENTICATED (no token, or a wrong one) or PERMISSION_DENIED
  // (a certificate without a control identity), naming `call` and what it
  // needs.
  grpc::Status CheckData(const grpc::ServerContextBase& context, const std::string& call) const;
  grpc::Status CheckControl(const grpc::ServerContextBase& context, const std::string& call) const;
  grpc::Status CheckPeer(const grpc::ServerContextBase& context, const std::string& call) const;

 private:
  // The token a control call needs, then (TLS) a certificate naming one of
  // `identities`; `what` and `flag` say which in the refusal.
  grpc::Status CheckPrivileged(const grpc::ServerContextBase& context, const std::string& call,
                               const std::vector<std::string>& identities, const std::string& what,
                               const std::string& flag) const;

  AccessPolicy policy_;
};

// A token from `path`: its contents without surrounding whitespace.
// INVALID_ARGUMENT naming `flag` and the file when it cannot be read or is
// shorter than 16 characters.
absl::StatusOr<std::string> ReadToken(const std::string& flag, const std::string& path);

// What a client puts under kTokenMetadataKey for `token`.
std::string TokenMetadata(const std::string& token);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_RPC_AUTHORIZATION_H_
