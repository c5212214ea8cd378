// Owning byte buffer with 64-byte (or larger power-of-two) alignment, used for
// arenas, parameters and kernel scratch so SIMD loads never straddle lines.
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
  explicit AlignedBuffer(size_t size, size_t alignment = kDefaultAlignment);
  /// A read-only view of `size` bytes owned elsewhere (e.g. a memory-mapped model
  /// file), kept alive by `owner`; never freed or written through by RLX. Its
  /// alignment() is whatever `data` has (at most 64).
  static AlignedBuffer view(const void* data, size_t size, std::shared_ptr<const void> owner);
  /// A view() of pages of a read-only file mapping (e.g. a model file mapped with
  /// PROT_READ): the same, but release_pages() may drop its resident pages, which
  /// refault from the file when read again.
  static AlignedBuffer file_view(const void* data, size_t size, std::shared_ptr<const void> owner);
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
  /// True for a view() of foreign memory.
  bool is_view() const { return owner_ != nullptr; }
  /// True for a file_view(): its pages can be dropped and read back from the file.
  bool is_file_view() const { return file_pages_; }
  /// For a file_view(): drops the resident pages that lie wholly inside bytes
  /// [offset, offset + len) from this process (madvise MADV_DONTNEED; the contents
  /// stay in the file and come back on the next read), e.g. once a packed copy has
  /// been made. Does nothing for any other buffer (owned or anonymous memory is never
  /// released). The bytes do not change, hence const.
  void release_pages(size_t offset, size_t len) const;
  template <typename T>
  T* as() { return reinterpret_cast<T*>(data_); }
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data_); }

  void swap(AlignedBuffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(alignment_, o.alignment_);
    std::swap(owner_, o.owner_);
    std::swap(mapped_, o.mapped_);
    std::swap(file_pages_, o.file_pages_);
  }

  /// Size from which the constructor maps memory instead of using the heap.
  static constexpr size_t kMapThreshold = size_t{1} << 20;

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t alignment_ = kDefaultAlignment;
  std::shared_ptr<const void> owner_;  // set for views: the storage's owner
  bool mapped_ = false;                // storage is an anonymous mapping (munmap on destruction)
  bool file_pages_ = false;            // a view of a read-only file mapping (see file_view)
};

/// Rounds `n` up to a multiple of `alignment` (a power of two).
constexpr size_t align_up(size_t n, size_t alignment) { return (n + alignment - 1) & ~(alignment - 1); }

}  // namespace rlx
