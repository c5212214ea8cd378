// Writes the fuzzers' seed corpus: a few tiny valid GGUF files made with GgufWriter
// (all metadata types, several tensor types, a non-default alignment) and tiny
// safetensors files. Usage: rlx_fuzz_make_corpus <corpus-dir>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "rlx/formats/gguf_writer.h"

namespace {

namespace fs = std::filesystem;
using rlx::formats::GgmlType;
using rlx::formats::GgufMetaValue;
using rlx::formats::GgufValueType;
using rlx::formats::GgufWriter;

bool write(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

bool write_gguf(const fs::path& path, const GgufWriter& w) {
  rlx::Expected<std::vector<uint8_t>> bytes = w.to_bytes();
  return bytes.has_value() && write(path, *bytes);
}

std::vector<uint8_t> safetensors(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8);
  const uint64_t len = header.size();
  std::memcpy(out.data(), &len, 8);
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes, 0x3c);
  return out;
}

bool make_gguf_seeds(const fs::path& dir) {
  GgufWriter meta;
  bool ok = meta.add("u8", GgufMetaValue::u8(1)).ok() && meta.add("i8", GgufMetaValue::i8(-1)).ok() &&
            meta.add("u16", GgufMetaValue::u16(2)).ok() && meta.add("i16", GgufMetaValue::i16(-2)).ok() &&
            meta.add_u32("u32", 3).ok() && meta.add_i32("i32", -3).ok() && meta.add_f32("f32", 0.5f).ok() &&
            meta.add_bool("bool", true).ok() && meta.add_string("general.architecture", "llama").ok() &&
            meta.add_u64("u64", 4).ok() && meta.add("i64", GgufMetaValue::i64(-4)).ok() &&
            meta.add("f64", GgufMetaValue::f64(0.25)).ok() &&
            meta.add_string_array("tokenizer.ggml.tokens", {"<s>", "a", "b"}).ok() &&
            meta.add_f32_array("tokenizer.ggml.scores", {0.0f, -1.0f, -2.0f}).ok() &&
            meta.add("nested", GgufMetaValue::array(GgufValueType::kArray,
                                                    {GgufMetaValue::array(GgufValueType::kU8, {GgufMetaValue::u8(7)})}))
                .ok();
  ok = ok && write_gguf(dir / "metadata_only.gguf", meta);

  std::vector<float> values(512);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 17) - 8.0f;
  GgufWriter tensors;
  ok = ok && tensors.add_string("general.architecture", "llama").ok() &&
       tensors.add_tensor_f32("norm.weight", GgmlType::F32, {4}, std::span<const float>(values).first(4)).ok() &&
       tensors.add_tensor_f32("f16.weight", GgmlType::F16, {8, 2}, std::span<const float>(values).first(16)).ok() &&
       tensors.add_tensor_f32("q8.weight", GgmlType::Q8_0, {32, 2}, std::span<const float>(values).first(64)).ok() &&
       tensors.add_tensor_f32("q4k.weight", GgmlType::Q4_K, {256}, std::span<const float>(values).first(256)).ok() &&
       tensors.add_tensor_f32("q6k.weight", GgmlType::Q6_K, {256}, std::span<const float>(values).first(256)).ok();
  ok = ok && write_gguf(dir / "tensors.gguf", tensors);

  GgufWriter aligned;
  ok = ok && aligned.set_alignment(64).ok() &&
       aligned.add_tensor_f32("a", GgmlType::Q4_0, {32}, std::span<const float>(values).first(32)).ok() &&
       aligned.add_tensor_f32("b", GgmlType::BF16, {3}, std::span<const float>(values).first(3)).ok();
  return ok && write_gguf(dir / "aligned64.gguf", aligned);
}

bool make_safetensors_seeds(const fs::path& dir) {
  return write(dir / "two_tensors.safetensors",
               safetensors(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                           R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}})",
                           22)) &&
         write(dir / "empty.safetensors", safetensors("{}", 0)) &&
         write(dir / "dtypes.safetensors",
               safetensors(R"({"f64":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
                           R"("i32":{"dtype":"I32","shape":[1],"data_offsets":[8,12]},)"
                           R"("u8":{"dtype":"U8","shape":[2],"data_offsets":[12,14]},)"
                           R"("b":{"dtype":"BOOL","shape":[1,1],"data_offsets":[14,15]}})",
                           15));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus-dir>\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  fs::create_directories(root / "rlx_fuzz_gguf");
  fs::create_directories(root / "rlx_fuzz_safetensors");
  if (!make_gguf_seeds(root / "rlx_fuzz_gguf") || !make_safetensors_seeds(root / "rlx_fuzz_safetensors")) {
    std::fprintf(stderr, "failed to write the seed corpus under %s\n", argv[1]);
    return 1;
  }
  return 0;
}
