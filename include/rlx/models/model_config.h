// Architecture description of a transformer — decoder-only (Llama family and
// relatives) or encoder (BERT, NomicBERT, ModernBERT) — read from GGUF metadata or a
// Hugging Face config.json. Model builders turn it into HIR; nothing here touches
// weights.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/ir/op.h"

namespace rlx::formats {
class GgufFile;
}

namespace rlx::models {

enum class Arch : uint8_t {
  Llama, Qwen2, Qwen3, Gemma, Gemma2, Gemma3, Phi3, Qwen3Moe, Bert, NomicBert, ModernBert,
  /// Qwen3.5 (qwen3_5_text, qwen3_5_moe_text) and Qwen3-Next (qwen3_next): gated delta-net
  /// layers between gated full-attention layers
  Qwen35,
  /// MiniCPM3: multi-head latent attention (latent_kv_rank), scaled embeddings, residual
  /// branches and logits
  MiniCPM3,
};
const char* arch_name(Arch a);
/// True for the bidirectional encoders (Bert, NomicBert, ModernBert): no LM head, no
/// KV cache; run by EncoderModel.
bool is_encoder(Arch a);

/// SwiGLU / GeGLU: gated (gate, up, down); Gelu: up, GELU, down (BERT).
enum class FfnKind : uint8_t { SwiGLU, GeGLU, Gelu };

/// How an encoder's token states become one embedding per text.
enum class Pooling : uint8_t {
  None,  ///< every token's state
  Cls,   ///< the first token's state
  Mean,  ///< the mean over the text's tokens (padding excluded)
  Last,  ///< the last token's state
};
const char* pooling_name(Pooling p);
/// "none", "cls", "mean", "last"; an error names the word otherwise.
Expected<Pooling> parse_pooling(std::string_view word);

/// Which layers use a sliding-window attention mask.
enum class SlidingPattern : uint8_t {
  None,       ///< every layer global
  All,        ///< every layer windowed (Mistral)
  EvenLayers, ///< layers 0, 2, 4 ... windowed (Gemma 2)
  Gemma3,     ///< five local layers then one global ((il + 1) % 6 != 0 is local)
};

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string name;          ///< general.name when present
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;      ///< may differ from n_embd / n_head (Qwen3, Gemma)
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  double norm_eps = 1e-5;
  ir::RopeAttrs rope;        ///< head_dim, n_rot, layout, theta, scaling, per-pair factors
  /// LongRoPE (Phi-3): the per-pair factors for contexts beyond rope.original_context;
  /// rope.freq_factors then holds the short ones. Empty for every other model.
  std::vector<double> rope_long_factors;
  double rope_theta_local = 0;  ///< Gemma 3 local layers (0 = same as rope.theta)
  bool tied_embeddings = false;
  bool qkv_bias = false;
  bool qk_norm = false;
  /// Phi-3: q, k and v are one stored matrix (attn_qkv, rows q | k | v) and the FFN's
  /// gate and up another (ffn_up, rows gate | up); the weights are served as row views.
  bool fused_projections = false;
  FfnKind ffn = FfnKind::SwiGLU;
  /// GeGLU only: round the GELU input and output to f16, as llama.cpp's CPU backend
  /// does (it evaluates GELU through an f16 table). Set for GGUF files so that their
  /// logits match the engine they were made for; HF checkpoints compute in f32.
  bool gelu_f16_rounding = false;
  bool embed_scale = false;       ///< multiply embeddings by sqrt(n_embd) (Gemma)
  bool post_norms = false;        ///< RMSNorm after attention and FFN, before the residual add (Gemma 2/3)
  double attn_softcap = 0;        ///< 0 = off
  double final_softcap = 0;       ///< 0 = off
  double attn_scale = 0;          ///< 0 = 1/sqrt(head_dim)
  bool prescale_q = false;        ///< scale q before q.k (llama.cpp's Gemma 2 graph; GGUF only)
  int64_t sliding_window = 0;
  SlidingPattern sliding = SlidingPattern::None;
  std::vector<bool> sliding_layers;  ///< when non-empty, overrides `sliding` per layer
  int64_t bos_id = -1;
  int64_t eos_id = -1;

  // Mixture of experts (n_expert == 0: every layer has the dense FFN). An MoE layer's
  // FFN is a router (blk.N.ffn_gate_inp [n_expert, n_embd]) choosing n_expert_used
  // experts per token by softmax probability, and stacked SwiGLU experts
  // (blk.N.ffn_gate_exps / ffn_up_exps [n_expert, n_ff_expert, n_embd], ffn_down_exps
  // [n_expert, n_embd, n_ff_expert]).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_expert = 0;          ///< each expert's hidden width
  bool expert_weights_norm = false; ///< renormalize the chosen experts' weights to sum 1
  std::vector<bool> dense_layers;   ///< when non-empty: true where a layer keeps the dense FFN
  /// A shared expert every token passes through beside the routed ones (Qwen3.5-MoE,
  /// Qwen3-Next): blk.N.ffn_{gate,up,down}_shexp of this width (0: none), scaled by
  /// sigmoid(x . blk.N.ffn_gate_inp_shexp) when shared_expert_gate.
  int64_t n_ff_shared = 0;
  bool shared_expert_gate = false;

