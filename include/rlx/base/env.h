// The one place RLX reads environment variables. They are read once, at first
// use, into `EnvConfig`; everything else takes its knobs from options structs.
//
//   RLX_LOG       log level: trace|debug|info|warn|error|off (default warn)
//   RLX_THREADS   worker threads for the CPU backend (default: all cores)
//   RLX_MAX_MEMORY_MB  cap on the memory a request may ask for (KV cache, arenas), in MiB,
//                 below what the machine has available (default: no cap)
//   RLX_IR_DUMP   folder to dump every compile stage's IR into (default: off)
//   RLX_CPU_ISA   cap the CPU kernels' instruction set: scalar|avx2|avx512|amx
//   RLX_CPU_AMX_MIN_ROWS  fewest activation rows a matmul needs to run on the AMX tiles
//                 (default 32; 1 puts every quantized matmul on them, f16 / bf16 ones
//                 from 5 rows: fewer take the GEMV)
//   RLX_CPU_BF16_DOT  which weights multiply 16 or more rows on AVX-512 BF16 dot
//                 products (x rounded to bf16) on CPUs without AMX: auto (default: bf16
//                 weights), all (f16 weights too, rounded to bf16: about 2x the f16
//                 prefill, but further from llama.cpp than the conformance tolerances),
//                 off (none: the f32 FMA loops)
//   RLX_CPU_GEMV_PREFETCH  bytes ahead of the weight stream that the CPU decode GEMVs
//                 prefetch into L2 (default: 4096 on Intel CPUs, 0 = off elsewhere)
//   RLX_CPU_GEMV_ZMM  0: one-row quantized GEMVs (decode) on the 256-bit loops shared
//                 with m > 1; 1: on their own 512-bit loops (Q4_K, Q6_K, Q8_0; default:
//                 1 on Intel CPUs, 0 elsewhere)
//   RLX_CPU_PROFILE 1: per-step times of CPU runs, summed per op and printed to stderr
//                 when the executable goes away (default off)
//   RLX_CACHE_DIR folder for AOT compile caches and built-in demo models
//   RLX_CPU_PREPACK  0: the CPU backend packs matmul weights per call instead of once
//                 (default 1; BackendOptions::prepack_weights)
//   RLX_CUDA_GRAPHS, RLX_CUDA_PDL, RLX_CUDA_GROUP_GEMV, RLX_CUDA_ATTN_TC, RLX_CUDA_INT8_PREFILL
//                 0 or off: the CUDA backend without graph replay, programmatic launch,
//                 grouped sibling GEMVs, tensor-core prefill attention, int8 tensor-core
//                 prefill products over Q8_0 / Q4_0 weights (default on; CudaOptions)
//   RLX_CUDA_ATTN_FLASH 0: tensor-core prefill attention (head_dim 64 / 128) on the
//                 one-stage kernel instead of the pipelined one of
//                 kernels_attention_flash.cu (default on; CudaOptions::attention_flash)
//   RLX_CUDA_HALF_ROWS 0: products of 2-32 rows over f16 / bf16 weights take the decode
//                 GEMV (up to 8 rows) and cuBLASLt instead of the tensor-core kernel of
//                 kernels_rows_mma.cu (default on; CudaOptions::half_rows)
//   RLX_CUDA_MMQ_PIPELINE 0: those int8 products all take the register-staged kernel, not
//                 the cp.async-pipelined one (default on; for comparing the two)
//   RLX_CUDA_FUSE the CUDA decode-step fusions to apply: "all" (default), "0" / "off" /
//                 "none", or a comma list of swiglu, rope_kv, gemv_rope_kv, norm_gemv
//   RLX_CUDA_PAGED_HANDLES 0: large CUDA handles (KV caches) are allocated whole instead of
//                 as reserved address ranges backed page by page (default on)
//   RLX_CUDA_PROFILE 1: per-step GPU times of CUDA runs (default off)
//   RLX_CUDA_REL_POS flash|gemm: the form of every CUDA rel_pos_attention (default: by
//                 grid size; for comparing the two)
//   RLX_CHECK_FINITE 1: the CPU and CUDA backends check every step's result and warn, once
//                 per executable, naming the first op whose result holds a NaN or an
//                 infinity (a debug mode: it reads every result once more)
//
// A value outside what a variable takes (RLX_THREADS=abc, RLX_LOG=loud) is ignored
// with a warning on stderr naming the variable and what it takes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlx {

