// CPU steps for the matmul family: MatMul (batched, broadcast, transposes),
// FusedMatMulBiasAct, FusedSwiGLU and DequantMatMul (f16/bf16 weights). One blocked
// kernel serves all: work is split into (batch, row block, column block) tasks;
// non-f32 operands are widened one block at a time into per-thread scratch, never
// the whole weight per call.
#include <algorithm>
#include <cmath>
#include <optional>

#include "backends/cpu/cpu_step.h"
#include "backends/cpu/kernels/elementwise.h"
#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/kernel_context.h"
#include "backends/cpu/kernels/qmatmul.h"
#include "rlx/base/env.h"

namespace rlx::cpu_backend {
namespace {

using ir::DType;

constexpr int kMaxBatch = 6;

enum class Epilogue : uint8_t { kNone, kBiasAct, kSwiGLU };

struct GemmParams {
  int64_t M = 0, N = 0, K = 0;
  DType a_dt = DType::F32, b_dt = DType::F32, c_dt = DType::F32, bias_dt = DType::F32;
  bool ta = false, tb = false;
  // batch iteration: output batch dims and per-operand element strides (0 = broadcast)
  int batch_rank = 0;
  int64_t batch_dims[kMaxBatch] = {};
  int64_t a_bstride[kMaxBatch] = {}, b_bstride[kMaxBatch] = {};
  int64_t batch = 1;
  Epilogue epi = Epilogue::kNone;
  bool has_bias = false;
  ir::ActKind act = ir::ActKind::Identity;
  int64_t mb = 32, nb = 64;  // block sizes
  // Fast path through the kernels library (f32 A and C, f32/f16/bf16 B, at most one
  // uniform batch dim): the blocked SIMD GEMM/GEMV. SwiGLU uses `scratch_off` for up.
  bool fast = false;
  cpu::WeightType b_type = cpu::WeightType::kF32;
  cpu::Activation kact = cpu::Activation::kIdentity;
  int64_t scratch_off = 0;
  // DequantMatMul with f16/bf16 weights follows the reference engines' vec-dot rule:
  // activations are rounded to the weight's dtype first (copy at `round_off`).
  bool round_a = false;
  int64_t round_off = 0;
};

Status gemm_fast(const Step& s, const StepCtx& ctx);

float act_apply(ir::ActKind k, float x) {
  switch (k) {
    case ir::ActKind::Identity: return x;
    case ir::ActKind::Relu: return x > 0 ? x : 0.0f;
    case ir::ActKind::Silu: return x / (1.0f + std::exp(-x));
    case ir::ActKind::Gelu: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case ir::ActKind::GeluTanh:
      return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case ir::ActKind::Sigmoid: return 1.0f / (1.0f + std::exp(-x));
    case ir::ActKind::Tanh: return std::tanh(x);
    case ir::ActKind::Exp: return std::exp(x);
    case ir::ActKind::Log: return std::log(x);
    case ir::ActKind::Sqrt: return std::sqrt(x);
    case ir::ActKind::Rsqrt: return 1.0f / std::sqrt(x);
    case ir::ActKind::Neg: return -x;
    case ir::ActKind::Abs: return std::fabs(x);
    case ir::ActKind::Sin: return std::sin(x);
    case ir::ActKind::Cos: return std::cos(x);
    case ir::ActKind::Softplus: return x > 20.0f ? x : std::log1p(std::exp(x));
  }
  return x;
}

inline float dot(const float* a, const float* b, int64_t k) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < k; ++i) s += a[i] * b[i];
  return s;
}

void widen(DType t, const uint8_t* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F16: {
      const auto* h = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_bits_to_f32(h[i]);
      break;
    }
    case DType::BF16: {
      const auto* h = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_f32(h[i]);
      break;
    }
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_f(t, src, i);
  }
}

// A rows [i0, i1) of one batch as contiguous f32 [rows, K].
const float* a_rows(const GemmParams& g, const uint8_t* a, int64_t i0, int64_t i1, float* scratch) {
  const int64_t es = elem_size(g.a_dt);
  if (!g.ta && g.a_dt == DType::F32) return reinterpret_cast<const float*>(a) + i0 * g.K;
  for (int64_t i = i0; i < i1; ++i) {
    float* row = scratch + (i - i0) * g.K;
    if (!g.ta) {
      widen(g.a_dt, a + i * g.K * es, row, g.K);
    } else {  // A stored [K, M]
      for (int64_t k = 0; k < g.K; ++k) row[k] = load_f(g.a_dt, a, k * g.M + i);
    }
  }
  return scratch;
}

