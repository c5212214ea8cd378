// POSIX implementation of MappedFile: open + fstat + mmap(PROT_READ, MAP_PRIVATE);
// the descriptor is closed right after mapping, the mapping lives until the object dies.
#include "rlx/formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rlx::formats {

void MappedFile::Unmapper::operator()(const uint8_t* p) const {
  if (p != nullptr) ::munmap(const_cast<uint8_t*>(p), size);
}

Expected<MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
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
    return Error::io("{}: not a regular file", path);
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return MappedFile(std::unique_ptr<const uint8_t, Unmapper>(nullptr, Unmapper{0}), 0, path);
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (addr == MAP_FAILED) return Error::io("{}: mmap of {} bytes failed: {}", path, size, std::strerror(map_err));
  return MappedFile(std::unique_ptr<const uint8_t, Unmapper>(static_cast<const uint8_t*>(addr), Unmapper{size}),
                    size, path);
}

}  // namespace rlx::formats
