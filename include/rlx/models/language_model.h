// LanguageModel: a decoder-only model loaded from a GGUF file (or HF folder) and run on
// a device with a persistent KV cache. A thin driver over ModelCompilePipeline: the
// decoder's HIR is a template per phase and output kind (prefill / decode; logits, the
// greedy token, a sampled token), lowered and optimized once and specialized per
// sequence bucket (padded rows masked by set_active_extent); specialized modules go to
// the AOT disk cache, so a second process start skips lowering and planning. The
// weights (views of the file mapping: packed blocks stay packed) and the KV cache (the
// backend's storage, on the device) are held once by the model and bound into every
// executable, so moving between prefill and decode copies nothing.
#pragma once

#include <algorithm>
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
  /// Rows per prefill run: a longer prompt runs in chunks of this many tokens; 0 = the
  /// device's default. On a CPU (default 256) prefill speed is flat in the chunk size
  /// past a few dozen rows, while the activation arena grows with it (about 60 KB per row
  /// for a 1B Llama), so this bounds peak memory. On a GPU (default kGpuMaxChunk) the
  /// speed keeps growing with the rows of a run (a 1B model on an H200: 59k tok/s for a
  /// 2048-token prompt in runs of 256, 102k in one run).
  int64_t max_chunk = 0;
  /// Sequences served at once (forward_batch): each has its own KV cache and position;
  /// one run projects all their rows together (weights read once per step for all). A
  /// run covers the sequences up to the last one given tokens, rounded up to a power of
  /// kSequenceBucketGrowth (its own executable, over the front of the stacked caches):
  /// fill the low sequences first, and a few streams cost what a few streams need.
  int64_t batch = 1;
  /// A batched run whose real rows (the tokens given, summed over its sequences) fill at
  /// most half of its sequences x rows runs its products on those rows alone, in a
  /// bucket of them (each eighth of a power of two; an executable per bucket): a step
  /// that decodes one token for each of 60 streams while a newcomer prefills 16 computes
  /// 80 rows, not 64 x 16. Attention still covers the padded layout. Off: every run is
  /// padded. Models with recurrent layers always pad.
  bool compact_rows = true;
  /// Recurrent (delta-net) layers: rows per chunk of the delta rule's parallel prefill
  /// form inside one run (0: token by token). Any value gives the same results up to
  /// rounding; it trades parallel work against sequential steps.
  int64_t delta_chunk = 64;
  /// Compile profiles of the two phases (preset names or *.rlx.toml files); empty =
  /// the family's presets (llama32_*, qwen3_*, gemma_* with _prefill / _decode).
  /// A profile's [fusion] policy becomes the HIR's FusionPolicy.
  std::string prefill_profile, decode_profile;
  /// Called while weights are bound to a new executable: (bytes done, bytes total).
  std::function<void(int64_t, int64_t)> on_weight_progress;
  /// Called before an executable is compiled or read from the AOT cache (never for one
  /// already in memory), naming it ("prefill, 64 rows"; "decode"): progress output.
  std::function<void(const std::string&)> on_compile;
  /// Keep specialized modules in the AOT disk cache under `cache_dir` (empty: the
  /// RLX_CACHE_DIR / user cache folder) and load them from there on later starts. The
  /// entry key covers the model file (path, size, time), the graph, the compile options,
  /// the binding, device, backend and RLX version; a corrupt, stale or foreign entry is
  /// recompiled, never trusted.
  bool compile_cache = true;
  std::string cache_dir;
  /// Memory the KV cache may hold, in bytes (0: all of it, batch x ctx rows of every
  /// layer). Where the backend pages its caches (the CPU's memory mappings, CUDA's
  /// virtual memory), memory backs a sequence's rows as its runs reach them, so a server
  /// of many sequences with a long context holds what its streams use, not batch x ctx.
  /// A run that would take the cache past this budget is an error (kResourceExhausted)
  /// until release_sequence gives memory back (kv_shortfall says how much is missing).
  /// A backend that allocates the whole cache up front needs a budget of all of it.
  int64_t kv_memory = 0;
};

