// Shape and dtype inference: the result type of every op from its input types
// and attributes. Errors say which rule failed; Graph::add prefixes the node.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "ir/infer_spatial.h"
#include "rlx/ir/custom_op.h"
#include "rlx/ir/graph.h"

namespace rlx::ir {
namespace {

using Types = std::vector<TensorType>;

Error bad(const std::string& what) { return Error::verify("{}", what); }

std::string str(const TensorType& t) { return t.to_string(); }

Status require_float(const TensorType& t, const char* role) {
  if (!is_float(t.dtype)) return bad(fmt::format("{} must be a float type, got {}", role, str(t)));
  return {};
}

Status require_int_index(const TensorType& t, const char* role) {
  if (t.dtype != DType::I32 && t.dtype != DType::I64)
    return bad(fmt::format("{} must be i32 or i64, got {}", role, str(t)));
  return {};
}

Status require_same_dtype(const TensorType& a, const TensorType& b) {
  if (a.dtype != b.dtype) return bad(fmt::format("dtype mismatch: {} vs {}", str(a), str(b)));
  return {};
}

// Checks a norm weight [D] against x's last dim.
Status check_norm_weight(const TensorType& x, const TensorType& w, const char* role) {
  if (x.shape.rank() < 1) return bad("norm input must have rank >= 1");
  if (w.shape.rank() != 1 || w.shape[0] != x.shape.back())
    return bad(fmt::format("{} must be [{}], got {}", role, x.shape.back().to_string(), str(w)));
  return {};
}

// x[..., K] . W -> [..., N]; W is [N, K] when transpose_b, else [K, N].
Expected<TensorType> infer_linear(const TensorType& x, const TensorType& w, bool transpose_b, bool allow_packed) {
  if (x.shape.rank() < 1) return bad("linear input must have rank >= 1");
  TRY(require_float(x, "linear input"));
  if (w.shape.rank() != 2) return bad(fmt::format("linear weight must be rank 2, got {}", str(w)));
  if (is_packed(w.dtype) && !allow_packed)
    return bad(fmt::format("packed weight {} needs dequant_matmul", str(w)));
  if (!is_packed(w.dtype)) TRY(require_float(w, "linear weight"));
  const Dim k = transpose_b ? w.shape[1] : w.shape[0];
  const Dim n = transpose_b ? w.shape[0] : w.shape[1];
  if (k != x.shape.back())
    return bad(fmt::format("inner dims differ: input {} vs weight {}{}", str(x), str(w),
                           transpose_b ? " (weight is [N, K])" : " (weight is [K, N])"));
  if (is_packed(w.dtype) && k.is_static() && k.value() % dtype_info(w.dtype).block_size != 0)
    return bad(fmt::format("K = {} is not a multiple of {}'s block size {}", k.value(), dtype_name(w.dtype),
                           dtype_info(w.dtype).block_size));
  std::vector<Dim> out = x.shape.dims();
  out.back() = n;
  return TensorType{x.dtype, Shape(std::move(out))};
}

Status check_bias(const TensorType& out, const TensorType& bias) {
  if (bias.shape.rank() != 1 || bias.shape[0] != out.shape.back())
    return bad(fmt::format("bias must be [{}], got {}", out.shape.back().to_string(), str(bias)));
  return {};
}

Expected<Shape> broadcast_all(const Types& in) {
  Shape s = in[0].shape;
  for (size_t i = 1; i < in.size(); ++i) {
    auto b = broadcast_shapes(s, in[i].shape);
    if (!b) return bad(fmt::format("shapes {} and {} do not broadcast", s.to_string(), in[i].shape.to_string()));
    s = *b;
  }
  return s;
}

Expected<TensorType> infer_matmul(const TensorType& a, const TensorType& b, const MatMulAttrs& m) {
  TRY(require_float(a, "matmul lhs"));
  TRY(require_same_dtype(a, b));
  if (a.shape.rank() < 2 || b.shape.rank() < 2)
    return bad(fmt::format("matmul operands need rank >= 2, got {} and {}", str(a), str(b)));
  const int64_t ra = a.shape.rank(), rb = b.shape.rank();
  const Dim m_dim = m.transpose_a ? a.shape[ra - 1] : a.shape[ra - 2];
  const Dim ka = m.transpose_a ? a.shape[ra - 2] : a.shape[ra - 1];
  const Dim kb = m.transpose_b ? b.shape[rb - 1] : b.shape[rb - 2];
  const Dim n_dim = m.transpose_b ? b.shape[rb - 2] : b.shape[rb - 1];
  if (ka != kb) return bad(fmt::format("matmul inner dims differ: {} vs {}", str(a), str(b)));
  Shape batch_a(std::vector<Dim>(a.shape.begin(), a.shape.end() - 2));
  Shape batch_b(std::vector<Dim>(b.shape.begin(), b.shape.end() - 2));
  auto batch = broadcast_shapes(batch_a, batch_b);
  if (!batch) return bad(fmt::format("matmul batch dims do not broadcast: {} vs {}", str(a), str(b)));
  std::vector<Dim> out = batch->dims();
  out.push_back(m_dim);
  out.push_back(n_dim);
  return TensorType{a.dtype, Shape(out)};
}

Expected<TensorType> infer_reduce(const TensorType& x, const ReduceAttrs& r) {
  if (r.axes.empty()) return bad("reduce needs at least one axis");
  std::vector<bool> reduced(static_cast<size_t>(x.shape.rank()), false);
  for (int64_t a : r.axes) {
    auto ax = x.shape.axis(a);
    if (!ax) return bad(fmt::format("reduce axis {} out of range for {}", a, str(x)));
    if (reduced[*ax]) return bad(fmt::format("reduce axis {} repeated", a));
    reduced[*ax] = true;
  }
  if (r.kind == ReduceKind::Mean) TRY(require_float(x, "mean input"));
  std::vector<Dim> out;
  for (int64_t i = 0; i < x.shape.rank(); ++i) {
    if (!reduced[i]) out.push_back(x.shape[i]);
    else if (r.keep_dims) out.emplace_back(1);
  }
  return TensorType{x.dtype, Shape(out)};
}

Expected<TensorType> infer_rope(const TensorType& x, const TensorType& pos, const RopeAttrs& r) {
  TRY(require_float(x, "rope input"));
  TRY(require_int_index(pos, "rope positions"));
  if (x.shape.rank() < 2) return bad("rope input must be [.., S, heads*head_dim]");
  if (r.head_dim <= 0 || r.n_rot <= 0 || r.n_rot > r.head_dim || r.n_rot % 2 != 0)
    return bad(fmt::format("rope needs 0 < n_rot <= head_dim and n_rot even (n_rot={}, head_dim={})", r.n_rot,
                           r.head_dim));
  Dim w = x.shape.back();
  if (r.width < 0 || r.offset < 0 || (r.width == 0 && r.offset != 0))
    return bad(fmt::format("rope offset {} / width {} must be >= 0, and offset 0 when width is 0", r.offset, r.width));
  if (r.width > 0) {
    if (!w.is_static() || r.offset + r.width > w.value())
      return bad(fmt::format("rope columns [{}, {}) exceed the input width {}", r.offset, r.offset + r.width,
                             w.to_string()));
    w = Dim(r.width);
  }
  if (w.is_static() && w.value() % r.head_dim != 0)
    return bad(fmt::format("rope width {} is not a multiple of head_dim {}", w.value(), r.head_dim));
  if (pos.shape.rank() != 1 || pos.shape[0] != x.shape[x.shape.rank() - 2])
    return bad(fmt::format("rope positions must be [{}], got {}", x.shape[x.shape.rank() - 2].to_string(), str(pos)));
  TRY(check_rope_attrs(r));
  std::vector<Dim> out(x.shape.begin(), x.shape.end());
  out.back() = w;
  return TensorType{x.dtype, Shape(out)};
}

Expected<TensorType> infer_fused_linear(const Types& in, const FusedLinearAttrs& a) {
  if (in.size() != a.num_inputs())
    return bad(fmt::format("fused_linear needs {} inputs for its flags, got {}", a.num_inputs(), in.size()));
  if (a.swiglu && (a.rope || a.cache_write)) return bad("fused_linear: swiglu takes no rope or cache_write");
  if (a.group < -1) return bad(fmt::format("fused_linear group {} must be >= -1", a.group));
  // (the text form leaves out what a node without rope / norm does not use)
  if (!a.rope && !(a.rope_attrs == RopeAttrs{})) return bad("fused_linear: rope fields set without rope");
  if (!a.norm && a.eps != FusedLinearAttrs{}.eps) return bad("fused_linear: eps set without norm");
  const TensorType &x = in[0], &w = in[1];
  if (x.dtype != DType::F32) return bad(fmt::format("fused_linear input must be f32, got {}", str(x)));
  ASSIGN_OR_RETURN(TensorType y, infer_linear(x, w, true, true));
  y.dtype = DType::F32;
  if (a.swiglu) {
    const TensorType& u = in[static_cast<size_t>(a.w_up_input())];
    if (u.dtype != w.dtype || u.shape != w.shape)
      return bad(fmt::format("fused_linear up weight {} differs from the gate weight {}", str(u), str(w)));
  }
  if (a.norm) {
    const TensorType& g = in[static_cast<size_t>(a.gamma_input())];
    TRY(require_float(g, "fused_linear gamma"));
    if (g.shape.rank() != 1 || g.shape[0] != x.shape.back())
      return bad(fmt::format("fused_linear gamma must be [{}], got {}", x.shape.back().to_string(), str(g)));
    if (!(a.eps >= 0)) return bad("fused_linear eps must be >= 0");
  }
  if (a.residual) {
    const TensorType& r = in[static_cast<size_t>(a.residual_input())];
    if (r.dtype != DType::F32 || r.shape != y.shape)
      return bad(fmt::format("fused_linear residual must be {}, got {}", str(y), str(r)));
  }
  if (a.rope) {
    if (a.rope_attrs.offset != 0 || a.rope_attrs.width != 0) return bad("fused_linear rope reads whole rows");
    ASSIGN_OR_RETURN(y, infer_rope(y, in[static_cast<size_t>(a.pos_input())], a.rope_attrs));
  }
  if (!a.cache_write) return y;
  const size_t c = static_cast<size_t>(a.cache_input());
  const TensorType &cache = in[c], &start = in[c + 1];
  TRY(require_float(cache, "fused_linear cache"));
  TRY(require_int_index(start, "fused_linear start"));
  if (start.shape.num_elements() != std::optional<int64_t>(1)) return bad("fused_linear start must have 1 element");
  if (cache.shape.rank() != 2 || y.shape.rank() != 2 || cache.shape[1] != y.shape[1])
    return bad(fmt::format("fused_linear rows {} do not fit the cache {}", str(y), str(cache)));
  return cache;
}

// Head counts must be positive, n_heads a multiple of n_kv_heads, and the widths
// n_heads*head_dim / n_kv_heads*head_dim must not overflow.
Status check_heads(const AttentionAttrs& a) {
  int64_t width = 0;
  if (a.n_heads <= 0 || a.n_kv_heads <= 0 || a.head_dim <= 0 || a.n_heads % a.n_kv_heads != 0 ||
      __builtin_mul_overflow(a.n_heads, a.head_dim, &width))
    return bad(fmt::format("attention heads invalid: n_heads={} n_kv_heads={} head_dim={}", a.n_heads, a.n_kv_heads,
                           a.head_dim));
  return {};
}

// The latent attention block's projections (AttentionBlockAttrs::latent): checks W_q
// (after W_q_a and its norm when q is low-rank), W_kv_a, kv_a_norm, W_kv_b and W_o against
// the latent sizes, and gives q, k and v as the attention sees them: [.., S, H*head_dim],
// each head padded to attn.head_dim = max(nope + rope, v).
Expected<TensorType> infer_latent_projections(const AttentionBlockAttrs& b, const Types& in, TensorType* k,
                                              TensorType* v) {
  const AttentionAttrs& a = b.attn;
  const int64_t nope = b.latent_nope_dim, rope = b.latent_rope_dim, dv = b.latent_v_dim;
  const int64_t kv_rank = b.latent_kv_rank, q_rank = b.latent_q_rank;
  const int64_t limit = int64_t{1} << 20;
  if (nope < 0 || rope <= 0 || rope % 2 != 0 || dv <= 0 || kv_rank > limit || q_rank < 0 || q_rank > limit ||
      nope > limit || rope > limit || dv > limit)
    return bad(fmt::format("attention_block latent sizes invalid: q rank {} kv rank {} nope {} rope {} v {}", q_rank,
                           kv_rank, nope, rope, dv));
  int64_t q_width = 0, kv_width = 0;
  if (__builtin_mul_overflow(a.n_heads, nope + rope, &q_width) ||
      __builtin_mul_overflow(a.n_heads, nope + dv, &kv_width))
    return bad(fmt::format("attention_block latent widths overflow: {} heads of {} / {}", a.n_heads, nope + rope,
                           nope + dv));
  if (!b.use_rope) return bad("attention_block latent attention always turns its rope part (use_rope must be set)");
  if (in[0].shape.rank() != 2)
    return bad(fmt::format("attention_block latent attention needs x [rows, D], got {}", str(in[0])));
  if (a.n_kv_heads != a.n_heads || a.head_dim != std::max(nope + rope, dv))
    return bad(fmt::format("attention_block latent attention needs n_kv_heads = n_heads and head_dim = max(nope + rope, "
                           "v) = {}, got {} / {} heads, head_dim {}", std::max(nope + rope, dv), a.n_heads,
                           a.n_kv_heads, a.head_dim));
  if (b.rope.n_rot != 0 && b.rope.n_rot != rope)
    return bad(fmt::format("attention_block latent rope turns {} dims, not the rope part's {}", b.rope.n_rot, rope));
  const TensorType& x = in[0];
  const size_t extra = 6;  // kv_a_norm, then W_q_a and q_a_norm
  TensorType q_in = x;
  if (q_rank > 0) {
    ASSIGN_OR_RETURN(q_in, infer_linear(x, in[extra + 1], true, true));
    if (q_in.shape.back() != Dim(q_rank))
      return bad(fmt::format("attention_block W_q_a gives {} values a row, not q rank {}",
                             q_in.shape.back().to_string(), q_rank));
    TRY(check_norm_weight(q_in, in[extra + 2], "attention_block q_a_norm"));
  }
  ASSIGN_OR_RETURN(TensorType q, infer_linear(q_in, in[1], true, true));
  ASSIGN_OR_RETURN(TensorType ckv, infer_linear(x, in[2], true, true));
  if (ckv.shape.back() != Dim(kv_rank + rope))
    return bad(fmt::format("attention_block W_kv_a gives {} values a row, not kv rank + rope = {}",
                           ckv.shape.back().to_string(), kv_rank + rope));
  TensorType latent = ckv;
  latent.shape = [&] {
    std::vector<Dim> d(ckv.shape.begin(), ckv.shape.end() - 1);
    d.emplace_back(kv_rank);
    return Shape(d);
  }();
  TRY(check_norm_weight(latent, in[extra], "attention_block kv_a_norm"));
  ASSIGN_OR_RETURN(TensorType kv, infer_linear(latent, in[3], true, true));
  if (q.shape.back() != Dim(q_width) || kv.shape.back() != Dim(kv_width))
    return bad(fmt::format("attention_block latent projections do not match {} heads of nope {} + rope {} (v {}): W_q "
                           "gives {}, W_kv_b {}", a.n_heads, nope, rope, dv, q.shape.back().to_string(),
                           kv.shape.back().to_string()));
  q.shape = [&] {
    std::vector<Dim> d(q.shape.begin(), q.shape.end() - 1);
    d.emplace_back(a.n_heads * a.head_dim);
    return Shape(d);
  }();
  *k = q;
  *v = q;
  return q;
}

Expected<TensorType> infer_attention(const Types& in, const AttentionAttrs& a) {
  const TensorType &q = in[0], &k = in[1], &v = in[2];
  TRY(require_float(q, "attention q"));
  TRY(require_same_dtype(k, v));
  // k/v share q's dtype, or are a half-precision KV cache read by f32 queries.
  const bool half_kv = q.dtype == DType::F32 && (k.dtype == DType::F16 || k.dtype == DType::BF16);
  if (k.dtype != q.dtype && !half_kv)
    return bad(fmt::format("attention k/v must be {} (or f16/bf16 with f32 q), got {}", dtype_name(q.dtype), str(k)));
  TRY(check_heads(a));
  if (a.mask == MaskKind::SlidingWindow && a.window <= 0) return bad("sliding-window attention needs window > 0");
  if (a.mask == MaskKind::Local && a.window < 0) return bad("local attention needs window >= 0");
  if (q.shape.rank() < 2 || k.shape.rank() != q.shape.rank() || v.shape != k.shape)
    return bad(fmt::format("attention q/k/v ranks or shapes differ: {}, {}, {}", str(q), str(k), str(v)));
  if (q.shape.back() != Dim(a.n_heads * a.head_dim))
    return bad(fmt::format("attention q last dim must be n_heads*head_dim = {}, got {}", a.n_heads * a.head_dim,
                           str(q)));
  if (k.shape.back() != Dim(a.n_kv_heads * a.head_dim))
    return bad(fmt::format("attention k last dim must be n_kv_heads*head_dim = {}, got {}",
                           a.n_kv_heads * a.head_dim, str(k)));
  for (int64_t i = 0; i + 2 < q.shape.rank(); ++i)
    if (q.shape[i] != k.shape[i]) return bad(fmt::format("attention batch dims differ: {} vs {}", str(q), str(k)));
  if (in.size() >= 4) {  // q_pos: [S] for every batch item, or q's dims but the last (one row per batch item)
    TRY(require_int_index(in[3], "attention q_pos"));
    const bool shared = in[3].shape.rank() == 1 && in[3].shape[0] == q.shape[q.shape.rank() - 2];
    const bool per_item = q.shape.rank() > 2 && in[3].shape == Shape(std::vector<Dim>(q.shape.begin(), q.shape.end() - 1));
    if (!shared && !per_item)
      return bad(fmt::format("attention q_pos must be [{}] or one row per batch item, got {}",
                             q.shape[q.shape.rank() - 2].to_string(), str(in[3])));
  }
  if (in.size() == 5) {  // kv_len: one valid-key count per batch item
    if (in[4].dtype != DType::I32) return bad(fmt::format("attention kv_len must be i32, got {}", str(in[4])));
    Dim batch(1);
    for (int64_t i = 0; i + 2 < q.shape.rank(); ++i) {
      const std::optional<Dim> m = Dim::mul(batch, q.shape[i]);
      if (!m) return bad(fmt::format("attention batch dims of {} are not a dim", str(q)));
      batch = *m;
    }
    if (in[4].shape != Shape{batch})
      return bad(fmt::format("attention kv_len must be [{}] (one per batch item), got {}", batch.to_string(),
                             str(in[4])));
  }
  return q;
}

Expected<TensorType> infer_reshape(const TensorType& x, const Shape& target) {
  auto a = x.shape.product();
  auto b = target.product();
  if (!a || !b || *a != *b)
    return bad(fmt::format("reshape {} -> {} changes the element count", x.shape.to_string(), target.to_string()));
  return TensorType{x.dtype, target};
}

Expected<TensorType> infer_transpose(const TensorType& x, const TransposeAttrs& t) {
  if (static_cast<int64_t>(t.perm.size()) != x.shape.rank())
    return bad(fmt::format("transpose perm has {} entries for rank {}", t.perm.size(), x.shape.rank()));
  std::vector<bool> seen(t.perm.size(), false);
  std::vector<Dim> out;
  for (int64_t p : t.perm) {
    if (p < 0 || p >= x.shape.rank() || seen[p]) return bad("transpose perm is not a permutation");
    seen[p] = true;
    out.push_back(x.shape[p]);
  }
  return TensorType{x.dtype, Shape(out)};
}

Expected<TensorType> infer_narrow(const TensorType& x, const NarrowAttrs& n) {
  auto ax = x.shape.axis(n.axis);
  if (!ax) return bad(fmt::format("narrow axis {} out of range for {}", n.axis, str(x)));
  const Dim d = x.shape[*ax];
  if (n.start < 0) return bad("narrow start must be >= 0");
  if (n.length.is_static() && n.length.value() < 0) return bad("narrow length must be >= 0");
  int64_t end = 0;
  if (n.length.is_static() && __builtin_add_overflow(n.start, n.length.value(), &end))
    return bad(fmt::format("narrow start {} + length {} overflows", n.start, n.length.value()));
  if (d.is_static() && n.length.is_static() && end > d.value())
    return bad(fmt::format("narrow [{}, {}) exceeds dim {} of size {}", n.start, end, *ax, d.value()));
  if (!n.length.is_static() && d.is_static())
    return bad("narrow with a symbolic length on a static dim");
  if (!n.length.is_static() && !d.is_static() && !(n.length == d && n.start == 0)) {
    // Symbolic narrowing is allowed only when provably in range after binding; we accept
    // length == dim with start 0 (identity) and re-check after binding otherwise.
    if (n.length.syms[0] != d.syms[0] || n.length.syms[1] != d.syms[1] || n.length.coeff > d.coeff)
      return bad(fmt::format("narrow length {} may exceed dim {}", n.length.to_string(), d.to_string()));
  }
  Shape out = x.shape;
  out[*ax] = n.length;
  return TensorType{x.dtype, out};
}

Expected<TensorType> infer_concat(const Types& in, int64_t axis) {
  const TensorType& first = in[0];
  auto ax = first.shape.axis(axis);
  if (!ax) return bad(fmt::format("concat axis {} out of range for {}", axis, str(first)));
  Dim total(0);
  for (const TensorType& t : in) {
    TRY(require_same_dtype(first, t));
    if (t.shape.rank() != first.shape.rank()) return bad("concat inputs differ in rank");
    for (int64_t i = 0; i < t.shape.rank(); ++i)
      if (i != *ax && t.shape[i] != first.shape[i])
        return bad(fmt::format("concat inputs differ off the axis: {} vs {}", str(first), str(t)));
    auto s = Dim::add(total, t.shape[*ax]);
    if (!s) return bad("concat axis length is not expressible (mixed symbols)");
    total = *s;
  }
  Shape out = first.shape;
  out[*ax] = total;
  return TensorType{first.dtype, out};
}

// moe_route: logits[T, E] (float) -> f32[T, E].
Expected<TensorType> infer_moe_route(const TensorType& logits, const MoeRouteAttrs& a) {
  TRY(require_float(logits, "moe_route logits"));
  if (logits.shape.rank() != 2) return bad(fmt::format("moe_route logits must be [tokens, experts], got {}", str(logits)));
  const Dim e = logits.shape[1];
  if (!e.is_static()) return bad("moe_route needs a static expert count");
  if (a.k < 1 || a.k > e.value())
    return bad(fmt::format("moe_route k={} out of range for {} experts", a.k, e.value()));
  return TensorType{DType::F32, logits.shape};
}

// moe_ffn: x f32[T, D], route f32[T, E], w_gate / w_up [E, F, D], w_down [E, D, F] -> f32[T, D].
Expected<TensorType> infer_moe_ffn(const Types& in, const MoeFfnAttrs& a) {
  const TensorType &x = in[0], &route = in[1];
  if (x.dtype != DType::F32 || x.shape.rank() != 2)
    return bad(fmt::format("moe_ffn input must be f32[tokens, dim], got {}", str(x)));
  if (route.dtype != DType::F32 || route.shape.rank() != 2 || route.shape[0] != x.shape[0] ||
      !route.shape[1].is_static())
    return bad(fmt::format("moe_ffn route must be f32[{}, experts], got {}", x.shape[0].to_string(), str(route)));
  if (a.act != ActKind::Silu && a.act != ActKind::Gelu && a.act != ActKind::GeluTanh)
    return bad(fmt::format("moe_ffn act must be silu, gelu or gelu_tanh, got {}", enum_name(a.act)));
  const Dim e = route.shape[1], d = x.shape[1];
  for (size_t i = 2; i < 5; ++i) {
    const TensorType& w = in[i];
    if (w.shape.rank() != 3 || w.shape[0] != e || !w.shape[1].is_static() || !w.shape[2].is_static())
      return bad(fmt::format("moe_ffn expert weight {} must be [{}, rows, cols], got {}", i, e.to_string(), str(w)));
    if (!is_packed(w.dtype)) TRY(require_float(w, "moe_ffn expert weight"));
    const int64_t block = dtype_info(w.dtype).block_size;
    if (w.shape[2].value() % block != 0)
      return bad(fmt::format("moe_ffn expert weight {}: {} columns are not a multiple of {}'s block size {}", i,
                             w.shape[2].value(), dtype_name(w.dtype), block));
  }
  const Dim f = in[2].shape[1];
  if (in[2].shape[2] != d || in[3].shape != in[2].shape)
    return bad(fmt::format("moe_ffn gate and up weights must be [{}, F, {}], got {} and {}", e.to_string(),
                           d.to_string(), str(in[2]), str(in[3])));
  if (in[4].shape[1] != d || in[4].shape[2] != f)
    return bad(fmt::format("moe_ffn down weight must be [{}, {}, {}], got {}", e.to_string(), d.to_string(),
                           f.to_string(), str(in[4])));
  return x;
}

// The seq input of the recurrent-state ops: i32[B, 2] matching the state's B, and rows
// of x a multiple of B.
Status check_state_rows(const TensorType& state, const TensorType& x, const TensorType& seq, const char* op) {
  if (state.dtype != DType::F32 || !state.shape.is_static() || state.shape.rank() < 1)
    return bad(fmt::format("{} state must be a static f32 handle, got {}", op, str(state)));
  const Dim batch = state.shape[0];
  if (seq.dtype != DType::I32 || seq.shape.rank() != 2 || seq.shape[0] != batch || seq.shape[1] != Dim(2))
    return bad(fmt::format("{} seq must be i32[{}, 2] (tokens seen, real rows per sequence), got {}", op,
                           batch.to_string(), str(seq)));
  if (x.shape.rank() != 2 || !x.shape[0].div(batch.value()))
    return bad(fmt::format("{} rows {} are not {} sequences of equal length", op, str(x), batch.to_string()));
  return {};
}

Expected<TensorType> infer_causal_conv(const Types& in, const CausalConvAttrs& a) {
  const TensorType &state = in[0], &x = in[1], &w = in[2], &seq = in[3];
  if (a.act != ActKind::Identity && a.act != ActKind::Silu)
    return bad(fmt::format("causal_conv1d act must be identity or silu, got {}", enum_name(a.act)));
  if (x.dtype != DType::F32) return bad(fmt::format("causal_conv1d input must be f32[rows, C], got {}", str(x)));
  TRY(check_state_rows(state, x, seq, "causal_conv1d"));
  if (w.dtype != DType::F32 || w.shape.rank() != 2 || !w.shape.is_static() || w.shape[0] != x.shape[1] ||
      w.shape[1].value() < 1)
    return bad(fmt::format("causal_conv1d weight must be f32[{}, K], got {}", x.shape[1].to_string(), str(w)));
  const int64_t k = w.shape[1].value();
  if (state.shape.rank() != 3 || state.shape[1] != Dim(k - 1) || state.shape[2] != x.shape[1])
    return bad(fmt::format("causal_conv1d state must be f32[B, {}, {}] for kernel {}, got {}", k - 1,
                           x.shape[1].to_string(), k, str(state)));
  return x;
}

Expected<TensorType> infer_delta_rule(const Types& in, const DeltaRuleAttrs& a) {
  const TensorType &state = in[0], &q = in[1], &k = in[2], &v = in[3], &g = in[4], &beta = in[5];
  if (a.head_k_dim < 1 || a.head_v_dim < 1 || a.chunk < 0)
    return bad(fmt::format("gated_delta_rule needs head dims >= 1 and chunk >= 0, got {} / {} / {}", a.head_k_dim,
                           a.head_v_dim, a.chunk));
  for (const TensorType* t : {&q, &k, &v, &g, &beta})
    if (t->dtype != DType::F32 || t->shape.rank() != 2 || !t->shape[1].is_static() || t->shape[0] != q.shape[0])
      return bad(fmt::format("gated_delta_rule inputs must be f32[{}, width], got {}", q.shape[0].to_string(), str(*t)));
  TRY(check_state_rows(state, q, in[6], "gated_delta_rule"));
  const int64_t qw = q.shape[1].value(), vw = v.shape[1].value();
  if (k.shape[1] != q.shape[1] || qw % a.head_k_dim != 0 || vw % a.head_v_dim != 0)
    return bad(fmt::format("gated_delta_rule q {} and k {} must be [rows, Hk*{}], v {} [rows, Hv*{}]", str(q), str(k),
                           a.head_k_dim, str(v), a.head_v_dim));
  const int64_t hk = qw / a.head_k_dim, hv = vw / a.head_v_dim;
  if (hv % hk != 0)
    return bad(fmt::format("gated_delta_rule: {} value heads are not a multiple of {} key heads", hv, hk));
  if (g.shape[1] != Dim(hv) || beta.shape[1] != Dim(hv))
    return bad(fmt::format("gated_delta_rule g {} and beta {} must be [rows, {}]", str(g), str(beta), hv));
  if (state.shape.rank() != 4 || state.shape[1] != Dim(hv) || state.shape[2] != Dim(a.head_k_dim) ||
      state.shape[3] != Dim(a.head_v_dim))
    return bad(fmt::format("gated_delta_rule state must be f32[B, {}, {}, {}], got {}", hv, a.head_k_dim,
                           a.head_v_dim, str(state)));
  return v;
}

Expected<TensorType> infer_gather(const TensorType& table, const TensorType& idx, int64_t axis) {
  TRY(require_int_index(idx, "gather indices"));
  auto ax = table.shape.axis(axis);
  if (!ax) return bad(fmt::format("gather axis {} out of range for {}", axis, str(table)));
  std::vector<Dim> out(table.shape.begin(), table.shape.begin() + *ax);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), table.shape.begin() + *ax + 1, table.shape.end());
  DType dt = table.dtype;
  if (is_packed(dt)) {
    if (*ax != 0 || table.shape.rank() != 2) return bad("gather from a packed table needs a [rows, cols] table, axis 0");
    dt = DType::F32;
  }
  return TensorType{dt, Shape(out)};
}

