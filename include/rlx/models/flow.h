// Flow: the blocks transformers are assembled from — token embedding, attention (GQA,
// RoPE, causal / sliding masks, q-k norms, q-k-v biases, softcap, a KV cache per
// sequence), feed-forward (SwiGLU, GeGLU, GELU, mixture of experts), RMSNorm / LayerNorm, residual adds and
// the LM head (tied or not, with an optional final softcap). Each block declares its
// parameters with the dtype and shape the WeightSource stores (packed quantized weights
// stay packed and lower to DequantMatMul; a shape that differs from what the block
// needs is an error naming the tensor) and appends HIR. finish() yields a BuiltModel:
// the HIR module plus its parameter and handle tables.
//
// A family builder is a short composition of blocks (see decoder.cpp):
//
//   Flow f(weights);
//   ValueId ids = f.input_ids("tokens", rows), pos = f.input_ids("pos", rows);
//   ASSIGN_OR_RETURN(ValueId x, f.embedding(ids, "token_embd.weight", vocab, dim));
//   for (int il = 0; il < n_layer; ++il) {
//     ASSIGN_OR_RETURN(ValueId h, f.rms_norm(x, fmt::format("blk.{}.attn_norm.weight", il), eps));
//     ASSIGN_OR_RETURN(h, f.attention(h, pos, attention_spec(il)));
//     x = f.residual(x, h);
//     ...
//   }
//   ASSIGN_OR_RETURN(ValueId logits, f.lm_head(x, "output.weight", vocab, dim));
//   return f.finish({{logits, "logits"}}, policy);
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "rlx/ir/builder.h"
#include "rlx/ir/module.h"
#include "rlx/models/model_config.h"
#include "rlx/models/weight_source.h"

