// Rotary position embedding on x[S, n_heads * head_dim] with int32 positions: adjacent
// pair ("normal", GPT-J/llama.cpp) or half-split ("neox", HF) layouts, partial rotary
// dims, and none / linear / llama3 frequency scaling.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/kernel_context.h"

namespace rlx::cpu {

enum class RopeLayout : uint8_t {
  kNormal,  ///< rotates (x[2i], x[2i+1])
  kNeox,    ///< rotates (x[i], x[i + n_rot/2])
};

enum class RopeScaling : uint8_t {
  kNone,
  kLinear,  ///< positions divided by `factor` (all frequencies / factor)
  kLlama3,  ///< Llama 3.1 wavelength-dependent scaling (HF `_compute_llama3_parameters`)
};

struct RopeParams {
  int64_t seq = 0;       ///< S rows
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t n_rot = 0;     ///< rotated dims per head (even, <= head_dim; 0 = head_dim); the tail is copied
  float theta = 10000.0f;
  RopeLayout layout = RopeLayout::kNeox;
  RopeScaling scaling = RopeScaling::kNone;
  float factor = 1.0f;            ///< linear and llama3
  float low_freq_factor = 1.0f;   ///< llama3
  float high_freq_factor = 4.0f;  ///< llama3
  int64_t original_context = 8192;  ///< llama3 original_max_position_embeddings
  int64_t x_stride = 0;  ///< elements between rows of x (0 = n_heads * head_dim)
  int64_t y_stride = 0;  ///< elements between rows of y (0 = n_heads * head_dim)
};

/// inv_freq[i] for i < n_rot/2: theta^(-2i/n_rot), then scaled per p.scaling.
void rope_inv_freq(const RopeParams& p, float* inv_freq);

/// y = rope(x) at positions pos[S]; y may equal x (in place).
void rope_f32(const KernelContext& ctx, const RopeParams& p, const float* x, const int32_t* pos, float* y);

}  // namespace rlx::cpu
