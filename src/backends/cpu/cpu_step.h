// The CPU executor's unit of work: a `Step` is one LIR node turned, at compile
// time, into a kernel entry point plus resolved operand pointers and immutable
// per-kernel parameters, so the run loop only calls `step.fn(step, ctx)`.
// Also the small helpers shared by the kernel files (dtype load/store, threading).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rlx/base/half.h"
#include "rlx/base/status.h"
#include "rlx/ir/graph.h"
#include "rlx/ir/module.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cpu/kernels/thread_pool.h"
#include "backends/cpu/packed_weights.h"
#include "rlx/base/env.h"
#include "rlx/formats/ggml_type.h"
#include "rlx/runtime/communicator.h"
#include "runtime/executor_skeleton.h"

namespace rlx::cpu_backend {

/// Where an operand's bytes live (shared with the other executors); resolved to a
/// pointer whenever storage changes (compile, set_param re-allocation, clone).
using runtime::StorageKind;
using runtime::ValueRef;

/// Run-time context handed to every step.
/// The kernels' instruction-set cap from RLX_CPU_ISA (scalar|avx2|avx512|amx; default:
/// the best the CPU has, resolved by the kernels library).
inline cpu::IsaLevel isa_cap() { return cpu::isa_cap_from_name(env_config().cpu_isa); }

/// The GGUF block type of a packed IR dtype (nullopt for non-packed dtypes).
inline std::optional<formats::GgmlType> ggml_type_of(ir::DType t) {
  switch (t) {
    case ir::DType::Q4_0: return formats::GgmlType::Q4_0;
    case ir::DType::Q4_1: return formats::GgmlType::Q4_1;
    case ir::DType::Q5_0: return formats::GgmlType::Q5_0;
    case ir::DType::Q5_1: return formats::GgmlType::Q5_1;
    case ir::DType::Q8_0: return formats::GgmlType::Q8_0;
    case ir::DType::Q2_K: return formats::GgmlType::Q2_K;
    case ir::DType::Q3_K: return formats::GgmlType::Q3_K;
    case ir::DType::Q4_K: return formats::GgmlType::Q4_K;
    case ir::DType::Q5_K: return formats::GgmlType::Q5_K;
    case ir::DType::Q6_K: return formats::GgmlType::Q6_K;
    case ir::DType::Q8_K: return formats::GgmlType::Q8_K;
    case ir::DType::IQ4_NL: return formats::GgmlType::IQ4_NL;
    case ir::DType::IQ4_XS: return formats::GgmlType::IQ4_XS;
    case ir::DType::IQ3_S: return formats::GgmlType::IQ3_S;
    case ir::DType::IQ3_XXS: return formats::GgmlType::IQ3_XXS;
    case ir::DType::IQ2_S: return formats::GgmlType::IQ2_S;
    case ir::DType::IQ2_XS: return formats::GgmlType::IQ2_XS;
    case ir::DType::IQ2_XXS: return formats::GgmlType::IQ2_XXS;
    case ir::DType::IQ1_S: return formats::GgmlType::IQ1_S;
    case ir::DType::IQ1_M: return formats::GgmlType::IQ1_M;
    case ir::DType::TQ1_0: return formats::GgmlType::TQ1_0;
    case ir::DType::TQ2_0: return formats::GgmlType::TQ2_0;
    default: return std::nullopt;
  }
}

struct StepCtx {
  cpu::ThreadPool* pool = nullptr;  ///< the executable's pool (null: run inline)
  bool extent_on = false;
  int64_t actual = 0;
  int64_t upper = 0;
  uint8_t* scratch = nullptr;  ///< per-executable scratch base (see BuildCtx::scratch)
  int n_threads = 1;
  HostCommunicator* comm = nullptr;  ///< the tensor-parallel group's (bind_communicator); null outside one

