// llama.cpp's imatrix files and the Imatrix container (see rlx/models/imatrix.h): the
// GGUF form written and read, the older .dat form read. Depends on formats/ only, so
// that the readers are fuzzed on their own (fuzz/imatrix_fuzz.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "rlx/formats/gguf.h"
#include "rlx/formats/gguf_writer.h"
#include "rlx/models/imatrix.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kSumSuffix = ".in_sum2";
constexpr std::string_view kCountSuffix = ".counts";

}  // namespace

std::vector<float> Imatrix::importance(std::string_view weight, int64_t matrix) const {
  auto it = entries.find(weight);
  if (it == entries.end() || matrix < 0 || matrix >= static_cast<int64_t>(it->second.counts.size())) return {};
  const ImatrixEntry& e = it->second;
  const int64_t count = e.counts[static_cast<size_t>(matrix)], cols = e.columns();
  if (count <= 0 || cols <= 0) return {};
  std::vector<float> out(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c)
    out[static_cast<size_t>(c)] =
        static_cast<float>(e.sum_sq[static_cast<size_t>(matrix * cols + c)] / static_cast<double>(count));
  return out;
}

Status Imatrix::merge(const Imatrix& other) {
  for (const auto& [name, e] : other.entries) {
    auto [it, fresh] = entries.emplace(name, e);
    if (fresh) continue;
    ImatrixEntry& mine = it->second;
    if (mine.sum_sq.size() != e.sum_sq.size() || mine.counts.size() != e.counts.size())
      return Error::invalid_argument("imatrix entry '{}': {} x {} values cannot be merged with {} x {}", name,
                                     mine.counts.size(), mine.columns(), e.counts.size(), e.columns());
    for (size_t i = 0; i < e.sum_sq.size(); ++i) mine.sum_sq[i] += e.sum_sq[i];
    for (size_t i = 0; i < e.counts.size(); ++i) mine.counts[i] += e.counts[i];
  }
  chunk_count += other.chunk_count;
  if (chunk_size == 0) chunk_size = other.chunk_size;
  datasets.insert(datasets.end(), other.datasets.begin(), other.datasets.end());
  return {};
}

Status write_imatrix(const Imatrix& m, const std::string& path) {
  formats::GgufWriter w;
  TRY(w.add_string("general.type", "imatrix"));
  TRY(w.add_string_array("imatrix.datasets", m.datasets));
  TRY(w.add_u32("imatrix.chunk_count", static_cast<uint32_t>(m.chunk_count)));
  TRY(w.add_u32("imatrix.chunk_size", static_cast<uint32_t>(m.chunk_size)));
  for (const auto& [name, e] : m.entries) {
    const auto mats = static_cast<int64_t>(e.counts.size());
    if (mats == 0 || e.sum_sq.empty()) continue;
    std::vector<float> sums(e.sum_sq.begin(), e.sum_sq.end()), counts(e.counts.begin(), e.counts.end());
    TRY(w.add_tensor_f32(name + std::string(kSumSuffix), formats::GgmlType::F32, {e.columns(), mats}, sums));
    TRY(w.add_tensor_f32(name + std::string(kCountSuffix), formats::GgmlType::F32, {1, mats}, counts));
  }
  const std::string tmp = path + ".tmp";
  TRY(w.write_file(tmp));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Error::io("cannot move '{}' to '{}': {}", tmp, path, ec.message());
  return {};
}

