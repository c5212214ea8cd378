// Internal to the backends: the report of a per-step time profile (RLX_CPU_PROFILE,
// RLX_CUDA_PROFILE). Steps are grouped by what they compute with the layer index
// taken out, so the 16 `blk.N.attn_q` matmuls of a model add up to one line.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace rlx::runtime {

/// A step's group: "%3 (rms_norm 'blk.0.attn_norm')" -> "rms_norm attn_norm"; `extra`
/// (e.g. the weight's dtype), when given, is appended after a space.
std::string profile_group(std::string_view what, std::string_view extra = {});

/// `header`, then one line per group (name, steps, ms per run, us per step), largest
/// first. step_ms[i] is step i's time summed over `runs` runs; groups[i] its group.
std::string format_profile(std::string_view header, std::span<const std::string> groups,
                           std::span<const double> step_ms, int64_t runs);

}  // namespace rlx::runtime
