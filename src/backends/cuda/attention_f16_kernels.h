// Attention over an f16 KV cache with llama.cpp's f16-cache numerics, the arithmetic of
// the CPU backend's attention_f16kv: q rounded to f16 (the attention step casts it),
// q.k summed in f32 and then scaled (and soft-capped), the softmax over the whole
// visible row (its sum in double), and the normalised probabilities rounded to f16
// before the weighted sum of V. The flash kernels' online softmax never holds a
// normalised probability, so it cannot round one; on a trained model the difference
// is visible in the logits (0.4 vs 1.6 max |d| against llama.cpp on stories260K-Q8_0
// with a 64-token f16 cache). Kept out of cuda_kernels.h so a change rebuilds two files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_kernels.h"

namespace rlx::cuda_backend {

/// The most keys a row may see: its scores live in shared memory.
int64_t attention_f16_exact_max_keys();

/// The attention of `p` (dt == F16 K / V and q, any out_dt, every mask, kv_len, q_pos,
/// GQA, softcap): one 128-thread block per (query row, head, batch item), two passes.
/// `p.splits`, `decode`, `partial` and `counters` are not used. T must not exceed
/// attention_f16_exact_max_keys().
void launch_attention_f16_exact(const AttentionParams& p, cudaStream_t s);

}  // namespace rlx::cuda_backend
