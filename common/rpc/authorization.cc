#include "common/rpc/authorization.h"

#include <grpc/grpc_security_constants.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_system.h"

namespace fulcrum {
namespace {

constexpr char kBearer[] = "Bearer ";

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

// Whether `given` is `expected`, in time that depends on expected's length
// only (not on where they first differ).
bool SameToken(absl::string_view given, absl::string_view expected) {
  unsigned diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>(i < given.size() ? given[i] : 0) ^
            static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

// The call's token, or "" when it carries none.
absl::string_view CallToken(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find(kTokenMetadataKey);
  if (found == metadata.end()) return {};
  const absl::string_view value(found->second.data(), found->second.size());
  return absl::StartsWith(value, kBearer) ? value.substr(sizeof(kBearer) - 1) : absl::string_view();
}

grpc::Status Unauthenticated(const std::string& call, const std::string& needs,
                             absl::string_view given) {
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      absl::StrCat(call, " needs ", needs, "; the call carries ",
                                   given.empty() ? "no token" : "another token"));
}

}  // namespace

grpc::Status Access::CheckData(const grpc::ServerContextBase& context,
                               const std::string& call) const {
  if (policy_.cluster_token.empty()) return grpc::Status::OK;
  const absl::string_view token = CallToken(context);
  if (SameToken(token, policy_.cluster_token) ||
      (!policy_.control_token.empty() && SameToken(token, policy_.control_token))) {
    return grpc::Status::OK;
  }
  return Unauthenticated(call, "the cluster token (--auth_token_file)", token);
}

grpc::Status Access::CheckControl(const grpc::ServerContextBase& context,
                                  const std::string& call) const {
  return CheckPrivileged(context, call, policy_.control_identities,
                         "is a control call: only a certificate naming ", " (--chief_identity)");
}

grpc::Status Access::CheckPeer(const grpc::ServerContextBase& context,
                               const std::string& call) const {
  return CheckPrivileged(context, call, policy_.server_identities,
                         "is a call between servers: only a certificate naming ",
                         " (--server_identity)");
}

grpc::Status Access::CheckPrivileged(const grpc::ServerContextBase& context,
                                     const std::string& call,
                                     const std::vector<std::string>& identities,
                                     const std::string& what, const std::string& flag) const {
  // A server with any token never takes such a call without one: the
  // control token where there is one, else the cluster token.
  const bool control_token = !policy_.control_token.empty();
  const std::string& needed = control_token ? policy_.control_token : policy_.cluster_token;
  if (!needed.empty()) {
    const absl::string_view token = CallToken(context);
    if (!SameToken(token, needed)) {
      return Unauthenticated(call,
                             control_token ? "the control token (--control_token_file)"
                                           : "the cluster token (--auth_token_file; the server "
                                             "has no --control_token_file)",
                             token);
    }
  }
  if (!policy_.tls) return grpc::Status::OK;
  const std::vector<std::string> names = PeerNames(*context.auth_context());
  for (const std::string& identity : identities) {
    for (const std::string& name : names) {
      if (name == identity || name == "fulcrum://" + identity) return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat(call, " ", what, absl::StrJoin(identities, " or "), flag,
                                   " may make it; this peer's certificate names ",
                                   names.empty() ? "nothing" : absl::StrJoin(names, ", ")));
}

absl::StatusOr<std::string> ReadToken(const std::string& flag, const std::string& path) {
  auto text = ReadFile(*MakeLocalFileSystem(), path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "' cannot be read"));
  }
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.size() < 16) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path, "' holds ", token.size(),
                     " characters; a token needs at least 16 (e.g. openssl rand -hex 32)"));
  }
  return token;
}

std::string TokenMetadata(const std::string& token) { return kBearer + token; }

}  // namespace fulcrum
