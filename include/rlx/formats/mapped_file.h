// Read-only memory mapping of a whole file (RAII). Model readers hand out views
// into the mapping instead of copying tensor data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "rlx/base/status.h"

namespace rlx::formats {

/// A file mapped read-only into memory. Move-only; unmaps on destruction.
/// An empty file maps to an empty span (no mapping is made).
class MappedFile {
 public:
  /// Maps `path` read-only. Errors (kNotFound / kIo) name the path and the OS reason;
  /// anything but a regular file (a directory, FIFO, device, socket) is refused with
  /// kInvalidArgument naming what it is, without blocking on a FIFO.
  static Expected<MappedFile> open(const std::string& path);

  MappedFile(MappedFile&&) noexcept = default;
  MappedFile& operator=(MappedFile&&) noexcept = default;

  /// The file's bytes; valid while this object (or a moved-to one) lives.
  std::span<const uint8_t> bytes() const { return {data_.get(), size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  /// Names the file's contents as they were when it was mapped, the same in every
  /// process while the file is unchanged: device, inode, size, modification time and
  /// status-change time (which no tool can set back, unlike the modification time).
  const std::string& identity() const { return identity_; }

 private:
  struct Unmapper {
    size_t size = 0;
    void operator()(const uint8_t* p) const;
  };
  MappedFile(std::unique_ptr<const uint8_t, Unmapper> data, size_t size, std::string path, std::string identity)
      : data_(std::move(data)), size_(size), path_(std::move(path)), identity_(std::move(identity)) {}

  std::unique_ptr<const uint8_t, Unmapper> data_;
  size_t size_ = 0;
  std::string path_;
  std::string identity_;
};

}  // namespace rlx::formats
