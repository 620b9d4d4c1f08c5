// fulcrumctl against real servers: status, variables, checkpoint, stop, the
// health probe, and top in a terminal (tmux).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint/directory.h"
#include "fulcrum/grpc_ps_client.h"
#include "fulcrum/ps_client.h"
#include "tests/child_process.h"

namespace fulcrum {
namespace {

// Server `index` of two, on a port it picks: its address in *address.
std::unique_ptr<ChildProcess> StartPs(int index, const std::string& checkpoint_dir,
                                      std::string* address) {
  auto ps = std::make_unique<ChildProcess>(
      absl::StrCat("ps", index),
      std::vector<std::string>{RunfilePath("ps_server/ps_server"),
                               "--ps_hosts=127.0.0.1:0,127.0.0.1:0", "--worker_hosts=127.0.0.1:1",
                               absl::StrCat("--task_index=", index), "--port=0",
                               "--bind_host=127.0.0.1", "--insecure",
                               "--checkpoint_dir=" + checkpoint_dir, "--log_format=json"});
  const std::optional<int> port = WaitForPort(*ps, "listening on", absl::Seconds(30));
  EXPECT_TRUE(port.has_value());
  *address = absl::StrCat("127.0.0.1:", port.value_or(0));
  return ps;
}

// Runs fulcrumctl to completion; its exit code.
int Ctl(std::vector<std::string> args, std::unique_ptr<ChildProcess>* out) {
  args.insert(args.begin(), {RunfilePath("deploy/fulcrumctl"), "--insecure"});
  *out = std::make_unique<ChildProcess>("fulcrumctl", args);
  return (*out)->Wait(absl::Seconds(60)).value_or(-1);
}

TEST(FulcrumctlTest, StatusVariablesCheckpointStopAndHealth) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/checkpoints");
  std::vector<std::string> addresses(2);
  auto ps0 = StartPs(0, dir, &addresses[0]);
  auto ps1 = StartPs(1, dir, &addresses[1]);
  const std::string ps_hosts = absl::StrJoin(addresses, ",");
  // The servers log JSON, one object a line.
  EXPECT_TRUE(ps0->WaitForLine(R"({"time": )", absl::Seconds(1)));
  EXPECT_TRUE(ps0->HasLine(R"("role": "ps", "task": 0, "level": "info")"));

  PsClientOptions options;
  auto client = NewGrpcPsClient(addresses, options);
  VariableSpec spec;
  spec.set_name("embedding");
  spec.add_shape(10);
  spec.add_shape(4);
  spec.set_dtype(DT_FLOAT);
  spec.mutable_partitioner()->set_kind(PartitionerSpec::FIXED_SHARDS);
  spec.mutable_partitioner()->set_num_shards(2);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  ASSERT_TRUE(client->CreateVariables({spec}).ok());
  ASSERT_TRUE(client->Push({{"embedding", DenseTensor{{10, 4}, std::vector<float>(40, 1)}}}).ok());

  std::unique_ptr<ChildProcess> ctl;
  ASSERT_EQ(Ctl({"status", "--ps_hosts=" + ps_hosts}, &ctl), 0);
  EXPECT_TRUE(ctl->HasLine("health SERVING  mode async"));
  // 5 x 4 floats on each server, with SGD: no slots; and the shard's spec
  // and overhead.
  std::smatch memory;
  const std::regex memory_line("memory (\\d+) B of ");
  const auto line = std::find_if(ctl->lines().begin(), ctl->lines().end(), [&](const auto& l) {
    return std::regex_search(l, memory, memory_line);
  });
  ASSERT_NE(line, ctl->lines().end());
  EXPECT_GT(std::stoi(memory[1]), 80 + 512);
  EXPECT_LT(std::stoi(memory[1]), 80 + 512 + 256);
  EXPECT_TRUE(ctl->HasLine("shard embedding/1 of 2  shape [5, 4]  version 1"));
  EXPECT_TRUE(ctl->HasLine("worker 0  live  clock 0"));

  // A table bounded to 3 rows a server: each keeps 3 of the 20 pushed.
  EmbeddingTableSpec table;
  table.set_name("ads");
  table.set_width(8);
  table.set_max_rows(3);
  table.mutable_optimizer()->set_learning_rate(0.1f);
  ASSERT_TRUE(client->CreateTables({table}).ok());
  std::vector<int64_t> ids(20);
  for (int64_t i = 0; i < 20; ++i) ids[i] = i;
  ASSERT_TRUE(client->PushRows({{"ads", ids}}, {std::vector<float>(size_t{20} * 8, 1.0f)}).ok());
  ASSERT_EQ(Ctl({"status", "--ps_hosts=" + ps_hosts}, &ctl), 0);
  EXPECT_TRUE(ctl->HasLine("table ads range 0  width 8  rows 3 of 3"));

  ASSERT_EQ(Ctl({"tables", "--ps_hosts=" + ps_hosts}, &ctl), 0);
  std::smatch table_line;
  const std::regex sums("ads\\s+8\\s+6\\s+0\\s+(\\d+)\\s+0");
  const auto found = std::find_if(ctl->lines().begin(), ctl->lines().end(), [&](const auto& l) {
    return std::regex_search(l, table_line, sums);
  });
  ASSERT_NE(found, ctl->lines().end());
  EXPECT_EQ(std::stoi(table_line[1]), 14);  // 20 rows, 6 kept