namespace {

Expected<Imatrix> read_imatrix_gguf(const std::string& path) {
  ASSIGN_OR_RETURN(formats::GgufFile f, formats::GgufFile::open(path));
  Imatrix m;
  if (auto t = f.get_string("general.type"); t && *t != "imatrix")
    return Error::invalid_file("{}: general.type is '{}', not an imatrix", path, *t);
  if (auto v = f.get_int("imatrix.chunk_count")) m.chunk_count = *v;
  if (auto v = f.get_int("imatrix.chunk_size")) m.chunk_size = *v;
  if (auto a = f.get_array("imatrix.datasets"))
    for (std::string_view s : (*a)->strings) m.datasets.emplace_back(s);
  auto read_f32 = [&](const formats::GgufTensor& t) -> Expected<std::vector<float>> {
    if (t.type != formats::GgmlType::F32)
      return Error::invalid_file("{}: tensor '{}' is {}, not F32", path, t.name, formats::ggml_type_name(t.type));
    if (t.n_elements() <= 0) return Error::invalid_file("{}: tensor '{}' holds no values", path, t.name);
    std::vector<float> v(static_cast<size_t>(t.n_elements()));
    std::memcpy(v.data(), t.data, v.size() * sizeof(float));
    return v;
  };
  for (const formats::GgufTensor& t : f.tensors()) {
    const std::string_view n = t.name;
    if (n.size() <= kSumSuffix.size() || n.substr(n.size() - kSumSuffix.size()) != kSumSuffix) continue;
    const std::string weight(n.substr(0, n.size() - kSumSuffix.size()));
    const formats::GgufTensor* counts = f.find_tensor(weight + std::string(kCountSuffix));
    if (counts == nullptr) return Error::invalid_file("{}: '{}' has no '{}{}'", path, t.name, weight, kCountSuffix);
    ASSIGN_OR_RETURN(std::vector<float> sums, read_f32(t));
    ASSIGN_OR_RETURN(std::vector<float> c, read_f32(*counts));
    if (t.dims.empty() || c.empty() || sums.size() % c.size() != 0 ||
        t.dims[0] * static_cast<int64_t>(c.size()) != static_cast<int64_t>(sums.size()))
      return Error::invalid_file("{}: '{}' holds {} values for {} matrices", path, t.name, sums.size(), c.size());
    ImatrixEntry e;
    e.sum_sq.assign(sums.begin(), sums.end());
    for (float v : c) {
      if (!(v >= 0) || !std::isfinite(v) || v > 1e15f)
        return Error::invalid_file("{}: '{}{}' holds the count {}", path, weight, kCountSuffix, v);
      e.counts.push_back(static_cast<int64_t>(v));
    }
    for (double v : e.sum_sq)
      if (!(v >= 0) || !std::isfinite(v))
        return Error::invalid_file("{}: '{}' holds {}, not a sum of squares", path, t.name, v);
    m.entries[weight] = std::move(e);
  }
  return m;
}

// llama.cpp's older binary form: int32 entries; per entry int32 name length, the name,
// int32 calls, int32 values, f32 values (each the column's mean x² times calls); then
// optionally int32 chunks and the dataset's name.
Expected<Imatrix> read_imatrix_dat(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::io("cannot read '{}'", path);
  in.seekg(0, std::ios::end);
  const auto size = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  auto read_i32 = [&](const char* what) -> Expected<int32_t> {
    const auto at = static_cast<int64_t>(in.tellg());
    int32_t v = 0;
    if (!in.read(reinterpret_cast<char*>(&v), sizeof v))
      return Error::invalid_file("{}: truncated at {} (offset {})", path, what, at);
    return v;
  };
  ASSIGN_OR_RETURN(const int32_t n_entries, read_i32("the entry count"));
  if (n_entries < 0 || n_entries > size / 12)
    return Error::invalid_file("{}: {} entries in {} bytes", path, n_entries, size);
  Imatrix m;
  for (int32_t i = 0; i < n_entries; ++i) {
    ASSIGN_OR_RETURN(const int32_t len, read_i32("a name length"));
    if (len <= 0 || len > 4096) return Error::invalid_file("{}: entry {} has a name of {} bytes", path, i, len);
    std::string name(static_cast<size_t>(len), '\0');
    if (!in.read(name.data(), len)) return Error::invalid_file("{}: entry {}: truncated name", path, i);
    ASSIGN_OR_RETURN(const int32_t calls, read_i32("a call count"));
    ASSIGN_OR_RETURN(const int32_t nval, read_i32("a value count"));
    if (calls < 0 || nval <= 0 || static_cast<int64_t>(nval) * 4 > size)
      return Error::invalid_file("{}: entry '{}' has {} calls and {} values", path, name, calls, nval);
    std::vector<float> v(static_cast<size_t>(nval));
    if (!in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4)))
      return Error::invalid_file("{}: entry '{}': truncated values", path, name);
    ImatrixEntry e;
    // The file holds mean x² times calls: with calls as the count, sum / count is the mean.
    const int64_t count = std::max<int32_t>(calls, 1);
    for (float x : v) {
      if (!(x >= 0) || !std::isfinite(x)) return Error::invalid_file("{}: entry '{}' holds {}", path, name, x);
      e.sum_sq.push_back(static_cast<double>(x));
    }
    e.counts.assign(1, count);
    m.entries[name] = std::move(e);
  }
  if (in.peek() != std::char_traits<char>::eof()) {
    ASSIGN_OR_RETURN(const int32_t chunks, read_i32("the chunk count"));
    m.chunk_count = std::max<int32_t>(chunks, 0);
    int32_t len = 0;
    if (in.read(reinterpret_cast<char*>(&len), sizeof len) && len > 0 && len <= 4096) {
      std::string dataset(static_cast<size_t>(len), '\0');
      if (in.read(dataset.data(), len)) m.datasets.push_back(dataset);
    }
  }
  return m;
}

}  // namespace

Expected<Imatrix> read_imatrix(const std::string& path) {
  std::ifstream probe(path, std::ios::binary);
  if (!probe) return Error::io("cannot read '{}'", path);
  char magic[4] = {};
  probe.read(magic, 4);
  if (probe && std::memcmp(magic, "GGUF", 4) == 0) return read_imatrix_gguf(path);
  return read_imatrix_dat(path);
}

}  // namespace rlx::models
