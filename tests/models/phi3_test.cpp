// Phi-3 from GGUF: the fused attn_qkv and ffn_up (gate | up) matrices are served as row
// views (f32 and Q8_0 blocks), the model runs with LongRoPE factors chosen by the
// context, and no stored tensor is left unread. (HF Phi-3 numerics: the conformance
// suite.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "rlx/formats/gguf.h"
#include "rlx/formats/gguf_writer.h"
#include "rlx/models/language_model.h"
#include "rlx/models/weight_source.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;
using formats::GgmlType;

// dim 64, 2 heads of 32 (as many KV heads, as in Phi-3), ffn 32, vocab 48, one layer,
// LongRoPE factors for an original context of 16; matrices in `type`.
std::string write_phi3(const std::string& name, GgmlType type) {
  formats::GgufWriter w;
  EXPECT_TRUE(w.add_string("general.architecture", "phi3").ok());
  EXPECT_TRUE(w.add_u32("phi3.embedding_length", 64).ok());
  EXPECT_TRUE(w.add_u32("phi3.block_count", 1).ok());
  EXPECT_TRUE(w.add_u32("phi3.attention.head_count", 2).ok());
  EXPECT_TRUE(w.add_u32("phi3.attention.head_count_kv", 2).ok());
  EXPECT_TRUE(w.add_u32("phi3.feed_forward_length", 32).ok());
  EXPECT_TRUE(w.add_u32("phi3.context_length", 256).ok());
  EXPECT_TRUE(w.add_u32("phi3.rope.dimension_count", 32).ok());
  EXPECT_TRUE(w.add_u32("phi3.rope.scaling.original_context_length", 16).ok());
  EXPECT_TRUE(w.add_f32("phi3.rope.scaling.attn_factor", 1.2f).ok());
  EXPECT_TRUE(w.add_u32("phi3.vocab_size", 48).ok());
  uint32_t seed = 5;
  auto values = [&](int64_t n, float center, float spread) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) {
      seed = seed * 1664525u + 1013904223u;
      x = center + spread * (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f);
    }
    return v;
  };
  auto matrix = [&](const std::string& n, int64_t cols, int64_t rows) {
    EXPECT_TRUE(w.add_tensor_f32(n, type, {cols, rows}, values(cols * rows, 0, 0.5f)).ok()) << n;
  };
  auto vec = [&](const std::string& n, int64_t len, float center) {
    EXPECT_TRUE(w.add_tensor_f32(n, GgmlType::F32, {len}, values(len, center, 0.2f)).ok()) << n;
  };
  matrix("token_embd.weight", 64, 48);
  vec("blk.0.attn_norm.weight", 64, 1);
  matrix("blk.0.attn_qkv.weight", 64, 3 * 64);
  matrix("blk.0.attn_output.weight", 64, 64);
  vec("blk.0.ffn_norm.weight", 64, 1);
  matrix("blk.0.ffn_up.weight", 64, 2 * 32);
  matrix("blk.0.ffn_down.weight", 32, 64);
  vec("output_norm.weight", 64, 1);
  matrix("output.weight", 64, 48);
  vec("rope_factors_short.weight", 16, 1.5f);
  vec("rope_factors_long.weight", 16, 8);
  const std::string path = (fs::temp_directory_path() / ("rlx_phi3_test_" + name + ".gguf")).string();
  EXPECT_TRUE(w.write_file(path).ok());
  return path;
}

TEST(Phi3, FusedProjectionsAreRowViews) {
  for (GgmlType type : {GgmlType::F32, GgmlType::Q8_0}) {
    const std::string path = write_phi3(type == GgmlType::F32 ? "f32" : "q8", type);
    auto file = formats::GgufFile::open(path);
    ASSERT_TRUE(file) << file.error().to_string();
    auto shared = std::make_shared<const formats::GgufFile>(std::move(*file));
    auto config = config_from_gguf(*shared);
    ASSERT_TRUE(config) << config.error().to_string();
    EXPECT_TRUE(config->fused_projections);
    EXPECT_EQ(config->rope.layout, ir::RopeLayout::Neox);
    auto source = split_fused_projections(std::make_unique<GgufWeightSource>(shared), *config);
    const formats::GgufTensor* qkv = shared->find_tensor("blk.0.attn_qkv.weight");
    const formats::GgufTensor* up = shared->find_tensor("blk.0.ffn_up.weight");
    ASSERT_TRUE(qkv && up);
    const size_t qkv_row = qkv->n_bytes / 192, up_row = up->n_bytes / 64;
    struct Part {
      const char* name;
      const formats::GgufTensor* from;
      size_t row_bytes;
      int64_t row0, rows;
    };
    const Part parts[] = {{"blk.0.attn_q.weight", qkv, qkv_row, 0, 64},
                          {"blk.0.attn_k.weight", qkv, qkv_row, 64, 64},
                          {"blk.0.attn_v.weight", qkv, qkv_row, 128, 64},
                          {"blk.0.ffn_gate.weight", up, up_row, 0, 32},
                          {"blk.0.ffn_up.weight", up, up_row, 32, 32}};
    for (const Part& p : parts) {
      auto v = source->take(p.name);
      ASSERT_TRUE(v) << v.error().to_string();
      EXPECT_EQ(v->shape, (std::vector<int64_t>{p.rows, 64})) << p.name;
      ASSERT_EQ(v->bytes.size(), static_cast<size_t>(p.rows) * p.row_bytes) << p.name;
      EXPECT_EQ(v->bytes.data(), p.from->data + p.row0 * static_cast<int64_t>(p.row_bytes)) << p.name;  // a view
    }
  }
}

