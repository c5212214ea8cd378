// The Flow block API: a family composed by hand equals build_decoder's graph, a
// GPT-2-style composition (LayerNorm with bias, no RoPE, plain GELU FFN, tied head)
// computes what a float64 reference of the same blocks computes, and a weight whose
// shape differs from what a block needs is an error naming the tensor.
#include "rlx/models/flow.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "rlx/models/decoder.h"
#include "rlx/runtime/session.h"

namespace rlx::models {
namespace {

using ir::ValueId;

// f32 tensors held in memory, served under their names.
class MapSource : public WeightSource {
 public:
  void add(const std::string& name, std::vector<int64_t> shape, uint32_t seed, float lo = -0.5f, float hi = 0.5f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    tensors_[name] = {std::move(shape), std::move(v)};
  }
  const std::vector<float>& values(const std::string& name) const { return tensors_.at(name).second; }
  bool has(std::string_view name) const override { return tensors_.count(std::string(name)) != 0; }
  Expected<WeightView> take(std::string_view name) const override {
    auto it = tensors_.find(std::string(name));
    if (it == tensors_.end()) return Error::not_found("memory: no tensor '{}'", name);
    const auto& [shape, v] = it->second;
    return WeightView{it->first, ir::DType::F32, shape,
                      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4), nullptr};
  }
  std::string describe() const override { return "memory"; }
  std::vector<std::pair<std::string, std::string>> stored_tensors() const override {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [name, t] : tensors_) out.emplace_back(name, name);
    return out;
  }
  const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>& all() const { return tensors_; }

 private:
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> tensors_;
};

ModelConfig tiny_llama() {
  ModelConfig c;
  c.n_vocab = 17;
  c.n_embd = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 4;
  c.n_ff = 24;
  c.rope.head_dim = 4;
  c.rope.n_rot = 4;
  c.tied_embeddings = true;
  return c;
}

MapSource llama_weights(const ModelConfig& c) {
  MapSource w;
  uint32_t seed = 1;
  w.add("token_embd.weight", {c.n_vocab, c.n_embd}, seed++);
  w.add("output_norm.weight", {c.n_embd}, seed++, 0.5f, 1.5f);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string b = fmt::format("blk.{}.", il);
    w.add(b + "attn_norm.weight", {c.n_embd}, seed++, 0.5f, 1.5f);
    w.add(b + "ffn_norm.weight", {c.n_embd}, seed++, 0.5f, 1.5f);
    w.add(b + "attn_q.weight", {c.n_head * c.head_dim, c.n_embd}, seed++);
    w.add(b + "attn_k.weight", {c.n_head_kv * c.head_dim, c.n_embd}, seed++);
    w.add(b + "attn_v.weight", {c.n_head_kv * c.head_dim, c.n_embd}, seed++);
    w.add(b + "attn_output.weight", {c.n_embd, c.n_head * c.head_dim}, seed++);
    w.add(b + "ffn_gate.weight", {c.n_ff, c.n_embd}, seed++);
    w.add(b + "ffn_up.weight", {c.n_ff, c.n_embd}, seed++);
    w.add(b + "ffn_down.weight", {c.n_embd, c.n_ff}, seed++);
  }
  return w;
}

