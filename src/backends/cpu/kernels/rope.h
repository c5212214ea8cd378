// Rotary position embedding on x[S, n_heads * head_dim] with int32 positions: adjacent
// pair ("normal", GPT-J/llama.cpp) or half-split ("neox", HF) layouts, partial rotary
// dims, frequencies from a caller's table (every scaling is folded into it).
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/kernel_context.h"

namespace rlx::cpu {

enum class RopeLayout : uint8_t {
  kNormal,  ///< rotates (x[2i], x[2i+1])
  kNeox,    ///< rotates (x[i], x[i + n_rot/2])
};

struct RopeParams {
  int64_t seq = 0;       ///< S rows
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t n_rot = 0;     ///< rotated dims per head (even, <= head_dim; 0 = head_dim); the tail is copied
  RopeLayout layout = RopeLayout::kNeox;
  /// n_rot/2 pair frequencies (radians per position), scaling already applied: the
  /// caller computes them once (ir::rope_inv_freq) and keeps them alive.
  const double* inv_freq = nullptr;
  float mscale = 1.0f;   ///< rotated pairs are multiplied by this (YaRN / LongRoPE attention factor)
  int64_t x_stride = 0;  ///< elements between rows of x (0 = n_heads * head_dim)
  int64_t y_stride = 0;  ///< elements between rows of y (0 = n_heads * head_dim)
};

/// y = rope(x) at positions pos[S]; y may equal x (in place).
void rope_f32(const KernelContext& ctx, const RopeParams& p, const float* x, const int32_t* pos, float* y);

}  // namespace rlx::cpu
