// Keeps the process's freed memory for reuse instead of returning it to the
// kernel. Tensors of a step are allocated and freed every step (protobuf
// bytes, gRPC buffers): by default glibc serves large ones with fresh mmaps,
// so every step pays page faults and page zeroing for each copy, which cost
// more than the copies themselves. Resident memory then stays at its peak,
// and one heap serves every thread, so that peak is one call's buffers.
#ifndef FULCRUM_COMMON_MALLOC_TUNING_H_
#define FULCRUM_COMMON_MALLOC_TUNING_H_

namespace fulcrum {

// Call first in main, before threads start.
void KeepFreedMemoryForReuse();

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_MALLOC_TUNING_H_
