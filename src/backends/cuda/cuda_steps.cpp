// CUDA step builders and run functions: each LIR node kind becomes kernel parameters
// at compile time (broadcast strides, axis views, GEMM descriptors, rope tables) and a
// run function that fills in device pointers and launches on the executable's stream.
// This file has the cuBLASLt plans and the one-op steps (elementwise, movement, norms,
// rope, softmax, reductions, attention) and maps op kinds to builders; the GEMM / GEMV
// steps are in cuda_steps_matmul.cpp, the mixture-of-experts steps in cuda_steps_moe.cpp
// and the decode-step rewrites in cuda_step_fusions.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>

#include "backends/cuda/attention_f16_kernels.h"
#include "backends/cuda/cuda_steps_shared.h"
#include "backends/cuda/cuda_util.h"
#include "rlx/base/log.h"

namespace rlx::cuda_backend {

using ir::DType;
using ir::OpKind;

#define RLX_SAME_DTYPE(name) static_assert(static_cast<int>(DT::name) == static_cast<int>(DType::name));
RLX_SAME_DTYPE(F32) RLX_SAME_DTYPE(F16) RLX_SAME_DTYPE(BF16) RLX_SAME_DTYPE(F64) RLX_SAME_DTYPE(I8)
RLX_SAME_DTYPE(U8) RLX_SAME_DTYPE(I32) RLX_SAME_DTYPE(I64) RLX_SAME_DTYPE(Bool) RLX_SAME_DTYPE(Q4_0)
RLX_SAME_DTYPE(Q8_0) RLX_SAME_DTYPE(Q4_K) RLX_SAME_DTYPE(Q5_K) RLX_SAME_DTYPE(Q6_K) RLX_SAME_DTYPE(Q8_K)
RLX_SAME_DTYPE(IQ4_NL) RLX_SAME_DTYPE(IQ4_XS) RLX_SAME_DTYPE(IQ3_S) RLX_SAME_DTYPE(IQ3_XXS) RLX_SAME_DTYPE(IQ2_S)
RLX_SAME_DTYPE(IQ2_XS) RLX_SAME_DTYPE(IQ2_XXS) RLX_SAME_DTYPE(IQ1_S) RLX_SAME_DTYPE(IQ1_M) RLX_SAME_DTYPE(TQ1_0)
RLX_SAME_DTYPE(TQ2_0)
#undef RLX_SAME_DTYPE
static_assert(static_cast<int>(ir::ActKind::Softplus) == 15 && static_cast<int>(ir::BinaryKind::Pow) == 6 &&
              static_cast<int>(ir::CompareKind::Ge) == 5 && static_cast<int>(ir::ReduceKind::Min) == 3 &&
              static_cast<int>(ir::MaskKind::SlidingWindow) == 2 && static_cast<int>(ir::MaskKind::Local) == 3);

// ---- cuBLASLt plans ------------------------------------------------------------------

LtPlan& LtPlan::operator=(LtPlan&& o) noexcept {
  std::swap(op, o.op);
  std::swap(a, o.a);
  std::swap(b, o.b);
  std::swap(c, o.c);
  std::swap(algo, o.algo);
  return *this;
}

LtPlan::~LtPlan() {
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (c) cublasLtMatrixLayoutDestroy(c);
  if (op) cublasLtMatmulDescDestroy(op);
}

namespace {

cudaDataType_t cuda_type(DT t) {
  switch (t) {
    case DT::F16: return CUDA_R_16F;
    case DT::BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

}  // namespace

int64_t split_row_bytes(DType t, int64_t K) {
  const ir::DTypeInfo& info = ir::dtype_info(t);
  const int64_t blocks = K / info.block_size;
  return blocks * (info.bytes_per_block - 2);
}

// Row-major C[M,N] = op(A) op(B) is column-major C^T[N,M] = op(B)^T op(A)^T: cuBLAS's
// first operand is our B, its second our A.
Expected<LtPlan> make_lt_plan(cublasLtHandle_t lt, const GemmDesc& g, size_t ws_bytes, const std::string& what) {
  LtPlan p;
  const cublasComputeType_t compute =
      g.ab_dt == DT::F32 && g.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  RLX_CUBLAS_TRY(cublasLtMatmulDescCreate(&p.op, compute, CUDA_R_32F), what);
  const cublasOperation_t op_first = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  RLX_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)), what);
  RLX_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)), what);
  RLX_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &g.epilogue, sizeof(g.epilogue)), what);
  const cudaDataType_t ab = cuda_type(g.ab_dt), ct = cuda_type(g.c_dt);
  // First operand (our B): stored tb ? [N,K] row-major = col-major K x N : [K,N] = col-major N x K.
  const uint64_t a_rows = static_cast<uint64_t>(g.tb ? g.K : g.N), a_cols = static_cast<uint64_t>(g.tb ? g.N : g.K);
  const uint64_t b_rows = static_cast<uint64_t>(g.ta ? g.M : g.K), b_cols = static_cast<uint64_t>(g.ta ? g.K : g.M);
  RLX_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p.a, ab, a_rows, a_cols, static_cast<int64_t>(a_rows)), what);
  RLX_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p.b, ab, b_rows, b_cols, static_cast<int64_t>(b_rows)), what);
  RLX_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p.c, ct, static_cast<uint64_t>(g.N), static_cast<uint64_t>(g.M), g.N), what);
  if (g.strided && g.batch > 1) {
    const int32_t count = static_cast<int32_t>(g.batch);
    const int64_t sa = g.b_bstride, sb = g.a_bstride, sc = g.M * g.N;
    for (auto [layout, stride] : {std::pair{p.a, sa}, std::pair{p.b, sb}, std::pair{p.c, sc}}) {
      RLX_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)), what);
      RLX_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                      sizeof(stride)), what);
    }
  }
  cublasLtMatmulPreference_t pref = nullptr;
  RLX_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref), what);
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, cublasStatus_t (*)(cublasLtMatmulPreference_t)> pref_owner(
      pref, &cublasLtMatmulPreferenceDestroy);
  RLX_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                      sizeof(ws_bytes)), what);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  RLX_CUBLAS_TRY(cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found), what);
  if (found == 0)
    return Error::unsupported("cuda backend: cuBLASLt has no algorithm for {} ({}x{}x{})", what, g.M, g.N, g.K);
  p.algo = result.algo;
  return p;
}

