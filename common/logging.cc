#include "common/logging.h"

#include <cstdlib>
#include <string>

namespace fulcrum {

void InitLogging(absl::string_view role, int task_index) {
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [" + std::string(role) + ":" +
                      std::to_string(task_index) + "] [%l] %v");
  spdlog::flush_on(spdlog::level::info);
}

void CheckFailed(const char* file, int line, const char* message) {
  spdlog::critical("{}:{}: {}", file, line, message);
  spdlog::shutdown();
  std::abort();
}

}  // namespace fulcrum