TEST(Flow, HandComposedLlamaEqualsBuildDecoder) {
  const ModelConfig c = tiny_llama();
  const MapSource w = llama_weights(c);
  DecoderOptions o;
  o.ctx = 32;
  auto built = build_decoder(c, w, o);
  ASSERT_TRUE(built) << built.error().to_string();

  Flow f(w);
  const ValueId tokens = f.input_ids("tokens", ir::Dim::symbol(ir::SEQ));
  const ValueId pos = f.input_ids("pos", ir::Dim::symbol(ir::SEQ));
  auto x = f.embedding(tokens, "token_embd.weight", c.n_vocab, c.n_embd);
  ASSERT_TRUE(x);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string blk = fmt::format("blk.{}", il);
    auto h = f.rms_norm(*x, blk + ".attn_norm.weight", c.norm_eps);
    AttentionSpec as;
    as.prefix = blk;
    as.layer = il;
    as.attrs.attn.n_heads = c.n_head;
    as.attrs.attn.n_kv_heads = c.n_head_kv;
    as.attrs.attn.head_dim = c.head_dim;
    as.attrs.attn.mask = ir::MaskKind::Causal;
    as.attrs.rope = c.rope;
    as.attrs.qk_norm_eps = c.norm_eps;
    as.ctx = 32;
    auto a = f.attention(*h, pos, as);
    ASSERT_TRUE(a) << a.error().to_string();
    x = f.residual(*x, *a);
    h = f.rms_norm(*x, blk + ".ffn_norm.weight", c.norm_eps);
    auto ff = f.ffn(*h, FfnSpec{blk, FfnBlock::SwiGLU, c.n_embd, c.n_ff, false});
    ASSERT_TRUE(ff) << ff.error().to_string();
    x = f.residual(*x, *ff);
  }
  x = f.rms_norm(*x, "output_norm.weight", c.norm_eps);
  auto logits = f.lm_head(*x, "token_embd.weight", c.n_vocab, c.n_embd);
  ASSERT_TRUE(logits);
  auto mine = f.finish({{*logits, "logits"}}, ir::FusionPolicy::Direct);
  ASSERT_TRUE(mine) << mine.error().to_string();
  EXPECT_EQ(ir::fingerprint(mine->hir.graph), ir::fingerprint(built->hir.graph));
  EXPECT_EQ(mine->param_names, built->param_names);
  EXPECT_EQ(mine->handle_names, built->handle_names);
}

TEST(Flow, ShapeMismatchNamesTheTensor) {
  MapSource w;
  w.add("emb", {10, 8}, 1);
  Flow f(w);
  auto x = f.embedding(f.input_ids("tokens", ir::Dim(3)), "emb", 10, 16);
  ASSERT_FALSE(x);
  EXPECT_NE(x.error().message().find("'emb' has shape [10, 8] but the model needs [10, 16]"), std::string::npos)
      << x.error().message();
  auto missing = f.rms_norm(f.input_ids("ids", ir::Dim(3)), "nope.weight", 1e-5);
  EXPECT_FALSE(missing);
  // A symbolic feature dim is an error naming the block, not an abort.
  const ValueId sym = f.builder().input("x", ir::DType::F32, {ir::Dim(2), ir::Dim::symbol(ir::SEQ)});
  auto norm = f.rms_norm(sym, "blk.0.attn_norm.weight", 1e-5);
  ASSERT_FALSE(norm);
  EXPECT_NE(norm.error().message().find("rms_norm blk.0.attn_norm.weight"), std::string::npos)
      << norm.error().message();
}

// ---- a GPT-2-style block against a float64 reference ---------------------------------
constexpr int64_t kV = 11, kD = 8, kH = 2, kHd = 4, kF = 16, kS = 3;

using Mat = std::vector<double>;  // row-major

Mat matmul_t(const Mat& x, int64_t rows, const std::vector<float>& w, int64_t out, int64_t in) {
  Mat y(static_cast<size_t>(rows * out), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) y[r * out + o] += x[r * in + i] * w[o * in + i];
  return y;
}

Mat layer_norm(const Mat& x, int64_t rows, const std::vector<float>& g, const std::vector<float>& b) {
  Mat y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < kD; ++i) mean += x[r * kD + i] / kD;
    for (int64_t i = 0; i < kD; ++i) var += (x[r * kD + i] - mean) * (x[r * kD + i] - mean) / kD;
    for (int64_t i = 0; i < kD; ++i) y[r * kD + i] = (x[r * kD + i] - mean) / std::sqrt(var + 1e-5) * g[i] + b[i];
  }
  return y;
}

