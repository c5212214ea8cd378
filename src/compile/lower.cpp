// Lowering HIR -> MIR (first stage of the pipeline). Direct policy emits fused MIR ops;
// Fusable policy emits the primitive forms of src/compile/emit.cpp, which the fusion
// passes turn back into exactly the fused ops Direct emits.
#include <cmath>
#include "rlx/compile/lower.h"

#include "emit.h"
#include "rewriter.h"

namespace rlx::compile {
namespace {
using namespace ir;
using detail::Rewriter;

struct Lowerer {
  Rewriter& rw;
  FusionPolicy policy;
  GraphBuilder& b() { return rw.b(); }
  bool direct() const { return policy == FusionPolicy::Direct; }

  // A weight of another dtype than x that is packed or f16/bf16 goes through
  // DequantMatMul (x . W^T), which streams the weight in its stored form.
  bool needs_dequant(ValueId x, ValueId w) {
    const DType wt = b().type(w).dtype;
    return is_packed(wt) || ((wt == DType::F16 || wt == DType::BF16) && wt != b().type(x).dtype);
  }

  Expected<ValueId> linear(ValueId x, ValueId w, std::optional<ValueId> bias, ActKind act, bool transpose_b,
                           const std::string& label) {
    if (needs_dequant(x, w)) {
      if (!transpose_b) return Error::unsupported("linear '{}': a packed/half weight must be [N, K] (transpose_b)", label);
      b().label(label);
      ValueId y = b().dequant_matmul(x, w);
      if (bias) y = b().add(y, *bias);
      if (act != ActKind::Identity) y = b().activation(act, y);
      return y;
    }
    if (direct() || b().type(x).shape.rank() < 2) {
      std::vector<ValueId> in{x, w};
      if (bias) in.push_back(*bias);
      b().label(label);
      return b().op(OpKind::FusedMatMulBiasAct, std::move(in), FusedMatMulAttrs{act, bias.has_value(), transpose_b});
    }
    b().label(label);  // labels the MatMul; fusion keeps the matmul's label
    return detail::emit_linear_primitives(b(), x, w, bias, act, transpose_b);
  }

  Expected<ValueId> gated(ValueId x, ValueId wg, ValueId wu, ActKind act, const std::string& label) {
    const bool same = b().type(wg).dtype == b().type(x).dtype && b().type(wu).dtype == b().type(x).dtype;
    if (act == ActKind::Silu && same && !needs_dequant(x, wg) && !needs_dequant(x, wu) &&
        b().type(x).shape.rank() >= 2) {
      if (direct()) {
        b().label(label);
        return b().op(OpKind::FusedSwiGLU, {x, wg, wu}, FusedSwiGLUAttrs{true});
      }
      b().label(label);
      return detail::emit_swiglu_primitives(b(), x, wg, wu, true);
    }
    ASSIGN_OR_RETURN(ValueId g, linear(x, wg, std::nullopt, act, true, label + ".gate"));
    ASSIGN_OR_RETURN(ValueId u, linear(x, wu, std::nullopt, ActKind::Identity, true, label + ".up"));
    return b().mul(g, u);
  }

  // [P.., S, H*D] -> rms_norm over each head's D -> [P.., S, H*D]
  ValueId head_norm(ValueId x, ValueId gamma, int64_t heads, int64_t head_dim, double eps) {
    const Shape s = b().type(x).shape;
    std::vector<Dim> dims(s.begin(), s.end() - 1);
    dims.emplace_back(heads);
    dims.emplace_back(head_dim);
    return b().reshape(b().rms_norm(b().reshape(x, Shape(dims)), gamma, eps), s);
  }

