// Test graphs for the compiler tests and bench: Llama-shaped HIR blocks built with
// GraphBuilder + HIR ops, and small helpers.
#pragma once

#include <string>

#include "rlx/ir/builder.h"
#include "rlx/ir/module.h"

namespace rlx::compile::testing {

struct LlamaShape {
  int64_t layers = 1;
  int64_t dim = 64;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 16;
  int64_t ffn = 128;
  int64_t vocab = 0;  ///< > 0: token ids in, embedding + lm head
  ir::Dim seq = ir::Dim::symbol(ir::SEQ);
  bool kv_cache = false;
  int64_t ctx = 64;
  bool qkv_bias = false;
  bool qk_norm = false;
  ir::MaskKind mask = ir::MaskKind::Causal;
  int64_t window = 0;
  double softcap = 0;
  ir::DType weight_dtype = ir::DType::F32;
};

inline ir::HirModule llama(const LlamaShape& s, ir::FusionPolicy policy) {
  using namespace ir;
  GraphBuilder b;
  ValueId x;
  ValueId table = kNoValue;
  if (s.vocab > 0) {
    const ValueId ids = b.input("ids", DType::I32, Shape{s.seq});
    table = b.param("tok_embd", DType::F32, Shape{Dim(s.vocab), Dim(s.dim)});
    x = b.op(OpKind::HirEmbedding, {table, ids}, NoAttrs{});
  } else {
    x = b.input("x", DType::F32, Shape{s.seq, Dim(s.dim)});
  }
  const ValueId pos = b.input("pos", DType::I32, Shape{s.seq});
  const int64_t qd = s.heads * s.head_dim, kd = s.kv_heads * s.head_dim;
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    auto w = [&](const std::string& n, int64_t rows, int64_t cols) {
      return b.param(p + n, s.weight_dtype, Shape{Dim(rows), Dim(cols)});
    };
    auto vec = [&](const std::string& n, int64_t len) { return b.param(p + n, DType::F32, Shape{Dim(len)}); };
    const ValueId attn_norm = vec("attn_norm", s.dim);
    const ValueId wq = w("attn_q", qd, s.dim), wk = w("attn_k", kd, s.dim), wv = w("attn_v", kd, s.dim);
    const ValueId wo = w("attn_output", s.dim, qd);
    std::vector<ValueId> in{kNoValue, wq, wk, wv, wo, pos};
    if (s.qkv_bias) {
      in.push_back(vec("attn_q.bias", qd));
      in.push_back(vec("attn_k.bias", kd));
      in.push_back(vec("attn_v.bias", kd));
    }
    if (s.qk_norm) {
      in.push_back(vec("attn_q_norm", s.head_dim));
      in.push_back(vec("attn_k_norm", s.head_dim));
    }
    if (s.kv_cache) {
      in.push_back(b.handle(p + "k_cache", DType::F32, Shape{Dim(s.ctx), Dim(kd)}));
      in.push_back(b.handle(p + "v_cache", DType::F32, Shape{Dim(s.ctx), Dim(kd)}));
    }
    const ValueId ffn_norm = vec("ffn_norm", s.dim);
    const ValueId wg = w("ffn_gate", s.ffn, s.dim), wu = w("ffn_up", s.ffn, s.dim), wd = w("ffn_down", s.dim, s.ffn);
    AttentionBlockAttrs a;
    a.attn.n_heads = s.heads;
    a.attn.n_kv_heads = s.kv_heads;
    a.attn.head_dim = s.head_dim;
    a.attn.mask = s.mask;
    a.attn.window = s.window;
    a.attn.softcap = s.softcap;
    a.rope.theta = 500000.0;
    a.qkv_bias = s.qkv_bias;
    a.qk_norm = s.qk_norm;
    a.kv_cache = s.kv_cache;
    b.label(p + "attn_norm");
    in[0] = b.op(OpKind::HirRmsNorm, {x, attn_norm}, NormAttrs{1e-5});
    b.label(p + "attn");
    x = b.add(x, b.op(OpKind::HirAttentionBlock, in, a));
    b.label(p + "ffn_norm");
    const ValueId h = b.op(OpKind::HirRmsNorm, {x, ffn_norm}, NormAttrs{1e-5});
    b.label(p + "ffn");
    x = b.add(x, b.op(OpKind::HirSwiGLUFfn, {h, wg, wu, wd}, NoAttrs{}));
  }
  const ValueId out_norm = b.param("output_norm", DType::F32, Shape{Dim(s.dim)});
  x = b.op(OpKind::HirRmsNorm, {x, out_norm}, NormAttrs{1e-5});
  if (s.vocab > 0) {
    const ValueId head = b.param("output", DType::F32, Shape{Dim(s.vocab), Dim(s.dim)});
    x = b.op(OpKind::HirLinear, {x, head}, FusedMatMulAttrs{});
  }
  b.output(x, "y");
  auto g = b.build();
  if (!g) abort_with_error(g.error());
  return HirModule{std::move(g).value(), policy};
}

}  // namespace rlx::compile::testing
