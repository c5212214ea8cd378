// CPU steps for Rope and Attention. Attention is flash-style: one pass over the keys
// per query row with a running max and sum (no score matrix), GQA by head grouping,
// causal / sliding-window masks aligned bottom-right unless query positions are given.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_step.h"
#include "backends/cpu/kernels/attention.h"
#include "backends/cpu/kernels/kernel_context.h"

namespace rlx::cpu_backend {
namespace {

using ir::DType;

constexpr double kPi = 3.14159265358979323846;

struct RopeParams {
  int64_t rows = 0;      // product of dims before the last (each row has one position)
  int64_t seq = 0;       // S: positions index = row % S
  int64_t width = 0;     // n_heads * head_dim
  int64_t head_dim = 0, n_rot = 0;
  bool neox = false;
  DType x_dt = DType::F32, out_dt = DType::F32, pos_dt = DType::I32;
  std::vector<double> inv_freq;  // n_rot / 2
};

std::vector<double> rope_inv_freq(const ir::RopeAttrs& r) {
  std::vector<double> f(static_cast<size_t>(r.n_rot / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    double inv = std::pow(r.theta, -2.0 * static_cast<double>(i) / static_cast<double>(r.n_rot));
    if (r.scaling == ir::RopeScaling::Linear) {
      inv /= r.factor;
    } else if (r.scaling == ir::RopeScaling::Llama3) {
      const double wavelen = 2 * kPi / inv;
      const double low_wl = static_cast<double>(r.original_context) / r.low_freq_factor;
      const double high_wl = static_cast<double>(r.original_context) / r.high_freq_factor;
      if (wavelen > low_wl) {
        inv /= r.factor;
      } else if (wavelen >= high_wl) {
        const double smooth = (static_cast<double>(r.original_context) / wavelen - r.low_freq_factor) /
                              (r.high_freq_factor - r.low_freq_factor);
        inv = (1 - smooth) * inv / r.factor + smooth * inv;
      }
    }
    f[i] = inv;
  }
  return f;
}

Status rope_fn(const Step& s, const StepCtx& ctx) {
  const RopeParams& p = s.p<RopeParams>();
  const int64_t rows = ctx.rows(p.rows, s.scalable);
  const int64_t n_heads = p.width / p.head_dim;
  const int64_t half = p.n_rot / 2;
  parallel_for(ctx, rows, 4, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const double pos = static_cast<double>(load_i(p.pos_dt, s.in_ptr[1], r % p.seq));
      const int64_t base = r * p.width;
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t hb = base + h * p.head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const double ang = pos * p.inv_freq[static_cast<size_t>(i)];
          const float c = static_cast<float>(std::cos(ang)), sn = static_cast<float>(std::sin(ang));
          const int64_t i0 = p.neox ? i : 2 * i;
          const int64_t i1 = p.neox ? i + half : 2 * i + 1;
          const float x0 = load_f(p.x_dt, s.in_ptr[0], hb + i0);
          const float x1 = load_f(p.x_dt, s.in_ptr[0], hb + i1);
          store_f(p.out_dt, s.out_ptr, hb + i0, x0 * c - x1 * sn);
          store_f(p.out_dt, s.out_ptr, hb + i1, x0 * sn + x1 * c);
        }
        for (int64_t i = p.n_rot; i < p.head_dim; ++i)
          store_f(p.out_dt, s.out_ptr, hb + i, load_f(p.x_dt, s.in_ptr[0], hb + i));
      }
    }
  });
  return {};
}

struct AttnParams {
  int64_t batch = 1, S = 0, T = 0;
  int64_t n_heads = 1, n_kv = 1, hd = 1;
  ir::MaskKind mask = ir::MaskKind::Causal;
  int64_t window = 0;
  float scale = 1.0f, softcap = 0.0f;
  bool has_qpos = false;
  DType dt = DType::F32, kv_dt = DType::F32, out_dt = DType::F32, pos_dt = DType::I32;
  bool q_bucket = false, k_bucket = false;
};

