// Internal to the DequantMatMul kernel (qmatmul.cpp): the per-ISA fused dequant GEMV
// loops. qmatmul_scalar.cpp writes them as plain integer loops; qmatmul_simd.inc is
// compiled for AVX2 (maddubs) and AVX-512 VNNI (vpdpbusd) by qmatmul_avx2/avx512.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cpu/kernels/isa_kernels.h"

namespace rlx::cpu::detail {

/// Weight block types with an integer dot path, in table order.
enum class QKind : uint8_t {
  kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0, kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K,
  kIQ4_NL, kIQ4_XS, kTQ1_0, kTQ2_0, kIQ2_XXS, kIQ2_XS, kIQ2_S, kIQ3_XXS, kIQ3_S, kIQ1_S, kIQ1_M,
  kCount
};
inline constexpr int kQKindCount = static_cast<int>(QKind::kCount);

/// out[r * ldo + (j - n0)] = Σ_k W[j][k] · X_r[k] for r < m (1 <= m <= the table's rows for the kind),
/// j in [n0, n1).
/// Row j of W is `n_blocks` blocks at w + j * w_row_bytes; activation row r is the
/// quantized row (Q8_0, Q8_1 or Q8_K blocks, see qmatmul_vec_dot_type) at
/// act + r * act_row_bytes. Per block: an exact integer dot, then f32 scaling by the
/// block scales as llama.cpp's ggml_vec_dot_<type>_<vec_dot_type> does.
using QGemvFn = void (*)(int m, int64_t n_blocks, const uint8_t* w, size_t w_row_bytes, const uint8_t* act,
                         size_t act_row_bytes, int64_t n0, int64_t n1, float* out, int64_t ldo);

/// Bit of `kind` in QKernels::int_prefill.
constexpr uint32_t kind_bit(QKind kind) { return uint32_t{1} << static_cast<int>(kind); }

/// The K-quants: their GEMV loops beat the f32 panels at every row count on every ISA.
inline constexpr uint32_t kKQuantBits =
    kind_bit(QKind::kQ2_K) | kind_bit(QKind::kQ3_K) | kind_bit(QKind::kQ4_K) | kind_bit(QKind::kQ5_K) |
    kind_bit(QKind::kQ6_K);

/// The i-quant and ternary kinds, all with vector loops in every vector table.
inline constexpr uint32_t kIQuantVectorBits =
    kind_bit(QKind::kIQ4_NL) | kind_bit(QKind::kIQ4_XS) | kind_bit(QKind::kTQ1_0) | kind_bit(QKind::kTQ2_0) |
    kind_bit(QKind::kIQ2_XXS) | kind_bit(QKind::kIQ2_XS) | kind_bit(QKind::kIQ2_S) | kind_bit(QKind::kIQ3_XXS) |
    kind_bit(QKind::kIQ3_S) | kind_bit(QKind::kIQ1_S) | kind_bit(QKind::kIQ1_M);

/// Portable loops of the i-quant and ternary kinds (qmatmul_iquant.cpp): the scalar
/// table's.
void gemv_iq4_nl_rows(int m, int64_t nb, const uint8_t* w, size_t wrb, const uint8_t* act, size_t arb, int64_t n0,
                      int64_t n1, float* out, int64_t ldo);
#define RLX_DECLARE_RUNS_GEMV(name)                                                                            \
  void name(int m, int64_t nb, const uint8_t* w, size_t wrb, const uint8_t* act, size_t arb, int64_t n0, \
            int64_t n1, float* out, int64_t ldo);
RLX_DECLARE_RUNS_GEMV(gemv_iq4_xs_rows)
RLX_DECLARE_RUNS_GEMV(gemv_tq1_0_rows)
RLX_DECLARE_RUNS_GEMV(gemv_tq2_0_rows)
RLX_DECLARE_RUNS_GEMV(gemv_iq2_xxs_rows)
RLX_DECLARE_RUNS_GEMV(gemv_iq2_xs_rows)
RLX_DECLARE_RUNS_GEMV(gemv_iq2_s_rows)
RLX_DECLARE_RUNS_GEMV(gemv_iq3_xxs_rows)
RLX_DECLARE_RUNS_GEMV(gemv_iq3_s_rows)
RLX_DECLARE_RUNS_GEMV(gemv_iq1_s_rows)
RLX_DECLARE_RUNS_GEMV(gemv_iq1_m_rows)
#undef RLX_DECLARE_RUNS_GEMV

/// Quantizes k floats into activation blocks at dst (QKernels::quantize_q8_*); every ISA
/// gives the same bytes.
using QuantizeActFn = void (*)(const float* x, void* dst, int64_t k);

struct QKernels {
  IsaLevel isa;
  QGemvFn gemv[kQKindCount];
  /// Activation rows one call serves per weight decode (more amortise the unpacking;
  /// bounded by the vector registers of the ISA).
  int max_rows = 4;
  /// Rows per weight decode for one kind when it differs from max_rows (0: max_rows).
  uint8_t max_rows_of[kQKindCount] = {};
  /// Kinds (kind_bit) whose GEMV loops also serve prefill: faster than decoding the
  /// weights to f32 panels at every row count with this ISA (measured by
  /// rlx_kernels_qmatmul_bench's BM_QPrefill).
  uint32_t int_prefill = kKQuantBits;
  /// Activation quantization (every row of every quantized matmul): Q8_0 (Q4_0, Q5_0,
  /// Q8_0 weights), Q8_1 (Q4_1, Q5_1), Q8_K (K-quants; formats::quantize_activation_q8_k).
  QuantizeActFn quantize_q8_0 = nullptr;
  QuantizeActFn quantize_q8_1 = nullptr;
  QuantizeActFn quantize_q8_k = nullptr;
  /// m = 1 loops of their own for some kinds (nullptr: gemv[kind] serves m = 1 too);
  /// the driver takes them when gemv_one_row_zmm() is on, or for the kinds in
  /// one_row_everywhere unless RLX_CPU_GEMV_ZMM turns them off.
  QGemvFn gemv_one_row[kQKindCount] = {};
  /// Kinds whose one-row loop beats the shared one on every CPU (IQ4_XS: the 256-bit
  /// loop is bound by its table lookups and sign operations, 1 x 2048 x 8192 on a Zen 4
  /// VM: 303 us against 196-242 us for the 512-bit loop).
  uint32_t one_row_everywhere = 0;
};

extern const QKernels kQScalarKernels;
extern const QKernels kQAvx2Kernels;
extern const QKernels kQAvx512Kernels;  ///< needs AVX-512 F/BW/VL and VNNI

/// The table for resolve_isa(requested); the AVX-512 table only when the CPU has VNNI.
const QKernels& qkernels(IsaLevel requested);

}  // namespace rlx::cpu::detail