TEST(Flow, Gpt2StyleBlockMatchesAFloat64Reference) {
  MapSource w;
  w.add("wte", {kV, kD}, 3);
  for (const char* n : {"h0.ln_1.weight", "h0.ln_2.weight", "ln_f.weight"}) w.add(n, {kD}, 4, 0.5f, 1.5f);
  for (const char* n : {"h0.ln_1.bias", "h0.ln_2.bias", "ln_f.bias"}) w.add(n, {kD}, 5);
  for (const char* n : {"h0.attn_q.weight", "h0.attn_k.weight", "h0.attn_v.weight", "h0.attn_output.weight"})
    w.add(n, {kD, kD}, 6 + static_cast<uint32_t>(std::string(n).size()));
  w.add("h0.ffn_up.weight", {kF, kD}, 9);
  w.add("h0.ffn_down.weight", {kD, kF}, 10);

  Flow f(w);
  const ValueId ids = f.input_ids("tokens", ir::Dim(kS));
  const ValueId pos = f.input_ids("pos", ir::Dim(kS));
  auto x = f.embedding(ids, "wte", kV, kD);
  ASSERT_TRUE(x);
  auto h = f.layer_norm(*x, "h0.ln_1.weight", "h0.ln_1.bias", 1e-5);
  AttentionSpec as;
  as.prefix = "h0";
  as.attrs.attn.n_heads = kH;
  as.attrs.attn.n_kv_heads = kH;
  as.attrs.attn.head_dim = kHd;
  as.attrs.attn.mask = ir::MaskKind::Causal;
  as.attrs.use_rope = false;
  auto a = f.attention(*h, pos, as);
  ASSERT_TRUE(a) << a.error().to_string();
  x = f.residual(*x, *a);
  h = f.layer_norm(*x, "h0.ln_2.weight", "h0.ln_2.bias", 1e-5);
  auto ff = f.ffn(*h, FfnSpec{"h0", FfnBlock::Gelu, kD, kF, false, /*tanh_approx=*/false});
  ASSERT_TRUE(ff) << ff.error().to_string();
  x = f.residual(*x, *ff);
  h = f.layer_norm(*x, "ln_f.weight", "ln_f.bias", 1e-5);
  auto logits = f.lm_head(*h, "wte", kV, kD);
  ASSERT_TRUE(logits);
  auto built = f.finish({{*logits, "logits"}}, ir::FusionPolicy::Fusable);
  ASSERT_TRUE(built) << built.error().to_string();
  EXPECT_TRUE(built->handle_names.empty());

  auto session = Session::create(Device::cpu());
  ASSERT_TRUE(session);
  auto g = session->compile_hir_with(built->hir, {});
  ASSERT_TRUE(g) << g.error().to_string();
  for (const std::string& name : built->param_names) ASSERT_TRUE(g->set_param(name, w.values(name)).ok()) << name;
  const std::vector<float> tok{4, 0, 9}, p{0, 1, 2};
  const std::vector<int64_t> shape{kS};
  auto out = g->run({NamedF32{"tokens", tok, shape}, NamedF32{"pos", p, shape}});
  ASSERT_TRUE(out) << out.error().to_string();
  const std::vector<float> got(out->at(0).as<float>().begin(), out->at(0).as<float>().end());

  // Reference: the same blocks in float64.
  Mat xr(static_cast<size_t>(kS * kD));
  for (int64_t s = 0; s < kS; ++s)
    for (int64_t i = 0; i < kD; ++i) xr[s * kD + i] = w.values("wte")[static_cast<int64_t>(tok[s]) * kD + i];
  Mat hn = layer_norm(xr, kS, w.values("h0.ln_1.weight"), w.values("h0.ln_1.bias"));
  const Mat q = matmul_t(hn, kS, w.values("h0.attn_q.weight"), kD, kD);
  const Mat k = matmul_t(hn, kS, w.values("h0.attn_k.weight"), kD, kD);
  const Mat v = matmul_t(hn, kS, w.values("h0.attn_v.weight"), kD, kD);
  Mat o(static_cast<size_t>(kS * kD), 0.0);
  for (int64_t hh = 0; hh < kH; ++hh)
    for (int64_t i = 0; i < kS; ++i) {
      std::vector<double> sc(static_cast<size_t>(i + 1));
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double d = 0;
        for (int64_t t = 0; t < kHd; ++t) d += q[i * kD + hh * kHd + t] * k[j * kD + hh * kHd + t];
        sc[j] = d / std::sqrt(double(kHd));
        mx = std::max(mx, sc[j]);
      }
      for (int64_t j = 0; j <= i; ++j) sum += std::exp(sc[j] - mx);
      for (int64_t j = 0; j <= i; ++j)
        for (int64_t t = 0; t < kHd; ++t) o[i * kD + hh * kHd + t] += std::exp(sc[j] - mx) / sum * v[j * kD + hh * kHd + t];
    }
  const Mat proj = matmul_t(o, kS, w.values("h0.attn_output.weight"), kD, kD);
  for (size_t i = 0; i < xr.size(); ++i) xr[i] += proj[i];
  hn = layer_norm(xr, kS, w.values("h0.ln_2.weight"), w.values("h0.ln_2.bias"));
  Mat up = matmul_t(hn, kS, w.values("h0.ffn_up.weight"), kF, kD);
  for (double& u : up) u = 0.5 * u * (1 + std::erf(u / std::sqrt(2.0)));
  const Mat down = matmul_t(up, kS, w.values("h0.ffn_down.weight"), kD, kF);
  for (size_t i = 0; i < xr.size(); ++i) xr[i] += down[i];
  hn = layer_norm(xr, kS, w.values("ln_f.weight"), w.values("ln_f.bias"));
  const Mat want = matmul_t(hn, kS, w.values("wte"), kV, kD);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-5) << "logit " << i;
}

