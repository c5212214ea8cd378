// CPU steps for the recurrent-state ops of gated delta-net layers (ir::updates_state):
// CausalConv1d (a depthwise causal convolution over each sequence's rows with its last
// K-1 input rows carried in the state) and GatedDeltaRule (the gated delta rule with a
// [Dk, Dv] state per sequence and value head). Both write their state handle in place.
//
// The delta rule runs token by token for one-row runs (decode) and chunk by chunk for
// longer ones (chunk > 0). Within a chunk starting from state S0, with Γ_t the decay
// accumulated from the chunk's start through row t, the rows' updates u_t solve the
// unit lower-triangular system
//   u_t + Σ_{s<t} β_t (k_t·k_s) Γ_t/Γ_s u_s = β_t v_t − β_t Γ_t S0ᵀk_t
// (forward substitution, done once for [β v | β Γ k] so that U = Yv − Yk S0); then
//   o_t = Γ_t S0ᵀq_t + Σ_{s≤t} Γ_t/Γ_s (q_t·k_s) u_s,   S = Γ_C S0 + Σ_s Γ_C/Γ_s k_s u_sᵀ.
// Every exponent is ≤ 0, so nothing overflows. Padding rows (past a sequence's real
// count) read the state and never change it: the chunk's state update sums its real
// rows only, and no real row's output reads a later row.
#include <cmath>

#include "backends/cpu/cpu_step.h"

namespace rlx::cpu_backend {
namespace {

// Sequence b's tokens seen and real rows from the seq input; an error when they do not fit.
Status read_seq(const uint8_t* seq, int64_t b, int64_t rows, const std::string& what, int64_t* seen, int64_t* len) {
  int32_t v[2];
  std::memcpy(v, seq + 8 * b, 8);
  *seen = v[0];
  *len = v[1];
  if (*seen < 0 || *len < 0 || *len > rows)
    return Error::invalid_argument("{}: sequence {}: seq (seen {}, rows {}) must be >= 0 with rows <= {}", what, b,
                                   *seen, *len, rows);
  return {};
}

// Runs fn(task) for task in [0, tasks) on the pool (inline without one).
template <typename F>
void run_tasks(const StepCtx& ctx, int64_t tasks, const F& fn) {
  if (ctx.pool == nullptr || ctx.n_threads <= 1 || tasks <= 1) {
    for (int64_t t = 0; t < tasks; ++t) fn(t);
    return;
  }
  ctx.pool->parallel_for(tasks, fn);
}

// ---- causal_conv1d ----------------------------------------------------------------------

struct ConvParams {
  int64_t batch = 0, rows = 0, chans = 0, kernel = 0;
  bool silu = false;
  std::string what;
};

Status conv_fn(const Step& s, const StepCtx& ctx) {
  const ConvParams& p = s.p<ConvParams>();
  const int64_t hist = p.kernel - 1, C = p.chans;
  auto* state = reinterpret_cast<float*>(const_cast<uint8_t*>(s.in_ptr[0]));  // the handle, updated in place
  const float* x = s.inf(1);
  const float* w = s.inf(2);  // [C, K]
  float* y = s.outf();
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t seen = 0, len = 0;
    TRY(read_seq(s.in_ptr[3], b, p.rows, p.what, &seen, &len));
    float* st = state + b * hist * C;
    const float* xb = x + b * p.rows * C;
    float* yb = y + b * p.rows * C;
    if (seen == 0) std::fill(st, st + hist * C, 0.0f);
    // Window row r (0 .. hist+rows) is history row r, then x row r - hist.
    auto row = [&](int64_t r) { return r < hist ? st + r * C : xb + (r - hist) * C; };
    parallel_for(ctx, p.rows, 4, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* yt = yb + t * C;
        std::fill(yt, yt + C, 0.0f);
        for (int64_t j = 0; j < p.kernel; ++j) {
          const float* xr = row(t + j);
          for (int64_t c = 0; c < C; ++c) yt[c] += w[c * p.kernel + j] * xr[c];
        }
        if (p.silu)
          for (int64_t c = 0; c < C; ++c) yt[c] = yt[c] / (1.0f + std::exp(-yt[c]));
      }
    });
    // The new history: the last K-1 rows of (history, real rows), moved front to back
    // so that no row is overwritten before it is read.
    if (len == 0) continue;
    for (int64_t i = 0; i < hist; ++i) {
      const int64_t r = len + i;  // window row
      if (r < hist) std::memmove(st + i * C, st + r * C, static_cast<size_t>(C) * 4);
      else std::memcpy(st + i * C, xb + (r - hist) * C, static_cast<size_t>(C) * 4);
    }
  }
  return {};
}

