#include "runner/torch/heap_policy.h"

#include <malloc.h>

namespace tailor::runner {

void keep_freed_memory() {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
}

}  // namespace tailor::runner
