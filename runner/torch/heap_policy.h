// How the process' heap treats freed memory while it trains or generates.
// tailor-runner sets it first thing; so do the test binaries that train in
// their own process, so that they run as the runner does.
#pragma once

namespace tailor::runner {

// Keeps freed tensor memory in the process' heap. By default glibc serves
// large blocks with fresh mmap()s and unmaps them on free, so every step
// pays the kernel's page faults again for each activation-sized tensor
// (~0.4 ms per MiB here, docs/libtorch.md); a training loop allocates the
// same sizes every step, so reuse is the right trade (RSS stays at the
// peak).
void keep_freed_memory();

}  // namespace tailor::runner
