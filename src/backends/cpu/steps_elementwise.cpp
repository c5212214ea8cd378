// CPU steps for the elementwise ops: Activation, Binary, Compare, Where, Cast and
// ElementwiseRegion. Every one of them is compiled into a small region program (one
// step per op) run by a chunked interpreter over broadcast strides; single f32 ops
// on contiguous data take a direct loop. f32 activations run through the kernels
// library's SIMD implementations (runtime ISA dispatch), in regions and alone, so a
// fused chain and its unfused ops compute the same values.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_step.h"
#include "backends/cpu/kernels/elementwise.h"
#include "backends/cpu/kernels/kernel_context.h"

namespace rlx::cpu_backend {
namespace {

using ir::DType;
using ir::OpKind;

constexpr int kMaxDims = 8;
constexpr int64_t kChunk = 256;

struct RegionInput {
  DType dtype = DType::F32;
  int64_t strides[kMaxDims] = {};
};

struct RegionParams {
  int rank = 0;
  int64_t dims[kMaxDims] = {};
  int64_t total = 0;
  DType out_dtype = DType::F32;
  std::vector<RegionInput> inputs;
  std::vector<ir::RegionStep> steps;
  bool use_double = false;
  // fast path: one f32 op over inputs whose last dim is contiguous or broadcast
  bool fast_f32 = false;
};

float act_f(ir::ActKind k, float x) {
  using ir::ActKind;
  switch (k) {
    case ActKind::Identity: return x;
    case ActKind::Gelu: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case ActKind::GeluTanh: {
      const float c = 0.7978845608028654f;
      return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
    }
    case ActKind::Silu: return x / (1.0f + std::exp(-x));
    case ActKind::Relu: return x > 0 ? x : 0.0f;
    case ActKind::Sigmoid: return 1.0f / (1.0f + std::exp(-x));
    case ActKind::Tanh: return std::tanh(x);
    case ActKind::Exp: return std::exp(x);
    case ActKind::Log: return std::log(x);
    case ActKind::Sqrt: return std::sqrt(x);
    case ActKind::Rsqrt: return 1.0f / std::sqrt(x);
    case ActKind::Neg: return -x;
    case ActKind::Abs: return std::fabs(x);
    case ActKind::Sin: return std::sin(x);
    case ActKind::Cos: return std::cos(x);
    case ActKind::Softplus: return x > 20.0f ? x : std::log1p(std::exp(x));
  }
  return x;
}

double act_d(ir::ActKind k, double x) {
  using ir::ActKind;
  switch (k) {
    case ActKind::Identity: return x;
    case ActKind::Gelu: return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752));
    case ActKind::GeluTanh: return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case ActKind::Silu: return x / (1.0 + std::exp(-x));
    case ActKind::Relu: return x > 0 ? x : 0.0;
    case ActKind::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case ActKind::Tanh: return std::tanh(x);
    case ActKind::Exp: return std::exp(x);
    case ActKind::Log: return std::log(x);
    case ActKind::Sqrt: return std::sqrt(x);
    case ActKind::Rsqrt: return 1.0 / std::sqrt(x);
    case ActKind::Neg: return -x;
    case ActKind::Abs: return std::fabs(x);
    case ActKind::Sin: return std::sin(x);
    case ActKind::Cos: return std::cos(x);
    case ActKind::Softplus: return x > 20.0 ? x : std::log1p(std::exp(x));
  }
  return x;
}

// y[0..n) = act(x[0..n)) in f32 with the dispatched SIMD kernel, on this thread (the
// caller is already one task of a parallel_for). UnaryOp lists the ActKinds in order.
// GELU keeps the exact libm formula: llama.cpp evaluates it that way (through an f16
// table for Gemma) and a 1e-6 approximation error flips enough f16 roundings there to
// move quantized Gemma logits past the conformance tolerance.
void act_f32_simd(ir::ActKind k, const float* x, float* y, int64_t n) {
  static_assert(static_cast<int>(cpu::UnaryOp::kSoftplus) == static_cast<int>(ir::ActKind::Softplus));
  if (k == ir::ActKind::Gelu || k == ir::ActKind::GeluTanh) {
    for (int64_t i = 0; i < n; ++i) y[i] = act_f(k, x[i]);
    return;
  }
  cpu::unary_f32(cpu::KernelContext{nullptr, isa_cap()}, static_cast<cpu::UnaryOp>(k), x, y, n);
}