// B columns [j0, j1) as contiguous f32 rows [cols, K] (i.e. B^T block).
const float* b_cols(const GemmParams& g, const uint8_t* b, int64_t j0, int64_t j1, float* scratch) {
  const int64_t es = elem_size(g.b_dt);
  if (g.tb && g.b_dt == DType::F32) return reinterpret_cast<const float*>(b) + j0 * g.K;
  for (int64_t j = j0; j < j1; ++j) {
    float* row = scratch + (j - j0) * g.K;
    if (g.tb) {
      widen(g.b_dt, b + j * g.K * es, row, g.K);
    } else {  // B stored [K, N]
      for (int64_t k = 0; k < g.K; ++k) row[k] = load_f(g.b_dt, b, k * g.N + j);
    }
  }
  return scratch;
}

// Computes C[i0:i1, j0:j1] = A_rows . Bt_block^T into `c` (row stride ldc).
void block(const GemmParams& g, const float* ar, const float* bt, int64_t rows, int64_t cols, float* c, int64_t ldc) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* arow = ar + i * g.K;
    for (int64_t j = 0; j < cols; ++j) c[i * ldc + j] = dot(arow, bt + j * g.K, g.K);
  }
}

void batch_offsets(const GemmParams& g, int64_t bi, int64_t* a_off, int64_t* b_off) {
  int64_t ao = 0, bo = 0, rem = bi;
  for (int d = g.batch_rank - 1; d >= 0; --d) {
    const int64_t idx = rem % g.batch_dims[d];
    rem /= g.batch_dims[d];
    ao += idx * g.a_bstride[d];
    bo += idx * g.b_bstride[d];
  }
  *a_off = ao;
  *b_off = bo;
}

Status gemm_fn(const Step& s, const StepCtx& ctx) {
  const GemmParams& g = s.p<GemmParams>();
  if (g.fast) return gemm_fast(s, ctx);
  const int64_t M = ctx.rows(g.M, s.scalable);
  if (M == 0 || g.N == 0) return {};
  const int64_t m_blocks = (M + g.mb - 1) / g.mb;
  const int64_t n_blocks = (g.N + g.nb - 1) / g.nb;
  const int64_t tasks = g.batch * m_blocks * n_blocks;
  const int64_t a_es = elem_size(g.a_dt), b_es = elem_size(g.b_dt);
  const bool swiglu = g.epi == Epilogue::kSwiGLU;
  parallel_for(ctx, tasks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bi = t / (m_blocks * n_blocks);
      const int64_t mi = (t / n_blocks) % m_blocks;
      const int64_t nj = t % n_blocks;
      const int64_t i0 = mi * g.mb, i1 = std::min(M, i0 + g.mb);
      const int64_t j0 = nj * g.nb, j1 = std::min(g.N, j0 + g.nb);
      const int64_t rows = i1 - i0, cols = j1 - j0;
      int64_t a_off = 0, b_off = 0;
      batch_offsets(g, bi, &a_off, &b_off);
      auto* sa = static_cast<float*>(cpu::thread_scratch(cpu::ScratchSlot::kPackA, sizeof(float) * g.mb * g.K));
      auto* sb = static_cast<float*>(cpu::thread_scratch(cpu::ScratchSlot::kPackB,
                                                         sizeof(float) * g.nb * g.K * (swiglu ? 2 : 1)));
      auto* sc = static_cast<float*>(cpu::thread_scratch(cpu::ScratchSlot::kTemp,
                                                         sizeof(float) * g.mb * g.nb * (swiglu ? 2 : 1)));
      const float* ar = a_rows(g, s.in_ptr[0] + a_off * a_es, i0, i1, sa);
      const float* bt = b_cols(g, s.in_ptr[1] + b_off * b_es, j0, j1, sb);
      const int64_t c_base = bi * g.M * g.N;
      const bool direct = g.c_dt == DType::F32 && !swiglu;
      float* cblk = direct ? s.outf() + c_base + i0 * g.N + j0 : sc;
      const int64_t ldc = direct ? g.N : cols;
      block(g, ar, bt, rows, cols, cblk, ldc);
      if (swiglu) {  // gate in cblk, up in a second block
        const float* bu = b_cols(g, s.in_ptr[2], j0, j1, sb + g.nb * g.K);
        float* ublk = sc + g.mb * g.nb;
        block(g, ar, bu, rows, cols, ublk, cols);
        for (int64_t i = 0; i < rows * cols; ++i) {
          const float x = cblk[i];
          cblk[i] = x / (1.0f + std::exp(-x)) * ublk[i];
        }
      } else if (g.epi == Epilogue::kBiasAct) {
        for (int64_t i = 0; i < rows; ++i) {
          float* crow = cblk + i * ldc;
          for (int64_t j = 0; j < cols; ++j) {
            float v = crow[j];
            if (g.has_bias) v += load_f(g.bias_dt, s.in_ptr[2], j0 + j);
            crow[j] = act_apply(g.act, v);
          }
        }
      }
      if (!direct) {
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j)
            store_f(g.c_dt, s.out_ptr, c_base + (i0 + i) * g.N + j0 + j, cblk[i * cols + j]);
      }
    }
  });
  return {};
}

