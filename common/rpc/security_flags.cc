#include "common/rpc/security_flags.h"

#include <atomic>
#include <tuple>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/rpc/authorization.h"

ABSL_FLAG(std::string, tls_cert, "",
          "Mutual TLS: this process's certificate (PEM), presented to every peer; with "
          "--tls_key and --tls_ca (scripts/make_certs.sh makes them). The files are reread "
          "every minute, so rotated certificates apply without a restart.");
ABSL_FLAG(std::string, tls_key, "", "Mutual TLS: the private key of --tls_cert (PEM).");
ABSL_FLAG(std::string, tls_ca, "",
          "Mutual TLS: the CA certificate (PEM) that every peer's certificate must be signed "
          "by; peers without one are refused in the handshake.");
ABSL_FLAG(std::string, auth_token_file, "",
          "A file holding the cluster token (16 or more characters, e.g. `openssl rand -hex 32`): "
          "servers accept data calls (pulls, pushes, ...) only with it (or the control token), "
          "and, without --control_token_file, control calls only with it too; workers send it; "
          "all-reduce workers take their peers' streams only with it. Authenticates plaintext "
          "clusters; with TLS, an extra check.");
ABSL_FLAG(std::string, control_token_file, "",
          "A file holding the control token: servers accept control calls (JobDone, "
          "SaveCheckpoint) only with it; the chief and fulcrumctl send it (instead of the cluster "
          "token). Keep it from the other workers.");
ABSL_FLAG(bool, insecure, false,
          "Plaintext gRPC, without TLS: anyone who reaches a port can call it. Only for "
          "loopback or a network you trust; the TLS flags are required otherwise.");

namespace fulcrum {

absl::StatusOr<TlsFiles> TlsFilesFromFlags() {
  TlsFiles files{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                 absl::GetFlag(FLAGS_tls_ca)};
  const bool insecure = absl::GetFlag(FLAGS_insecure);
  if (insecure && files.enabled()) {
    return absl::InvalidArgumentError("--insecure and the --tls_* flags exclude each other");
  }
  if (!insecure && !files.enabled()) {
    return absl::InvalidArgumentError(
        "no transport security chosen: give --tls_cert, --tls_key and --tls_ca (mutual TLS; "
        "scripts/make_certs.sh makes them), or --insecure for plaintext");
  }
  if (absl::Status s = CheckTlsFiles(files); !s.ok()) return s;
  return files;
}

absl::StatusOr<std::string> ClientTokenFromFlags() {
  if (const std::string path = absl::GetFlag(FLAGS_control_token_file); !path.empty()) {
    return ReadToken("--control_token_file", path);
  }
  if (const std::string path = absl::GetFlag(FLAGS_auth_token_file); !path.empty()) {
    return ReadToken("--auth_token_file", path);
  }
  return std::string();
}

absl::Status ServerTokensFromFlags(std::string* cluster, std::string* control) {
  for (auto [flag, path, out] :
       {std::make_tuple("--auth_token_file", absl::GetFlag(FLAGS_auth_token_file), cluster),
        std::make_tuple("--control_token_file", absl::GetFlag(FLAGS_control_token_file),
                        control)}) {
    out->clear();
    if (path.empty()) continue;
    auto token = ReadToken(flag, path);
    if (!token.ok()) return token.status();
    *out = *std::move(token);
  }
  return absl::OkStatus();
}

void WarnIfPlaintext(const TlsFiles& files, const std::string& host) {
  static std::atomic<bool> warned{false};
  const bool loopback =
      host == "localhost" || host == "::1" || host == "[::1]" || absl::StartsWith(host, "127.");
  if (files.enabled() || loopback || warned.exchange(true)) return;
  LOG_WARN(
      "PLAINTEXT gRPC on {} (--insecure): anyone who can reach this port can pull, push, "
      "checkpoint and stop the job. Use --tls_cert, --tls_key and --tls_ca off loopback.",
      host);
}

}  // namespace fulcrum
