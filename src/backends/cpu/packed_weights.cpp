// PackedWeightCache: one packed copy per (shared param buffer, offset, layout, ISA), and
// the folder of packed copies kept across runs. A folder file: a 4 KiB header (magic,
// payload bytes, the key string that made it, and in its last 8 bytes the payload's
// bulk_checksum) then the packed bytes, mapped read-only once the checksum matches.
#include "backends/cpu/packed_weights.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <csignal>
#include <cstdlib>
#include <iterator>
#include <set>
#include <utility>
#include <vector>

#include "rlx/base/env.h"
#include "rlx/base/hash.h"
#include "rlx/base/log.h"

namespace rlx::cpu_backend {
namespace {

// Source bytes packed between two releases of a file-mapped weight's pages.
constexpr size_t kReleaseStepBytes = size_t{8} << 20;

constexpr char kMagic[8] = {'R', 'L', 'X', 'P', 'A', 'C', 'K', '2'};
constexpr size_t kHeaderBytes = 4096;  // the payload starts page-aligned
constexpr size_t kChecksumAt = kHeaderBytes - 8;
constexpr size_t kMaxKeyBytes = kChecksumAt - 20;

// The folder file's name for a key string: FNV-1a 64 in hex (the header holds the key
// itself, so a collision is a miss, not a wrong weight).
std::string file_name(const std::string& key) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx.rlxpack", static_cast<unsigned long long>(h));
  return buf;
}

// Everything the packed bytes depend on: the source bytes' name and the layout (ISA
// table and panel width). The version names pack_b's panel layout: bump it whenever
// pack_b_panels changes what it writes.
std::string disk_key(const std::string& file_key, int64_t offset, const PackRequest& req, const cpu::KernelContext& ctx) {
  const cpu::PackedB empty = cpu::PackedB::view(ctx, 0, 0, req.type, nullptr);
  return "rlx-packed-v1|" + file_key + "+" + std::to_string(offset) + "|k=" + std::to_string(req.k) +
         "|n=" + std::to_string(req.n) + "|t=" + std::to_string(req.b_transposed) +
         "|type=" + std::to_string(static_cast<int>(req.type)) + "|isa=" + cpu::isa_name(empty.isa()) +
         "|nr=" + std::to_string(empty.nr());
}

// A read-only mapping of a folder file; the PackedB views its payload.
struct MappedPacked {
  void* addr = nullptr;
  size_t size = 0;
  cpu::PackedB packed;
  MappedPacked() = default;
  MappedPacked(const MappedPacked&) = delete;
  MappedPacked& operator=(const MappedPacked&) = delete;
  ~MappedPacked() {
    if (addr != nullptr) ::munmap(addr, size);
  }
};

// The pid in a temporary file's name ("<hash>.rlxpack.tmp.<pid>.<serial>"), or 0.
long tmp_owner(const std::string& name) {
  const size_t at = name.find(".rlxpack.tmp.");
  if (at == std::string::npos) return 0;
  return std::strtol(name.c_str() + at + 13, nullptr, 10);
}

// Deletes the temporary files of processes that are gone (killed while packing), then
// the least recently used folder files (by modification time, which a hit renews) that
// this cache does not use itself, until `incoming` more bytes fit in `limit`. False
// when they cannot be made to fit.
bool make_room(const std::filesystem::path& dir, uint64_t incoming, uint64_t limit,
               const std::set<std::string>& in_use) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  uint64_t total = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (const long pid = tmp_owner(name); pid > 0) {
      std::error_code e2;
      if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) fs::remove(it->path(), e2);
      continue;
    }
    if (it->path().extension() != ".rlxpack") continue;
    std::error_code e2;
    const uint64_t size = it->file_size(e2);
    const fs::file_time_type t = it->last_write_time(e2);
    if (e2) continue;
    total += size;
    if (in_use.count(it->path().string()) == 0) files.emplace_back(t, it->path());
  }
  if (total + incoming <= limit) return true;
  std::sort(files.begin(), files.end());
  for (const auto& [t, path] : files) {
    if (total + incoming <= limit) break;
    std::error_code e2;
    const uint64_t size = fs::file_size(path, e2);
    if (!e2 && fs::remove(path, e2)) total -= std::min(total, size);
  }
  return total + incoming <= limit;
}

}  // namespace