// Runs plan `pi` of the step: C = A . B (+ bias through the epilogue).
Status run_gemm(const Step& s, const RunCtx& ctx, int pi, const GemmDesc& g, const void* a, const void* b, void* c,
                const void* bias) {
  const LtPlan& p = *(*ctx.plans)[static_cast<size_t>(s.plan + pi)];
  if (bias)
    RLX_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)), *s.what);
  const float alpha = 1.0f, beta = 0.0f;
  const int64_t ab = dt_size(g.ab_dt), cb = dt_size(g.c_dt);
  const int64_t loops = g.strided ? 1 : g.batch;
  for (int64_t i = 0; i < loops; ++i) {
    const auto* ai = static_cast<const uint8_t*>(a) + (g.strided ? 0 : g.a_offsets[static_cast<size_t>(i)] * ab);
    const auto* bi = static_cast<const uint8_t*>(b) + (g.strided ? 0 : g.b_offsets[static_cast<size_t>(i)] * ab);
    auto* ci = static_cast<uint8_t*>(c) + (g.strided ? 0 : i * g.M * g.N * cb);
    RLX_CUBLAS_TRY(cublasLtMatmul(ctx.lt, p.op, &alpha, bi, p.a, ai, p.b, &beta, ci, p.c, ci, p.c, &p.algo,
                                  ctx.workspace, ctx.workspace_bytes, ctx.stream),
                   *s.what);
  }
  return {};
}

// ---- elementwise ---------------------------------------------------------------------

/// Launches a region program after checking that every operand is bound.
Status launch_checked(const Step& s, const RegionParams& k, const RunCtx& ctx, const char* role) {
  for (int i = 0; i < k.n_in; ++i)
    if (k.in[i] == nullptr) return Error::internal("cuda backend: {}: {} operand {} is unbound", *s.what, role, i);
  if (k.out == nullptr) return Error::internal("cuda backend: {}: {} output is unbound", *s.what, role);
  launch_region(k, ctx.stream);
  return {};
}

namespace {

struct RegionStepParams {
  RegionParams k;
};

Status region_fn(const Step& s, const RunCtx& ctx) {
  RegionParams k = s.p<RegionStepParams>().k;
  for (int i = 0; i < k.n_in; ++i) k.in[i] = s.in_ptr[static_cast<size_t>(i)];
  k.out = s.out_ptr;
  return launch_checked(s, k, ctx, "elementwise");
}

/// Fills `k`'s shape and input strides for the node's output dims and inputs.
Status region_layout(BuildCtx& ctx, RegionParams& k) {
  const ir::Node& n = ctx.node();
  std::vector<int64_t> od = n.shape.static_dims();
  if (od.empty()) od = {1};
  if (od.size() > static_cast<size_t>(kMaxRank)) return step_error(ctx, "rank {} above {}", od.size(), kMaxRank);
  if (n.inputs.size() > static_cast<size_t>(kMaxRegionInputs))
    return step_error(ctx, "{} inputs, the region kernel takes {}", n.inputs.size(), kMaxRegionInputs);
  k.rank = static_cast<int>(od.size());
  k.total = 1;
  for (size_t d = 0; d < od.size(); ++d) {
    k.dims[d] = od[d];
    k.total *= od[d];
  }
  k.out_dt = to_dt(n.dtype);
  k.n_in = static_cast<int>(n.inputs.size());
  bool dbl = n.dtype == DType::F64 || n.dtype == DType::I64 || n.dtype == DType::I32;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const ir::Node& x = ctx.input(i);
    if (ir::is_packed(x.dtype)) return step_error(ctx, "packed input {}", i);
    k.in_dt[i] = to_dt(x.dtype);
    dbl = dbl || x.dtype == DType::F64 || x.dtype == DType::I64 || x.dtype == DType::I32;
    const auto st = broadcast_strides(x.shape.static_dims(), od);
    for (size_t d = 0; d < od.size(); ++d) k.strides[i][d] = st[d];
  }
  k.use_double = dbl;
  return {};
}

Status build_elementwise(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  auto p = std::make_shared<RegionStepParams>();
  TRY(region_layout(ctx, p->k));
  RegionStepK& st = p->k.steps[0];
  st.dtype = to_dt(n.dtype);
  switch (n.op) {
    case OpKind::Activation: st.op = RegionOp::kActivation; st.kind = static_cast<uint8_t>(n.attr<ir::ActivationAttrs>().kind); break;
    case OpKind::Binary: st.op = RegionOp::kBinary; st.kind = static_cast<uint8_t>(n.attr<ir::BinaryAttrs>().kind); break;
    case OpKind::Compare: st.op = RegionOp::kCompare; st.kind = static_cast<uint8_t>(n.attr<ir::CompareAttrs>().kind); break;
    case OpKind::Where: st.op = RegionOp::kWhere; break;
    default: st.op = RegionOp::kCast; break;
  }
  if (n.inputs.size() > 3) return step_error(ctx, "{} inputs for an elementwise op", n.inputs.size());
  for (size_t i = 0; i < n.inputs.size() && i < 3; ++i) st.args[i] = static_cast<int8_t>(-1 - static_cast<int>(i));
  p->k.n_steps = 1;
  step.fn = &region_fn;
  step.params = p;
  return {};
}

