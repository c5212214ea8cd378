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
#include "rlx/ir/binary.h"
#include "rlx/ir/builder.h"

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

// LIR blobs: a small graph with a plan and manifest, and one with constants, a region
// and a symbolic dim.
bool make_lir_seeds(const fs::path& dir) {
  using namespace rlx::ir;
  auto save = [&](const char* name, LirModule m) {
    const std::string blob = encode_lir_binary(m);
    std::ofstream f(dir / name, std::ios::binary);
    f.write(blob.data(), static_cast<std::streamsize>(blob.size()));
    return static_cast<bool>(f);
  };
  GraphBuilder b;
  const ValueId x = b.input("x", DType::F32, Shape{Dim(4), Dim(8)});
  const ValueId g = b.param("g", DType::F32, Shape{Dim(8)});
  const ValueId y = b.rms_norm(b.add(x, b.scalar(1.0f)), g, 1e-5);
  b.output(b.reshape(y, Shape{Dim(32)}), "y");
  LirModule small;
  small.graph = std::move(b.build()).value();
  small.plan.arena_size = 256;
  for (ValueId v = 0; v < small.graph.size(); ++v) {
    small.plan.slots.push_back({SlotKind::kArena, 0, 128, kNoValue});
    small.plan.schedule.push_back(v);
  }
  small.manifest.inputs.push_back({"x", x, small.graph.node(x).type(), 128, small.plan.slots[0]});
  GraphBuilder s;
  const ValueId q = s.input("q", DType::F16, Shape{Dim::symbol("SEQ"), Dim(16)});
  const ValueId pos = s.input("pos", DType::I32, Shape{Dim::symbol("SEQ")});
  RopeAttrs r;
  r.head_dim = 8;
  r.n_rot = 8;
  s.output(s.activation(ActKind::Silu, s.rope(q, pos, r)), "o");
  LirModule sym;
  sym.graph = std::move(s.build()).value();
  sym.dynamic_symbols.push_back(intern_symbol("SEQ"));
  return save("small.lir", std::move(small)) && save("symbolic.lir", std::move(sym));
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
  fs::create_directories(root / "rlx_fuzz_lir_binary");
  if (!make_gguf_seeds(root / "rlx_fuzz_gguf") || !make_safetensors_seeds(root / "rlx_fuzz_safetensors") ||
      !make_lir_seeds(root / "rlx_fuzz_lir_binary")) {
    std::fprintf(stderr, "failed to write the seed corpus under %s\n", argv[1]);
    return 1;
  }
  return 0;
}