/// Where the KV cache's memory stands (LanguageModel::kv_memory_state).
struct KvMemoryState {
  bool paged = false;     ///< memory backs the cache as sequences grow
  int64_t budget = 0;     ///< LoadOptions::kv_memory, or the whole cache
  int64_t reserved = 0;   ///< the whole cache: batch x ctx rows of every layer (and the states)
  int64_t backed = 0;     ///< bytes the model has asked the backend to back (counts against budget)
  int64_t resident = 0;   ///< bytes the backend's memory holds now, as it measures them
  int64_t page_rows = 1;  ///< rows a sequence's backing grows by
};

/// Rows past the last one a run writes that are backed with it on a GPU: attention
/// kernels may load a whole tile of keys past the last one they attend to (and ignore
/// it), and device memory that nothing backs faults (host memory reads as zeros).
inline constexpr int64_t kKvReadAheadRows = 256;

/// The compile profile preset a family's prefill or decode phase uses by default
/// (llama32_*, qwen3_*, qwen35_*, gemma_* with _prefill / _decode).
std::string default_profile_name(const ModelConfig& config, bool decode);

/// What compiling a model's executables cost so far.
struct CompileStats {
  int64_t executables = 0;  ///< backend compiles (variants made)
  int64_t templates = 0;    ///< lowerings + pass pipelines run (one per phase and output kind at most)
  int64_t aot_loads = 0;    ///< variants whose specialized module came from the disk cache
  int64_t graphs = 0;       ///< model graphs built (none when every variant came from the disk cache)
  double compile_ms = 0;    ///< wall time of all of it (HIR, passes or cache load, planning, backend)
};

/// LoadOptions::max_chunk's default on the CPU and on a GPU.
inline constexpr int64_t kCpuMaxChunk = 256;
inline constexpr int64_t kGpuMaxChunk = 2048;

/// forward_batch_greedy's token for a sequence given no tokens in that run.
inline constexpr int32_t kNoBatchToken = -1;

