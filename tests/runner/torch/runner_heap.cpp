// Linked into every test binary that trains or generates in its own
// process: the heap keeps freed tensor memory as tailor-runner's does
// (runner/torch/heap_policy.h), set before main, so that these tests meet
// the runner's memory behaviour and not glibc's default (runner_loss_test's
// 32k-vocabulary trainings spent 17 s of 74 s of CPU in the kernel
// faulting fresh pages for its logits without it, 5 s with it).
#include "runner/torch/heap_policy.h"

namespace {

const bool kRunnerHeap = (tailor::runner::keep_freed_memory(), true);

}  // namespace
