// AlignedBuffer: aligned, zero-initialised heap storage.
#include "rlx/base/aligned_buffer.h"

#include <cstdlib>
#include <new>

#include "rlx/base/status.h"

namespace rlx {

AlignedBuffer::AlignedBuffer(size_t size, size_t alignment) : size_(size), alignment_(alignment) {
  RLX_ASSERT(alignment >= alignof(std::max_align_t) && (alignment & (alignment - 1)) == 0);
  if (size == 0) return;
  data_ = static_cast<uint8_t*>(::operator new(align_up(size, alignment), std::align_val_t(alignment)));
  std::memset(data_, 0, size);
}

AlignedBuffer::~AlignedBuffer() {
  if (data_) ::operator delete(data_, std::align_val_t(alignment_));
}

}  // namespace rlx
