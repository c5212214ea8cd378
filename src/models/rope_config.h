// Rotary-embedding settings of a model file, read into ModelConfig: GGUF `<arch>.rope.*`
// keys with the rope_freqs / rope_factors_long / rope_factors_short tensors, and Hugging
// Face `rope_scaling` / `rope_parameters` objects (default, linear, llama3, yarn,
// longrope). Whatever RLX cannot honour is an error naming the key, never a fallback.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "rlx/base/status.h"
#include "rlx/models/model_config.h"

namespace rlx::formats {
class GgufFile;
}

namespace rlx::models::detail {

/// Reads every `<arch>.rope.*` key and the rope factor tensors of `file` into c->rope
/// (c->rope.theta / n_rot / head_dim and c->n_ctx_train already set). An unknown rope
/// key, a scaling type RLX does not run, or a factor tensor of the wrong type or size is
/// an error naming the file and key or tensor.
Status read_gguf_rope(const formats::GgufFile& file, const std::string& arch, ModelConfig* c);

/// Reads one HF rope parameter object (`rope_scaling`, `rope_parameters` or one of its
/// per-layer-type entries) into *rope; `config` is the whole config.json (LongRoPE and
/// YaRN fall back to its max_position_embeddings / original_max_position_embeddings).
/// LongRoPE's long factors go to *long_factors. Errors name the file and key.
Status read_hf_rope(const nlohmann::json& params, const nlohmann::json& config, const std::string& path,
                    ir::RopeAttrs* rope, std::vector<double>* long_factors);

/// YaRN's default magnitude scale for a context scale `factor` (1 for factor <= 1).
double yarn_mscale(double factor);

/// LongRoPE's default magnitude scale: sqrt(1 + ln(factor) / ln(original_context)) for
/// factor > 1, else 1.
double longrope_mscale(double factor, int64_t original_context);

/// qwen35's `rope.dimension_sections` for a text model: the tightest [t, h, w, 0] that
/// turns all n_rot / 2 rotary pairs with a text token's position (pair i takes section
/// i % 3 while i < 3 sections[i % 3]); [11, 11, 10, 0] for 64 rotary dims, as Qwen3.5 has.
std::vector<int32_t> text_rope_sections(int64_t n_rot);

}  // namespace rlx::models::detail
