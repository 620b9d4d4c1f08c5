#include "common/memory_size.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace fulcrum {
namespace {

// The number in `path` ("max" or a missing file: no limit).
int64_t LimitIn(const char* path) {
  std::ifstream file(path);
  std::string text;
  if (!(file >> text) || text == "max") return std::numeric_limits<int64_t>::max();
  int64_t limit = 0;
  return absl::SimpleAtoi(text, &limit) && limit > 0 ? limit : std::numeric_limits<int64_t>::max();
}

}  // namespace

int64_t UsableMemoryBytes() {
  const int64_t physical = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  return std::min({physical, LimitIn("/sys/fs/cgroup/memory.max"),
                   LimitIn("/sys/fs/cgroup/memory/memory.limit_in_bytes")});
}

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  for (; value >= 1024 && unit + 1 < 5; ++unit) value /= 1024;
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

}  // namespace fulcrum
