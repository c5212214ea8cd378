// CUDA step builders and run functions: each LIR node kind becomes kernel parameters
// at compile time (broadcast strides, axis views, GEMM descriptors, rope tables) and a
// run function that fills in device pointers and launches on the executable's stream.
// GEMMs go through cuBLASLt (bias / ReLU / tanh-GELU epilogues where it has them);
// packed DequantMatMul uses the GEMV kernel for M <= 8 and dequantize + cuBLAS above.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

#include "backends/cuda/cuda_step.h"
#include "backends/cuda/cuda_util.h"
#include "rlx/base/log.h"

namespace rlx::cuda_backend {

using ir::DType;
using ir::OpKind;

#define RLX_SAME_DTYPE(name) static_assert(static_cast<int>(DT::name) == static_cast<int>(DType::name));
RLX_SAME_DTYPE(F32) RLX_SAME_DTYPE(F16) RLX_SAME_DTYPE(BF16) RLX_SAME_DTYPE(F64) RLX_SAME_DTYPE(I8)
RLX_SAME_DTYPE(U8) RLX_SAME_DTYPE(I32) RLX_SAME_DTYPE(I64) RLX_SAME_DTYPE(Bool) RLX_SAME_DTYPE(Q4_0)
RLX_SAME_DTYPE(Q8_0) RLX_SAME_DTYPE(Q4_K) RLX_SAME_DTYPE(Q5_K) RLX_SAME_DTYPE(Q6_K) RLX_SAME_DTYPE(Q8_K)
#undef RLX_SAME_DTYPE
static_assert(static_cast<int>(ir::ActKind::Cos) == 14 && static_cast<int>(ir::BinaryKind::Pow) == 6 &&
              static_cast<int>(ir::CompareKind::Ge) == 5 && static_cast<int>(ir::ReduceKind::Min) == 3 &&
              static_cast<int>(ir::MaskKind::SlidingWindow) == 2);

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

int64_t dt_size(DT t) { return ir::dtype_info(static_cast<DType>(t)).bytes_per_block; }
DT to_dt(DType t) { return static_cast<DT>(t); }
bool float_dt(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

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

namespace {

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

/// Right-aligned broadcast strides (elements) of `in` against `out`.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t acc = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t di = in.size() - 1 - k, doo = out.size() - 1 - k;
    st[doo] = in[di] == 1 ? 0 : acc;
    acc *= in[di];
  }
  return st;
}

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

struct UpdateParams {
  UpdateSliceParams k;
  bool src_bucket = false;
  int64_t total_bytes = 0;
};

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
  p->total_bytes = p->k.outer * p->k.dst_len * p->k.inner_bytes;
  p->src_bucket = ctx.bucket(n.inputs[1]) == static_cast<int>(axis) && p->k.outer == 1;
  if (ctx.bucket(n.inputs[1]) == -2) step.extent_ok = false;
  step.fn = &update_fn;
  step.params = p;
  return {};
}

// ---- norms, rope, softmax, reduce -------------------------------------------------

struct NormStepParams {
  NormParams k;
  bool residual = false, beta = false;
};

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

struct RopeStepParams {
  RopeParams k;
  std::shared_ptr<DeviceBuffer> table;  // inv_freq, uploaded at compile
};

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
  const std::vector<double> f = ir::rope_inv_freq(r);
  const int64_t bytes = static_cast<int64_t>(std::max<size_t>(f.size(), 1) * sizeof(double));
  ASSIGN_OR_RETURN(DeviceBuffer table, DeviceBuffer::create(bytes, ctx.graph->describe(ctx.id)));
  if (!f.empty())
    RLX_CUDA_TRY(cudaMemcpy(table.data(), f.data(), f.size() * sizeof(double), cudaMemcpyHostToDevice),
                 ctx.graph->describe(ctx.id));
  p->table = std::make_shared<DeviceBuffer>(std::move(table));
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