struct EnvConfig {
  std::string log_level;
  int threads = 0;        ///< 0 = not set
  int64_t max_memory_mb = 0;  ///< RLX_MAX_MEMORY_MB (1..2^30); 0: not set
  std::string ir_dump_dir;
  std::string cpu_isa;
  int cpu_amx_min_rows = 32;  ///< RLX_CPU_AMX_MIN_ROWS (1..1e6; else the default)
  int cpu_vnni_min_rows = 16; ///< RLX_CPU_VNNI_MIN_ROWS (1..1e6; else the default)
  /// RLX_CPU_BF16_DOT: which weights prefill on AVX-512 BF16 dot products ("auto" /
  /// unset: bf16 weights; "all": f16 weights too, rounded to bf16; "off": none).
  std::string cpu_bf16_dot;
  int cpu_gemv_prefetch = -1;  ///< RLX_CPU_GEMV_PREFETCH (0..1 MiB, multiple of 64); -1: not set
  int cpu_gemv_zmm = -1;       ///< RLX_CPU_GEMV_ZMM ("0" or "1"); -1: not set
  int cpu_gemv_split = -1;     ///< RLX_CPU_GEMV_SPLIT (tasks a thread of a one-row GEMV, 1..64); -1: not set
  bool cpu_profile = false;    ///< RLX_CPU_PROFILE (true only for "1")
  std::string cache_dir;
  /// RLX_PACKED_CACHE_MB: most bytes (MiB) the CPU backend's folder of packed weights
  /// keeps (the least recently used files go first; 0: no folder). Default 16 GiB.
  int64_t packed_cache_mb = 16384;
  bool cpu_prepack = true;  ///< RLX_CPU_PREPACK (false only for "0")
  bool cuda_graphs = true;             ///< RLX_CUDA_GRAPHS (false for "0" or "off")
  bool cuda_programmatic_launch = true;  ///< RLX_CUDA_PDL
  bool cuda_group_gemvs = true;        ///< RLX_CUDA_GROUP_GEMV
  bool cuda_gemv_int8 = true;          ///< RLX_CUDA_GEMV_INT8
  bool cuda_int8_prefill = true;       ///< RLX_CUDA_INT8_PREFILL
  bool cuda_mmq_pipelined = true;      ///< RLX_CUDA_MMQ_PIPELINE (0: the register-staged int8 GEMM only)
  bool cuda_kqmma_staged = true;       ///< RLX_CUDA_KQMMA_STAGED (0: the register form of the K-quant int8 products)
  bool cuda_half_rows = true;          ///< RLX_CUDA_HALF_ROWS (0: 2-32 rows over f16 / bf16 weights through cuBLASLt)
  bool cuda_moe_grouped = true;        ///< RLX_CUDA_MOE_GROUPED (0: MoE prefill on the per-pair kernels)
  bool cuda_paged_handles = true;      ///< RLX_CUDA_PAGED_HANDLES (0: KV caches allocated whole)
  /// RLX_NCCL_LIBRARY: the NCCL library a CUDA tensor-parallel group loads (default
  /// "libnccl.so.2", found by the dynamic loader's search path).
  std::string nccl_library = "libnccl.so.2";
  std::string cuda_fuse = "all";       ///< RLX_CUDA_FUSE (unset: "all")
  bool cuda_attention_tensor_cores = true;  ///< RLX_CUDA_ATTN_TC
  bool cuda_attention_flash = true;   ///< RLX_CUDA_ATTN_FLASH (0: prefill attention on the one-stage tensor-core kernel)
  bool cuda_attention_rows = true;     ///< RLX_CUDA_ATTN_ROWS (0: many-streams decode on the general kernel)
  bool cuda_profile = false;           ///< RLX_CUDA_PROFILE (true only for "1")
  std::string cuda_rel_pos;            ///< RLX_CUDA_REL_POS: "flash", "gemm" or empty (by size)
  bool check_finite = false;           ///< RLX_CHECK_FINITE (true only for "1")
  /// One line per variable whose value was ignored ("RLX_THREADS='abc' is not ...").
  std::vector<std::string> warnings;
};

/// The environment as read once at first call.
const EnvConfig& env_config();

}  // namespace rlx