Status build_region(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& ra = n.attr<ir::RegionAttrs>();
  auto p = std::make_shared<RegionStepParams>();
  TRY(region_layout(ctx, p->k));
  if (ra.steps.empty() || ra.steps.size() > static_cast<size_t>(kMaxRegionSteps))
    return step_error(ctx, "{} region steps, the region kernel takes 1..{}", ra.steps.size(), kMaxRegionSteps);
  bool dbl = p->k.use_double;
  for (size_t i = 0; i < ra.steps.size(); ++i) {
    const ir::RegionStep& rs = ra.steps[i];
    RegionStepK& st = p->k.steps[i];
    switch (rs.op) {
      case OpKind::Activation: st.op = RegionOp::kActivation; break;
      case OpKind::Binary: st.op = RegionOp::kBinary; break;
      case OpKind::Compare: st.op = RegionOp::kCompare; break;
      case OpKind::Where: st.op = RegionOp::kWhere; break;
      case OpKind::Cast: st.op = RegionOp::kCast; break;
      default: return step_error(ctx, "region step {} is a {}", i, ir::op_name(rs.op));
    }
    st.kind = rs.kind;
    st.dtype = to_dt(rs.dtype);
    dbl = dbl || rs.dtype == DType::F64 || rs.dtype == DType::I64 || rs.dtype == DType::I32;
    if (rs.args.size() > 3) return step_error(ctx, "region step {} has {} args", i, rs.args.size());
    for (size_t a = 0; a < rs.args.size(); ++a) st.args[a] = static_cast<int8_t>(rs.args[a]);
  }
  p->k.n_steps = static_cast<int>(ra.steps.size());
  p->k.use_double = dbl;
  step.fn = &region_fn;
  step.params = p;
  return {};
}

// ---- movement ------------------------------------------------------------------------

struct CopyParams {
  int64_t bytes = 0;
};

Status copy_fn(const Step& s, const RunCtx& ctx) {
  if (s.out_ptr != s.in_ptr[0])
    RLX_CUDA_TRY(cudaMemcpyAsync(s.out_ptr, s.in_ptr[0], static_cast<size_t>(s.p<CopyParams>().bytes),
                                 cudaMemcpyDeviceToDevice, ctx.stream), *s.what);
  return {};
}

Status build_copy(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  if (ctx.input(0).dtype != n.dtype) return step_error(ctx, "copy between dtypes");
  auto p = std::make_shared<CopyParams>();
  p->bytes = ir::dtype_bytes(n.dtype, *n.shape.num_elements()).value_or(0);
  step.fn = &copy_fn;
  step.params = p;
  return {};
}

struct StridedStepParams {
  StridedCopyParams k;
};

Status strided_fn(const Step& s, const RunCtx& ctx) {
  StridedCopyParams k = s.p<StridedStepParams>().k;
  k.in = s.in_ptr[0];
  k.out = s.out_ptr;
  launch_strided_copy(k, ctx.stream);
  return {};
}

Status make_strided(BuildCtx& ctx, Step& step, std::vector<int64_t> dims, std::vector<int64_t> strides, int64_t offset) {
  const ir::Node& n = ctx.node();
  if (ir::is_packed(n.dtype)) return step_error(ctx, "packed dtype");
  if (dims.empty()) {
    dims = {1};
    strides = {0};
  }
  if (dims.size() > static_cast<size_t>(kMaxRank)) return step_error(ctx, "rank {} above {}", dims.size(), kMaxRank);
  auto p = std::make_shared<StridedStepParams>();
  p->k.rank = static_cast<int>(dims.size());
  p->k.elem_bytes = static_cast<int>(dt_size(to_dt(n.dtype)));
  p->k.total = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    p->k.dims[d] = dims[d];
    p->k.in_strides[d] = strides[d];
    p->k.total *= dims[d];
  }
  p->k.in_offset = offset;
  step.fn = &strided_fn;
  step.params = p;
  return {};
}

Status build_transpose(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& perm = n.attr<ir::TransposeAttrs>().perm;
  const ir::Node& x = ctx.input(0);
  const auto xs = x.shape.rank() ? x.shape.strides() : std::vector<int64_t>{};
  std::vector<int64_t> st;
  for (int64_t q : perm) st.push_back(xs[static_cast<size_t>(q)]);
  return make_strided(ctx, step, n.shape.static_dims(), st, 0);
}

Status build_narrow(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& na = n.attr<ir::NarrowAttrs>();
  const ir::Node& x = ctx.input(0);
  const int64_t axis = *x.shape.axis(na.axis);
  const auto xs = x.shape.strides();
  return make_strided(ctx, step, n.shape.static_dims(), xs, na.start * xs[static_cast<size_t>(axis)]);
}

Status build_expand(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto out = n.shape.static_dims();
  return make_strided(ctx, step, out, broadcast_strides(ctx.input(0).shape.static_dims(), out), 0);
}

struct ConcatParams {
  int64_t outer = 1, inner_bytes = 0, out_len = 0;
  std::vector<int64_t> lens;
};

Status concat_fn(const Step& s, const RunCtx& ctx) {
  const ConcatParams& p = s.p<ConcatParams>();
  int64_t at = 0;
  for (size_t i = 0; i < p.lens.size(); ++i) {
    const int64_t w = p.lens[i] * p.inner_bytes;
    if (w > 0 && p.outer > 0)
      RLX_CUDA_TRY(cudaMemcpy2DAsync(s.out_ptr + at, static_cast<size_t>(p.out_len * p.inner_bytes), s.in_ptr[i],
                                     static_cast<size_t>(w), static_cast<size_t>(w), static_cast<size_t>(p.outer),
                                     cudaMemcpyDeviceToDevice, ctx.stream), *s.what);
    at += w;
  }
  return {};
}

