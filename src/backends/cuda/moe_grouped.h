// The grouped form of moe_ffn (kernels_moe_grouped.cu), for runs of many tokens (a
// prefill): the (token, slot) pairs are sorted by expert on the device, and each
// expert's three products run once over all of its tokens as tensor-core GEMMs -- every
// expert's weights are read once per run instead of once per pair. The expert ids
// never reach the host, so a CUDA graph can hold the run.
//
// Arithmetic: Q8_0 / Q4_0 experts take the int8 products of launch_mmq (x and the
// hidden rows rounded to Q8_0 blocks, llama.cpp's vec-dot rule, as the per-pair
// kernels do); F16 and the other packed types moe_grouped_supported names take f16
// tensor-core tiles (x, W and the hidden rows rounded to f16, f32 accumulation: the
// arithmetic of a dense prefill's dequantize + cuBLAS path). The sum over a token's
// slots is taken in slot order, as launch_moe_ffn does, so a run's result does not
// depend on how the pairs were sorted.
// Kept out of cuda_kernels.h so that a change here rebuilds two files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_kernels.h"

namespace rlx::cuda_backend {

/// Fewest token rows a run of moe_ffn takes the grouped form for; fewer (decode) take
/// launch_moe_ffn, whose blocks each read one pair's expert rows.
inline constexpr int64_t kMoeGroupedMinRows = 16;

/// True when every expert matrix of `p` has a type (and shape: rows of whole 32-value
/// units) the grouped form multiplies: Q8_0 / Q4_0, or F16, Q4_1, Q5_0, Q5_1, Q4_K,
/// Q5_K, Q6_K, IQ4_NL, IQ4_XS.
bool moe_grouped_supported(const MoeFfnParams& p);

/// Bytes of device scratch launch_moe_ffn_grouped needs for p.rows token rows.
int64_t moe_grouped_work_bytes(const MoeFfnParams& p);

/// moe_ffn of p (p.h unused) in the grouped form; `work` holds moe_grouped_work_bytes(p)
/// bytes, 256-byte aligned.
void launch_moe_ffn_grouped(const MoeFfnParams& p, uint8_t* work, cudaStream_t s);

}  // namespace rlx::cuda_backend