  ASSERT_EQ(Ctl({"variables", "--ps_hosts=" + ps_hosts}, &ctl), 0);
  EXPECT_TRUE(ctl->HasLine("[10, 4]"));
  EXPECT_TRUE(ctl->HasLine("0@ps0 v1, 1@ps1 v1"));

  ASSERT_EQ(Ctl({"checkpoint", "--ps_hosts=" + ps_hosts, "--checkpoint_dir=" + dir}, &ctl), 0);
  EXPECT_TRUE(ctl->HasLine("checkpoint 1 complete"));
  auto fs = MakeLocalFileSystem();
  std::vector<std::string> problems;
  auto loaded = LoadNewestCheckpoint(
      *fs, dir, [](const CheckpointFiles&) { return absl::OkStatus(); }, &problems);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->size(), 2u);

  ASSERT_EQ(Ctl({"health", "--address=" + addresses[0]}, &ctl), 0);
  EXPECT_TRUE(ctl->HasLine("SERVING"));

  ASSERT_EQ(Ctl({"stop", "--ps_hosts=" + ps_hosts}, &ctl), 0);
  ASSERT_TRUE(client->Finish().ok());  // the last worker: the servers may go
  client.reset();
  EXPECT_EQ(ps0->Wait(absl::Seconds(30)), 0);
  EXPECT_EQ(ps1->Wait(absl::Seconds(30)), 0);
  EXPECT_EQ(Ctl({"health", "--address=" + addresses[0], "--timeout_secs=1"}, &ctl), 1);
  EXPECT_TRUE(ctl->HasLine("UNREACHABLE"));

  EXPECT_EQ(Ctl({"frobnicate", "--ps_hosts=" + ps_hosts}, &ctl), 2);
  EXPECT_TRUE(ctl->HasLine("unknown command 'frobnicate'"));
}

// A tmux command on a server of the test's own; its exit code, and what it
// printed in *out when given. Its socket is in a directory of /tmp made for
// it: the test's tmp path is longer than a socket's path may be.
const std::string& TmuxDir() {
  static const std::string dir = [] {
    std::string made = "/tmp/fulcrumctl-tmux-XXXXXX";
    EXPECT_NE(mkdtemp(made.data()), nullptr) << "cannot make " << made;
    return made;
  }();
  return dir;
}

int Tmux(const std::string& args, std::string* out = nullptr) {
  const std::string command = absl::StrCat("tmux -S ", TmuxDir(), "/socket ", args);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  std::string text;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) text.append(buffer, n);
  const int status = pclose(pipe);
  if (out != nullptr) *out = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// fulcrumctl top in a terminal, as a person runs it: it draws the server
// and the worker, redraws them in place with rates, and q quits.
TEST(FulcrumctlTest, TopRunsInATerminalAndQuitsOnQ) {
  ASSERT_EQ(system("command -v tmux > /dev/null"), 0)
      << "no tmux: scripts/install_deps.sh installs it";
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/checkpoints");
  std::string address;
  auto ps = StartPs(0, dir, &address);
  PsClientOptions options;
  options.worker_id = 0;
  auto client = NewGrpcPsClient({address}, options);
  VariableSpec spec;
  spec.set_name("w");
  spec.add_shape(8);
  spec.set_dtype(DT_FLOAT);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  ASSERT_TRUE(client->CreateVariables({spec}).ok());
  ASSERT_TRUE(client->Push({{"w", DenseTensor{{8}, std::vector<float>(8, 1)}}}).ok());

  ASSERT_EQ(
      Tmux(absl::StrCat("new-session -d -x 120 -y 30 -s top '", RunfilePath("deploy/fulcrumctl"),
                        " --insecure top --ps_hosts=", address, " --interval_secs=0.3'")),
      0);
  std::string screen;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool drawn = false;
  while (!drawn && absl::Now() < deadline) {
    Tmux("capture-pane -p -t top", &screen);
    // Redrawn at least once: the second sample has rates.
    drawn = screen.find(address + "              1       0        0.0") != std::string::npos;
    if (!drawn) absl::SleepFor(absl::Milliseconds(100));  // polls the terminal's contents
  }
  EXPECT_TRUE(drawn) << screen;
  EXPECT_THAT(screen, ::testing::HasSubstr("fulcrumctl top: 1 server(s), mode async, 1 of 1"));
  EXPECT_THAT(screen, ::testing::HasSubstr("0        live"));
  EXPECT_THAT(screen, ::testing::HasSubstr("q quits"));
  ASSERT_EQ(Tmux("send-keys -t top q"), 0);
  bool ended = false;
  for (const absl::Time end = absl::Now() + absl::Seconds(10); !ended && absl::Now() < end;) {
    ended = Tmux("has-session -t top 2> /dev/null") != 0;
    if (!ended) absl::SleepFor(absl::Milliseconds(100));  // polls tmux
  }
  EXPECT_TRUE(ended) << "top did not quit on q";
  Tmux("kill-server 2> /dev/null");
  std::system(absl::StrCat("rm -rf '", TmuxDir(), "'").c_str());  // /tmp/fulcrumctl-tmux-*
}

}  // namespace
}  // namespace fulcrum
