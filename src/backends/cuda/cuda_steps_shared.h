// What the CUDA step files share: dtype helpers, the parameter structs of the steps that
// the decode-step rewrites (cuda_step_fusions.cpp) read and take over, and the run
// functions steps are recognised by (a step's `fn`). Private to the CUDA backend.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backends/cuda/cuda_step.h"
#include "backends/cuda/mmq_kernels.h"
#include "backends/cuda/cuda_util.h"

namespace rlx::cuda_backend {

/// Bytes per element (per block for packed types) of `t`.
inline int64_t dt_size(DT t) { return ir::dtype_info(static_cast<ir::DType>(t)).bytes_per_block; }
/// The kernels' dtype code of an IR dtype (the same numbering, checked in cuda_steps.cpp).
inline DT to_dt(ir::DType t) { return static_cast<DT>(t); }
/// True for the float dtypes the kernels compute in (f32, f16, bf16).
inline bool float_dt(ir::DType t) { return t == ir::DType::F32 || t == ir::DType::F16 || t == ir::DType::BF16; }

/// True when two refs name the same bytes' start.
inline bool same_ref(const ValueRef& a, const ValueRef& b) {
  return a.kind == b.kind && a.index == b.index && a.offset == b.offset;
}
/// True when two refs share no byte.
inline bool disjoint_refs(const ValueRef& a, const ValueRef& b) {
  return a.kind != b.kind || a.index != b.index || a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset;
}

/// Runs cuBLASLt plan `pi` of the step: C = A . B (+ bias through the epilogue).
Status run_gemm(const Step& s, const RunCtx& ctx, int pi, const GemmDesc& g, const void* a, const void* b, void* c,
                const void* bias);
/// Launches a region kernel and reports its launch error as the step's (`role` names it).
Status launch_checked(const Step& s, const RegionParams& k, const RunCtx& ctx, const char* role);
using runtime::broadcast_strides;

/// UpdateSlice (a KV-cache write): update_fn.
struct UpdateParams {
  UpdateSliceParams k;
  bool src_bucket = false;
  int64_t total_bytes = 0;
};

Status update_fn(const Step& s, const RunCtx& ctx);

/// LayerNorm / RmsNorm, with a residual add when fused: norm_fn.
struct NormStepParams {
  NormParams k;
  bool residual = false, beta = false;
};

Status norm_fn(const Step& s, const RunCtx& ctx);

/// Rope with its inverse-frequency table on the device: rope_fn.
struct RopeStepParams {
  RopeParams k;
  std::shared_ptr<DeviceBuffer> table;  // inv_freq, uploaded at compile
};

Status rope_fn(const Step& s, const RunCtx& ctx);
/// rope_inv_freq(r) in device memory (the rope kernels' table), read-only: one copy per
/// device and table, shared by every step of every executable while any of them holds it.
Expected<std::shared_ptr<DeviceBuffer>> upload_rope_table(BuildCtx& ctx, const ir::RopeAttrs& r);

/// The parameters of a linear step (linear_fn, gemv_fn, mmq_fn): the GEMM or
/// GEMV, and the post-GEMM elementwise program act(c (+ bias)) or silu(gate) * up.
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
  int64_t wdq_off = 0;  // f16 dequantized weights (M > 8, types launch_mmq does not take)
  bool mmq = false;     // M > 8 over Q8_0 / Q4_0: x as Q8_0 blocks times the weights on the int8 tensor cores
  int64_t xq_off = 0, xd_off = 0;  // scratch: x's int8 quants and block scales (mmq, kqmma)
  bool kqmma = false;   // up to kKqMmaMaxRows rows over Q4_K / Q5_K / Q6_K (x as Q8_K blocks on the int8 tensor
                        // cores) or over Q8_0 / f16 / bf16 (q.w_dt; x as Q8_0 blocks or rounded to
                        // the weights' type, launch_rows_mma)
  int64_t xs_off = 0;   // scratch: x's sums per 32 values (kqmma)
  int kq_k_groups = 0;   // warps along K of kqmma's staged form
  bool w_const = false;  // W is a parameter or constant (kqmma: loaded before the wait on the kernels ahead)
  bool dqmma = false;   // up to kDqMmaMaxRows rows over other packed types: W decoded to f16 tiles in shared memory
  int dq_slices = 1;    // slices of K (dqmma)
  int64_t dq_work_off = 0;  // scratch: their partial sums
  int64_t dq_counters_off = 0;  // RunCtx::zeroed: one arrival counter per 32 weight rows
  int64_t split_row = 0;  // bytes per row in the split layout (packed_split types)
  // decode GEMV (M <= kMaxGemvM): the whole step in one kernel
  bool gemv = false;
  GemvParams gv;
};
/// A one-row product in one GEMV launch (LinearParams::gemv).
Status gemv_fn(const Step& s, const RunCtx& ctx);
/// out = act(x W^T (+ bias)) for a few rows over K-quant W (LinearParams::kqmma): x as
/// Q8_K blocks, the int8 tensor cores (launch_kqmma).
Status kqmma_fn(const Step& s, const RunCtx& ctx);
/// x (the step's input 0) made what the few-row product takes -- Q8_K blocks for K-quant
/// W, rounded to W's type for f16 / bf16 W -- into p's scratch, and in `k` the
/// launch_kqmma / launch_rows_mma parameters of a product over it (weights, output and
/// rows left to the caller).
Status prepare_kqmma_x(const Step& s, const LinearParams& p, const RunCtx& ctx, KqMmaParams& k);
/// launch_rows_mma for Q8_0 / f16 / bf16 weights (Q8_0 as stored: launch_mmq for each
/// part), else launch_kqmma (false: nothing launched).
bool launch_few_rows(const KqMmaParams& k, cudaStream_t stream);

