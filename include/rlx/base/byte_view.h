// ByteView: read-only bytes that something else owns (a memory-mapped model file, a
// shared owning buffer), kept alive by a shared owner and never written or freed by
// RLX. Weights travel as ByteViews: a ParamStore holds them once, every executable
// of a model binds them (Executable::set_param_shared), and the CPU backend packs
// from them. AlignedBuffer (aligned_buffer.h) is the owning counterpart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "rlx/base/aligned_buffer.h"

namespace rlx {

class ByteView {
 public:
  ByteView() = default;
  /// `size` bytes at `data`, which `owner` keeps alive (may be null for memory that
  /// outlives every holder, e.g. a test's static array).
  ByteView(const void* data, size_t size, std::shared_ptr<const void> owner)
      : data_(static_cast<const uint8_t*>(data)), size_(size), owner_(std::move(owner)) {}
  /// Pages of a read-only file mapping (e.g. a model file mapped PROT_READ): the same,
  /// but release_pages() may drop resident pages, which refault from the file. `file_key`
  /// (may be empty) names these bytes the same way in every process while the file is
  /// unchanged (MappedFile::identity() and the byte offset), e.g. to find a copy of them
  /// packed by an earlier run.
  static ByteView file_pages(const void* data, size_t size, std::shared_ptr<const void> owner,
                             std::string file_key = {}) {
    ByteView v(data, size, std::move(owner));
    v.file_pages_ = true;
    v.file_key_ = std::move(file_key);
    return v;
  }
  /// The whole of an owning buffer, shared: the view keeps it alive.
  static ByteView of(std::shared_ptr<const AlignedBuffer> buffer) {
    const AlignedBuffer* b = buffer.get();
    return b ? ByteView(b->data(), b->size(), std::move(buffer)) : ByteView();
  }

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  /// The storage's owner: two views with the same owner and data are the same bytes.
  const std::shared_ptr<const void>& owner() const { return owner_; }
  /// True for file_pages(): resident pages can be dropped and read back from the file.
  bool is_file_backed() const { return file_pages_; }
  /// For file_pages(): the bytes' name across processes; empty when not known.
  const std::string& file_key() const { return file_key_; }
  /// For file_pages(): drops the resident pages that lie wholly inside bytes [offset,
  /// offset + len) from this process (madvise MADV_DONTNEED; the contents stay in the
  /// file and come back on the next read), e.g. once a packed copy has been made. Does
  /// nothing for other views (owned or anonymous memory is never released).
  void release_pages(size_t offset, size_t len) const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<const void> owner_;
  bool file_pages_ = false;
  std::string file_key_;
};

}  // namespace rlx