Status build_concat(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  if (ir::is_packed(n.dtype)) return step_error(ctx, "packed dtype");
  const auto d = n.shape.static_dims();
  const auto axis = static_cast<size_t>(*n.shape.axis(n.attr<ir::AxisAttrs>().axis));
  auto p = std::make_shared<ConcatParams>();
  for (size_t i = 0; i < axis; ++i) p->outer *= d[i];
  int64_t inner = 1;
  for (size_t i = axis + 1; i < d.size(); ++i) inner *= d[i];
  p->inner_bytes = inner * dt_size(to_dt(n.dtype));
  p->out_len = d[axis];
  for (size_t i = 0; i < n.inputs.size(); ++i) p->lens.push_back(ctx.input(i).shape.static_dims()[axis]);
  step.fn = &concat_fn;
  step.params = p;
  return {};
}

struct GatherStepParams {
  GatherParams k;
  int64_t split_row_bytes = 0;
};

Status gather_fn(const Step& s, const RunCtx& ctx) {
  const GatherStepParams& p = s.p<GatherStepParams>();
  GatherParams k = p.k;
  if (s.split) {
    k.row_bytes = p.split_row_bytes;
    k.d_offset = k.axis_len * p.split_row_bytes;
  }
  k.table = s.in_ptr[0];
  k.idx = s.in_ptr[1];
  k.out = s.out_ptr;
  k.err = ctx.err;
  k.err_code = s.index + 1;
  launch_gather(k, ctx.stream);
  return {};
}

Status build_gather(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const ir::Node& t = ctx.input(0);
  const ir::Node& idx = ctx.input(1);
  const auto td = t.shape.static_dims();
  const auto axis = static_cast<size_t>(*t.shape.axis(n.attr<ir::AxisAttrs>().axis));
  auto p = std::make_shared<GatherStepParams>();
  GatherParams& k = p->k;
  for (size_t i = 0; i < axis; ++i) k.outer *= td[i];
  k.axis_len = td[axis];
  k.n_idx = *idx.shape.num_elements();
  k.idx_dt = to_dt(idx.dtype);
  k.table_dt = to_dt(t.dtype);
  k.out_dt = to_dt(n.dtype);
  int64_t inner = 1;
  for (size_t i = axis + 1; i < td.size(); ++i) inner *= td[i];
  if (ir::is_packed(t.dtype)) {
    if (!packed_supported(k.table_dt) || axis != 0 || inner % 32 != 0 || !float_dt(n.dtype))
      return step_error(ctx, "gather from a {} table", ir::dtype_name(t.dtype));
    k.row_elems = inner;
    k.row_bytes = *ir::dtype_bytes(t.dtype, inner);
    if (packed_split(k.table_dt) && k.outer == 1) {
      p->split_row_bytes = split_row_bytes(t.dtype, inner);
      step.split_inputs = 1;
    }
  } else {
    if (t.dtype != n.dtype) return step_error(ctx, "gather changes dtype");
    k.inner_bytes = inner * dt_size(k.table_dt);
  }
  step.fn = &gather_fn;
  step.params = p;
  return {};
}

}  // namespace

Status update_fn(const Step& s, const RunCtx& ctx) {
  const UpdateParams& p = s.p<UpdateParams>();
  UpdateSliceParams k = p.k;
  k.rows = p.src_bucket && ctx.extent_on ? k.src_len / ctx.upper * ctx.actual : k.src_len;
  k.dst = const_cast<uint8_t*>(s.in_ptr[0]);  // the handle is written in place by design
  k.src = s.in_ptr[1];
  k.start = s.in_ptr[2];
  k.err = ctx.err;
  k.err_code = s.index + 1;
  launch_update_slice(k, ctx.stream);
  if (s.out_ptr != s.in_ptr[0])
    RLX_CUDA_TRY(cudaMemcpyAsync(s.out_ptr, s.in_ptr[0], static_cast<size_t>(p.total_bytes), cudaMemcpyDeviceToDevice,
                                 ctx.stream), *s.what);
  return {};
}

namespace {

Status build_update_slice(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const ir::Node& dst = ctx.input(0);
  const ir::Node& src = ctx.input(1);
  if (dst.op != OpKind::Handle) return step_error(ctx, "update_slice must write a handle, got {}", ir::op_name(dst.op));
  if (ir::is_packed(dst.dtype)) return step_error(ctx, "packed handle");
  const auto dd = dst.shape.static_dims(), sd = src.shape.static_dims();
  const auto axis = static_cast<size_t>(*dst.shape.axis(n.attr<ir::AxisAttrs>().axis));
  auto p = std::make_shared<UpdateParams>();
  for (size_t i = 0; i < axis; ++i) p->k.outer *= dd[i];
  p->k.dst_len = dd[axis];
  p->k.src_len = sd[axis];
  int64_t inner = 1;
  for (size_t i = axis + 1; i < dd.size(); ++i) inner *= dd[i];
  p->k.inner_bytes = inner * dt_size(to_dt(dst.dtype));
  p->k.start_dt = to_dt(ctx.input(2).dtype);
  p->k.start_per_outer = ctx.input(2).shape.num_elements() != std::optional<int64_t>(1);
  p->total_bytes = p->k.outer * p->k.dst_len * p->k.inner_bytes;
  p->src_bucket = ctx.bucket(n.inputs[1]) == static_cast<int>(axis) && p->k.outer == 1;
  // (a bucketed source of several slices would need a per-slice extent: run it whole)
  if (ctx.bucket(n.inputs[1]) == -2 || (ctx.bucket(n.inputs[1]) == static_cast<int>(axis) && p->k.outer != 1))
    step.extent_ok = false;
  step.fn = &update_fn;
  step.params = p;
  return {};
}

// ---- norms, rope, softmax, reduce -------------------------------------------------

}  // namespace

Status norm_fn(const Step& s, const RunCtx& ctx) {
  const NormStepParams& p = s.p<NormStepParams>();
  NormParams k = p.k;
  const size_t gi = p.residual ? 2 : 1;
  k.x = s.in_ptr[0];
  k.res = p.residual ? s.in_ptr[1] : nullptr;
  k.gamma = s.in_ptr[gi];
  k.beta = p.beta ? s.in_ptr[gi + 1] : nullptr;
  k.out = s.out_ptr;
  launch_norm(k, ctx.stream);
  return {};
}