  /// Number of leading rows to process out of `rows` when the step's outer rows
  /// follow the bucket axis (rows = k * upper, the first k*actual are real).
  int64_t rows(int64_t full, bool scalable) const {
    if (!extent_on || !scalable || upper <= 0) return full;
    return full / upper * actual;
  }
};

struct Step;
using StepFn = Status (*)(const Step&, const StepCtx&);

struct Step {
  StepFn fn = nullptr;
  ir::ValueId node = ir::kNoValue;
  std::vector<ValueRef> in;          ///< operand references, node input order
  ValueRef out;                      ///< result reference
  std::vector<const uint8_t*> in_ptr;  ///< resolved operand pointers
  uint8_t* out_ptr = nullptr;          ///< resolved result pointer
  std::shared_ptr<const void> params;  ///< kernel parameters (immutable, shared by clones)
  bool scalable = false;               ///< outer rows follow the bucket axis (see StepCtx::rows)
  /// Extent policy computed by the builder: for set_active_extent.
  ///   kRowwise: rows independent, scales with `scalable`
  ///   kMixesBucket: combines values across the bucket axis; needs a dedicated extent
  ///                 path (`extent_ok` says whether the kernel has one)
  bool mixes_bucket = false;
  bool extent_ok = true;
  /// Weight operands the kernel can read pre-packed (filled by the builder). The
  /// executable packs those that are params, once, and points packed[i] at pack[i]'s
  /// packed copy; a null packed[i] means "pack per call from in_ptr".
  static constexpr size_t kMaxPacked = 2;
  std::vector<PackRequest> pack;
  const cpu::PackedB* packed[kMaxPacked] = {};

  template <typename P>
  const P& p() const { return *static_cast<const P*>(params.get()); }
  const float* inf(size_t i) const { return reinterpret_cast<const float*>(in_ptr[i]); }
  float* outf() const { return reinterpret_cast<float*>(out_ptr); }
};

/// What a step builder sees: the node, its input nodes, the bucket axis of every
/// value (-1 when it has none) and a way to reserve scratch memory.
struct BuildCtx : runtime::StepBuildGraph {
  int n_threads = 1;
  int64_t* scratch_bytes = nullptr;  ///< the executable's scratch size: max over steps
  int64_t step_scratch = 0;          ///< bytes reserved by the step being built

