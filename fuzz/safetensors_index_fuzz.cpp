// libFuzzer target for the sharded-checkpoint reader (SafetensorsModel::open over a
// model.safetensors.index.json): arbitrary bytes become the index in a private temp
// folder that holds two valid shards, a non-safetensors file and a link to a shard
// outside the folder. Any input must give a model or an error; an accepted model must
// resolve every tensor it lists to readable bytes and never one from outside the folder.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_temp_dir.h"
#include "rlx/formats/safetensors.h"

namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::abort();
}

// A safetensors file: 8-byte little-endian header length, JSON header, `n_data` bytes.
std::string safetensors(const std::string& header, size_t n_data) {
  std::string out(8, '\0');
  const uint64_t len = header.size();
  std::memcpy(out.data(), &len, 8);
  return out + header + std::string(n_data, '\x3c');
}

// <tmp>/model/{model-00001-of-00002.safetensors (a, b), model-00002-of-00002.safetensors (c),
// notes.txt, escape.safetensors -> ../outside.safetensors (tensor "outside")}; removed at exit.
struct Fixture {
  rlx::fuzz::TempDir root{"rlx_fuzz_st_index"};
  fs::path model = root.path / "model";
  Fixture() {
    fs::create_directory(model);
    write(model / "model-00001-of-00002.safetensors",
          safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})", 11));
    write(model / "model-00002-of-00002.safetensors",
          safetensors(R"({"c":{"dtype":"F16","shape":[1,2],"data_offsets":[0,4]}})", 4));
    write(model / "notes.txt", "not a safetensors file");
    write(root.path / "outside.safetensors", safetensors(R"({"outside":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1));
    fs::create_symlink("../outside.safetensors", model / "escape.safetensors");
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture fx;
  write(fx.model / "model.safetensors.index.json", std::string(reinterpret_cast<const char*>(data), size));
  rlx::Expected<rlx::formats::SafetensorsModel> m = rlx::formats::SafetensorsModel::open(fx.model.string());
  if (!m.has_value()) return 0;
  if (m->find("outside") != nullptr) __builtin_trap();  // a shard outside the folder was read
  uint64_t sum = 0;
  for (std::string_view name : m->tensor_names()) {
    const rlx::formats::SafetensorsTensor* t = m->find(name);
    if (t == nullptr || t->name != name) __builtin_trap();
    if (t->n_bytes > 0) sum += t->data[0] + t->data[t->n_bytes - 1];
  }
  for (const auto& [k, v] : m->index_metadata()) sum += k.size() + v.size();
  volatile uint64_t sink = sum;
  (void)sink;
  return 0;
}