namespace rlx::models {

/// A HIR module and the tables generation needs to feed it.
struct BuiltModel {
  ir::HirModule hir;
  ModelConfig config;                     ///< set by family builders (default for others)
  std::vector<std::string> param_names;   ///< every Param of the graph, in order
  std::vector<std::string> handle_names;  ///< state handles in order: KV caches (k0, v0, ...), recurrent states
};

/// Names of the KV-cache handles of layer `il`: cache.k.<il>, cache.v.<il>. One handle
/// holds every sequence of a batched graph (its first axis).
std::string kv_handle_name(char kv, int64_t il);

/// Name of a recurrent-state handle of layer `il`: kind "conv" (the short convolution's
/// last inputs) or "ssm" (the delta rule's state): cache.<kind>.<il>. One handle holds
/// every sequence of a batched graph (its first axis).
std::string state_handle_name(const char* kind, int64_t il);

/// Parameter names of one attention block, relative to its prefix ("blk.3" ->
/// "blk.3.attn_q.weight"); the GGUF convention by default.
struct AttentionNames {
  std::string q = "attn_q.weight", k = "attn_k.weight", v = "attn_v.weight", o = "attn_output.weight";
  std::string q_bias = "attn_q.bias", k_bias = "attn_k.bias", v_bias = "attn_v.bias";
  std::string o_bias = "attn_output.bias";  ///< read when AttentionSpec::o_bias
  std::string q_norm = "attn_q_norm.weight", k_norm = "attn_k_norm.weight";
  /// Latent attention (attrs.latent()): W_q is q_b when q is low-rank, else q.
  std::string q_a = "attn_q_a.weight", q_a_norm = "attn_q_a_norm.weight", q_b = "attn_q_b.weight";
  std::string kv_a = "attn_kv_a_mqa.weight", kv_a_norm = "attn_kv_a_norm.weight", kv_b = "attn_kv_b.weight";
};

struct AttentionSpec {
  std::string prefix;              ///< e.g. "blk.3"; also the block's label
  int64_t layer = 0;               ///< names the KV-cache handles
  ir::AttentionBlockAttrs attrs;   ///< heads, head_dim, mask, rope, biases, q-k norm, softcap ...
  int64_t ctx = 0;                 ///< KV-cache rows per sequence (0: attend within the run)
  ir::DType kv_dtype = ir::DType::F32;
  int64_t batch = 1;               ///< sequences per run (each with its own cache)
  AttentionNames names;
  /// The encoder form (attrs.key_lengths): i32[B] valid keys per sequence; x holds B
  /// sequences of S rows and pos is i32[S].
  ir::ValueId kv_len = ir::kNoValue;
  /// Add <prefix>.<names.o_bias> to the output projection (BERT).
  bool o_bias = false;
  /// Compact rows (attrs.compact_rows; batch > 1 with a cache): x holds the run's T real
  /// rows and pos its batch*S padded positions; slot_rows i32[batch*S] names the compact
  /// row of each padded row, row_slots i32[T] the padded row of each compact row.
  ir::ValueId slot_rows = ir::kNoValue;
  ir::ValueId row_slots = ir::kNoValue;
};

/// A gated delta-net token mixer (Qwen3.5's linear attention) over x [B*S, dim], with
/// the GGUF names of llama.cpp's qwen35 tensors under `prefix`: attn_qkv [2*Hk*Dk + Hv*Dv,
/// dim], attn_gate (z) [Hv*Dv, dim], ssm_beta / ssm_alpha [Hv, dim], ssm_conv1d
/// [conv channels, K], ssm_dt.bias [Hv], ssm_a [Hv] (= -exp(A_log)), ssm_norm [Dv],
/// ssm_out [dim, Hv*Dv]. It declares two state handles (state_handle_name) of `batch`
/// sequences and reads `seq` i32[B, 2] (tokens seen, real rows per sequence).
///   qkv = conv1d_causal(x attn_qkvᵀ) (SiLU);  q, k, v = split(qkv)
///   beta = sigmoid(x ssm_betaᵀ);  g = ssm_a * softplus(x ssm_alphaᵀ + ssm_dt)
///   o = gated_delta_rule(q, k, v, g, beta);  y = ssm_out(rms_norm_head(o) * silu(x attn_gateᵀ))
struct DeltaNetSpec {
  std::string prefix;  ///< e.g. "blk.0"
  int64_t layer = 0;   ///< names the state handles
  int64_t dim = 0;
  int64_t n_k_heads = 0, n_v_heads = 0, head_k_dim = 0, head_v_dim = 0, conv_kernel = 4;
  double norm_eps = 1e-6;
  int64_t batch = 1;   ///< sequences per run
  int64_t chunk = 64;  ///< rows per chunk of the delta rule's prefill form (0: token by token)
};

enum class FfnBlock : uint8_t {
  SwiGLU,  ///< down(silu(gate(x)) * up(x))
  GeGLU,   ///< down(gelu(gate(x)) * up(x))
  Gelu,    ///< down(gelu(up(x))), no gate
};

struct FfnSpec {
  std::string prefix;  ///< e.g. "blk.3"; weights <prefix>.ffn_gate/ffn_up/ffn_down.weight
  FfnBlock kind = FfnBlock::SwiGLU;
  int64_t dim = 0, hidden = 0;
  /// GeGLU: evaluate GELU on f16-rounded input and round its output to f16, as
  /// llama.cpp's CPU backend does through its f16 table.
  bool gelu_f16_rounding = false;
  /// GELU by its tanh approximation (GPT-2, Gemma) or exactly through erf (BERT).
  bool tanh_approx = true;
};

/// A mixture-of-experts feed-forward block: router <prefix>.ffn_gate_inp.weight
/// [n_expert, dim], stacked experts <prefix>.ffn_gate_exps / ffn_up_exps.weight
/// [n_expert, hidden, dim] and ffn_down_exps.weight [n_expert, dim, hidden] (the GGUF
/// layout); softmax gating, the n_used most probable experts per token.
///
/// With shared_hidden > 0, a shared expert every token passes through is added
/// (Qwen2-MoE / Qwen3-Next): the SwiGLU FFN ffn_{gate,up,down}_shexp.weight of width
/// shared_hidden, scaled per token by sigmoid(x . ffn_gate_inp_shexp.weight [dim]) when
/// shared_gate. It is a dense FFN, composed from the dense blocks (their fused kernels),
/// not a part of moe_ffn.
struct MoeSpec {
  std::string prefix;  ///< e.g. "blk.3"
  int64_t dim = 0, hidden = 0;
  int64_t n_expert = 0, n_used = 0;
  bool normalize = false;  ///< renormalize the chosen experts' weights to sum 1
  ir::ActKind act = ir::ActKind::Silu;  ///< Silu: SwiGLU experts; GeluTanh: GeGLU experts
  int64_t shared_hidden = 0;  ///< the shared expert's width (0: none)
  bool shared_gate = false;   ///< scale the shared expert by its sigmoid gate
};

class Flow {
 public:
  explicit Flow(const WeightSource& weights) : weights_(weights) {}

