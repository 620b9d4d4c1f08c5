// The transport-security flags of every daemon and of fulcrumctl:
// --tls_cert, --tls_key, --tls_ca (mutual TLS), or --insecure (plaintext,
// only when asked).
#ifndef FULCRUM_COMMON_RPC_TLS_FLAGS_H_
#define FULCRUM_COMMON_RPC_TLS_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc/credentials.h"

namespace fulcrum {

// The flags' TlsFiles, checked (CheckTlsFiles): TLS with the three files,
// plaintext (no files) with --insecure. INVALID_ARGUMENT when neither or
// both are given, saying what to give.
absl::StatusOr<TlsFiles> TlsFilesFromFlags();

// The flags that give a child process `files` (the launcher's daemons):
// the three --tls_* flags, or --insecure.
std::vector<std::string> TlsFlagsFor(const TlsFiles& files);

// Logs a warning, once, when `files` is plaintext and `host` (a bind or
// dial address's host) is not loopback: anyone who reaches the port can
// then call it.
void WarnIfPlaintext(const TlsFiles& files, const std::string& host);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_RPC_TLS_FLAGS_H_
