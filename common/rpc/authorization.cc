#include "common/rpc/authorization.h"

#include <grpc/grpc_security_constants.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fulcrum {
namespace {

// The names a peer's certificate gives it: its common name, then its SANs.
std::vector<std::string> PeerNames(const grpc::AuthContext& peer) {
  std::vector<std::string> names;
  for (const char* property :
       {GRPC_X509_CN_PROPERTY_NAME, GRPC_PEER_URI_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME}) {
    for (const grpc::string_ref& value : peer.FindPropertyValues(property)) {
      std::string name(value.data(), value.size());
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  return names;
}

}  // namespace

ControlAccess::ControlAccess(std::vector<std::string> identities)
    : open_(false), identities_(std::move(identities)) {}

grpc::Status ControlAccess::Check(const grpc::AuthContext& peer, const std::string& call) const {
  if (open_) return grpc::Status::OK;
  const std::vector<std::string> names = PeerNames(peer);
  for (const std::string& identity : identities_) {
    for (const std::string& name : names) {
      if (name == identity || name == "fulcrum://" + identity) return grpc::Status::OK;
    }
  }
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat(call, " is a control call: only a certificate naming ",
                   absl::StrJoin(identities_, " or "),
                   " (--chief_identity) may make it; this peer's certificate names ",
                   names.empty() ? "nothing" : absl::StrJoin(names, ", ")));
}

}  // namespace fulcrum