// The MoE block (router, top-2 of 4 experts renormalized, a gated shared expert) against
// a float64 evaluation of its definition.
TEST(Flow, MoeBlockWithSharedExpertMatchesAFloat64Reference) {
  constexpr int64_t T = 5, D = 8, F = 6, E = 4, K = 2, Fs = 10;
  MapSource w;
  w.add("b.ffn_gate_inp.weight", {E, D}, 21, -2, 2);
  w.add("b.ffn_gate_exps.weight", {E, F, D}, 22);
  w.add("b.ffn_up_exps.weight", {E, F, D}, 23);
  w.add("b.ffn_down_exps.weight", {E, D, F}, 24);
  w.add("b.ffn_gate_shexp.weight", {Fs, D}, 25);
  w.add("b.ffn_up_shexp.weight", {Fs, D}, 26);
  w.add("b.ffn_down_shexp.weight", {D, Fs}, 27);
  w.add("b.ffn_gate_inp_shexp.weight", {D}, 28);
  w.add("x", {T, D}, 29, -1, 1);
  Flow f(w);
  ValueId x = f.builder().input("x", ir::DType::F32, {T, D});
  MoeSpec spec{"b", D, F, E, K, /*normalize=*/true, ir::ActKind::Silu, Fs, /*shared_gate=*/true};
  auto y = f.moe_ffn(x, spec);
  ASSERT_TRUE(y) << y.error().to_string();
  auto built = f.finish({{*y, "y"}}, ir::FusionPolicy::Direct);
  ASSERT_TRUE(built) << built.error().to_string();
  auto session = Session::create(Device::cpu());
  ASSERT_TRUE(session);
  auto g = session->compile_hir_with(built->hir, {});
  ASSERT_TRUE(g) << g.error().to_string();
  for (const std::string& name : built->param_names) ASSERT_TRUE(g->set_param(name, w.values(name)).ok()) << name;
  const std::vector<int64_t> shape{T, D};
  auto out = g->run({NamedF32{"x", w.values("x"), shape}});
  ASSERT_TRUE(out) << out.error().to_string();
  const std::vector<float> got(out->at(0).as<float>().begin(), out->at(0).as<float>().end());

  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  auto at = [&](const char* n, int64_t i) { return double(w.values(n)[static_cast<size_t>(i)]); };
  for (int64_t t = 0; t < T; ++t) {
    auto xv = [&](int64_t i) { return at("x", t * D + i); };
    std::vector<double> p(E);
    double mx = -1e300, sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t i = 0; i < D; ++i) p[e] += at("b.ffn_gate_inp.weight", e * D + i) * xv(i);
      mx = std::max(mx, p[e]);
    }
    for (double& v : p) sum += v = std::exp(v - mx);
    for (double& v : p) v /= sum;
    std::vector<int64_t> order{0, 1, 2, 3};
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    const double chosen = p[order[0]] + p[order[1]];
    std::vector<double> yt(D, 0.0);
    auto ffn = [&](const char* gn, const char* un, const char* dn, int64_t off_gu, int64_t off_d, int64_t width,
                   double scale) {
      std::vector<double> h(static_cast<size_t>(width));
      for (int64_t r = 0; r < width; ++r) {
        double gg = 0, uu = 0;
        for (int64_t i = 0; i < D; ++i) {
          gg += at(gn, off_gu + r * D + i) * xv(i);
          uu += at(un, off_gu + r * D + i) * xv(i);
        }
        h[r] = silu(gg) * uu;
      }
      for (int64_t c = 0; c < D; ++c) {
        double s = 0;
        for (int64_t r = 0; r < width; ++r) s += at(dn, off_d + c * width + r) * h[r];
        yt[c] += scale * s;
      }
    };
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = order[k];
      ffn("b.ffn_gate_exps.weight", "b.ffn_up_exps.weight", "b.ffn_down_exps.weight", e * F * D, e * D * F, F,
          p[e] / chosen);
    }
    double gate = 0;
    for (int64_t i = 0; i < D; ++i) gate += at("b.ffn_gate_inp_shexp.weight", i) * xv(i);
    ffn("b.ffn_gate_shexp.weight", "b.ffn_up_shexp.weight", "b.ffn_down_shexp.weight", 0, 0, Fs,
        1 / (1 + std::exp(-gate)));
    for (int64_t c = 0; c < D; ++c) EXPECT_NEAR(got[t * D + c], yt[c], 1e-4) << "row " << t << " col " << c;
  }
}

