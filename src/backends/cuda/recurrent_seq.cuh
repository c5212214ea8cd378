// The seq input of the recurrent-state ops (causal_conv1d, gated_delta_rule) on the
// device: sequence b's (tokens seen before, real rows of this run), checked.
#pragma once

#include <cstdint>

namespace rlx::cuda_backend {

// Sequence b's (seen, len), or false (and the error word set) when they do not fit.
__device__ __forceinline__ bool seq_entry(const int32_t* seq, int64_t b, int64_t rows, int* err, int code,
                                          int32_t* seen, int32_t* len) {
  *seen = seq[2 * b];
  *len = seq[2 * b + 1];
  if (*seen < 0 || *len < 0 || *len > rows) {
    atomicExch(err, code);
    return false;
  }
  return true;
}

}  // namespace rlx::cuda_backend
