// Matmuls of many activation rows on AVX-512 BF16 dot products (vdpbf16ps) against gemm's
// pre-packed f16 / bf16 panels, for CPUs with AVX512_BF16 and no AMX tiles (AMD Zen 4 and
// later). One vdpbf16ps multiplies 32 bf16 pairs, twice the products of an f32 FMA at
// the same issue rate (both 2 a cycle on this project's Zen VM), but it rounds both
// operands to bf16 (8 significant bits):
// - bf16 weights take it by default, x rounded to bf16 (nearest even): the numerics of
//   llama.cpp's BF16 matmuls (its vec_dot_type for BF16 is BF16);
// - f16 weights only when RLX_CPU_BF16_DOT=all asks for them to be rounded to bf16 as
//   well. llama.cpp keeps f16 weights exact and rounds x to f16, and the conformance
//   data shows the difference: stories260K-Q8_0 (its ffn_down is F16) moves 1.48 from
//   llama.cpp's logits this way, against a tolerance of 0.68. A split into high and low
//   bf16 parts (exact to ~2^-16, as the AMX path does) needs two or three products a
//   term and cannot beat the f32 FMA loops at equal issue rates.
// Layout: rows in passes of kBf16DotRowsPerPass, converted once per pass into tiles of
// kBf16DotTileRows rows ([pair][row] 32-bit words, a pair = x[2p], x[2p+1]); each
// 32-column panel's K range converted per pass into [pair][32 columns] bf16 pairs.
#pragma once

#include <cstdint>
#include <string>

#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/kernel_context.h"

namespace rlx::cpu {

/// Rows of one register tile (2 x 14 accumulators of 16 lanes: 14 rows x 32 columns).
inline constexpr int kBf16DotTileRows = 14;
/// Activation rows converted and swept per pass.
inline constexpr int64_t kBf16DotRowsPerPass = 32 * kBf16DotTileRows;
/// Fewest activation rows gemm_prepacked sends here (fewer: the f32 loops, whose weight
/// conversion is cheaper per row).
inline constexpr int64_t kBf16DotMinRows = 16;

/// Which f16 / bf16 weights take the bf16 dot products (RLX_CPU_BF16_DOT).
enum class Bf16DotPolicy : uint8_t {
  kOff,   ///< never: f32 FMA loops for every weight type ("off")
  kBf16,  ///< bf16 weights (the default, "auto")
  kAll,   ///< also f16 weights, rounded to bf16 ("all")
};

/// The policy of RLX_CPU_BF16_DOT (read once).
Bf16DotPolicy bf16_dot_policy();

/// True when the kernel runs under `isa`: resolve_isa(isa) is AVX-512 (AMX hosts keep
/// these matmuls on their tiles unless RLX_CPU_ISA caps them) and the CPU has AVX512_BF16.
bool bf16_dot_usable(IsaLevel isa);

/// True when gemm_prepacked should send m rows against `b` here under `isa` and
/// `policy`: bf16_dot_usable, m >= kBf16DotMinRows, b packed for AVX-512 (32-column
/// panels) and b's weight type allowed by the policy.
bool bf16_dot_takes(IsaLevel isa, Bf16DotPolicy policy, int64_t m, const PackedB& b);

/// C = act(A·B + bias) + beta·C with A rounded to bf16 and B (f16 or bf16 panels of
/// pack_b, nr 32; f16 rounded to bf16), products summed in f32.
/// p must be resolved (lda, ldc set; p.k, p.n those of b). Requires
/// bf16_dot_usable(ctx.isa); scratch: the calling thread's kShared (A tiles), each
/// worker's kPackB (B pairs) and kPackA (f32 sums).
void bf16_dot_gemm_prepacked(const KernelContext& ctx, const GemmParams& p, const float* a, const PackedB& b,
                             float* c);

/// Counts one many-row matmul against f16 / bf16 panels outside the AMX tiles (for
/// describe_bf16_dot): on the bf16 dot products or on the f32 loops.
void count_half_matmul(bool on_bf16_dot);

/// One line for benchmarks: the policy, whether the CPU has the instructions, and how
/// many of this process's many-row f16 / bf16 matmuls took them so far.
std::string describe_bf16_dot();

/// Multiply-add FLOPs of one 512-bit VDPBF16PS (16 lanes x 2 products).
inline constexpr double kBf16DotFlopsPerOp = 64;

/// The peak probe of the benchmarks: `iters` rounds of 16 independent vdpbf16ps chains
/// on the calling thread (no memory traffic). Requires bf16_dot_usable(IsaLevel::kAvx512).
void bf16_dot_probe(int64_t iters);

/// True when gemm() (weights packed per call) takes the bf16 dot products for m rows of
/// `b_type` weights under `isa`: the same rule as bf16_dot_takes, so a product's numerics
/// do not depend on whether its weights were packed ahead.
bool bf16_dot_takes_unpacked(IsaLevel isa, Bf16DotPolicy policy, int64_t m, WeightType b_type);

}  // namespace rlx::cpu
