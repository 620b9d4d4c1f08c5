// How gRPC endpoints are secured: mutual TLS from PEM files, which are
// watched and reloaded when they change (certificate rotation without a
// restart), or plaintext. One place for servers (parameter servers, the
// all-reduce peers) and clients (workers, fulcrumctl) alike.
#ifndef FULCRUM_COMMON_RPC_CREDENTIALS_H_
#define FULCRUM_COMMON_RPC_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/status.h"

namespace fulcrum {

// A process's TLS identity and trust, as PEM files; all empty: plaintext.
struct TlsFiles {
  std::string cert;  // this process's certificate (chain)
  std::string key;   // its private key
  std::string ca;    // the CA certificate(s) every peer's must be signed by
  // How often the files are read again; a changed certificate, key or CA
  // applies to the connections made from then on.
  int reload_secs = 60;

  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// OK for plaintext, or for all three files readable as PEM; else
// INVALID_ARGUMENT naming the flag (--tls_cert, --tls_key, --tls_ca) and
// the file.
absl::Status CheckTlsFiles(const TlsFiles& files);

// A server's credentials: with TLS, it presents `files.cert` and accepts
// only clients that present a certificate signed by `files.ca` (refused in
// the handshake otherwise). `files` must pass CheckTlsFiles.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const TlsFiles& files);

// A client's credentials: with TLS, it presents `files.cert` and accepts
// only servers whose certificate `files.ca` signed and whose names (DNS or
// IP SANs) include the host it dialled. `files` must pass CheckTlsFiles.
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const TlsFiles& files);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_RPC_CREDENTIALS_H_
