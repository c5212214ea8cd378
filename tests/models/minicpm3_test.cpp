// MiniCPM3 (HF model_type minicpm3): multi-head latent attention and MiniCPM's scales.
// Each test writes a small random checkpoint, runs it through LanguageModel (prefill and
// token by token through the KV cache) and compares the logits with a float64 forward
// written here from the model's description — q through its low-rank latent (or
// directly), keys and values expanded per head from one latent with a rotary part every
// head shares, embeddings / residual branches / final state scaled. Value heads wider and
// narrower than the query / key heads exercise the padding the attention block uses. The
// same checkpoint converted to GGUF must give the same logits; bad configs name the key.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "rlx/models/convert.h"
#include "rlx/models/language_model.h"
#include "rlx/models/model_config.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;
using Mat = std::vector<double>;  // row-major

struct Shape {
  int64_t vocab = 40, dim = 24, layers = 2, heads = 3, ff = 20;
  int64_t q_rank = 12, kv_rank = 8, nope = 6, rope = 4, v = 10;
  double scale_emb = 3.0, scale_depth = 1.3, dim_base = 8.0, theta = 10000.0;
  double eps = 0.02;  // the model's norms; the latent norms use transformers' default, 1e-6
};

struct Weights {
  std::map<std::string, std::pair<std::vector<int64_t>, Mat>> t;
  const Mat& operator[](const std::string& n) const { return t.at(n).second; }
};

Weights random_weights(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 0.3);
  Weights w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool norm = false) {
    Mat m(static_cast<size_t>(shape[0] * (shape.size() > 1 ? shape[1] : 1)));
    for (double& x : m) x = static_cast<float>(norm ? 1.0 + 0.2 * normal(rng) : normal(rng));  // f32-exact
    w.t[name] = {std::move(shape), std::move(m)};
  };
  const int64_t qk = s.nope + s.rope;
  add("model.embed_tokens.weight", {s.vocab, s.dim});
  add("model.norm.weight", {s.dim}, true);
  add("lm_head.weight", {s.vocab, s.dim});
  for (int64_t il = 0; il < s.layers; ++il) {
    const std::string p = "model.layers." + std::to_string(il) + ".";
    add(p + "input_layernorm.weight", {s.dim}, true);
    add(p + "post_attention_layernorm.weight", {s.dim}, true);
    if (s.q_rank > 0) {
      add(p + "self_attn.q_a_proj.weight", {s.q_rank, s.dim});
      add(p + "self_attn.q_a_layernorm.weight", {s.q_rank}, true);
      add(p + "self_attn.q_b_proj.weight", {s.heads * qk, s.q_rank});
    } else {
      add(p + "self_attn.q_proj.weight", {s.heads * qk, s.dim});
    }
    add(p + "self_attn.kv_a_proj_with_mqa.weight", {s.kv_rank + s.rope, s.dim});
    add(p + "self_attn.kv_a_layernorm.weight", {s.kv_rank}, true);
    add(p + "self_attn.kv_b_proj.weight", {s.heads * (s.nope + s.v), s.kv_rank});
    add(p + "self_attn.o_proj.weight", {s.dim, s.heads * s.v});
    add(p + "mlp.gate_proj.weight", {s.ff, s.dim});
    add(p + "mlp.up_proj.weight", {s.ff, s.dim});
    add(p + "mlp.down_proj.weight", {s.dim, s.ff});
  }
  return w;
}

