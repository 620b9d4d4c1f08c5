// The CPU backend: OpenBLAS SGEMM (multithreaded) and vectorised loops for
// the elementwise math. Thread-compatible.
#ifndef FULCRUM_WORKER_CPU_CPU_DEVICE_H_
#define FULCRUM_WORKER_CPU_CPU_DEVICE_H_

#include <memory>

#include "worker/device.h"

namespace fulcrum {

// A CPU device whose GEMMs use `blas_threads` threads (OpenBLAS's count is
// process-wide: the last device made sets it).
std::unique_ptr<Device> MakeCpuDevice(int blas_threads);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_CPU_CPU_DEVICE_H_
