#include "common/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_split.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The "pid" of the process named `process`, from its process_name event.
std::string PidOf(const std::vector<std::string>& lines, const std::string& process) {
  for (const std::string& line : lines) {
    if (line.find("process_name") == std::string::npos ||
        line.find("\"" + process + "\"") == std::string::npos) {
      continue;
    }
    const size_t at = line.find("\"pid\": ") + 7;
    return line.substr(at, line.find(',', at) - at);
  }
  return "";
}

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

TEST(TraceFileTest, WritesSpansAndFlowsOneEventALine) {
  const std::string path = TempPath("worker.json");
  {
    auto trace = TraceFile::Open(path, "worker 1");
    ASSERT_TRUE(trace.ok()) << trace.status();
    EXPECT_FALSE((*trace)->recording());
    (*trace)->SetRecording(true);
    EXPECT_TRUE((*trace)->recording());
    const absl::Time t = absl::FromUnixMicros(1'000'000);
    (*trace)->Add({"step", "compute", t, t + absl::Microseconds(250), {{"step", "3"}}});
    (*trace)->Add({"ps 0",
                   "push-pull \"big\"",
                   t + absl::Microseconds(300),
                   t + absl::Microseconds(900),
                   {},
                   TraceSpan::kFrom,
                   FlowId(0xabc, 0)});
    (*trace)->Add({"step", "exchange", t + absl::Microseconds(250), t + absl::Microseconds(1000)});
    // Open: a process killed now leaves every span written.
    const std::string so_far = Read(path);
    EXPECT_THAT(so_far, HasSubstr("\"ts\": 1000300, \"dur\": 600"));
    EXPECT_THAT(so_far, Not(HasSubstr("\n]")));
  }
  const std::vector<std::string> lines = absl::StrSplit(Read(path), '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines.front(), "[");
  EXPECT_EQ(lines.back(), "]");
  EXPECT_THAT(lines[1], HasSubstr("\"process_name\""));
  EXPECT_THAT(lines[1], HasSubstr("\"worker 1\""));
  for (size_t i = 2; i + 1 < lines.size(); ++i) EXPECT_THAT(lines[i], StartsWith(",{"));
  const std::string text = Read(path);
  // Two tracks, named once each; the quote escaped; the flow's start.
  EXPECT_THAT(text, HasSubstr("\"args\": {\"name\": \"step\"}"));
  EXPECT_THAT(text, HasSubstr("\"args\": {\"name\": \"ps 0\"}"));
  EXPECT_EQ(text.find("\"name\": \"step\"}"), text.rfind("\"name\": \"step\"}"));
  EXPECT_THAT(text, HasSubstr("push-pull \\\"big\\\""));
  EXPECT_THAT(text, HasSubstr("\"ph\": \"s\", \"bp\": \"e\", \"id\": \"abc:0\", \"ts\": 1000300"));
  EXPECT_THAT(text, HasSubstr("\"args\": {\"step\": \"3\"}"));
}

TEST(TraceFileTest, MergesFilesIntoOneArrayKeepingTheirProcessesApart) {
  const std::string worker = TempPath("w.json"), server = TempPath("s.json");
  const absl::Time t = absl::FromUnixMicros(5'000'000);
  auto server_trace = TraceFile::Open(server, "ps 0");  // left open, as if killed
  ASSERT_TRUE(server_trace.ok());
  (*server_trace)
      ->Add({"worker 1",
             "push-pull",
             t + absl::Microseconds(10),
             t + absl::Microseconds(20),
             {},
             TraceSpan::kTo,
             FlowId(7, 0)});
  {
    auto worker_trace = TraceFile::Open(worker, "worker 1");
    ASSERT_TRUE(worker_trace.ok());
    (*worker_trace)
        ->Add({"ps 0",
               "push-pull",
               t,
               t + absl::Microseconds(30),
               {},
               TraceSpan::kFrom,
               FlowId(7, 0)});
  }
  const std::string merged = TempPath("job.json");
  ASSERT_TRUE(MergeTraces({worker, server}, merged).ok());
  const std::string text = Read(merged);
  const std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.front(), "[");
  EXPECT_EQ(lines.back(), "]");
  EXPECT_THAT(lines[1], StartsWith("{"));  // no comma before the first event
  EXPECT_THAT(text, HasSubstr("\"name\": \"worker 1\""));
  EXPECT_THAT(text, HasSubstr("\"name\": \"ps 0\""));
  EXPECT_THAT(text, HasSubstr("\"ph\": \"f\", \"bp\": \"e\", \"id\": \"7:0\""));
  EXPECT_THAT(text, HasSubstr("\"ph\": \"s\", \"bp\": \"e\", \"id\": \"7:0\""));
  // Two processes, two ids.
  EXPECT_NE(PidOf(lines, "worker 1"), PidOf(lines, "ps 0"));
  EXPECT_NE(PidOf(lines, "ps 0"), "");
}

TEST(TraceFileTest, RefusesWhatIsNotATraceAndUnwritablePaths) {
  const std::string bad = TempPath("bad.json");
  std::ofstream(bad) << "{\"traceEvents\": []}\n";
  const absl::Status merged = MergeTraces({bad}, TempPath("out.json"));
  EXPECT_EQ(merged.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(merged.message(), HasSubstr(bad));
  EXPECT_EQ(MergeTraces({TempPath("missing.json")}, TempPath("out.json")).code(),
            absl::StatusCode::kNotFound);
  auto unwritable = TraceFile::Open("/nonexistent/dir/t.json", "ps 0");
  EXPECT_EQ(unwritable.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unwritable.status().message(), HasSubstr("/nonexistent/dir/t.json"));
}

}  // namespace
}  // namespace fulcrum
