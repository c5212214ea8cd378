// f32 GEMM / GEMV kernels with f32, f16 or bf16 weights: C = act(A·B + bias) + beta·C.
// Blocked and packed with SIMD micro-tiles (AVX-512 14x32, AVX2 6x16); M <= 4 takes a
// bandwidth-bound GEMV path; weights can be packed once (pack_b) and reused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "backends/cpu/kernels/kernel_context.h"
#include "rlx/base/aligned_buffer.h"

namespace rlx::cpu {

/// Shapes and epilogue of one GEMM:  C[M,N] = act(A[M,K] · B + bias[N]) + beta · C.
/// B is [N, K] (nn.Linear weight layout, `b_transposed`, the common case) or [K, N].
/// Strides are in elements; 0 means dense (lda = K, ldb = K or N, ldc = N).
/// `beta` adds the old C *after* the activation (e.g. a residual add); beta == 0 never
/// reads C, so C may hold garbage (NaN) then.
struct GemmParams {
  int64_t m = 0, n = 0, k = 0;
  bool b_transposed = true;
  int64_t lda = 0, ldb = 0, ldc = 0;
  const float* bias = nullptr;  ///< [N] or null
  Activation act = Activation::kIdentity;
  float beta = 0.0f;
  /// Keep x in f32: never the BF16 dot products, which round x to bf16 (for callers that
  /// promise f32 activations whatever the row count, e.g. dequant_matmul).
  bool keep_x_f32 = false;
};

/// A weight matrix B packed once into the panel layout the micro-tiles stream:
/// ceil(N / nr) panels, each [K][nr] in B's own dtype, zero-padded in N. Made by
/// pack_b(); move-only; safe to share read-only between threads and executables.
class PackedB {
 public:
  PackedB() = default;
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  WeightType type() const { return type_; }
  IsaLevel isa() const { return isa_; }
  int nr() const { return nr_; }
  const uint8_t* data() const { return data_; }
  size_t bytes() const { return bytes_; }

  /// A packing over `bytes` already in pack_b's layout for `ctx` (e.g. mapped from a
  /// file an earlier pack_b's bytes were written to); nothing is copied and the caller
  /// keeps them alive. `bytes` must be 64-byte aligned and packed_b_bytes() long.
  static PackedB view(const KernelContext& ctx, int64_t k, int64_t n, WeightType type, const void* bytes);

 private:
  friend PackedB pack_b(const KernelContext&, int64_t, int64_t, bool, int64_t, const void*, WeightType, size_t,
                        const std::function<void(int64_t)>&);
  friend PackedB pack_b_into(const KernelContext&, int64_t, int64_t, bool, int64_t, const void*, WeightType, void*,
                             size_t, const std::function<void(int64_t)>&);
  // The fields of a packing for ISA table `isa` (nr columns a panel), no panels yet.
  static PackedB header(int64_t k, int64_t n, WeightType type, IsaLevel isa, int nr);
  AlignedBuffer owned_;  // pack_b's storage; empty for pack_b_into (the caller's memory)
  const uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
  int64_t k_ = 0, n_ = 0;
  WeightType type_ = WeightType::kF32;
  IsaLevel isa_ = IsaLevel::kScalar;
  int nr_ = 1;
};

/// GEMM with weights B of type `b_type` (f32, or f16/bf16 bits as uint16_t),
/// converted to f32 on the fly. Uses resolve_isa(ctx.isa) and ctx.pool.
void gemm(const KernelContext& ctx, const GemmParams& p, const float* a, const void* b,
          WeightType b_type, float* c);

/// Convenience: f32 weights.
inline void gemm_f32(const KernelContext& ctx, const GemmParams& p, const float* a, const float* b,
                     float* c) {
  gemm(ctx, p, a, b, WeightType::kF32, c);
}

/// Packs B ([N,K] if b_transposed else [K,N], row stride ldb or 0 for dense) for the
/// micro-tile of resolve_isa(ctx.isa). Keeps the dtype (f16 stays 2 bytes/element).
PackedB pack_b(const KernelContext& ctx, int64_t k, int64_t n, bool b_transposed, int64_t ldb,
               const void* b, WeightType b_type);
/// The same, packing about `step_bytes` of B at a time in column order and calling
/// `done(n_done)` after each step with the number of B's columns (rows of an [N,K] B)
/// packed so far, e.g. to release the pages of a file-mapped B as they are consumed.
PackedB pack_b(const KernelContext& ctx, int64_t k, int64_t n, bool b_transposed, int64_t ldb,
               const void* b, WeightType b_type, size_t step_bytes, const std::function<void(int64_t)>& done);

/// Bytes pack_b_into needs for a k x n B of `b_type` (resolve_isa(ctx.isa)'s panels).
size_t packed_b_bytes(const KernelContext& ctx, int64_t k, int64_t n, WeightType b_type);
/// pack_b into caller memory (packed_b_bytes bytes at `dst`, 64-byte aligned, e.g. thread
/// scratch) without allocating: the result reads `dst`, does not own it, and is valid
/// while `dst` holds the panels. For B that changes every call (attention's K and V).
PackedB pack_b_into(const KernelContext& ctx, int64_t k, int64_t n, bool b_transposed, int64_t ldb, const void* b,
                    WeightType b_type, void* dst);
/// The same, about `step_bytes` of B at a time, calling `done(n_done)` after each step
/// as pack_b does (e.g. packing into a file mapping while releasing the source's pages).
PackedB pack_b_into(const KernelContext& ctx, int64_t k, int64_t n, bool b_transposed, int64_t ldb, const void* b,
                    WeightType b_type, void* dst, size_t step_bytes, const std::function<void(int64_t)>& done);

/// GEMM against a pre-packed B (p.b_transposed and p.ldb are ignored; p.k and p.n must
/// match the packing). Runs with the ISA the weights were packed for. M <= kGemvMaxM
/// (decode) streams each packed panel once over all of K, splitting N across threads.
/// Many rows against f16 / bf16 panels go to the AMX tiles (amx_matmul.h) or, for bf16
/// weights, to the AVX-512 BF16 dot products (bf16_dot_matmul.h) where those take them;
/// otherwise the f32 micro-tiles.
void gemm_prepacked(const KernelContext& ctx, const GemmParams& p, const float* a, const PackedB& b,
                    float* c);

/// `batch` independent GEMMs: A_i = a + i*stride_a, B_i = b + i*stride_b (elements of
/// b_type), C_i = c + i*stride_c. A stride of 0 broadcasts that operand. Parallel over
/// the batch when it is large enough, otherwise inside each GEMM.
void batched_gemm(const KernelContext& ctx, const GemmParams& p, int64_t batch, const float* a,
                  int64_t stride_a, const void* b, WeightType b_type, int64_t stride_b, float* c,
                  int64_t stride_c);

/// Largest M served by the GEMV path of gemm() (unpacked B).
inline constexpr int64_t kGemvMaxM = 4;

}  // namespace rlx::cpu