std::shared_ptr<const cpu::PackedB> PackedWeightCache::load_from_disk(const cpu::KernelContext& ctx,
                                                                      const std::string& key,
                                                                      const PackRequest& req) {
  const std::string path = (std::filesystem::path(disk_dir_) / file_name(key)).string();
  // Not blocking on a FIFO, not following a link planted under the name.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) return nullptr;
  const size_t payload = cpu::packed_b_bytes(ctx, req.k, req.n, req.type);
  struct stat st {};
  char header[kHeaderBytes];
  const bool fits = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                    static_cast<size_t>(st.st_size) == kHeaderBytes + payload &&
                    ::pread(fd, header, kHeaderBytes, 0) == static_cast<ssize_t>(kHeaderBytes);
  uint64_t stored_payload = 0, stored_checksum = 0;
  uint32_t key_len = 0;
  if (fits) {
    std::memcpy(&stored_payload, header + 8, 8);
    std::memcpy(&key_len, header + 16, 4);
    std::memcpy(&stored_checksum, header + kChecksumAt, 8);
  }
  if (!fits || std::memcmp(header, kMagic, 8) != 0 || stored_payload != payload || key_len != key.size() ||
      key_len > kMaxKeyBytes || std::memcmp(header + 20, key.data(), key.size()) != 0) {
    ::close(fd);
    return nullptr;
  }
  auto m = std::make_shared<MappedPacked>();
  m->size = kHeaderBytes + payload;
  void* addr = ::mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
  (void)::futimens(fd, nullptr);  // used now: the last to go when the folder is full
  ::close(fd);
  if (addr == MAP_FAILED) return nullptr;
  m->addr = addr;
  const auto* data = static_cast<const uint8_t*>(addr) + kHeaderBytes;
  // Bytes changed on disk (a bad sector, another program, a partial copy of the folder)
  // must not become weights: the file is packed and written again.
  if (bulk_checksum(data, payload) != stored_checksum) {
    RLX_LOG_WARN("packed weight cache: {} does not match its checksum; packing the weight again", path);
    return nullptr;
  }
  m->packed = cpu::PackedB::view(ctx, req.k, req.n, req.type, data);
  in_use_.insert(path);
  return std::shared_ptr<const cpu::PackedB>(m, &m->packed);
}

