// Encoder models (BERT, NomicBERT, ModernBERT): bidirectional transformers that turn
// token sequences into one state per token (last_hidden_state), BERT's pooler output,
// and pooled, optionally normalized, text embeddings.
//
// The encoder is a family template of the one model pipeline: build_encoder composes
// Flow blocks into HIR that is symbolic in BATCH (sequences) and SEQ (padded length);
// EncoderModel lowers it once per profile, specializes it per (batch, length bucket)
// and caches the executables (in memory and in the AOT disk cache), binding one copy of
// the weights into all of them. Sequences of different lengths share a run: each is
// padded to the bucket and attends only to its own tokens (attention's kv_len).
// Also what the front ends share: texts to encoder tokens, Hugging Face's padded batch
// layout, Matryoshka truncation, and embed_all over any number of sequences.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/models/flow.h"
#include "rlx/models/model_config.h"
#include "rlx/models/tokenizer.h"
#include "rlx/models/weight_source.h"
#include "rlx/runtime/model_pipeline.h"
#include "rlx/runtime/session.h"

namespace rlx::models {

struct EncoderBuildOptions {
  ir::Dim batch = ir::Dim::symbol(ir::BATCH);  ///< sequences per run
  ir::Dim seq = ir::Dim::symbol(ir::SEQ);      ///< padded tokens per sequence
  bool pooler = false;                         ///< also output BERT's pooler_output
  ir::FusionPolicy policy = ir::FusionPolicy::Direct;
};

/// The encoder's HIR. Inputs: tokens i32[B*S] (sequence b at rows b*S ..), types
/// i32[B*S] (when the model has token types), pos i32[S] (0 .. S-1), kv_len i32[B] (the
/// real tokens of each sequence), and with `pooler` first i32[B] (the row of each
/// sequence's first token). Outputs: last_hidden_state f32[B*S, D] and, with `pooler`,
/// pooler_output f32[B, D] = tanh(pooler . hidden[first]).
Expected<BuiltModel> build_encoder(const ModelConfig& config, const WeightSource& weights,
                                   const EncoderBuildOptions& options);

struct EncoderLoadOptions {
  Device device = Device::cpu();
  int threads = 0;              ///< CPU threads (0 = RLX_THREADS or all cores)
  int64_t min_bucket = 8;       ///< padded lengths: powers of two from here
  std::string profile;          ///< compile profile (preset or *.rlx.toml); empty = "encoder"
  bool compile_cache = true;    ///< keep specialized modules in the AOT disk cache
  std::string cache_dir;        ///< empty: RLX_CACHE_DIR / the user cache folder
};

/// How EncoderModel::embed_all turns sequences into embeddings.
struct EmbedOptions {
  Pooling pooling = Pooling::Cls;  ///< Cls, Mean or Last (None is an error)
  bool normalize = false;          ///< L2-normalize each embedding
  int64_t dimensions = 0;          ///< > 0: truncate_embedding to this many values; 0: all
  int64_t max_batch = 32;          ///< most sequences in one run (1..4096)
  /// Called before each run; an error stops embed_all and is returned (e.g. Ctrl-C).
  std::function<Status()> interrupt;
};

/// One forward pass over a batch of sequences.
struct EncoderOutput {
  int64_t batch = 0, seq = 0, dim = 0;  ///< seq: the padded length of the run
  std::vector<int64_t> lengths;         ///< real tokens per sequence
  std::vector<float> hidden;            ///< [batch, seq, dim]; rows past a sequence's length are padding
  std::vector<float> pooler;            ///< [batch, dim] when the model has a pooler, else empty
  /// Sequence b's token states, [lengths[b], dim].
  std::span<const float> sequence(int64_t b) const {
    return std::span<const float>(hidden).subspan(static_cast<size_t>(b * seq * dim),
                                                  static_cast<size_t>(lengths[static_cast<size_t>(b)] * dim));
  }
};
/// `out`'s last_hidden_state as [out.batch, n, out.dim], Hugging Face's layout: position
/// i of sequence b holds the state the run computed there (the padding past a sequence's
/// length included), zeros past the run's padded length out.seq.
std::vector<float> padded_hidden_states(const EncoderOutput& out, int64_t n);

/// Pools one sequence's states [len, dim] into [dim] (Pooling::None is an error).
Expected<std::vector<float>> pool_states(std::span<const float> states, int64_t len, int64_t dim, Pooling pooling);
/// Scales v to unit L2 norm (a zero vector stays zero).
void l2_normalize(std::span<float> v);
/// Keeps the first `dimensions` values of `v` (1..v.size()) and L2-normalizes them: the
/// shortened embedding of a Matryoshka-trained model, as OpenAI's `dimensions` gives it.
void truncate_embedding(std::vector<float>& v, int64_t dimensions);

/// Token ids of `text` as an encoder reads it, with the tokenizer's special tokens
/// ([CLS] text [SEP] for WordPiece). An empty result (an empty text, a tokenizer that adds
/// nothing) becomes the one token [CLS] (else BOS, else id 0). With `truncate_to` > 0 a
/// longer result keeps its first truncate_to - 1 tokens and its last one (the [SEP] / EOS
/// the tokenizer appends; without one, simply its first truncate_to tokens).
std::vector<int32_t> encoder_tokens(const Tokenizer& tokenizer, std::string_view text, int64_t truncate_to = 0);

/// Sequences taken out of a right-padded batch in Hugging Face's layout.
struct EncoderBatch {
  std::vector<std::vector<int32_t>> tokens;  ///< each row cut at its attention-mask length
  std::vector<std::vector<int32_t>> types;   ///< empty, or the token types of each sequence
};
/// `input_ids` [batch, n] (row-major); `attention_mask` empty (every token is real) or
/// [batch, n], each row ones then zeros (right padding) with at least one 1;
/// `token_type_ids` empty (all 0) or [batch, n]. Errors name the input and the row: a
/// size that is not batch * n, a mask value other than 0/1 or a 1 after a 0, an id
/// outside int32. (Vocabulary ranges are checked by EncoderModel::forward.)
Expected<EncoderBatch> unpad_encoder_batch(std::span<const int64_t> input_ids, std::span<const int64_t> attention_mask,
                                           std::span<const int64_t> token_type_ids, int64_t batch, int64_t n);

class EncoderModel {
 public:
  /// Opens `path` — a GGUF file (bert, nomic-bert, modern-bert) or a Hugging Face folder
  /// (config.json + safetensors). Executables compile on first use. Errors name the file.
  static Expected<std::unique_ptr<EncoderModel>> load(const std::string& path, const EncoderLoadOptions& options);
  ~EncoderModel();

