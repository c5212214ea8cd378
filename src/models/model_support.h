// What the model classes (LanguageModel, EncoderModel, the media models) share: the identity of a model's
// files in compile-cache keys, the compile pipeline each model owns, and how their
// weights are bound into each executable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "rlx/models/weight_source.h"
#include "rlx/runtime/model_pipeline.h"

namespace rlx::models {

/// Digest of the canonical path, size and write time of `path` (a file), or of every
/// file directly in it (a Hugging Face folder): a changed file gives a new identity.
uint64_t model_file_identity(const std::string& path);

/// A pipeline on `device` (`threads` CPU threads, 0 = default) with room for every
/// variant a model uses (`capacity`, at least 64), so that steady state evicts nothing.
/// `cache_dir` (empty: none): the model's disk cache folder; the CPU backend keeps packed
/// weights in its "packed" subfolder.
Expected<std::unique_ptr<ModelCompilePipeline>> make_model_pipeline(const Device& device, int threads,
                                                                    const std::string& cache_dir = {},
                                                                    size_t capacity = 64);

/// Binds the weights `graph` reads into it: the ones `store` lacks are taken from
/// `weights` as views (file pages stay file pages, nothing is copied) and added first.
/// `progress` (may be empty) sees (bytes added, bytes to add). Errors name `source`.
Status bind_weights(const WeightSource& weights, ParamStore& store, CompiledGraph& graph, const std::string& source,
                    const std::function<void(int64_t, int64_t)>& progress);

/// The folder of a model's disk caches (AOT executables, packed weights): empty when
/// `compile_cache` is off, else `cache_dir`, else RLX_CACHE_DIR's (or the user cache).
std::string disk_cache_dir(bool compile_cache, const std::string& cache_dir);

/// One executable of a vision / audio family template (MediaEncoderModel, SamModel):
/// found in the pipeline's memory cache, or in the AOT disk cache under `cache_dir`/aot
/// (`aot_name` the model's folder there; no disk cache when `cache_dir` is empty), or
/// compiled. The compile profile `profile` ("encoder" when empty: a preset name or a
/// *.rlx.toml) picks the fusion policy handed to `build`; `key` names the shapes and is
/// mixed with the profile. A new executable gets `weights` bound (bind_weights into
/// `params`, made on first use; errors name `source`).
Expected<std::shared_ptr<const CompiledVariant>> compile_family_variant(
    ModelCompilePipeline& pipeline, const std::string& profile, const std::string& cache_dir, const std::string& aot_name,
    uint64_t key, const std::function<Expected<ir::HirModule>(ir::FusionPolicy)>& build, const WeightSource& weights,
    std::unique_ptr<ParamStore>& params, const std::string& source);

}  // namespace rlx::models
