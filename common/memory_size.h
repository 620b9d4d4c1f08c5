// Memory sizes: how much this process may use, and sizes for people.
// Thread-safe.
#ifndef FULCRUM_COMMON_MEMORY_SIZE_H_
#define FULCRUM_COMMON_MEMORY_SIZE_H_

#include <cstdint>
#include <string>

namespace fulcrum {

// The machine's physical memory, or less where a container's memory limit
// (cgroup v2 or v1) says so.
int64_t UsableMemoryBytes();

// "512 B", "1.5 KiB", "2.4 GiB".
std::string FormatBytes(int64_t bytes);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_MEMORY_SIZE_H_