// The folder: config.json and model.safetensors. Its header is not padded to 8 bytes (as
// the safetensors writer pads it), so the f32 data sits at unaligned addresses and the
// weight source serves aligned copies; UBSan in CI checks that no kernel reads the file.
fs::path write_folder(const std::string& name, const Shape& s, const Weights& w, const std::string& extra = "") {
  const fs::path dir = fs::temp_directory_path() / "rlx_minicpm3_test" / name;
  fs::create_directories(dir);
  nlohmann::json c = {{"model_type", "minicpm3"},       {"vocab_size", s.vocab},
                      {"hidden_size", s.dim},           {"intermediate_size", s.ff},
                      {"num_hidden_layers", s.layers},  {"num_attention_heads", s.heads},
                      {"num_key_value_heads", s.heads}, {"kv_lora_rank", s.kv_rank},
                      {"qk_nope_head_dim", s.nope},     {"qk_rope_head_dim", s.rope},
                      {"v_head_dim", s.v},              {"scale_emb", s.scale_emb},
                      {"scale_depth", s.scale_depth},   {"dim_model_base", s.dim_base},
                      {"rms_norm_eps", s.eps},          {"max_position_embeddings", 64},
                      {"head_dim", s.rope},             {"rope_theta", s.theta},
                      {"tie_word_embeddings", false}};
  c["q_lora_rank"] = s.q_rank > 0 ? nlohmann::json(s.q_rank) : nlohmann::json(nullptr);
  if (!extra.empty()) {  // each member set as given (null included; a JSON merge patch would drop it)
    const nlohmann::json edits = nlohmann::json::parse(extra);
    for (const auto& [k, v] : edits.items()) c[k] = v;
  }
  std::ofstream(dir / "config.json") << c.dump();
  nlohmann::json header = nlohmann::json::object();
  std::vector<uint8_t> data;
  for (const auto& [n, sv] : w.t) {
    const size_t begin = data.size();
    for (double x : sv.second) {
      const float f = static_cast<float>(x);
      uint8_t b[4];
      std::memcpy(b, &f, 4);
      data.insert(data.end(), b, b + 4);
    }
    header[n] = {{"dtype", "F32"}, {"shape", sv.first}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = header.dump();
  if ((8 + h.size()) % 4 == 0) h += ' ';  // (JSON's whitespace) the data starts unaligned
  const uint64_t len = h.size();
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  return dir;
}

// y[rows, out] = x[rows, in] . W[out, in]^T
Mat linear(const Mat& x, const Mat& wt, int64_t in, int64_t out) {
  const int64_t rows = static_cast<int64_t>(x.size()) / in;
  Mat y(static_cast<size_t>(rows * out), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * wt[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

Mat rms_norm(const Mat& x, const Mat& g, int64_t n, double eps = 1e-6) {  // (1e-6: the latent norms)
  Mat y(x.size());
  for (size_t r = 0; r < x.size() / static_cast<size_t>(n); ++r) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += x[r * n + i] * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * inv * g[i];
  }
  return y;
}

// Rotates v[0..d) (HF's rotate_half pairs (i, i + d/2)) for position `pos`.
void rotate(double* v, int64_t d, int64_t pos, double theta) {
  for (int64_t i = 0; i < d / 2; ++i) {
    const double a = static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    const double x0 = v[i], x1 = v[i + d / 2];
    v[i] = x0 * std::cos(a) - x1 * std::sin(a);
    v[i + d / 2] = x1 * std::cos(a) + x0 * std::sin(a);
  }
}

// The float64 forward: logits [T, vocab] with full causal attention.
Mat reference_logits(const Shape& s, const Weights& w, const std::vector<int32_t>& tokens) {
  const int64_t T = static_cast<int64_t>(tokens.size()), D = s.dim, H = s.heads, qk = s.nope + s.rope;
  const double rs = s.scale_depth / std::sqrt(static_cast<double>(s.layers));
  Mat x(static_cast<size_t>(T * D));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D; ++i) x[t * D + i] = w["model.embed_tokens.weight"][tokens[t] * D + i] * s.scale_emb;
  for (int64_t il = 0; il < s.layers; ++il) {
    const std::string p = "model.layers." + std::to_string(il) + ".";
    const Mat h = rms_norm(x, w[p + "input_layernorm.weight"], D, s.eps);
    const Mat q = s.q_rank > 0 ? linear(rms_norm(linear(h, w[p + "self_attn.q_a_proj.weight"], D, s.q_rank),
                                                 w[p + "self_attn.q_a_layernorm.weight"], s.q_rank),
                                        w[p + "self_attn.q_b_proj.weight"], s.q_rank, H * qk)
                               : linear(h, w[p + "self_attn.q_proj.weight"], D, H * qk);
    const Mat ckv = linear(h, w[p + "self_attn.kv_a_proj_with_mqa.weight"], D, s.kv_rank + s.rope);
    Mat latent(static_cast<size_t>(T * s.kv_rank)), k_pe(static_cast<size_t>(T * s.rope));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < s.kv_rank; ++i) latent[t * s.kv_rank + i] = ckv[t * (s.kv_rank + s.rope) + i];
      for (int64_t i = 0; i < s.rope; ++i) k_pe[t * s.rope + i] = ckv[t * (s.kv_rank + s.rope) + s.kv_rank + i];
      rotate(&k_pe[t * s.rope], s.rope, t, s.theta);
    }
    const Mat kv = linear(rms_norm(latent, w[p + "self_attn.kv_a_layernorm.weight"], s.kv_rank),
                          w[p + "self_attn.kv_b_proj.weight"], s.kv_rank, H * (s.nope + s.v));
    Mat qr = q;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hh = 0; hh < H; ++hh) rotate(&qr[(t * H + hh) * qk + s.nope], s.rope, t, s.theta);
    Mat o(static_cast<size_t>(T * H * s.v), 0.0);
    for (int64_t hh = 0; hh < H; ++hh)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> score(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int64_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (int64_t i = 0; i < s.nope; ++i) dot += qr[(t * H + hh) * qk + i] * kv[(u * H + hh) * (s.nope + s.v) + i];
          for (int64_t i = 0; i < s.rope; ++i) dot += qr[(t * H + hh) * qk + s.nope + i] * k_pe[u * s.rope + i];
          score[u] = dot / std::sqrt(static_cast<double>(qk));
          mx = std::max(mx, score[u]);
        }
        double sum = 0;
        for (double& e : score) sum += (e = std::exp(e - mx));
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t i = 0; i < s.v; ++i)
            o[(t * H + hh) * s.v + i] += score[u] / sum * kv[(u * H + hh) * (s.nope + s.v) + s.nope + i];
      }
    const Mat attn = linear(o, w[p + "self_attn.o_proj.weight"], H * s.v, D);
    for (size_t i = 0; i < x.size(); ++i) x[i] += attn[i] * rs;
    const Mat h2 = rms_norm(x, w[p + "post_attention_layernorm.weight"], D, s.eps);
    Mat g = linear(h2, w[p + "mlp.gate_proj.weight"], D, s.ff);
    const Mat u = linear(h2, w[p + "mlp.up_proj.weight"], D, s.ff);
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    const Mat f = linear(g, w[p + "mlp.down_proj.weight"], s.ff, D);
    for (size_t i = 0; i < x.size(); ++i) x[i] += f[i] * rs;
  }
  Mat hn = rms_norm(x, w["model.norm.weight"], D, s.eps);
  for (double& v : hn) v /= static_cast<double>(D) / s.dim_base;
  return linear(hn, w["lm_head.weight"], D, s.vocab);
}