Status gemm_fast(const Step& s, const StepCtx& ctx) {
  const GemmParams& g = s.p<GemmParams>();
  const int64_t M = ctx.rows(g.M, s.scalable);
  if (M == 0 || g.N == 0) return {};
  const cpu::KernelContext kc{ctx.pool, isa_cap()};
  cpu::GemmParams p;
  p.m = M;
  p.n = g.N;
  p.k = g.K;
  p.b_transposed = g.tb;
  p.act = g.kact;
  if (g.epi == Epilogue::kBiasAct && g.has_bias) p.bias = s.inf(2);
  const float* a = s.inf(0);
  float* c = s.outf();
  if (g.round_a) {
    float* rounded = reinterpret_cast<float*>(ctx.scratch + g.round_off);
    cpu::round_to_half(kc, a, rounded, M * g.K, g.b_dt == DType::F16 ? cpu::ElemType::kF16 : cpu::ElemType::kBF16);
    a = rounded;
  }
  // B operand i (node input i + 1): its packed copy when the executable made one.
  auto run_gemm = [&](size_t i, float* out) {
    if (s.packed[i] != nullptr) {
      cpu::gemm_prepacked(kc, p, a, *s.packed[i], out);
    } else {
      cpu::gemm(kc, p, a, s.in_ptr[i + 1], g.b_type, out);
    }
  };
  if (g.epi == Epilogue::kSwiGLU) {
    float* up = reinterpret_cast<float*>(ctx.scratch + g.scratch_off);
    run_gemm(0, c);
    run_gemm(1, up);
    // silu(gate) * up with the vector kernels (a scalar exp per element cost ~10 ms a
    // layer at 512 tokens on two cores).
    const int64_t n = M * g.N;
    parallel_for(ctx, n, 1 << 14, [&](int64_t b, int64_t e) {
      const cpu::KernelContext one{nullptr, kc.isa};
      cpu::unary_f32(one, cpu::UnaryOp::kSilu, c + b, c + b, e - b);
      const cpu::Dims dims{e - b};
      const Status s = cpu::binary_f32(one, cpu::BinaryOp::kMul, c + b, dims, up + b, dims, c + b);
      RLX_ASSERT(s.ok());
    });
    return {};
  }
  if (g.batch == 1) {
    run_gemm(0, c);
  } else {
    cpu::batched_gemm(kc, p, g.batch, a, g.a_bstride[0], s.in_ptr[1], g.b_type, g.b_bstride[0], c, g.M * g.N);
  }
  return {};
}

// Asks for the fast path's weights (input 1, and the up weight of SwiGLU) pre-packed;
// the executable serves the requests whose operand is a param.
void request_packing(const GemmParams& g, Step& step) {
  if (!g.fast || g.batch != 1) return;
  for (uint8_t in = 1; in <= (g.epi == Epilogue::kSwiGLU ? 2 : 1); ++in)
    step.pack.push_back(PackRequest{in, g.K, g.N, g.tb, g.b_type});
}

