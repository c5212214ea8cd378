// The demo transformer block (see demo_graph.h).
#include "demo_graph.h"

#include "rlx/ir/builder.h"

namespace rlx::cli {

Expected<ir::HirModule> demo_block(const DemoShape& s, ir::FusionPolicy policy) {
  using ir::DType;
  ir::GraphBuilder b;
  const int64_t hd = s.dim / s.n_heads;
  auto x = b.input("x", DType::F32, {ir::Dim::symbol(ir::SEQ), s.dim});
  auto pos = b.input("pos", DType::I32, {ir::Dim::symbol(ir::SEQ)});
  auto p = [&](const char* n, ir::Shape shape) { return b.param(n, DType::F32, std::move(shape)); };
  auto attn_norm = p("blk.0.attn_norm.weight", {s.dim});
  auto wq = p("blk.0.attn_q.weight", {s.n_heads * hd, s.dim});
  auto wk = p("blk.0.attn_k.weight", {s.n_kv_heads * hd, s.dim});
  auto wv = p("blk.0.attn_v.weight", {s.n_kv_heads * hd, s.dim});
  auto wo = p("blk.0.attn_output.weight", {s.dim, s.n_heads * hd});
  auto ffn_norm = p("blk.0.ffn_norm.weight", {s.dim});
  auto gate = p("blk.0.ffn_gate.weight", {s.ffn, s.dim});
  auto up = p("blk.0.ffn_up.weight", {s.ffn, s.dim});
  auto down = p("blk.0.ffn_down.weight", {s.dim, s.ffn});

  ir::AttentionBlockAttrs a;
  a.attn.n_heads = s.n_heads;
  a.attn.n_kv_heads = s.n_kv_heads;
  a.attn.head_dim = hd;
  a.attn.mask = ir::MaskKind::Causal;
  a.rope.head_dim = hd;
  a.rope.n_rot = hd;
  auto h = b.label("blk.0.attn_norm").op(ir::OpKind::HirRmsNorm, {x, attn_norm}, ir::NormAttrs{1e-5});
  auto attn = b.label("blk.0.attn").op(ir::OpKind::HirAttentionBlock, {h, wq, wk, wv, wo, pos}, a);
  auto x1 = b.add(x, attn);
  auto h2 = b.label("blk.0.ffn_norm").op(ir::OpKind::HirRmsNorm, {x1, ffn_norm}, ir::NormAttrs{1e-5});
  auto f = b.label("blk.0.ffn").op(ir::OpKind::HirSwiGLUFfn, {h2, gate, up, down}, ir::NoAttrs{});
  b.output(b.add(x1, f), "y");
  ASSIGN_OR_RETURN(ir::Graph g, b.build());
  return ir::HirModule{std::move(g), policy};
}

}  // namespace rlx::cli
