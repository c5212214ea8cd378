// Qwen3-Next (HF model_type qwen3_next) as the Qwen3.5 template: its config.json read with
// its own defaults, its grouped delta-net projections (in_proj_qkvz, in_proj_ba) served
// regrouped as Qwen3.5's tensors — checked row by row against a hand-built checkpoint —
// and bad checkpoints refused with the tensor or key named. Every file is written by the
// test; the numerics against transformers are the HF conformance suite's.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "rlx/base/half.h"
#include "rlx/formats/gguf.h"
#include "rlx/formats/gguf_writer.h"
#include "rlx/formats/quant.h"
#include "rlx/models/convert.h"
#include "rlx/models/model_config.h"
#include "rlx/models/weight_source.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "rlx_qwen3_next_test" / name;
  fs::create_directories(dir);
  return dir;
}

// One tensor of a hand-written safetensors file: F32 or BF16 (values exact in bf16).
struct StTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

void write_safetensors(const fs::path& path, const std::vector<StTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<uint8_t> data;
  for (const StTensor& t : tensors) {
    const size_t begin = data.size();
    for (float v : t.values) {
      uint8_t bytes[4];
      if (t.dtype == "F32") {
        std::memcpy(bytes, &v, 4);
        data.insert(data.end(), bytes, bytes + 4);
      } else {
        const uint16_t b = f32_to_bf16_bits(v);
        std::memcpy(bytes, &b, 2);
        data.insert(data.end(), bytes, bytes + 2);
      }
    }
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string h = header.dump();
  const uint64_t n = h.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

// A stored matrix whose row i holds i + col / 4 (exact in f32 and bf16): a served row's
// first value names the stored row it came from.
StTensor numbered(const std::string& name, const std::string& dtype, int64_t rows, int64_t cols) {
  StTensor t{name, dtype, {rows, cols}, {}};
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t.values.push_back(static_cast<float>(i) + 0.25f * static_cast<float>(j));
  return t;
}

// A small qwen3_next config.json: hidden 4, a delta-net layer then an attention layer,
// 2 key heads of 2 and 4 value heads of 3 (2 value heads per key head); `extra` members
// are appended (a later duplicate key wins).
fs::path write_config(const std::string& name, const std::string& extra = "") {
  const fs::path dir = temp_dir(name);
  std::ofstream(dir / "config.json") << R"({"model_type": "qwen3_next", "vocab_size": 16, "hidden_size": 4,
    "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 8,
    "layer_types": ["linear_attention", "full_attention"], "linear_conv_kernel_dim": 4,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 2, "linear_value_head_dim": 3,
    "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 6,
    "shared_expert_intermediate_size": 5)" << (extra.empty() ? "" : ", ") << extra << "}";
  return dir;
}

std::vector<float> rows_of(const WeightView& w) {  // the first value of each served row
  std::vector<float> out;
  const int64_t cols = w.shape[1];
  for (int64_t i = 0; i < w.shape[0]; ++i) {
    const size_t at = static_cast<size_t>(i * cols);
    if (w.dtype == ir::DType::F32) {
      float v;
      std::memcpy(&v, w.bytes.data() + 4 * at, 4);
      out.push_back(v);
    } else {
      uint16_t b;
      std::memcpy(&b, w.bytes.data() + 2 * at, 2);
      out.push_back(bf16_bits_to_f32(b));
    }
  }
  return out;
}