Status attention_fn(const Step& s, const StepCtx& ctx) {
  const AttnParams& p = s.p<AttnParams>();
  const int64_t S = p.q_bucket && ctx.extent_on ? p.S / ctx.upper * ctx.actual : p.S;
  const int64_t T = p.k_bucket && ctx.extent_on ? p.T / ctx.upper * ctx.actual : p.T;
  const int64_t group = p.n_heads / p.n_kv;
  const int64_t qw = p.n_heads * p.hd, kw = p.n_kv * p.hd;
  const bool f32 = p.dt == DType::F32 && p.kv_dt == DType::F32 && p.out_dt == DType::F32;
  // One sequence with f32 queries and i32 positions: the kernels library's flash-style
  // kernel (f32 KV) or its f16-KV kernel with llama.cpp's f16-cache numerics.
  if (p.batch == 1 && p.dt == DType::F32 && p.out_dt == DType::F32 && (!p.has_qpos || p.pos_dt == DType::I32) &&
      (p.kv_dt == DType::F32 || p.kv_dt == DType::F16)) {
    cpu::AttentionParams ap;
    ap.seq_q = S;
    ap.seq_kv = T;
    ap.n_heads = p.n_heads;
    ap.n_kv_heads = p.n_kv;
    ap.head_dim = p.hd;
    ap.scale = p.scale;
    ap.softcap = p.softcap;
    ap.mask = p.mask == ir::MaskKind::None ? cpu::AttnMask::kNone
              : p.mask == ir::MaskKind::Causal ? cpu::AttnMask::kCausal
                                                : cpu::AttnMask::kSlidingWindow;
    ap.window = p.window;
    ap.q_pos = p.has_qpos ? reinterpret_cast<const int32_t*>(s.in_ptr[3]) : nullptr;
    const cpu::KernelContext kc{ctx.pool, isa_cap()};
    if (p.kv_dt == DType::F32) {
      cpu::attention_f32(kc, ap, s.inf(0), s.inf(1), s.inf(2), s.outf());
    } else {
      cpu::attention_f16kv(kc, ap, s.inf(0), reinterpret_cast<const uint16_t*>(s.in_ptr[1]),
                           reinterpret_cast<const uint16_t*>(s.in_ptr[2]), s.outf());
    }
    return {};
  }
  const int64_t tasks = p.batch * p.n_heads * S;
  parallel_for(ctx, tasks, 4, [&](int64_t tb, int64_t te) {
    auto* buf = static_cast<float*>(cpu::thread_scratch(cpu::ScratchSlot::kShared, sizeof(float) * 3 * p.hd));
    float* q = buf;
    float* acc = buf + p.hd;
    float* kv = buf + 2 * p.hd;
    for (int64_t t = tb; t < te; ++t) {
      const int64_t i = t % S;
      const int64_t h = (t / S) % p.n_heads;
      const int64_t b = t / (S * p.n_heads);
      const int64_t kvh = h / group;
      const int64_t q_off = (b * p.S + i) * qw + h * p.hd;
      const int64_t pos = p.has_qpos ? load_i(p.pos_dt, s.in_ptr[3], i) : T - S + i;
      int64_t j_end = T, j_begin = 0;
      if (p.mask != ir::MaskKind::None) j_end = std::min<int64_t>(T, pos + 1);
      if (p.mask == ir::MaskKind::SlidingWindow) j_begin = std::max<int64_t>(0, pos - p.window + 1);
      for (int64_t d = 0; d < p.hd; ++d) {
        q[d] = (f32 ? s.inf(0)[q_off + d] : load_f(p.dt, s.in_ptr[0], q_off + d)) * p.scale;
        acc[d] = 0.0f;
      }
      float mx = -std::numeric_limits<float>::infinity();
      double sum = 0;
      for (int64_t j = j_begin; j < j_end; ++j) {
        const int64_t k_off = (b * p.T + j) * kw + kvh * p.hd;
        const float* kr;
        if (f32) {
          kr = s.inf(1) + k_off;
        } else {
          for (int64_t d = 0; d < p.hd; ++d) kv[d] = load_f(p.kv_dt, s.in_ptr[1], k_off + d);
          kr = kv;
        }
        float sc = 0;
        for (int64_t d = 0; d < p.hd; ++d) sc += q[d] * kr[d];
        if (p.softcap > 0) sc = p.softcap * std::tanh(sc / p.softcap);
        float w;
        if (sc > mx) {
          const float corr = mx == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(mx - sc);
          for (int64_t d = 0; d < p.hd; ++d) acc[d] *= corr;
          sum *= corr;
          mx = sc;
          w = 1.0f;
        } else {
          w = std::exp(sc - mx);
        }
        sum += w;
        const float* vr;
        if (f32) {
          vr = s.inf(2) + k_off;
        } else {
          for (int64_t d = 0; d < p.hd; ++d) kv[d] = load_f(p.kv_dt, s.in_ptr[2], k_off + d);
          vr = kv;
        }
        for (int64_t d = 0; d < p.hd; ++d) acc[d] += w * vr[d];
      }
      const float inv = sum > 0 ? static_cast<float>(1.0 / sum) : 0.0f;
      for (int64_t d = 0; d < p.hd; ++d) {
        if (f32) s.outf()[q_off + d] = acc[d] * inv;
        else store_f(p.out_dt, s.out_ptr, q_off + d, acc[d] * inv);
      }
    }
  });
  return {};
}

}  // namespace

