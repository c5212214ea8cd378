// ByteView: views of foreign memory, and release_pages, which drops only the pages of a
// read-only file mapping (they read back unchanged) and leaves other memory alone.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "rlx/base/byte_view.h"

namespace rlx {
namespace {

TEST(ByteView, ReleasePagesLeavesOwnedMemoryAlone) {
  for (size_t size : {size_t{4096 * 3}, AlignedBuffer::kMapThreshold * 2}) {  // heap and anonymous mapping
    auto b = std::make_shared<AlignedBuffer>(size);
    for (size_t i = 0; i < size; ++i) b->data()[i] = static_cast<uint8_t>(i * 7);
    const ByteView v = ByteView::of(b);
    EXPECT_FALSE(v.is_file_backed());
    EXPECT_EQ(v.data(), b->data());
    v.release_pages(0, size);
    for (size_t i = 0; i < size; i += 997) ASSERT_EQ(b->data()[i], static_cast<uint8_t>(i * 7)) << i;
  }
  std::vector<uint8_t> foreign(8192, 5);
  const ByteView v(foreign.data(), foreign.size(), nullptr);
  EXPECT_FALSE(v.is_file_backed());
  v.release_pages(0, foreign.size());
  EXPECT_EQ(foreign[4096], 5);
}

TEST(ByteView, KeepsItsOwnerAlive) {
  auto storage = std::make_shared<std::vector<uint8_t>>(100, 7);
  std::weak_ptr<std::vector<uint8_t>> watch = storage;
  {
    const ByteView v(storage->data() + 32, 40, storage);
    storage.reset();
    EXPECT_FALSE(watch.expired());  // the view holds the owner
    EXPECT_EQ(v.size(), 40u);
    EXPECT_EQ(v.data()[0], 7);
    const ByteView copy = v;
    EXPECT_EQ(copy.owner().use_count(), 2);
  }
  EXPECT_TRUE(watch.expired());  // released with the views, not freed by them
}

TEST(ByteView, FilePagesReadBackAfterRelease) {
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
  const ByteView v = ByteView::file_pages(static_cast<const uint8_t*>(p) + off, size - off, owner);
  EXPECT_TRUE(v.is_file_backed());
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
