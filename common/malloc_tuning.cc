#include "common/malloc_tuning.h"

#include <malloc.h>

#include <limits>

namespace fulcrum {

void KeepFreedMemoryForReuse() {
  mallopt(M_MMAP_MAX, 0);  // every block from the heaps, none mapped afresh
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());  // heaps never shrink
}

}  // namespace fulcrum
