// Owning byte buffer with 64-byte (or larger power-of-two) alignment, used for
// arenas, parameters and kernel scratch so SIMD loads never straddle lines. It always
// owns its memory; read-only bytes owned elsewhere (a model file's mapping) are a
// ByteView (byte_view.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

namespace rlx {

inline constexpr size_t kDefaultAlignment = 64;

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  /// Allocates `size` bytes aligned to `alignment` (a power of two), zero-filled.
  /// Buffers of kMapThreshold bytes or more are anonymous memory mappings (transparent
  /// huge pages requested): allocation is O(1) and pages are zeroed on first touch, so
  /// compiling an executable with a large arena costs no time until it runs.
  explicit AlignedBuffer(size_t size, size_t alignment = kDefaultAlignment, bool reserve_only = false);
  /// A buffer that memory backs only where touched (a paged KV cache reserved for every
  /// sequence's whole context): from kMapThreshold bytes an anonymous mapping without a
  /// swap reservation (MAP_NORESERVE) on base pages, so first touches and release_pages
  /// move memory in base-page steps; the caller bounds what it touches. Zero-filled.
  static AlignedBuffer reserve(size_t size);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept { swap(o); }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    AlignedBuffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  size_t alignment() const { return alignment_; }
  bool empty() const { return size_ == 0; }
  template <typename T>
  T* as() { return reinterpret_cast<T*>(data_); }
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data_); }

  void swap(AlignedBuffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(alignment_, o.alignment_);
    std::swap(mapped_, o.mapped_);
    std::swap(base_pages_, o.base_pages_);
  }

  /// Size from which the constructor maps memory instead of using the heap.
  static constexpr size_t kMapThreshold = size_t{1} << 20;

  /// True when the buffer is an anonymous mapping (then memory backs it page by page,
  /// on first touch, and release_pages can give pages back).
  bool mapped() const { return mapped_; }
  /// The unit in which memory backs a mapped buffer: the transparent huge page size
  /// when the kernel grants huge pages to the mapping, else the base page size.
  size_t page_bytes() const;
  /// Asks the kernel to back a mapped buffer with base pages only (no transparent huge
  /// pages): memory then follows first touches and release_pages in 4 KiB steps.
  void use_base_pages();
  /// Gives back the memory of the whole pages inside [offset, offset + len) of a mapped
  /// buffer (they read as zeros afterwards); nothing for a heap buffer.
  void release_pages(size_t offset, size_t len);
  /// Bytes of the buffer that memory backs now (mincore); size() for a heap buffer.
  size_t resident_bytes() const;

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t alignment_ = kDefaultAlignment;
  bool mapped_ = false;  // storage is an anonymous mapping (munmap on destruction)
  bool base_pages_ = false;  // use_base_pages() was called
};

/// Rounds `n` up to a multiple of `alignment` (a power of two).
constexpr size_t align_up(size_t n, size_t alignment) { return (n + alignment - 1) & ~(alignment - 1); }

}  // namespace rlx
