// Internal: the table of per-ISA inner loops (GEMM micro-tiles, GEMV rows, vector
// math rows, norm rows, attention row groups). One table per ISA is compiled from
// isa_impl.inc; the public kernels pick a table with isa_kernels(level).
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/kernel_context.h"

namespace rlx::cpu::detail {

/// How far ahead of the weight stream being read the decode GEMVs (quantized and
/// f16/bf16/f32 panels) prefetch into L2, in bytes (RLX_CPU_GEMV_PREFETCH, else measured
/// on the process's first decode GEMVs among 0, 1024 and 4096 B, gemv_tuning.h; until
/// then 4096 on Intel CPUs, 0 elsewhere). On a Sapphire Rapids host (2 threads) a 4 KiB
/// lead lifted Q8_0 decode from 12-13 to 16-19 tok/s: the loops' own near prefetches
/// into L1 keep too few lines in flight to cover DRAM latency, and the hardware streamer
/// stops at every 4 KiB page. On a Zen 4 VM it cost Q8_0 decode ~13 % (Q4_K_M
/// unchanged).
int gemv_far_prefetch();

/// Whether one-row quantized GEMVs (decode) take their own 512-bit loops (Q4_K, Q6_K,
/// Q8_0; QKernels::gemv_one_row) instead of the loops shared with m > 1
/// (RLX_CPU_GEMV_ZMM, else measured once per process before any real call,
/// gemv_tuning.cpp: Q4_K_M decode gained ~25 % with them on a Sapphire Rapids host; on a
/// Zen 4 VM, which runs 512-bit operations as two 256-bit halves, they gained nothing;
/// on a Zen 5 VM they run 1.2-1.7x as fast as the shared loops from L2).
bool gemv_one_row_zmm();

/// What a GEMM micro-tile does with its accumulators (see gemm.h for the formula
/// C = act(A·B + bias) + beta·C). `first`/`last` mark the first/last K block; the
/// driver only splits K when act is identity or beta is 0.
struct TileEpilogue {
  const float* bias = nullptr;  ///< already offset to the tile's first column
  Activation act = Activation::kIdentity;
  float beta = 0.0f;
  bool first = true;
  bool last = true;
};

/// A group of up to kAttnRows query rows of one head against keys [lo[r], hi[r]).
struct AttnRows {
  int nq = 0;
  int64_t head_dim = 0;
  const float* q = nullptr;
  int64_t q_stride = 0;
  const float* k = nullptr;  ///< key row 0 of this kv head
  int64_t k_stride = 0;
  const float* v = nullptr;
  int64_t v_stride = 0;
  const int64_t* lo = nullptr;
  const int64_t* hi = nullptr;
  float scale = 1.0f;
  float softcap = 0.0f;
  float* o = nullptr;  ///< normalised output rows
  int64_t o_stride = 0;
};
inline constexpr int kAttnRows = 4;

/// Every head of one query row against keys [lo, hi) of a cache whose rows hold all KV
/// heads, read row by row (decode over long contexts; see attn_decode_rows in
/// isa_impl.inc). The softmax state per head h lives at state + h * (head_dim + 2):
/// head_dim unnormalised output values, then the running max and sum.
struct AttnDecodeRows {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const float* q = nullptr;  ///< [n_heads][head_dim]
  const float* k = nullptr;  ///< key row 0: n_kv_heads * head_dim floats per row
  int64_t k_stride = 0;
  const float* v = nullptr;
  int64_t v_stride = 0;
  int64_t lo = 0, hi = 0;
  float scale = 1.0f;
  float softcap = 0.0f;
  float* state = nullptr;   ///< written from scratch (keys [lo, hi) only)
  float* scores = nullptr;  ///< scratch of n_heads * kAttnDecodeBlock floats
};
inline constexpr int kAttnDecodeBlock = 32;

struct IsaKernels {
  IsaLevel isa;
  int gemm_mr;  ///< rows of a micro-tile
  int gemm_nr;  ///< columns of a micro-tile = width of a packed B panel
  /// C tile [mr, nr_valid] (ldc) from packed A [kc][gemm_mr] and a B panel [kc][gemm_nr].
  void (*gemm_tile)(int mr, int64_t kc, const float* a_packed, const void* b_panel, WeightType wt,
                    float* c, int64_t ldc, int nr_valid, const TileEpilogue& ep);
  /// out[i][n - n0] = sum_k a[i][k] * b[n][k] for i < m (m <= 4), n in [n0, n1).
  void (*gemv_nk)(int m, int64_t k, const float* a, int64_t lda, const void* b, WeightType wt,
                  int64_t ldb, int64_t n0, int64_t n1, float* out, int64_t ldo);
  /// out[i][n - n0] = sum_k a[i][k] * b[k][n] for i < m (m <= 4), n in [n0, n1).
  void (*gemv_kn)(int m, int64_t k, const float* a, int64_t lda, const void* b, WeightType wt,
                  int64_t ldb, int64_t n0, int64_t n1, float* out, int64_t ldo);
  /// c[i] = act(acc[i] + bias[i]) + beta * c[i]  (bias may be null; acc may alias c iff beta == 0).
  void (*epilogue_row)(const float* acc, const float* bias, Activation act, float beta, float* c,
                       int64_t n);
  void (*unary)(UnaryOp op, const float* x, float* y, int64_t n);
  void (*binary)(BinaryOp op, const float* a, const float* b, float* y, int64_t n);
  void (*binary_bs)(BinaryOp op, const float* a, float b, float* y, int64_t n);
  void (*binary_as)(BinaryOp op, float a, const float* b, float* y, int64_t n);
  /// kSum / kMax / kMin over n contiguous floats (kMean is kSum; caller divides).
  float (*reduce_row)(ReduceOp op, const float* x, int64_t n);
  void (*softmax_row)(const float* x, float* y, int64_t n);
  /// If r: s = x + r is written to sum_out and normalised; else x is normalised. w may be null.
  void (*rms_norm_row)(const float* x, const float* r, float* sum_out, const float* w, float* y,
                       int64_t n, float eps);
  void (*layer_norm_row)(const float* x, const float* r, float* sum_out, const float* gamma,
                         const float* beta, float* y, int64_t n, float eps);
  void (*attn_rows)(const AttnRows& a);
  void (*attn_decode_rows)(const AttnDecodeRows& a);
  void (*f16_to_f32)(const uint16_t* x, float* y, int64_t n);
  void (*bf16_to_f32)(const uint16_t* x, float* y, int64_t n);
  /// GEMV over packed B panels (pack_b layout: panel p is [k][gemm_nr] at element
  /// p * k * gemm_nr): out[i][(p - p0) * gemm_nr + j] = sum_k a[i][k] * panel_p[k][j]
  /// for i < m (m <= 4), panels [p0, p1), all gemm_nr columns (padding included).
  void (*gemv_panels)(int m, int64_t k, const float* a, int64_t lda, const void* panels, WeightType wt,
                      int64_t p0, int64_t p1, float* out, int64_t ldo);
  /// y = x rounded to f16 / bf16 (nearest even) and back to f32; y may be x.
  void (*round_to_f16)(const float* x, float* y, int64_t n);
  void (*round_to_bf16)(const float* x, float* y, int64_t n);
};

extern const IsaKernels kScalarKernels;
extern const IsaKernels kAvx2Kernels;
extern const IsaKernels kAvx512Kernels;

/// The table for resolve_isa(requested).
const IsaKernels& isa_kernels(IsaLevel requested);

}  // namespace rlx::cpu::detail