/// The linear step of x . W (W^T when tb) for a node whose inputs 0 and 1 are x and W
/// (2: the up weights when swiglu, or the bias of a fused_matmul_bias_act), with the
/// result in `out_dtype` (default: the node's): a GEMV (gemv_fn) at decode sizes, else a
/// GEMM (linear_fn, mmq_fn).
Status build_linear(BuildCtx& ctx, Step& step, bool tb, bool swiglu, bool bias_act,
                    std::optional<ir::DType> out_dtype = std::nullopt);

/// Rows from which a product over packed `w` leaves the GEMV for the prefill paths: for
/// the K-quants with the int8 products on, kKqMmaMinRows (launch_kqmma: a tile of 16
/// rows costs what two do, and the GEMV reads W once per row group), the SwiGLU pair
/// too (as two products); else 9, or 6 for the types of the GEMV's 8-bit x that have a
/// few-row prefill kernel (the int8 tensor cores, the f16 tiles of kernels_dqmma.cu),
/// where the GEMV's integer work measured slower than those (swiglu: the GEMV's fused
/// pair, 9).
int64_t packed_prefill_from(DT w, bool gemv_int8_x, bool int8_prefill, bool swiglu);
/// True when a plain product of `rows` rows of K values over `w` takes a few-row
/// tensor-core path (LinearParams::kqmma) with these options: launch_kqmma for the
/// K-quants and launch_rows_mma for Q8_0 (both with int8_prefill), launch_rows_mma for
/// f16 / bf16 (with half_rows).
bool few_rows_take(DT w, int64_t rows, int64_t K, bool int8_prefill, bool half_rows);
/// The few-row product's warps along K (kqmma_k_groups, or rows_mma_k_groups).
int few_rows_k_groups(DT w, int64_t N, int64_t K, int sms);

/// Builders of the matmul steps (cuda_steps_matmul.cpp).
Status build_matmul(BuildCtx& ctx, Step& step);
Status build_dequant_matmul(BuildCtx& ctx, Step& step);
Status build_fused_matmul(BuildCtx& ctx, Step& step);
Status build_fused_swiglu(BuildCtx& ctx, Step& step);



/// Builders of the mixture-of-experts steps (cuda_steps_moe.cpp).
Status build_moe_route(BuildCtx& ctx, Step& step);
Status build_moe_ffn(BuildCtx& ctx, Step& step);

/// Builders of the recurrent-state steps (cuda_steps_recurrent.cpp).
Status build_causal_conv1d(BuildCtx& ctx, Step& step);
Status build_gated_delta_rule(BuildCtx& ctx, Step& step);

/// Builders of the spatial steps (cuda_steps_spatial.cpp).
Status build_conv(BuildCtx& ctx, Step& step);
Status build_conv_transpose(BuildCtx& ctx, Step& step);
Status build_group_norm(BuildCtx& ctx, Step& step);
Status build_interpolate(BuildCtx& ctx, Step& step);
Status build_window(BuildCtx& ctx, Step& step);  // window_partition and window_unpartition
Status build_rel_pos_attention(BuildCtx& ctx, Step& step);
/// all_reduce / all_gather (cuda_steps_collective.cpp): NCCL on the executable's stream.
Status build_all_reduce(BuildCtx& ctx, Step& step);
Status build_all_gather(BuildCtx& ctx, Step& step);

}  // namespace rlx::cuda_backend
