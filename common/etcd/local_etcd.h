// A single-member etcd on 127.0.0.1, started as a child process with ports
// of its own and its data in a given directory: what the local launcher
// and the tests run the coordination on. Served over mutual TLS, as the
// servers that use it talk, or in plaintext. Stopped when destroyed.
#ifndef FULCRUM_COMMON_ETCD_LOCAL_ETCD_H_
#define FULCRUM_COMMON_ETCD_LOCAL_ETCD_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/rpc/credentials.h"
#include "common/subprocess.h"

namespace fulcrum {

class LocalEtcd {
 public:
  // Starts `binary` (default: etcd on PATH, as Debian's etcd-server
  // installs it) with its data in `data_dir`, and waits (until `timeout`)
  // until it answers. With `tls` enabled (files that pass CheckTlsFiles),
  // it serves mutual TLS: it presents `tls.cert` and takes only clients
  // whose certificate `tls.ca` signed (it checks itself with its own);
  // else plaintext. FAILED_PRECONDITION naming the package when there is
  // no such program; UNAVAILABLE with its last output when it does not
  // come up.
  static absl::StatusOr<std::unique_ptr<LocalEtcd>> Start(
      const std::string& data_dir, const TlsFiles& tls = {}, const std::string& binary = "etcd",
      absl::Duration timeout = absl::Seconds(30));

  // "127.0.0.1:port", for Etcd.
  const std::string& endpoint() const { return endpoint_; }
  // Kills it (-9): the coordination service lost.
  void Kill();

 private:
  LocalEtcd(std::string endpoint, std::unique_ptr<Subprocess> process)
      : endpoint_(std::move(endpoint)), process_(std::move(process)) {}

  std::string endpoint_;
  std::unique_ptr<Subprocess> process_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_ETCD_LOCAL_ETCD_H_