Status build_rope(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& r = n.attr<ir::RopeAttrs>();
  const auto d = n.shape.static_dims();
  auto p = std::make_shared<RopeParams>();
  p->width = d.back();
  p->seq = d[d.size() - 2];
  p->rows = prod(d, 0, d.size() - 1);
  p->head_dim = r.head_dim;
  p->n_rot = r.n_rot;
  p->neox = r.layout == ir::RopeLayout::Neox;
  p->x_dt = ctx.input(0).dtype;
  p->out_dt = n.dtype;
  p->pos_dt = ctx.input(1).dtype;
  p->inv_freq = rope_inv_freq(r);
  step.fn = &rope_fn;
  step.params = p;
  step.scalable = ctx.outer_is_bucket(ctx.id, n.shape.rank() - 1);
  return {};
}

Status build_attention(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& a = n.attr<ir::AttentionAttrs>();
  const auto qd = ctx.input(0).shape.static_dims();
  const auto kd = ctx.input(1).shape.static_dims();
  auto p = std::make_shared<AttnParams>();
  const size_t r = qd.size();
  p->S = qd[r - 2];
  p->T = kd[r - 2];
  p->batch = prod(qd, 0, r - 2);
  p->n_heads = a.n_heads;
  p->n_kv = a.n_kv_heads;
  p->hd = a.head_dim;
  p->mask = a.mask;
  p->window = a.window;
  p->scale = static_cast<float>(a.scale > 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  p->softcap = static_cast<float>(a.softcap);
  p->has_qpos = n.inputs.size() == 4;
  if (p->has_qpos) p->pos_dt = ctx.input(3).dtype;
  p->dt = ctx.input(0).dtype;
  p->kv_dt = ctx.input(1).dtype;
  p->out_dt = n.dtype;
  const int qb = ctx.bucket(n.inputs[0]), kb = ctx.bucket(n.inputs[1]);
  p->q_bucket = qb == static_cast<int>(r - 2) && p->batch == 1;
  p->k_bucket = kb == static_cast<int>(r - 2) && p->batch == 1;
  if (kb >= 0 || kb == -2) step.mixes_bucket = true;
  if ((kb >= 0 && !p->k_bucket) || kb == -2 || (qb >= 0 && !p->q_bucket) || qb == -2) step.extent_ok = false;
  step.fn = &attention_fn;
  step.params = p;
  return {};
}

}  // namespace rlx::cpu_backend
