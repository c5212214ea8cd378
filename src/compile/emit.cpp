// Shared emitters for the primitive forms of fused ops, and typed constant coding.
// The attention primitive form written here is the one fuse_attention.cpp recognizes;
// change both together.
#include "emit.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "rlx/base/half.h"

namespace rlx::compile::detail {
using namespace ir;

std::vector<uint8_t> encode_scalar(DType dt, double v) {
  std::vector<uint8_t> out(static_cast<size_t>(dtype_info(dt).bytes_per_block));
  auto put = [&](auto x) { std::memcpy(out.data(), &x, sizeof x); };
  switch (dt) {
    case DType::F32: put(static_cast<float>(v)); break;
    case DType::F64: put(v); break;
    case DType::F16: put(f32_to_f16_bits(static_cast<float>(v))); break;
    case DType::BF16: put(f32_to_bf16_bits(static_cast<float>(v))); break;
    case DType::I8: put(static_cast<int8_t>(v)); break;
    case DType::U8: put(static_cast<uint8_t>(v)); break;
    case DType::I32: put(static_cast<int32_t>(v)); break;
    case DType::I64: put(static_cast<int64_t>(v)); break;
    case DType::Bool: put(static_cast<uint8_t>(v != 0)); break;
    default: RLX_ASSERT(!"encode_scalar: packed dtype");
  }
  return out;
}

double decode_element(DType dt, const uint8_t* p, int64_t i) {
  auto get = [&](auto zero) {
    decltype(zero) x;
    std::memcpy(&x, p + i * static_cast<int64_t>(sizeof x), sizeof x);
    return x;
  };
  switch (dt) {
    case DType::F32: return get(0.0f);
    case DType::F64: return get(0.0);
    case DType::F16: return f16_bits_to_f32(get(uint16_t{0}));
    case DType::BF16: return bf16_bits_to_f32(get(uint16_t{0}));
    case DType::I8: return get(int8_t{0});
    case DType::U8: return get(uint8_t{0});
    case DType::I32: return get(int32_t{0});
    case DType::I64: return static_cast<double>(get(int64_t{0}));
    case DType::Bool: return get(uint8_t{0}) != 0;
    default: RLX_ASSERT(!"decode_element: packed dtype");
  }
  return 0;
}

ValueId emit_scalar(GraphBuilder& b, DType dt, double v) { return b.constant(dt, Shape{}, encode_scalar(dt, v)); }

std::optional<double> uniform_constant(const Graph& g, ValueId v) {
  const Node& n = g.node(v);
  if (n.op != OpKind::Constant || is_packed(n.dtype)) return std::nullopt;
  const auto& data = n.attr<ConstantAttrs>().data.bytes;
  const auto count = n.shape.num_elements();
  if (!data || !count || *count == 0) return std::nullopt;
  const double first = decode_element(n.dtype, data->data(), 0);
  for (int64_t i = 1; i < *count; ++i) {
    const double x = decode_element(n.dtype, data->data(), i);
    if (!(x == first || (std::isnan(x) && std::isnan(first)))) return std::nullopt;
  }
  return first;
}

ValueId emit_linear_primitives(GraphBuilder& b, ValueId x, ValueId w, std::optional<ValueId> bias, ActKind act,
                               bool transpose_b) {
  const TensorType xt = b.type(x);
  ValueId xin = x;
  if (xt.shape.rank() == 1) xin = b.reshape(x, Shape{Dim(1), xt.shape[0]});
  ValueId win = w;
  if (b.type(w).dtype != xt.dtype) win = b.cast(w, xt.dtype);
  ValueId y = b.matmul(xin, win, false, transpose_b);
  if (xt.shape.rank() == 1) y = b.reshape(y, Shape{b.type(y).shape.back()});
  if (bias) y = b.add(y, *bias);
  if (act != ActKind::Identity) y = b.activation(act, y);
  return y;
}

ValueId emit_swiglu_primitives(GraphBuilder& b, ValueId x, ValueId wg, ValueId wu, bool transpose_b) {
  const ValueId g = emit_linear_primitives(b, x, wg, std::nullopt, ActKind::Identity, transpose_b);
  const ValueId u = emit_linear_primitives(b, x, wu, std::nullopt, ActKind::Identity, transpose_b);
  return b.mul(b.activation(ActKind::Silu, g), u);
}

double attention_scale(const AttentionAttrs& a) {
  return a.scale != 0.0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(a.head_dim));
}

