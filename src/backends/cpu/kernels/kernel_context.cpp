// Per-thread scratch buffers for kernels (packing panels, temporaries): grown on
// demand, kept for the thread's lifetime, so repeated calls allocate nothing.
#include "backends/cpu/kernels/kernel_context.h"

#include <atomic>

#include "rlx/base/aligned_buffer.h"

namespace rlx::cpu {
namespace {

constexpr int kSlots = static_cast<int>(ScratchSlot::kCount);
std::atomic<size_t> g_high_water[kSlots];  // the largest buffer any thread holds, per slot
std::atomic<uint64_t> g_raises{0};

AlignedBuffer* thread_buffers() {
  thread_local AlignedBuffer buffers[kSlots];
  return buffers;
}

// Grows `b` to at least `bytes` (by half again at least, so a slowly rising need does
// not reallocate every time) and raises the slot's high-water mark to its size.
void grow(AlignedBuffer& b, int slot, size_t bytes) {
  const size_t half_again = b.size() + b.size() / 2;
  b = AlignedBuffer(half_again > bytes ? half_again : bytes, 64);
  size_t high = g_high_water[slot].load(std::memory_order_relaxed);
  while (high < b.size() && !g_high_water[slot].compare_exchange_weak(high, b.size(), std::memory_order_relaxed)) {
  }
  if (high < b.size()) g_raises.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

void* thread_scratch(ScratchSlot slot, size_t bytes) {
  const int i = static_cast<int>(slot);
  AlignedBuffer& b = thread_buffers()[i];
  if (b.size() < bytes) grow(b, i, bytes);
  return b.data();
}

uint64_t thread_scratch_raises() { return g_raises.load(std::memory_order_relaxed); }

void thread_scratch_catch_up() {
  thread_local uint64_t caught_up_at = 0;  // g_raises when this thread last grew to the marks
  const uint64_t raises = g_raises.load(std::memory_order_relaxed);
  if (caught_up_at == raises) return;
  AlignedBuffer* buffers = thread_buffers();
  for (int i = 0; i < kSlots; ++i) {
    const size_t high = g_high_water[i].load(std::memory_order_relaxed);
    if (buffers[i].size() < high) buffers[i] = AlignedBuffer(high, 64);
  }
  caught_up_at = raises;
}

}  // namespace rlx::cpu
