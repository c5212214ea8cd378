// Per-thread scratch buffers for kernels (packing panels, temporaries): grown on
// demand, kept for the thread's lifetime, so repeated calls allocate nothing.
#include "backends/cpu/kernels/kernel_context.h"

#include "rlx/base/aligned_buffer.h"

namespace rlx::cpu {

void* thread_scratch(ScratchSlot slot, size_t bytes) {
  thread_local AlignedBuffer buffers[static_cast<int>(ScratchSlot::kCount)];
  AlignedBuffer& b = buffers[static_cast<int>(slot)];
  if (b.size() < bytes) {
    size_t grow = b.size() + b.size() / 2;
    b = AlignedBuffer(grow > bytes ? grow : bytes, 64);
  }
  return b.data();
}

}  // namespace rlx::cpu