struct ReduceStepParams {
  ReduceParams k;
  int bucket_red = -1;
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
  k.out = s.out_ptr;
  k.partial = reinterpret_cast<float*>(ctx.scratch + p.partial_off);
  k.counters = reinterpret_cast<unsigned*>(ctx.zeroed + p.counters_off);
  launch_attention(k, ctx.stream);
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
  if (n.inputs.size() == 4) k.pos_dt = to_dt(ctx.input(3).dtype);
  k.dt = to_dt(dt);
  k.out_dt = to_dt(n.dtype);
  k.decode = attention_decode_supported(k.S, k.n_heads, k.n_kv, k.hd);
  k.decode_wave = ctx.sms;
  k.tensor_cores = !k.decode && ctx.attention_tc && attention_tc_supported(k.S, k.n_heads, k.n_kv, k.hd);
  k.splits = k.decode         ? attention_decode_splits(k.batch, k.T, k.n_kv, ctx.sms)
             : k.tensor_cores ? 1
                              : attention_splits(k.batch, k.S, k.T, k.n_heads, ctx.sms);
  if (k.splits > 1)
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

// ---- matmuls -------------------------------------------------------------------------

/// Post-GEMM elementwise program: act(c (+ bias)) or silu(gate) * up, written to out.
struct LinearParams {
  GemmDesc g;
  bool has_bias = false;
  bool lt_bias = false;  // bias applied by the cuBLASLt epilogue
  bool post = false;     // a region kernel finishes the result
  RegionParams post_k;   // inputs: [gemm result, (bias | up)]; out: node output
  bool swiglu = false;
  bool cast_x = false;   // x converted to the weights' dtype into scratch first
  RegionParams cast_k;
  bool round_x = false;  // x rounded to llama.cpp's Q8_0 activations into scratch first (Q8_0 / Q4_0 weights)
  int64_t x_off = 0, c_off = 0, u_off = 0;  // scratch offsets (cast x, gemm result, up result)
  bool c_in_scratch = false;
  // packed DequantMatMul
  bool packed = false;
  QGemvParams q;
  int64_t wdq_off = 0;  // f16 dequantized weights (M > 8)
  int64_t split_row = 0;  // bytes per row in the split layout (packed_split types)
  // decode GEMV (M <= kMaxGemvM): the whole step in one kernel
  bool gemv = false;
  GemvParams gv;
  // rope and KV-cache writes taken over from a rope_kv step (fuse_gemv_rope_kv): its
  // pointers are inputs [rkv_in, rkv_in + 8) (bind_rope_kv); `rkv_keep` holds its tables
  size_t rkv_in = 0;
  bool rkv_k_out = false;
  std::shared_ptr<const void> rkv_keep;
  // an RMS norm taken over as the GEMV's prologue (fuse_norm_gemv): in[0] is the norm's
  // x; inputs [norm_in, ..) are its residual (norm_residual), gamma and the sum's half
  // of its output (norm_sum: this GEMV writes it)
  size_t norm_in = 0;
  bool norm_residual = false, norm_sum = false;
};

/// The run-time pointers of a GEMV that took over a rope_kv step: in[at ..] = q_pos,
/// k_pos, k_cache, k_start, v_cache, v_start, q_out, k_out.
void bind_rope_kv(GemvParams& v, const LinearParams& p, const Step& s, const RunCtx& ctx) {
  if (p.rkv_in == 0) return;
  const size_t at = p.rkv_in;
  RopeKvParams& k = v.rkv;
  k.q.pos = s.in_ptr[at];
  k.k.pos = s.in_ptr[at + 1];
  k.k_cache = const_cast<uint8_t*>(s.in_ptr[at + 2]);  // handles are written in place by design
  k.k_start = s.in_ptr[at + 3];
  k.v_cache = const_cast<uint8_t*>(s.in_ptr[at + 4]);
  k.v_start = s.in_ptr[at + 5];
  k.q.out = const_cast<uint8_t*>(s.in_ptr[at + 6]);
  k.k.out = p.rkv_k_out ? const_cast<uint8_t*>(s.in_ptr[at + 7]) : nullptr;
  k.err = ctx.err;
  k.err_code = s.index + 1;
}

/// The run-time pointers of a GEMV that took over an RMS norm (fuse_norm_gemv).
void bind_norm(GemvParams& v, const LinearParams& p, const Step& s) {
  if (!v.norm) return;
  size_t at = p.norm_in;
  if (p.norm_residual) v.norm_res = s.in_ptr[at++];
  v.norm_gamma = s.in_ptr[at++];
  if (p.norm_sum) v.norm_sum = const_cast<uint8_t*>(s.in_ptr[at]);  // the norm's output, now written here
}

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
  bind_rope_kv(v, p, s, ctx);
  bind_norm(v, p, s);
  launch_gemv(v, ctx.stream);
  return {};
}

