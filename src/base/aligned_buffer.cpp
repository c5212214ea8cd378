// AlignedBuffer: aligned, zero-initialised storage (heap, or an anonymous mapping for
// large buffers); and ByteView's page release for views of read-only file mappings.
#include "rlx/base/aligned_buffer.h"

#include "rlx/base/byte_view.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

#include "rlx/base/status.h"

namespace rlx {

namespace {

// The kernel's base page size (4 KiB on x86; 16 or 64 KiB on some arm64 kernels).
size_t base_page() {
  static const size_t page = [] {
    const long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return page;
}

}  // namespace

AlignedBuffer AlignedBuffer::reserve(size_t size) {
  AlignedBuffer b(size, kDefaultAlignment, /*reserve_only=*/true);
  b.use_base_pages();
  return b;
}

AlignedBuffer::AlignedBuffer(size_t size, size_t alignment, bool reserve_only) : size_(size), alignment_(alignment) {
  RLX_ASSERT(alignment >= alignof(std::max_align_t) && (alignment & (alignment - 1)) == 0);
  if (size == 0) return;
  constexpr size_t kPage = 4096;
  if (size >= kMapThreshold && alignment <= kPage) {
    // MAP_NORESERVE (reserve()): address space until touched; the caller checks what it
    // will use (a KV budget).
    const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (reserve_only ? MAP_NORESERVE : 0);
    void* p = ::mmap(nullptr, align_up(size, kPage), PROT_READ | PROT_WRITE, flags, -1, 0);
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

size_t AlignedBuffer::page_bytes() const {
  static const size_t huge = [] {
    const size_t base = base_page();
    // "[always]" or "[madvise]" (the constructor asks for huge pages): 2 MiB units.
    std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return base;
    char line[128] = {};
    const bool read = std::fgets(line, sizeof line, f) != nullptr;
    std::fclose(f);
    return read && std::strstr(line, "[never]") == nullptr ? std::max<size_t>(base, size_t{2} << 20) : base;
  }();
  return base_pages_ ? base_page() : huge;
}

void AlignedBuffer::use_base_pages() {
  if (!mapped_ || base_pages_) return;
  base_pages_ = true;
#ifdef MADV_NOHUGEPAGE
  (void)::madvise(data_, align_up(size_, base_page()), MADV_NOHUGEPAGE);
#endif
}

void AlignedBuffer::release_pages(size_t offset, size_t len) {
  if (!mapped_ || offset >= size_) return;
  len = std::min(len, size_ - offset);
  const size_t page = base_page();  // madvise works on base pages (a huge page is split)
  const auto begin = align_up(reinterpret_cast<uintptr_t>(data_ + offset), page);
  auto end = (reinterpret_cast<uintptr_t>(data_ + offset) + len) & ~(uintptr_t{page} - 1);
  // The mapping ends on a page boundary past size_: its last partial page may go too.
  if (offset + len == size_) end = reinterpret_cast<uintptr_t>(data_) + align_up(size_, page);
  // (the mapping's start is page aligned: mmap returns whole pages)
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

size_t AlignedBuffer::resident_bytes() const {
  if (!mapped_) return size_;
  // In windows of 64 Ki pages: a reservation of hundreds of GiB needs no vector that large.
  const size_t page = base_page(), pages = align_up(size_, page) / page, window = size_t{1} << 16;
  std::vector<unsigned char> in(std::min(pages, window));
  size_t n = 0;
  for (size_t at = 0; at < pages; at += window) {
    const size_t count = std::min(window, pages - at);
    if (::mincore(data_ + at * page, count * page, in.data()) != 0) return size_;
    for (size_t i = 0; i < count; ++i) n += in[i] & 1;
  }
  return std::min(n * page, size_);
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
