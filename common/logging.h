// Logging facade over spdlog, and CHECK for programmer invariants.
//
// Libraries log through the LOG_* macros; each daemon's main calls
// InitLogging once so every line carries its role and task index.
// Thread-safe.
#ifndef FULCRUM_COMMON_LOGGING_H_
#define FULCRUM_COMMON_LOGGING_H_

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

// Lets LOG_* format absl::string_view (Debian's Abseil does not alias
// std::string_view) and absl::Status.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

template <>
struct fmt::formatter<absl::Status> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(const absl::Status& status, Context& ctx) const {
    const std::string text = status.ToString();
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(text), ctx);
  }
};

namespace fulcrum {

// Sets the process-wide log format to carry `role` and `task_index`, one
// line per event. "text":
//   [2026-11-29 20:30:00.123] [ps:1] [info] listening on 127.0.0.1:4000
// "json" (for log shippers):
//   {"time": "2026-11-29T20:30:00.123Z", "role": "ps", "task": 1, "level": "info",
//    "message": "listening on 127.0.0.1:4000"}
// INVALID_ARGUMENT for another format.
absl::Status InitLogging(absl::string_view role, int task_index, absl::string_view format = "text");

// Logs `message` at critical level with its source location and aborts.
[[noreturn]] void CheckFailed(const char* file, int line, const char* message);

}  // namespace fulcrum

#define LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)

// Aborts when `condition` is false. Only for invariants of this program;
// anything a peer, a file or a user sent gets an absl::Status instead.
#define CHECK(condition)                                                       \
  do {                                                                         \
    if (!(condition)) {                                                        \
      ::fulcrum::CheckFailed(__FILE__, __LINE__, "CHECK failed: " #condition); \
    }                                                                          \
  } while (false)

#endif  // FULCRUM_COMMON_LOGGING_H_