namespace {

// [P.., L, heads*D] -> [P.., heads, L, D]
ValueId split_heads(GraphBuilder& b, ValueId x, int64_t heads, int64_t head_dim) {
  const Shape s = b.type(x).shape;
  std::vector<Dim> dims(s.begin(), s.end() - 1);
  dims.emplace_back(heads);
  dims.emplace_back(head_dim);
  const ValueId r = b.reshape(x, Shape(dims));
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < rank; ++i) perm.push_back(i);
  std::swap(perm[static_cast<size_t>(rank - 3)], perm[static_cast<size_t>(rank - 2)]);
  return b.transpose(r, perm);
}

// [P.., KV, T, D] -> [P.., KV*G, T, D] by repeating each kv head G times (GQA).
ValueId repeat_heads(GraphBuilder& b, ValueId x, int64_t groups) {
  if (groups == 1) return x;
  const Shape s = b.type(x).shape;
  const int64_t r = s.rank();
  std::vector<Dim> with_one(s.begin(), s.end());
  with_one.insert(with_one.begin() + (r - 2), Dim(1));  // [P.., KV, 1, T, D]
  std::vector<Dim> expanded = with_one;
  expanded[static_cast<size_t>(r - 2)] = Dim(groups);
  std::vector<Dim> merged(s.begin(), s.end());
  merged[static_cast<size_t>(r - 3)] = Dim(s[r - 3].value() * groups);
  return b.reshape(b.expand(b.reshape(x, Shape(with_one)), Shape(expanded)), Shape(merged));
}

// 0..n-1 (exclusive cumsum of ones) in `dt`.
ValueId iota(GraphBuilder& b, DType dt, const Dim& n) {
  return b.cumsum(b.expand(emit_scalar(b, dt, 1), Shape{n}), 0, /*exclusive=*/true);
}

// [P.., heads, L, D] -> [P.., L, heads*D]
ValueId merge_heads(GraphBuilder& b, ValueId x) {
  const Shape s = b.type(x).shape;
  const int64_t rank = s.rank();
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < rank; ++i) perm.push_back(i);
  std::swap(perm[static_cast<size_t>(rank - 3)], perm[static_cast<size_t>(rank - 2)]);
  const ValueId t = b.transpose(x, perm);
  std::vector<Dim> dims(s.begin(), s.end() - 3);
  dims.push_back(s[rank - 2]);
  dims.emplace_back(s[rank - 3].value() * s[rank - 1].value());
  return b.reshape(t, Shape(dims));
}

}  // namespace

