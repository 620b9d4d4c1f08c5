// The status pages as a person sees them: headless Chromium (Debian's
// `chromium`) opens a real small cluster's pages, its processes run with
// mutual TLS (so a page is served to loopback only, where this test asks
// from). The screenshots are kept in the test's outputs
// (bazel-testlogs/tests/browser_test/test.outputs/outputs.zip).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/child_process.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

// Where the screenshots go: the test's undeclared outputs, else its tmp.
std::string OutputPath(const std::string& name) {
  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  return outputs != nullptr ? absl::StrCat(outputs, "/", name) : TempPath(name);
}

// Chromium, headless, asking nothing of the network beyond `url`.
std::vector<std::string> Chromium(const std::string& url, const std::string& what) {
  return {"/usr/bin/chromium",
          "--headless",
          "--no-sandbox",  // as root
          "--disable-gpu",
          "--disable-dev-shm-usage",
          "--no-first-run",
          "--no-default-browser-check",
          "--disable-background-networking",
          "--disable-component-update",
          "--disable-sync",
          "--user-data-dir=" + TempPath("chromium"),
          "--window-size=1280,1000",
          what,
          url};
}

// The DOM Chromium renders of `url`, after load; "" when it failed.
std::string Dom(const std::string& url) {
  ChildProcess browser("chromium", Chromium(url, "--dump-dom"));
  if (browser.Wait(absl::Seconds(60)) != 0) return "";
  return absl::StrJoin(browser.lines(), "\n");
}

// Saves Chromium's screenshot of `url` as `name` in the test's outputs.
bool Screenshot(const std::string& url, const std::string& name) {
  ChildProcess browser("chromium", Chromium(url, "--screenshot=" + OutputPath(name)));
  return browser.Wait(absl::Seconds(60)) == 0 && !ReadWholeFile(OutputPath(name)).empty();
}

// A server's page shows the cluster's workers and its shards; a worker
// killed (-9) mid-run shows as dead once its lease (3 s) has run out; the
// chief's page shows the job, its curves and a link to the server's. The
// processes are started by hand, with mutual TLS, as on a real cluster:
// the launcher would stop the job (or restart the worker) when one dies.
TEST(BrowserTest, AServersPageShowsItsWorkersAndShardsAndAWorkerKilled) {
  ASSERT_EQ(system("test -x /usr/bin/chromium"), 0)
      << "no /usr/bin/chromium: scripts/install_deps.sh installs it";
  const std::string certs = TempPath("certs");
  ASSERT_EQ(system(("scripts/make_certs.sh " + certs + " > /dev/null").c_str()), 0);
  auto tls = [&certs](const std::string& who) -> std::vector<std::string> {
    return {"--tls_cert=" + certs + "/" + who + ".pem", "--tls_key=" + certs + "/" + who + ".key",
            "--tls_ca=" + certs + "/ca.pem"};
  };
  const std::string worker_hosts = "--worker_hosts=127.0.0.1:1,127.0.0.1:2";
  std::vector<std::string> ps_argv = {RunfilePath("ps_server/ps_server"),
                                      "--ps_hosts=127.0.0.1:0",
                                      worker_hosts,
                                      "--task_index=0",
                                      "--port=0",
                                      "--bind_host=127.0.0.1",
                                      "--mode=async",
                                      "--lease_timeout_ms=3000",
                                      "--metrics_port=0"};
  for (const std::string& flag : tls("ps")) ps_argv.push_back(flag);
  ChildProcess ps("ps", ps_argv);
  const std::optional<int> port = WaitForPort(ps, "metrics on", absl::Seconds(30));
  const std::optional<int> data_port = WaitForPort(ps, "listening on", absl::Seconds(30));
  ASSERT_TRUE(port.has_value() && data_port.has_value());
  auto start_worker = [&](int index) {
    std::vector<std::string> argv = {
        RunfilePath("worker/worker"), absl::StrCat("--ps_hosts=127.0.0.1:", *data_port),
        worker_hosts, absl::StrCat("--task_index=", index), "--mode=async",
        "--epochs=10",  // longer than the test: stopped at its end
        // Steps slowed, so that 10 epochs outlast the
        // test however fast the machine (2 ms a step
        // otherwise: the chief once finished first).
        "--debug_step_delay_ms=5", "--hidden=64", "--log_every_steps=50", "--device=cpu",
        "--metrics_port=0"};
    for (const std::string& flag : tls(index == 0 ? "chief" : "worker")) argv.push_back(flag);
    return std::make_unique<ChildProcess>(absl::StrCat("worker", index), argv);
  };
  std::unique_ptr<ChildProcess> chief = start_worker(0);
  const std::optional<int> chief_port = WaitForPort(*chief, "metrics on", absl::Seconds(60));
  ASSERT_TRUE(chief_port.has_value());
  std::unique_ptr<ChildProcess> worker1 = start_worker(1);
  ASSERT_TRUE(worker1->WaitForLine("step 50/", absl::Seconds(120)));
  const std::string url = absl::StrCat("http://127.0.0.1:", *port, "/");

  const std::string running = Dom(url);
  EXPECT_THAT(running, HasSubstr("Fulcrum parameter server 0 of 1"));
  EXPECT_THAT(running, HasSubstr("mutual TLS"));
  EXPECT_THAT(running, HasSubstr("<td>0</td><td>live</td>"));
  EXPECT_THAT(running, HasSubstr("<td>1</td><td>live</td>"));
  EXPECT_THAT(running, HasSubstr("<td>dense_0/kernel</td>"));
  EXPECT_TRUE(Screenshot(url, "server-page-running.png"));

  worker1->Signal(SIGKILL);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::string after;
  while (absl::Now() < deadline) {  // each load takes a second or so
    after = Dom(url);
    if (after.find("<td>1</td><td class=\"alert\">dead</td>") != std::string::npos) break;
  }
  EXPECT_THAT(after, HasSubstr("<td>1</td><td class=\"alert\">dead</td>"));
  EXPECT_THAT(after, HasSubstr("<td>0</td><td>live</td>"));
  EXPECT_TRUE(Screenshot(url, "server-page-worker-dead.png"));

  // The chief's page, once it has evaluated its first epoch: where the job
  // is, its curves, the test set's accuracy, and a link to the server's.
  ASSERT_TRUE(chief->WaitForLine("epoch 1 test loss", absl::Seconds(120)));
  const std::string chief_url = absl::StrCat("http://127.0.0.1:", *chief_port, "/");
  const std::string job = Dom(chief_url);
  EXPECT_THAT(job, HasSubstr("Fulcrum worker 0 (chief)"));
  EXPECT_THAT(job, HasSubstr(" of 10 · step "));
  EXPECT_THAT(job, HasSubstr(">train loss</text>"));
  EXPECT_THAT(job, HasSubstr(">test accuracy</text>"));
  EXPECT_THAT(job, HasSubstr(absl::StrCat("<a href=\"", url, "\">")));
  EXPECT_TRUE(Screenshot(chief_url, "chief-page.png"));
  // Stopped as an operator stops a job, to resume it later.
  chief->Signal(SIGTERM);
  EXPECT_EQ(chief->Wait(absl::Seconds(60)), 0);
  ps.Signal(SIGTERM);
  EXPECT_EQ(ps.Wait(absl::Seconds(60)), 0);
}

}  // namespace
}  // namespace fulcrum