// ---- gated_delta_rule -------------------------------------------------------------------

struct DeltaParams {
  int64_t batch = 0, rows = 0, hk = 0, hv = 0, dk = 0, dv = 0, chunk = 0;
  bool l2norm = true;
  float scale = 1.0f;
  int64_t tasks = 1;        // parallel tasks, each with its own scratch
  int64_t task_floats = 0;  // scratch floats per task
  int64_t scratch_off = 0;
  std::string what;
};

// q (scaled) and k of one row and key head, l2-normalized when asked.
void load_qk(const DeltaParams& p, const float* q, const float* k, int64_t r, int64_t kh, float* qo, float* ko) {
  const float* qr = q + r * p.hk * p.dk + kh * p.dk;
  const float* kr = k + r * p.hk * p.dk + kh * p.dk;
  double qq = 0, kk = 0;
  for (int64_t i = 0; i < p.dk; ++i) {
    qq += double(qr[i]) * qr[i];
    kk += double(kr[i]) * kr[i];
  }
  const float qs = (p.l2norm ? static_cast<float>(1.0 / std::sqrt(qq + 1e-6)) : 1.0f) * p.scale;
  const float ks = p.l2norm ? static_cast<float>(1.0 / std::sqrt(kk + 1e-6)) : 1.0f;
  for (int64_t i = 0; i < p.dk; ++i) {
    qo[i] = qr[i] * qs;
    ko[i] = kr[i] * ks;
  }
}

