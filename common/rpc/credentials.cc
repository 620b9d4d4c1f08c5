#include "common/rpc/credentials.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_system.h"

namespace fulcrum {
namespace {

// OK when `path` is a readable file with a PEM block `kind` ("CERTIFICATE",
// "PRIVATE KEY").
absl::Status CheckPem(const std::string& flag, const std::string& path, const std::string& kind) {
  if (path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag,
                     " is missing: TLS needs --tls_cert, --tls_key and --tls_ca together "
                     "(scripts/make_certs.sh makes them)"));
  }
  auto text = ReadFile(*MakeLocalFileSystem(), path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "' cannot be read"));
  }
  if (!absl::StrContains(*text, "-----BEGIN") || !absl::StrContains(*text, kind + "-----")) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path, "' holds no PEM ", kind, " block"));
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::experimental::CertificateProviderInterface> Provider(const TlsFiles& files) {
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key, files.cert, files.ca, static_cast<unsigned>(files.reload_secs));
}

}  // namespace

absl::Status CheckTlsFiles(const TlsFiles& files) {
  if (!files.enabled()) return absl::OkStatus();
  if (files.reload_secs <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS: the reload interval must be positive, not ", files.reload_secs));
  }
  if (absl::Status s = CheckPem("--tls_cert", files.cert, "CERTIFICATE"); !s.ok()) return s;
  if (absl::Status s = CheckPem("--tls_key", files.key, "PRIVATE KEY"); !s.ok()) return s;
  return CheckPem("--tls_ca", files.ca, "CERTIFICATE");
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const TlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureServerCredentials();
  grpc::experimental::TlsServerCredentialsOptions options(Provider(files));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const TlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(Provider(files));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  return grpc::experimental::TlsCredentials(options);
}

}  // namespace fulcrum
