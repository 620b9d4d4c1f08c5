// The exactness check of replicated shards as a program of its own, for
// tests whose servers run on other hosts (tests:multihost_test cuts one off
// with nftables): four workers push ones to w (6 shards) over the servers
// of --ps_hosts until SIGTERM, then every element must be exactly minus
// its worker's acknowledged pushes. Prints "pushing" once each worker has
// 10 acknowledged, and at the end the counts and "exact" (exit 0) or what
// differs (exit 1).
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/consistency_mode.h"
#include "fulcrum/grpc_ps_client.h"
#include "tests/pushers.h"

ABSL_FLAG(std::string, ps_hosts, "", "The servers, host:port,... (their --worker_hosts: 4).");
ABSL_FLAG(std::string, mode, "async", "The servers' --mode (ssp needs --staleness=1).");
ABSL_FLAG(std::string, tls_cert, "", "Mutual TLS: the workers' certificate.");
ABSL_FLAG(std::string, tls_key, "", "Mutual TLS: its key.");
ABSL_FLAG(std::string, tls_ca, "", "Mutual TLS: the CA.");

namespace fulcrum {
namespace {

int Run() {
  absl::StatusOr<ConsistencyMode> mode = ParseConsistencyMode(absl::GetFlag(FLAGS_mode));
  const std::vector<std::string> hosts =
      absl::StrSplit(absl::GetFlag(FLAGS_ps_hosts), ',', absl::SkipEmpty());
  if (!mode.ok() || hosts.empty()) {
    std::fprintf(stderr, "exactness_pusher: give --ps_hosts and a valid --mode\n");
    return 2;
  }
  // SIGTERM ends the pushing, taken by sigwait below: blocked in every thread.
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, nullptr);

  std::vector<std::unique_ptr<PsClient>> workers;
  for (int w = 0; w < Pushers::kWorkers; ++w) {
    PsClientOptions options;
    options.worker_id = w;
    options.mode = *mode;
    options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
    options.tls_key = absl::GetFlag(FLAGS_tls_key);
    options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
    workers.push_back(NewGrpcPsClient(hosts, options));
    if (absl::Status s = workers.back()->CreateVariables({Ones(6)}); !s.ok()) {
      std::fprintf(stderr, "exactness_pusher: worker %d: %s\n", w, s.ToString().c_str());
      return 1;
    }
  }
  Pushers pushers(&workers, *mode, 0, /*until_stopped=*/true);
  if (pushers.AwaitEach(10, absl::Minutes(2))) std::printf("pushing\n");
  std::fflush(stdout);
  int signal = 0;
  sigwait(&term, &signal);
  pushers.Stop();
  pushers.Join();
  std::printf("acknowledged pushes by worker: %s\n",
              absl::StrJoin(pushers.acknowledged(), ", ").c_str());
  bool exact = true;
  for (int w = 0; w < Pushers::kWorkers; ++w) {
    if (!pushers.failed()[w].ok()) {
      std::printf("worker %d failed: %s\n", w, pushers.failed()[w].ToString().c_str());
      exact = false;
    }
  }
  for (const std::string& stale : pushers.too_stale())
    std::printf("too stale: %s\n", stale.c_str());
  const ::testing::AssertionResult applied =
      EachPushAppliedOnce(*workers[0], *mode, pushers.acknowledged());
  if (!applied) std::printf("not exact: %s\n", applied.message());
  exact = exact && applied && pushers.too_stale().empty();
  if (exact) std::printf("exact: every element is minus its worker's acknowledged pushes\n");
  return exact ? 0 : 1;
}

}  // namespace
}  // namespace fulcrum

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Pushes ones from four workers until SIGTERM, then checks that every push acknowledged "
      "was applied exactly once.");
  absl::ParseCommandLine(argc, argv);
  return fulcrum::Run();
}