/// A grouped GEMV (group_sibling_gemvs): in = [x, w_0 .. w_{n-1}, y_1 .. y_{n-1}], out = y_0.
Status gemv_group_fn(const Step& s, const RunCtx& ctx) {
  const LinearParams& p = s.p<LinearParams>();
  GemvParams v = p.gv;
  const int n = v.n_parts;
  v.x = s.in_ptr[0];
  for (int i = 0; i < n; ++i) {
    v.part_w[i] = s.in_ptr[static_cast<size_t>(1 + i)];
    v.part_y[i] = i == 0 ? s.out_ptr : const_cast<uint8_t*>(s.in_ptr[static_cast<size_t>(n + i)]);
    if (s.split) v.part_d_offset[i] = v.part_N[i] * p.split_row;
  }
  v.w = v.part_w[0];
  v.y = v.part_y[0];
  if (s.split) v.row_bytes = p.split_row;
  bind_rope_kv(v, p, s, ctx);
  bind_norm(v, p, s);
  launch_gemv(v, ctx.stream);
  return {};
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

Status build_linear(BuildCtx& ctx, Step& step, bool tb, bool swiglu, bool bias_act) {
  const ir::Node& n = ctx.node();
  const ir::Node& x = ctx.input(0);
  const ir::Node& w = ctx.input(1);
  const auto xd = x.shape.static_dims(), wd = w.shape.static_dims();
  auto p = std::make_shared<LinearParams>();
  p->swiglu = swiglu;
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
    if (g.M > 8) {  // prefill: dequantize to f16 and use cuBLAS (f16 x f16 -> f32)
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
    if (p->cast_x) p->x_off = ctx.scratch(g.M * g.K * dt_size(g.ab_dt));
    g.c_dt = to_dt(n.dtype);
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
  if (tb && g.M <= kMaxGemvM && w_aligned && gemv_supported(wdt, g.M, g.K)) {
    GemvParams& v = p->gv;
    v.x_dt = to_dt(x.dtype);
    v.w_dt = wdt;
    v.y_dt = to_dt(n.dtype);
    v.M = g.M;
    v.N = g.N;
    v.K = g.K;
    v.row_bytes = *ir::dtype_bytes(w.dtype, g.K);
    v.swiglu = swiglu;
    v.x_vec4 = x.dtype == DType::F32 && step.in[0].offset % 16 == 0 && step.in[0].kind == StorageKind::kArena;
    v.x_int8 = ctx.gemv_int8_x;
    auto immutable = [](const ValueRef& r) { return r.kind == StorageKind::kParam || r.kind == StorageKind::kConstant; };
    v.w_const = immutable(step.in[1]) && (!swiglu || immutable(step.in[2]));
    if (bias_act) {
      const auto& f = n.attr<ir::FusedMatMulAttrs>();
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
  if (p->packed && g.M <= 8) {
    step.fn = &linear_fn;
    step.params = p;
    return {};
  }
  // cuBLASLt writes C in c_dt: f32 always works; otherwise it must equal the operands'.
  if (g.c_dt != DT::F32 && g.c_dt != g.ab_dt) g.c_dt = DT::F32;
  const bool c_is_out = g.c_dt == to_dt(n.dtype);
  ir::ActKind act = ir::ActKind::Identity;
  if (bias_act) {
    const auto& f = n.attr<ir::FusedMatMulAttrs>();
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

Status build_boundary(BuildCtx&, Step& step) {
  step.fn = nullptr;
  return {};
}

bool same_ref(const ValueRef& a, const ValueRef& b) {
  return a.kind == b.kind && a.index == b.index && a.offset == b.offset;
}
bool disjoint_refs(const ValueRef& a, const ValueRef& b) {
  return a.kind != b.kind || a.index != b.index || a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset;
}

}  // namespace

void group_sibling_gemvs(std::vector<Step>& steps) {
  auto plain_gemv = [](const Step& s) -> const LinearParams* {
    if (s.fn != &gemv_fn) return nullptr;
    const LinearParams& p = s.p<LinearParams>();
    if (!p.gemv || p.swiglu || p.has_bias || (packed_split(p.gv.w_dt) && !s.split)) return nullptr;
    return &p;
  };
  std::vector<Step> out;
  out.reserve(steps.size());
  for (size_t i = 0; i < steps.size();) {
    const LinearParams* first = plain_gemv(steps[i]);
    size_t j = i + 1;
    if (first != nullptr) {
      const GemvParams& a = first->gv;
      for (; j < steps.size() && j - i < static_cast<size_t>(kMaxGemvParts); ++j) {
        const LinearParams* q = plain_gemv(steps[j]);
        if (q == nullptr) break;
        const GemvParams& c = q->gv;
        const Step& sj = steps[j];
        bool ok = same_ref(sj.in[0], steps[i].in[0]) && sj.split == steps[i].split && c.w_dt == a.w_dt &&
                  c.x_dt == a.x_dt && c.y_dt == a.y_dt && c.M == a.M && c.K == a.K && c.act == a.act &&
                  c.x_vec4 == a.x_vec4 && c.x_int8 == a.x_int8 && c.w_const == a.w_const && sj.extent_ok == steps[i].extent_ok;
        // Every output apart from x and from the others (they are all live at once).
        for (size_t k = i; ok && k < j; ++k)
          ok = disjoint_refs(sj.out, steps[k].out) && disjoint_refs(steps[k].out, steps[i].in[0]);
        ok = ok && disjoint_refs(sj.out, steps[i].in[0]);
        if (!ok) break;
      }
    }
    if (j - i < 2) {
      out.push_back(std::move(steps[i]));
      ++i;
      continue;
    }
    // Steps [i, j) become one launch.
    const int n = static_cast<int>(j - i);
    auto p = std::make_shared<LinearParams>(*first);
    Step g = steps[i];
    g.in = {steps[i].in[0]};
    std::string what = *steps[i].what;
    for (size_t k = i; k < j; ++k) {
      const LinearParams& q = steps[k].p<LinearParams>();
      p->gv.part_N[k - i] = q.gv.N;
      p->gv.part_d_offset[k - i] = 0;
      g.in.push_back(steps[k].in[1]);
      if (k > i) what += " + " + *steps[k].what;
    }
    for (size_t k = i + 1; k < j; ++k) g.in.push_back(steps[k].out);
    p->gv.n_parts = n;
    p->gv.N = p->gv.part_N[0];
    g.fn = &gemv_group_fn;
    g.params = p;
    g.split_inputs = 0;
    g.what = std::make_shared<const std::string>(what);
    out.push_back(std::move(g));
    i = j;
  }
  for (size_t k = 0; k < out.size(); ++k) out[k].index = static_cast<int>(k);
  steps = std::move(out);
}

namespace {

/// rope(q), rope(k) and the two cache writes (fuse_decode_steps): in = [q_x, q_pos, k_x,
/// k_pos, k_cache, k_start, v, v_cache, v_start, k_out], out = q_out.
struct RopeKvStepParams {
  RopeKvParams k;
  std::shared_ptr<DeviceBuffer> q_table, k_table;
  int64_t k_src_len = 0, v_src_len = 0;
  bool k_bucket = false, v_bucket = false;
  bool k_out = true;  // rope(k) has readers besides the cache write
  ir::ValueId q_x = ir::kNoValue, k_x = ir::kNoValue, v = ir::kNoValue;  // what it reads
};

Status rope_kv_fn(const Step& s, const RunCtx& ctx) {
  const RopeKvStepParams& p = s.p<RopeKvStepParams>();
  RopeKvParams k = p.k;
  k.q.x = s.in_ptr[0];
  k.q.pos = s.in_ptr[1];
  k.q.out = s.out_ptr;
  k.q.inv_freq = reinterpret_cast<const double*>(p.q_table->data());
  k.k.x = s.in_ptr[2];
  k.k.pos = s.in_ptr[3];
  k.k.out = p.k_out ? const_cast<uint8_t*>(s.in_ptr[9]) : nullptr;
  k.k.inv_freq = reinterpret_cast<const double*>(p.k_table->data());
  k.k_cache = const_cast<uint8_t*>(s.in_ptr[4]);  // handles are written in place by design
  k.k_start = s.in_ptr[5];
  k.v = s.in_ptr[6];
  k.v_cache = const_cast<uint8_t*>(s.in_ptr[7]);
  k.v_start = s.in_ptr[8];
  k.k_rows = p.k_bucket && ctx.extent_on ? p.k_src_len / ctx.upper * ctx.actual : p.k_src_len;
  k.v_rows = p.v_bucket && ctx.extent_on ? p.v_src_len / ctx.upper * ctx.actual : p.v_src_len;
  k.err = ctx.err;
  k.err_code = s.index + 1;
  launch_rope_kv(k, ctx.stream);
  return {};
}

/// A decode GEMV step that group_sibling_gemvs could also take (no epilogue).
const LinearParams* plain_gemv_params(const Step& s) {
  if (s.fn != &gemv_fn) return nullptr;
  const LinearParams& p = s.p<LinearParams>();
  if (!p.gemv || p.swiglu || p.has_bias || p.gv.act != 0 || p.gv.n_parts > 1) return nullptr;
  return &p;
}

/// Steps [i, i + 3): gemv(x, Wa), gemv(x, Wb), region silu(a) * b (either order of the
/// product's operands, either GEMV the gate) -> one SwiGLU GEMV writing the region's
/// output. Both products must be used only by the region.
std::optional<Step> match_gemv_swiglu(const std::vector<Step>& steps, size_t i, const ir::Graph& g,
                                      const std::vector<int32_t>& uses) {
  if (i + 2 >= steps.size()) return std::nullopt;
  const Step &a = steps[i], &b = steps[i + 1], &r = steps[i + 2];
  const LinearParams* pa = plain_gemv_params(a);
  const LinearParams* pb = plain_gemv_params(b);
  if (pa == nullptr || pb == nullptr || r.node == ir::kNoValue) return std::nullopt;
  const ir::Node& rn = g.node(r.node);
  if (rn.op != OpKind::ElementwiseRegion || rn.inputs.size() != 2 || rn.dtype != DType::F32) return std::nullopt;
  const GemvParams &va = pa->gv, &vb = pb->gv;
  if (!same_ref(a.in[0], b.in[0]) || va.w_dt != vb.w_dt || va.x_dt != vb.x_dt || va.M != vb.M || va.N != vb.N ||
      va.K != vb.K || va.y_dt != DT::F32 || vb.y_dt != DT::F32 || a.split != b.split ||
      (packed_split(va.w_dt) && !a.split) || a.in[1].offset % 16 != 0 || b.in[1].offset % 16 != 0)
    return std::nullopt;
  if (uses[static_cast<size_t>(a.node)] != 1 || uses[static_cast<size_t>(b.node)] != 1) return std::nullopt;
  // The region's output is born after x's last reader, so the plan may have put it over
  // x; the fused kernel writes it while other blocks still read x.
  if (!disjoint_refs(r.out, a.in[0])) return std::nullopt;
  if (g.node(a.node).shape != rn.shape || g.node(b.node).shape != rn.shape) return std::nullopt;
  // silu(i_g) * i_u with {i_g, i_u} = {input 0, input 1}
  const auto& st = rn.attr<ir::RegionAttrs>().steps;
  if (st.size() != 2 || st[0].op != OpKind::Activation ||
      st[0].kind != static_cast<uint8_t>(ir::ActKind::Silu) || st[0].args.size() != 1 || st[0].args[0] >= 0 ||
      st[1].op != OpKind::Binary || st[1].kind != static_cast<uint8_t>(ir::BinaryKind::Mul) || st[1].args.size() != 2 ||
      st[0].dtype != DType::F32 || st[1].dtype != DType::F32)
    return std::nullopt;
  const int gate_in = -1 - st[0].args[0];
  const int up_arg = st[1].args[0] == 0 ? st[1].args[1] : st[1].args[1] == 0 ? st[1].args[0] : 0;
  const int up_in = -1 - up_arg;
  if (up_arg >= 0 || gate_in > 1 || up_in > 1 || up_in == gate_in) return std::nullopt;
  const ir::ValueId gate_v = rn.inputs[static_cast<size_t>(gate_in)], up_v = rn.inputs[static_cast<size_t>(up_in)];
  const Step* gate = gate_v == a.node && up_v == b.node ? &a : gate_v == b.node && up_v == a.node ? &b : nullptr;
  if (gate == nullptr) return std::nullopt;
  const Step& up = gate == &a ? b : a;
  auto p = std::make_shared<LinearParams>(gate->p<LinearParams>());
  p->swiglu = true;
  p->gv.swiglu = true;
  p->gv.y_dt = DT::F32;
  p->gv.w_const = va.w_const && vb.w_const;
  Step f = *gate;
  f.node = r.node;
  f.in = {gate->in[0], gate->in[1], up.in[1]};
  f.out = r.out;
  f.params = p;
  f.split_inputs = gate->split_inputs != 0 ? 6 : 0;
  f.extent_ok = a.extent_ok && b.extent_ok && r.extent_ok;
  f.what = std::make_shared<const std::string>(*gate->what + " + " + *up.what + " + " + *r.what);
  return f;
}

/// Steps [i, i + 4): rope(q), rope(k), update_slice(k cache, rope k), update_slice(v
/// cache, v) -> one rope_kv launch. Caches must be plain 2-D handles in the dtype of
/// what is written into them, their outputs the handles themselves.
std::optional<Step> match_rope_kv(const std::vector<Step>& steps, size_t i, const ir::Graph& g,
                                  const std::vector<int32_t>& uses) {
  if (i + 3 >= steps.size()) return std::nullopt;
  const Step &rq = steps[i], &rk = steps[i + 1], &uk = steps[i + 2], &uv = steps[i + 3];
  if (rq.fn != &rope_fn || rk.fn != &rope_fn || uk.fn != &update_fn || uv.fn != &update_fn) return std::nullopt;
  const UpdateParams &pk = uk.p<UpdateParams>(), &pv = uv.p<UpdateParams>();
  const RopeStepParams &qp = rq.p<RopeStepParams>(), &kp = rk.p<RopeStepParams>();
  if (!same_ref(uk.in[1], rk.out) || !same_ref(uk.out, uk.in[0]) || !same_ref(uv.out, uv.in[0])) return std::nullopt;
  if (pk.k.outer != 1 || pv.k.outer != 1) return std::nullopt;
  const ir::Node &kc = g.node(g.node(uk.node).inputs[0]), &vc = g.node(g.node(uv.node).inputs[0]);
  const ir::Node& vsrc = g.node(g.node(uv.node).inputs[1]);
  if (to_dt(kc.dtype) != kp.k.out_dt || !float_dt(vc.dtype) || vsrc.dtype != vc.dtype) return std::nullopt;
  const int64_t v_width = pv.k.inner_bytes / dt_size(to_dt(vc.dtype));
  if (pk.k.inner_bytes != kp.k.width * dt_size(kp.k.out_dt) || pk.k.src_len != kp.k.rows) return std::nullopt;
  // A thread reads its own elements before writing them, so a rope may run in place
  // (out == x); across parts, nothing one part writes may alias what another reads or
  // writes.
  const ValueRef &qx = rq.in[0], &qo = rq.out, &kx = rk.in[0], &ko = rk.out, &v = uv.in[1];
  // rope(k)'s own output is written only when something besides the cache write reads it.
  const ValueRef &kc_ref = uk.in[0], &vc_ref = uv.in[0];
  const bool k_out = uses[static_cast<size_t>(rk.node)] > 1;
  for (const auto& [w, r] : {std::pair{&qo, &kx}, {&qo, &v}, {&kc_ref, &qx}, {&kc_ref, &kx}, {&kc_ref, &v},
                             {&kc_ref, &qo}, {&vc_ref, &qx}, {&vc_ref, &kx}, {&vc_ref, &v}, {&vc_ref, &qo},
                             {&vc_ref, &kc_ref}})
    if (!disjoint_refs(*w, *r)) return std::nullopt;
  if (k_out)
    for (const auto& [w, r] : {std::pair{&qo, &ko}, {&ko, &qx}, {&ko, &v}, {&kc_ref, &ko}, {&vc_ref, &ko}})
      if (!disjoint_refs(*w, *r)) return std::nullopt;
  auto p = std::make_shared<RopeKvStepParams>();
  p->k.q = qp.k;
  p->k.k = kp.k;
  p->q_table = qp.table;
  p->k_table = kp.table;
  p->k.k_start_dt = pk.k.start_dt;
  p->k.k_len = pk.k.dst_len;
  p->k.v_dt = to_dt(vc.dtype);
  p->k.v_start_dt = pv.k.start_dt;
  p->k.v_len = pv.k.dst_len;
  p->k.v_width = v_width;
  p->k_src_len = pk.k.src_len;
  p->v_src_len = pv.k.src_len;
  p->k_bucket = pk.src_bucket;
  p->v_bucket = pv.src_bucket;
  p->k_out = k_out;
  p->q_x = g.node(rq.node).inputs[0];
  p->k_x = g.node(rk.node).inputs[0];
  p->v = g.node(uv.node).inputs[1];
  Step f = rq;
  f.fn = &rope_kv_fn;
  f.in = {rq.in[0], rq.in[1], rk.in[0], rk.in[1], uk.in[0], uk.in[2], uv.in[1], uv.in[0], uv.in[2], rk.out};
  f.params = p;
  f.split_inputs = 0;
  f.extent_ok = rq.extent_ok && rk.extent_ok && uk.extent_ok && uv.extent_ok;
  f.what = std::make_shared<const std::string>(*rq.what + " + " + *rk.what + " + " + *uk.what + " + " + *uv.what);
  return f;
}

}  // namespace

void fuse_decode_steps(std::vector<Step>& steps, const ir::Graph& g, const std::vector<ir::ValueId>& outputs,
                       bool swiglu, bool rope_kv) {
  std::vector<int32_t> uses = g.use_counts();
  for (ir::ValueId v : outputs) ++uses[static_cast<size_t>(v)];
  std::vector<Step> out;
  out.reserve(steps.size());
  for (size_t i = 0; i < steps.size();) {
    if (std::optional<Step> f = swiglu ? match_gemv_swiglu(steps, i, g, uses) : std::nullopt) {
      out.push_back(std::move(*f));
      i += 3;
    } else if (std::optional<Step> f2 = rope_kv ? match_rope_kv(steps, i, g, uses) : std::nullopt) {
      out.push_back(std::move(*f2));
      i += 4;
    } else {
      out.push_back(std::move(steps[i]));
      ++i;
    }
  }
  for (size_t k = 0; k < out.size(); ++k) out[k].index = static_cast<int>(k);
  steps = std::move(out);
}

namespace {

/// Offers every step run by `fn` to `hand_over(i)`, which rewrites other steps to do its
/// work and returns null, or says why not (logged); first every hand-over (they rewrite
/// steps in place), then the list without the steps handed over, renumbered.
template <class HandOver>
void hand_over_steps(std::vector<Step>& steps, StepFn fn, HandOver&& hand_over) {
  std::vector<bool> gone(steps.size(), false);
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].fn != fn) continue;
    const char* why_not = hand_over(i);
    if (why_not == nullptr) gone[i] = true;
    else RLX_LOG_DEBUG("cuda: {} stays a launch of its own: {}", *steps[i].what, why_not);
  }
  std::vector<Step> out;
  out.reserve(steps.size());
  for (size_t i = 0; i < steps.size(); ++i)
    if (!gone[i]) out.push_back(std::move(steps[i]));
  for (size_t k = 0; k < out.size(); ++k) out[k].index = static_cast<int>(k);
  steps = std::move(out);
}

/// Everything step s writes: its output, and for GEMVs the other parts' outputs of a
/// grouped launch, the rope / KV-cache writes taken over (fuse_gemv_rope_kv) and the
/// residual sum of a norm prologue (fuse_norm_gemv).
std::vector<const ValueRef*> written_by(const Step& s) {
  std::vector<const ValueRef*> w = {&s.out};
  if (s.fn != &gemv_fn && s.fn != &gemv_group_fn) return w;
  const LinearParams& lp = s.p<LinearParams>();
  if (s.fn == &gemv_group_fn)
    for (int p = 1; p < lp.gv.n_parts; ++p) w.push_back(&s.in[static_cast<size_t>(lp.gv.n_parts + p)]);
  if (lp.rkv_in != 0) {
    for (size_t a : {2, 4, 6}) w.push_back(&s.in[lp.rkv_in + a]);
    if (lp.rkv_k_out) w.push_back(&s.in[lp.rkv_in + 7]);
  }
  if (lp.norm_sum) w.push_back(&s.in.back());
  return w;
}

/// Moves rope_kv step r into the decode GEMVs that produce its q, k and v (one grouped
/// launch or several, among the four steps before it); else says why not.
const char* fuse_rope_kv_into_gemvs(std::vector<Step>& steps, size_t r, const std::vector<int32_t>& uses) {
  const Step& rk = steps[r];
  const RopeKvStepParams& rp = rk.p<RopeKvStepParams>();
  const RopeKvParams& k = rp.k;
  // (A bucketed source of one row has an extent of one: it always writes that row.)
  if (rp.k_src_len != 1 || rp.v_src_len != 1) return "not one row";
  for (const RopeParams* q : {&k.q, &k.k})
    if (q->neox || q->rows != 1 || q->x_dt != DT::F32 || q->in_width != q->width || q->in_offset != 0 ||
        q->head_dim % 2 != 0 || q->n_rot % 2 != 0)
      return "rope form (neox, rows, dtype or a narrowed input)";
  if (k.v_dt != DT::F32) return "v cache dtype";
  for (ir::ValueId v : {rp.q_x, rp.k_x, rp.v})
    if (v == ir::kNoValue || uses[static_cast<size_t>(v)] != 1) return "q, k or v has other readers";
  // The producing part of each of q, k, v: (step, part).
  const ValueRef* want[3] = {&rk.in[0], &rk.in[2], &rk.in[6]};
  const int64_t width[3] = {k.q.width, k.k.width, k.v_width};
  size_t at_step[3] = {0, 0, 0};
  int at_part[3] = {-1, -1, -1};
  for (int role = 0; role < 3; ++role)
    for (size_t j = r; j-- > 0 && r - j <= 4 && at_part[role] < 0;) {
      const Step& s = steps[j];
      if (s.fn != &gemv_fn && s.fn != &gemv_group_fn) continue;
      const LinearParams& lp = s.p<LinearParams>();
      const GemvParams& gv = lp.gv;
      if (!lp.gemv || lp.swiglu || lp.has_bias || gv.act != 0 || gv.M != 1 || gv.y_dt != DT::F32 || lp.rkv_in != 0)
        continue;
      if (s.fn == &gemv_fn && lp.packed && packed_split(lp.q.w_dt) && !s.split) continue;  // the generic packed GEMV
      const int parts = s.fn == &gemv_group_fn ? gv.n_parts : 1;
      for (int i = 0; i < parts; ++i) {
        const ValueRef& out = i == 0 ? s.out : s.in[static_cast<size_t>(parts + i)];
        const int64_t n = parts > 1 ? gv.part_N[i] : gv.N;
        if (same_ref(out, *want[role]) && n == width[role]) {
          at_step[role] = j;
          at_part[role] = i;
        }
      }
    }
  if (at_part[0] < 0 || at_part[1] < 0 || at_part[2] < 0) return "q, k or v is not made by a one-row GEMV just before";
  const size_t first = std::min({at_step[0], at_step[1], at_step[2]});
  // The GEMVs now write q_out, k_out and the cache rows from step `first` on: nothing
  // the steps up to r read or write may overlap them (bar q, k, v themselves, which
  // nothing writes any more).
  // The reads move earlier too (positions and cache starts): no step in between may
  // write them. And no step after a producer may write over q, k or v (an in-place
  // bias add, say): then the GEMV's value is not what rope_kv read.
  std::vector<const ValueRef*> writes = {&rk.out, &rk.in[4], &rk.in[7]};
  if (rp.k_out) writes.push_back(&rk.in[9]);
  const ValueRef* reads[4] = {&rk.in[1], &rk.in[3], &rk.in[5], &rk.in[8]};
  for (size_t j = first; j < r; ++j) {
    const Step& s = steps[j];
    const std::vector<const ValueRef*> sw = written_by(s);
    for (const ValueRef* w : sw) {
      for (const ValueRef* rd : reads)
        if (!disjoint_refs(*w, *rd)) return "a step in between writes a position or cache start";
      for (int role = 0; role < 3; ++role)
        if (j > at_step[role] && !disjoint_refs(*w, *want[role])) return "a step in between writes q, k or v";
    }
    std::vector<const ValueRef*> refs = {&s.out};
    for (const ValueRef& x : s.in) refs.push_back(&x);
    for (const ValueRef* x : refs) {
      if (same_ref(*x, *want[0]) || same_ref(*x, *want[1]) || same_ref(*x, *want[2])) continue;
      for (const ValueRef* w : writes)
        if (!disjoint_refs(*w, *x)) return "what it writes overlaps what the GEMVs read";
    }
  }
  const uint8_t roles[3] = {GemvParams::kRoleQ, GemvParams::kRoleK, GemvParams::kRoleV};
  for (size_t j = first; j < r; ++j) {
    if (j != at_step[0] && j != at_step[1] && j != at_step[2]) continue;
    Step& s = steps[j];
    auto lp = std::make_shared<LinearParams>(s.p<LinearParams>());
    for (int role = 0; role < 3; ++role)
      if (at_step[role] == j) lp->gv.part_role[at_part[role]] = roles[role];
    lp->gv.rkv = k;
    lp->gv.rkv.k_rows = lp->gv.rkv.v_rows = 1;
    lp->gv.rkv.q.inv_freq = reinterpret_cast<const double*>(rp.q_table->data());  // kept by rkv_keep
    lp->gv.rkv.k.inv_freq = reinterpret_cast<const double*>(rp.k_table->data());
    lp->rkv_in = s.in.size();
    lp->rkv_k_out = rp.k_out;
    lp->rkv_keep = rk.params;
    for (size_t i : {1, 3, 4, 5, 7, 8}) s.in.push_back(rk.in[i]);
    s.in.push_back(rk.out);
    s.in.push_back(rk.in[9]);
    s.params = lp;
    s.extent_ok = s.extent_ok && rk.extent_ok;
    if (j == first) s.what = std::make_shared<const std::string>(*s.what + " + " + *rk.what);
  }
  return nullptr;
}

}  // namespace

void fuse_gemv_rope_kv(std::vector<Step>& steps, const ir::Graph& g, const std::vector<ir::ValueId>& outputs) {
  std::vector<int32_t> uses = g.use_counts();
  for (ir::ValueId v : outputs) ++uses[static_cast<size_t>(v)];
  hand_over_steps(steps, &rope_kv_fn, [&](size_t i) { return fuse_rope_kv_into_gemvs(steps, i, uses); });
}

namespace {

/// The GEMV form fuse_norm_gemv takes: one row of f32 x, 16-byte aligned, room for the
/// prologue's rows in shared memory, no prologue yet.
bool gemv_takes_norm(const Step& s, int64_t K) {
  if (s.fn != &gemv_fn && s.fn != &gemv_group_fn) return false;
  const LinearParams& lp = s.p<LinearParams>();
  const GemvParams& gv = lp.gv;
  if (!lp.gemv || gv.M != 1 || !gv.x_vec4 || gv.x_dt != DT::F32 || gv.K != K || gv.norm) return false;
  if (s.fn == &gemv_fn && lp.packed && packed_split(lp.q.w_dt) && !s.split) return false;  // the generic packed GEMV
  return gemv_norm_fits(gv);
}

// Every block of a GEMV with the prologue reads the norm's inputs and gamma (3 x 4K bytes
// from L2) and sums squares: worth a launch for the q/k/v and gate/up products (<= 2048
// blocks of 8 or 16 rows), not for an LM head of 32000 rows and more.
constexpr int64_t kNormPrologueMaxRows = 16384;

/// Why one-row RMS norm step i cannot become the prologue of the GEMV steps right after
/// it, or null after rewriting them to compute it (the caller drops step i). Those steps
/// (q/k and v over different weight types, say) must be all that reads the normed row;
/// the first writes the residual sum.
const char* fuse_norm_into_gemv(std::vector<Step>& steps, size_t i, const ir::Graph& g, const ir::BufferPlan& plan,
                                const std::vector<ir::ValueId>& outputs) {
  const Step& ns = steps[i];
  const NormStepParams& np = ns.p<NormStepParams>();
  const NormParams& k = np.k;
  if (!k.rms || np.beta || k.rows != 1 || k.x_dt != DT::F32 || k.out_dt != DT::F32 || k.d % 4 != 0)
    return "not a one-row f32 RMS norm";
  const int64_t row_bytes = k.d * 4;
  ValueRef normed = ns.out, sum = ns.out;
  normed.offset += np.residual ? row_bytes : 0;
  normed.bytes = row_bytes;
  sum.bytes = row_bytes;
  // The GEMVs that read the normed row, right after the norm, and their products.
  size_t end = i + 1;
  int parts = 0;
  int64_t rows = 0;
  for (; end < steps.size() && same_ref(steps[end].in[0], normed) && steps[end].in[0].bytes == row_bytes; ++end) {
    if (!gemv_takes_norm(steps[end], k.d)) return "a step that is not a GEMV of the prologue's form reads the normed row";
    const LinearParams& lp = steps[end].p<LinearParams>();
    parts += steps[end].fn == &gemv_group_fn ? lp.gv.n_parts : lp.swiglu ? 2 : 1;
    rows += steps[end].fn == &gemv_group_fn ? std::accumulate(lp.gv.part_N, lp.gv.part_N + lp.gv.n_parts, int64_t{0})
                                            : lp.gv.N;
  }
  if (end == i + 1) return "the next step is not a GEMV over the normed row";
  if (rows > kNormPrologueMaxRows) return "the GEMVs have too many rows for every block to recompute the norm";
  const ValueRef& x = ns.in[0];
  const ValueRef* res = np.residual ? &ns.in[1] : nullptr;
  const ValueRef& gamma = ns.in[np.residual ? 2 : 1];
  if (x.offset % 16 != 0 || (res != nullptr && res->offset % 16 != 0) || sum.offset % 16 != 0 ||
      (k.g_dt == DT::F32 && gamma.offset % 16 != 0))
    return "alignment";
  // Nothing but those products may read the normed row (it is no longer written), and
  // the executable must not copy it out.
  const ir::ValueId nv = ns.node;
  auto reads_normed = [&](ir::ValueId v) {
    const ir::BufferSlot& sl = plan.slots[static_cast<size_t>(v)];
    const bool view = sl.kind == ir::SlotKind::kView;
    if ((view ? sl.root : v) != nv) return false;
    const int64_t lo = view ? sl.offset : 0, hi = lo + sl.size;
    const int64_t nlo = normed.offset - ns.out.offset;
    return lo < nlo + row_bytes && nlo < hi;
  };
  for (ir::ValueId o : outputs)
    if (reads_normed(o)) return "the normed row is an output";
  int readers = 0;
  for (ir::ValueId v = 0; v < g.size(); ++v) {
    const ir::Node& n = g.node(v);
    if (plan.slots[static_cast<size_t>(v)].kind == ir::SlotKind::kView && n.op != OpKind::UpdateSlice) continue;
    for (ir::ValueId in : n.inputs)
      if (reads_normed(in)) {
        // (the GEMVs' products: a FusedSwiGLU node is two of them)
        if (n.op == OpKind::FusedSwiGLU) readers += 2;
        else if (n.op == OpKind::MatMul || n.op == OpKind::DequantMatMul || n.op == OpKind::FusedMatMulBiasAct) ++readers;
        else return "the normed row has other readers";
        break;
      }
  }
  if (readers != parts) return "the normed row has other readers";
  // Every block reads x, res and gamma while others write the GEMVs' outputs and block 0
  // of the first the sum: what the GEMVs write must not overlap those, nor the sum
  // anything they read.
  for (size_t j = i + 1; j < end; ++j) {
    const Step& gs = steps[j];
    for (const ValueRef* w : written_by(gs))
      for (const ValueRef* r : {&x, res, &gamma, static_cast<const ValueRef*>(np.residual ? &sum : nullptr)})
        if (r != nullptr && !disjoint_refs(*w, *r)) return "the GEMV's outputs overlap the norm's inputs";
    if (np.residual)
      for (size_t a = 1; a < gs.in.size(); ++a)
        if (!disjoint_refs(sum, gs.in[a])) return "the sum overlaps what the GEMV reads";
  }
  if (np.residual && (!disjoint_refs(sum, x) || !disjoint_refs(sum, *res))) return "the sum overlaps the norm's inputs";
  for (size_t j = i + 1; j < end; ++j) {
    Step& gs = steps[j];
    auto p = std::make_shared<LinearParams>(gs.p<LinearParams>());
    p->gv.norm = true;
    p->gv.norm_g_dt = k.g_dt;
    p->gv.norm_eps = k.eps;
    p->gv.norm_gamma_const = k.affine_const;
    p->norm_residual = np.residual;
    p->norm_sum = np.residual && j == i + 1;
    p->norm_in = gs.in.size();
    gs.in[0] = x;
    if (res != nullptr) gs.in.push_back(*res);
    gs.in.push_back(gamma);
    if (p->norm_sum) gs.in.push_back(sum);
    gs.params = p;
    gs.extent_ok = gs.extent_ok && ns.extent_ok;
    gs.what = std::make_shared<const std::string>(*ns.what + " + " + *gs.what);
  }
  return nullptr;
}

}  // namespace

void fuse_norm_gemv(std::vector<Step>& steps, const ir::Graph& g, const ir::BufferPlan& plan,
                    const std::vector<ir::ValueId>& outputs) {
  hand_over_steps(steps, &norm_fn, [&](size_t i) { return fuse_norm_into_gemv(steps, i, g, plan, outputs); });
}

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
    default: return nullptr;
  }
}

}  // namespace rlx::cuda_backend