  Expected<ValueId> attention_block(ValueId id, const Node& n) {
    const auto& blk = n.attr<AttentionBlockAttrs>();
    const AttentionAttrs& a = blk.attn;
    std::vector<ValueId> in;
    for (ValueId v : n.inputs) in.push_back(rw.map(v));
    const ValueId x = in[0], pos = in[5];
    const std::string& l = n.label.empty() ? rw.src().describe(id) : n.label;
    size_t i = 6;
    std::optional<ValueId> bq, bk, bv, qn, kn, kc, vc;
    if (blk.qkv_bias) { bq = in[i]; bk = in[i + 1]; bv = in[i + 2]; i += 3; }
    if (blk.qk_norm) { qn = in[i]; kn = in[i + 1]; i += 2; }
    if (blk.kv_cache) { kc = in[i]; vc = in[i + 1]; }
    ASSIGN_OR_RETURN(ValueId q, linear(x, in[1], bq, ActKind::Identity, true, l + ".q"));
    ASSIGN_OR_RETURN(ValueId k, linear(x, in[2], bk, ActKind::Identity, true, l + ".k"));
    ASSIGN_OR_RETURN(ValueId v, linear(x, in[3], bv, ActKind::Identity, true, l + ".v"));
    if (blk.qk_norm) {
      q = head_norm(q, *qn, a.n_heads, a.head_dim, blk.qk_norm_eps);
      k = head_norm(k, *kn, a.n_kv_heads, a.head_dim, blk.qk_norm_eps);
    }
    if (blk.use_rope) {
      RopeAttrs r = blk.rope;
      r.head_dim = a.head_dim;
      if (r.n_rot == 0) r.n_rot = a.head_dim;
      q = b().rope(q, pos, r);
      k = b().rope(k, pos, r);
    }
    AttentionAttrs attn = a;
    if (blk.prescale_q) {
      const double scale = a.scale > 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(a.head_dim));
      q = b().mul(q, b().scalar(static_cast<float>(scale)));
      attn.scale = 1.0;
    }
    std::optional<ValueId> q_pos;
    if (blk.kv_cache) {
      if (b().type(x).shape.rank() != 2)
        return Error::unsupported("{}: a kv cache needs a [S, D] input, got {}", rw.src().describe(id),
                                  b().type(x).to_string());
      // Write this step's k/v at rows [pos[0], pos[0]+S) of the caches; attention reads
      // the updated caches (keys at 0..ctx-1, masked by the absolute query positions).
      // A half-precision cache stores k/v rounded to its dtype (as llama.cpp's f16 cache).
      const ValueId start = b().narrow(pos, 0, 0, Dim(1));
      const DType cache_dt = b().type(*kc).dtype;
      if (cache_dt != b().type(k).dtype) {
        k = b().cast(k, cache_dt);
        v = b().cast(v, cache_dt);
      }
      k = b().update_slice(*kc, k, start, 0);
      v = b().update_slice(*vc, v, start, 0);
      q_pos = pos;
    }
    const bool mixed_kv = b().type(k).dtype != b().type(q).dtype;
    ValueId o;
    // Mixed q/kv dtypes have no primitive form: such attention is always the fused op.
    if (direct() || mixed_kv) {
      b().label(l + ".attn");
      o = b().attention(q, k, v, attn, q_pos);
    } else {
      o = detail::emit_attention_primitives(b(), q, k, v, attn, q_pos);
    }
    return linear(o, in[4], std::nullopt, ActKind::Identity, true, l + ".o");
  }

  Expected<ValueId> lower_node(ValueId id) {
    const Node& n = rw.src().node(id);
    std::vector<ValueId> in;
    for (ValueId v : n.inputs) in.push_back(rw.map(v));
    const std::string l = n.label.empty() ? rw.src().describe(id) : n.label;
    switch (n.op) {
      case OpKind::HirLinear: {
        const auto& f = n.attr<FusedMatMulAttrs>();
        return linear(in[0], in[1], f.has_bias ? std::optional<ValueId>(in[2]) : std::nullopt, f.act, f.transpose_b, l);
      }
      case OpKind::HirSwiGLUFfn: {
        ASSIGN_OR_RETURN(ValueId h, gated(in[0], in[1], in[2], ActKind::Silu, l + ".swiglu"));
        return linear(h, in[3], std::nullopt, ActKind::Identity, true, l + ".down");
      }
      case OpKind::HirGeluFfn: {
        const auto& g = n.attr<GeluFfnAttrs>();
        const ActKind act = g.tanh_approx ? ActKind::GeluTanh : ActKind::Gelu;
        ValueId h;
        if (g.gated) {
          ASSIGN_OR_RETURN(h, gated(in[0], in[1], in[2], act, l));
        } else {
          ASSIGN_OR_RETURN(h, linear(in[0], in[1], std::nullopt, act, true, l + ".up"));
        }
        return linear(h, in.back(), std::nullopt, ActKind::Identity, true, l + ".down");
      }
      case OpKind::HirAttentionBlock:
        return attention_block(id, n);
      case OpKind::HirRmsNorm:
        b().label(n.label);
        return b().rms_norm(in[0], in[1], n.attr<NormAttrs>().eps);
      case OpKind::HirLayerNorm:
        b().label(n.label);
        return b().layer_norm(in[0], in[1], in.size() == 3 ? std::optional<ValueId>(in[2]) : std::nullopt,
                              n.attr<NormAttrs>().eps);
      case OpKind::HirEmbedding:
        b().label(n.label);
        return b().gather(in[0], in[1], 0);
      default:
        return Error::unsupported("{}: no lowering for {}", rw.src().describe(id), op_name(n.op));
    }
  }
};

}  // namespace

Expected<MirModule> lower(const HirModule& hir) {
  Rewriter rw(hir.graph);
  Lowerer lw{rw, hir.policy};
  for (ValueId v = 0; v < hir.graph.size(); ++v) {
    if (!is_hir_op(hir.graph.node(v).op)) {
      rw.copy(v);
      continue;
    }
    auto r = lw.lower_node(v);
    if (!r) return r.error().with_context("lower " + hir.graph.describe(v));
    if (const auto& e = rw.b().error()) return e->with_context("lower " + hir.graph.describe(v));
    rw.set(v, *r);
  }
  ASSIGN_OR_RETURN(Graph g, rw.finish());
  TRY(verify(g));
  return MirModule{std::move(g)};
}

}  // namespace rlx::compile