// The node that picks the token of a decoder whose only output is "next": that output
// (the greedy topk checks its row itself), or the second operand of where(finite, token,
// -1) (a sampled token: kNonFiniteToken for non-finite logits); else null.
const ir::Node* only_next_output(const BuiltModel& built) {
  const ir::Graph& g = built.hir.graph;
  if (g.outputs().size() != 1 || g.outputs()[0].name != "next") return nullptr;
  const ir::Node& out = g.node(g.outputs()[0].value);
  if (out.op != ir::OpKind::Where) return &out;
  if (out.inputs.size() != 3 || out.type().to_string() != "i32[1, 1]") return nullptr;
  return &g.node(out.inputs[1]);
}

// greedy_token swaps the logits output for the argmax token of the selected rows; it
// needs last_row_logits (a clear error otherwise).
TEST(Flow, GreedyTokenOutput) {
  const ModelConfig c = tiny_llama();
  const MapSource w = llama_weights(c);
  DecoderOptions o;
  o.ctx = 32;
  o.greedy_token = true;
  auto bad = build_decoder(c, w, o);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().to_string().find("needs last_row_logits"), std::string::npos) << bad.error().to_string();
  o.last_row_logits = true;
  auto built = build_decoder(c, w, o);
  ASSERT_TRUE(built) << built.error().to_string();
  const ir::Node* next_p = only_next_output(*built);
  ASSERT_NE(next_p, nullptr) << "one output named next";
  const ir::Node& next = *next_p;
  EXPECT_EQ(next.op, ir::OpKind::TopK);
  EXPECT_EQ(next.dtype, ir::DType::I32);
  EXPECT_TRUE(next.attr<ir::TopKAttrs>().finite_check);
}

// sample_token swaps the logits output for the `sample` op over the selected rows, with
// the draws and filters as input "sampling" f32[B, 5]; it needs last_row_logits and
// excludes greedy.
TEST(Flow, SampleTokenOutput) {
  const ModelConfig c = tiny_llama();
  const MapSource w = llama_weights(c);
  DecoderOptions o;
  o.ctx = 32;
  o.sample_token = true;
  auto bad = build_decoder(c, w, o);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().to_string().find("needs last_row_logits"), std::string::npos) << bad.error().to_string();
  o.last_row_logits = true;
  o.greedy_token = true;
  bad = build_decoder(c, w, o);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().to_string().find("no greedy_token"), std::string::npos) << bad.error().to_string();
  o.greedy_token = false;
  auto built = build_decoder(c, w, o);
  ASSERT_TRUE(built) << built.error().to_string();
  const ir::Node* next_p = only_next_output(*built);
  ASSERT_NE(next_p, nullptr) << "one output named next";
  const ir::Node& next = *next_p;
  ASSERT_EQ(next.op, ir::OpKind::Sample);
  EXPECT_EQ(next.type().to_string(), "i32[1, 1]");
  const ir::Node& params = built->hir.graph.node(next.inputs[1]);
  EXPECT_EQ(params.op, ir::OpKind::Input);
  EXPECT_EQ(params.type().to_string(), "f32[1, 5]");
}
}  // namespace
}  // namespace rlx::models
