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

/// The most keys a row of the whole-row form may see: its scores live in shared memory.
int64_t attention_f16_exact_max_keys();

/// True when rows split into chunks of keys serve the shape better than whole rows: few
/// rows (batch * S * n_heads under two waves of `sms` blocks) over more than 256 keys.
bool attention_f16_split(int64_t batch, int64_t S, int n_heads, int64_t T, int sms);
/// Bytes of scratch (`p.partial`) the split form needs for these sizes.
int64_t attention_f16_split_scratch_bytes(int64_t batch, int64_t S_full, int n_heads, int64_t T_full, int hd);

/// The attention of `p` (dt == F16 K / V and q, any out_dt, every mask, kv_len, q_pos,
/// GQA, softcap; head_dim even). `p.splits` == 1: whole rows, one 128-thread block per
/// (query row, head, batch item), two passes over shared memory; T must not exceed
/// attention_f16_exact_max_keys(). `p.splits` > 1: the split form over `p.partial`
/// (attention_f16_split_scratch_bytes) and `p.counters` (batch * S_full * n_heads, zero
/// before and after), three launches, no key limit; `p.decode_wave` (the multiprocessor
/// count) sizes its grid. Both score keys in the CPU's order and round the normalised
/// probabilities to f16. `decode` is not used.
void launch_attention_f16_exact(const AttentionParams& p, cudaStream_t s);

}  // namespace rlx::cuda_backend
