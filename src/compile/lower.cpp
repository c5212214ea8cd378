// Lowering HIR -> MIR (first stage of the pipeline). Direct policy emits fused MIR ops;
// Fusable policy emits the primitive forms of src/compile/emit.cpp, which the fusion
// passes turn back into exactly the fused ops Direct emits. Attention over several
// sequences (padded encoder batches, a batched decoder's stacked KV cache) is always the
// attention op: its per-sequence masks have no primitive form the fusion pass matches.
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

  // Attention of q over k/v: the fused op (Direct policy, or mixed q/kv dtypes, which
  // have no primitive form), else its primitive form for the fusion pass to recover.
  ValueId attend(ValueId q, ValueId k, ValueId v, const AttentionAttrs& attn, std::optional<ValueId> q_pos,
                 const std::string& l) {
    if (direct() || b().type(k).dtype != b().type(q).dtype) {
      b().label(l + ".attn");
      return b().attention(q, k, v, attn, q_pos);
    }
    return detail::emit_attention_primitives(b(), q, k, v, attn, q_pos);
  }

  // Multi-head latent attention's q, k and v (AttentionBlockAttrs::latent) from x [rows, D],
  // their rope parts turned at rope_pos, each head padded to attn.head_dim: [rows,
  // H*head_dim] each. The block's latent inputs start at in[at]: kv_a_norm, then W_q_a and
  // q_a_norm when q is low-rank.
  struct Qkv {
    ValueId q, k, v;
  };
  Expected<Qkv> latent_qkv(const AttentionBlockAttrs& blk, const std::vector<ValueId>& in, size_t at, ValueId rope_pos,
                           const std::string& l) {
    const int64_t H = blk.attn.n_heads, dh = blk.attn.head_dim;
    const int64_t nope = blk.latent_nope_dim, rope = blk.latent_rope_dim, dv = blk.latent_v_dim;
    const int64_t kv_rank = blk.latent_kv_rank;
    const ValueId x = in[0];
    if (b().type(x).shape.rank() != 2)
      return Error::unsupported("{}: latent attention needs a [rows, D] input, got {}", l, b().type(x).to_string());
    const Dim rows = b().type(x).shape[0];
    ValueId q_in = x;
    if (blk.latent_q_rank > 0) {
      ASSIGN_OR_RETURN(ValueId qa, linear(x, in[at + 1], std::nullopt, ActKind::Identity, true, l + ".q_a"));
      b().label(l + ".q_a_norm");
      q_in = b().rms_norm(qa, in[at + 2], blk.qk_norm_eps);
    }
    ASSIGN_OR_RETURN(ValueId q, linear(q_in, in[1], std::nullopt, ActKind::Identity, true, l + ".q"));
    ASSIGN_OR_RETURN(ValueId ckv, linear(x, in[2], std::nullopt, ActKind::Identity, true, l + ".kv_a"));
    b().label(l + ".kv_a_norm");
    const ValueId latent = b().rms_norm(b().narrow(ckv, 1, 0, Dim(kv_rank)), in[at], blk.qk_norm_eps);
    ASSIGN_OR_RETURN(ValueId kv, linear(latent, in[3], std::nullopt, ActKind::Identity, true, l + ".kv_b"));
    RopeAttrs r = blk.rope;
    r.head_dim = r.n_rot = rope;
    auto heads = [&](ValueId t, int64_t width) { return b().reshape(t, Shape{rows, Dim(H), Dim(width)}); };
    // Each head's query [nope | rope], its rope part turned.
    const ValueId qh = heads(q, nope + rope);
    const ValueId q_rope_part = b().reshape(b().narrow(qh, 2, nope, Dim(rope)), Shape{rows, Dim(H * rope)});
    const ValueId q_pe = heads(b().rope(q_rope_part, rope_pos, r), rope);
    // The keys' rope part: one vector every head shares; their nope parts and the values
    // come from the latent, per head [nope | v].
    const ValueId k_pe = b().rope(b().narrow(ckv, 1, kv_rank, Dim(rope)), rope_pos, r);
    const ValueId kvh = heads(kv, nope + dv);
    const ValueId k_pe_h = b().expand(b().reshape(k_pe, Shape{rows, Dim(1), Dim(rope)}), Shape{rows, Dim(H), Dim(rope)});
    ValueId qs = q_pe, ks = k_pe_h;
    if (nope > 0) {
      qs = b().concat({b().narrow(qh, 2, 0, Dim(nope)), q_pe}, 2);
      ks = b().concat({b().narrow(kvh, 2, 0, Dim(nope)), k_pe_h}, 2);
    }
    const ValueId vs = b().narrow(kvh, 2, nope, Dim(dv));
    // Zero columns up to the head width the cache and the attention use (the zeros add
    // nothing to q.k, and the output's padding columns are dropped before W_o).
    auto padded = [&](ValueId t, int64_t width) {
      if (width < dh) {
        const DType dt = b().type(t).dtype;
        std::vector<uint8_t> zero_bytes(static_cast<size_t>(dtype_info(dt).bytes_per_block), 0);
        const ValueId zero = b().constant(dt, Shape{Dim(1), Dim(1), Dim(1)}, std::move(zero_bytes));
        t = b().concat({t, b().expand(zero, Shape{rows, Dim(H), Dim(dh - width)})}, 2);
      }
      return b().reshape(t, Shape{rows, Dim(H * dh)});
    };
    return Qkv{padded(qs, nope + rope), padded(ks, nope + rope), padded(vs, dv)};
  }

  Expected<ValueId> attention_block(ValueId id, const Node& n) {
    const auto& blk = n.attr<AttentionBlockAttrs>();
    const AttentionAttrs& a = blk.attn;
    std::vector<ValueId> in;
    for (ValueId v : n.inputs) in.push_back(rw.map(v));
    const ValueId x = in[0], pos = in[5];
    const std::string& l = n.label.empty() ? rw.src().describe(id) : n.label;
    size_t i = 6;
    std::optional<ValueId> bq, bk, bv, qn, kn;
    ValueId kc = kNoValue, vc = kNoValue;  // [ctx, W], or [batch, ctx, W]
    if (blk.qkv_bias) { bq = in[i]; bk = in[i + 1]; bv = in[i + 2]; i += 3; }
    if (blk.qk_norm) { qn = in[i]; kn = in[i + 1]; i += 2; }
    const size_t latent_at = i;
    if (blk.latent()) i += blk.latent_q_rank > 0 ? 3 : 1;
    ValueId slot_rows = kNoValue, row_slots = kNoValue;  // compact rows: padded row <-> compact row
    if (blk.kv_cache) {
      kc = in[i];
      vc = in[i + 1];
      if (blk.compact_rows) {
        slot_rows = in[i + 2];
        row_slots = in[i + 3];
      }
    }
    ValueId q = kNoValue, k = kNoValue, v = kNoValue;
    if (blk.latent()) {  // q, k and v come turned (the rope part of each head) and padded
      const ValueId rope_pos = blk.compact_rows ? b().gather(pos, row_slots, 0) : pos;
      ASSIGN_OR_RETURN(Qkv t, latent_qkv(blk, in, latent_at, rope_pos, l));
      q = t.q;
      k = t.k;
      v = t.v;
    } else {
      ASSIGN_OR_RETURN(q, linear(x, in[1], bq, ActKind::Identity, true, l + ".q"));
      ASSIGN_OR_RETURN(k, linear(x, in[2], bk, ActKind::Identity, true, l + ".k"));
      ASSIGN_OR_RETURN(v, linear(x, in[3], bv, ActKind::Identity, true, l + ".v"));
    }
    // Gated attention: each head's projection is [q_h | gate_h]; split them apart.
    std::optional<ValueId> gate;
    if (blk.q_gate) {
      const Shape qs = b().type(q).shape;
      std::vector<Dim> heads(qs.begin(), qs.end() - 1), flat(qs.begin(), qs.end() - 1);
      heads.emplace_back(a.n_heads);
      heads.emplace_back(2 * a.head_dim);
      flat.emplace_back(a.n_heads * a.head_dim);
      const ValueId qh = b().reshape(q, Shape(heads));
      const int64_t axis = static_cast<int64_t>(heads.size()) - 1;
      gate = b().activation(ActKind::Sigmoid,
                            b().reshape(b().narrow(qh, axis, a.head_dim, Dim(a.head_dim)), Shape(flat)));
      q = b().reshape(b().narrow(qh, axis, 0, Dim(a.head_dim)), Shape(flat));
    }
    // The output projection, after the gate when there is one.
    auto out_proj = [&](ValueId o) {
      if (gate) o = b().mul(o, *gate);
      if (blk.latent() && blk.latent_v_dim < a.head_dim) {  // each head's value columns, without the padding
        const Dim rows = b().type(o).shape[0];
        const ValueId heads = b().reshape(o, Shape{rows, Dim(a.n_heads), Dim(a.head_dim)});
        o = b().reshape(b().narrow(heads, 2, 0, Dim(blk.latent_v_dim)), Shape{rows, Dim(a.n_heads * blk.latent_v_dim)});
      }
      return linear(o, in[4], std::nullopt, ActKind::Identity, true, l + ".o");
    };
    if (blk.qk_norm) {
      q = head_norm(q, *qn, a.n_heads, a.head_dim, blk.qk_norm_eps);
      k = head_norm(k, *kn, a.n_kv_heads, a.head_dim, blk.qk_norm_eps);
    }
    // The encoder form: rows [B*S] viewed as B sequences [B, S, width] (rope's positions
    // [S] repeat per sequence), attended with each sequence's key count; always the
    // attention op (the primitive form has no padding mask).
    std::optional<ValueId> kv_len;
    Shape rows_shape;
    if (blk.key_lengths) {
      kv_len = in.back();
      rows_shape = b().type(x).shape;
      const Dim B = b().type(*kv_len).shape[0], S = b().type(pos).shape[0];
      auto seqs = [&](ValueId t) { return b().reshape(t, Shape{B, S, b().type(t).shape.back()}); };
      q = seqs(q);
      k = seqs(k);
      v = seqs(v);
    }
    if (blk.use_rope && !blk.latent()) {
      RopeAttrs r = blk.rope;
      r.head_dim = a.head_dim;
      if (r.n_rot == 0) r.n_rot = a.head_dim;
      // Compact rows turn at their padded rows' positions.
      const ValueId rope_pos = blk.compact_rows ? b().gather(pos, row_slots, 0) : pos;
      q = b().rope(q, rope_pos, r);
      k = b().rope(k, rope_pos, r);
    }
    AttentionAttrs attn = a;
    if (blk.latent() && attn.scale == 0)  // the scale of the unpadded q.k
      attn.scale = 1.0 / std::sqrt(static_cast<double>(blk.latent_nope_dim + blk.latent_rope_dim));
    if (blk.prescale_q) {
      const double scale = a.scale > 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(a.head_dim));
      q = b().mul(q, b().scalar(static_cast<float>(scale)));
      attn.scale = 1.0;
    }
    if (kv_len) {
      b().label(l + ".attn");
      const ValueId o = b().op(OpKind::Attention, {q, k, v, pos, *kv_len}, attn);
      return out_proj(b().reshape(o, Shape{rows_shape[0], b().type(o).shape.back()}));
    }
    if (!blk.kv_cache) return out_proj(attend(q, k, v, attn, std::nullopt, l));
    if (b().type(x).shape.rank() != 2)
      return Error::unsupported("{}: a kv cache needs a [S, D] input, got {}", rw.src().describe(id),
                                b().type(x).to_string());
    // Write this step's k/v at rows [pos[0], pos[0]+S) of the caches, then attend over
    // the updated caches (keys at 0..ctx-1, masked by the absolute query positions). A
    // half-precision cache stores k/v rounded to its dtype (as llama.cpp's f16 cache).
    const DType cache_dt = b().type(kc).dtype;
    auto to_cache = [&](ValueId t) { return cache_dt != b().type(t).dtype ? b().cast(t, cache_dt) : t; };
    const int64_t batch = blk.batch;
    if (batch == 1) {
      const ValueId start = b().narrow(pos, 0, 0, Dim(1));
      const ValueId k_rows = to_cache(k), v_rows = to_cache(v);
      const ValueId ks = b().update_slice(kc, k_rows, start, 0);
      const ValueId vs = b().update_slice(vc, v_rows, start, 0);
      return out_proj(attend(q, ks, vs, attn, pos, l));
    }
    // Several sequences: the rows [B*S] are B sequences [B, S] whose caches are the
    // slices of [B, ctx, W]. One write and one attention serve them all: sequence b's
    // rows go to its slice from its first position, and its queries see its keys up to
    // their own positions ([B, S]).
    // Compact rows: spread q/k/v to the padded layout (each padded row a copy of its
    // compact row), and take each compact row's output back from its padded row below.
    if (blk.compact_rows) {
      q = b().gather(q, slot_rows, 0);
      k = b().gather(k, slot_rows, 0);
      v = b().gather(v, slot_rows, 0);
    }
    const Dim rows = b().type(blk.compact_rows ? slot_rows : x).shape[0];
    const Dim seq = *rows.div(batch);
    auto seqs = [&](ValueId t) { return b().reshape(t, Shape{Dim(batch), seq, b().type(t).shape.back()}); };
    const ValueId pos_b = b().reshape(pos, Shape{Dim(batch), seq});
    const ValueId starts = b().reshape(b().narrow(pos_b, 1, 0, Dim(1)), Shape{Dim(batch)});
    const ValueId k_rows = seqs(to_cache(k)), v_rows = seqs(to_cache(v));
    const ValueId ks = b().update_slice(kc, k_rows, starts, 1);
    const ValueId vs = b().update_slice(vc, v_rows, starts, 1);
    const ValueId qs = seqs(q);  // (before the label: it names the next node made)
    b().label(l + ".attn");
    const ValueId o = b().op(OpKind::Attention, {qs, ks, vs, pos_b}, attn);
    const ValueId padded = b().reshape(o, Shape{rows, b().type(o).shape.back()});
    return out_proj(blk.compact_rows ? b().gather(padded, row_slots, 0) : padded);
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