std::shared_ptr<const cpu::PackedB> PackedWeightCache::pack_to_disk(
    const cpu::KernelContext& ctx, const std::string& key, const uint8_t* src, const PackRequest& req,
    const std::function<void(int64_t)>& on_step, bool* kept) {
  *kept = false;
  const uint64_t limit = static_cast<uint64_t>(env_config().packed_cache_mb) << 20;
  const size_t payload = cpu::packed_b_bytes(ctx, req.k, req.n, req.type);
  if (key.size() > kMaxKeyBytes || kHeaderBytes + payload > limit) return nullptr;
  std::error_code ec;
  if (!std::filesystem::exists(disk_dir_, ec)) {
    // Private to the user: another user's planted file must not become our weights.
    std::filesystem::create_directories(disk_dir_, ec);
    if (!ec) std::filesystem::permissions(disk_dir_, std::filesystem::perms::owner_all, ec);
  }
  if (ec || !std::filesystem::is_directory(disk_dir_, ec)) return nullptr;
  const std::string final_path = (std::filesystem::path(disk_dir_) / file_name(key)).string();
  // Never more than the cap; files this cache maps stay (a model larger than the cap
  // keeps the part that fits instead of evicting its own files on every start).
  if (!make_room(disk_dir_, kHeaderBytes + payload, limit, in_use_)) return nullptr;
  static std::atomic<uint64_t> serial{0};
  const std::string tmp = final_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  auto m = std::make_shared<MappedPacked>();
  m->size = kHeaderBytes + payload;
  // The blocks are reserved first: a write through the mapping to a file the disk
  // cannot hold would end the process with SIGBUS.
  void* addr = ::posix_fallocate(fd, 0, static_cast<off_t>(m->size)) == 0
                   ? ::mmap(nullptr, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                   : MAP_FAILED;
  ::close(fd);
  if (addr == MAP_FAILED) {
    ::unlink(tmp.c_str());
    return nullptr;
  }
  m->addr = addr;
  auto* header = static_cast<uint8_t*>(addr);
  std::memcpy(header, kMagic, 8);
  const uint64_t stored_payload = payload;
  const auto key_len = static_cast<uint32_t>(key.size());
  std::memcpy(header + 8, &stored_payload, 8);
  std::memcpy(header + 16, &key_len, 4);
  std::memcpy(header + 20, key.data(), key.size());
  m->packed = cpu::pack_b_into(ctx, req.k, req.n, req.b_transposed, 0, src, req.type, header + kHeaderBytes,
                               kReleaseStepBytes, on_step);
  const uint64_t checksum = bulk_checksum(header + kHeaderBytes, payload);
  std::memcpy(header + kChecksumAt, &checksum, 8);
  // Named only when whole and on disk (so that a crash of the machine cannot leave a
  // named file whose pages were never written, which would read back as zeros).
  if (::msync(addr, m->size, MS_SYNC) != 0 || ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    ::unlink(tmp.c_str());  // the mapping stays valid: this process keeps using it
    return std::shared_ptr<const cpu::PackedB>(m, &m->packed);
  }
  in_use_.insert(final_path);
  *kept = true;
  return std::shared_ptr<const cpu::PackedB>(m, &m->packed);
}

std::shared_ptr<const cpu::PackedB> PackedWeightCache::pack(const cpu::KernelContext& ctx, const uint8_t* data,
                                                            const PackRequest& req) {
  return std::make_shared<const cpu::PackedB>(cpu::pack_b(ctx, req.k, req.n, req.b_transposed, 0, data, req.type));
}

std::shared_ptr<const cpu::PackedB> PackedWeightCache::get(const cpu::KernelContext& ctx, const ByteView& source,
                                                           int64_t offset, const PackRequest& req) {
  const Key key{source.data(), offset, req.k, req.n, req.b_transposed, req.type, cpu::resolve_isa(ctx.isa)};
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    // The same owner (control block), so not new bytes reallocated at an old address.
    const std::weak_ptr<const void>& had = it->second.source;
    if (!had.owner_before(source.owner()) && !source.owner().owner_before(had)) {
      if (auto packed = it->second.packed.lock()) {
        ++hits_;
        return packed;
      }
    }
  }
  // Drop entries whose buffer or packed copy is gone, so the map stays one per live weight.
  for (auto it = entries_.begin(); it != entries_.end();)
    it = (it->second.has_owner && it->second.source.expired()) || it->second.packed.expired() ? entries_.erase(it)
                                                                                              : std::next(it);
  const std::string dkey = !disk_dir_.empty() && !source.file_key().empty() && env_config().packed_cache_mb > 0
                               ? disk_key(source.file_key(), offset, req, ctx)
                               : std::string();
  if (!dkey.empty()) {
    if (auto mapped = load_from_disk(ctx, dkey, req)) {
      ++disk_hits_;
      entries_[key] = Entry{source.owner(), source.owner() != nullptr, mapped};
      return mapped;
    }
  }
  // Pages of a file mapping are released as they are consumed (an [N, K] weight is read
  // in row order), so packing holds about one step of the source at a time beside the
  // packed copy; a [K, N] weight is released whole at the end.
  const size_t esize = cpu::weight_type_size(req.type);
  const size_t bytes = static_cast<size_t>(req.k * req.n) * esize;
  auto done = [&](int64_t n_done) {
    if (!req.b_transposed && n_done < req.n) return;
    const size_t upto = req.b_transposed ? static_cast<size_t>(n_done * req.k) * esize : bytes;
    // From the start each time: a page that straddles two steps goes with the later one.
    source.release_pages(static_cast<size_t>(offset), upto);
  };
  std::function<void(int64_t)> on_step;
  if (source.is_file_backed()) on_step = done;
  // With a folder, the packed copy is made in a file there (packed in place through a
  // shared mapping, no second copy), else in memory.
  std::shared_ptr<const cpu::PackedB> packed;
  if (!dkey.empty()) {
    bool kept = false;
    packed = pack_to_disk(ctx, dkey, source.data() + offset, req, on_step, &kept);
    if (kept) ++disk_writes_;
    if (!packed) {
      RLX_LOG_DEBUG("packed weight cache: cannot write to {}; packing in memory", disk_dir_);
    }
  }
  if (!packed) {
    packed = std::make_shared<const cpu::PackedB>(cpu::pack_b(
        ctx, req.k, req.n, req.b_transposed, 0, source.data() + offset, req.type, kReleaseStepBytes, on_step));
  }
  ++packs_;
  entries_[key] = Entry{source.owner(), source.owner() != nullptr, packed};
  return packed;
}

PackedWeightStats PackedWeightCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PackedWeightStats s;
  s.packs = packs_;
  s.hits = hits_;
  s.disk_hits = disk_hits_;
  s.disk_writes = disk_writes_;
  for (const auto& [key, e] : entries_) {
    if (auto p = e.packed.lock()) {
      ++s.live;
      s.live_bytes += static_cast<int64_t>(p->bytes());
    }
  }
  return s;
}

}  // namespace rlx::cpu_backend