double worst_relative_l2(const std::vector<float>& got, const Mat& ref, int64_t vocab) {
  EXPECT_EQ(got.size(), ref.size());
  if (got.size() != ref.size()) return INFINITY;
  double worst = 0;
  for (size_t r = 0; r < ref.size() / static_cast<size_t>(vocab); ++r) {
    double num = 0, den = 0;
    for (int64_t j = 0; j < vocab; ++j) {
      const double d = got[r * vocab + j] - ref[r * vocab + j];
      num += d * d;
      den += ref[r * vocab + j] * ref[r * vocab + j];
    }
    worst = std::max(worst, std::sqrt(num / den));
  }
  return worst;
}

LoadOptions options() {
  LoadOptions lo;
  lo.ctx = 32;
  lo.threads = 1;
  lo.compile_cache = false;
  return lo;
}

// The prefill of every row, then token by token through the cache, against the reference.
void expect_matches(const std::string& path, const Shape& s, const Mat& ref, const std::vector<int32_t>& tokens) {
  auto model = LanguageModel::load(path, options());
  ASSERT_TRUE(model) << model.error().to_string();
  auto all = (*model)->forward(tokens, /*all_rows=*/true);
  ASSERT_TRUE(all) << all.error().to_string();
  EXPECT_LE(worst_relative_l2(*all, ref, s.vocab), 1e-5) << path << " prefill";
  (*model)->reset();
  std::vector<float> inc;
  for (int32_t t : tokens) {
    auto r = (*model)->forward(std::span<const int32_t>(&t, 1), true);
    ASSERT_TRUE(r) << r.error().to_string();
    inc.insert(inc.end(), r->begin(), r->end());
  }
  EXPECT_LE(worst_relative_l2(inc, ref, s.vocab), 1e-5) << path << " token by token";
}

const std::vector<int32_t> kTokens = {1, 7, 33, 2, 19, 19, 5, 38, 11, 0, 27};

