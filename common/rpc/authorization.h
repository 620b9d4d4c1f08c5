// Which peers may make a server's control calls (JobDone, SaveCheckpoint:
// they end the job and write checkpoints). Under mutual TLS, those whose
// certificate names one of the control identities: as its subject's
// common name, or as a subject alternative name (the identity itself, or
// the URI fulcrum://<identity> that scripts/make_certs.sh writes). Without
// TLS a peer proves nothing, and every peer may.
#ifndef FULCRUM_COMMON_RPC_AUTHORIZATION_H_
#define FULCRUM_COMMON_RPC_AUTHORIZATION_H_

#include <grpcpp/security/auth_context.h>
#include <grpcpp/support/status.h>

#include <string>
#include <vector>

namespace fulcrum {

// The identities of --chief_identity's default: the chief and the operator.
inline const char kDefaultControlIdentities[] = "chief,fulcrumctl";

class ControlAccess {
 public:
  // Every peer may (plaintext).
  ControlAccess() = default;
  // Only peers with one of `identities` (mutual TLS).
  explicit ControlAccess(std::vector<std::string> identities);

  // OK, or PERMISSION_DENIED naming `call`, who may make it and who `peer`
  // is.
  grpc::Status Check(const grpc::AuthContext& peer, const std::string& call) const;

 private:
  bool open_ = true;
  std::vector<std::string> identities_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_RPC_AUTHORIZATION_H_