  std::vector<int64_t> dims(const ir::Node& n) const { return n.shape.static_dims(); }
  /// Reserves `bytes` (64-byte aligned) of executor scratch for the step being built;
  /// returns its offset. Steps run one at a time and scratch lives only inside a step,
  /// so every step's reservations start at offset 0 and the executable keeps the max.
  int64_t scratch(int64_t bytes) {
    const int64_t off = step_scratch;
    step_scratch += (bytes + 63) / 64 * 64;
    *scratch_bytes = std::max(*scratch_bytes, step_scratch);
    return off;
  }
  /// True when the value's bucket axis is its first non-unit dim (so its rows,
  /// counted over the dims before `inner_from`, shrink to a prefix).
  bool outer_is_bucket(ir::ValueId v, int64_t inner_from) const;
};

/// Fills `step` (fn, params, extent flags) for ctx.node(); an error for an
/// unsupported dtype/attr combination names the node.
using StepBuilder = Status (*)(BuildCtx& ctx, Step& step);

/// One row of the CPU kernel table.
struct KernelEntry {
  ir::OpKind kind;
  StepBuilder build;
};

/// The CPU backend's kernel table: every op kind the executor runs, with its builder.
const std::vector<KernelEntry>& cpu_kernel_table();

// ---- builders, one per op kind (defined in the steps_*.cpp files) ---------------------
Status build_activation(BuildCtx&, Step&);
Status build_binary(BuildCtx&, Step&);
Status build_compare(BuildCtx&, Step&);
Status build_where(BuildCtx&, Step&);
Status build_cast(BuildCtx&, Step&);
Status build_region(BuildCtx&, Step&);
Status build_matmul(BuildCtx&, Step&);
Status build_dequant_matmul(BuildCtx&, Step&);
Status build_fused_matmul(BuildCtx&, Step&);
Status build_fused_swiglu(BuildCtx&, Step&);
Status build_reduce(BuildCtx&, Step&);
Status build_softmax(BuildCtx&, Step&);
Status build_cumsum(BuildCtx&, Step&);
Status build_topk(BuildCtx&, Step&);
Status build_sample(BuildCtx&, Step&);
Status build_layer_norm(BuildCtx&, Step&);
Status build_rms_norm(BuildCtx&, Step&);
Status build_fused_residual_norm(BuildCtx&, Step&);
Status build_rope(BuildCtx&, Step&);
Status build_attention(BuildCtx&, Step&);
Status build_copy(BuildCtx&, Step&);  // Reshape (when not a view)
Status build_transpose(BuildCtx&, Step&);
Status build_narrow(BuildCtx&, Step&);
Status build_concat(BuildCtx&, Step&);
Status build_expand(BuildCtx&, Step&);
Status build_gather(BuildCtx&, Step&);
Status build_update_slice(BuildCtx&, Step&);
Status build_moe_route(BuildCtx&, Step&);
Status build_moe_ffn(BuildCtx&, Step&);
Status build_causal_conv1d(BuildCtx&, Step&);
Status build_gated_delta_rule(BuildCtx&, Step&);
Status build_conv(BuildCtx&, Step&);
Status build_conv_transpose(BuildCtx&, Step&);
Status build_group_norm(BuildCtx&, Step&);
Status build_interpolate(BuildCtx&, Step&);
Status build_window_partition(BuildCtx&, Step&);  // both directions
Status build_rel_pos_attention(BuildCtx&, Step&);
Status build_custom(BuildCtx&, Step&);
Status build_boundary(BuildCtx&, Step&);  // Input/Param/Constant/Handle: no work
Status build_all_reduce(BuildCtx&, Step&);
Status build_all_gather(BuildCtx&, Step&);

// ---- helpers shared by kernels ------------------------------------------------------

/// Error naming the node: "cpu: %3 (matmul 'x'): <what>".
template <typename... Args>
Error step_error(const BuildCtx& ctx, fmt::format_string<Args...> f, Args&&... args) {
  return Error::unsupported("cpu backend: {}: {}", ctx.graph->describe(ctx.id),
                            fmt::format(f, std::forward<Args>(args)...));
}

/// Runs body(begin, end) over [0, n) on the step context's pool.
/// Splits [0, n) into contiguous chunks of >= grain items and runs body(begin, end)
/// for each on the pool (inline when there is no pool or little work). Never allocates.
template <typename F>
void parallel_for(const StepCtx& ctx, int64_t n, int64_t grain, const F& body) {
  if (n <= 0) return;
  if (ctx.pool == nullptr || ctx.n_threads <= 1 || n <= grain) {
    body(int64_t{0}, n);
    return;
  }
  int64_t tasks = (n + grain - 1) / grain;
  if (tasks > 4 * ctx.n_threads) tasks = 4 * ctx.n_threads;
  ctx.pool->parallel_for(tasks, [&](int64_t t) { body(n * t / tasks, n * (t + 1) / tasks); });
}

inline float load_f(ir::DType t, const uint8_t* p, int64_t i) {
  switch (t) {
    case ir::DType::F32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case ir::DType::F16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return f16_bits_to_f32(v); }
    case ir::DType::BF16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return bf16_bits_to_f32(v); }
    case ir::DType::F64: { double v; std::memcpy(&v, p + 8 * i, 8); return static_cast<float>(v); }
    case ir::DType::I8: return static_cast<float>(reinterpret_cast<const int8_t*>(p)[i]);
    case ir::DType::U8: case ir::DType::Bool: return static_cast<float>(p[i]);
    case ir::DType::I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return static_cast<float>(v); }
    case ir::DType::I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<float>(v); }
    default: return 0.0f;
  }
}
inline double load_d(ir::DType t, const uint8_t* p, int64_t i) {
  switch (t) {
    case ir::DType::F64: { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
    case ir::DType::I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case ir::DType::I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    default: return load_f(t, p, i);
  }
}
inline int64_t load_i(ir::DType t, const uint8_t* p, int64_t i) {
  switch (t) {
    case ir::DType::I8: return reinterpret_cast<const int8_t*>(p)[i];
    case ir::DType::U8: case ir::DType::Bool: return p[i];
    case ir::DType::I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case ir::DType::I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return v; }
    default: return static_cast<int64_t>(load_d(t, p, i));
  }
}
void store_f(ir::DType t, uint8_t* p, int64_t i, float v);
void store_d(ir::DType t, uint8_t* p, int64_t i, double v);
void store_i(ir::DType t, uint8_t* p, int64_t i, int64_t v);

inline int64_t elem_size(ir::DType t) { return ir::dtype_info(t).bytes_per_block; }

using runtime::broadcast_strides;

/// Product of dims [from, to).
inline int64_t prod(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < d.size(); ++i) p *= d[i];
  return p;
}
inline int64_t prod(const std::vector<int64_t>& d) { return prod(d, 0, d.size()); }

}  // namespace rlx::cpu_backend
