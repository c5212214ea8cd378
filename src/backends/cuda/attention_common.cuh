// Device helpers shared by the CUDA attention kernels (kernels_attention.cu,
// kernels_attention_f16.cu): which keys a query row sees.
#pragma once

#include "backends/cuda/cuda_kernels.h"

namespace rlx::cuda_backend {

// Keys [jb, je) that the query at position `pos` of batch item b sees: the mask
// (1 causal, 2 sliding window, 3 local: |pos - key| <= window), then kv_len[b].
__device__ __forceinline__ void visible_keys(const AttentionParams& p, int64_t b, int64_t pos, int64_t& jb,
                                             int64_t& je) {
  jb = 0;
  je = p.T;
  if (p.mask == 1 || p.mask == 2) je = pos + 1 < p.T ? pos + 1 : p.T;
  if (p.mask == 2) jb = pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
  if (p.mask == 3) {
    jb = pos - p.window > 0 ? pos - p.window : 0;
    je = pos + p.window + 1 < p.T ? pos + p.window + 1 : p.T;
  }
  if (p.kv_len) {
    const int64_t len = p.kv_len[b];
    if (len < je) je = len > 0 ? len : 0;
  }
  if (je < jb) je = jb;
}

}  // namespace rlx::cuda_backend
