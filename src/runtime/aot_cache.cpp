// AOT disk cache entries (see rlx/runtime/aot_cache.h): encoding a specialized LIR
// module with its binding and bucket axes behind a checked header, decoding it without
// trusting a byte, and atomic stores (unique temporary file + rename).
#include "rlx/runtime/aot_cache.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <fstream>
#include <system_error>

#include "rlx/base/hash.h"
#include "rlx/base/log.h"
#include "rlx/compile/memory_plan.h"
#include "rlx/ir/binary.h"

namespace rlx {
namespace {

constexpr size_t kMaxHeaderBytes = 4096;
constexpr uint64_t kMaxEntryBytes = uint64_t{1} << 32;  // 4 GiB: far above any LIR text

uint64_t payload_checksum(std::string_view payload) { return bulk_checksum(payload.data(), payload.size()); }

// Splits off the next '\n'-terminated line of `s` (without the newline); false at the end.
bool next_line(std::string_view& s, std::string_view* line) {
  const size_t nl = s.find('\n');
  if (nl == std::string_view::npos) return false;
  *line = s.substr(0, nl);
  s.remove_prefix(nl + 1);
  return true;
}

Expected<std::string_view> header_field(std::string_view& s, std::string_view name) {
  std::string_view line;
  if (!next_line(s, &line)) return Error::invalid_file("AOT entry: header ends before '{}'", name);
  if (line.size() <= name.size() || line.substr(0, name.size()) != name || line[name.size()] != '=')
    return Error::invalid_file("AOT entry: expected header field '{}', got '{}'", name, line.substr(0, 64));
  return line.substr(name.size() + 1);
}

template <typename T>
bool parse_number(std::string_view s, T* out, int base = 10) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

Expected<uint64_t> hex_field(std::string_view& s, std::string_view name) {
  ASSIGN_OR_RETURN(std::string_view v, header_field(s, name));
  uint64_t x = 0;
  if (v.size() != 16 || !parse_number(v, &x, 16))
    return Error::invalid_file("AOT entry: header field '{}' is not 16 hex digits", name);
  return x;
}

// "extent SEQ 128" / "extent - 0" and "axes -1 0 ..." -> ExtentInfo (axes checked later).
Status parse_extent(std::string_view sym_line, std::string_view axes_line, ExtentInfo* e) {
  if (sym_line.substr(0, 7) != "extent ") return Error::invalid_file("AOT payload: expected 'extent', got '{}'", sym_line.substr(0, 32));
  sym_line.remove_prefix(7);
  const size_t sp = sym_line.find(' ');
  if (sp == std::string_view::npos) return Error::invalid_file("AOT payload: malformed extent line");
  const std::string_view name = sym_line.substr(0, sp);
  if (!parse_number(sym_line.substr(sp + 1), &e->upper) || e->upper < 0)
    return Error::invalid_file("AOT payload: bad extent size '{}'", sym_line.substr(sp + 1));
  if (name == "-") {
    e->symbol = 0;
  } else {
    const std::optional<ir::SymbolId> s = ir::try_intern_symbol(name);
    if (!s) return Error::invalid_file("AOT payload: bad extent symbol '{}'", name.substr(0, 32));
    e->symbol = *s;
  }
  if (axes_line.substr(0, 4) != "axes") return Error::invalid_file("AOT payload: expected 'axes'");
  axes_line.remove_prefix(4);
  e->axis.clear();
  while (!axes_line.empty()) {
    if (axes_line.front() != ' ') return Error::invalid_file("AOT payload: malformed axes line");
    axes_line.remove_prefix(1);
    const size_t end = std::min(axes_line.find(' '), axes_line.size());
    int a = 0;
    if (!parse_number(axes_line.substr(0, end), &a)) return Error::invalid_file("AOT payload: bad axis value");
    e->axis.push_back(a);
    axes_line.remove_prefix(end);
  }
  return {};
}

std::string hex16(uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace

std::string_view build_identity() {
  static const std::string id = [] {
    StableHasher h;
    h.str("rlx.build.v1");
    h.str(kRlxVersion);
    Dl_info info{};
    std::error_code ec;
    // The file that holds this function: the executable, or the shared library (Python).
    if (dladdr(reinterpret_cast<const void*>(&build_identity), &info) != 0 && info.dli_fname != nullptr) {
      const std::filesystem::path bin = info.dli_fname;
      h.str(bin.string());
      h.u64(static_cast<uint64_t>(std::filesystem::file_size(bin, ec)));
      h.i64(static_cast<int64_t>(std::filesystem::last_write_time(bin, ec).time_since_epoch().count()));
    }
    return fmt::format("{:016x}", h.digest());
  }();
  return id;
}

bool is_valid_aot_base(std::string_view base) {
  if (base.empty() || base.size() > 128) return false;
  for (char c : base) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '-' || c == '_';
    if (!ok) return false;
  }
  return base != "." && base != "..";
}

Expected<ir::DimBinding> parse_dim_binding(std::string_view text) {
  ir::DimBinding b;
  while (!text.empty()) {
    const size_t comma = std::min(text.find(','), text.size());
    const std::string_view item = text.substr(0, comma);
    const size_t eq = item.find('=');
    int64_t v = 0;
    if (eq == std::string_view::npos || eq == 0 || !parse_number(item.substr(eq + 1), &v) || v < 0)
      return Error::parse("binding item '{}' is not NAME=size", item.substr(0, 64));
    const std::optional<ir::SymbolId> s = ir::try_intern_symbol(item.substr(0, eq));
    if (!s) return Error::parse("binding item '{}': symbol table full", item.substr(0, 64));
    b.set(*s, v);
    text.remove_prefix(comma);
    if (!text.empty()) text.remove_prefix(1);
  }
  return b;
}

std::string encode_aot_entry(uint64_t key, std::string_view device, const SpecializedModel& model) {
  std::string payload = fmt::format("binding {}\nextent {} {}\naxes", model.binding.to_string(),
                                    model.extent.symbol == 0 ? std::string("-") : ir::symbol_name(model.extent.symbol),
                                    model.extent.upper);
  if (!model.extent.empty())
    for (int a : model.extent.axis) payload += fmt::format(" {}", a);
  payload += '\n';
  payload += ir::encode_lir_binary(model.lir);
  std::string out = fmt::format("{}\nformat={}\nrlx={}\ndevice={}\nkey={}\npayload={}\nchecksum={}\n\n", kAotMagic,
                                kAotFormatVersion, kRlxVersion, device, hex16(key), payload.size(),
                                hex16(payload_checksum(payload)));
  out += payload;
  return out;
}

Expected<SpecializedModel> decode_aot_entry(std::string_view bytes, uint64_t key, std::string_view device) {
  std::string_view s = bytes.substr(0, std::min(bytes.size(), kMaxHeaderBytes));
  std::string_view line;
  if (!next_line(s, &line) || line != kAotMagic) return Error::invalid_file("AOT entry: bad magic");
  ASSIGN_OR_RETURN(std::string_view format, header_field(s, "format"));
  uint32_t fv = 0;
  if (!parse_number(format, &fv)) return Error::invalid_file("AOT entry: bad format version");
  if (fv != kAotFormatVersion)
    return Error::invalid_file("AOT entry: stale format version {} (this build reads {})", fv, kAotFormatVersion);
  ASSIGN_OR_RETURN(std::string_view version, header_field(s, "rlx"));
  if (version != kRlxVersion)
    return Error::invalid_file("AOT entry: stale RLX version '{}' (this build is {})", version.substr(0, 32), kRlxVersion);
  ASSIGN_OR_RETURN(std::string_view dev, header_field(s, "device"));
  if (dev != device)
    return Error::invalid_file("AOT entry: foreign device '{}' (expected {})", dev.substr(0, 32), device);
  ASSIGN_OR_RETURN(uint64_t k, hex_field(s, "key"));
  if (k != key) return Error::invalid_file("AOT entry: foreign key {} (expected {})", hex16(k), hex16(key));
  ASSIGN_OR_RETURN(std::string_view len_text, header_field(s, "payload"));
  uint64_t len = 0;
  if (!parse_number(len_text, &len)) return Error::invalid_file("AOT entry: bad payload length");
  ASSIGN_OR_RETURN(uint64_t checksum, hex_field(s, "checksum"));
  if (!next_line(s, &line) || !line.empty()) return Error::invalid_file("AOT entry: header not terminated");
  const size_t header_bytes = static_cast<size_t>(s.data() - bytes.data());
  if (bytes.size() - header_bytes != len)
    return Error::invalid_file("AOT entry: payload is {} bytes, header says {} (truncated or padded)",
                               bytes.size() - header_bytes, len);
  std::string_view payload = bytes.substr(header_bytes);
  if (payload_checksum(payload) != checksum) return Error::invalid_file("AOT entry: checksum mismatch");

  SpecializedModel m;
  std::string_view binding_line, extent_line, axes_line;
  if (!next_line(payload, &binding_line) || !next_line(payload, &extent_line) || !next_line(payload, &axes_line))
    return Error::invalid_file("AOT payload: missing binding/extent lines");
  if (binding_line.substr(0, 8) != "binding ") return Error::invalid_file("AOT payload: expected 'binding'");
  auto binding = parse_dim_binding(binding_line.substr(8));
  if (!binding) return Error::invalid_file("AOT payload: {}", binding.error().message());
  m.binding = std::move(binding).value();
  TRY(parse_extent(extent_line, axes_line, &m.extent));
  auto lir = ir::decode_lir_binary(payload);
  if (!lir) return Error::invalid_file("AOT payload: {}", lir.error().message());
  m.lir = std::move(lir).value();
  if (!m.lir.dynamic_symbols.empty()) return Error::invalid_file("AOT payload: LIR has unbound symbols");
  const auto n = static_cast<size_t>(m.lir.graph.size());
  if (!m.extent.empty()) {
    if (m.extent.axis.size() != n)
      return Error::invalid_file("AOT payload: {} bucket axes for {} values", m.extent.axis.size(), n);
    for (size_t v = 0; v < n; ++v) {
      const int a = m.extent.axis[v];
      if (a < -2 || a >= m.lir.graph.node(static_cast<ir::ValueId>(v)).shape.rank())
        return Error::invalid_file("AOT payload: bucket axis {} out of range for %{}", a, v);
    }
  } else if (!m.extent.axis.empty()) {
    return Error::invalid_file("AOT payload: bucket axes without a bucket symbol");
  }
  Status plan = compile::check_plan(m.lir);
  if (!plan.ok()) return Error::invalid_file("AOT payload: {}", plan.error().message());
  return m;
}

std::filesystem::path AotCache::path_for(std::string_view base, uint64_t key) const {
  return dir_ / fmt::format("{}__{}.rlxaot", base, hex16(key));
}

std::optional<SpecializedModel> AotCache::load(std::string_view base, uint64_t key, std::string_view device,
                                               std::string* why) const {
  if (why) why->clear();
  const std::filesystem::path path = path_for(base, key);
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return std::nullopt;  // absent
  auto reject = [&](const std::string& reason) -> std::optional<SpecializedModel> {
    RLX_LOG_DEBUG("aot cache: ignoring {}: {}", path.string(), reason);
    if (why) *why = reason;
    return std::nullopt;
  };
  if (size > kMaxEntryBytes) return reject(fmt::format("{} bytes is too large for an entry", size));
  std::ifstream f(path, std::ios::binary);
  std::string bytes(static_cast<size_t>(size), '\0');
  if (!f.read(bytes.data(), static_cast<std::streamsize>(size)) || f.gcount() != static_cast<std::streamsize>(size))
    return reject("read failed");
  auto m = decode_aot_entry(bytes, key, device);
  if (!m) return reject(m.error().message());
  return std::move(m).value();
}

Status AotCache::store(std::string_view base, uint64_t key, std::string_view device,
                       const SpecializedModel& model) const {
  if (!is_valid_aot_base(base))
    return Error::invalid_argument("AOT cache base name '{}' must be [A-Za-z0-9._-]+", base);
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return Error::io("cannot create AOT cache dir '{}': {}", dir_.string(), ec.message());
  const std::string bytes = encode_aot_entry(key, device, model);
  const std::filesystem::path path = path_for(base, key);
  // Unique per process and call, in the same directory so that rename is atomic.
  static std::atomic<uint64_t> counter{0};
  const std::filesystem::path tmp =
      path.string() + fmt::format(".tmp.{}.{}", static_cast<long>(::getpid()), counter.fetch_add(1));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f) {
      std::filesystem::remove(tmp, ec);
      return Error::io("cannot write AOT entry '{}'", tmp.string());
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return Error::io("cannot rename AOT entry to '{}': {}", path.string(), ec.message());
  }
  prune();
  return {};
}

void AotCache::prune() const {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> entries;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (e.path().extension() != ".rlxaot") continue;
    std::error_code t;
    entries.emplace_back(fs::last_write_time(e.path(), t), e.path());
  }
  if (entries.size() <= kMaxEntries) return;
  std::sort(entries.begin(), entries.end());  // oldest first
  const size_t drop = entries.size() - kMaxEntries * 3 / 4;  // some room, so that pruning is rare
  for (size_t i = 0; i < drop; ++i) {
    std::error_code ignored;  // another process may have removed it already
    fs::remove(entries[i].second, ignored);
  }
  RLX_LOG_DEBUG("aot cache: removed the {} oldest of {} entries in {}", drop, entries.size(), dir_.string());
}

}  // namespace rlx