  /// The underlying builder, for ops between blocks (sticky errors surface in finish).
  ir::GraphBuilder& builder() { return b_; }

  /// An i32[rows] input (token ids, positions, row indices).
  ir::ValueId input_ids(const std::string& name, ir::Dim rows);
  /// Declares parameter `name` with the dtype the source stores; its shape must equal
  /// `shape`. Declaring a name twice returns the same value (tied weights).
  Expected<ir::ValueId> param(const std::string& name, std::vector<int64_t> shape);

  /// table[vocab, dim][ids] as f32, times `scale` when it is not 1 (Gemma's sqrt(dim)).
  Expected<ir::ValueId> embedding(ir::ValueId ids, const std::string& table, int64_t vocab, int64_t dim,
                                  float scale = 1.0f);
  /// RMSNorm over the last axis with weight[dim] `weight`.
  Expected<ir::ValueId> rms_norm(ir::ValueId x, const std::string& weight, double eps);
  /// LayerNorm over the last axis with weight[dim] and, when `bias` is not empty, bias[dim].
  Expected<ir::ValueId> layer_norm(ir::ValueId x, const std::string& weight, const std::string& bias, double eps);
  /// Self-attention of the rows of x ([B*S, dim] with pos i32[B*S]), including the q/k/v
  /// and output projections; with spec.ctx > 0 it declares its KV-cache handles
  /// (kv_handle_name) and writes the rows' keys and values at their positions.
  Expected<ir::ValueId> attention(ir::ValueId x, ir::ValueId pos, const AttentionSpec& spec);
  /// The gated delta-net token mixer (see DeltaNetSpec).
  Expected<ir::ValueId> delta_net(ir::ValueId x, ir::ValueId seq, const DeltaNetSpec& spec);
  /// The feed-forward block.
  Expected<ir::ValueId> ffn(ir::ValueId x, const FfnSpec& spec);
  /// The mixture-of-experts feed-forward block (x [rows, dim]).
  Expected<ir::ValueId> moe_ffn(ir::ValueId x, const MoeSpec& spec);
  /// act(x . weight[out, in]^T + bias[out]) (no bias when `bias` is empty).
  Expected<ir::ValueId> dense(ir::ValueId x, const std::string& weight, const std::string& bias, int64_t out,
                              int64_t in, ir::ActKind act, const std::string& label);
  /// x + y.
  ir::ValueId residual(ir::ValueId x, ir::ValueId y) { return b_.add(x, y); }
  /// x . weight[vocab, dim]^T (the embedding table when tied), then
  /// cap * tanh(logits / cap) when final_softcap > 0.
  Expected<ir::ValueId> lm_head(ir::ValueId x, const std::string& weight, int64_t vocab, int64_t dim,
                                double final_softcap = 0);

  /// Marks the outputs and builds the module (the first builder error, if any).
  Expected<BuiltModel> finish(const std::vector<std::pair<ir::ValueId, std::string>>& outputs,
                              ir::FusionPolicy policy);

 private:
  /// The static last dim of x, or an error naming `block` (also the builder's first error).
  Expected<int64_t> feature_dim(ir::ValueId x, const std::string& block);
  Expected<ir::ValueId> linear(ir::ValueId x, const std::string& weight, int64_t out, int64_t in,
                               const std::string& label);

  const WeightSource& weights_;
  ir::GraphBuilder b_;
  std::map<std::string, ir::ValueId> param_ids_;
  std::vector<std::string> params_;
  std::vector<std::string> handles_;
};

}  // namespace rlx::models
