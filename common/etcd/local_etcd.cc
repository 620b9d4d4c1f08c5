#include "common/etcd/local_etcd.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/etcd/etcd_client.h"
#include "common/loopback.h"

namespace fulcrum {
namespace {

bool OnPath(const std::string& binary) {
  if (binary.find('/') != std::string::npos) return access(binary.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path == nullptr ? "" : path, ':')) {
    if (!dir.empty() && access(absl::StrCat(dir, "/", binary).c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalEtcd>> LocalEtcd::Start(const std::string& data_dir,
                                                            const TlsFiles& tls,
                                                            const std::string& binary,
                                                            absl::Duration timeout) {
  if (!OnPath(binary)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no ", binary, " to run: install Debian's etcd-server (scripts/install_deps.sh does)"));
  }
  const std::vector<int> ports = FreeLoopbackPorts(2);
  if (ports[0] == 0 || ports[1] == 0) {
    return absl::UnavailableError("no free ports on 127.0.0.1 for etcd");
  }
  const std::string client =
      absl::StrCat(tls.enabled() ? "https" : "http", "://127.0.0.1:", ports[0]);
  // One member: its peer port takes no peer, and stays plaintext on loopback.
  const std::string peer = absl::StrCat("http://127.0.0.1:", ports[1]);
  std::vector<std::string> argv = {binary,
                                   "--name=fulcrum",
                                   "--data-dir=" + data_dir,
                                   "--listen-client-urls=" + client,
                                   "--advertise-client-urls=" + client,
                                   "--listen-peer-urls=" + peer,
                                   "--initial-advertise-peer-urls=" + peer,
                                   "--initial-cluster=fulcrum=" + peer,
                                   "--logger=zap",
                                   "--log-outputs=stderr",
                                   "--log-level=error"};
  if (tls.enabled()) {
    argv.insert(argv.end(), {"--cert-file=" + tls.cert, "--key-file=" + tls.key,
                             "--client-cert-auth", "--trusted-ca-file=" + tls.ca});
  }
  auto process = std::make_unique<Subprocess>(argv);
  const std::string endpoint = absl::StrCat("127.0.0.1:", ports[0]);
  std::vector<std::string> output;
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline && !process->Poll().has_value()) {
    // A new connection each time: one made before etcd serves can hang
    // in its handshake long after etcd is up.
    Etcd etcd(endpoint, MakeChannelCredentials(tls), absl::Milliseconds(500));
    const absl::Status probe = etcd.Get("/fulcrum-probe").status();
    if (probe.ok() || absl::IsNotFound(probe)) {
      return std::unique_ptr<LocalEtcd>(new LocalEtcd(endpoint, std::move(process)));
    }
    for (std::string& line : process->ReadLines(absl::Milliseconds(100))) {
      output.push_back(std::move(line));
    }
  }
  for (std::string& line : process->ReadLines()) output.push_back(std::move(line));
  if (output.size() > 20) output.erase(output.begin(), output.end() - 20);
  return absl::UnavailableError(absl::StrCat("etcd on ", endpoint, " did not come up within ",
                                             absl::FormatDuration(timeout), ":\n",
                                             absl::StrJoin(output, "\n")));
}

void LocalEtcd::Kill() { process_->Signal(SIGKILL); }

}  // namespace fulcrum