TEST(Qwen3NextConfig, ReadsAsTheQwen35TemplateWithItsDefaults) {
  auto c = config_from_hf((write_config("defaults") / "config.json").string());
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->arch, Arch::Qwen35);
  EXPECT_TRUE(c->ssm_grouped_projections);
  EXPECT_TRUE(c->attn_output_gate);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_TRUE(c->layer_is_recurrent(0));
  EXPECT_FALSE(c->layer_is_recurrent(1));
  EXPECT_EQ(c->head_dim, 256);  // transformers' default for qwen3_next, not hidden / heads
  EXPECT_EQ(c->rope.n_rot, 64);  // partial_rotary_factor defaults to 0.25
  EXPECT_TRUE(c->expert_weights_norm);  // norm_topk_prob defaults to true
  EXPECT_EQ(c->n_expert, 4);
  EXPECT_EQ(c->n_ff_expert, 6);
  EXPECT_EQ(c->n_ff_shared, 5);
  EXPECT_TRUE(c->shared_expert_gate);
  EXPECT_TRUE(c->layer_is_moe(0) && c->layer_is_moe(1));

  auto stated = config_from_hf((write_config("stated", R"("head_dim": 8, "norm_topk_prob": false,
    "rope_parameters": {"rope_type": "default", "rope_theta": 5e4, "partial_rotary_factor": 0.5},
    "mlp_only_layers": [1])") / "config.json").string());
  ASSERT_TRUE(stated) << stated.error().to_string();
  EXPECT_EQ(stated->head_dim, 8);
  EXPECT_EQ(stated->rope.n_rot, 4);
  EXPECT_EQ(stated->rope.theta, 5e4);
  EXPECT_FALSE(stated->expert_weights_norm);
  EXPECT_TRUE(stated->layer_is_moe(0));
  EXPECT_FALSE(stated->layer_is_moe(1));

  auto dense = config_from_hf((write_config("dense", R"("num_experts": 0)") / "config.json").string());
  ASSERT_TRUE(dense) << dense.error().to_string();  // transformers builds the dense MLP in every layer
  EXPECT_EQ(dense->n_expert, 0);
  EXPECT_FALSE(dense->layer_is_moe(0));
}

// The stored rows each regrouped tensor serves, in order, for write_config's head counts:
// per key-head group (16 rows) q (2) | k (2) | v (2 heads x 3) | z (2 heads x 3), and b | a
// per group (2 + 2).
const std::pair<const char*, std::vector<float>> kRegroupedRows[] = {
    // [q of groups 0, 1 | k of groups 0, 1 | v of groups 0, 1]
    {"blk.0.attn_qkv.weight", {0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 6, 7, 8, 9, 20, 21, 22, 23, 24, 25}},
    {"blk.0.attn_gate.weight", {10, 11, 12, 13, 14, 15, 26, 27, 28, 29, 30, 31}},
    {"blk.0.ssm_beta.weight", {0, 1, 4, 5}},
    {"blk.0.ssm_alpha.weight", {2, 3, 6, 7}},
};

TEST(Qwen3NextWeights, GroupedProjectionsAreServedRegrouped) {
  for (const std::string dtype : {"F32", "BF16"}) {
    SCOPED_TRACE(dtype);
    const fs::path dir = write_config("regroup_" + dtype);
    // Per key-head group (16 rows): q (2) | k (2) | v (2 heads x 3) | z (2 heads x 3); b|a per group (2 + 2).
    write_safetensors(dir / "model.safetensors", {numbered("model.layers.0.linear_attn.in_proj_qkvz.weight", dtype, 32, 4),
                                                  numbered("model.layers.0.linear_attn.in_proj_ba.weight", dtype, 8, 4)});
    auto c = config_from_hf((dir / "config.json").string());
    ASSERT_TRUE(c) << c.error().to_string();
    auto src = SafetensorsWeightSource::open(dir.string(), *c);
    ASSERT_TRUE(src) << src.error().to_string();
    for (const auto& [name, rows] : kRegroupedRows) {
      SCOPED_TRACE(name);
      EXPECT_TRUE((*src)->has(name));
      auto w = (*src)->take(name);
      ASSERT_TRUE(w) << w.error().to_string();
      EXPECT_EQ(w->dtype, dtype == "F32" ? ir::DType::F32 : ir::DType::BF16);
      EXPECT_EQ(w->shape, (std::vector<int64_t>{static_cast<int64_t>(rows.size()), 4}));
      ASSERT_EQ(w->bytes.size(), rows.size() * 4 * (dtype == "F32" ? 4 : 2));
      EXPECT_EQ(rows_of(*w), rows);
      auto again = (*src)->take(name);  // the copy is made once and kept
      ASSERT_TRUE(again);
      EXPECT_EQ(again->bytes.data(), w->bytes.data());
    }
    // Each stored matrix is listed once per tensor served from it, so nothing is left unread.
    int qkvz = 0, ba = 0;
    for (const auto& [stored, gguf] : (*src)->stored_tensors()) {
      qkvz += stored == "model.layers.0.linear_attn.in_proj_qkvz.weight";
      ba += stored == "model.layers.0.linear_attn.in_proj_ba.weight";
    }
    EXPECT_EQ(qkvz, 2);
    EXPECT_EQ(ba, 2);
    EXPECT_TRUE(unused_tensors(**src, {"blk.0.attn_qkv.weight", "blk.0.attn_gate.weight", "blk.0.ssm_beta.weight",
                                       "blk.0.ssm_alpha.weight"}, {}).empty());
    const auto left = unused_tensors(**src, {"blk.0.attn_qkv.weight", "blk.0.ssm_beta.weight"}, {});
    EXPECT_EQ(left.size(), 2u);  // z and a unread: named as the stored tensor and what it serves
    for (const std::string& l : left) EXPECT_NE(l.find("(as blk.0."), std::string::npos) << l;
  }
}

TEST(Qwen3NextWeights, BadCheckpointsNameTheTensorOrKey) {
  auto expect_take_error = [](const fs::path& dir, const char* name, std::vector<std::string> needles) {
    auto c = config_from_hf((dir / "config.json").string());
    ASSERT_TRUE(c) << c.error().to_string();
    auto src = SafetensorsWeightSource::open(dir.string(), *c);
    ASSERT_TRUE(src) << src.error().to_string();
    auto w = (*src)->take(name);
    ASSERT_FALSE(w) << name << " was served";
    for (const std::string& n : needles) EXPECT_NE(w.error().message().find(n), std::string::npos) << w.error().to_string();
  };
  // in_proj_qkvz with 30 rows where the head counts need 32; in_proj_ba absent.
  const fs::path short_rows = write_config("short_rows");
  write_safetensors(short_rows / "model.safetensors", {numbered("model.layers.0.linear_attn.in_proj_qkvz.weight", "F32", 30, 4)});
  expect_take_error(short_rows, "blk.0.attn_gate.weight",
                    {"model.layers.0.linear_attn.in_proj_qkvz.weight", "[30, 4]", "32 rows", "linear_num_key_heads 2"});
  expect_take_error(short_rows, "blk.0.ssm_alpha.weight", {"model.layers.0.linear_attn.in_proj_ba.weight", "missing"});
  // A vector where a matrix belongs.
  const fs::path flat = write_config("flat");
  StTensor v = numbered("model.layers.0.linear_attn.in_proj_ba.weight", "F32", 32, 1);
  v.shape = {32};
  write_safetensors(flat / "model.safetensors", {v});
  expect_take_error(flat, "blk.0.ssm_beta.weight", {"in_proj_ba.weight", "[32]", "8 rows", "linear_num_value_heads 4"});

  // Head counts that do not group: the config is refused, naming them.
  const fs::path odd = write_config("odd_heads", R"("linear_num_value_heads": 3)");
  auto c = config_from_hf((odd / "config.json").string());
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("linear value heads are not a multiple"), std::string::npos) << c.error().to_string();
  // A hand-built config cannot slip past the source either.
  auto good = config_from_hf((write_config("hand_built") / "config.json").string());
  ASSERT_TRUE(good) << good.error().to_string();
  ModelConfig bad = *good;
  bad.ssm_n_v_heads = 3;
  auto src = SafetensorsWeightSource::open(short_rows.string(), bad);
  ASSERT_FALSE(src);
  EXPECT_NE(src.error().message().find("linear_num_key_heads"), std::string::npos) << src.error().to_string();
}

