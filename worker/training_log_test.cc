#include "worker/training_log.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/faulty_file_system.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A NaN loss, an infinite rate and a model name full of JSON's special
// characters still make JSON that parses back to the same record.
TEST(TrainingLogTest, OddValuesStillGiveValidJson) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  FaultyFileSystem fs;
  TrainingLog log(&fs, dir + "/metrics.jsonl", dir + "/summary.json");
  ASSERT_TRUE(log.StartAfresh().ok());
  ProgressRecord progress;
  progress.set_type("progress");
  progress.set_epoch(1);
  progress.set_step(12345678901.0);
  progress.set_train_loss(std::nan(""));
  progress.set_examples_per_sec(std::numeric_limits<double>::infinity());
  log.Append(progress);
  log.Append(progress);
  SummaryRecord summary;
  summary.set_model("mlp \"256,128\"\n\\ \t\x01 ünïcode");
  summary.set_test_loss(std::nan(""));
  summary.set_global_steps(374);
  ASSERT_TRUE(log.WriteSummary(summary).ok());

  std::istringstream lines(Read(dir + "/metrics.jsonl"));
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count) {
    ProgressRecord back;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(line, &back).ok()) << line;
    EXPECT_TRUE(std::isnan(back.train_loss()));
    EXPECT_TRUE(std::isinf(back.examples_per_sec()));
    EXPECT_EQ(back.step(), 12345678901.0);
    EXPECT_THAT(line, HasSubstr("\"step\":12345678901,"));  // a number, not a string
  }
  EXPECT_EQ(count, 2);
  const std::string text = Read(dir + "/summary.json");
  SummaryRecord back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(text, &back).ok()) << text;
  EXPECT_EQ(back.model(), summary.model());
  EXPECT_TRUE(std::isnan(back.test_loss()));
  EXPECT_THAT(text, HasSubstr("\"global_steps\": 374"));
}

// A resumed run appends to what it wrote before; a full disk ends the
// metrics, logged once, and the run goes on.
TEST(TrainingLogTest, AResumedRunAppendsAndAFullDiskStopsOnlyTheMetrics) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/resumed.jsonl";
  FaultyFileSystem fs;
  ProgressRecord progress;
  progress.set_type("progress");
  {
    TrainingLog first(&fs, path, "");
    ASSERT_TRUE(first.StartAfresh().ok());
    first.Append(progress);
  }
  TrainingLog resumed(&fs, path, "");
  resumed.Append(progress);
  const auto lines = [&] {
    const std::string text = Read(path);
    return std::count(text.begin(), text.end(), '\n');
  };
  EXPECT_EQ(lines(), 2);
  FaultyFileSystem::Faults full;
  full.disk_full_after_bytes = 0;
  fs.SetFaults(full);
  resumed.Append(progress);
  fs.SetFaults({});
  resumed.Append(progress);  // after a failure, no more lines
  EXPECT_EQ(lines(), 2);
}

TEST(TrainingLogTest, AnUnwritableSummaryIsNamed) {
  FaultyFileSystem fs;
  TrainingLog log(&fs, "", "/nonexistent-dir/summary.json");
  const absl::Status status = log.WriteSummary(SummaryRecord());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("cannot write --summary_json '/nonexistent-dir/summary.json'"));
}

}  // namespace
}  // namespace fulcrum
