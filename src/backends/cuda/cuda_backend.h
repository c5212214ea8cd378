// The CUDA backend: its capability table (the op kinds cuda_steps.cpp builds steps
// for) and its compiler from LIR to a CudaExecutable (one device arena, one stream,
// weights uploaded once, handles resident on the device). Registered as `cuda`
// (Device::cuda(n)) by builtin_backends.cpp when the build has RLX_HAVE_CUDA.
#pragma once

#include <memory>

#include "rlx/runtime/backend.h"

namespace rlx::cuda_backend {

class PinnedBuffer;  // cuda_util.h

/// Knobs of the CUDA backend that the generic BackendOptions does not carry.
struct CudaOptions {
  bool allow_tf32 = false;  ///< f32 GEMMs may use TF32 tensor cores (~1e-3 relative error)
  /// Replay runs as CUDA graphs: the second run with a given active extent captures the
  /// executable's whole launch sequence (input copies, kernels, output copies) and later
  /// runs replay it with one cudaGraphLaunch. Off: every run launches step by step
  /// (debugging, profilers that dislike graphs). A failed capture falls back to that.
  bool graphs = true;
  /// Times every step with CUDA events (runs step by step, no graphs) and prints, when
  /// the executable is destroyed, GPU time per op kind and host time per run to stderr.
  bool profile = false;
  /// Programmatic dependent launch on sm_90 and newer: each kernel may be scheduled while
  /// the one before it finishes (it waits on the device before touching that kernel's
  /// data; GEMVs prefetch their weights first). Process-wide: the last backend created
  /// sets it. RLX_CUDA_PDL=0 turns it off.
  bool programmatic_launch = true;
  /// Attention over 64 or more query rows (prefill) with head_dim 64, 128 or 256 runs on the
  /// tensor cores: q, k, v and the softmax weights rounded to f16 for the products, f32
  /// accumulation and softmax (~1e-3 relative error against f32 math). Off: the f32
  /// kernel. RLX_CUDA_ATTN_TC=0 turns it off.
  bool attention_tensor_cores = true;
  /// Tensor-core prefill attention with head_dim 64 or 128 takes the pipelined kernel
  /// (kernels_attention_flash.cu: K and V rounded to f16 once into scratch, then streamed
  /// through shared memory two tiles at a time); the same arithmetic as the one-stage
  /// kernel. RLX_CUDA_ATTN_FLASH=0 turns it off.
  bool attention_flash = true;
  /// Decode of more (sequence, query head) rows than one wave of blocks (a batched server
  /// step) takes the many-streams kernel: a block per KV head's group, sequence and split
  /// of at least 32 keys. Off: the general decode kernel's KV-group grid.
  /// RLX_CUDA_ATTN_ROWS=0 turns it off.
  bool attention_rows = true;
  /// Decode products over the same x (q/k/v, gate/up) share one launch: fused_linear
  /// launch groups (compile/fuse_linear.cpp). RLX_CUDA_GROUP_GEMV=0 turns it off.
  bool group_gemvs = true;
  /// The decode GEMV's fused forms the compile target offers fuse_linear: the SwiGLU
  /// epilogue (`fuse_swiglu`), rope and the KV-cache write in the epilogue of one-row
  /// q / k / v products (`fuse_gemv_rope_kv`, needs `fuse_rope_kv`), the RMS-norm
  /// prologue and the residual-add epilogue that feeds the next norm (`fuse_norm_gemv`;
  /// `norm_gemv` in RLX_CUDA_FUSE); and the step rewrite of
  /// rope(q), rope(k) and the remaining cache writes into one launch (`fuse_rope_kv`).
  /// RLX_CUDA_FUSE selects them (see env.h).
  bool fuse_swiglu = true;
  bool fuse_rope_kv = true;
  bool fuse_gemv_rope_kv = true;
  bool fuse_norm_gemv = true;
  /// Decode GEMVs (one row) over Q8_0 / Q4_0 / Q4_K / Q6_K weights quantize x to 8 bits
  /// per 16 elements and use integer dot products (~0.3 % relative error per product,
  /// as the CPU backend's quantized products; several times fewer instructions than
  /// f32 math on the unpacked quants). RLX_CUDA_GEMV_INT8=0 turns it off.
  bool gemv_int8_x = true;
  /// Products of several rows run on the int8 tensor cores with exact block products, as
  /// llama.cpp's CPU backend computes them: over Q8_0 from two rows (launch_rows_mma up to
  /// 32 rows, the int8 GEMM beyond) and Q4_0 past 8, against x as Q8_0 blocks; over the
  /// K-quants at 2-32 rows against x as Q8_K blocks (launch_kqmma). Off, the GEMV takes up
  /// to 8 rows and more are dequantized to f16 for cuBLAS. RLX_CUDA_INT8_PREFILL=0 turns it off.
  bool int8_prefill = true;
  /// Products of 2-32 rows (several streams, short prompts) over f16 / bf16 weights run
  /// on the tensor cores with W read once (launch_rows_mma, x rounded to W's type as
  /// cuBLASLt's path rounds it) instead of the multi-row GEMV and cuBLASLt; sibling
  /// products share a launch. RLX_CUDA_HALF_ROWS=0 turns it off.
  bool half_rows = true;
  /// Check mode: after every step a kernel scans its f32 / f16 / bf16 result; the first
  /// step (in stream order) that produced a NaN or an infinity is named in one warning
  /// per executable, as the CPU backend's check mode does. A debug mode: it reads every
  /// result once more. RLX_CHECK_FINITE=1 (or BackendOptions::check_finite) turns it on.
  bool check_finite = false;
};

/// The options `create(ordinal)` uses: the defaults, with RLX_CUDA_GRAPHS=0 turning
/// graphs off, RLX_CUDA_PROFILE=1 turning profiling on, RLX_CUDA_PDL=0 turning
/// programmatic launch off, RLX_CUDA_ATTN_TC=0 the tensor-core prefill attention,
/// RLX_CUDA_ATTN_FLASH=0 its pipelined kernel,
/// RLX_CUDA_ATTN_ROWS=0 the many-streams decode attention and
/// RLX_CUDA_GROUP_GEMV=0 grouped GEMVs, RLX_CUDA_GEMV_INT8=0 the 8-bit x of packed
/// decode GEMVs, RLX_CUDA_INT8_PREFILL=0 the int8 tensor-core prefill products, RLX_CUDA_HALF_ROWS=0
/// the few-row products over f16 / bf16 weights, and RLX_CUDA_FUSE the decode-step fusions
/// (read once, when the first backend is created). Fails on an RLX_CUDA_FUSE entry it
/// does not know.
CudaOptions default_cuda_options();

/// Applies an RLX_CUDA_FUSE list ("all", "0" / "off" / "none", or a comma list of
/// swiglu, rope_kv, gemv_rope_kv (implies rope_kv), norm_gemv) to `o`'s fusion switches; an unknown name is an error.
Status apply_fusion_list(const std::string& list, CudaOptions& o);

/// What the compiler needs to know of a CUDA backend with options `o` (no device needed):
/// regions within a kernel's argument and register budget, and the decode GEMV's fused
/// forms (fused_linear: norm prologue, SwiGLU, residual, rope and KV-cache epilogues,
/// launch groups) as far as the options' fusion switches allow.
compile::Target cuda_compile_target(const CudaOptions& o);

/// Number of CUDA devices visible to this process (0 when there is no driver or GPU).
int cuda_device_count();

class CudaBackend final : public Backend {
 public:
  /// Fails (error value) when device `ordinal` does not exist.
  static Expected<std::shared_ptr<CudaBackend>> create(int ordinal, CudaOptions options);
  /// With default_cuda_options() (check mode also on when `check_finite`); fails on a
  /// malformed RLX_CUDA_FUSE.
  static Expected<std::shared_ptr<CudaBackend>> create(int ordinal, bool check_finite = false);

