#include "common/logging.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <regex>
#include <sstream>

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
  }
  std::ostringstream out_;
};

TEST_F(LoggingTest, TextLinesCarryRoleAndIndex) {
  ASSERT_TRUE(InitLogging("ps", 3).ok());
  LOG_INFO("listening on {}", "127.0.0.1:1");
  EXPECT_THAT(out_.str(), HasSubstr("[ps:3] [info] listening on 127.0.0.1:1\n"));
}

TEST_F(LoggingTest, JsonLinesEscapeTheMessage) {
  ASSERT_TRUE(InitLogging("worker", 1, "json").ok());
  LOG_WARN("variable \"w\" at C:\\tmp\nnext");
  const std::string line = out_.str();
  EXPECT_TRUE(std::regex_match(
      line,
      std::regex(R"re(\{"time": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", "role": "worker", )re"
                 R"re("task": 1, "level": "warning", "message": "(.*)"\}\n)re")))
      << line;
  EXPECT_THAT(line, HasSubstr(R"(variable \"w\" at C:\\tmp\u000anext)"));
}

TEST_F(LoggingTest, UnknownFormatIsRefused) {
  EXPECT_THAT(InitLogging("ps", 0, "xml").message(), HasSubstr("--log_format: 'xml'"));
}

}  // namespace
}  // namespace fulcrum
