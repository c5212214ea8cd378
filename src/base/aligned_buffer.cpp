// AlignedBuffer: aligned, zero-initialised storage (heap, or an anonymous mapping for
// large buffers); and ByteView's page release for views of read-only file mappings.
#include "rlx/base/aligned_buffer.h"

#include "rlx/base/byte_view.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <new>

#include "rlx/base/status.h"

namespace rlx {

AlignedBuffer::AlignedBuffer(size_t size, size_t alignment) : size_(size), alignment_(alignment) {
  RLX_ASSERT(alignment >= alignof(std::max_align_t) && (alignment & (alignment - 1)) == 0);
  if (size == 0) return;
  constexpr size_t kPage = 4096;
  if (size >= kMapThreshold && alignment <= kPage) {
    void* p = ::mmap(nullptr, align_up(size, kPage), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
#ifdef MADV_HUGEPAGE
      (void)::madvise(p, align_up(size, kPage), MADV_HUGEPAGE);  // a hint; failure is harmless
#endif
      data_ = static_cast<uint8_t*>(p);
      mapped_ = true;
      return;
    }
  }
  data_ = static_cast<uint8_t*>(::operator new(align_up(size, alignment), std::align_val_t(alignment)));
  std::memset(data_, 0, size);
}

void ByteView::release_pages(size_t offset, size_t len) const {
  if (!file_pages_ || offset >= size_) return;
  len = std::min(len, size_ - offset);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  const size_t page = page_size > 0 ? static_cast<size_t>(page_size) : 4096;
  const auto begin = align_up(reinterpret_cast<uintptr_t>(data_ + offset), page);
  const auto end = (reinterpret_cast<uintptr_t>(data_ + offset) + len) & ~(uintptr_t{page} - 1);
  // Only read-only file-backed pages reach here: dropping them loses nothing.
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

AlignedBuffer::~AlignedBuffer() {
  if (!data_) return;
  if (mapped_) ::munmap(data_, align_up(size_, 4096));
  else ::operator delete(data_, std::align_val_t(alignment_));
}

}  // namespace rlx