TEST(Phi3, RunsWithLongRopeByContextAndReadsEveryTensor) {
  const std::string path = write_phi3("run", GgmlType::F32);
  auto logits = [&](int64_t ctx) {
    LoadOptions lo;
    lo.ctx = ctx;
    lo.threads = 1;
    auto m = LanguageModel::load(path, lo);
    EXPECT_TRUE(m) << m.error().to_string();
    if (!m) return std::vector<float>{};
    EXPECT_TRUE((*m)->unused_tensors().empty());
    auto out = (*m)->forward(std::vector<int32_t>{1, 9, 30, 4, 47, 12}, true);
    EXPECT_TRUE(out) << out.error().to_string();
    return out ? *out : std::vector<float>{};
  };
  const std::vector<float> short_ctx = logits(16), long_ctx = logits(64);
  ASSERT_EQ(short_ctx.size(), 6u * 48u);
  ASSERT_EQ(long_ctx.size(), short_ctx.size());
  double diff = 0;
  for (size_t i = 0; i < short_ctx.size(); ++i) {
    ASSERT_TRUE(std::isfinite(short_ctx[i]) && std::isfinite(long_ctx[i]));
    diff = std::max(diff, double(std::fabs(short_ctx[i] - long_ctx[i])));
  }
  EXPECT_GT(diff, 1e-4) << "a context past the original one rotates by the long factors";
}

// The fused matrices' row views are packed weights of their own in the folder of
// packed copies: a second backend (as a second process) maps each from the folder and
// gets the same logits as packing them (q, k and v are slices of one tensor of the
// same shape, so a name that left out the slice's offset would give all three q).
TEST(Phi3, RowViewsKeepTheirOwnPackedCopies) {
  const std::string path = write_phi3("packed", GgmlType::F32);
  const fs::path cache = fs::temp_directory_path() / ("rlx_phi3_packed_cache_" + std::to_string(::getpid()));
  fs::remove_all(cache);
  auto logits = [&](bool folder, int threads) {
    LoadOptions lo;
    lo.ctx = 32;
    lo.threads = threads;
    lo.compile_cache = folder;
    lo.cache_dir = cache.string();
    auto m = LanguageModel::load(path, lo);
    EXPECT_TRUE(m) << m.error().to_string();
    if (!m) return std::vector<float>{};
    auto out = (*m)->forward(std::vector<int32_t>{1, 9, 30, 4, 47, 12}, true);
    EXPECT_TRUE(out) << out.error().to_string();
    return out ? *out : std::vector<float>{};
  };
  const std::vector<float> packed_here = logits(false, 1), written = logits(true, 1), mapped = logits(true, 2);
  ASSERT_EQ(packed_here.size(), 6u * 48u);
  ASSERT_EQ(written.size(), packed_here.size());
  ASSERT_EQ(mapped.size(), packed_here.size());
  int files = 0;
  for (const auto& e : fs::directory_iterator(cache / "packed")) files += e.path().extension() == ".rlxpack" ? 1 : 0;
  EXPECT_GE(files, 7) << "q, k, v, output, gate, up, down";
  for (size_t i = 0; i < packed_here.size(); ++i) {
    ASSERT_NEAR(written[i], packed_here[i], 1e-4) << i;
    ASSERT_NEAR(mapped[i], packed_here[i], 1e-4) << i;
  }
  fs::remove_all(cache);
}

}  // namespace
}  // namespace rlx::models
