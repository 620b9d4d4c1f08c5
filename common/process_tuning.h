// Process-wide settings that the daemons and benchmarks make first in main,
// for speed: Debian's runtime libraries default to settings meant for other
// programs.
//
// Freed memory is kept for reuse instead of returned to the kernel. Tensors
// of a step are allocated and freed every step (protobuf bytes, gRPC
// buffers): by default glibc serves large ones with fresh mmaps, so every
// step pays page faults and page zeroing for each copy, which cost more than
// the copies themselves. Resident memory then stays at its peak, and one heap
// serves every thread, so that peak is one call's buffers.
//
// Optimised builds (NDEBUG) also skip Abseil's lock-order graph. Debian
// builds Abseil without NDEBUG, so by default every absl::Mutex lock records
// its order in one process-wide graph behind a global lock, to report
// potential deadlocks: 55-60 ns a lock and unlock here against 11-12 ns
// without. Debug builds, the tests', keep it.
#ifndef FULCRUM_COMMON_PROCESS_TUNING_H_
#define FULCRUM_COMMON_PROCESS_TUNING_H_

namespace fulcrum {

// Call first in main, before threads start.
void TuneProcess();

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_PROCESS_TUNING_H_