namespace {

Status build_norm(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const ir::Node& x = ctx.input(0);
  if (!float_dt(x.dtype) || !float_dt(n.dtype)) return step_error(ctx, "norm of {}", x.type().to_string());
  auto p = std::make_shared<NormStepParams>();
  p->residual = n.op == OpKind::FusedResidualRmsNorm || n.op == OpKind::FusedResidualLayerNorm;
  const auto d = x.shape.static_dims();
  p->k.d = d.empty() ? 1 : d.back();
  p->k.rows = *x.shape.num_elements() / std::max<int64_t>(p->k.d, 1);
  p->k.rms = n.op == OpKind::RmsNorm || n.op == OpKind::FusedResidualRmsNorm;
  p->k.eps = static_cast<float>(n.attr<ir::NormAttrs>().eps);
  p->k.x_dt = to_dt(x.dtype);
  p->k.out_dt = to_dt(n.dtype);
  const size_t gi = p->residual ? 2 : 1;
  if (p->residual && ctx.input(1).dtype != x.dtype) return step_error(ctx, "residual dtype differs from x");
  p->k.g_dt = to_dt(ctx.input(gi).dtype);
  p->beta = n.inputs.size() > gi + 1;
  if (p->beta) p->k.b_dt = to_dt(ctx.input(gi + 1).dtype);
  auto immutable = [&](size_t i) {
    return step.in[i].kind == StorageKind::kParam || step.in[i].kind == StorageKind::kConstant;
  };
  p->k.affine_const = immutable(gi) && (!p->beta || immutable(gi + 1));
  step.fn = &norm_fn;
  step.params = p;
  return {};
}

}  // namespace

Status rope_fn(const Step& s, const RunCtx& ctx) {
  const RopeStepParams& p = s.p<RopeStepParams>();
  RopeParams k = p.k;
  k.x = s.in_ptr[0];
  k.pos = s.in_ptr[1];
  k.out = s.out_ptr;
  k.inv_freq = reinterpret_cast<const double*>(p.table->data());
  launch_rope(k, ctx.stream);
  return {};
}

namespace {

}  // namespace

Expected<std::shared_ptr<DeviceBuffer>> upload_rope_table(BuildCtx& ctx, const ir::RopeAttrs& r) {
  const std::vector<double> f = ir::rope_inv_freq(r);
  // Every rope of a model (two a layer, in every executable) has the same table: one
  // device copy per device and table while any executable holds it, instead of an
  // allocation and a synchronous copy per step (most of a warm start's step building).
  int device = 0;
  RLX_CUDA_TRY(cudaGetDevice(&device), ctx.graph->describe(ctx.id));
  std::string key(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(double));
  key += fmt::format("@{}", device);
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<DeviceBuffer>> tables;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = tables.find(key); it != tables.end())
    if (std::shared_ptr<DeviceBuffer> held = it->second.lock()) return held;
  std::erase_if(tables, [](const auto& e) { return e.second.expired(); });
  const int64_t bytes = static_cast<int64_t>(std::max<size_t>(f.size(), 1) * sizeof(double));
  ASSIGN_OR_RETURN(DeviceBuffer table, DeviceBuffer::create(bytes, ctx.graph->describe(ctx.id)));
  if (!f.empty())
    RLX_CUDA_TRY(cudaMemcpy(table.data(), f.data(), f.size() * sizeof(double), cudaMemcpyHostToDevice),
                 ctx.graph->describe(ctx.id));
  auto held = std::make_shared<DeviceBuffer>(std::move(table));
  tables[key] = held;
  return held;
}