  // Hybrid linear attention (Qwen3.5, Qwen3-Next): layers whose token mixer is a gated delta-net
  // with a recurrent state instead of attention with a KV cache. Such a layer projects
  // x to q, k (ssm_n_k_heads x ssm_head_k_dim each), v and the output gate z
  // (ssm_n_v_heads x ssm_head_v_dim), runs a causal depthwise conv (ssm_conv_kernel,
  // SiLU) over q|k|v, then the gated delta rule, a gated RMSNorm and the output projection.
  std::vector<bool> recurrent_layers;  ///< when non-empty: true where a layer is a delta-net
  int64_t ssm_conv_kernel = 0;
  int64_t ssm_n_k_heads = 0, ssm_n_v_heads = 0;
  int64_t ssm_head_k_dim = 0, ssm_head_v_dim = 0;
  /// The attention layers' q projection holds a per-head output gate: rows of head h are
  /// [q_h | gate_h], and the attention output is multiplied by sigmoid(gate) (Qwen3.5).
  bool attn_output_gate = false;
  /// Qwen3-Next's checkpoint layout of a delta-net layer's input projections: q, k, v and z
  /// are one matrix (in_proj_qkvz) and b, a another (in_proj_ba), each grouped by key head —
  /// per group g, rows [q_g (Dk) | k_g (Dk) | v_g (Hv/Hk x Dv) | z_g (Hv/Hk x Dv)] and
  /// [b_g (Hv/Hk) | a_g (Hv/Hk)]. The HF weight source serves them regrouped as the
  /// tensors above (attn_qkv, attn_gate, ssm_beta, ssm_alpha); the graph is Qwen3.5's.
  bool ssm_grouped_projections = false;

  // Multi-head latent attention (MiniCPM3; latent_kv_rank > 0): head_dim is a query /
  // key head's width, rope.n_rot its rotary part (the last n_rot dims; the first
  // head_dim - n_rot are not turned), and n_head_kv equals n_head. q is projected through
  // a rank-latent_q_rank bottleneck (blk.N.attn_q_a, attn_q_a_norm, attn_q_b; 0: attn_q
  // directly), keys and values expanded per head from one rank-latent_kv_rank latent
  // (attn_kv_a_mqa, attn_kv_a_norm, attn_kv_b); value heads are v_head_dim wide.
  int64_t latent_q_rank = 0;
  int64_t latent_kv_rank = 0;
  int64_t v_head_dim = 0;
  /// Epsilon of the latent RMSNorms (attn_q_a_norm, attn_kv_a_norm): transformers' 1e-6;
  /// llama.cpp's GGUF graph uses norm_eps (key kGgufLatentNormEpsKey says otherwise).
  double latent_norm_eps = 1e-6;
  /// MiniCPM's scales: the embeddings times embedding_scale, every residual branch times
  /// residual_scale before it is added, the final hidden state divided by logit_scale
  /// before the LM head (1: none; GGUF keys <arch>.embedding_scale / residual_scale /
  /// logit_scale).
  double embedding_scale = 1.0;
  double residual_scale = 1.0;
  double logit_scale = 1.0;

  // Encoders (is_encoder(arch)): LayerNorm everywhere, bidirectional attention.
  int64_t n_token_types = 0;      ///< token-type (segment) embeddings, token_types.weight (0: none)
  int64_t n_positions = 0;        ///< learned absolute positions, position_embd.weight (0: rotary)
  bool pre_norm = false;          ///< norm before each block (ModernBERT), else after the residual add (BERT)
  bool norm_bias = true;          ///< the LayerNorms have a bias
  bool linear_bias = false;       ///< q/k/v/output and FFN projections have biases (BERT)
  bool gelu_tanh = false;         ///< GELU by its tanh approximation, else exact (erf)
  Pooling pooling = Pooling::Cls; ///< the model's own pooling (GGUF pooling_type, sentence-transformers)

  /// The rope of a model built for `ctx` positions: LongRoPE's long factors when ctx
  /// exceeds the original context (as llama.cpp picks them), else `rope` itself.
  ir::RopeAttrs rope_for_context(int64_t ctx) const;
  /// True if layer `il` uses the sliding-window mask.
  bool layer_is_sliding(int64_t il) const;
  /// True if layer `il`'s FFN is a mixture of experts.
  bool layer_is_moe(int64_t il) const;
  /// True if layer `il` is a gated delta-net (recurrent state, no KV cache).
  bool layer_is_recurrent(int64_t il) const;
  /// True if any layer keeps a recurrent state.
  bool has_recurrent_layers() const;
  /// True for multi-head latent attention.
  bool latent_attention() const { return latent_kv_rank > 0; }
  /// Values a KV-cache row holds per layer (keys or values): n_head_kv * head_dim, or for
  /// latent attention n_head * max(head_dim, v_head_dim), the width its heads are padded to.
  int64_t kv_width() const;
  /// Checks internal consistency (positive sizes, heads divide, n_rot fits); errors name the field.
  Status validate() const;
  std::string summary() const;
};

/// A GGUF key `rlx convert` writes (true) for decoders whose checkpoint computes GELU
/// exactly; without it RLX rounds a decoder's GELU through f16 as llama.cpp does.
inline constexpr const char* kGgufExactGeluKey = "rlx.gelu_exact";
/// A GGUF key `rlx convert` writes for latent attention (f32): the latent norms' epsilon,
/// where the checkpoint's differs from the model's norm epsilon.
inline constexpr const char* kGgufLatentNormEpsKey = "rlx.latent_norm_rms_epsilon";

/// Reads `general.architecture` and the `<arch>.*` keys of a GGUF file.
/// Unsupported architectures and missing keys are errors naming the file and key.
Expected<ModelConfig> config_from_gguf(const formats::GgufFile& file);

/// Reads a Hugging Face `config.json` (llama, mistral, mixtral, qwen2, qwen3, qwen3_moe,
/// gemma, gemma2, gemma3_text, phi3, qwen3_5_text, qwen3_5_moe_text, qwen3_next, minicpm3; the
/// encoders bert, nomic_bert, modernbert).
/// Errors name the file and the key.
Expected<ModelConfig> config_from_hf(const std::string& config_json_path);

}  // namespace rlx::models