struct Case {
  const char* name;
  Shape shape;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class MiniCPM3 : public ::testing::TestWithParam<Case> {};

TEST_P(MiniCPM3, MatchesAFloat64ForwardFromTheFolderAndItsGguf) {
  const Case& c = GetParam();
  const Weights w = random_weights(c.shape, 7);
  const fs::path dir = write_folder(c.name, c.shape, w);
  const Mat ref = reference_logits(c.shape, w, kTokens);
  expect_matches(dir.string(), c.shape, ref, kTokens);
  ConvertOptions o;
  o.mix = "f32";
  const std::string gguf = (dir / "model.gguf").string();
  const Status st = convert_hf_to_gguf(dir.string(), gguf, o);
  ASSERT_TRUE(st.ok()) << st.error().to_string();
  expect_matches(gguf, c.shape, ref, kTokens);
  fs::remove_all(dir);
}

Shape with(std::function<void(Shape&)> edit) {
  Shape s;
  edit(s);
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MiniCPM3,
    ::testing::Values(Case{"equal_widths", with([](Shape&) {})},  // v 10 = nope 6 + rope 4
                      Case{"values_wider_than_keys", with([](Shape& s) { s.v = 14; })},
                      Case{"values_narrower_than_keys", with([](Shape& s) { s.v = 5; })},
                      Case{"q_without_latent", with([](Shape& s) { s.q_rank = 0; })},
                      Case{"rope_only_keys", with([](Shape& s) { s.nope = 0; s.rope = 8; s.v = 8; })}),
    [](const auto& info) { return std::string(info.param.name); });

// On a CPU tensor-parallel group (cpu:0,1) each rank expands the shared latent into its
// half of the heads: the same logits as the reference, prefill and token by token.
TEST(MiniCPM3TensorParallel, GroupMatchesTheReference) {
  const Shape s = with([](Shape& x) { x.heads = 4; x.v = 14; });
  const Weights w = random_weights(s, 5);
  const fs::path dir = write_folder("tensor_parallel", s, w);
  const Mat ref = reference_logits(s, w, kTokens);
  LoadOptions lo = options();
  lo.device = *Device::parse("cpu:0,1");
  auto model = LanguageModel::load(dir.string(), lo);
  ASSERT_TRUE(model) << model.error().to_string();
  auto all = (*model)->forward(kTokens, /*all_rows=*/true);
  ASSERT_TRUE(all) << all.error().to_string();
  EXPECT_LE(worst_relative_l2(*all, ref, s.vocab), 1e-5);
  (*model)->reset();
  std::vector<float> inc;
  for (int32_t t : kTokens) {
    auto r = (*model)->forward(std::span<const int32_t>(&t, 1), true);
    ASSERT_TRUE(r) << r.error().to_string();
    inc.insert(inc.end(), r->begin(), r->end());
  }
  EXPECT_LE(worst_relative_l2(inc, ref, s.vocab), 1e-5);
  ASSERT_NE((*model)->last_executable(), nullptr);
  EXPECT_NE((*model)->last_executable()->executable().describe().find("tensor parallel over cpu:0,1"), std::string::npos);
  fs::remove_all(dir);
}

TEST(MiniCPM3Config, ReadsLatentSizesAndScales) {
  const Shape s;
  const fs::path dir = write_folder("config", s, random_weights(s, 1));
  auto c = config_from_hf((dir / "config.json").string());
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->arch, Arch::MiniCPM3);
  EXPECT_EQ(c->head_dim, s.nope + s.rope);  // not the file's head_dim (the rope part)
  EXPECT_EQ(c->rope.n_rot, s.rope);
  EXPECT_EQ(c->latent_q_rank, s.q_rank);
  EXPECT_EQ(c->latent_kv_rank, s.kv_rank);
  EXPECT_EQ(c->v_head_dim, s.v);
  EXPECT_EQ(c->kv_width(), s.heads * std::max(s.nope + s.rope, s.v));
  EXPECT_DOUBLE_EQ(c->embedding_scale, s.scale_emb);
  EXPECT_DOUBLE_EQ(c->residual_scale, s.scale_depth / std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(c->logit_scale, 24.0 / 8.0);
  fs::remove_all(dir);
}

TEST(MiniCPM3Config, BadConfigsNameTheKey) {
  const Shape s;
  const Weights w = random_weights(s, 1);
  const std::pair<const char*, const char*> cases[] = {
      {R"({"num_key_value_heads": 1})", "num_key_value_heads"},
      {R"({"kv_lora_rank": null})", "kv_lora_rank"},
      {R"({"kv_lora_rank": 0})", "kv_lora_rank"},
      {R"({"qk_rope_head_dim": 0})", "qk_rope_head_dim"},
      {R"({"qk_rope_head_dim": 5})", "qk_rope_head_dim"},
      {R"({"dim_model_base": 0})", "dim_model_base"},
      {R"({"scale_emb": "12"})", "scale_emb"},
      {R"({"attention_bias": true})", "attention_bias"},
      {R"({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                             "mscale_all_dim": 1.0}})", "mscale_all_dim"},
  };
  for (const auto& [edit, key] : cases) {
    const fs::path dir = write_folder("bad", s, w, edit);
    auto c = config_from_hf((dir / "config.json").string());
    ASSERT_FALSE(c) << edit;
    EXPECT_NE(c.error().to_string().find(key), std::string::npos) << c.error().to_string();
    fs::remove_all(dir);
  }
}

// Absent keys take transformers' MiniCPM3Config defaults (MiniCPM3-4B's); null ones its
// no-op meanings.
TEST(MiniCPM3Config, AbsentAndNullKeysFollowTransformers) {
  const Shape s;
  const Weights w = random_weights(s, 1);
  const fs::path dir = write_folder("defaults", s, w);
  nlohmann::json c = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  for (const char* key : {"scale_emb", "scale_depth", "dim_model_base", "q_lora_rank", "rms_norm_eps",
                          "tie_word_embeddings", "v_head_dim", "qk_nope_head_dim", "qk_rope_head_dim", "kv_lora_rank"})
    c.erase(key);
  std::ofstream(dir / "config.json") << c.dump();
  auto d = config_from_hf((dir / "config.json").string());
  ASSERT_TRUE(d) << d.error().to_string();
  EXPECT_DOUBLE_EQ(d->embedding_scale, 12.0);
  EXPECT_DOUBLE_EQ(d->residual_scale, 1.4 / std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(d->logit_scale, 24.0 / 256.0);
  EXPECT_EQ(d->latent_q_rank, 768);
  EXPECT_EQ(d->latent_kv_rank, 256);
  EXPECT_EQ(d->head_dim, 64 + 32);
  EXPECT_EQ(d->rope.n_rot, 32);
  EXPECT_EQ(d->v_head_dim, 24 / 3);
  EXPECT_DOUBLE_EQ(d->norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(d->latent_norm_eps, 1e-6);
  EXPECT_TRUE(d->tied_embeddings);
  c["q_lora_rank"] = nullptr;
  c["scale_depth"] = nullptr;
  c["dim_model_base"] = nullptr;
  c["v_head_dim"] = nullptr;
  std::ofstream(dir / "config.json") << c.dump();
  auto n = config_from_hf((dir / "config.json").string());
  ASSERT_TRUE(n) << n.error().to_string();
  EXPECT_EQ(n->latent_q_rank, 0);  // q projected directly
  EXPECT_DOUBLE_EQ(n->residual_scale, 1.0);
  EXPECT_DOUBLE_EQ(n->logit_scale, 1.0);
  EXPECT_EQ(n->v_head_dim, 24 / 3);
  fs::remove_all(dir);
}

TEST(MiniCPM3Weights, AWrongLatentShapeNamesTheTensor) {
  Shape s;
  Weights w = random_weights(s, 3);
  w.t["model.layers.1.self_attn.kv_b_proj.weight"].first = {s.heads * (s.nope + s.v) - 1, s.kv_rank};
  w.t["model.layers.1.self_attn.kv_b_proj.weight"].second.resize(static_cast<size_t>((s.heads * (s.nope + s.v) - 1) * s.kv_rank));
  const fs::path dir = write_folder("bad_shape", s, w);
  auto model = LanguageModel::load(dir.string(), options());
  std::string error;
  if (!model) {
    error = model.error().to_string();
  } else {
    auto r = (*model)->forward(kTokens, false);
    ASSERT_FALSE(r);
    error = r.error().to_string();
  }
  EXPECT_NE(error.find("blk.1.attn_kv_b.weight"), std::string::npos) << error;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rlx::models
