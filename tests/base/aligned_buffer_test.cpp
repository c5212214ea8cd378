// AlignedBuffer: views of foreign memory, and release_pages, which drops only the pages
// of a read-only file mapping (they read back unchanged) and leaves owned memory alone.
#include "rlx/base/aligned_buffer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

namespace rlx {
namespace {

TEST(AlignedBuffer, ReleasePagesLeavesOwnedMemoryAlone) {
  for (size_t size : {size_t{4096 * 3}, AlignedBuffer::kMapThreshold * 2}) {  // heap and anonymous mapping
    AlignedBuffer b(size);
    EXPECT_FALSE(b.is_file_view());
    for (size_t i = 0; i < size; ++i) b.data()[i] = static_cast<uint8_t>(i * 7);
    b.release_pages(0, size);
    for (size_t i = 0; i < size; i += 997) ASSERT_EQ(b.data()[i], static_cast<uint8_t>(i * 7)) << i;
  }
  std::vector<uint8_t> foreign(8192, 5);
  const AlignedBuffer v = AlignedBuffer::view(foreign.data(), foreign.size(), nullptr);
  EXPECT_TRUE(v.is_view());
  EXPECT_FALSE(v.is_file_view());
  v.release_pages(0, foreign.size());
  EXPECT_EQ(foreign[4096], 5);
}

TEST(AlignedBuffer, FileViewPagesReadBackAfterRelease) {
  const auto path = std::filesystem::temp_directory_path() / "rlx_aligned_buffer_test.bin";
  const size_t size = 4096 * 5 + 123;
  {
    std::ofstream f(path, std::ios::binary);
    for (size_t i = 0; i < size; ++i) f.put(static_cast<char>(i * 13 + 1));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  std::filesystem::remove(path);
  ASSERT_NE(p, MAP_FAILED);
  auto owner = std::shared_ptr<const void>(p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
  // A view that starts inside a page: only whole pages inside the range are dropped.
  const size_t off = 100;
  const AlignedBuffer v = AlignedBuffer::file_view(static_cast<const uint8_t*>(p) + off, size - off, owner);
  EXPECT_TRUE(v.is_view());
  EXPECT_TRUE(v.is_file_view());
  uint64_t sum = 0;
  for (size_t i = 0; i < v.size(); ++i) sum += v.data()[i];  // fault every page in
  EXPECT_GT(sum, 0u);
  v.release_pages(0, v.size());
  v.release_pages(4000, 10);           // less than a page: nothing to drop
  v.release_pages(v.size() + 1, 100);  // past the end: ignored
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(v.data()[i], static_cast<uint8_t>((i + off) * 13 + 1)) << "byte " << i;
}

}  // namespace
}  // namespace rlx