namespace {

Status build_rope(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& r = n.attr<ir::RopeAttrs>();
  const auto d = n.shape.static_dims();
  if (d.size() < 2 || r.head_dim <= 0 || d.back() % r.head_dim != 0 || r.n_rot > r.head_dim || r.n_rot % 2 != 0)
    return step_error(ctx, "rope layout");
  auto p = std::make_shared<RopeStepParams>();
  p->k.width = d.back();
  p->k.in_width = ctx.input(0).shape.static_dims().back();
  p->k.in_offset = r.offset;
  p->k.seq = d[d.size() - 2];
  p->k.rows = *n.shape.num_elements() / p->k.width;
  p->k.head_dim = r.head_dim;
  p->k.n_rot = r.n_rot;
  p->k.neox = r.layout == ir::RopeLayout::Neox;
  p->k.mscale = static_cast<float>(r.attn_factor);
  p->k.x_dt = to_dt(ctx.input(0).dtype);
  p->k.out_dt = to_dt(n.dtype);
  p->k.pos_dt = to_dt(ctx.input(1).dtype);
  ASSIGN_OR_RETURN(p->table, upload_rope_table(ctx, r));
  step.fn = &rope_fn;
  step.params = p;
  return {};
}

struct AxisStepParams {
  AxisParams k;
  bool bucket_axis = false;  // softmax along the bucket axis: only `actual` elements count
};

AxisParams axis_view(const std::vector<int64_t>& d, int64_t axis) {
  AxisParams k;
  for (int64_t i = 0; i < axis; ++i) k.outer *= d[static_cast<size_t>(i)];
  k.len = d.empty() ? 1 : d[static_cast<size_t>(axis)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < d.size(); ++i) k.inner *= d[i];
  k.active_len = k.len;
  return k;
}

template <void (*Launch)(const AxisParams&, cudaStream_t)>
Status axis_fn(const Step& s, const RunCtx& ctx) {
  const AxisStepParams& p = s.p<AxisStepParams>();
  AxisParams k = p.k;
  if (p.bucket_axis && ctx.extent_on) k.active_len = k.len / ctx.upper * ctx.actual;
  k.x = s.in_ptr[0];
  k.out = s.out_ptr;
  Launch(k, ctx.stream);
  return {};
}

Status build_softmax(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  if (!float_dt(n.dtype)) return step_error(ctx, "softmax of {}", ir::dtype_name(n.dtype));
  const int64_t axis = *n.shape.axis(n.attr<ir::SoftmaxAttrs>().axis);
  auto p = std::make_shared<AxisStepParams>();
  p->k = axis_view(n.shape.static_dims(), axis);
  p->k.in_dt = to_dt(ctx.input(0).dtype);
  p->k.out_dt = to_dt(n.dtype);
  const int b = ctx.bucket(n.inputs[0]);
  p->bucket_axis = b == static_cast<int>(axis);
  if (b == -2) step.extent_ok = false;
  step.fn = &axis_fn<launch_softmax>;
  step.params = p;
  return {};
}

Status build_cumsum(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& ca = n.attr<ir::CumsumAttrs>();
  auto p = std::make_shared<AxisStepParams>();
  p->k = axis_view(n.shape.static_dims(), *n.shape.axis(ca.axis));
  p->k.in_dt = to_dt(ctx.input(0).dtype);
  p->k.out_dt = to_dt(n.dtype);
  p->k.exclusive = ca.exclusive;
  if (ir::is_packed(ctx.input(0).dtype)) return step_error(ctx, "packed input");
  step.fn = &axis_fn<launch_cumsum>;
  step.params = p;
  return {};
}

Status build_topk(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const ir::Node& x = ctx.input(0);
  const auto& ta = n.attr<ir::TopKAttrs>();
  if (ir::is_packed(x.dtype)) return step_error(ctx, "packed input");
  auto p = std::make_shared<AxisStepParams>();
  p->k = axis_view(x.shape.static_dims(), x.shape.rank() - 1);
  p->k.in_dt = to_dt(x.dtype);
  p->k.out_dt = to_dt(n.dtype);
  p->k.k = ta.k;
  p->k.values = ta.values;
  p->k.finite_check = ta.finite_check;
  const int b = ctx.bucket(n.inputs[0]);
  if (b == static_cast<int>(x.shape.rank() - 1) || b == -2) step.extent_ok = false;
  step.fn = &axis_fn<launch_topk>;
  step.params = p;
  return {};
}

static_assert(kSampleMaxTopK == ir::kMaxSampleTopK && kSampleParamCount == ir::kSampleParams,
              "the sample kernel's bounds are the op's");

Status sample_fn(const Step& s, const RunCtx& ctx) {
  SampleParams k = s.p<SampleParams>();
  k.logits = s.in_ptr[0];
  k.params = reinterpret_cast<const float*>(s.in_ptr[1]);
  k.out = reinterpret_cast<int32_t*>(s.out_ptr);
  launch_sample(k, ctx.stream);
  return {};
}

Status build_sample(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const ir::Node& x = ctx.input(0);
  if (!float_dt(x.dtype)) return step_error(ctx, "sample over {}", ir::dtype_name(x.dtype));
  if (ctx.input(1).dtype != DType::F32) return step_error(ctx, "sample params of {}", ir::dtype_name(ctx.input(1).dtype));
  auto p = std::make_shared<SampleParams>();
  const AxisParams v = axis_view(x.shape.static_dims(), x.shape.rank() - 1);
  if (v.len >= (int64_t{1} << 31)) return step_error(ctx, "sample over {} tokens (at most 2^31 - 1)", v.len);
  p->logits_dt = to_dt(x.dtype);
  p->rows = v.outer;
  p->len = v.len;
  const int b = ctx.bucket(n.inputs[0]);
  if (b == static_cast<int>(x.shape.rank() - 1) || b == -2) step.extent_ok = false;
  step.fn = &sample_fn;
  step.params = p;
  return {};
}

constexpr int64_t kReducePartElems = 8192;  // fewest elements a part of a split reduction takes

struct ReduceStepParams {
  ReduceParams k;
  int bucket_red = -1;
  int64_t partial_off = 0;  // scratch of the parts' results (k.splits > 1)
};

Status reduce_fn(const Step& s, const RunCtx& ctx) {
  const ReduceStepParams& p = s.p<ReduceStepParams>();
  ReduceParams k = p.k;
  if (p.bucket_red >= 0 && ctx.extent_on) {
    k.red_dims[p.bucket_red] = k.red_dims[p.bucket_red] / ctx.upper * ctx.actual;
    k.n_red_elems = 1;
    for (int d = 0; d < k.n_red; ++d) k.n_red_elems *= k.red_dims[d];
    k.mean_count = k.n_red_elems;
  }
  k.x = s.in_ptr[0];
  k.out = s.out_ptr;
  if (k.splits > 1) k.partial = reinterpret_cast<double*>(ctx.scratch + p.partial_off);
  launch_reduce(k, ctx.stream);
  return {};
}

Status build_reduce(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& ra = n.attr<ir::ReduceAttrs>();
  const ir::Node& x = ctx.input(0);
  if (ir::is_packed(x.dtype)) return step_error(ctx, "packed input");
  const auto d = x.shape.static_dims();
  if (d.size() > static_cast<size_t>(kMaxRank)) return step_error(ctx, "rank {} above {}", d.size(), kMaxRank);
  const auto strides = d.empty() ? std::vector<int64_t>{} : x.shape.strides();
  std::vector<bool> red(d.size(), false);
  for (int64_t a : ra.axes) red[static_cast<size_t>(*x.shape.axis(a))] = true;
  auto p = std::make_shared<ReduceStepParams>();
  ReduceParams& k = p->k;
  k.kind = static_cast<uint8_t>(ra.kind);
  k.in_dt = to_dt(x.dtype);
  k.out_dt = to_dt(n.dtype);
  const int xb = ctx.bucket(n.inputs[0]);
  for (size_t i = 0; i < d.size(); ++i) {
    if (red[i]) {
      if (static_cast<int>(i) == xb) p->bucket_red = k.n_red;
      k.red_dims[k.n_red] = d[i];
      k.red_strides[k.n_red++] = strides[i];
      k.n_red_elems *= d[i];
    } else {
      k.kept_dims[k.n_kept] = d[i];
      k.kept_strides[k.n_kept++] = strides[i];
      k.n_out *= d[i];
    }
  }
  k.mean_count = k.n_red_elems;
  // Few outputs over many elements: cut each reduction into parts so that about four
  // blocks per SM run (parts of at least 8,192 elements), combined by a second kernel.
  if (k.n_red_elems >= 2 * kReducePartElems && k.n_out < 4 * ctx.sms) {
    k.splits = std::clamp<int64_t>((4 * ctx.sms + k.n_out - 1) / k.n_out, 1, k.n_red_elems / kReducePartElems);
    if (k.splits > 1) p->partial_off = ctx.scratch(k.n_out * k.splits * static_cast<int64_t>(sizeof(double)));
  }
  if (xb == -2) step.extent_ok = false;
  step.fn = &reduce_fn;
  step.params = p;
  return {};
}

// ---- attention -----------------------------------------------------------------------

struct AttnStepParams {
  AttentionParams k;
  bool q_bucket = false, k_bucket = false;
  int64_t partial_off = 0;
  int64_t counters_off = 0;  // in RunCtx::zeroed (decode with splits)
  // q of another float type than the K / V cache (f32 q over an f16 cache): q is first
  // rounded to the cache's type into scratch, as llama.cpp rounds it for K·Q.
  bool cast_q = false;
  RegionParams cast_k;
  int64_t q_off = 0;
  // An f16 cache: llama.cpp's f16-cache numerics (attention_f16_kernels.h).
  bool f16_exact = false;
  int64_t kv16_off = -1;  // the pipelined prefill kernel's f16 K / V (scratch), or -1
};

Status attention_fn(const Step& s, const RunCtx& ctx) {
  const AttnStepParams& p = s.p<AttnStepParams>();
  AttentionParams k = p.k;
  if (ctx.extent_on) {
    if (p.q_bucket) k.S = k.S_full / ctx.upper * ctx.actual;
    if (p.k_bucket) k.T = k.T_full / ctx.upper * ctx.actual;
  }
  k.q = s.in_ptr[0];
  if (p.cast_q) {
    RegionParams c = p.cast_k;
    c.in[0] = s.in_ptr[0];
    c.out = ctx.scratch + p.q_off;
    TRY(launch_checked(s, c, ctx, "q cast"));
    k.q = c.out;
  }
  k.k = s.in_ptr[1];
  k.v = s.in_ptr[2];
  k.q_pos = s.in_ptr.size() > 3 ? s.in_ptr[3] : nullptr;
  k.kv_len = s.in_ptr.size() > 4 ? reinterpret_cast<const int32_t*>(s.in_ptr[4]) : nullptr;
  k.out = s.out_ptr;
  k.partial = reinterpret_cast<float*>(ctx.scratch + p.partial_off);
  k.counters = reinterpret_cast<unsigned*>(ctx.zeroed + p.counters_off);
  if (p.kv16_off >= 0) k.kv16 = ctx.scratch + p.kv16_off;
  if (p.f16_exact) launch_attention_f16_exact(k, ctx.stream);
  else launch_attention(k, ctx.stream);
  return {};
}

Status build_attention(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& a = n.attr<ir::AttentionAttrs>();
  const auto qd = ctx.input(0).shape.static_dims();
  const auto kd = ctx.input(1).shape.static_dims();
  const DType q_dt = ctx.input(0).dtype, dt = ctx.input(1).dtype;  // dt: the K / V (cache) type
  if (!float_dt(q_dt) || !float_dt(dt) || ctx.input(2).dtype != dt || !float_dt(n.dtype))
    return step_error(ctx, "attention dtypes");
  if (!attention_head_dim_supported(a.head_dim)) return step_error(ctx, "head_dim {}", a.head_dim);
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0) return step_error(ctx, "heads {} / kv heads {}", a.n_heads, a.n_kv_heads);
  auto p = std::make_shared<AttnStepParams>();
  AttentionParams& k = p->k;
  if (q_dt != dt) {
    const int64_t q_elems = *ctx.input(0).shape.num_elements();
    p->cast_q = true;
    p->q_off = ctx.scratch(q_elems * dt_size(to_dt(dt)));
    RegionParams& c = p->cast_k;
    c.rank = 1;
    c.dims[0] = c.total = q_elems;
    c.n_in = 1;
    c.in_dt[0] = to_dt(q_dt);
    c.strides[0][0] = 1;
    c.out_dt = to_dt(dt);
    c.steps[0] = {RegionOp::kCast, 0, to_dt(dt), {-1, 0, 0}};
    c.n_steps = 1;
  }
  const size_t r = qd.size();
  k.S = k.S_full = qd[r - 2];
  k.T = k.T_full = kd[r - 2];
  k.batch = 1;
  for (size_t i = 0; i + 2 < r; ++i) k.batch *= qd[i];
  k.n_heads = static_cast<int>(a.n_heads);
  k.n_kv = static_cast<int>(a.n_kv_heads);
  k.hd = static_cast<int>(a.head_dim);
  k.mask = static_cast<int>(a.mask);
  k.window = a.window;
  k.scale = static_cast<float>(a.scale > 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  k.softcap = static_cast<float>(a.softcap);
  if (n.inputs.size() >= 4) {
    k.pos_dt = to_dt(ctx.input(3).dtype);
    if (ctx.input(3).shape.rank() > 1) k.pos_bstride = k.S_full;  // q_pos [B.., S]: each sequence its own rows
  }
  k.dt = to_dt(dt);
  k.out_dt = to_dt(n.dtype);
  // An f16 cache computes as llama.cpp's (and the CPU backend's) f16 cache does, which
  // the flash kernels' online softmax cannot: the exact two-pass kernels, whole rows,
  // or (few rows over many keys: decode) rows split into chunks of keys, with its scratch.
  // Those read rows in f16 pairs: an odd head_dim (no model we know of has one)
  // takes the general kernels over the f16 rows (f32 softmax, probabilities not rounded).
  p->f16_exact = k.dt == DT::F16 && k.hd % 2 == 0;
  const bool f16_split = p->f16_exact && attention_f16_split(k.batch, k.S, k.n_heads, k.T_full, ctx.sms);
  if (p->f16_exact && !f16_split && k.T_full > attention_f16_exact_max_keys())
    return step_error(ctx, "an f16 KV cache of {} positions for {} query rows (at most {} on CUDA; an f32 cache has "
                      "no such limit)", k.T_full, k.S, attention_f16_exact_max_keys());
  if (f16_split) {  // scratch, and a counter per row (the last block of a row adds its parts)
    p->partial_off = ctx.scratch(attention_f16_split_scratch_bytes(k.batch, k.S_full, k.n_heads, k.T_full, k.hd));
    p->counters_off = ctx.zeroed(k.batch * k.S_full * k.n_heads * static_cast<int64_t>(sizeof(unsigned)));
  }
  k.decode = !p->f16_exact && attention_decode_supported(k.S, k.n_heads, k.n_kv, k.hd);
  k.decode_wave = ctx.sms;
  k.many_rows = k.decode && ctx.attention_rows && k.batch * k.n_heads > k.decode_wave && attention_decode_rows_supported(k);
  k.tensor_cores =
      !k.decode && !p->f16_exact && ctx.attention_tc && attention_tc_supported(k.S, k.n_heads, k.n_kv, k.hd);
  k.splits = p->f16_exact     ? (f16_split ? 2 : 1)
             : k.many_rows    ? attention_decode_rows_splits(k.batch, k.T, k.n_kv, ctx.sms)
             : k.decode       ? attention_decode_splits(k.batch, k.T, k.n_kv, ctx.sms)
             : k.tensor_cores ? 1
                              : attention_splits(k.batch, k.S, k.T, k.n_heads, ctx.sms);
  if (k.tensor_cores && ctx.attention_flash && attention_flash_supported(k.hd, k.dt))
    p->kv16_off = ctx.scratch(attention_flash_scratch_bytes(k.batch, k.T_full, k.n_kv, k.hd));
  if (k.splits > 1 && !p->f16_exact)
    p->partial_off = ctx.scratch(static_cast<int64_t>(k.splits) * k.batch * k.n_heads * k.S * (k.hd + 2) * 4);
  if (k.decode && k.splits > 1)
    p->counters_off = ctx.zeroed(k.batch * k.n_heads * static_cast<int64_t>(sizeof(unsigned)));
  const int qb = ctx.bucket(n.inputs[0]), kb = ctx.bucket(n.inputs[1]);
  p->q_bucket = qb == static_cast<int>(r - 2) && k.batch == 1;
  p->k_bucket = kb == static_cast<int>(r - 2) && k.batch == 1;
  if ((kb >= 0 && !p->k_bucket) || kb == -2 || (qb >= 0 && !p->q_bucket) || qb == -2) step.extent_ok = false;
  step.fn = &attention_fn;
  step.params = p;
  return {};
}

Status build_boundary(BuildCtx&, Step& step) {
  step.fn = nullptr;
  return {};
}

}  // namespace

