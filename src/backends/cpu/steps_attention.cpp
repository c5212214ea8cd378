// CPU steps for Rope and Attention. Attention is flash-style: one pass over the keys
// per query row with a running max and sum (no score matrix), GQA by head grouping,
// causal / sliding-window masks aligned bottom-right unless query positions are given.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_step.h"
#include "backends/cpu/kernels/attention.h"
#include "backends/cpu/kernels/kernel_context.h"
#include "backends/cpu/kernels/rope.h"

namespace rlx::cpu_backend {
namespace {

using ir::DType;


struct RopeParams {
  int64_t rows = 0;      // product of dims before the last (each row has one position)
  int64_t seq = 0;       // S: positions index = row % S
  int64_t width = 0;     // output columns: n_heads * head_dim
  int64_t in_width = 0;  // input row length (> width when reading a q/k slice)
  int64_t offset = 0;    // first input column read
  int64_t head_dim = 0, n_rot = 0;
  bool neox = false;
  DType x_dt = DType::F32, out_dt = DType::F32, pos_dt = DType::I32;
  float mscale = 1.0f;           // attn_factor: the rotated pairs' scale
  std::vector<double> inv_freq;  // n_rot / 2
  cpu::RopeParams kernel;        // the f32 kernel's view (f32 x/out, i32 pos); inv_freq set per call
};

// f32 in/out with i32 positions: the kernels library rope, one call per
// slice of S rows (positions repeat every S rows).
Status rope_f32_fn(const Step& s, const StepCtx& ctx) {
  const RopeParams& p = s.p<RopeParams>();
  const int64_t rows = ctx.rows(p.rows, s.scalable);
  const cpu::KernelContext kc{ctx.pool, isa_cap()};
  const auto* pos = reinterpret_cast<const int32_t*>(s.in_ptr[1]);
  for (int64_t r0 = 0; r0 < rows; r0 += p.seq) {
    cpu::RopeParams k = p.kernel;
    k.inv_freq = p.inv_freq.data();
    k.seq = std::min(p.seq, rows - r0);
    rope_f32(kc, k, s.inf(0) + r0 * p.in_width + p.offset, pos, s.outf() + r0 * p.width);
  }
  return {};
}

// Any dtype: one cos/sin table per row, shared by the row's heads.
Status rope_fn(const Step& s, const StepCtx& ctx) {
  const RopeParams& p = s.p<RopeParams>();
  const int64_t rows = ctx.rows(p.rows, s.scalable);
  const int64_t n_heads = p.width / p.head_dim;
  const int64_t half = p.n_rot / 2;
  parallel_for(ctx, rows, 4, [&](int64_t b, int64_t e) {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t r = b; r < e; ++r) {
      const double pos = static_cast<double>(load_i(p.pos_dt, s.in_ptr[1], r % p.seq));
      for (int64_t i = 0; i < half; ++i) {
        const double ang = pos * p.inv_freq[static_cast<size_t>(i)];
        cs[static_cast<size_t>(i)] = static_cast<float>(std::cos(ang)) * p.mscale;
        sn[static_cast<size_t>(i)] = static_cast<float>(std::sin(ang)) * p.mscale;
      }
      const int64_t in_base = r * p.in_width + p.offset, out_base = r * p.width;
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t ib = in_base + h * p.head_dim, ob = out_base + h * p.head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float c = cs[static_cast<size_t>(i)], sv = sn[static_cast<size_t>(i)];
          const int64_t i0 = p.neox ? i : 2 * i;
          const int64_t i1 = p.neox ? i + half : 2 * i + 1;
          const float x0 = load_f(p.x_dt, s.in_ptr[0], ib + i0);
          const float x1 = load_f(p.x_dt, s.in_ptr[0], ib + i1);
          store_f(p.out_dt, s.out_ptr, ob + i0, x0 * c - x1 * sv);
          store_f(p.out_dt, s.out_ptr, ob + i1, x0 * sv + x1 * c);
        }
        for (int64_t i = p.n_rot; i < p.head_dim; ++i)
          store_f(p.out_dt, s.out_ptr, ob + i, load_f(p.x_dt, s.in_ptr[0], ib + i));
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
  bool qpos_per_item = false;  // q_pos [B.., S]: batch item b's rows at q_pos[b * S ..]
  bool has_kv_len = false;  // input 4: valid keys per batch item
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
  const auto* kv_len = p.has_kv_len ? reinterpret_cast<const int32_t*>(s.in_ptr[4]) : nullptr;
  // Padded sequences without a window (encoders): the kernels library's kernel per
  // sequence, over its valid keys.
  if (kv_len && p.mask == ir::MaskKind::None && p.dt == DType::F32 && p.kv_dt == DType::F32 &&
      p.out_dt == DType::F32) {
    const cpu::KernelContext kc{ctx.pool, isa_cap()};
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t len = std::clamp<int64_t>(kv_len[b], 0, T);
      float* out = s.outf() + b * p.S * qw;
      if (len == 0) {
        std::fill(out, out + S * qw, 0.0f);
        continue;
      }
      cpu::AttentionParams ap;
      ap.seq_q = S;
      ap.seq_kv = len;
      ap.n_heads = p.n_heads;
      ap.n_kv_heads = p.n_kv;
      ap.head_dim = p.hd;
      ap.scale = p.scale;
      ap.softcap = p.softcap;
      ap.mask = cpu::AttnMask::kNone;
      cpu::attention_f32(kc, ap, s.inf(0) + b * p.S * qw, s.inf(1) + b * p.T * kw, s.inf(2) + b * p.T * kw, out);
    }
    return {};
  }
  // (several sequences with their own positions, each over its own cache: one call per
  // sequence; the kernel spreads the heads and rows of each over the pool)
  if (!kv_len && p.mask != ir::MaskKind::Local && (p.batch == 1 || p.qpos_per_item) && p.dt == DType::F32 &&
      p.out_dt == DType::F32 && (!p.has_qpos || p.pos_dt == DType::I32) &&
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
    const auto* q_pos = p.has_qpos ? reinterpret_cast<const int32_t*>(s.in_ptr[3]) : nullptr;
    const cpu::KernelContext kc{ctx.pool, isa_cap()};
    for (int64_t b = 0; b < p.batch; ++b) {
      ap.q_pos = q_pos != nullptr ? q_pos + b * p.S : nullptr;
      const int64_t q_off = b * p.S * qw, kv_off = b * p.T * kw;
      if (p.kv_dt == DType::F32) {
        cpu::attention_f32(kc, ap, s.inf(0) + q_off, s.inf(1) + kv_off, s.inf(2) + kv_off, s.outf() + q_off);
      } else {
        cpu::attention_f16kv(kc, ap, s.inf(0) + q_off, reinterpret_cast<const uint16_t*>(s.in_ptr[1]) + kv_off,
                             reinterpret_cast<const uint16_t*>(s.in_ptr[2]) + kv_off, s.outf() + q_off);
      }
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
      const int64_t pos = p.has_qpos ? load_i(p.pos_dt, s.in_ptr[3], p.qpos_per_item ? b * p.S + i : i) : T - S + i;
      int64_t j_end = T, j_begin = 0;
      if (p.mask == ir::MaskKind::Causal || p.mask == ir::MaskKind::SlidingWindow) j_end = std::min<int64_t>(T, pos + 1);
      if (p.mask == ir::MaskKind::SlidingWindow) j_begin = std::max<int64_t>(0, pos - p.window + 1);
      if (p.mask == ir::MaskKind::Local) {
        j_begin = std::max<int64_t>(0, pos - p.window);
        j_end = std::min<int64_t>(T, pos + p.window + 1);
      }
      if (kv_len) j_end = std::min<int64_t>(j_end, kv_len[b]);
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
  p->in_width = ctx.dims(ctx.input(0)).back();
  p->offset = r.offset;
  p->seq = d[d.size() - 2];
  p->rows = prod(d, 0, d.size() - 1);
  p->head_dim = r.head_dim;
  p->n_rot = r.n_rot;
  p->neox = r.layout == ir::RopeLayout::Neox;
  p->x_dt = ctx.input(0).dtype;
  p->out_dt = n.dtype;
  p->pos_dt = ctx.input(1).dtype;
  p->inv_freq = ir::rope_inv_freq(r);
  p->mscale = static_cast<float>(r.attn_factor);
  p->kernel.head_dim = r.head_dim;
  p->kernel.n_rot = r.n_rot;
  p->kernel.layout = p->neox ? cpu::RopeLayout::kNeox : cpu::RopeLayout::kNormal;
  p->kernel.mscale = p->mscale;
  p->kernel.n_heads = p->width / r.head_dim;
  p->kernel.x_stride = p->in_width;
  p->kernel.y_stride = p->width;
  const bool fast = p->x_dt == DType::F32 && p->out_dt == DType::F32 && p->pos_dt == DType::I32;
  step.fn = fast ? &rope_f32_fn : &rope_fn;
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
  p->has_qpos = n.inputs.size() >= 4;
  p->has_kv_len = n.inputs.size() == 5;
  if (p->has_qpos) {
    p->pos_dt = ctx.input(3).dtype;
    p->qpos_per_item = ctx.input(3).shape.rank() > 1;
  }
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
