#include "common/logging.h"

#include <spdlog/pattern_formatter.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/json_escape.h"

namespace fulcrum {
namespace {

// %j: the message as a JSON string body (quotes, backslashes and control
// characters escaped).
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string escaped =
        JsonEscape(absl::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

}  // namespace

absl::Status InitLogging(absl::string_view role, int task_index, absl::string_view format) {
  const std::string who = absl::StrCat(role, ":", task_index);
  if (format == "text") {
    spdlog::set_pattern(absl::StrCat("[%Y-%m-%d %H:%M:%S.%e] [", who, "] [%l] %v"));
  } else if (format == "json") {
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonMessageFlag>('j').set_pattern(
        absl::StrCat(R"({"time": "%Y-%m-%dT%H:%M:%S.%eZ", "role": ")", role, R"(", "task": )",
                     task_index, R"(, "level": "%l", "message": "%j"})"));
    spdlog::set_formatter(std::move(formatter));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_format: '", format, "' is not one of text, json"));
  }
  spdlog::flush_on(spdlog::level::info);
  return absl::OkStatus();
}

void CheckFailed(const char* file, int line, const char* message) {
  spdlog::critical("{}:{}: {}", file, line, message);
  spdlog::shutdown();
  std::abort();
}

}  // namespace fulcrum
