// One way for every command to open a model argument: a GGUF file, a Hugging Face
// folder (config.json + safetensors), or a `.safetensors` file, `*.safetensors.index.json`
// or config.json (each meaning its folder). Used by run, bench, compile,
// quantize, info, logits and the tokenizer commands, so that all accept the same paths
// and report the same errors.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/models/model_config.h"
#include "rlx/models/tokenizer.h"
#include "rlx/models/weight_source.h"

namespace rlx::cli {

/// Where a model argument points.
struct ModelPath {
  std::string path;  ///< the GGUF file, or the Hugging Face folder
  bool hf = false;   ///< true: a Hugging Face folder (config.json + safetensors)
};

/// Resolves a model argument. A folder must hold config.json; a `.safetensors` file,
/// a `*.safetensors.index.json` or a config.json stands for its folder (which must hold
/// config.json); any other regular file is taken as GGUF (its header is checked when it
/// is opened).
/// Errors name the path and what was wrong (missing, a folder without config.json, ...).
Expected<ModelPath> resolve_model_path(const std::string& arg);

/// A CLI11 check of a model argument by resolve_model_path, so that a bad path is
/// reported before any work, with the same message in every command.
CLI::Validator model_path_check();

/// A model's config and weights, opened without compiling anything.
struct OpenedModel {
  ModelPath where;
  models::ModelConfig config;
  std::unique_ptr<models::WeightSource> weights;
};
Expected<OpenedModel> open_model(const ModelPath& where);

/// One tensor as the model file stores it (HF names for a folder, GGUF names otherwise).
struct StoredTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  int64_t n_elements = 0, n_bytes = 0;
};
/// Every stored tensor of a model, in file order.
Expected<std::vector<StoredTensor>> list_stored_tensors(const ModelPath& where);
/// True for the stacked (GGUF `*_exps.*`) or per-expert (HF `.experts.N.`) matrices of a
/// mixture of experts.
bool is_expert_tensor(const std::string& name);

/// Says on stderr when a model has more output rows (`n_vocab`) than its tokenizer has
/// tokens (Hugging Face checkpoints pad the embedding): ids past the tokenizer's, if
/// generated, add no text. A tokenizer with more tokens than the model is caught when a
/// prompt holds such an id (an error naming it).
void warn_vocab_mismatch(const Tokenizer& tok, int64_t n_vocab, const std::string& path);

/// The tokenizer of `path`: a GGUF file's vocabulary, a tokenizer.json, or the
/// tokenizer.json of a Hugging Face folder (or of the folder of a safetensors file).
Expected<std::unique_ptr<Tokenizer>> open_tokenizer(const std::string& path);

}  // namespace rlx::cli
