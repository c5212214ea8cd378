// What the model classes (LanguageModel, EncoderModel) share: the identity of a model's
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
/// variant a model uses (64), so that steady state evicts nothing. `cache_dir` (empty:
/// none): the model's disk cache folder; the CPU backend keeps packed weights in its
/// "packed" subfolder.
Expected<std::unique_ptr<ModelCompilePipeline>> make_model_pipeline(const Device& device, int threads,
                                                                    const std::string& cache_dir = {});

/// Binds the weights `graph` reads into it: the ones `store` lacks are taken from
/// `weights` as views (file pages stay file pages, nothing is copied) and added first.
/// `progress` (may be empty) sees (bytes added, bytes to add). Errors name `source`.
Status bind_weights(const WeightSource& weights, ParamStore& store, CompiledGraph& graph, const std::string& source,
                    const std::function<void(int64_t, int64_t)>& progress);

}  // namespace rlx::models
