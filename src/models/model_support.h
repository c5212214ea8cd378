// What the model classes (LanguageModel, EncoderModel) share: the identity of a model's
// files in compile-cache keys, and the compile pipeline each model owns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "rlx/runtime/model_pipeline.h"

namespace rlx::models {

/// Digest of the canonical path, size and write time of `path` (a file), or of every
/// file directly in it (a Hugging Face folder): a changed file gives a new identity.
uint64_t model_file_identity(const std::string& path);

/// A pipeline on `device` (`threads` CPU threads, 0 = default) with room for every
/// variant a model uses (64), so that steady state evicts nothing.
Expected<std::unique_ptr<ModelCompilePipeline>> make_model_pipeline(const Device& device, int threads);

}  // namespace rlx::models