// One sequence and value head, token by token: two passes over S per row.
void delta_sequential(const DeltaParams& p, const Step& s, int64_t b, int64_t h, int64_t len, float* S, float* buf) {
  const int64_t dk = p.dk, dv = p.dv, kh = h / (p.hv / p.hk);
  float *qn = buf, *kn = buf + dk, *mem = buf + 2 * dk;
  for (int64_t t = 0; t < p.rows; ++t) {
    const int64_t r = b * p.rows + t;
    load_qk(p, s.inf(1), s.inf(2), r, kh, qn, kn);
    float* o = s.outf() + r * p.hv * dv + h * dv;
    std::fill(o, o + dv, 0.0f);
    if (t >= len) {  // padding (whatever its values): reads the state, never changes it
      for (int64_t i = 0; i < dk; ++i)
        for (int64_t j = 0; j < dv; ++j) o[j] += S[i * dv + j] * qn[i];
      continue;
    }
    const float decay = std::exp(s.inf(4)[r * p.hv + h]);
    const float beta = s.inf(5)[r * p.hv + h];
    const float* v = s.inf(3) + r * p.hv * dv + h * dv;
    std::fill(mem, mem + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {  // S <- decay S; mem = Sᵀk
      float* Si = S + i * dv;
      const float ki = kn[i];
      for (int64_t j = 0; j < dv; ++j) {
        Si[j] *= decay;
        mem[j] += Si[j] * ki;
      }
    }
    for (int64_t j = 0; j < dv; ++j) mem[j] = beta * (v[j] - mem[j]);  // the update u
    for (int64_t i = 0; i < dk; ++i) {  // S <- S + k uᵀ; o = Sᵀq
      float* Si = S + i * dv;
      const float ki = kn[i], qi = qn[i];
      for (int64_t j = 0; j < dv; ++j) {
        Si[j] += ki * mem[j];
        o[j] += Si[j] * qi;
      }
    }
  }
}

// One sequence and value head, chunk by chunk (see the file comment).
void delta_chunked(const DeltaParams& p, const Step& s, int64_t b, int64_t h, int64_t len, float* S, float* buf) {
  const int64_t dk = p.dk, dv = p.dv, C = p.chunk, kh = h / (p.hv / p.hk);
  const cpu::KernelContext kc{nullptr, isa_cap()};
  float* Q = buf;             // [C, dk] normalized, scaled q
  float* K = Q + C * dk;      // [C, dk] normalized k
  float* Y = K + C * dk;      // [C, dv + dk]: [β v | β Γ k], then forward-substituted
  float* U = Y + C * (dv + dk);  // [C, dv] the rows' updates
  float* gam = U + C * dv;    // [C] log Γ_t
  float* bet = gam + C;       // [C] β_t
  float* KT = bet + C;        // [dk, C] k transposed
  float* Gkk = KT + dk * C;   // [C, C] k_t · k_s (s <= t)
  float* Gqk = Gkk + C * C;   // [C, C] q_t · k_s (s <= t)
  const int64_t w = dv + dk;
  for (int64_t c0 = 0; c0 < p.rows; c0 += C) {
    const int64_t n = std::min(C, p.rows - c0);
    double acc = 0;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t r = b * p.rows + c0 + t;
      load_qk(p, s.inf(1), s.inf(2), r, kh, Q + t * dk, K + t * dk);
      const bool real = c0 + t < len;
      acc += real ? s.inf(4)[r * p.hv + h] : 0.0f;
      gam[t] = static_cast<float>(acc);
      bet[t] = real ? s.inf(5)[r * p.hv + h] : 0.0f;
      const float* v = s.inf(3) + r * p.hv * dv + h * dv;
      const float eg = std::exp(gam[t]);
      float* Yt = Y + t * w;
      for (int64_t j = 0; j < dv; ++j) Yt[j] = bet[t] * v[j];
      for (int64_t i = 0; i < dk; ++i) Yt[dv + i] = bet[t] * eg * K[t * dk + i];
      for (int64_t i = 0; i < dk; ++i) KT[i * C + t] = K[t * dk + i];
    }
    // The chunk's matrix products on the GEMM kernels (single-threaded: the tasks are
    // the heads): C = A B (B^T when bt) + beta C.
    auto product = [&](int64_t m, int64_t nn, int64_t kk, const float* a, int64_t lda, const float* bm, int64_t ldb,
                       bool bt, float* c, int64_t ldc, float beta) {
      cpu::GemmParams g;
      g.m = m;
      g.n = nn;
      g.k = kk;
      g.b_transposed = bt;
      g.lda = lda;
      g.ldb = ldb;
      g.ldc = ldc;
      g.beta = beta;
      cpu::gemm(kc, g, a, bm, cpu::WeightType::kF32, c);
    };
    // k_t·k_s and q_t·k_s for every pair (the upper halves are not read).
    product(n, n, dk, K, dk, K, dk, true, Gkk, C, 0.0f);
    product(n, n, dk, Q, dk, K, dk, true, Gqk, C, 0.0f);
    // Forward substitution Y_t -= Σ_{s<t} L[t][s] Y_s, L[t][s] = β_t (k_t·k_s) Γ_t/Γ_s,
    // by blocks of kSubBlock rows: the rows before a block through one product with -L,
    // then the block's own rows one by one.
    for (int64_t t = 0; t < n; ++t) {
      float* l = Gkk + t * C;
      for (int64_t s2 = 0; s2 < t; ++s2) l[s2] = -bet[t] * l[s2] * std::exp(gam[t] - gam[s2]);
    }
    constexpr int64_t kSubBlock = 16;
    for (int64_t t0 = 0; t0 < n; t0 += kSubBlock) {
      const int64_t t1 = std::min(n, t0 + kSubBlock);
      if (t0 > 0) product(t1 - t0, w, t0, Gkk + t0 * C, C, Y, w, false, Y + t0 * w, w, 1.0f);
      for (int64_t t = t0 + 1; t < t1; ++t) {
        float* Yt = Y + t * w;
        for (int64_t s2 = t0; s2 < t; ++s2) {
          const float l = Gkk[t * C + s2];
          const float* Ys = Y + s2 * w;
          for (int64_t j = 0; j < w; ++j) Yt[j] += l * Ys[j];
        }
      }
    }
    // U = Yv − Yk S0: Yk negated in place (read nowhere else), U = Yv first.
    for (int64_t t = 0; t < n; ++t) {
      float* Yt = Y + t * w;
      std::copy(Yt, Yt + dv, U + t * dv);
      for (int64_t i = 0; i < dk; ++i) Yt[dv + i] = -Yt[dv + i];
    }
    product(n, dv, dk, Y + dv, w, S, dv, false, U, dv, 1.0f);
    // o_t = Γ_t S0ᵀq_t + Σ_{s≤t} Γ_t/Γ_s (q_t·k_s) u_s: (Γ Q) S0, then + A U with A the
    // decayed q·k rows (zero above the diagonal).
    for (int64_t t = 0; t < n; ++t) {
      const float eg = std::exp(gam[t]);
      for (int64_t i = 0; i < dk; ++i) Q[t * dk + i] *= eg;
      float* a = Gqk + t * C;
      for (int64_t s2 = 0; s2 <= t; ++s2) a[s2] *= std::exp(gam[t] - gam[s2]);
      std::fill(a + t + 1, a + n, 0.0f);
    }
    // Real rows come first and padding rows may hold anything, even non-finite values:
    // the sums over s run over the real rows only, so that no 0 x inf reaches a real row.
    const int64_t real = std::clamp<int64_t>(len - c0, 0, n);
    float* O = s.outf() + (b * p.rows + c0) * p.hv * dv + h * dv;
    product(n, dv, dk, Q, dk, S, dv, false, O, p.hv * dv, 0.0f);
    if (real == 0) continue;
    product(n, dv, real, Gqk, C, U, dv, false, O, p.hv * dv, 1.0f);
    // S = Γ_C S0 + Σ_s Γ_C/Γ_s k_s u_sᵀ over the real rows only (nothing of a padding row
    // reaches the state): KT's columns scaled, then S = KT U + Γ_C S.
    const float last = gam[real - 1], ec = std::exp(last);
    for (int64_t s2 = 0; s2 < real; ++s2) {
      const float f = std::exp(last - gam[s2]);
      for (int64_t i = 0; i < dk; ++i) KT[i * C + s2] *= f;
    }
    product(dk, dv, real, KT, C, U, dv, false, S, dv, ec);
  }
}