template <typename T>
T binary_op(ir::BinaryKind k, T a, T b) {
  using ir::BinaryKind;
  switch (k) {
    case BinaryKind::Add: return a + b;
    case BinaryKind::Sub: return a - b;
    case BinaryKind::Mul: return a * b;
    case BinaryKind::Div: return a / b;
    case BinaryKind::Max: return a > b ? a : b;
    case BinaryKind::Min: return a < b ? a : b;
    case BinaryKind::Pow: return std::pow(a, b);
  }
  return a;
}

template <typename T>
T compare_op(ir::CompareKind k, T a, T b) {
  using ir::CompareKind;
  switch (k) {
    case CompareKind::Eq: return a == b;
    case CompareKind::Ne: return a != b;
    case CompareKind::Lt: return a < b;
    case CompareKind::Le: return a <= b;
    case CompareKind::Gt: return a > b;
    case CompareKind::Ge: return a >= b;
  }
  return 0;
}

/// Rounds a computed value to what `t` can hold (f16/bf16 precision, integer
/// truncation, bool 0/1), so a region matches the unfused chain bit for bit.
template <typename T>
T round_to(DType t, T v) {
  switch (t) {
    case DType::F16: return static_cast<T>(f16_bits_to_f32(f32_to_f16_bits(static_cast<float>(v))));
    case DType::BF16: return static_cast<T>(bf16_bits_to_f32(f32_to_bf16_bits(static_cast<float>(v))));
    case DType::F32: return static_cast<T>(static_cast<float>(v));
    case DType::Bool: return v != 0 ? T(1) : T(0);
    case DType::I8: case DType::U8: case DType::I32: case DType::I64: return std::trunc(v);
    default: return v;
  }
}

template <typename T>
T load_t(DType t, const uint8_t* p, int64_t i) {
  if constexpr (std::is_same_v<T, float>) return load_f(t, p, i);
  else return load_d(t, p, i);
}

template <typename T>
void store_t(DType t, uint8_t* p, int64_t i, T v) {
  if constexpr (std::is_same_v<T, float>) store_f(t, p, i, v);
  else store_d(t, p, i, v);
}

