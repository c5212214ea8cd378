// LanguageModel: a decoder-only model loaded from a GGUF file and compiled for a
// device, with a persistent KV cache. Prefill runs through executables compiled
// per sequence bucket (padded rows masked by set_active_extent); decode runs a
// one-row executable. Weights stay as the file stores them (packed blocks packed) and
// where it stores them: the executables read the memory-mapped file in place.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "rlx/base/token_choice.h"
#include "rlx/models/decoder.h"
#include "rlx/runtime/model_pipeline.h"
#include "rlx/runtime/session.h"

namespace rlx::models {

struct LoadOptions {
  Device device = Device::cpu();
  int64_t ctx = 512;             ///< KV-cache length (tokens); overflow is an error
  ir::DType kv_dtype = ir::DType::F32;  ///< KV-cache storage: f32 or f16
  int threads = 0;               ///< CPU threads (0 = RLX_THREADS or all cores)
  int64_t min_bucket = 16;       ///< prefill buckets: powers of two from here up to max_chunk
  /// Rows per prefill run: a longer prompt runs in chunks of this many tokens. Prefill
  /// speed is flat in the chunk size past a few dozen rows, while the activation arena
  /// grows with it (about 60 KB per row for a 1B Llama), so this bounds peak memory.
  int64_t max_chunk = 256;
  /// Sequences served at once (forward_batch): each has its own KV cache and position;
  /// one run projects all their rows together (weights read once per step for all).
  int64_t batch = 1;
  /// Compile profiles of the two phases (preset names or *.rlx.toml files); empty =
  /// the family's presets (llama32_*, qwen3_*, gemma_* with _prefill / _decode).
  /// A profile's [fusion] policy becomes the HIR's FusionPolicy.
  std::string prefill_profile, decode_profile;
  /// Called while weights are bound to a new executable: (bytes done, bytes total).
  std::function<void(int64_t, int64_t)> on_weight_progress;
};

class LanguageModel {
 public:
  /// Opens `path` — a GGUF file, or a Hugging Face folder (config.json + safetensors)
  /// — reads its config and prepares compilation. Executables are compiled on first
  /// use. Errors name the file and what was wrong.
  static Expected<std::unique_ptr<LanguageModel>> load(const std::string& path, const LoadOptions& options);
  ~LanguageModel();

  const ModelConfig& config() const { return config_; }
  /// Tokens cached for sequence `seq` (0 for an unbatched model).
  int64_t n_past(int64_t seq = 0) const { return n_past_[static_cast<size_t>(seq)]; }
  int64_t batch() const { return options_.batch; }
  int64_t context_length() const { return options_.ctx; }

  /// Feeds `tokens` at positions n_past .. n_past+len-1, appending them to the KV
  /// cache, and returns logits [len, n_vocab] (all_rows) or [1, n_vocab] of the
  /// last token. One token uses the decode executable; more use prefill buckets.
  /// Needs batch == 1.
  Expected<std::vector<float>> forward(std::span<const int32_t> tokens, bool all_rows);
  /// As forward(tokens, false), but returns the argmax of the last token's logits (ties
  /// -> lowest id) computed by the executable: a run copies back one token instead of
  /// n_vocab logits (greedy decoding on a GPU). Needs batch == 1.
  Expected<int32_t> forward_greedy(std::span<const int32_t> tokens);
  /// As forward(tokens, false), but returns the token that `filter` and the uniform
  /// draw `draw` in [0, 1) choose from the last token's logits (rlx::choose_token), by
  /// the executable's `sample` op: one token copied back per run. Needs batch == 1 and
  /// 1 <= filter.top_k <= ir::kMaxSampleTopK (the device ranks at most that many
  /// candidates; top_k 0 needs forward + Sampler). The filter is run-time data: one
  /// executable serves every filter.
  Expected<int32_t> forward_sample(std::span<const int32_t> tokens, const TokenFilter& filter, double draw);
  /// Batched form (batch() sequences): appends tokens[b] (possibly none) to sequence b,
  /// all in one run, and returns per sequence its logits [len_b, n_vocab] (all_rows) or
  /// [n_vocab] of its last token (empty for a sequence given no tokens). Rows are padded
  /// to a common length S (a power-of-two bucket, or the longest input when a bucket
  /// would run past a cache); every sequence needs n_past + S <= ctx, else a clear error.
  /// A sequence's result equals running it alone.
  Expected<std::vector<std::vector<float>>> forward_batch(std::span<const std::vector<int32_t>> tokens, bool all_rows);
  /// Forgets the cached context of every sequence (next forward starts at position 0).
  void reset();
  /// Tensors of the model file that the model does not read and that are not known to
  /// be safe to ignore (each was logged as a warning at load): usually a feature of the
  /// file that RLX does not implement.
  const std::vector<std::string>& unused_tensors() const { return unused_; }
  /// Executables compiled so far (one per prefill bucket / decode and per output kind:
  /// logits, greedy token, sampled token). Each stays until the model is destroyed.
  size_t compiled_executables() const { return variants_.size(); }

 private:
  LanguageModel() = default;
  struct Variant;
  /// What a run returns: logits, or the token its executable picks (greedy or sampled).
  struct Pick {
    bool greedy = false;
    std::optional<TokenFilter> sample;
    double draw = 0.0;  ///< sample's uniform draw
  };
  using VariantKey = std::tuple<int64_t, bool, bool, bool>;  // rows, all_rows, greedy, sampled
  Expected<Variant*> variant(int64_t rows, bool all_rows, const Pick& pick);
  /// One run over at most max_chunk tokens: the executable's only output.
  Expected<Tensor> run_chunk(std::span<const int32_t> tokens, bool all_rows, const Pick& pick);
  /// forward_greedy / forward_sample: earlier chunks fill the cache, the last picks.
  Expected<int32_t> forward_pick(std::span<const int32_t> tokens, const Pick& pick);
  /// The argument checks of forward, forward_greedy and forward_sample.
  Status check_forward(std::span<const int32_t> tokens) const;
  Status move_cache_to(Variant* next);

  LoadOptions options_;
  ModelConfig config_;
  std::string source_;
  std::unique_ptr<WeightSource> weights_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<ParamStore> params_;  // views of the weights (file mapping), shared by every variant
  std::map<VariantKey, std::unique_ptr<Variant>> variants_;
  Variant* cache_owner_ = nullptr;  // the executable whose handles hold the live KV cache
  bool shared_cache_ = true;        // variants share one set of handles (no copies when switching)
  std::vector<int64_t> n_past_;     // per sequence
  std::vector<std::string> unused_;  // see unused_tensors()
};

}  // namespace rlx::models
