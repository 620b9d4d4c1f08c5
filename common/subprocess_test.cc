#include "common/subprocess.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"

namespace fulcrum {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Every line until the output ends, and the exit code.
std::pair<std::vector<std::string>, int> RunToEnd(Subprocess& process) {
  std::vector<std::string> lines;
  while (process.output_fd() >= 0) {
    for (std::string& line : process.ReadLines(absl::Seconds(10))) lines.push_back(line);
  }
  std::optional<int> code;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!(code = process.Poll()) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  return {lines, code.value_or(-1)};
}

TEST(SubprocessTest, ReadsBothStreamsAsLinesWithItsEnvironment) {
  Subprocess process({"sh", "-c", "echo one; echo \"$GREETING\" >&2; printf 'no newline'; exit 3"},
                     SubprocessOptions{{"GREETING=two"}});
  auto [lines, code] = RunToEnd(process);
  EXPECT_THAT(lines, ElementsAre("one", "two", "no newline"));
  EXPECT_EQ(code, 3);
}

TEST(SubprocessTest, SaysWhenAProgramCannotRun) {
  Subprocess process({"/nonexistent/program"});
  auto [lines, code] = RunToEnd(process);
  ASSERT_EQ(lines.size(), 1u) << ::testing::PrintToString(lines);
  EXPECT_THAT(lines[0], HasSubstr("cannot run /nonexistent/program"));
  EXPECT_EQ(code, 127);
}

TEST(SubprocessTest, InterruptsAreIgnoredWhenAsked) {
  const std::vector<std::string> interrupts_itself = {"sh", "-c", "kill -INT $$; echo survived"};
  Subprocess ignoring(interrupts_itself, SubprocessOptions{{}, true});
  EXPECT_EQ(RunToEnd(ignoring), std::make_pair(std::vector<std::string>{"survived"}, 0));
  Subprocess plain(interrupts_itself);
  EXPECT_EQ(RunToEnd(plain).second, 128 + SIGINT);
}

TEST(SubprocessTest, ASignalledProcessSaysWhichSignal) {
  Subprocess process({"sh", "-c", "echo ready; exec sleep 30"});
  ASSERT_THAT(process.ReadLines(absl::Seconds(10)), ElementsAre("ready"));
  process.Signal(SIGTERM);
  EXPECT_EQ(RunToEnd(process).second, 128 + SIGTERM);
}

}  // namespace
}  // namespace fulcrum