// The primitive form (G = n_heads / n_kv_heads):
//   qh = transpose(reshape(q, [P.., S, H, D]))                 -> [P.., H, S, D]
//   kh = transpose(reshape(k, [P.., T, KV, D])), likewise vh; if G > 1 each becomes
//        reshape(expand(reshape(kh, [P.., KV, 1, T, D]), [P.., KV, G, T, D]), [P.., H, T, D])
//   s  = mul(matmul(qh, kh, transpose_b), scale)
//   softcap > 0:  s = mul(tanh(div(s, c)), c)
//   mask != none: pk = cumsum_excl(expand(1, [T])), pq = q_pos (a [P.., S] q_pos is
//        reshaped to [P.., 1, S, 1] where [S, 1] stands below), or without q_pos both
//        shifted to end-aligned: pk -= sum(ones[T]), pq = cumsum_excl(ones[S]) - sum(ones[S]);
//        causal = compare.le(pk, reshape(pq, [S, 1]));  sliding additionally
//        where(causal, compare.lt(sub(reshape(pq,[S,1]), pk), window), false);
//        local: compare.le(pk, pq_col + window) and compare.ge(pk, pq_col - window);
//   kv_len: keys = compare.lt(pk, reshape(kv_len, [P.., 1, 1, 1])) joins the mask;
//        s = where(mask, s, -inf)
//   out = merge_heads(matmul(softmax(s, -1), vh))
ValueId emit_attention_primitives(GraphBuilder& b, ValueId q, ValueId k, ValueId v, const AttentionAttrs& a,
                                  std::optional<ValueId> q_pos, std::optional<ValueId> kv_len) {
  const TensorType qt = b.type(q);
  const DType dt = qt.dtype;
  const Dim S = qt.shape[qt.shape.rank() - 2];
  const Dim T = b.type(k).shape[b.type(k).shape.rank() - 2];
  const int64_t groups = a.n_heads / a.n_kv_heads;
  const ValueId qh = split_heads(b, q, a.n_heads, a.head_dim);
  const ValueId kh = repeat_heads(b, split_heads(b, k, a.n_kv_heads, a.head_dim), groups);
  const ValueId vh = repeat_heads(b, split_heads(b, v, a.n_kv_heads, a.head_dim), groups);
  ValueId s = b.mul(b.matmul(qh, kh, false, true), emit_scalar(b, dt, attention_scale(a)));
  if (a.softcap > 0) {
    const ValueId c = emit_scalar(b, dt, a.softcap);
    s = b.mul(b.activation(ActKind::Tanh, b.div(s, c)), c);
  }
  auto no = [&] { return emit_scalar(b, DType::Bool, 0); };
  std::optional<ValueId> mask;
  if (a.mask != MaskKind::None) {
    const DType it = q_pos ? b.type(*q_pos).dtype : DType::I32;
    ValueId pk = iota(b, it, T);
    ValueId pq;
    if (q_pos) {
      pq = *q_pos;
    } else {
      const ValueId ones_t = b.expand(emit_scalar(b, it, 1), Shape{T});
      pk = b.sub(pk, b.reduce(ReduceKind::Sum, ones_t, {0}, true));
      const ValueId ones_s = b.expand(emit_scalar(b, it, 1), Shape{S});
      pq = b.sub(b.cumsum(ones_s, 0, true), b.reduce(ReduceKind::Sum, ones_s, {0}, true));
    }
    // q_pos [P.., S] (each batch item its own rows): [P.., 1, S, 1] against scores [P.., H, S, T].
    std::vector<Dim> col{S, Dim(1)};
    if (q_pos && b.type(*q_pos).shape.rank() > 1) {
      col.assign(qt.shape.begin(), qt.shape.end() - 2);
      col.push_back(Dim(1));
      col.push_back(S);
      col.push_back(Dim(1));
    }
    const ValueId pq_col = b.reshape(pq, Shape(col));
    auto w = [&] { return emit_scalar(b, it, static_cast<double>(a.window)); };
    if (a.mask == MaskKind::Local) {
      const ValueId win = w();
      const ValueId upper = b.compare(CompareKind::Le, pk, b.add(pq_col, win));
      mask = b.where(upper, b.compare(CompareKind::Ge, pk, b.sub(pq_col, win)), no());
    } else {
      mask = b.compare(CompareKind::Le, pk, pq_col);
      if (a.mask == MaskKind::SlidingWindow) {
        const ValueId in_window = b.compare(CompareKind::Lt, b.sub(pq_col, pk), w());
        mask = b.where(*mask, in_window, no());
      }
    }
  }
  if (kv_len) {
    std::vector<Dim> lead(qt.shape.begin(), qt.shape.end() - 2);
    for (int i = 0; i < 3; ++i) lead.emplace_back(1);
    const ValueId keys = b.compare(CompareKind::Lt, iota(b, DType::I32, T), b.reshape(*kv_len, Shape(lead)));
    mask = mask ? b.where(*mask, keys, no()) : keys;
  }
  if (mask) s = b.where(*mask, s, emit_scalar(b, dt, -std::numeric_limits<double>::infinity()));
  const ValueId p = b.softmax(s, -1);
  return merge_heads(b, b.matmul(p, vh));
}