  const ModelConfig& config() const { return config_; }
  /// True when the file holds BERT's pooler (pooler.weight / pooler.bias).
  bool has_pooler() const { return pooler_; }
  /// The pooling and normalization the model's files ask for: GGUF pooling_type, or a
  /// sentence-transformers folder's 1_Pooling/config.json and its Normalize module
  /// (modules.json); else the family's default (config().pooling, no normalization).
  Pooling default_pooling() const { return config_.pooling; }
  bool default_normalize() const { return normalize_; }
  /// The longest sequence the model takes (its learned positions, or the training context).
  int64_t max_tokens() const;

  /// Runs `tokens` (one list per sequence, 1..max_tokens() ids each) in one batch.
  /// `types`: empty (all 0) or one list per sequence of the same lengths. A sequence's
  /// result equals running it alone.
  Expected<EncoderOutput> forward(std::span<const std::vector<int32_t>> tokens,
                                  std::span<const std::vector<int32_t>> types = {});
  /// One embedding per sequence: forward, then `pooling`, then L2 normalization when
  /// `normalize`.
  Expected<std::vector<std::vector<float>>> embed(std::span<const std::vector<int32_t>> tokens, Pooling pooling,
                                                  bool normalize);
  /// Embeddings of any number of sequences, in input order: sorted by length (so each
  /// run pads little) and run in batches whose sizes are powers of two up to
  /// options.max_batch, which keeps the executables compiled to one per (power of two,
  /// length bucket). Each embedding equals embedding its sequence alone.
  Expected<std::vector<std::vector<float>>> embed_all(std::span<const std::vector<int32_t>> tokens,
                                                      const EmbedOptions& options);

  /// Executables compiled so far, and the pipeline behind them.
  const ModelCompilePipeline& pipeline() const { return *pipeline_; }

 private:
  EncoderModel() = default;
  Expected<std::shared_ptr<const CompiledVariant>> variant(int64_t batch, int64_t seq);
  Status prepare(CompiledGraph& graph);

  EncoderLoadOptions options_;
  ModelConfig config_;
  std::string source_;
  uint64_t model_id_ = 0;
  bool pooler_ = false;
  bool normalize_ = false;
  std::unique_ptr<WeightSource> weights_;
  std::unique_ptr<ModelCompilePipeline> pipeline_;
  std::unique_ptr<ParamStore> params_;
};

}  // namespace rlx::models
