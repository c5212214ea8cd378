// POSIX implementation of MappedFile: open (non-blocking) + fstat (regular files only) +
// mmap(PROT_READ, MAP_PRIVATE); the descriptor is closed right after mapping, the mapping
// lives until the object dies.
#include "rlx/formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace rlx::formats {

void MappedFile::Unmapper::operator()(const uint8_t* p) const {
  if (p != nullptr) ::munmap(const_cast<uint8_t*>(p), size);
}

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

Expected<MappedFile> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below); for a
  // regular file the flag changes nothing.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Error::not_found("{}: no such file", path);
    return Error::io("{}: cannot open: {}", path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Error::io("{}: cannot stat: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error::invalid_argument("{}: is {}; model data must be a regular file", path, file_kind(st.st_mode));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const std::string identity = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(size) +
                               ":" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) +
                               ":" + std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec);
  if (size == 0) {
    ::close(fd);
    return MappedFile(std::unique_ptr<const uint8_t, Unmapper>(nullptr, Unmapper{0}), 0, path, identity);
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (addr == MAP_FAILED) return Error::io("{}: mmap of {} bytes failed: {}", path, size, std::strerror(map_err));
  return MappedFile(std::unique_ptr<const uint8_t, Unmapper>(static_cast<const uint8_t*>(addr), Unmapper{size}),
                    size, path, identity);
}

}  // namespace rlx::formats