StepBuilder cuda_builder(OpKind kind) {
  switch (kind) {
    case OpKind::Input: case OpKind::Param: case OpKind::Constant: case OpKind::Handle: return &build_boundary;
    case OpKind::Activation: case OpKind::Binary: case OpKind::Compare: case OpKind::Where: case OpKind::Cast:
      return &build_elementwise;
    case OpKind::ElementwiseRegion: return &build_region;
    case OpKind::MatMul: return &build_matmul;
    case OpKind::DequantMatMul: return &build_dequant_matmul;
    case OpKind::FusedMatMulBiasAct: return &build_fused_matmul;
    case OpKind::FusedSwiGLU: return &build_fused_swiglu;
    case OpKind::FusedLinear: return &build_fused_linear;
    case OpKind::Reduce: return &build_reduce;
    case OpKind::Softmax: return &build_softmax;
    case OpKind::Cumsum: return &build_cumsum;
    case OpKind::TopK: return &build_topk;
    case OpKind::Sample: return &build_sample;
    case OpKind::LayerNorm: case OpKind::RmsNorm: case OpKind::FusedResidualRmsNorm:
    case OpKind::FusedResidualLayerNorm: return &build_norm;
    case OpKind::Rope: return &build_rope;
    case OpKind::Attention: return &build_attention;
    case OpKind::Reshape: return &build_copy;
    case OpKind::Transpose: return &build_transpose;
    case OpKind::Narrow: return &build_narrow;
    case OpKind::Concat: return &build_concat;
    case OpKind::Expand: return &build_expand;
    case OpKind::Gather: return &build_gather;
    case OpKind::UpdateSlice: return &build_update_slice;
    case OpKind::MoeRoute: return &build_moe_route;
    case OpKind::MoeFfn: return &build_moe_ffn;
    case OpKind::CausalConv1d: return &build_causal_conv1d;
    case OpKind::GatedDeltaRule: return &build_gated_delta_rule;
    case OpKind::Conv: return &build_conv;
    case OpKind::ConvTranspose: return &build_conv_transpose;
    case OpKind::GroupNorm: return &build_group_norm;
    case OpKind::Interpolate: return &build_interpolate;
    case OpKind::WindowPartition: case OpKind::WindowUnpartition: return &build_window;
    case OpKind::RelPosAttention: return &build_rel_pos_attention;
    case OpKind::AllReduce: return &build_all_reduce;
    case OpKind::AllGather: return &build_all_gather;
    default: return nullptr;
  }
}

}  // namespace rlx::cuda_backend