// Evaluates the region over output elements [b, e).
template <typename T>
void run_region(const RegionParams& rp, const Step& s, int64_t b, int64_t e) {
  const int n_in = static_cast<int>(rp.inputs.size());
  const int n_steps = static_cast<int>(rp.steps.size());
  // Lanes for every input and step, in per-thread scratch (grown once, then reused).
  const size_t lanes = static_cast<size_t>(n_in + n_steps);
  auto* mem = static_cast<uint8_t*>(
      cpu::thread_scratch(cpu::ScratchSlot::kTemp, lanes * (sizeof(T*) + sizeof(T) * kChunk)));
  const T** in_vals = reinterpret_cast<const T**>(mem);
  T** step_vals = reinterpret_cast<T**>(mem) + n_in;
  T* lane_mem = reinterpret_cast<T*>(mem + lanes * sizeof(T*));
  for (int i = 0; i < n_steps; ++i) step_vals[i] = lane_mem + static_cast<size_t>(n_in + i) * kChunk;
  const int rank = rp.rank;
  const int64_t inner = rp.dims[rank - 1];
  int64_t idx[kMaxDims];
  int64_t rem = b;
  for (int d = rank - 1; d >= 0; --d) {
    idx[d] = rem % rp.dims[d];
    rem /= rp.dims[d];
  }
  int64_t pos = b;
  while (pos < e) {
    const int64_t j0 = idx[rank - 1];
    const int64_t len = std::min({kChunk, inner - j0, e - pos});
    for (int i = 0; i < n_in; ++i) {
      const RegionInput& in = rp.inputs[static_cast<size_t>(i)];
      int64_t off = 0;
      for (int d = 0; d < rank; ++d) off += idx[d] * in.strides[d];
      const int64_t st = in.strides[rank - 1];
      const uint8_t* src = s.in_ptr[static_cast<size_t>(i)];
      if (std::is_same_v<T, float> && in.dtype == DType::F32 && st == 1) {  // read in place
        in_vals[i] = reinterpret_cast<const T*>(src) + off;
        continue;
      }
      T* lane = lane_mem + static_cast<size_t>(i) * kChunk;
      if (st == 0) std::fill_n(lane, len, load_t<T>(in.dtype, src, off));
      else
        for (int64_t j = 0; j < len; ++j) lane[j] = load_t<T>(in.dtype, src, off + j * st);
      in_vals[i] = lane;
    }
    for (int k = 0; k < n_steps; ++k) {
      const ir::RegionStep& st = rp.steps[static_cast<size_t>(k)];
      auto arg = [&](int a) -> const T* { return a < 0 ? in_vals[-1 - a] : step_vals[a]; };
      T* o = step_vals[k];
      switch (st.op) {
        case OpKind::Activation: {
          const T* x = arg(st.args[0]);
          const auto ak = static_cast<ir::ActKind>(st.kind);
          if constexpr (std::is_same_v<T, float>) {
            act_f32_simd(ak, x, o, len);
          } else {
            for (int64_t j = 0; j < len; ++j) o[j] = act_d(ak, x[j]);
          }
          break;
        }
        case OpKind::Binary: {
          const T* x = arg(st.args[0]);
          const T* y = arg(st.args[1]);
          const auto bk = static_cast<ir::BinaryKind>(st.kind);
          switch (bk) {  // one loop per kind, so that the compiler vectorizes the common ones
            case ir::BinaryKind::Add: for (int64_t j = 0; j < len; ++j) o[j] = x[j] + y[j]; break;
            case ir::BinaryKind::Sub: for (int64_t j = 0; j < len; ++j) o[j] = x[j] - y[j]; break;
            case ir::BinaryKind::Mul: for (int64_t j = 0; j < len; ++j) o[j] = x[j] * y[j]; break;
            case ir::BinaryKind::Div: for (int64_t j = 0; j < len; ++j) o[j] = x[j] / y[j]; break;
            default: for (int64_t j = 0; j < len; ++j) o[j] = binary_op<T>(bk, x[j], y[j]); break;
          }
          break;
        }
        case OpKind::Compare: {
          const T* x = arg(st.args[0]);
          const T* y = arg(st.args[1]);
          const auto ck = static_cast<ir::CompareKind>(st.kind);
          for (int64_t j = 0; j < len; ++j) o[j] = compare_op<T>(ck, x[j], y[j]);
          break;
        }
        case OpKind::Where: {
          const T* c = arg(st.args[0]);
          const T* x = arg(st.args[1]);
          const T* y = arg(st.args[2]);
          for (int64_t j = 0; j < len; ++j) o[j] = c[j] != 0 ? x[j] : y[j];
          break;
        }
        default: {  // Cast
          const T* x = arg(st.args[0]);
          for (int64_t j = 0; j < len; ++j) o[j] = x[j];
          break;
        }
      }
      if (st.dtype != DType::F32 || !std::is_same_v<T, float>)
        for (int64_t j = 0; j < len; ++j) o[j] = round_to<T>(st.dtype, o[j]);
    }
    const T* res = step_vals[n_steps - 1];
    if (std::is_same_v<T, float> && rp.out_dtype == DType::F32)
      std::memcpy(s.out_ptr + pos * static_cast<int64_t>(sizeof(float)), res, static_cast<size_t>(len) * sizeof(float));
    else
      for (int64_t j = 0; j < len; ++j) store_t<T>(rp.out_dtype, s.out_ptr, pos + j, res[j]);
    pos += len;
    idx[rank - 1] += len;
    for (int d = rank - 1; d > 0 && idx[d] >= rp.dims[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

// One f32 op, inner strides 0 or 1: a direct loop per row.
void run_fast_f32(const RegionParams& rp, const Step& s, int64_t b, int64_t e) {
  const ir::RegionStep& st = rp.steps[0];
  const int rank = rp.rank;
  const int64_t inner = rp.dims[rank - 1];
  float* out = s.outf();
  for (int64_t pos = b; pos < e;) {
    const int64_t row = pos / inner, j0 = pos % inner;
    const int64_t len = std::min(inner - j0, e - pos);
    int64_t idx[kMaxDims];
    int64_t rem = row;
    for (int d = rank - 2; d >= 0; --d) {
      idx[d] = rem % rp.dims[d];
      rem /= rp.dims[d];
    }
    const float* a[3];
    int64_t sa[3];
    for (size_t i = 0; i < rp.inputs.size(); ++i) {
      int64_t off = 0;
      for (int d = 0; d < rank - 1; ++d) off += idx[d] * rp.inputs[i].strides[d];
      sa[i] = rp.inputs[i].strides[rank - 1];
      a[i] = s.inf(i) + off + j0 * sa[i];
    }
    float* o = out + pos;
    if (st.op == OpKind::Activation) {
      const auto k = static_cast<ir::ActKind>(st.kind);
      if (sa[0] == 1) {
        act_f32_simd(k, a[0], o, len);
      } else {
        for (int64_t j = 0; j < len; ++j) o[j] = act_f(k, a[0][j * sa[0]]);
      }
    } else {
      const auto k = static_cast<ir::BinaryKind>(st.kind);
      const float* x = a[0];
      const float* y = a[1];
      const int64_t sx = sa[0], sy = sa[1];
      // Contiguous and scalar-broadcast operands get loops the compiler vectorizes.
      if (sx == 1 && (sy == 1 || sy == 0) && (k == ir::BinaryKind::Add || k == ir::BinaryKind::Mul ||
                                              k == ir::BinaryKind::Sub || k == ir::BinaryKind::Div)) {
        if (sy == 1) {
          switch (k) {
            case ir::BinaryKind::Add: for (int64_t j = 0; j < len; ++j) o[j] = x[j] + y[j]; break;
            case ir::BinaryKind::Sub: for (int64_t j = 0; j < len; ++j) o[j] = x[j] - y[j]; break;
            case ir::BinaryKind::Mul: for (int64_t j = 0; j < len; ++j) o[j] = x[j] * y[j]; break;
            default: for (int64_t j = 0; j < len; ++j) o[j] = x[j] / y[j]; break;
          }
        } else {
          const float c = y[0];
          switch (k) {
            case ir::BinaryKind::Add: for (int64_t j = 0; j < len; ++j) o[j] = x[j] + c; break;
            case ir::BinaryKind::Sub: for (int64_t j = 0; j < len; ++j) o[j] = x[j] - c; break;
            case ir::BinaryKind::Mul: for (int64_t j = 0; j < len; ++j) o[j] = x[j] * c; break;
            default: for (int64_t j = 0; j < len; ++j) o[j] = x[j] / c; break;
          }
        }
        pos += len;
        continue;
      }
      switch (k) {
        case ir::BinaryKind::Add: for (int64_t j = 0; j < len; ++j) o[j] = x[j * sx] + y[j * sy]; break;
        case ir::BinaryKind::Sub: for (int64_t j = 0; j < len; ++j) o[j] = x[j * sx] - y[j * sy]; break;
        case ir::BinaryKind::Mul: for (int64_t j = 0; j < len; ++j) o[j] = x[j * sx] * y[j * sy]; break;
        case ir::BinaryKind::Div: for (int64_t j = 0; j < len; ++j) o[j] = x[j * sx] / y[j * sy]; break;
        default: for (int64_t j = 0; j < len; ++j) o[j] = binary_op<float>(k, x[j * sx], y[j * sy]); break;
      }
    }
    pos += len;
  }
}

Status region_fn(const Step& s, const StepCtx& ctx) {
  const auto& rp = s.p<RegionParams>();
  const int64_t n = ctx.rows(rp.total, s.scalable);
  parallel_for(ctx, n, 16384, [&](int64_t b, int64_t e) {
    if (rp.fast_f32) run_fast_f32(rp, s, b, e);
    else if (rp.use_double) run_region<double>(rp, s, b, e);
    else run_region<float>(rp, s, b, e);
  });
  return {};
}

bool supported_scalar(DType t) { return !ir::is_packed(t); }

// Builds the region program for the node's inputs and `steps`.
Status build_program(BuildCtx& ctx, Step& step, std::vector<ir::RegionStep> steps) {
  const ir::Node& n = ctx.node();
  auto rp = std::make_shared<RegionParams>();
  std::vector<int64_t> out = n.shape.static_dims();
  if (out.empty()) out.push_back(1);
  if (out.size() > kMaxDims) return step_error(ctx, "rank {} exceeds {}", out.size(), kMaxDims);
  std::vector<std::vector<int64_t>> strides;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const ir::Node& in = ctx.input(i);
    if (!supported_scalar(in.dtype)) return step_error(ctx, "input {} has packed dtype {}", i, ir::dtype_name(in.dtype));
    strides.push_back(broadcast_strides(in.shape.static_dims(), out));
  }
  if (!supported_scalar(n.dtype)) return step_error(ctx, "packed result dtype");
  // Drop unit dims, then collapse adjacent dims that are contiguous (or broadcast)
  // for every input.
  {
    std::vector<int64_t> kept;
    std::vector<std::vector<int64_t>> kept_strides(strides.size());
    for (size_t d = 0; d < out.size(); ++d) {
      if (out[d] == 1) continue;
      kept.push_back(out[d]);
      for (size_t i = 0; i < strides.size(); ++i) kept_strides[i].push_back(strides[i][d]);
    }
    if (kept.empty()) {
      kept.push_back(1);
      for (auto& ks : kept_strides) ks.push_back(0);
    }
    out = std::move(kept);
    strides = std::move(kept_strides);
  }
  std::vector<int64_t> dims{out[0]};
  std::vector<std::vector<int64_t>> cs(strides.size());
  for (size_t i = 0; i < strides.size(); ++i) cs[i] = {strides[i][0]};
  for (size_t d = 1; d < out.size(); ++d) {
    bool merge = true;
    for (size_t i = 0; i < strides.size(); ++i) {
      const int64_t prev = cs[i].back(), cur = strides[i][d];
      if (!(prev == cur * out[d] || (prev == 0 && cur == 0))) merge = false;
    }
    if (merge) {
      dims.back() *= out[d];
      for (size_t i = 0; i < strides.size(); ++i) cs[i].back() = strides[i][d];
    } else {
      dims.push_back(out[d]);
      for (size_t i = 0; i < strides.size(); ++i) cs[i].push_back(strides[i][d]);
    }
  }
  rp->rank = static_cast<int>(dims.size());
  for (int d = 0; d < rp->rank; ++d) rp->dims[d] = dims[static_cast<size_t>(d)];
  rp->total = prod(out);
  rp->out_dtype = n.dtype;
  bool dbl = n.dtype == DType::F64 || n.dtype == DType::I32 || n.dtype == DType::I64;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    RegionInput ri;
    ri.dtype = ctx.input(i).dtype;
    for (int d = 0; d < rp->rank; ++d) ri.strides[d] = cs[i][static_cast<size_t>(d)];
    if (ri.dtype == DType::F64 || ri.dtype == DType::I32 || ri.dtype == DType::I64) dbl = true;
    rp->inputs.push_back(ri);
  }
  for (const auto& st : steps)
    if (st.dtype == DType::F64 || st.dtype == DType::I32 || st.dtype == DType::I64) dbl = true;
  rp->use_double = dbl;
  rp->steps = std::move(steps);
  const ir::RegionStep& s0 = rp->steps[0];
  if (rp->steps.size() == 1 && n.dtype == DType::F32 && (s0.op == OpKind::Activation || s0.op == OpKind::Binary)) {
    bool ok = true;
    for (const auto& ri : rp->inputs)
      if (ri.dtype != DType::F32 || (ri.strides[rp->rank - 1] != 0 && ri.strides[rp->rank - 1] != 1)) ok = false;
    rp->fast_f32 = ok;
  }
  step.fn = &region_fn;
  step.params = rp;
  step.scalable = ctx.outer_is_bucket(ctx.id, n.shape.rank());
  return {};
}

ir::RegionStep single(OpKind op, uint8_t kind, DType dt, int n_args) {
  ir::RegionStep s;
  s.op = op;
  s.kind = kind;
  s.dtype = dt;
  for (int i = 0; i < n_args; ++i) s.args.push_back(-1 - i);
  return s;
}

}  // namespace

Status build_activation(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  return build_program(ctx, step,
                       {single(OpKind::Activation, static_cast<uint8_t>(n.attr<ir::ActivationAttrs>().kind), n.dtype, 1)});
}
Status build_binary(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  return build_program(ctx, step, {single(OpKind::Binary, static_cast<uint8_t>(n.attr<ir::BinaryAttrs>().kind), n.dtype, 2)});
}
Status build_compare(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  // Compare in the operands' precision: a region step's dtype is its result (bool).
  return build_program(ctx, step,
                       {single(OpKind::Compare, static_cast<uint8_t>(n.attr<ir::CompareAttrs>().kind), n.dtype, 2)});
}
Status build_where(BuildCtx& ctx, Step& step) {
  return build_program(ctx, step, {single(OpKind::Where, 0, ctx.node().dtype, 3)});
}
Status build_cast(BuildCtx& ctx, Step& step) {
  return build_program(ctx, step, {single(OpKind::Cast, 0, ctx.node().dtype, 1)});
}
Status build_region(BuildCtx& ctx, Step& step) {
  return build_program(ctx, step, ctx.node().attr<ir::RegionAttrs>().steps);
}

void store_f(DType t, uint8_t* p, int64_t i, float v) {
  switch (t) {
    case DType::F32: std::memcpy(p + 4 * i, &v, 4); break;
    case DType::F16: { const uint16_t h = f32_to_f16_bits(v); std::memcpy(p + 2 * i, &h, 2); break; }
    case DType::BF16: { const uint16_t h = f32_to_bf16_bits(v); std::memcpy(p + 2 * i, &h, 2); break; }
    default: store_d(t, p, i, static_cast<double>(v)); break;
  }
}

void store_d(DType t, uint8_t* p, int64_t i, double v) {
  switch (t) {
    case DType::F64: std::memcpy(p + 8 * i, &v, 8); break;
    case DType::F32: case DType::F16: case DType::BF16: store_f(t, p, i, static_cast<float>(v)); break;
    case DType::Bool: p[i] = v != 0 ? 1 : 0; break;
    default: {
      // Saturate instead of overflowing (undefined behaviour) on out-of-range values.
      double c = std::trunc(v);
      if (!(c == c)) c = 0;
      c = std::clamp(c, -9.2233720368547e18, 9.2233720368547e18);
      store_i(t, p, i, static_cast<int64_t>(c));
      break;
    }
  }
}

void store_i(DType t, uint8_t* p, int64_t i, int64_t v) {
  switch (t) {
    case DType::I8: reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(std::clamp<int64_t>(v, -128, 127)); break;
    case DType::U8: p[i] = static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255)); break;
    case DType::Bool: p[i] = v != 0 ? 1 : 0; break;
    case DType::I32: {
      const auto w = static_cast<int32_t>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX));
      std::memcpy(p + 4 * i, &w, 4);
      break;
    }
    case DType::I64: std::memcpy(p + 8 * i, &v, 8); break;
    default: store_d(t, p, i, static_cast<double>(v)); break;
  }
}

}  // namespace rlx::cpu_backend