Status delta_fn(const Step& s, const StepCtx& ctx) {
  const DeltaParams& p = s.p<DeltaParams>();
  auto* state = reinterpret_cast<float*>(const_cast<uint8_t*>(s.in_ptr[0]));  // the handle, updated in place
  // Check every sequence's seq entry before touching any state.
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t sn = 0, ln = 0;
    TRY(read_seq(s.in_ptr[6], b, p.rows, p.what, &sn, &ln));
  }
  const int64_t heads = p.batch * p.hv;
  float* scratch = reinterpret_cast<float*>(ctx.scratch + p.scratch_off);
  run_tasks(ctx, p.tasks, [&](int64_t task) {
    float* buf = scratch + task * p.task_floats;
    for (int64_t bh = heads * task / p.tasks; bh < heads * (task + 1) / p.tasks; ++bh) {
      const int64_t b = bh / p.hv, h = bh % p.hv;
      int32_t sq[2];
      std::memcpy(sq, s.in_ptr[6] + 8 * b, 8);
      float* S = state + bh * p.dk * p.dv;
      if (sq[0] == 0) std::fill(S, S + p.dk * p.dv, 0.0f);  // a fresh sequence
      if (p.chunk > 0 && p.rows > 1) delta_chunked(p, s, b, h, sq[1], S, buf);
      else delta_sequential(p, s, b, h, sq[1], S, buf);
    }
  });
  return {};
}

}  // namespace

Status build_causal_conv1d(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  auto p = std::make_shared<ConvParams>();
  const auto sd = ctx.input(0).shape.static_dims();
  p->batch = sd[0];
  p->kernel = sd[1] + 1;
  p->chans = sd[2];
  p->rows = ctx.input(1).shape.static_dims()[0] / p->batch;
  p->silu = n.attr<ir::CausalConvAttrs>().act == ir::ActKind::Silu;
  p->what = ctx.graph->describe(ctx.id);
  step.fn = &conv_fn;
  step.params = p;
  step.mixes_bucket = true;  // a scan over the rows; the seq input says which are real
  return {};
}

Status build_gated_delta_rule(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& a = n.attr<ir::DeltaRuleAttrs>();
  auto p = std::make_shared<DeltaParams>();
  const auto sd = ctx.input(0).shape.static_dims();
  p->batch = sd[0];
  p->hv = sd[1];
  p->dk = a.head_k_dim;
  p->dv = a.head_v_dim;
  p->hk = ctx.input(1).shape.static_dims()[1] / p->dk;
  p->rows = ctx.input(1).shape.static_dims()[0] / p->batch;
  p->chunk = std::min(a.chunk, p->rows);
  p->l2norm = a.l2norm_qk;
  p->scale = static_cast<float>(a.scale > 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(p->dk)));
  p->tasks = std::max<int64_t>(1, std::min<int64_t>(p->batch * p->hv, ctx.n_threads));
  const int64_t C = std::max<int64_t>(p->chunk, 1);
  p->task_floats = C * p->dk * 2 + C * (p->dv + p->dk) + C * p->dv + 2 * C + 2 * p->dk + p->dv  // Q K Y U Γ β
                   + p->dk * C + 2 * C * C;                                                     // KT, the Gram rows
  p->task_floats = (p->task_floats + 15) / 16 * 16;
  p->scratch_off = ctx.scratch(p->tasks * p->task_floats * 4);
  p->what = ctx.graph->describe(ctx.id);
  step.fn = &delta_fn;
  step.params = p;
  step.mixes_bucket = true;
  return {};
}

}  // namespace rlx::cpu_backend
