// Builds the HIR of a decoder-only transformer (Llama, Qwen2/3, Gemma 1/2/3) from
// a ModelConfig, declaring each parameter with the dtype its WeightSource stores
// (packed quantized weights stay packed and lower to DequantMatMul).
//
// Graph interface (stable; generation and `rlx logits` rely on it), B = options.batch:
//   inputs   tokens i32[B*S], pos i32[B*S]  (sequence b at rows [b*S, (b+1)*S), with the
//            absolute positions of its rows)
//            last   i32[B]                  (only with last_row_logits: the rows to project)
//   handles  cache.k.<layer>, cache.v.<layer>  kv_dtype[ctx, n_head_kv*head_dim]  (when ctx > 0;
//            row p holds position p; a run writes its rows at pos[0]..); with B > 1 one
//            pair per sequence: cache.k.<layer>.<b>, cache.v.<layer>.<b>
//   output   logits f32[B*S, n_vocab]  (or f32[B, n_vocab] with last_row_logits)
#pragma once

#include <string>
#include <vector>

#include "rlx/ir/module.h"
#include "rlx/models/model_config.h"
#include "rlx/models/weight_source.h"

namespace rlx::models {

struct DecoderOptions {
  ir::Dim seq = ir::Dim::symbol(ir::SEQ);  ///< rows per run: symbolic, or 1 for decode
  int64_t ctx = 0;                          ///< KV-cache rows; 0 = no cache (attend within the run)
  ir::DType kv_dtype = ir::DType::F32;      ///< KV-cache storage: f32, f16 or bf16
  bool last_row_logits = false;             ///< project only the rows selected by input "last"
  int64_t batch = 1;                        ///< sequences per run (> 1 needs ctx > 0)
  ir::FusionPolicy policy = ir::FusionPolicy::Direct;
};

struct BuiltModel {
  ir::HirModule hir;
  ModelConfig config;
  std::vector<std::string> param_names;   ///< every Param of the graph, in order
  std::vector<std::string> handle_names;  ///< KV-cache handles, in order (k0, v0, k1, v1, ...)
};

/// Names of the KV-cache handles of layer `il` (of sequence `seq` in a batched graph;
/// -1 = the unbatched name).
std::string kv_handle_name(char kv, int64_t il, int64_t seq = -1);

Expected<BuiltModel> build_decoder(const ModelConfig& config, const WeightSource& weights,
                                   const DecoderOptions& options);

}  // namespace rlx::models