/// The sequence counts a batched run may cover: 1, 4, 16, ... (each one executable per
/// row bucket and output kind), capped at LoadOptions::batch.
inline constexpr int64_t kSequenceBucketGrowth = 4;

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
  /// Fewest rows of a multi-token run (LoadOptions::min_bucket): forward_batch pads a run
  /// of n > 1 tokens to the power of two >= max(n, min_bucket) when that fits every cache.
  int64_t min_bucket() const { return options_.min_bucket; }
  /// Sequences a batched run covers (forward_batch) when the last sequence given tokens
  /// is sequence n - 1: a bucket of them where the caches are shared, else batch().
  int64_t run_sequences(int64_t n) const { return shared_state_ ? sequence_bucket(n) : options_.batch; }

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
  /// A sequence's result equals running it alone. The run covers only sequences
  /// 0 .. k-1, k the power of kSequenceBucketGrowth (at most batch()) at or past the last
  /// sequence given tokens; the others are not touched (last_run_sequences says k).
  Expected<std::vector<std::vector<float>>> forward_batch(std::span<const std::vector<int32_t>> tokens, bool all_rows);
  /// As forward_batch(tokens, false), but returns per sequence the argmax of its last
  /// token's logits (ties -> lowest id), computed by the executable: a run copies back
  /// batch() tokens instead of batch() x n_vocab logits (greedy decoding of many streams
  /// on a GPU). A sequence given no tokens gets kNoBatchToken. A sequence whose logits
  /// are not all finite is an error naming it -- or, with `mark_non_finite`, gets
  /// kNonFiniteToken (decoder.h) while the others keep their tokens (a server fails
  /// that request alone).
  Expected<std::vector<int32_t>> forward_batch_greedy(std::span<const std::vector<int32_t>> tokens,
                                                      bool mark_non_finite = false);
  /// Forgets the cached context of every sequence (next forward starts at position 0).
  void reset();
  /// Forgets sequence `seq`'s cache (n_past 0) and gives its memory back (a paged KV
  /// cache; nothing else to free otherwise): a server evicting a cached prefix.
  Status release_sequence(int64_t seq);
  /// Bytes by which forward_batch(tokens) would take the KV cache past its budget (0: it
  /// fits), counting what the run must back after rows no sequence holds any more are
  /// given back. The same argument errors as forward_batch.
  Expected<int64_t> kv_shortfall(std::span<const std::vector<int32_t>> tokens);
  /// The KV cache's budget, reservation, backed and resident bytes (zeros before the
  /// first run made the cache); resident only with `measure_resident` (on the CPU it
  /// walks the mapping's pages).
  KvMemoryState kv_memory_state(bool measure_resident = true) const;
  /// True when the last forward_batch / forward failed for memory (kResourceExhausted: its
  /// KV rows past the budget or the device's memory, or the device's memory for a new
  /// executable): nothing ran, and the same run can succeed once memory is given back.
  bool kv_memory_failed() const { return kv_failed_; }
  /// Keeps only the first `n_keep` cached tokens of sequence `seq` (the next forward
  /// writes from position n_keep): a prefix cache reuses what a sequence already holds
  /// (a shared system prompt, earlier turns) and recomputes only the rest. Rows past
  /// n_keep are not cleared; they are overwritten before anything reads them. Errors:
  /// `seq` outside [0, batch()), or n_keep outside [0, n_past(seq)]. A model with
  /// recurrent layers (Qwen3.5) keeps one state per sequence, not one row per token: it
  /// can keep all of a sequence or none of it (n_keep 0 or n_past), nothing between.
  /// can_truncate says which. A full sequence that sat out a batched run had that run's
  /// padding written over its last cache rows (forward_batch): it can then keep at most
  /// the rows before them, and asking for more is an error naming the limit.
  Status truncate(int64_t seq, int64_t n_keep);
  /// The most tokens truncate(seq, ...) may keep: n_past(seq), or fewer after a batched
  /// run wrote padding over the sequence's last cache rows.
  int64_t max_keep(int64_t seq) const {
    return std::min(n_past_[static_cast<size_t>(seq)], intact_[static_cast<size_t>(seq)]);
  }
  /// True when truncate(seq, n_keep) may keep part of a sequence (no recurrent layers).
  bool can_truncate() const { return !config_.has_recurrent_layers(); }
  /// Makes sequence `dst` hold the first `n` cached tokens of sequence `src` (n_past(dst)
  /// becomes n), copying their KV rows on the device: a prompt prefix another sequence
  /// already computed (a shared system prompt) is handed over instead of recomputed.
  /// `src` keeps its cache. Errors: a sequence outside [0, batch()) or src == dst, n
  /// outside [0, max_keep(src)], a model with recurrent layers (its state is not per
  /// token), a backend whose caches cannot be copied in place (kUnsupported), or before
  /// anything ran.
  Status copy_prefix(int64_t src, int64_t dst, int64_t n);
  /// What the executables of a generation return.
  enum class Output : uint8_t { kLogits, kGreedy, kSampled };
  /// Compiles (or loads from the caches) every executable a generation from a
  /// `prompt_tokens`-token prompt (batch 1) uses: the prefill chunks' buckets and the
  /// decode step, with `output` for the runs that pick tokens. Afterwards generation
  /// compiles nothing, so its timings are the model's speed.
  Status prepare_generation(int64_t prompt_tokens, Output output);
  /// Compiles (or loads from the caches) every executable forward_batch (`greedy`:
  /// forward_batch_greedy) uses for runs of up to `max_rows` rows a sequence: each row
  /// bucket for each sequence count, and under each such layout the compact-rows
  /// buckets (LoadOptions::compact_rows) it may run. Afterwards a server's runs compile nothing (but
  /// for a run near the end of a context, which takes its exact row count).
  Status prepare_batch(int64_t max_rows, bool greedy);
  /// Tensors of the model file that the model does not read and that are not known to
  /// be safe to ignore (each was logged as a warning at load): usually a feature of the
  /// file that RLX does not implement.
  const std::vector<std::string>& unused_tensors() const { return unused_; }
  /// Executables held by the model's pipeline (one per prefill bucket / decode and per
  /// output kind: logits, greedy token, sampled token).
  size_t compiled_executables() const { return pipeline_->len(); }
  const CompileStats& compile_stats() const { return compile_stats_; }
  /// Sequences the last forward_batch / forward_batch_greedy run covered (0 before one).
  int64_t last_run_sequences() const { return last_run_sequences_; }
  /// The executable that ran last (for its transfer statistics or handle storage); null
  /// before the first run.
  CompiledGraph* last_executable() const { return cache_owner_ ? cache_owner_->graph.get() : nullptr; }
  const ModelCompilePipeline& pipeline() const { return *pipeline_; }

 private:
  LanguageModel() = default;
  using Variant = std::shared_ptr<const CompiledVariant>;
  /// What a run returns: logits, or the token its executable picks (greedy or sampled).
  struct Pick {
    bool greedy = false;
    std::optional<TokenFilter> sample;
    double draw = 0.0;  ///< sample's uniform draw
  };
  /// Rows of the executable that runs `n` tokens (a power-of-two bucket for a prefill).
  int64_t bucket_rows(int64_t n) const;
  /// Rows of the compact-rows executable for `n` real rows: up to the next multiple of
  /// an eighth of their power-of-two bucket (at least min_bucket), so a bucket wastes at
  /// most a fifth of its rows once past a few min_buckets (1,072 real rows run 1,280).
  int64_t compact_bucket(int64_t n) const;
  /// Whether a run of `seqs` sequences x `rows` rows may run on compact rows: they are
  /// on, several sequences of several rows, and no recurrent layers.
  bool compact_allowed(int64_t seqs, int64_t rows) const;
  /// The compact-rows buckets such a run may take (those at most half its padded rows;
  /// none where compact_allowed is false): what prepare_batch compiles.
  std::vector<int64_t> compact_buckets(int64_t seqs, int64_t rows) const;
  /// Sequences a batched run covers when the last one given tokens is sequence n - 1.
  int64_t sequence_bucket(int64_t n) const;
  /// The stacked caches belong to the first executable made (prepare): makes a full one
  /// (every sequence, the one-row decode step) when none exists yet, so that narrower
  /// executables bind the front of its caches, and shared_state_ says whether the
  /// backend can share them at all.
  Status make_state();
  /// The executable for `rows` rows a sequence, this output kind and the first `seqs`
  /// sequences (0: all of batch()), from the pipeline.
  /// With `compact` > 0: the compact-rows executable of that many real rows (a bucket)
  /// over the same padded layout (DecoderOptions::compact_rows).
  Expected<Variant> variant(int64_t rows, bool all_rows, const Pick& pick, int64_t seqs = 0, int64_t compact = 0);
  /// Binds the weights and the KV cache into an executable the pipeline just compiled.
  Status prepare(CompiledGraph& graph);
  /// What one batched run returned: the executable's only output, and where each
  /// sequence's rows begin among its rows when all rows come back (b x rows, or with
  /// compact rows the sequences' tokens one after the other).
  struct BatchRun {
    Tensor out;
    std::vector<int64_t> first_row;
  };
  /// How a batched run lays out: sequences covered, rows a sequence, and where each
  /// sequence's rows start in its cache.
  struct BatchPlan {
    int64_t seqs = 0, rows = 0;
    int64_t longest = 0;  ///< most tokens given to one sequence
    std::vector<int64_t> start;
    int64_t compact = 0;  ///< rows of the compact-rows executable (0: a padded run)
  };
  Expected<BatchPlan> plan_batch(std::span<const std::vector<int32_t>> tokens);
  /// forward_batch / forward_batch_greedy: the checks, the padded run, the positions.
  Expected<BatchRun> run_batch(std::span<const std::vector<int32_t>> tokens, bool all_rows, const Pick& pick);
  Expected<BatchRun> run_batch_once(std::span<const std::vector<int32_t>> tokens, bool all_rows, const Pick& pick);
  /// One run over at most max_chunk tokens: the executable's only output.
  Expected<Tensor> run_chunk(std::span<const int32_t> tokens, bool all_rows, const Pick& pick);
  Expected<Tensor> run_chunk_once(std::span<const int32_t> tokens, bool all_rows, const Pick& pick);
  /// forward_greedy / forward_sample: earlier chunks fill the cache, the last picks.
  Expected<int32_t> forward_pick(std::span<const int32_t> tokens, const Pick& pick);
  /// The argument checks of forward, forward_greedy and forward_sample.
  Status check_forward(std::span<const int32_t> tokens) const;
  /// Without shared state (a backend that cannot share handles): copies the KV cache
  /// from the executable that ran last into `next`.
  Status move_cache_to(const Variant& next);

  LoadOptions options_;
  ModelConfig config_;
  std::string source_;
  uint64_t model_id_ = 0;  // the model file's identity (path, size, time) in cache keys
  std::unique_ptr<WeightSource> weights_;
  std::unique_ptr<ModelCompilePipeline> pipeline_;
  std::unique_ptr<ParamStore> params_;  // views of the weights (file mapping), bound into every variant
  // The first executable's run memory (arena, scratch), shared by every later one (null
  // where the backend keeps none apart).
  std::shared_ptr<RunMemory> run_memory_;
  // The KV cache: the first executable's handle storage, bound into every later one.
  std::vector<std::pair<std::string, std::shared_ptr<HandleStorage>>> state_;
  bool shared_state_ = true;  // false: the backend cannot share handles; caches are copied
  int64_t last_run_sequences_ = 0;
  Variant cache_owner_;       // the executable that ran last (without shared state: holds the live cache)
  CompileStats compile_stats_;
  std::vector<int64_t> n_past_;     // per sequence
  std::vector<int64_t> intact_;     // per sequence: cache rows below this are its own (padding wrote past it)
  std::vector<std::string> unused_;  // see unused_tensors()

  // KV memory (language_model_kv.cpp): which handles are paged, what each sequence has
  // backed, the budget.
  struct StateHandle {
    HandleStorage* storage = nullptr;
    int64_t rows = 1;  // rows a sequence: ctx for a KV cache, 1 for a recurrent state
    bool paged = false;
  };
  /// After the first executable made the caches: sorts them into paged and not.
  Status index_state();
  /// Rows a sequence holding `n` rows keeps backed: whole pages, at most ctx.
  int64_t kv_rows_held(int64_t n) const;
  /// Bytes backing `rows` rows (and the recurrent state) of one sequence.
  int64_t kv_sequence_bytes(int64_t rows) const;
  /// Rows each sequence has backed for a run writing rows up to `ends` (sequence, last
  /// row written + 1; kKvReadAheadRows more): with `release`, a sequence keeps only its
  /// cached tokens' pages; without, all it has backed.
  std::vector<int64_t> kv_targets(std::span<const std::pair<int64_t, int64_t>> ends, bool release) const;
  /// Bytes the caches take when the sequences back `rows` rows each.
  int64_t kv_bytes_of(const std::vector<int64_t>& rows) const;
  int64_t kv_budget() const;
  static std::vector<std::pair<int64_t, int64_t>> plan_ends(const BatchPlan& plan);
  Status kv_back_paged(std::span<const std::pair<int64_t, int64_t>> ends);
  /// Backs (more rows) or gives back (fewer) sequence `seq`'s rows of every paged cache
  /// from what it has backed to `rows`; its recurrent states go with its first row.
  Status kv_resize(int64_t seq, int64_t rows);
  /// Backs the rows a run writes; past the budget, gives back rows no sequence holds
  /// first, else kResourceExhausted.
  Status kv_back(std::span<const std::pair<int64_t, int64_t>> ends);
  std::vector<StateHandle> state_index_;
  bool kv_paged_ = false;
  int64_t kv_row_bytes_ = 0;     // one row of every paged KV cache, one sequence
  int64_t kv_state_bytes_ = 0;   // one sequence's paged recurrent states
  int64_t kv_fixed_bytes_ = 0;   // storage that is not paged (backed from the start)
  int64_t kv_reserved_ = 0;      // all of the caches
  int64_t kv_page_rows_ = 1;
  int64_t kv_read_ahead_ = 0;       // rows past a run's last written row backed with it
  std::vector<int64_t> kv_backed_;  // per sequence: rows backed (0 .. ctx)
  std::optional<Error> kv_error_;   // a budget the caches can never meet (index_state)
  bool kv_failed_ = false;          // the last run failed for memory before it ran (kv_memory_failed)
};

}  // namespace rlx::models
