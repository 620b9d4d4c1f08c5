// The security flags of every daemon and of fulcrumctl: --tls_cert,
// --tls_key, --tls_ca (mutual TLS), or --insecure (plaintext, only when
// asked); and the tokens, --auth_token_file and --control_token_file.
#ifndef FULCRUM_COMMON_RPC_SECURITY_FLAGS_H_
#define FULCRUM_COMMON_RPC_SECURITY_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/rpc/credentials.h"

namespace fulcrum {

// The flags' TlsFiles, checked (CheckTlsFiles): TLS with the three files,
// plaintext (no files) with --insecure. INVALID_ARGUMENT when neither or
// both are given, saying what to give.
absl::StatusOr<TlsFiles> TlsFilesFromFlags();

// The token a client sends with its calls: the control token with
// --control_token_file (the chief, fulcrumctl), else the cluster token of
// --auth_token_file, else none (""). Errors name the flag and file.
absl::StatusOr<std::string> ClientTokenFromFlags();

// A server's tokens: `cluster` from --auth_token_file, `control` from
// --control_token_file, each "" when not given. Errors name the flag.
absl::Status ServerTokensFromFlags(std::string* cluster, std::string* control);

// Logs a warning, once, when `files` is plaintext and `host` (a bind or
// dial address's host) is not loopback: anyone who reaches the port can
// then call it.
void WarnIfPlaintext(const TlsFiles& files, const std::string& host);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_RPC_SECURITY_FLAGS_H_