Expected<TensorType> infer_region(const Types& in, const RegionAttrs& r) {
  if (r.steps.empty()) return bad("elementwise_region has no steps");
  for (size_t s = 0; s < r.steps.size(); ++s) {
    const RegionStep& st = r.steps[s];
    size_t arity = 0;
    switch (st.op) {
      case OpKind::Activation: case OpKind::Cast: arity = 1; break;
      case OpKind::Binary: case OpKind::Compare: arity = 2; break;
      case OpKind::Where: arity = 3; break;
      default: return bad(fmt::format("region step {} has non-elementwise op {}", s, op_name(st.op)));
    }
    if (st.args.size() != arity) return bad(fmt::format("region step {} has {} args, needs {}", s, st.args.size(), arity));
    for (int32_t a : st.args) {
      if (a < 0 && static_cast<size_t>(-1 - a) >= in.size())
        return bad(fmt::format("region step {} reads input {} of {}", s, -1 - a, in.size()));
      if (a >= 0 && static_cast<size_t>(a) >= s) return bad(fmt::format("region step {} reads later step {}", s, a));
    }
  }
  ASSIGN_OR_RETURN(Shape shape, broadcast_all(in));
  return TensorType{r.steps.back().dtype, shape};
}

struct CustomRegistry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<CustomOpDef>> defs;
};
CustomRegistry& custom_registry() {
  static CustomRegistry r;
  return r;
}

}  // namespace