TEST(Qwen3NextGguf, GroupedProjectionsAreServedRegrouped) {
  // llama.cpp's qwen3next files keep in_proj_ba grouped by key head as ssm_ba (read as
  // ssm_beta_alpha too), and older ones in_proj_qkvz as ssm_in; quantized
  // rows are whole blocks, so they regroup as they are.
  auto c = config_from_hf((write_config("gguf") / "config.json").string());
  ASSERT_TRUE(c) << c.error().to_string();
  for (const formats::GgmlType type : {formats::GgmlType::F32, formats::GgmlType::Q8_0}) {
    SCOPED_TRACE(formats::ggml_type_name(type));
    const bool other_name = type == formats::GgmlType::Q8_0;
    formats::GgufWriter w;
    for (const auto& [name, rows] : {std::pair{std::string("blk.0.ssm_in.weight"), 32},
                                     {other_name ? "blk.0.ssm_beta_alpha.weight" : "blk.0.ssm_ba.weight", 8}}) {
      const StTensor t = numbered(name, "F32", rows, 32);
      ASSERT_TRUE(w.add_tensor_f32(name, type, {32, rows}, t.values).ok());
    }
    auto bytes = w.to_bytes();
    ASSERT_TRUE(bytes);
    auto file = formats::GgufFile::parse(std::move(*bytes), "qwen3next.gguf");
    ASSERT_TRUE(file) << file.error().to_string();
    auto src = regroup_delta_net_projections(
        std::make_unique<GgufWeightSource>(std::make_shared<const formats::GgufFile>(std::move(*file))), *c);
    for (const auto& [name, rows] : kRegroupedRows) {
      SCOPED_TRACE(name);
      EXPECT_TRUE(src->has(name));
      auto view = src->take(name);
      ASSERT_TRUE(view) << view.error().to_string();
      EXPECT_EQ(view->shape, (std::vector<int64_t>{static_cast<int64_t>(rows.size()), 32}));
      std::vector<float> values(static_cast<size_t>(rows.size() * 32));
      ASSERT_TRUE(formats::dequantize_row(type, view->bytes.data(), values.data(), static_cast<int64_t>(values.size())).ok());
      for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(std::round(values[i * 32]), rows[i]) << "row " << i;
    }
    // Both stored matrices are read, each through the two tensors served from it.
    EXPECT_TRUE(unused_tensors(*src, {"blk.0.attn_qkv.weight", "blk.0.attn_gate.weight", "blk.0.ssm_beta.weight",
                                      "blk.0.ssm_alpha.weight"}, {}).empty());
    // A matrix of the wrong row count names itself and the layout.
    formats::GgufWriter bad;
    ASSERT_TRUE(bad.add_tensor_f32("blk.0.ssm_in.weight", type, {32, 30}, numbered("x", "F32", 30, 32).values).ok());
    auto bad_file = formats::GgufFile::parse(std::move(*bad.to_bytes()), "bad.gguf");
    ASSERT_TRUE(bad_file);
    auto bad_src = regroup_delta_net_projections(
        std::make_unique<GgufWeightSource>(std::make_shared<const formats::GgufFile>(std::move(*bad_file))), *c);
    auto gate = bad_src->take("blk.0.attn_gate.weight");
    ASSERT_FALSE(gate);
    EXPECT_NE(gate.error().message().find("blk.0.ssm_in.weight"), std::string::npos) << gate.error().to_string();
    EXPECT_NE(gate.error().message().find("32 rows"), std::string::npos) << gate.error().to_string();
  }
}

TEST(Qwen3NextConvert, RefusesWhatGgufCannotSay) {
  ConvertOptions o;
  o.mix = "f32";
  // Experts chosen without renormalization cannot be said in GGUF (llama.cpp renormalizes).
  const fs::path moe = temp_dir("convert_moe");
  std::ofstream(moe / "config.json") << R"({"model_type": "qwen3_moe", "vocab_size": 16, "hidden_size": 4,
    "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8, "num_experts": 4,
    "num_experts_per_tok": 2, "moe_intermediate_size": 6, "norm_topk_prob": false})";
  write_safetensors(moe / "model.safetensors", {numbered("model.norm.weight", "F32", 1, 4)});
  const Status st_moe = convert_hf_to_gguf(moe.string(), (moe / "out.gguf").string(), o);
  ASSERT_FALSE(st_moe.ok());
  EXPECT_NE(st_moe.error().message().find("norm_topk_prob is false"), std::string::npos) << st_moe.error().to_string();
}

}  // namespace
}  // namespace rlx::models