// Marks `g` for the kernels-library path when its dtypes and epilogue allow it.
void choose_fast(GemmParams& g) {
  if (g.a_dt != DType::F32 || g.c_dt != DType::F32 || g.ta || g.batch_rank > 1) return;
  if (g.has_bias && g.bias_dt != DType::F32) return;
  switch (g.b_dt) {
    case DType::F32: g.b_type = cpu::WeightType::kF32; break;
    case DType::F16: g.b_type = cpu::WeightType::kF16; break;
    case DType::BF16: g.b_type = cpu::WeightType::kBF16; break;
    default: return;
  }
  if (g.epi == Epilogue::kBiasAct) {
    switch (g.act) {
      case ir::ActKind::Identity: g.kact = cpu::Activation::kIdentity; break;
      case ir::ActKind::Relu: g.kact = cpu::Activation::kRelu; break;
      case ir::ActKind::Silu: g.kact = cpu::Activation::kSilu; break;
      case ir::ActKind::Gelu: g.kact = cpu::Activation::kGelu; break;
      case ir::ActKind::GeluTanh: g.kact = cpu::Activation::kGeluTanh; break;
      default: return;
    }
  }
  g.fast = true;
}

bool float_dt(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// ---- packed weights: the kernels library's DequantMatMul (weights stay in blocks) ----

struct QParams {
  int64_t M = 0, N = 0, K = 0;
  formats::GgmlType type = formats::GgmlType::Q4_0;
  int64_t scratch_off = 0;
  int64_t scratch_bytes = 0;
};


Status qmatmul_fn(const Step& s, const StepCtx& ctx) {
  const QParams& q = s.p<QParams>();
  const int64_t M = ctx.rows(q.M, s.scalable);
  if (M == 0) return {};
  cpu::QMatmulParams p;
  p.m = M;
  p.n = q.N;
  p.k = q.K;
  const cpu::KernelContext kc{ctx.pool, isa_cap()};
  return cpu::dequant_matmul(kc, p, q.type, s.inf(0), s.in_ptr[1], s.outf(),
                             cpu::QMatmulScratch{ctx.scratch + q.scratch_off, static_cast<size_t>(q.scratch_bytes)});
}

Status build_packed(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const ir::Node& x = ctx.input(0);
  const ir::Node& w = ctx.input(1);
  const auto type = ggml_type_of(w.dtype);
  if (!type || !cpu::qmatmul_supported(*type) || x.dtype != DType::F32 || n.dtype != DType::F32)
    return Error::unsupported("{} for {} on cpu ({})", ir::op_name(n.op), ir::dtype_name(w.dtype),
                              ctx.graph->describe(ctx.id));
  auto q = std::make_shared<QParams>();
  const auto xd = x.shape.static_dims();
  q->K = xd.back();
  q->M = prod(xd, 0, xd.size() - 1);
  q->N = w.shape.static_dims()[0];
  q->type = *type;
  q->scratch_bytes =
      static_cast<int64_t>(cpu::qmatmul_scratch_bytes(*type, q->M, q->K, cpu::QMatmulPath::kAuto, isa_cap()));
  q->scratch_off = ctx.scratch(q->scratch_bytes);
  step.fn = &qmatmul_fn;
  step.params = q;
  step.scalable = ctx.outer_is_bucket(ctx.id, n.shape.rank() - 1);
  return {};
}

void choose_blocks(GemmParams& g, int n_threads) {
  g.mb = std::min<int64_t>(std::max<int64_t>(g.M, 1), 32);
  // Enough column blocks to keep every thread busy when M is small (decode).
  const int64_t m_blocks = (std::max<int64_t>(g.M, 1) + g.mb - 1) / g.mb * g.batch;
  int64_t nb = 64;
  while (nb > 8 && m_blocks * ((g.N + nb - 1) / nb) < 4 * n_threads) nb /= 2;
  g.nb = std::max<int64_t>(1, std::min<int64_t>(nb, g.N));
}

// Linear-style ops: x[.., K] . W, rows = product of x's leading dims.
Status build_linear(BuildCtx& ctx, Step& step, bool tb, Epilogue epi) {
  const ir::Node& n = ctx.node();
  const ir::Node& x = ctx.input(0);
  const ir::Node& w = ctx.input(1);
  if (!float_dt(x.dtype) || !float_dt(n.dtype))
    return step_error(ctx, "input {} is not f32/f16/bf16", x.type().to_string());
  if (!float_dt(w.dtype)) {
    return Error::unsupported("{} for {} on cpu ({})", ir::op_name(n.op), ir::dtype_name(w.dtype),
                              ctx.graph->describe(ctx.id));
  }
  auto g = std::make_shared<GemmParams>();
  const auto xd = x.shape.static_dims();
  const auto wd = w.shape.static_dims();
  g->K = xd.back();
  g->M = prod(xd, 0, xd.size() - 1);
  g->N = tb ? wd[0] : wd[1];
  g->a_dt = x.dtype;
  g->b_dt = w.dtype;
  g->c_dt = n.dtype;
  g->tb = tb;
  g->epi = epi;
  if (epi == Epilogue::kSwiGLU && ctx.input(2).dtype != w.dtype)
    return step_error(ctx, "gate and up weights differ in dtype");
  if (epi == Epilogue::kBiasAct) {
    const auto& f = n.attr<ir::FusedMatMulAttrs>();
    g->has_bias = f.has_bias;
    g->act = f.act;
    if (f.has_bias) g->bias_dt = ctx.input(2).dtype;
  }
  choose_blocks(*g, ctx.n_threads);
  choose_fast(*g);
  if (g->fast && epi == Epilogue::kSwiGLU) g->scratch_off = ctx.scratch(g->M * g->N * 4);
  if (g->fast && n.op == ir::OpKind::DequantMatMul && (w.dtype == DType::F16 || w.dtype == DType::BF16)) {
    g->round_a = true;
    g->round_off = ctx.scratch(g->M * g->K * 4);
  }
  request_packing(*g, step);
  step.fn = &gemm_fn;
  step.params = g;
  step.scalable = ctx.outer_is_bucket(ctx.id, n.shape.rank() - 1);
  return {};
}

}  // namespace

