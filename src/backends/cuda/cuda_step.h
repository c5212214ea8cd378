// The CUDA executor's unit of work, as on the CPU (backends/cpu/cpu_step.h): a `Step`
// is one LIR node turned at compile time into a launch function, resolved device
// pointers and immutable kernel parameters; the run loop only calls step.fn(step, ctx)
// on the executable's stream. GEMM steps also own a cuBLASLt plan (per executable).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.h"
#include "rlx/base/status.h"
#include "rlx/ir/module.h"
#include "rlx/runtime/backend.h"
#include "runtime/executor_skeleton.h"

namespace rlx::cuda_backend {

/// Where an operand's bytes live (shared with the other executors; the CUDA backend has
/// no kScratch values: scratch is per step, RunCtx::scratch).
using runtime::StorageKind;
using runtime::ValueRef;

/// A matrix product C[M,N] = op(A)[M,K] . op(B)[K,N] (row-major), batched; what the
/// executable turns into a cuBLASLt plan.
struct GemmDesc {
  int64_t M = 0, N = 0, K = 0;
  bool ta = false, tb = false;
  DT ab_dt = DT::F32, c_dt = DT::F32;
  int64_t batch = 1;
  bool strided = true;                     ///< one stride per operand over the batch
  int64_t a_bstride = 0, b_bstride = 0;    ///< elements (strided mode)
  std::vector<int64_t> a_offsets, b_offsets;  ///< elements per batch (loop mode)
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  bool tf32 = false;
};

/// A cuBLASLt plan: descriptors + the chosen algorithm (owned by one executable).
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  LtPlan(LtPlan&& o) noexcept { *this = std::move(o); }
  LtPlan& operator=(LtPlan&& o) noexcept;
  ~LtPlan();
};

/// Builds the plan for `g` (heuristic algorithm for a workspace of `ws_bytes`).
Expected<LtPlan> make_lt_plan(cublasLtHandle_t lt, const GemmDesc& g, size_t ws_bytes, const std::string& what);

class NcclCommunicator;  // nccl.h

/// Run-time context handed to every step.
struct RunCtx {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  uint8_t* scratch = nullptr;
  uint8_t* zeroed = nullptr;  ///< per-executable words that are zero between runs (counters)
  int* err = nullptr;  ///< device word kernels set to (step index + 1) on bad indices
  bool extent_on = false;
  int64_t actual = 0, upper = 0;
  const std::vector<std::shared_ptr<const LtPlan>>* plans = nullptr;
  const NcclCommunicator* nccl = nullptr;  ///< the tensor-parallel group's (null outside one)
};

struct Step;
using StepFn = Status (*)(const Step&, const RunCtx&);

struct Step {
  StepFn fn = nullptr;
  ir::ValueId node = ir::kNoValue;
  int index = 0;  ///< position in the step list (error codes)
  std::vector<ValueRef> in;
  ValueRef out;
  std::vector<const uint8_t*> in_ptr;
  uint8_t* out_ptr = nullptr;
  std::shared_ptr<const void> params;
  std::shared_ptr<const std::string> what;  ///< "%3 (rms_norm 'blk.0.attn_norm')"
  std::vector<const GemmDesc*> gemms;      ///< descs needing a plan (in params)
  int plan = -1;                            ///< first of gemms.size() plans in RunCtx::plans
  bool extent_ok = true;                    ///< false: cannot run with a restricted extent
  /// Bit i: input i is a packed weight this step can also read in the split device
  /// layout (see packed_split); `split` (set by the executable): it is stored split.
  uint8_t split_inputs = 0;
  bool split = false;

  template <typename P>
  const P& p() const { return *static_cast<const P*>(params.get()); }
};

/// What a builder sees: the graph (as on the CPU) and the CUDA options and memory
/// reservations.
struct BuildCtx : runtime::StepBuildGraph {
  int64_t* scratch_bytes = nullptr;
  int64_t* zeroed_bytes = nullptr;
  bool allow_tf32 = false;
  bool attention_tc = false;  ///< CudaOptions::attention_tensor_cores
  bool attention_flash = false;  ///< CudaOptions::attention_flash
  bool attention_rows = false;  ///< CudaOptions::attention_rows
  bool gemv_int8_x = false;   ///< CudaOptions::gemv_int8_x
  bool int8_prefill = false;  ///< CudaOptions::int8_prefill
  bool half_rows = false;     ///< CudaOptions::half_rows
  int sms = 1;

  int64_t scratch(int64_t bytes) {
    const int64_t off = *scratch_bytes;
    *scratch_bytes += (bytes + 255) / 256 * 256;
    return off;
  }
  /// Device memory zeroed once when the executable is allocated; kernels that use it
  /// leave it at zero when they finish (e.g. split counters).
  int64_t zeroed(int64_t bytes) {
    const int64_t off = *zeroed_bytes;
    *zeroed_bytes += (bytes + 255) / 256 * 256;
    return off;
  }
};

using StepBuilder = Status (*)(BuildCtx& ctx, Step& step);

/// Builder for `kind`, or null when the CUDA backend does not run it.
StepBuilder cuda_builder(ir::OpKind kind);

/// fused_linear (cuda_steps_linear.cpp): one GEMV launch with the node's prologue and
/// epilogues; merge_linear_groups then makes each launch group of consecutive
/// fused_linear steps one launch (run after decide_split).
Status build_fused_linear(BuildCtx& ctx, Step& step);
Status merge_linear_groups(std::vector<Step>& steps, const ir::Graph& g);
/// What the fused GEMV kernel takes (null, or why not): one fused_linear (with the 8-bit
/// x path on or off; plain products of a few rows over K-quants, grouped into one int8
/// tensor-core launch, and over Q8_0, when int8_prefill, and over f16 / bf16 weights when
/// half_rows),
/// and the parts of one launch. The compile target's checks add the options' switches
/// (cuda_compile_target).
const char* fused_linear_kernel_check(const compile::FusedLinearQuery& q, bool int8_x, bool int8_prefill,
                                      bool half_rows);
const char* fused_linear_group_kernel_check(const std::vector<compile::FusedLinearQuery>& qs);

/// rope(q), rope(k), update_slice(k cache, rope k) and update_slice(v cache, v) (or the
/// first three, when the v product wrote its cache rows itself) -> one launch
/// (launch_rope_kv). Run after the split layout is decided; renumbers the steps.
/// `outputs`: values the executable copies out (never fused away).
void fuse_rope_kv_steps(std::vector<Step>& steps, const ir::Graph& g, const std::vector<ir::ValueId>& outputs);

/// Bytes of one row of K elements of packed type `t` in the split device layout.
int64_t split_row_bytes(ir::DType t, int64_t K);

/// "cuda backend: %3 (matmul 'x'): <what>" as an unsupported-op error.
template <typename... Args>
Error step_error(const BuildCtx& ctx, fmt::format_string<Args...> f, Args&&... args) {
  return Error::unsupported("cuda backend: {}: {}", ctx.graph->describe(ctx.id), fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace rlx::cuda_backend