void register_custom_op(CustomOpDef def) {
  auto& r = custom_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto name = def.name;
  r.defs[name] = std::make_shared<CustomOpDef>(std::move(def));
}

const CustomOpDef* find_custom_op(const std::string& name) {
  auto& r = custom_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.defs.find(name);
  return it == r.defs.end() ? nullptr : it->second.get();
}

std::string TensorType::to_string() const { return std::string(dtype_name(dtype)) + shape.to_string(); }

Expected<TensorType> infer_type(OpKind op, const Attrs& attrs, const Types& in, const TensorType& declared) {
  const OpInfo& info = op_info(op);
  const int n = static_cast<int>(in.size());
  if (n < info.min_inputs || (info.max_inputs >= 0 && n > info.max_inputs)) {
    if (info.max_inputs < 0) return bad(fmt::format("{} takes at least {} inputs, got {}", info.name, info.min_inputs, n));
    return bad(fmt::format("{} takes {}..{} inputs, got {}", info.name, info.min_inputs, info.max_inputs, n));
  }
  if (!attrs_match(op, attrs)) return bad(fmt::format("{} has attributes of the wrong kind", info.name));

  switch (op) {
    case OpKind::Input:
    case OpKind::Param:
    case OpKind::Handle: {
      for (const Dim& d : declared.shape)
        if (d.coeff < 0) return bad(fmt::format("negative dim in {}", str(declared)));
      if (is_packed(declared.dtype)) {
        if (op != OpKind::Param) return bad("only params may have packed dtypes");
        if (declared.shape.rank() < 2 || !declared.shape.is_static() ||
            declared.shape.back().value() % dtype_info(declared.dtype).block_size != 0)
          return bad(fmt::format("packed param {} must be a static [.., rows, cols] with cols a multiple of {}",
                                 str(declared), dtype_info(declared.dtype).block_size));
      }
      return declared;
    }
    case OpKind::Constant: {
      const auto& c = std::get<ConstantAttrs>(attrs);
      auto n_el = declared.shape.num_elements();
      if (!n_el) return bad("constant shape must be static");
      auto bytes = dtype_bytes(declared.dtype, *n_el);
      const size_t have = c.data.bytes ? c.data.bytes->size() : 0;
      if (!bytes || static_cast<size_t>(*bytes) != have)
        return bad(fmt::format("constant {} needs {} bytes, has {}", str(declared), bytes.value_or(-1), have));
      return declared;
    }
    case OpKind::Activation:
      TRY(require_float(in[0], "activation input"));
      return in[0];
    case OpKind::Binary: {
      TRY(require_same_dtype(in[0], in[1]));
      if (in[0].dtype == DType::Bool || is_packed(in[0].dtype)) return bad("binary ops need numeric inputs");
      ASSIGN_OR_RETURN(Shape s, broadcast_all(in));
      return TensorType{in[0].dtype, s};
    }
    case OpKind::Compare: {
      TRY(require_same_dtype(in[0], in[1]));
      ASSIGN_OR_RETURN(Shape s, broadcast_all(in));
      return TensorType{DType::Bool, s};
    }
    case OpKind::Where: {
      if (in[0].dtype != DType::Bool) return bad(fmt::format("where condition must be bool, got {}", str(in[0])));
      TRY(require_same_dtype(in[1], in[2]));
      ASSIGN_OR_RETURN(Shape s, broadcast_all(in));
      return TensorType{in[1].dtype, s};
    }
    case OpKind::Cast:
      if (is_packed(declared.dtype) || is_packed(in[0].dtype)) return bad("cast to/from packed types is not supported");
      return TensorType{declared.dtype, in[0].shape};
    case OpKind::MatMul:
      return infer_matmul(in[0], in[1], std::get<MatMulAttrs>(attrs));
    case OpKind::DequantMatMul:
      if (!is_packed(in[1].dtype) && in[1].dtype != DType::F16 && in[1].dtype != DType::BF16)
        return bad(fmt::format("dequant_matmul weight must be packed, f16 or bf16, got {}", str(in[1])));
      return infer_linear(in[0], in[1], true, true);
    case OpKind::Reduce:
      return infer_reduce(in[0], std::get<ReduceAttrs>(attrs));
    case OpKind::Softmax: {
      TRY(require_float(in[0], "softmax input"));
      if (!in[0].shape.axis(std::get<SoftmaxAttrs>(attrs).axis)) return bad("softmax axis out of range");
      return in[0];
    }
    case OpKind::Cumsum: {
      if (!in[0].shape.axis(std::get<CumsumAttrs>(attrs).axis)) return bad("cumsum axis out of range");
      if (in[0].dtype == DType::Bool || is_packed(in[0].dtype)) return bad("cumsum needs a numeric input");
      return in[0];
    }
    case OpKind::TopK: {
      const auto& t = std::get<TopKAttrs>(attrs);
      if (in[0].shape.rank() < 1) return bad("topk needs rank >= 1");
      const Dim last = in[0].shape.back();
      if (t.k <= 0 || (last.is_static() && t.k > last.value()))
        return bad(fmt::format("topk k={} out of range for last dim {}", t.k, last.to_string()));
      if (t.finite_check && (t.k != 1 || t.values)) return bad("topk finite_check needs k=1 and indices (values=false)");
      Shape out = in[0].shape;
      out[out.rank() - 1] = Dim(t.k);
      return TensorType{t.values ? in[0].dtype : DType::I32, out};
    }
    case OpKind::Sample: {
      TRY(require_float(in[0], "sample logits"));
      if (in[0].shape.rank() < 1) return bad("sample needs logits of rank >= 1");
      if (in[0].shape.back() == Dim(0)) return bad("sample needs at least one token in the last dim");
      Shape params = in[0].shape, out = in[0].shape;
      params[params.rank() - 1] = Dim(kSampleParams);
      out[out.rank() - 1] = Dim(1);
      if (in[1].dtype != DType::F32 || !(in[1].shape == params))
        return bad(fmt::format("sample params must be f32{} (draw, temperature, top_k, top_p, min_p), got {}",
                               params.to_string(), in[1].to_string()));
      return TensorType{DType::I32, out};
    }
    case OpKind::LayerNorm:
    case OpKind::RmsNorm:
    case OpKind::HirRmsNorm:
    case OpKind::HirLayerNorm: {
      TRY(require_float(in[0], "norm input"));
      TRY(check_norm_weight(in[0], in[1], "norm gamma"));
      if (in.size() == 3) TRY(check_norm_weight(in[0], in[2], "norm beta"));
      return in[0];
    }
    case OpKind::FusedResidualRmsNorm:
    case OpKind::FusedResidualLayerNorm: {
      TRY(require_float(in[0], "norm input"));
      if (in[0] != in[1]) return bad(fmt::format("residual must match input: {} vs {}", str(in[0]), str(in[1])));
      TRY(check_norm_weight(in[0], in[2], "norm gamma"));
      if (in.size() == 4) TRY(check_norm_weight(in[0], in[3], "norm beta"));
      std::vector<Dim> out{Dim(2)};
      out.insert(out.end(), in[0].shape.begin(), in[0].shape.end());
      return TensorType{in[0].dtype, Shape(out)};
    }
    case OpKind::Rope:
      return infer_rope(in[0], in[1], std::get<RopeAttrs>(attrs));
    case OpKind::Attention:
      return infer_attention(in, std::get<AttentionAttrs>(attrs));
    case OpKind::Reshape:
      return infer_reshape(in[0], std::get<ShapeAttrs>(attrs).shape);
    case OpKind::Transpose:
      return infer_transpose(in[0], std::get<TransposeAttrs>(attrs));
    case OpKind::Narrow:
      return infer_narrow(in[0], std::get<NarrowAttrs>(attrs));
    case OpKind::Concat:
      return infer_concat(in, std::get<AxisAttrs>(attrs).axis);
    case OpKind::Expand: {
      const Shape& target = std::get<ShapeAttrs>(attrs).shape;
      auto b = broadcast_shapes(in[0].shape, target);
      if (!b || *b != target)
        return bad(fmt::format("cannot expand {} to {}", in[0].shape.to_string(), target.to_string()));
      return TensorType{in[0].dtype, target};
    }
    case OpKind::Gather:
      return infer_gather(in[0], in[1], std::get<AxisAttrs>(attrs).axis);
    case OpKind::UpdateSlice: {
      const TensorType &dst = in[0], &src = in[1];
      TRY(require_same_dtype(dst, src));
      TRY(require_int_index(in[2], "update_slice start"));
      auto ax = dst.shape.axis(std::get<AxisAttrs>(attrs).axis);
      if (!ax || src.shape.rank() != dst.shape.rank()) return bad("update_slice axis/rank mismatch");
      // One start for all, or one per slice of the dims before the axis (the batch of
      // sequences of a stacked KV cache [B, ctx, W], each written at its own position).
      const bool per_outer = *ax > 0 && in[2].shape == Shape(std::vector<Dim>(dst.shape.begin(), dst.shape.begin() + *ax));
      if (in[2].shape.num_elements() != std::optional<int64_t>(1) && !per_outer)
        return bad(fmt::format("update_slice start must have 1 element or one per slice before axis {}, got {}", *ax,
                               str(in[2])));
      for (int64_t i = 0; i < dst.shape.rank(); ++i)
        if (i != *ax && dst.shape[i] != src.shape[i])
          return bad(fmt::format("update_slice source {} does not fit {}", str(src), str(dst)));
      return dst;
    }
    case OpKind::FusedMatMulBiasAct:
    case OpKind::HirLinear: {
      const auto& f = std::get<FusedMatMulAttrs>(attrs);
      if (f.has_bias != (in.size() == 3)) return bad("has_bias does not match the number of inputs");
      ASSIGN_OR_RETURN(TensorType out, infer_linear(in[0], in[1], f.transpose_b, op == OpKind::HirLinear));
      if (f.has_bias) TRY(check_bias(out, in[2]));
      return out;
    }
    case OpKind::FusedSwiGLU: {
      const bool tb = std::get<FusedSwiGLUAttrs>(attrs).transpose_b;
      ASSIGN_OR_RETURN(TensorType g, infer_linear(in[0], in[1], tb, false));
      ASSIGN_OR_RETURN(TensorType u, infer_linear(in[0], in[2], tb, false));
      if (g != u) return bad(fmt::format("swiglu gate and up differ: {} vs {}", str(g), str(u)));
      return g;
    }
    case OpKind::FusedLinear:
      return infer_fused_linear(in, std::get<FusedLinearAttrs>(attrs));
    case OpKind::HirSwiGLUFfn: {
      ASSIGN_OR_RETURN(TensorType g, infer_linear(in[0], in[1], true, true));
      ASSIGN_OR_RETURN(TensorType u, infer_linear(in[0], in[2], true, true));
      if (g != u) return bad(fmt::format("swiglu gate and up differ: {} vs {}", str(g), str(u)));
      return infer_linear(g, in[3], true, true);
    }
    case OpKind::HirGeluFfn: {
      const bool gated = std::get<GeluFfnAttrs>(attrs).gated;
      if (gated != (in.size() == 4)) return bad("gelu_ffn: gated needs 4 inputs, ungated 3");
      ASSIGN_OR_RETURN(TensorType h, infer_linear(in[0], in[1], true, true));
      if (gated) {
        ASSIGN_OR_RETURN(TensorType u, infer_linear(in[0], in[2], true, true));
        if (h != u) return bad("gelu_ffn gate and up differ");
      }
      return infer_linear(h, in.back(), true, true);
    }
    case OpKind::HirAttentionBlock: {
      const auto& b = std::get<AttentionBlockAttrs>(attrs);
      if (b.batch < 1 || b.batch > 4096 || (b.batch > 1 && !b.kv_cache))
        return bad(fmt::format("attention_block batch {} needs 1..4096 sequences (and a kv cache when > 1)", b.batch));
      if (b.key_lengths && b.kv_cache) return bad("attention_block key_lengths (the encoder form) takes no kv cache");
      if (b.compact_rows && (b.batch < 2 || !b.kv_cache))
        return bad(fmt::format("attention_block compact_rows needs several sequences and a kv cache (batch {})", b.batch));
      if (b.latent() && (b.qkv_bias || b.qk_norm || b.q_gate || b.key_lengths || b.prescale_q))
        return bad("attention_block: latent attention takes no biases, q-k norms, gate, key lengths or prescaled q");
      const size_t latent_inputs = b.latent() ? (b.latent_q_rank > 0 ? 3 : 1) : 0;
      const size_t want = 6 + (b.qkv_bias ? 3 : 0) + (b.qk_norm ? 2 : 0) + latent_inputs + (b.kv_cache ? 2 : 0) +
                          (b.key_lengths ? 1 : 0) + (b.compact_rows ? 2 : 0);
      if (in.size() != want) return bad(fmt::format("attention_block needs {} inputs for its flags, got {}", want, in.size()));
      const TensorType& x = in[0];
      if (x.shape.rank() < 2) return bad("attention_block input must be [.., S, D]");
      if (b.batch > 1) {
        if (x.shape.rank() != 2) return bad(fmt::format("attention_block with batch {} needs [rows, D], got {}", b.batch, str(x)));
        // The padded rows batch*S: x's own rows, or with compact rows slot_rows' length.
        Dim padded = x.shape[0];
        if (b.compact_rows) {
          const TensorType &slot_rows = in[want - 2], &row_slots = in[want - 1];
          TRY(require_int_index(slot_rows, "attention_block slot_rows"));
          TRY(require_int_index(row_slots, "attention_block row_slots"));
          if (slot_rows.shape.rank() != 1)
            return bad(fmt::format("attention_block slot_rows must be [batch*S], got {}", str(slot_rows)));
          if (row_slots.shape != Shape{x.shape[0]})
            return bad(fmt::format("attention_block row_slots must be [{}] (one per row of x), got {}",
                                   x.shape[0].to_string(), str(row_slots)));
          padded = slot_rows.shape[0];
        }
        if (!padded.div(b.batch))
          return bad(fmt::format("attention_block with batch {} needs batch*S padded rows, got {}", b.batch,
                                 padded.to_string()));
        if (in[5].shape != Shape{padded})
          return bad(fmt::format("attention_block positions must be [{}] (one per padded row), got {}",
                                 padded.to_string(), str(in[5])));
      }
      if (b.key_lengths) {  // [B*S, D] rows, pos [S], kv_len [B]
        const TensorType& kv_len = in.back();
        if (x.shape.rank() != 2 || kv_len.dtype != DType::I32 || kv_len.shape.rank() != 1 || in[5].shape.rank() != 1)
          return bad(fmt::format("attention_block key_lengths needs x [B*S, D], pos i32[S] and kv_len i32[B], got {}, {}, {}",
                                 str(x), str(in[5]), str(kv_len)));
        const std::optional<Dim> rows = Dim::mul(kv_len.shape[0], in[5].shape[0]);
        if (!rows || *rows != x.shape[0])
          return bad(fmt::format("attention_block key_lengths: x has {} rows, not kv_len's B x pos's S ({} x {})",
                                 x.shape[0].to_string(), kv_len.shape[0].to_string(), in[5].shape[0].to_string()));
      }
      const auto& a = b.attn;
      TRY(check_heads(a));
      TensorType q, k, v;
      if (b.latent()) {
        ASSIGN_OR_RETURN(q, infer_latent_projections(b, in, &k, &v));
      } else {
        ASSIGN_OR_RETURN(q, infer_linear(x, in[1], true, true));
        ASSIGN_OR_RETURN(k, infer_linear(x, in[2], true, true));
        ASSIGN_OR_RETURN(v, infer_linear(x, in[3], true, true));
      }
      if (b.use_rope) {
        RopeAttrs r = b.rope;
        if (r.n_rot == 0) r.n_rot = a.head_dim;
        if (b.latent()) r.head_dim = r.n_rot = b.latent_rope_dim;  // the rope part of each head
        TRY(check_rope_attrs(r));
      }
      if (q.shape.back() != Dim(a.n_heads * a.head_dim * (b.q_gate ? 2 : 1)) || k.shape.back() != Dim(a.n_kv_heads * a.head_dim) ||
          v.shape != k.shape)
        return bad(fmt::format("attention_block projections do not match heads: q {} k {} v {}", str(q), str(k), str(v)));
      TRY(require_int_index(in[5], "attention_block positions"));
      size_t i = 6;
      if (b.qkv_bias) {
        TRY(check_bias(q, in[i]));
        TRY(check_bias(k, in[i + 1]));
        TRY(check_bias(v, in[i + 2]));
        i += 3;
      }
      if (b.qk_norm) {
        for (int j = 0; j < 2; ++j)
          if (in[i + j].shape != Shape{Dim(a.head_dim)}) return bad("qk norm weights must be [head_dim]");
        i += 2;
      }
      i += latent_inputs;
      if (b.kv_cache) {  // [ctx, W], or [batch, ctx, W]: one stack of every sequence's cache
        for (size_t j = 0; j < 2; ++j) {
          const TensorType& c = in[i + j];
          const bool dtype_ok = c.dtype == x.dtype || (x.dtype == DType::F32 && (c.dtype == DType::F16 || c.dtype == DType::BF16));
          const bool shape_ok = b.batch == 1 ? c.shape.rank() == 2
                                             : c.shape.rank() == 3 && c.shape[0] == Dim(b.batch);
          if (!shape_ok || c.shape.back() != k.shape.back() || !dtype_ok || c.dtype != in[i].dtype)
            return bad(fmt::format("kv caches must be {} (or f16/bf16)[{}ctx, {}], got {}", dtype_name(x.dtype),
                                   b.batch == 1 ? "" : fmt::format("{}, ", b.batch), k.shape.back().to_string(),
                                   str(c)));
        }
      }
      TensorType heads = q;  // what reaches the output projection: the heads, without their gates
      heads.shape = [&] {
        std::vector<Dim> d(q.shape.begin(), q.shape.end() - 1);
        d.emplace_back(a.n_heads * (b.latent() ? b.latent_v_dim : a.head_dim));
        return Shape(d);
      }();
      return infer_linear(heads, in[4], true, true);
    }
    case OpKind::HirEmbedding:
      if (in[0].shape.rank() != 2) return bad(fmt::format("embedding table must be [vocab, dim], got {}", str(in[0])));
      return infer_gather(in[0], in[1], 0);
    case OpKind::ElementwiseRegion:
      return infer_region(in, std::get<RegionAttrs>(attrs));
    case OpKind::MoeRoute:
      return infer_moe_route(in[0], std::get<MoeRouteAttrs>(attrs));
    case OpKind::MoeFfn:
      return infer_moe_ffn(in, std::get<MoeFfnAttrs>(attrs));
    case OpKind::CausalConv1d:
      return infer_causal_conv(in, std::get<CausalConvAttrs>(attrs));
    case OpKind::GatedDeltaRule:
      return infer_delta_rule(in, std::get<DeltaRuleAttrs>(attrs));
    case OpKind::Conv:
      return detail::infer_conv(in, std::get<ConvAttrs>(attrs));
    case OpKind::ConvTranspose:
      return detail::infer_conv_transpose(in, std::get<ConvTransposeAttrs>(attrs));
    case OpKind::GroupNorm:
      return detail::infer_group_norm(in, std::get<GroupNormAttrs>(attrs));
    case OpKind::Interpolate:
      return detail::infer_interpolate(in[0], std::get<InterpolateAttrs>(attrs));
    case OpKind::WindowPartition:
      return detail::infer_window_partition(in[0], std::get<WindowAttrs>(attrs));
    case OpKind::WindowUnpartition:
      return detail::infer_window_unpartition(in[0], std::get<WindowAttrs>(attrs));
    case OpKind::RelPosAttention:
      return detail::infer_rel_pos_attention(in, std::get<RelPosAttentionAttrs>(attrs));
    case OpKind::AllReduce:
    case OpKind::AllGather: {
      const int64_t world = std::get<CollectiveAttrs>(attrs).world;
      if (world < 2) return bad(fmt::format("{} needs a group of >= 2 ranks, got world={}", op_name(op), world));
      if (op == OpKind::AllReduce) {
        TRY(require_float(in[0], "all_reduce input"));
        return in[0];
      }
      if (is_packed(in[0].dtype)) return bad(fmt::format("all_gather of packed {}", str(in[0])));
      std::vector<Dim> dims{Dim(world)};
      for (const Dim& d : in[0].shape.dims()) dims.push_back(d);
      return TensorType{in[0].dtype, Shape(std::move(dims))};
    }
    case OpKind::Custom: {
      const auto& c = std::get<CustomAttrs>(attrs);
      const CustomOpDef* def = find_custom_op(c.name);
      if (!def) return bad(fmt::format("unknown custom op '{}'", c.name));
      if (n < def->min_inputs || (def->max_inputs >= 0 && n > def->max_inputs))
        return bad(fmt::format("custom op '{}' got {} inputs", c.name, n));
      return def->infer(in, c.config);
    }
  }
  return bad("unknown op");
}

}  // namespace rlx::ir