  std::string name() const override { return "cuda"; }
  /// cuda_compile_target with this backend's options.
  compile::Target target() const override { return cuda_compile_target(options_); }
  const compile::OpSet& supported_ops() const override { return ops_; }
  Expected<std::unique_ptr<Executable>> compile(const ir::LirModule& lir,
                                                const compile::CompileOptions& options) override;
  Expected<std::unique_ptr<Executable>> compile_with_extent(const ir::LirModule& lir,
                                                            const compile::CompileOptions& options,
                                                            const ExtentInfo& extent) override;
  /// A group's ranks meet through NCCL (loaded at run time; RLX_NCCL_LIBRARY): one
  /// communicator per rank, every rank a CudaBackend of its own device.
  Expected<std::vector<std::shared_ptr<Communicator>>> create_communicators(
      const std::vector<std::shared_ptr<Backend>>& ranks) override;
  /// This GPU's name, memory and device-to-device copy bandwidth (device_limits.cpp).
  Expected<DeviceLimits> measure_device_limits() override;
  /// cuBLASLt's time for the product, through the plan builder the executables use.
  Expected<double> measure_gemm_ms(int64_t m, int64_t n, int64_t k, ir::DType out) override;
  /// Peak of the device memory held through the backend's buffers (all CUDA devices).
  int64_t peak_device_bytes() const override;
  int ordinal() const { return ordinal_; }

 private:
  CudaBackend(int ordinal, CudaOptions options, int sms);
  compile::OpSet ops_;
  int ordinal_ = 0;
  CudaOptions options_;
  int sms_ = 1;
  std::shared_ptr<PinnedBuffer> pinned_reserve_;  // a small pinned block held from start-up (see create)
};

/// The op kinds the CUDA steps cover.
compile::OpSet cuda_supported_ops();

}  // namespace rlx::cuda_backend