Status build_matmul(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& m = n.attr<ir::MatMulAttrs>();
  const ir::Node& a = ctx.input(0);
  const ir::Node& b = ctx.input(1);
  if (!float_dt(a.dtype) || !float_dt(b.dtype)) return step_error(ctx, "matmul needs float operands");
  const auto ad = a.shape.static_dims(), bd = b.shape.static_dims(), od = n.shape.static_dims();
  auto g = std::make_shared<GemmParams>();
  const size_t ra = ad.size(), rb = bd.size(), ro = od.size();
  g->M = od[ro - 2];
  g->N = od[ro - 1];
  g->K = m.transpose_a ? ad[ra - 2] : ad[ra - 1];
  g->ta = m.transpose_a;
  g->tb = m.transpose_b;
  g->a_dt = a.dtype;
  g->b_dt = b.dtype;
  g->c_dt = n.dtype;
  g->batch_rank = static_cast<int>(ro - 2);
  if (g->batch_rank > kMaxBatch) return step_error(ctx, "more than {} batch dims", kMaxBatch);
  const std::vector<int64_t> out_batch(od.begin(), od.end() - 2);
  const auto sa = broadcast_strides(std::vector<int64_t>(ad.begin(), ad.end() - 2), out_batch);
  const auto sb = broadcast_strides(std::vector<int64_t>(bd.begin(), bd.end() - 2), out_batch);
  for (int d = 0; d < g->batch_rank; ++d) {
    g->batch_dims[d] = out_batch[static_cast<size_t>(d)];
    g->a_bstride[d] = sa[static_cast<size_t>(d)] * ad[ra - 2] * ad[ra - 1];
    g->b_bstride[d] = sb[static_cast<size_t>(d)] * bd[rb - 2] * bd[rb - 1];
  }
  g->batch = prod(out_batch);
  choose_blocks(*g, ctx.n_threads);
  choose_fast(*g);
  request_packing(*g, step);
  step.fn = &gemm_fn;
  step.params = g;
  // Rows scale only for an unbatched [rows, N] result whose rows are the bucket.
  step.scalable = g->batch == 1 && !m.transpose_a && ctx.outer_is_bucket(ctx.id, ro - 1);
  // A contraction over the bucket axis mixes rows.
  const int ab = ctx.bucket(n.inputs[0]);
  if (ab >= 0 && ab == static_cast<int>(m.transpose_a ? ra - 2 : ra - 1)) {
    step.mixes_bucket = true;
    step.extent_ok = false;
  }
  return {};
}

Status build_fused_matmul(BuildCtx& ctx, Step& step) {
  return build_linear(ctx, step, ctx.node().attr<ir::FusedMatMulAttrs>().transpose_b, Epilogue::kBiasAct);
}

Status build_fused_swiglu(BuildCtx& ctx, Step& step) {
  return build_linear(ctx, step, ctx.node().attr<ir::FusedSwiGLUAttrs>().transpose_b, Epilogue::kSwiGLU);
}

Status build_dequant_matmul(BuildCtx& ctx, Step& step) {
  if (ir::is_packed(ctx.input(1).dtype)) return build_packed(ctx, step);
  return build_linear(ctx, step, true, Epilogue::kNone);
}

}  // namespace rlx::cpu_backend
