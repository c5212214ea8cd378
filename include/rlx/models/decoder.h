// Builds the HIR of a decoder-only transformer (Llama, Qwen2/3, Gemma 1/2/3) from
// a ModelConfig, declaring each parameter with the dtype its WeightSource stores
// (packed quantized weights stay packed and lower to DequantMatMul).
//
// Graph interface (stable; generation and `rlx logits` rely on it), B = options.batch:
//   inputs   tokens i32[B*S], pos i32[B*S]  (sequence b at rows [b*S, (b+1)*S), with the
//            absolute positions of its rows)
//            last   i32[B]                  (only with last_row_logits: the rows to project)
//            with compact_rows (T real rows, no padding in the products): tokens i32[T],
//            pos i32[B*S] (padded, as above), slot_rows i32[B*S] (the row of tokens that
//            fills each padded row; any one for padding) and row_slots i32[T] (the padded
//            row of each row of tokens); logits, and the rows `last` names, are the T rows
//   handles  cache.k.<layer>, cache.v.<layer>  kv_dtype[ctx, n_head_kv*head_dim]  (when ctx > 0;
//            row p holds position p; a run writes its rows at pos[0]..); with B > 1
//            kv_dtype[B, ctx, n_head_kv*head_dim], sequence b's cache the slice b, its
//            rows written from its first row's position
//   output   logits f32[B*S, n_vocab]  (or f32[B, n_vocab] with last_row_logits), or with
//            greedy_token instead: next i32[B, 1], the argmax of each selected row (ties ->
//            lowest id), so that greedy decoding copies back one token, not the logits;
//            or with sample_token: next i32[B, 1], the `sample` op over each selected
//            row with that sequence's row of input  sampling f32[B, 5]  (draw in [0, 1),
//            temperature, top_k, top_p, min_p: run-time values, see ir::kSampleParams);
//            a picked token is kNonFiniteToken (-1) when its row's logits are not all
//            finite (a model whose weights or config turn the output NaN)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rlx/ir/module.h"
#include "rlx/models/flow.h"
#include "rlx/models/model_config.h"
#include "rlx/models/weight_source.h"

namespace rlx::models {

/// The token a greedy_token / sample_token decoder gives for a row whose logits hold a
/// NaN or an infinity.
inline constexpr int32_t kNonFiniteToken = -1;

struct DecoderOptions {
  ir::Dim seq = ir::Dim::symbol(ir::SEQ);  ///< rows per run: symbolic, or 1 for decode
  int64_t ctx = 0;                          ///< KV-cache rows; 0 = no cache (attend within the run)
  ir::DType kv_dtype = ir::DType::F32;      ///< KV-cache storage: f32, f16 or bf16
  bool last_row_logits = false;             ///< project only the rows selected by input "last"
  bool greedy_token = false;                ///< output "next" (argmax per row) instead of logits; needs last_row_logits
  /// Output "next" sampled per row (input "sampling": draw, temperature, top-k, top-p,
  /// min-p) instead of logits; needs last_row_logits, excludes greedy_token.
  bool sample_token = false;
  int64_t batch = 1;                        ///< sequences per run (> 1 needs ctx > 0)
  /// Recurrent (delta-net) layers: rows per chunk of the delta rule's prefill form
  /// (0: token by token). Their input "seq" i32[batch, 2] gives each sequence's tokens
  /// seen before the run (0: a fresh state) and its real rows in this run.
  int64_t delta_chunk = 64;
  ir::FusionPolicy policy = ir::FusionPolicy::Direct;
  /// Compact rows: the run's real rows T (e.g. a symbol bound per run) instead of B*S,
  /// so the products compute no padding; attention still sees the padded [B, S] layout
  /// (ir::AttentionBlockAttrs::compact_rows). Needs batch > 1, a cache and no recurrent
  /// layers.
  std::optional<ir::Dim> compact_rows;
};



Expected<BuiltModel> build_decoder(const ModelConfig& config, const WeightSource& weights,
                                   const DecoderOptions& options);

}  // namespace rlx::models
