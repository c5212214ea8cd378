// Reference kernels for Rope and Attention, written as op.h defines them: rope turns pair
// i of every head by pos * rope_inv_freq(attrs)[i] and scales it by attn_factor; attention
// scores every allowed key, takes the softmax over them and averages the values.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/reference/reference_kernels.h"

namespace rlx::reference_backend {

// x[.., S, in_width] at positions pos[S]: reads columns [offset, offset + width) of each
// row, writes `width` columns. Normal layout: pairs (2i, 2i+1); neox: (i, i + n_rot/2).
// Columns n_rot.. of each head pass through.
std::vector<double> rope_rows(const std::vector<double>& x, int64_t in_width, const std::vector<int64_t>& out_dims,
                              const std::vector<double>& pos, const ir::RopeAttrs& r) {
  const int64_t width = out_dims.back();
  const int64_t seq = out_dims[out_dims.size() - 2];
  const int64_t rows = width == 0 ? 0 : element_count(out_dims) / width;
  const int64_t heads = width / r.head_dim, half = r.n_rot / 2;
  const std::vector<double> inv_freq = ir::rope_inv_freq(r);
  const bool neox = r.layout == ir::RopeLayout::Neox;
  std::vector<double> y(static_cast<size_t>(element_count(out_dims)));
  for (int64_t row = 0; row < rows; ++row) {
    const double p = pos[static_cast<size_t>(row % seq)];
    for (int64_t h = 0; h < heads; ++h) {
      const double* in = x.data() + row * in_width + r.offset + h * r.head_dim;
      double* out = y.data() + row * width + h * r.head_dim;
      for (int64_t d = 0; d < r.head_dim; ++d) out[d] = in[d];
      for (int64_t i = 0; i < half; ++i) {
        const double angle = p * inv_freq[static_cast<size_t>(i)];
        const double c = std::cos(angle) * r.attn_factor, s = std::sin(angle) * r.attn_factor;
        const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        out[i0] = in[i0] * c - in[i1] * s;
        out[i1] = in[i0] * s + in[i1] * c;
      }
    }
  }
  return y;
}

Status run_rope(const RefCall& call) {
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[0]));
  ASSIGN_OR_RETURN(std::vector<double> pos, read_values(call.in[1]));
  write_values(call.out, rope_rows(x, call.in[0].dims.back(), call.out.dims, pos, call.attr<ir::RopeAttrs>()));
  return {};
}

// q[.., S, n_heads*D], k/v[.., T, n_kv_heads*D], optional q_pos[S] (or [.., S]: batch
// item b's row i at q_pos[b, i]). Query i sits at q_pos[i], else at T - S + i
// (bottom-right alignment); query head h reads kv head
// h / (n_heads / n_kv_heads). Causal keeps keys j <= pos, sliding window also
// pos - j < window, local |pos - j| <= window; optional kv_len[batch] keeps only keys
// j < kv_len[b] of batch item b. A query with no allowed key gets zeros.
Status run_attention(const RefCall& call) {
  const auto& a = call.attr<ir::AttentionAttrs>();
  ASSIGN_OR_RETURN(std::vector<double> q, read_values(call.in[0]));
  ASSIGN_OR_RETURN(std::vector<double> k, read_values(call.in[1]));
  ASSIGN_OR_RETURN(std::vector<double> v, read_values(call.in[2]));
  std::vector<double> q_pos;
  if (call.in.size() >= 4) {
    ASSIGN_OR_RETURN(q_pos, read_values(call.in[3]));
  }
  std::vector<double> kv_len;
  if (call.in.size() == 5) {
    ASSIGN_OR_RETURN(kv_len, read_values(call.in[4]));
  }
  const std::vector<int64_t>& qd = call.in[0].dims;
  const size_t rank = qd.size();
  const int64_t seq_q = qd[rank - 2], seq_kv = call.in[1].dims[rank - 2];
  const int64_t batch = element_count(std::vector<int64_t>(qd.begin(), qd.end() - 2));
  const bool pos_per_item = static_cast<int64_t>(q_pos.size()) != seq_q;  // [B.., S]: each item its own rows
  const int64_t n_heads = a.n_heads, n_kv = a.n_kv_heads, hd = a.head_dim, group = n_heads / n_kv;
  const double scale = a.scale > 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(hd));
  const double minus_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> out(q.size(), 0.0), scores(static_cast<size_t>(seq_kv));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t kv_head = h / group;
      for (int64_t i = 0; i < seq_q; ++i) {
        const double pos = q_pos.empty() ? static_cast<double>(seq_kv - seq_q + i)
                                          : q_pos[static_cast<size_t>(pos_per_item ? b * seq_q + i : i)];
        const double* qi = q.data() + ((b * seq_q + i) * n_heads + h) * hd;
        double mx = minus_inf;
        for (int64_t j = 0; j < seq_kv; ++j) {
          const auto key = static_cast<double>(j);
          bool allowed = a.mask == ir::MaskKind::None || a.mask == ir::MaskKind::Local || key <= pos;
          if (a.mask == ir::MaskKind::SlidingWindow) allowed = allowed && pos - key < static_cast<double>(a.window);
          if (a.mask == ir::MaskKind::Local) allowed = std::fabs(pos - key) <= static_cast<double>(a.window);
          if (!kv_len.empty()) allowed = allowed && key < kv_len[static_cast<size_t>(b)];
          scores[static_cast<size_t>(j)] = minus_inf;
          if (!allowed) continue;
          const double* kj = k.data() + ((b * seq_kv + j) * n_kv + kv_head) * hd;
          double s = 0.0;
          for (int64_t d = 0; d < hd; ++d) s += qi[d] * kj[d];
          s *= scale;
          if (a.softcap > 0) s = a.softcap * std::tanh(s / a.softcap);
          scores[static_cast<size_t>(j)] = s;
          mx = std::max(mx, s);
        }
        if (mx == minus_inf) continue;
        double sum = 0.0;
        for (int64_t j = 0; j < seq_kv; ++j)
          if (scores[static_cast<size_t>(j)] != minus_inf) sum += std::exp(scores[static_cast<size_t>(j)] - mx);
        double* oi = out.data() + ((b * seq_q + i) * n_heads + h) * hd;
        for (int64_t j = 0; j < seq_kv; ++j) {
          if (scores[static_cast<size_t>(j)] == minus_inf) continue;
          const double w = std::exp(scores[static_cast<size_t>(j)] - mx) / sum;
          const double* vj = v.data() + ((b * seq_kv + j) * n_kv + kv_head) * hd;
          for (int64_t d = 0; d < hd; ++d) oi[d] += w * vj[d];
        }
      }
    }
  }
  write_values(call.out, out);
  return {};
}

}  // namespace rlx::reference_backend