// The primitive form (x[P.., S, W], D = head_dim, half = n_rot / 2, H = heads read):
//   xs  = narrow(x, last, offset, width) when width > 0; cast to f32 when x is not f32
//   ang = mul(reshape(cast(pos, f32), [S, 1]), inv_freq)   inv_freq: f32[half] constant
//   c, s = cos(ang), sin(ang) (times attn_factor when it is not 1), reshaped to
//          [S, 1, half] (neox) or [S, 1, half, 1] (normal)
//   xh  = reshape(xs, [P.., S, H, D]); r = narrow(xh, last, 0, n_rot) when n_rot < D
//   neox:   a = narrow(r, last, 0, half), b = narrow(r, last, half, half)
//   normal: r2 = reshape(r, [P.., S, H, half, 2]); a, b = narrow(r2, last, 0 | 1, 1)
//   rot = concat(a*c - b*s, a*s + b*c, last) (normal: reshaped back to [P.., S, H, n_rot])
//   y   = reshape(concat(rot, narrow(xh, last, n_rot, D - n_rot)) or rot, [P.., S, H*D]),
//         cast back to x's dtype.
// Angles are f32 products (the native kernels use f64), a difference of about 1e-7 of the
// position in radians.
ValueId emit_rope_primitives(GraphBuilder& b, ValueId x, ValueId pos, const RopeAttrs& r) {
  const DType dt = b.type(x).dtype;
  ValueId xs = x;
  const int64_t rank = b.type(x).shape.rank();
  if (r.width > 0) xs = b.narrow(xs, rank - 1, r.offset, Dim(r.width));
  if (dt != DType::F32) xs = b.cast(xs, DType::F32);
  const Shape xsh = b.type(xs).shape;
  const Dim S = xsh[rank - 2];
  const int64_t D = r.head_dim, half = r.n_rot / 2, H = xsh.back().value() / D;
  const bool neox = r.layout == RopeLayout::Neox;

  const std::vector<double> inv = rope_inv_freq(r);
  std::vector<float> inv_f(inv.begin(), inv.end());
  const ValueId posf = b.reshape(b.cast(pos, DType::F32), Shape{S, Dim(1)});
  const ValueId ang = b.mul(posf, b.constant_f32(Shape{Dim(half)}, inv_f));
  const Shape cs_shape = neox ? Shape{S, Dim(1), Dim(half)} : Shape{S, Dim(1), Dim(half), Dim(1)};
  // cos / sin of the angles, times attn_factor (YaRN / LongRoPE magnitude) when not 1.
  auto table = [&](ActKind k) {
    ValueId t = b.activation(k, ang);
    if (r.attn_factor != 1.0) t = b.mul(t, b.scalar(static_cast<float>(r.attn_factor)));
    return b.reshape(t, cs_shape);
  };
  const ValueId c = table(ActKind::Cos);
  const ValueId s = table(ActKind::Sin);

  std::vector<Dim> heads(xsh.begin(), xsh.end() - 1);
  heads.emplace_back(H);
  heads.emplace_back(D);
  const ValueId xh = b.reshape(xs, Shape(heads));
  const int64_t hr = rank + 1;  // rank of xh
  ValueId rotated = r.n_rot < D ? b.narrow(xh, hr - 1, 0, Dim(r.n_rot)) : xh;
  ValueId a, bb;
  int64_t axis = hr - 1;
  if (neox) {
    a = b.narrow(rotated, axis, 0, Dim(half));
    bb = b.narrow(rotated, axis, half, Dim(half));
  } else {
    std::vector<Dim> pairs(heads.begin(), heads.end() - 1);
    pairs.emplace_back(half);
    pairs.emplace_back(2);
    const ValueId r2 = b.reshape(rotated, Shape(pairs));
    axis = hr;
    a = b.narrow(r2, axis, 0, Dim(1));
    bb = b.narrow(r2, axis, 1, Dim(1));
  }
  ValueId rot = b.concat({b.sub(b.mul(a, c), b.mul(bb, s)), b.add(b.mul(a, s), b.mul(bb, c))}, axis);
  if (!neox) {
    std::vector<Dim> back(heads.begin(), heads.end() - 1);
    back.emplace_back(r.n_rot);
    rot = b.reshape(rot, Shape(back));
  }
  if (r.n_rot < D) rot = b.concat({rot, b.narrow(xh, hr - 1, r.n_rot, Dim(D - r.n_rot))}, hr - 1);
  std::vector<Dim> out(xsh.begin(), xsh.end());
  ValueId y = b.reshape(rot, Shape(out));
  if (dt != DType::F32) y = b.cast(y, dt);
  return y;
}

}  // namespace rlx::compile::detail
