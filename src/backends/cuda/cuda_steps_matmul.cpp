// CUDA matmul steps: MatMul, fused matmul + bias + activation, SwiGLU and packed
// DequantMatMul. GEMMs go through cuBLASLt (bias / ReLU / tanh-GELU epilogues where it
// has them); one-row products (M <= 8, decode) use the GEMV kernels; packed weights
// above that take the int8 tensor-core GEMM (Q8_0, Q4_0: mmq_kernels.h), up to
// kKqMmaMaxRows rows of the K-quants the int8 tensor cores against Q8_K blocks, up to
// kDqMmaMaxRows rows of the other packed types f16 tiles decoded in shared memory
// (launch_dqmma), and more rows are dequantized to f16 for cuBLAS. The decode GEMVs' prologue, epilogues
// and launch groups of fused_linear are in cuda_steps_linear.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "backends/cuda/cuda_steps_shared.h"
#include "backends/cuda/cuda_util.h"
#include "backends/cuda/mmq_kernels.h"
#include "rlx/base/log.h"

namespace rlx::cuda_backend {

using ir::DType;
using ir::OpKind;

/// The GEMV path; packed weights of a split-layout type that are stored as in the file
/// (the executable could not split them) take the generic packed GEMV instead.
Status gemv_fn(const Step& s, const RunCtx& ctx) {
  const LinearParams& p = s.p<LinearParams>();
  if (p.packed && packed_split(p.q.w_dt) && !s.split) {
    if (p.swiglu) return Error::internal("cuda backend: {}: packed swiglu weights were not split", *s.what);
    QGemvParams q = p.q;
    q.x = static_cast<const float*>(static_cast<const void*>(s.in_ptr[0]));
    q.w = s.in_ptr[1];
    q.y = reinterpret_cast<float*>(s.out_ptr);
    launch_qgemv(q, ctx.stream);
    return {};
  }
  GemvParams v = p.gv;
  v.x = s.in_ptr[0];
  v.w = s.in_ptr[1];
  if (p.swiglu) v.w2 = s.in_ptr[2];
  else if (p.has_bias) v.bias = s.in_ptr[2];
  v.y = s.out_ptr;
  if (s.split) {
    v.row_bytes = p.split_row;
    v.d_offset = p.gv.N * p.split_row;
  }
  launch_gemv(v, ctx.stream);
  return {};
}

namespace {

/// Where a packed product writes its f32 result: the output, or scratch for an epilogue.
void* product_out(const Step& s, const RunCtx& ctx) {
  const LinearParams& p = s.p<LinearParams>();
  return p.c_in_scratch ? static_cast<void*>(ctx.scratch + p.c_off) : static_cast<void*>(s.out_ptr);
}

/// out = act(result (+ bias)) when the product has an epilogue.
Status bias_act_epilogue(const Step& s, const RunCtx& ctx) {
  const LinearParams& p = s.p<LinearParams>();
  if (!p.post) return {};
  RegionParams k = p.post_k;
  k.in[0] = product_out(s, ctx);
  if (p.has_bias) k.in[1] = s.in_ptr[2];
  k.out = s.out_ptr;
  return launch_checked(s, k, ctx, "epilogue");
}

/// out = act(x W^T (+ bias)) for Q8_0 / Q4_0 W at prefill sizes, on the int8 tensor cores.
Status mmq_fn(const Step& s, const RunCtx& ctx) {
  const LinearParams& p = s.p<LinearParams>();
  int8_t* xq = reinterpret_cast<int8_t*>(ctx.scratch + p.xq_off);
  float* xd = reinterpret_cast<float*>(ctx.scratch + p.xd_off);
  launch_quantize_q8_0(reinterpret_cast<const float*>(s.in_ptr[0]), xq, xd, p.g.M, p.g.K, ctx.stream);
  MmqParams m;
  m.xq = xq;
  m.xd = xd;
  m.w = s.in_ptr[1];
  m.w_dt = p.q.w_dt;
  m.M = p.g.M;
  m.N = p.g.N;
  m.K = p.g.K;
  m.row_bytes = s.split ? p.split_row : p.q.row_bytes;
  m.d_offset = s.split ? p.q.N * p.split_row : 0;
  m.y = static_cast<float*>(product_out(s, ctx));
  launch_mmq(m, ctx.stream);
  return bias_act_epilogue(s, ctx);
}

}  // namespace

Status prepare_kqmma_x(const Step& s, const LinearParams& p, const RunCtx& ctx, KqMmaParams& k) {
  k = KqMmaParams{};
  if (p.q.w_dt == DT::F16 || p.q.w_dt == DT::BF16) {  // x rounded to the weights' type
    RegionParams c = p.cast_k;
    c.in[0] = s.in_ptr[0];
    c.out = ctx.scratch + p.x_off;
    TRY(launch_checked(s, c, ctx, "input cast"));
    k.xh = ctx.scratch + p.x_off;
  } else if (p.q.w_dt == DT::Q8_0) {  // x as Q8_0 blocks
    int8_t* xq = reinterpret_cast<int8_t*>(ctx.scratch + p.xq_off);
    float* xd = reinterpret_cast<float*>(ctx.scratch + p.xd_off);
    launch_quantize_q8_0(reinterpret_cast<const float*>(s.in_ptr[0]), xq, xd, p.g.M, p.g.K, ctx.stream);
    k.xq = xq;
    k.xd = xd;
  } else {
    int8_t* xq = reinterpret_cast<int8_t*>(ctx.scratch + p.xq_off);
    float* xd = reinterpret_cast<float*>(ctx.scratch + p.xd_off);
    int* xs = reinterpret_cast<int*>(ctx.scratch + p.xs_off);
    launch_quantize_q8_k(reinterpret_cast<const float*>(s.in_ptr[0]), xq, xd, xs, p.g.M, p.g.K, ctx.stream);
    k.xq = xq;
    k.xd = xd;
    k.xs = xs;
  }
  k.w_dt = p.q.w_dt;
  k.M = p.g.M;
  k.K = p.g.K;
  k.row_bytes = s.split ? p.split_row : p.q.row_bytes;
  k.w_const = p.w_const;
  k.k_groups = p.kq_k_groups;
  return {};
}

bool launch_few_rows(const KqMmaParams& k, cudaStream_t stream) {
  if (!rows_mma_supported(k.w_dt)) return launch_kqmma(k, stream);
  if (launch_rows_mma(k, stream)) return true;
  if (k.w_dt != DT::Q8_0 || (k.n_parts > 1 ? k.part_d_offset[0] : k.d_offset) > 0) return false;
  // Q8_0 weights kept as stored (another reader needs them whole, e.g. tied embeddings):
  // each part on the int8 GEMM over the same Q8_0 x.
  for (int i = 0; i < std::max(k.n_parts, 1); ++i) {
    MmqParams m;
    m.xq = k.xq;
    m.xd = k.xd;
    m.w = k.n_parts > 1 ? k.part_w[i] : k.w;
    m.w_dt = DT::Q8_0;
    m.M = k.M;
    m.N = k.n_parts > 1 ? k.part_n[i] : k.N;
    m.K = k.K;
    m.row_bytes = k.row_bytes;
    m.d_offset = 0;
    m.y = k.n_parts > 1 ? k.part_y[i] : k.y;
    launch_mmq(m, stream);
  }
  return true;
}

Status kqmma_fn(const Step& s, const RunCtx& ctx) {
  const LinearParams& p = s.p<LinearParams>();
  KqMmaParams k;
  TRY(prepare_kqmma_x(s, p, ctx, k));
  k.w = s.in_ptr[1];
  k.N = p.g.N;
  k.d_offset = s.split ? p.q.N * p.split_row : 0;
  k.y = static_cast<float*>(product_out(s, ctx));
  if (!launch_few_rows(k, ctx.stream))
    return Error::internal("cuda backend: {}: no few-row tensor-core product for {} rows of {} over {}", *s.what, k.M,
                           k.K, ir::dtype_name(static_cast<DType>(k.w_dt)));
  return bias_act_epilogue(s, ctx);
}

namespace {

/// out = act(x W^T (+ bias)) for a few rows over packed W: x cast to f16, W decoded into
/// f16 tiles in shared memory (launch_dqmma).
Status dqmma_fn(const Step& s, const RunCtx& ctx) {
  const LinearParams& p = s.p<LinearParams>();
  RegionParams k = p.cast_k;
  k.in[0] = s.in_ptr[0];
  k.out = ctx.scratch + p.x_off;
  TRY(launch_checked(s, k, ctx, "input cast"));
  DqMmaParams d;
  d.x = ctx.scratch + p.x_off;
  d.w = s.in_ptr[1];
  d.w_dt = p.q.w_dt;
  d.M = p.g.M;
  d.N = p.g.N;
  d.K = p.g.K;
  d.row_bytes = s.split ? p.split_row : p.q.row_bytes;
  d.d_offset = s.split ? p.q.N * p.split_row : 0;
  d.y = static_cast<float*>(product_out(s, ctx));
  d.work = p.dq_slices > 1 ? reinterpret_cast<float*>(ctx.scratch + p.dq_work_off) : nullptr;
  d.counters = p.dq_slices > 1 ? reinterpret_cast<unsigned*>(ctx.zeroed + p.dq_counters_off) : nullptr;
  launch_dqmma(d, p.dq_slices, ctx.stream);
  return bias_act_epilogue(s, ctx);
}

Status linear_fn(const Step& s, const RunCtx& ctx) {
  const LinearParams& p = s.p<LinearParams>();
  const void* x = s.in_ptr[0];
  if (p.round_x) {  // (f16 for the cuBLAS path, f32 for the GEMV)
    launch_round_q8_0(static_cast<const float*>(x), ctx.scratch + p.x_off, p.cast_x ? DT::F16 : DT::F32, p.g.M,
                      p.g.K, ctx.stream);
    x = ctx.scratch + p.x_off;
  } else if (p.cast_x) {
    RegionParams k = p.cast_k;
    k.in[0] = x;
    k.out = ctx.scratch + p.x_off;
    TRY(launch_checked(s, k, ctx, "input cast"));
    x = ctx.scratch + p.x_off;
  }
  const int64_t row_bytes = s.split ? p.split_row : p.q.row_bytes;
  const int64_t d_offset = s.split ? p.q.N * p.split_row : 0;
  if (p.packed && !p.cast_x) {
    QGemvParams q = p.q;
    q.x = static_cast<const float*>(x);
    q.w = s.in_ptr[1];
    q.y = reinterpret_cast<float*>(s.out_ptr);
    q.row_bytes = row_bytes;
    q.d_offset = d_offset;
    launch_qgemv(q, ctx.stream);
    return {};
  }
  const void* w = s.in_ptr[1];
  if (p.packed) {
    launch_dequant_f16(p.q.w_dt, s.in_ptr[1], ctx.scratch + p.wdq_off, p.q.N, p.q.K, row_bytes, d_offset, ctx.stream);
    w = ctx.scratch + p.wdq_off;
  }
  void* c = p.c_in_scratch ? static_cast<void*>(ctx.scratch + p.c_off) : static_cast<void*>(s.out_ptr);
  TRY(run_gemm(s, ctx, 0, p.g, x, w, c, p.lt_bias ? s.in_ptr[2] : nullptr));
  if (p.swiglu) TRY(run_gemm(s, ctx, 0, p.g, x, s.in_ptr[2], ctx.scratch + p.u_off, nullptr));
  if (p.post) {
    RegionParams k = p.post_k;
    k.in[0] = c;
    if (p.swiglu) k.in[1] = ctx.scratch + p.u_off;
    else if (p.has_bias) k.in[1] = s.in_ptr[2];
    k.out = s.out_ptr;
    TRY(launch_checked(s, k, ctx, "epilogue"));
  }
  return {};
}

/// out = act(in0 (+ in1)) or silu(in0) * in1 over [M, N].
RegionParams post_program(int64_t M, int64_t N, DT c_dt, DT out_dt, bool two, DT in1_dt, bool in1_is_bias, bool swiglu,
                          uint8_t act) {
  RegionParams k;
  k.rank = 2;
  k.dims[0] = M;
  k.dims[1] = N;
  k.total = M * N;
  k.n_in = two ? 2 : 1;
  k.in_dt[0] = c_dt;
  k.strides[0][0] = N;
  k.strides[0][1] = 1;
  if (two) {
    k.in_dt[1] = in1_dt;
    k.strides[1][0] = in1_is_bias ? 0 : N;
    k.strides[1][1] = 1;
  }
  k.out_dt = out_dt;
  int n = 0;
  if (swiglu) {
    k.steps[n++] = {RegionOp::kActivation, 3, DT::F32, {-1, 0, 0}};
    k.steps[n++] = {RegionOp::kBinary, 2, out_dt, {0, -2, 0}};
  } else {
    int8_t cur = -1;
    if (two) {
      k.steps[n++] = {RegionOp::kBinary, 0, DT::F32, {-1, -2, 0}};
      cur = 0;
    }
    k.steps[n++] = {RegionOp::kActivation, act, out_dt, {cur, 0, 0}};
  }
  k.n_steps = n;
  return k;
}

}  // namespace

int64_t packed_prefill_from(DT w, bool gemv_int8_x, bool int8_prefill, bool swiglu) {
  if (int8_prefill && (kqmma_supported(w) || w == DT::Q8_0)) return kKqMmaMinRows;
  const bool few_row_prefill = mmq_supported(w) || dqmma_supported(w);
  return gemv_int8_x && gemv_x8_type(w) && few_row_prefill && !swiglu ? kGemvX8MaxRows + 1 : kMaxGemvM + 1;
}

bool few_rows_take(DT w, int64_t rows, int64_t K, bool int8_prefill, bool half_rows) {
  if (rows < kKqMmaMinRows || rows > kKqMmaMaxRows) return false;
  if (kqmma_supported(w)) return int8_prefill && K % 256 == 0;
  if (w == DT::Q8_0) return int8_prefill && K % 128 == 0;
  return (w == DT::F16 || w == DT::BF16) && half_rows && K % 8 == 0;
}

int few_rows_k_groups(DT w, int64_t N, int64_t K, int sms) {
  return rows_mma_supported(w) ? rows_mma_k_groups(N, K, sms) : kqmma_k_groups(N, K, sms);
}

Status build_linear(BuildCtx& ctx, Step& step, bool tb, bool swiglu, bool bias_act, std::optional<DType> out_dtype) {
  const ir::Node& node = ctx.node();
  ir::Node typed;  // the node with the product's own dtype (a fused_linear writing a cache)
  if (out_dtype) {
    typed.dtype = *out_dtype;
    typed.shape = node.shape;
  }
  const ir::Node& n = out_dtype ? typed : node;
  const ir::Node& x = ctx.input(0);
  const ir::Node& w = ctx.input(1);
  const auto xd = x.shape.static_dims(), wd = w.shape.static_dims();
  auto p = std::make_shared<LinearParams>();
  p->swiglu = swiglu;
  int64_t prefill_from = kMaxGemvM + 1;  // (packed weights: see below)
  GemmDesc& g = p->g;
  g.K = xd.back();
  g.M = *x.shape.num_elements() / std::max<int64_t>(g.K, 1);
  g.N = tb ? wd[0] : wd[1];
  g.tb = tb;
  g.tf32 = ctx.allow_tf32;
  if (!float_dt(x.dtype) || !float_dt(n.dtype)) return step_error(ctx, "input {} is not f32/f16/bf16", x.type().to_string());
  if (ir::is_packed(w.dtype)) {
    // DequantMatMul over packed blocks.
    if (!packed_supported(to_dt(w.dtype)) || x.dtype != DType::F32 || n.dtype != DType::F32 || !tb || g.K % 32 != 0)
      return step_error(ctx, "dequant_matmul for {}", ir::dtype_name(w.dtype));
    if (swiglu && (ctx.input(2).dtype != w.dtype || !gemv_supported(to_dt(w.dtype), g.M, g.K)))
      return step_error(ctx, "fused swiglu over {} weights at M = {} (only the decode GEMV fuses packed pairs)",
                        ir::dtype_name(w.dtype), g.M);
    p->packed = true;
    p->q.w_dt = to_dt(w.dtype);
    p->q.M = g.M;
    p->q.N = g.N;
    p->q.K = g.K;
    p->q.row_bytes = *ir::dtype_bytes(w.dtype, g.K);
    if (packed_split(p->q.w_dt)) {
      p->split_row = split_row_bytes(w.dtype, g.K);
      step.split_inputs = swiglu ? 6 : 2;
    }
    // x as llama.cpp's CPU backend sees it for these weights: Q8_0 blocks (the decode
    // GEMV, launch_gemv, rounds it itself while staging it; the others read it rounded).
    p->round_x = q8_0_activations(p->q.w_dt);
    // Rows from which a product leaves the GEMV for the prefill paths (packed_prefill_from;
    // the codebook i-quants have no few-row prefill kernel: 6-8 rows stay on the GEMV
    // rather than dequantize all of W).
    prefill_from = packed_prefill_from(p->q.w_dt, ctx.gemv_int8_x, ctx.int8_prefill, swiglu);
    if (swiglu && g.M >= prefill_from)  // (fuse_linear's check refuses the same fused pair)
      return step_error(ctx, "fused swiglu over {} weights at M = {}: the GEMV's fused pair takes fewer than {} rows "
                        "(these rows take two products of their own)", ir::dtype_name(w.dtype), g.M, prefill_from);
    if (!swiglu && p->q.w_dt == DT::Q8_0 && few_rows_take(p->q.w_dt, g.M, g.K, ctx.int8_prefill, false)) {
      // A few rows over Q8_0 (several streams, short prompts): x as Q8_0 blocks, as for
      // the int8 GEMM, times W read once into the tensor cores (launch_rows_mma).
      p->kqmma = true;
      p->round_x = false;
      p->xq_off = ctx.scratch(g.M * g.K);
      p->xd_off = ctx.scratch(g.M * (g.K / 32) * 4);
      p->kq_k_groups = rows_mma_k_groups(g.N, g.K, ctx.sms);
      p->w_const = step.in[1].kind == StorageKind::kParam || step.in[1].kind == StorageKind::kConstant;
    } else if (g.M >= prefill_from && ctx.int8_prefill && mmq_supported(p->q.w_dt)) {  // prefill over Q8_0 / Q4_0: the int8 tensor cores
      p->mmq = true;
      p->round_x = false;
      p->xq_off = ctx.scratch(g.M * g.K);
      p->xd_off = ctx.scratch(g.M * (g.K / 32) * 4);
    } else if (!swiglu && kqmma_supported(p->q.w_dt) && few_rows_take(p->q.w_dt, g.M, g.K, ctx.int8_prefill, false)) {
      // A few rows over K-quants (several streams, short prompts): x as Q8_K blocks, as
      // the CPU backend takes it, times W read once into the int8 tensor cores' fragments.
      p->kqmma = true;
      p->round_x = false;
      p->xq_off = ctx.scratch(g.M * g.K);
      p->xd_off = ctx.scratch(g.M * (g.K / 256) * 4);
      p->xs_off = ctx.scratch(g.M * (g.K / 32) * 4);
      p->kq_k_groups = kqmma_staged_fits(p->q.w_dt) ? kqmma_k_groups(g.N, g.K, ctx.sms) : 0;
      p->w_const = step.in[1].kind == StorageKind::kParam || step.in[1].kind == StorageKind::kConstant;
    } else if (g.M >= prefill_from && g.M <= kDqMmaMaxRows && !swiglu && dqmma_supported(p->q.w_dt)) {
      // A few rows (several streams, short prompts): W decoded into f16 tiles in shared
      // memory on the tensor cores, reading each weight once and writing no copy of W.
      p->dqmma = true;
      p->cast_x = true;
      g.ab_dt = DT::F16;
      g.c_dt = DT::F32;
      p->x_off = ctx.scratch(g.M * g.K * 2);
      p->dq_slices = dqmma_k_slices(g.N, g.K, ctx.sms);
      if (const int64_t work = dqmma_work_bytes(g.M, g.N, p->dq_slices); work > 0) {
        p->dq_work_off = ctx.scratch(work);
        p->dq_counters_off = ctx.zeroed(dqmma_counter_bytes(g.N));
      }
    } else if (g.M >= prefill_from) {  // other prefill: dequantize to f16 and use cuBLAS (f16 x f16 -> f32)
      p->wdq_off = ctx.scratch(g.N * g.K * 2);
      g.ab_dt = DT::F16;
      g.c_dt = DT::F32;
      p->cast_x = true;
      p->x_off = ctx.scratch(g.M * g.K * 2);
    } else if (p->round_x) {
      p->x_off = ctx.scratch(g.M * g.K * 4);
    }
  } else {
    if (!float_dt(w.dtype)) return step_error(ctx, "weights of {}", ir::dtype_name(w.dtype));
    if (swiglu && ctx.input(2).dtype != w.dtype) return step_error(ctx, "gate and up weights differ in dtype");
    g.ab_dt = to_dt(w.dtype);
    p->cast_x = x.dtype != w.dtype;
    g.c_dt = to_dt(n.dtype);
    if (tb && !swiglu && step.in[1].offset % 16 == 0 && few_rows_take(g.ab_dt, g.M, g.K, false, ctx.half_rows)) {
      // A few rows (several streams, short prompts) over f16 / bf16 W: x rounded to W's
      // type, as for cuBLASLt, and W read once through the tensor cores (launch_rows_mma).
      prefill_from = kKqMmaMinRows;
      p->kqmma = true;
      p->cast_x = true;  // (also when x has W's type: an aligned copy)
      g.c_dt = DT::F32;
      p->q.w_dt = g.ab_dt;
      p->q.M = g.M;
      p->q.N = g.N;
      p->q.K = g.K;
      p->q.row_bytes = g.K * 2;
      p->kq_k_groups = rows_mma_k_groups(g.N, g.K, ctx.sms);
      p->w_const = step.in[1].kind == StorageKind::kParam || step.in[1].kind == StorageKind::kConstant;
    }
    if (p->cast_x) p->x_off = ctx.scratch(g.M * g.K * dt_size(g.ab_dt));
  }
  if (p->cast_x) {
    RegionParams& k = p->cast_k;
    k.rank = 1;
    k.dims[0] = k.total = g.M * g.K;
    k.n_in = 1;
    k.in_dt[0] = to_dt(x.dtype);
    k.strides[0][0] = 1;
    k.out_dt = g.ab_dt;
    k.steps[0] = {RegionOp::kCast, 0, g.ab_dt, {-1, 0, 0}};
    k.n_steps = 1;
  }
  // Decode sizes: one GEMV kernel (epilogue included) when it covers the weights.
  const DT wdt = to_dt(w.dtype);
  const bool w_aligned = step.in[1].offset % 16 == 0 && (!swiglu || step.in[2].offset % 16 == 0);
  const bool x_vec4 = x.dtype == DType::F32 && step.in[0].offset % 16 == 0 && step.in[0].kind == StorageKind::kArena;
  if (tb && g.M < prefill_from && w_aligned && gemv_supported(wdt, g.M, g.K, ctx.gemv_int8_x && x_vec4)) {
    GemvParams& v = p->gv;
    v.x_dt = to_dt(x.dtype);
    v.w_dt = wdt;
    v.y_dt = to_dt(n.dtype);
    v.M = g.M;
    v.N = g.N;
    v.K = g.K;
    v.row_bytes = *ir::dtype_bytes(w.dtype, g.K);
    v.swiglu = swiglu;
    v.x_vec4 = x_vec4;
    v.x_int8 = ctx.gemv_int8_x;
    auto immutable = [](const ValueRef& r) { return r.kind == StorageKind::kParam || r.kind == StorageKind::kConstant; };
    v.w_const = immutable(step.in[1]) && (!swiglu || immutable(step.in[2]));
    if (bias_act) {
      const auto& f = node.attr<ir::FusedMatMulAttrs>();
      v.act = static_cast<uint8_t>(f.act);
      p->has_bias = f.has_bias;
      if (f.has_bias) v.bias_dt = to_dt(ctx.input(2).dtype);
    }
    p->gemv = true;
    p->cast_x = false;
    p->round_x = false;  // the GEMV rounds x while staging it
    step.fn = &gemv_fn;
    step.params = p;
    return {};
  }
  if (p->packed && g.M < prefill_from) {
    step.fn = &linear_fn;
    step.params = p;
    return {};
  }
  if (p->dqmma) {  // f32 result straight into an f32 output, else into scratch for the epilogue
    const ir::ActKind act = bias_act ? node.attr<ir::FusedMatMulAttrs>().act : ir::ActKind::Identity;
    p->has_bias = bias_act && node.attr<ir::FusedMatMulAttrs>().has_bias;
    if (p->has_bias || act != ir::ActKind::Identity || to_dt(n.dtype) != DT::F32) {
      p->post = true;
      p->c_in_scratch = true;
      p->c_off = ctx.scratch(g.M * g.N * 4);
      const DT in1 = p->has_bias ? to_dt(ctx.input(2).dtype) : DT::F32;
      p->post_k =
          post_program(g.M, g.N, DT::F32, to_dt(n.dtype), p->has_bias, in1, true, false, static_cast<uint8_t>(act));
    }
    step.fn = &dqmma_fn;
    step.params = p;
    return {};
  }
  if (p->mmq || p->kqmma) {  // f32 result straight into an f32 output, else into scratch for the epilogue
    const ir::ActKind act = bias_act ? node.attr<ir::FusedMatMulAttrs>().act : ir::ActKind::Identity;
    p->has_bias = bias_act && node.attr<ir::FusedMatMulAttrs>().has_bias;
    if (p->has_bias || act != ir::ActKind::Identity || to_dt(n.dtype) != DT::F32) {
      p->post = true;
      p->c_in_scratch = true;
      p->c_off = ctx.scratch(g.M * g.N * 4);
      const DT in1 = p->has_bias ? to_dt(ctx.input(2).dtype) : DT::F32;
      p->post_k =
          post_program(g.M, g.N, DT::F32, to_dt(n.dtype), p->has_bias, in1, true, false, static_cast<uint8_t>(act));
    }
    step.fn = p->kqmma ? &kqmma_fn : &mmq_fn;
    step.params = p;
    return {};
  }
  // cuBLASLt writes C in c_dt: f32 always works; otherwise it must equal the operands'.
  if (g.c_dt != DT::F32 && g.c_dt != g.ab_dt) g.c_dt = DT::F32;
  const bool c_is_out = g.c_dt == to_dt(n.dtype);
  ir::ActKind act = ir::ActKind::Identity;
  if (bias_act) {
    const auto& f = node.attr<ir::FusedMatMulAttrs>();
    act = f.act;
    p->has_bias = f.has_bias;
  }
  const bool bias_ok = p->has_bias && ctx.input(2).dtype == static_cast<DType>(g.c_dt) && g.c_dt == to_dt(n.dtype);
  const bool act_ok = act == ir::ActKind::Identity || act == ir::ActKind::Relu || act == ir::ActKind::GeluTanh;
  if (!swiglu && c_is_out && act_ok && (!p->has_bias || bias_ok)) {
    // Everything in the cuBLASLt epilogue.
    p->lt_bias = p->has_bias;
    if (act == ir::ActKind::Relu) g.epilogue = p->lt_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    else if (act == ir::ActKind::GeluTanh) g.epilogue = p->lt_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    else g.epilogue = p->lt_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  } else {
    p->post = true;
    p->c_in_scratch = true;
    p->c_off = ctx.scratch(g.M * g.N * dt_size(g.c_dt));
    if (swiglu) p->u_off = ctx.scratch(g.M * g.N * dt_size(g.c_dt));
    const DT in1 = swiglu ? g.c_dt : p->has_bias ? to_dt(ctx.input(2).dtype) : DT::F32;
    p->post_k = post_program(g.M, g.N, g.c_dt, to_dt(n.dtype), swiglu || p->has_bias, in1, !swiglu, swiglu,
                             static_cast<uint8_t>(act));
  }
  step.gemms.push_back(&p->g);
  step.fn = &linear_fn;
  step.params = p;
  return {};
}

Status build_fused_matmul(BuildCtx& ctx, Step& step) {
  return build_linear(ctx, step, ctx.node().attr<ir::FusedMatMulAttrs>().transpose_b, false, true);
}

Status build_fused_swiglu(BuildCtx& ctx, Step& step) {
  return build_linear(ctx, step, ctx.node().attr<ir::FusedSwiGLUAttrs>().transpose_b, true, false);
}

Status build_dequant_matmul(BuildCtx& ctx, Step& step) { return build_linear(ctx, step, true, false, false); }

namespace {

struct MatMulParams {
  GemmDesc g;
  bool post = false;  // result in f32 scratch, cast to the output dtype
  int64_t c_off = 0;
  RegionParams post_k;
};

Status matmul_fn(const Step& s, const RunCtx& ctx) {
  const MatMulParams& p = s.p<MatMulParams>();
  void* c = p.post ? static_cast<void*>(ctx.scratch + p.c_off) : static_cast<void*>(s.out_ptr);
  TRY(run_gemm(s, ctx, 0, p.g, s.in_ptr[0], s.in_ptr[1], c, nullptr));
  if (p.post) {
    RegionParams k = p.post_k;
    k.in[0] = c;
    k.out = s.out_ptr;
    TRY(launch_checked(s, k, ctx, "output cast"));
  }
  return {};
}

}  // namespace

Status build_matmul(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& m = n.attr<ir::MatMulAttrs>();
  const ir::Node& a = ctx.input(0);
  const ir::Node& b = ctx.input(1);
  if (!float_dt(a.dtype) || a.dtype != b.dtype || !float_dt(n.dtype))
    return step_error(ctx, "matmul of {} and {}", ir::dtype_name(a.dtype), ir::dtype_name(b.dtype));
  const auto ad = a.shape.static_dims(), bd = b.shape.static_dims(), od = n.shape.static_dims();
  const size_t ra = ad.size(), rb = bd.size(), ro = od.size();
  auto p = std::make_shared<MatMulParams>();
  GemmDesc& g = p->g;
  g.M = od[ro - 2];
  g.N = od[ro - 1];
  g.K = m.transpose_a ? ad[ra - 2] : ad[ra - 1];
  g.ta = m.transpose_a;
  g.tb = m.transpose_b;
  g.ab_dt = to_dt(a.dtype);
  g.c_dt = to_dt(n.dtype);
  g.tf32 = ctx.allow_tf32;
  if (g.c_dt != DT::F32 && g.c_dt != g.ab_dt) g.c_dt = DT::F32;
  const std::vector<int64_t> out_batch(od.begin(), od.end() - 2);
  const auto sa = broadcast_strides(std::vector<int64_t>(ad.begin(), ad.end() - 2), out_batch);
  const auto sb = broadcast_strides(std::vector<int64_t>(bd.begin(), bd.end() - 2), out_batch);
  g.batch = 1;
  for (int64_t d : out_batch) g.batch *= d;
  const int64_t a_mat = ad[ra - 2] * ad[ra - 1], b_mat = bd[rb - 2] * bd[rb - 1];
  // Per-batch element offsets; strided when they form one arithmetic sequence.
  std::vector<int64_t> ao(static_cast<size_t>(g.batch)), bo(static_cast<size_t>(g.batch));
  for (int64_t i = 0; i < g.batch; ++i) {
    int64_t rem = i, oa = 0, ob = 0;
    for (size_t d = out_batch.size(); d-- > 0;) {
      const int64_t idx = rem % out_batch[d];
      rem /= out_batch[d];
      oa += idx * sa[d] * a_mat;
      ob += idx * sb[d] * b_mat;
    }
    ao[static_cast<size_t>(i)] = oa;
    bo[static_cast<size_t>(i)] = ob;
  }
  g.strided = true;
  if (g.batch > 1) {
    g.a_bstride = ao[1] - ao[0];
    g.b_bstride = bo[1] - bo[0];
    for (int64_t i = 1; i < g.batch; ++i)
      if (ao[static_cast<size_t>(i)] != i * g.a_bstride || bo[static_cast<size_t>(i)] != i * g.b_bstride) g.strided = false;
  }
  if (!g.strided) {
    g.a_offsets = std::move(ao);
    g.b_offsets = std::move(bo);
  }
  if (g.c_dt != to_dt(n.dtype)) {
    p->post = true;
    p->c_off = ctx.scratch(g.batch * g.M * g.N * 4);
    RegionParams& k = p->post_k;
    k.rank = 1;
    k.dims[0] = k.total = g.batch * g.M * g.N;
    k.n_in = 1;
    k.in_dt[0] = DT::F32;
    k.strides[0][0] = 1;
    k.out_dt = to_dt(n.dtype);
    k.steps[0] = {RegionOp::kCast, 0, k.out_dt, {-1, 0, 0}};
    k.n_steps = 1;
  }
  const int ab = ctx.bucket(n.inputs[0]);
  if (ab >= 0 && ab == static_cast<int>(m.transpose_a ? ra - 2 : ra - 1)) step.extent_ok = false;
  if (ab == -2) step.extent_ok = false;
  step.gemms.push_back(&p->g);
  step.fn = &matmul_fn;
  step.params = p;
  return {};
}

}  // namespace rlx::cuda_backend
