// Shape and dtype inference of every op kind (infer.cpp): one table of cases, each a
// positive result type or an expected error. A coverage test requires at least one
// positive and one negative case per OpKind, so a new op without cases fails.
#include <gtest/gtest.h>

#include <map>

#include "ir_test_util.h"

namespace rlx::ir {
namespace {

using testing::ty;

// fused_linear flags: a SwiGLU with a norm prologue; rope then the write into a cache.
FusedLinearAttrs swiglu_norm() {
  FusedLinearAttrs a;
  a.swiglu = a.norm = true;
  return a;
}
FusedLinearAttrs stray_rope() {
  FusedLinearAttrs a;
  a.rope_attrs.head_dim = 16;
  return a;
}
FusedLinearAttrs rope_cache() {
  FusedLinearAttrs a;
  a.rope = a.cache_write = true;
  a.rope_attrs.head_dim = a.rope_attrs.n_rot = 16;
  return a;
}

struct InferCase {
  std::string name;
  OpKind op;
  Attrs attrs;
  std::vector<std::string> inputs;  ///< input types, e.g. "f32[SEQ, 64]"
  std::string declared;             ///< declared type ("" = none)
  std::string want;                 ///< result type, or "error: <substring of the message>"
};

RopeAttrs rope(int64_t head_dim, int64_t n_rot) {
  RopeAttrs r;
  r.head_dim = head_dim;
  r.n_rot = n_rot;
  return r;
}

AttentionAttrs attn(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, MaskKind mask = MaskKind::Causal,
                    int64_t window = 0) {
  AttentionAttrs a;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv_heads;
  a.head_dim = head_dim;
  a.mask = mask;
  a.window = window;
  return a;
}

AttentionBlockAttrs block(bool kv_cache) {
  AttentionBlockAttrs b;
  b.attn = attn(4, 2, 16);
  b.rope = rope(16, 16);
  b.kv_cache = kv_cache;
  return b;
}

// Latent attention: 4 heads of q/k [nope 8 | rope 8] and values of 24 (so heads are
// padded to 24), q rank 32, kv rank 16, D 64.
AttentionBlockAttrs latent_block() {
  AttentionBlockAttrs b;
  b.attn = attn(4, 4, 24);
  b.rope = rope(8, 8);
  b.kv_cache = true;
  b.latent_q_rank = 32;
  b.latent_kv_rank = 16;
  b.latent_nope_dim = 8;
  b.latent_rope_dim = 8;
  b.latent_v_dim = 24;
  return b;
}

AttentionBlockAttrs compact_block() {
  AttentionBlockAttrs b = block(true);
  b.batch = 4;
  b.compact_rows = true;
  return b;
}

ConstantAttrs bytes(size_t n) {
  ConstantAttrs c;
  c.data.bytes = std::make_shared<const std::vector<uint8_t>>(n, uint8_t{0});
  return c;
}

RegionAttrs region(std::vector<RegionStep> steps) { return RegionAttrs{std::move(steps)}; }
RegionStep step(OpKind op, uint8_t kind, DType dt, std::vector<int32_t> args) { return {op, kind, dt, std::move(args)}; }

const std::vector<InferCase>& cases() {
  using K = OpKind;
  const uint8_t silu = static_cast<uint8_t>(ActKind::Silu), mul = static_cast<uint8_t>(BinaryKind::Mul);
  static const std::vector<InferCase> all = {
      // boundary
      {"input", K::Input, InputAttrs{"x"}, {}, "f32[BATCH, SEQ, 64]", "f32[BATCH, SEQ, 64]"},
      {"input_packed", K::Input, InputAttrs{"x"}, {}, "q4_0[2, 32]", "error: only params may have packed dtypes"},
      {"input_operand", K::Input, InputAttrs{"x"}, {"f32[2]"}, "f32[2]", "error: input takes 0..0 inputs, got 1"},
      {"param_packed", K::Param, ParamAttrs{"w"}, {}, "q4_k[128, 256]", "q4_k[128, 256]"},
      {"param_packed_cols", K::Param, ParamAttrs{"w"}, {}, "q4_0[128, 33]",
       "error: packed param q4_0[128, 33] must be a static [.., rows, cols] with cols a multiple of 32"},
      {"param_packed_symbolic", K::Param, ParamAttrs{"w"}, {}, "q8_0[SEQ, 64]", "error: packed param q8_0[SEQ, 64]"},
      {"constant", K::Constant, bytes(8), {}, "f32[2]", "f32[2]"},
      {"constant_packed", K::Constant, bytes(18), {}, "q4_0[1, 32]", "q4_0[1, 32]"},
      {"constant_size", K::Constant, bytes(6), {}, "f32[2]", "error: constant f32[2] needs 8 bytes, has 6"},
      {"constant_symbolic", K::Constant, bytes(8), {}, "f32[SEQ]", "error: constant shape must be static"},
      {"handle", K::Handle, HandleAttrs{"kv"}, {}, "f16[PAST_SEQ, 512]", "f16[PAST_SEQ, 512]"},
      {"handle_packed", K::Handle, HandleAttrs{"kv"}, {}, "q8_0[4, 32]", "error: only params may have packed dtypes"},
      // elementwise
      {"activation", K::Activation, ActivationAttrs{ActKind::Gelu}, {"bf16[SEQ, 64]"}, "", "bf16[SEQ, 64]"},
      {"activation_int", K::Activation, ActivationAttrs{}, {"i32[4]"}, "", "error: activation input must be a float type"},
      {"binary_broadcast", K::Binary, BinaryAttrs{}, {"f32[SEQ, 1]", "f32[64]"}, "", "f32[SEQ, 64]"},
      {"binary_symbolic", K::Binary, BinaryAttrs{}, {"f32[1, SEQ]", "f32[BATCH, 1]"}, "", "f32[BATCH, SEQ]"},
      {"binary_scalar", K::Binary, BinaryAttrs{BinaryKind::Pow}, {"f32[2*SEQ, 8]", "f32[]"}, "", "f32[2*SEQ, 8]"},
      {"binary_no_broadcast", K::Binary, BinaryAttrs{}, {"f32[SEQ]", "f32[2*SEQ]"}, "",
       "error: shapes [SEQ] and [2*SEQ] do not broadcast"},
      {"binary_dtypes", K::Binary, BinaryAttrs{}, {"f32[4]", "f16[4]"}, "", "error: dtype mismatch: f32[4] vs f16[4]"},
      {"binary_bool", K::Binary, BinaryAttrs{}, {"bool[4]", "bool[4]"}, "", "error: binary ops need numeric inputs"},
      {"binary_arity", K::Binary, BinaryAttrs{}, {"f32[4]"}, "", "error: binary takes 2..2 inputs, got 1"},
      {"compare", K::Compare, CompareAttrs{CompareKind::Ge}, {"i32[SEQ, 1]", "i32[1, 8]"}, "", "bool[SEQ, 8]"},
      {"compare_dtypes", K::Compare, CompareAttrs{}, {"i32[4]", "i64[4]"}, "", "error: dtype mismatch"},
      {"where", K::Where, NoAttrs{}, {"bool[SEQ, 1]", "f32[1, 64]", "f32[SEQ, 64]"}, "", "f32[SEQ, 64]"},
      {"where_cond", K::Where, NoAttrs{}, {"f32[4]", "f32[4]", "f32[4]"}, "", "error: where condition must be bool"},
      {"cast", K::Cast, NoAttrs{}, {"f32[SEQ, 4]"}, "f16[]", "f16[SEQ, 4]"},
      {"cast_packed", K::Cast, NoAttrs{}, {"f32[1, 32]"}, "q4_0[]", "error: cast to/from packed types is not supported"},
      // compute
      {"matmul_batched", K::MatMul, MatMulAttrs{}, {"f32[BATCH, 1, SEQ, 64]", "f32[8, 64, 32]"}, "",
       "f32[BATCH, 8, SEQ, 32]"},
      {"matmul_transposes", K::MatMul, MatMulAttrs{true, true}, {"f32[64, SEQ]", "f32[32, 64]"}, "", "f32[SEQ, 32]"},
      {"matmul_inner", K::MatMul, MatMulAttrs{}, {"f32[SEQ, 64]", "f32[32, 64]"}, "", "error: matmul inner dims differ"},
      {"matmul_rank", K::MatMul, MatMulAttrs{}, {"f32[64]", "f32[64, 2]"}, "", "error: matmul operands need rank >= 2"},
      {"matmul_batch", K::MatMul, MatMulAttrs{}, {"f32[3, 2, 4]", "f32[5, 4, 2]"}, "",
       "error: matmul batch dims do not broadcast"},
      {"dequant_matmul", K::DequantMatMul, NoAttrs{}, {"f32[SEQ, 64]", "q8_0[128, 64]"}, "", "f32[SEQ, 128]"},
      {"dequant_matmul_f16", K::DequantMatMul, NoAttrs{}, {"f32[SEQ, 64]", "f16[128, 64]"}, "", "f32[SEQ, 128]"},
      {"dequant_matmul_f32", K::DequantMatMul, NoAttrs{}, {"f32[SEQ, 64]", "f32[128, 64]"}, "",
       "error: dequant_matmul weight must be packed, f16 or bf16"},
      {"dequant_matmul_block", K::DequantMatMul, NoAttrs{}, {"f32[SEQ, 48]", "q4_0[128, 48]"}, "",
       "error: K = 48 is not a multiple of q4_0's block size 32"},
      {"param_packed_experts", K::Param, ParamAttrs{"w"}, {}, "q8_0[8, 96, 128]", "q8_0[8, 96, 128]"},
      // mixture of experts
      {"moe_route", K::MoeRoute, MoeRouteAttrs{2, MoeGating::Softmax, true}, {"f16[SEQ, 8]"}, "", "f32[SEQ, 8]"},
      {"moe_route_k", K::MoeRoute, MoeRouteAttrs{9, MoeGating::Softmax, true}, {"f32[SEQ, 8]"}, "",
       "error: moe_route k=9 out of range for 8 experts"},
      {"moe_route_rank", K::MoeRoute, MoeRouteAttrs{}, {"f32[8]"}, "", "error: moe_route logits must be [tokens, experts]"},
      {"moe_ffn", K::MoeFfn, MoeFfnAttrs{},
       {"f32[SEQ, 128]", "f32[SEQ, 8]", "q8_0[8, 96, 128]", "q8_0[8, 96, 128]", "q8_0[8, 128, 96]"}, "", "f32[SEQ, 128]"},
      {"moe_ffn_block", K::MoeFfn, MoeFfnAttrs{},
       {"f32[SEQ, 128]", "f32[SEQ, 8]", "q8_0[8, 96, 128]", "q8_0[8, 96, 128]", "q4_k[8, 128, 96]"}, "",
       "error: 96 columns are not a multiple of q4_k's block size 256"},
      {"moe_ffn_half", K::MoeFfn, MoeFfnAttrs{ActKind::GeluTanh},
       {"f32[SEQ, 64]", "f32[SEQ, 4]", "f16[4, 32, 64]", "f16[4, 32, 64]", "bf16[4, 64, 32]"}, "", "f32[SEQ, 64]"},
      {"moe_ffn_experts", K::MoeFfn, MoeFfnAttrs{},
       {"f32[SEQ, 64]", "f32[SEQ, 4]", "f32[8, 32, 64]", "f32[8, 32, 64]", "f32[8, 64, 32]"}, "",
       "error: moe_ffn expert weight 2 must be [4, rows, cols]"},
      {"moe_ffn_down", K::MoeFfn, MoeFfnAttrs{},
       {"f32[SEQ, 64]", "f32[SEQ, 4]", "f32[4, 32, 64]", "f32[4, 32, 64]", "f32[4, 32, 64]"}, "",
       "error: moe_ffn down weight must be [4, 64, 32]"},
      {"moe_ffn_act", K::MoeFfn, MoeFfnAttrs{ActKind::Tanh},
       {"f32[SEQ, 64]", "f32[SEQ, 4]", "f32[4, 32, 64]", "f32[4, 32, 64]", "f32[4, 64, 32]"}, "",
       "error: moe_ffn act must be silu, gelu or gelu_tanh"},
      {"moe_ffn_route", K::MoeFfn, MoeFfnAttrs{},
       {"f32[SEQ, 64]", "f32[3, 4]", "f32[4, 32, 64]", "f32[4, 32, 64]", "f32[4, 64, 32]"}, "",
       "error: moe_ffn route must be f32[SEQ, experts]"},
      // recurrent state (gated delta-net)
      {"causal_conv1d", K::CausalConv1d, CausalConvAttrs{},
       {"f32[2, 3, 64]", "f32[2*SEQ, 64]", "f32[64, 4]", "i32[2, 2]"}, "", "f32[2*SEQ, 64]"},
      {"causal_conv1d_kernel", K::CausalConv1d, CausalConvAttrs{},
       {"f32[2, 2, 64]", "f32[2*SEQ, 64]", "f32[64, 4]", "i32[2, 2]"}, "",
       "error: causal_conv1d state must be f32[B, 3, 64] for kernel 4, got f32[2, 2, 64]"},
      {"causal_conv1d_seq", K::CausalConv1d, CausalConvAttrs{},
       {"f32[2, 3, 64]", "f32[2*SEQ, 64]", "f32[64, 4]", "i32[3, 2]"}, "",
       "error: causal_conv1d seq must be i32[2, 2] (tokens seen, real rows per sequence), got i32[3, 2]"},
      {"causal_conv1d_act", K::CausalConv1d, CausalConvAttrs{ActKind::Gelu},
       {"f32[1, 3, 64]", "f32[SEQ, 64]", "f32[64, 4]", "i32[1, 2]"}, "",
       "error: causal_conv1d act must be identity or silu, got gelu"},
      {"gated_delta_rule", K::GatedDeltaRule, DeltaRuleAttrs{16, 8, 64, true, 0},
       {"f32[1, 4, 16, 8]", "f32[SEQ, 32]", "f32[SEQ, 32]", "f32[SEQ, 32]", "f32[SEQ, 4]", "f32[SEQ, 4]", "i32[1, 2]"},
       "", "f32[SEQ, 32]"},
      {"gated_delta_rule_gate", K::GatedDeltaRule, DeltaRuleAttrs{16, 8, 64, true, 0},
       {"f32[1, 4, 16, 8]", "f32[SEQ, 32]", "f32[SEQ, 32]", "f32[SEQ, 32]", "f32[SEQ, 3]", "f32[SEQ, 4]", "i32[1, 2]"},
       "", "error: gated_delta_rule g f32[SEQ, 3] and beta f32[SEQ, 4] must be [rows, 4]"},
      {"gated_delta_rule_state", K::GatedDeltaRule, DeltaRuleAttrs{16, 8, 64, true, 0},
       {"f32[1, 4, 8, 8]", "f32[SEQ, 32]", "f32[SEQ, 32]", "f32[SEQ, 32]", "f32[SEQ, 4]", "f32[SEQ, 4]", "i32[1, 2]"},
       "", "error: gated_delta_rule state must be f32[B, 4, 16, 8]"},
      {"gated_delta_rule_heads", K::GatedDeltaRule, DeltaRuleAttrs{16, 8, 64, true, 0},
       {"f32[1, 3, 16, 8]", "f32[SEQ, 32]", "f32[SEQ, 32]", "f32[SEQ, 24]", "f32[SEQ, 3]", "f32[SEQ, 3]", "i32[1, 2]"},
       "", "error: gated_delta_rule: 3 value heads are not a multiple of 2 key heads"},
      // reductions and norms
      {"reduce", K::Reduce, ReduceAttrs{ReduceKind::Sum, {0, 2}, false}, {"f32[BATCH, SEQ, 64]"}, "", "f32[SEQ]"},
      {"reduce_keep", K::Reduce, ReduceAttrs{ReduceKind::Max, {0, -1}, true}, {"f32[BATCH, SEQ, 64]"}, "",
       "f32[1, SEQ, 1]"},
      {"reduce_axis", K::Reduce, ReduceAttrs{ReduceKind::Sum, {3}, false}, {"f32[2, 3, 4]"}, "",
       "error: reduce axis 3 out of range for f32[2, 3, 4]"},
      {"reduce_repeat", K::Reduce, ReduceAttrs{ReduceKind::Sum, {2, -1}, false}, {"f32[2, 3, 4]"}, "",
       "error: reduce axis -1 repeated"},
      {"reduce_none", K::Reduce, ReduceAttrs{}, {"f32[2]"}, "", "error: reduce needs at least one axis"},
      {"reduce_mean_int", K::Reduce, ReduceAttrs{ReduceKind::Mean, {0}, false}, {"i32[2]"}, "",
       "error: mean input must be a float type"},
      {"softmax", K::Softmax, SoftmaxAttrs{0}, {"f32[SEQ, 64]"}, "", "f32[SEQ, 64]"},
      {"softmax_axis", K::Softmax, SoftmaxAttrs{2}, {"f32[SEQ, 64]"}, "", "error: softmax axis out of range"},
      {"cumsum", K::Cumsum, CumsumAttrs{-1, true}, {"i32[SEQ]"}, "", "i32[SEQ]"},
      {"cumsum_bool", K::Cumsum, CumsumAttrs{}, {"bool[SEQ]"}, "", "error: cumsum needs a numeric input"},
      {"topk_indices", K::TopK, TopKAttrs{4, false}, {"f32[SEQ, 64]"}, "", "i32[SEQ, 4]"},
      {"topk_values", K::TopK, TopKAttrs{4, true}, {"f16[SEQ, 64]"}, "", "f16[SEQ, 4]"},
      {"topk_k", K::TopK, TopKAttrs{65, false}, {"f32[SEQ, 64]"}, "", "error: topk k=65 out of range for last dim 64"},
      {"topk_zero", K::TopK, TopKAttrs{0, false}, {"f32[SEQ, 64]"}, "", "error: topk k=0 out of range"},
      {"topk_finite_check", K::TopK, TopKAttrs{1, false, true}, {"f32[SEQ, 64]"}, "", "i32[SEQ, 1]"},
      {"topk_finite_check_k", K::TopK, TopKAttrs{2, false, true}, {"f32[SEQ, 64]"}, "",
       "error: topk finite_check needs k=1 and indices (values=false)"},
      {"topk_finite_check_values", K::TopK, TopKAttrs{1, true, true}, {"f32[SEQ, 64]"}, "",
       "error: topk finite_check needs k=1 and indices (values=false)"},
      {"all_reduce", K::AllReduce, CollectiveAttrs{2}, {"f16[SEQ, 64]"}, "", "f16[SEQ, 64]"},
      {"all_reduce_ints", K::AllReduce, CollectiveAttrs{2}, {"i32[SEQ]"}, "", "error: all_reduce input must be a float type"},
      {"all_reduce_world", K::AllReduce, CollectiveAttrs{1}, {"f32[4]"}, "",
       "error: all_reduce needs a group of >= 2 ranks, got world=1"},
      {"all_gather", K::AllGather, CollectiveAttrs{4}, {"i32[SEQ, 3]"}, "", "i32[4, SEQ, 3]"},
      {"all_gather_packed", K::AllGather, CollectiveAttrs{2}, {"q8_0[4, 64]"}, "", "error: all_gather of packed q8_0[4, 64]"},
      {"sample", K::Sample, NoAttrs{}, {"f32[SEQ, 64]", "f32[SEQ, 5]"}, "", "i32[SEQ, 1]"},
      {"sample_f16", K::Sample, NoAttrs{}, {"f16[2, 3, 64]", "f32[2, 3, 5]"}, "", "i32[2, 3, 1]"},
      {"sample_params_shape", K::Sample, NoAttrs{}, {"f32[2, 64]", "f32[2, 1]"}, "",
       "error: sample params must be f32[2, 5] (draw, temperature, top_k, top_p, min_p), got f32[2, 1]"},
      {"sample_params_dtype", K::Sample, NoAttrs{}, {"f32[2, 64]", "f16[2, 5]"}, "",
       "error: sample params must be f32[2, 5] (draw, temperature, top_k, top_p, min_p), got f16[2, 5]"},
      {"sample_empty", K::Sample, NoAttrs{}, {"f32[2, 0]", "f32[2, 5]"}, "",
       "error: sample needs at least one token in the last dim"},
      {"sample_ints", K::Sample, NoAttrs{}, {"i32[2, 64]", "f32[2, 5]"}, "", "error: sample logits must be a float type"},
      {"layer_norm", K::LayerNorm, NormAttrs{}, {"f32[SEQ, 64]", "f32[64]", "f32[64]"}, "", "f32[SEQ, 64]"},
      {"layer_norm_beta", K::LayerNorm, NormAttrs{}, {"f32[SEQ, 64]", "f32[64]", "f32[32]"}, "",
       "error: norm beta must be [64], got f32[32]"},
      {"layer_norm_scalar", K::LayerNorm, NormAttrs{}, {"f32[]", "f32[1]"}, "", "error: norm input must have rank >= 1"},
      {"rms_norm", K::RmsNorm, NormAttrs{1e-6}, {"bf16[BATCH, SEQ, 64]", "bf16[64]"}, "", "bf16[BATCH, SEQ, 64]"},
      {"rms_norm_gamma", K::RmsNorm, NormAttrs{}, {"f32[SEQ, 64]", "f32[65]"}, "",
       "error: norm gamma must be [64], got f32[65]"},
      {"rope", K::Rope, rope(32, 16), {"f32[SEQ, 128]", "i32[SEQ]"}, "", "f32[SEQ, 128]"},
      {"rope_n_rot", K::Rope, rope(32, 15), {"f32[SEQ, 128]", "i32[SEQ]"}, "",
       "error: rope needs 0 < n_rot <= head_dim and n_rot even (n_rot=15, head_dim=32)"},
      {"rope_width", K::Rope, rope(32, 32), {"f32[SEQ, 120]", "i32[SEQ]"}, "",
       "error: rope width 120 is not a multiple of head_dim 32"},
      {"rope_pos", K::Rope, rope(32, 32), {"f32[SEQ, 128]", "i32[PAST_SEQ]"}, "",
       "error: rope positions must be [SEQ], got i32[PAST_SEQ]"},
      {"rope_pos_dtype", K::Rope, rope(32, 32), {"f32[SEQ, 128]", "f32[SEQ]"}, "",
       "error: rope positions must be i32 or i64"},
      {"attention_gqa", K::Attention, attn(4, 2, 16), {"f32[SEQ, 64]", "f32[PAST_SEQ, 32]", "f32[PAST_SEQ, 32]"}, "",
       "f32[SEQ, 64]"},
      {"attention_q_pos", K::Attention, attn(2, 2, 8, MaskKind::SlidingWindow, 4),
       {"f16[BATCH, SEQ, 16]", "f16[BATCH, SEQ, 16]", "f16[BATCH, SEQ, 16]", "i64[SEQ]"}, "", "f16[BATCH, SEQ, 16]"},
      {"attention_f16_kv", K::Attention, attn(4, 2, 16), {"f32[SEQ, 64]", "f16[PAST_SEQ, 32]", "f16[PAST_SEQ, 32]"},
       "", "f32[SEQ, 64]"},
      {"attention_kv_dtypes_differ", K::Attention, attn(4, 2, 16),
       {"f32[SEQ, 64]", "f16[PAST_SEQ, 32]", "f32[PAST_SEQ, 32]"}, "", "error: dtype mismatch"},
      {"attention_heads", K::Attention, attn(3, 2, 16), {"f32[SEQ, 48]", "f32[SEQ, 32]", "f32[SEQ, 32]"}, "",
       "error: attention heads invalid: n_heads=3 n_kv_heads=2 head_dim=16"},
      {"attention_heads_overflow", K::Attention, attn(int64_t{1} << 62, 1, 4), {"f32[SEQ, 4]", "f32[SEQ, 4]", "f32[SEQ, 4]"},
       "", "error: attention heads invalid"},
      {"attention_window", K::Attention, attn(1, 1, 4, MaskKind::SlidingWindow, 0),
       {"f32[SEQ, 4]", "f32[SEQ, 4]", "f32[SEQ, 4]"}, "", "error: sliding-window attention needs window > 0"},
      {"attention_q_width", K::Attention, attn(2, 2, 16), {"f32[SEQ, 48]", "f32[SEQ, 32]", "f32[SEQ, 32]"}, "",
       "error: attention q last dim must be n_heads*head_dim = 32"},
      {"attention_kv_len", K::Attention, attn(2, 2, 8, MaskKind::Local, 3),
       {"f32[BATCH, SEQ, 16]", "f32[BATCH, SEQ, 16]", "f32[BATCH, SEQ, 16]", "i32[SEQ]", "i32[BATCH]"}, "",
       "f32[BATCH, SEQ, 16]"},
      {"attention_kv_len_shape", K::Attention, attn(2, 2, 8),
       {"f32[BATCH, SEQ, 16]", "f32[BATCH, SEQ, 16]", "f32[BATCH, SEQ, 16]", "i32[SEQ]", "i32[SEQ]"}, "",
       "error: attention kv_len must be [BATCH] (one per batch item), got i32[SEQ]"},
      {"attention_kv_len_dtype", K::Attention, attn(2, 2, 8),
       {"f32[2, SEQ, 16]", "f32[2, SEQ, 16]", "f32[2, SEQ, 16]", "i32[SEQ]", "i64[2]"}, "",
       "error: attention kv_len must be i32, got i64[2]"},
      {"attention_local_window", K::Attention, attn(1, 1, 4, MaskKind::Local, -1),
       {"f32[SEQ, 4]", "f32[SEQ, 4]", "f32[SEQ, 4]"}, "", "error: local attention needs window >= 0"},
      {"attention_q_pos_len", K::Attention, attn(1, 1, 4), {"f32[SEQ, 4]", "f32[SEQ, 4]", "f32[SEQ, 4]", "i32[4]"}, "",
       "error: attention q_pos must be [SEQ] or one row per batch item, got i32[4]"},
      {"attention_q_pos_per_sequence", K::Attention, attn(2, 1, 8),
       {"f32[4, 1, 16]", "f16[4, 64, 8]", "f16[4, 64, 8]", "i32[4, 1]"}, "", "f32[4, 1, 16]"},
      {"attention_q_pos_per_sequence_batch", K::Attention, attn(2, 1, 8),
       {"f32[4, SEQ, 16]", "f32[4, 64, 8]", "f32[4, 64, 8]", "i32[3, SEQ]"}, "",
       "error: attention q_pos must be [SEQ] or one row per batch item, got i32[3, SEQ]"},
      // movement
      {"reshape_flatten", K::Reshape, ShapeAttrs{ty("f32[BATCH*SEQ, 64]").shape}, {"f32[BATCH, SEQ, 64]"}, "",
       "f32[BATCH*SEQ, 64]"},
      {"reshape_split", K::Reshape, ShapeAttrs{ty("f32[2*SEQ, 32]").shape}, {"f32[SEQ, 64]"}, "", "f32[2*SEQ, 32]"},
      {"reshape_count", K::Reshape, ShapeAttrs{ty("f32[SEQ, 63]").shape}, {"f32[SEQ, 64]"}, "",
       "error: reshape [SEQ, 64] -> [SEQ, 63] changes the element count"},
      {"transpose", K::Transpose, TransposeAttrs{{2, 0, 1}}, {"f32[BATCH, SEQ, 64]"}, "", "f32[64, BATCH, SEQ]"},
      {"transpose_perm", K::Transpose, TransposeAttrs{{0, 0}}, {"f32[2, 3]"}, "", "error: transpose perm is not a permutation"},
      {"transpose_rank", K::Transpose, TransposeAttrs{{0}}, {"f32[2, 3]"}, "", "error: transpose perm has 1 entries for rank 2"},
      {"narrow", K::Narrow, NarrowAttrs{1, 16, Dim(32)}, {"f32[SEQ, 64]"}, "", "f32[SEQ, 32]"},
      {"narrow_symbolic", K::Narrow, NarrowAttrs{0, 0, Dim::symbol(SEQ)}, {"f32[SEQ, 64]"}, "", "f32[SEQ, 64]"},
      {"narrow_past_end", K::Narrow, NarrowAttrs{-1, 40, Dim(32)}, {"f32[SEQ, 64]"}, "",
       "error: narrow [40, 72) exceeds dim 1 of size 64"},
      {"narrow_overflow", K::Narrow, NarrowAttrs{1, INT64_MAX, Dim(2)}, {"f32[SEQ, 64]"}, "",
       "error: narrow start 9223372036854775807 + length 2 overflows"},
      {"narrow_symbolic_on_static", K::Narrow, NarrowAttrs{1, 0, Dim::symbol(SEQ)}, {"f32[SEQ, 64]"}, "",
       "error: narrow with a symbolic length on a static dim"},
      {"narrow_symbolic_longer", K::Narrow, NarrowAttrs{0, 0, Dim::symbol(SEQ, 2)}, {"f32[SEQ, 64]"}, "",
       "error: narrow length 2*SEQ may exceed dim SEQ"},
      {"concat_symbolic", K::Concat, AxisAttrs{0}, {"f32[SEQ, 64]", "f32[SEQ, 64]"}, "", "f32[2*SEQ, 64]"},
      {"concat_static", K::Concat, AxisAttrs{-1}, {"f32[SEQ, 3]", "f32[SEQ, 5]", "f32[SEQ, 1]"}, "", "f32[SEQ, 9]"},
      {"concat_mixed", K::Concat, AxisAttrs{0}, {"f32[SEQ, 64]", "f32[4, 64]"}, "",
       "error: concat axis length is not expressible (mixed symbols)"},
      {"concat_off_axis", K::Concat, AxisAttrs{0}, {"f32[SEQ, 64]", "f32[SEQ, 32]"}, "",
       "error: concat inputs differ off the axis"},
      {"expand", K::Expand, ShapeAttrs{ty("f32[BATCH, SEQ, 64]").shape}, {"f32[1, 64]"}, "", "f32[BATCH, SEQ, 64]"},
      {"expand_bad", K::Expand, ShapeAttrs{ty("f32[SEQ, 64]").shape}, {"f32[2, 64]"}, "",
       "error: cannot expand [2, 64] to [SEQ, 64]"},
      {"gather", K::Gather, AxisAttrs{0}, {"f16[32000, 64]", "i32[BATCH, SEQ]"}, "", "f16[BATCH, SEQ, 64]"},
      {"gather_packed", K::Gather, AxisAttrs{0}, {"q4_k[32000, 256]", "i64[SEQ]"}, "", "f32[SEQ, 256]"},
      {"gather_float_ids", K::Gather, AxisAttrs{0}, {"f32[10, 4]", "f32[SEQ]"}, "",
       "error: gather indices must be i32 or i64"},
      {"gather_packed_axis", K::Gather, AxisAttrs{1}, {"q8_0[10, 32]", "i32[SEQ]"}, "",
       "error: gather from a packed table needs a [rows, cols] table, axis 0"},
      {"update_slice", K::UpdateSlice, AxisAttrs{0}, {"f32[4096, 512]", "f32[SEQ, 512]", "i32[1]"}, "", "f32[4096, 512]"},
      {"update_slice_start", K::UpdateSlice, AxisAttrs{0}, {"f32[16, 8]", "f32[SEQ, 8]", "i32[2]"}, "",
       "error: update_slice start must have 1 element or one per slice before axis 0, got i32[2]"},
      {"update_slice_start_per_sequence", K::UpdateSlice, AxisAttrs{1}, {"f16[3, 64, 8]", "f16[3, SEQ, 8]", "i32[3]"},
       "", "f16[3, 64, 8]"},
      {"update_slice_start_per_sequence_count", K::UpdateSlice, AxisAttrs{1},
       {"f16[3, 64, 8]", "f16[3, SEQ, 8]", "i32[2]"}, "",
       "error: update_slice start must have 1 element or one per slice before axis 1, got i32[2]"},
      {"update_slice_fit", K::UpdateSlice, AxisAttrs{0}, {"f32[16, 8]", "f32[SEQ, 4]", "i32[1]"}, "",
       "error: update_slice source f32[SEQ, 4] does not fit f32[16, 8]"},
      // fused
      {"fused_matmul", K::FusedMatMulBiasAct, FusedMatMulAttrs{ActKind::Silu, true, true},
       {"f32[SEQ, 64]", "f32[128, 64]", "f32[128]"}, "", "f32[SEQ, 128]"},
      {"fused_matmul_kn", K::FusedMatMulBiasAct, FusedMatMulAttrs{ActKind::Identity, false, false},
       {"f32[SEQ, 64]", "f32[64, 128]"}, "", "f32[SEQ, 128]"},
      {"fused_matmul_has_bias", K::FusedMatMulBiasAct, FusedMatMulAttrs{ActKind::Identity, true, true},
       {"f32[SEQ, 64]", "f32[128, 64]"}, "", "error: has_bias does not match the number of inputs"},
      {"fused_matmul_bias", K::FusedMatMulBiasAct, FusedMatMulAttrs{ActKind::Identity, true, true},
       {"f32[SEQ, 64]", "f32[128, 64]", "f32[64]"}, "", "error: bias must be [128], got f32[64]"},
      {"fused_matmul_packed", K::FusedMatMulBiasAct, FusedMatMulAttrs{}, {"f32[SEQ, 64]", "q8_0[128, 64]"}, "",
       "error: packed weight q8_0[128, 64] needs dequant_matmul"},
      {"fused_swiglu", K::FusedSwiGLU, FusedSwiGLUAttrs{}, {"f32[SEQ, 64]", "f32[256, 64]", "f32[256, 64]"}, "",
       "f32[SEQ, 256]"},
      {"fused_swiglu_differ", K::FusedSwiGLU, FusedSwiGLUAttrs{}, {"f32[SEQ, 64]", "f32[256, 64]", "f32[128, 64]"}, "",
       "error: swiglu gate and up differ: f32[SEQ, 256] vs f32[SEQ, 128]"},
      {"fused_residual_rms", K::FusedResidualRmsNorm, NormAttrs{}, {"f32[SEQ, 64]", "f32[SEQ, 64]", "f32[64]"}, "",
       "f32[2, SEQ, 64]"},
      {"fused_residual_rms_res", K::FusedResidualRmsNorm, NormAttrs{}, {"f32[SEQ, 64]", "f16[SEQ, 64]", "f32[64]"}, "",
       "error: residual must match input: f32[SEQ, 64] vs f16[SEQ, 64]"},
      {"fused_residual_ln", K::FusedResidualLayerNorm, NormAttrs{},
       {"f32[SEQ, 64]", "f32[SEQ, 64]", "f32[64]", "f32[64]"}, "", "f32[2, SEQ, 64]"},
      {"fused_residual_ln_beta", K::FusedResidualLayerNorm, NormAttrs{},
       {"f32[SEQ, 64]", "f32[SEQ, 64]", "f32[64]", "f32[63]"}, "", "error: norm beta must be [64], got f32[63]"},
      {"region", K::ElementwiseRegion,
       region({step(K::Activation, silu, DType::F32, {-1}), step(K::Binary, mul, DType::F32, {0, -2})}),
       {"f32[SEQ, 64]", "f32[64]"}, "", "f32[SEQ, 64]"},
      {"region_empty", K::ElementwiseRegion, region({}), {"f32[4]"}, "", "error: elementwise_region has no steps"},
      {"region_later", K::ElementwiseRegion, region({step(K::Binary, mul, DType::F32, {-1, 0})}), {"f32[4]"}, "",
       "error: region step 0 reads later step 0"},
      {"region_input", K::ElementwiseRegion, region({step(K::Activation, silu, DType::F32, {-3})}), {"f32[4]"}, "",
       "error: region step 0 reads input 2 of 1"},
      {"region_op", K::ElementwiseRegion, region({step(K::MatMul, 0, DType::F32, {-1, -1})}), {"f32[4]"}, "",
       "error: region step 0 has non-elementwise op matmul"},
      {"region_arity", K::ElementwiseRegion, region({step(K::Where, 0, DType::F32, {-1})}), {"f32[4]"}, "",
       "error: region step 0 has 1 args, needs 3"},
      // extension
      {"custom", K::Custom, CustomAttrs{"test.same", ""}, {"i8[7]"}, "", "i8[7]"},
      {"custom_unknown", K::Custom, CustomAttrs{"no.such.op", ""}, {"f32[1]"}, "", "error: unknown custom op 'no.such.op'"},
      {"custom_fail", K::Custom, CustomAttrs{"test.same", "fail"}, {"f32[1]"}, "", "error: test.same: config says fail"},
      {"custom_arity", K::Custom, CustomAttrs{"test.same", ""}, {"f32[1]", "f32[1]", "f32[1]"}, "",
       "error: custom op 'test.same' got 3 inputs"},
      // HIR
      {"hir_linear_packed", K::HirLinear, FusedMatMulAttrs{}, {"f32[SEQ, 64]", "q4_k[128, 256]"}, "",
       "error: inner dims differ"},
      {"hir_linear", K::HirLinear, FusedMatMulAttrs{}, {"f32[SEQ, 256]", "q4_k[128, 256]"}, "", "f32[SEQ, 128]"},
      {"hir_linear_bias", K::HirLinear, FusedMatMulAttrs{ActKind::Identity, false, true},
       {"f32[SEQ, 64]", "f32[128, 64]", "f32[128]"}, "", "error: has_bias does not match the number of inputs"},
      {"hir_swiglu", K::HirSwiGLUFfn, NoAttrs{}, {"f32[SEQ, 64]", "f32[256, 64]", "f32[256, 64]", "f32[64, 256]"}, "",
       "f32[SEQ, 64]"},
      {"hir_swiglu_down", K::HirSwiGLUFfn, NoAttrs{}, {"f32[SEQ, 64]", "f32[256, 64]", "f32[256, 64]", "f32[64, 128]"},
       "", "error: inner dims differ"},
      {"hir_gelu", K::HirGeluFfn, GeluFfnAttrs{}, {"f32[SEQ, 64]", "f32[256, 64]", "f32[64, 256]"}, "", "f32[SEQ, 64]"},
      {"hir_gelu_gated", K::HirGeluFfn, GeluFfnAttrs{true, true}, {"f32[SEQ, 64]", "f32[256, 64]", "f32[64, 256]"}, "",
       "error: gelu_ffn: gated needs 4 inputs, ungated 3"},
      {"hir_attention_block", K::HirAttentionBlock, block(true),
       {"f32[SEQ, 64]", "f32[64, 64]", "f32[32, 64]", "f32[32, 64]", "f32[64, 64]", "i32[SEQ]", "f32[4096, 32]",
        "f32[4096, 32]"},
       "", "f32[SEQ, 64]"},
      {"hir_attention_block_count", K::HirAttentionBlock, block(true),
       {"f32[SEQ, 64]", "f32[64, 64]", "f32[32, 64]", "f32[32, 64]", "f32[64, 64]", "i32[SEQ]"}, "",
       "error: attention_block needs 8 inputs for its flags, got 6"},
      {"hir_attention_block_cache", K::HirAttentionBlock, block(true),
       {"f32[SEQ, 64]", "f32[64, 64]", "f32[32, 64]", "f32[32, 64]", "f32[64, 64]", "i32[SEQ]", "f32[4096, 64]",
        "f32[4096, 64]"},
       "", "error: kv caches must be f32 (or f16/bf16)[ctx, 32], got f32[4096, 64]"},
      {"hir_attention_block_f16_cache", K::HirAttentionBlock, block(true),
       {"f32[SEQ, 64]", "f32[64, 64]", "f32[32, 64]", "f32[32, 64]", "f32[64, 64]", "i32[SEQ]", "f16[4096, 32]",
        "f16[4096, 32]"},
       "", "f32[SEQ, 64]"},
      {"hir_attention_block_mixed_caches", K::HirAttentionBlock, block(true),
       {"f32[SEQ, 64]", "f32[64, 64]", "f32[32, 64]", "f32[32, 64]", "f32[64, 64]", "i32[SEQ]", "f16[4096, 32]",
        "f32[4096, 32]"},
       "", "error: kv caches must be"},
      // compact rows: x holds ROWS real rows, positions and caches keep 4 sequences of SEQ
      {"hir_attention_block_compact", K::HirAttentionBlock, compact_block(),
       {"f32[ROWS, 64]", "f32[64, 64]", "f32[32, 64]", "f32[32, 64]", "f32[64, 64]", "i32[4*SEQ]", "f32[4, 4096, 32]",
        "f32[4, 4096, 32]", "i32[4*SEQ]", "i32[ROWS]"},
       "", "f32[ROWS, 64]"},
      {"hir_attention_block_compact_row_slots", K::HirAttentionBlock, compact_block(),
       {"f32[ROWS, 64]", "f32[64, 64]", "f32[32, 64]", "f32[32, 64]", "f32[64, 64]", "i32[4*SEQ]", "f32[4, 4096, 32]",
        "f32[4, 4096, 32]", "i32[4*SEQ]", "i32[4*SEQ]"},
       "", "error: attention_block row_slots must be [ROWS] (one per row of x), got i32[4*SEQ]"},
      {"hir_attention_block_compact_positions", K::HirAttentionBlock, compact_block(),
       {"f32[ROWS, 64]", "f32[64, 64]", "f32[32, 64]", "f32[32, 64]", "f32[64, 64]", "i32[ROWS]", "f32[4, 4096, 32]",
        "f32[4, 4096, 32]", "i32[4*SEQ]", "i32[ROWS]"},
       "", "error: attention_block positions must be [4*SEQ] (one per padded row), got i32[ROWS]"},
      {"hir_attention_block_compact_one_sequence", K::HirAttentionBlock, [] {
         AttentionBlockAttrs b = block(true);
         b.compact_rows = true;
         return b;
       }(),
       {"f32[ROWS, 64]", "f32[64, 64]", "f32[32, 64]", "f32[32, 64]", "f32[64, 64]", "i32[SEQ]", "f32[4096, 32]",
        "f32[4096, 32]", "i32[SEQ]", "i32[ROWS]"},
       "", "error: attention_block compact_rows needs several sequences and a kv cache (batch 1)"},
      {"hir_attention_block_heads", K::HirAttentionBlock, [] {
         AttentionBlockAttrs b = block(false);
         b.attn.n_heads = int64_t{1} << 61;  // n_heads * head_dim overflows
         return b;
       }(),
       {"f32[SEQ, 64]", "f32[64, 64]", "f32[32, 64]", "f32[32, 64]", "f32[64, 64]", "i32[SEQ]"}, "",
       "error: attention heads invalid: n_heads=2305843009213693952 n_kv_heads=2 head_dim=16"},
      // latent attention: x, W_q_b, W_kv_a, W_kv_b, W_o, pos, kv_a_norm, W_q_a, q_a_norm, caches
      {"hir_attention_block_latent", K::HirAttentionBlock, latent_block(),
       {"f32[SEQ, 64]", "f32[64, 32]", "f32[24, 64]", "f32[128, 16]", "f32[64, 96]", "i32[SEQ]", "f32[16]",
        "f32[32, 64]", "f32[32]", "f32[4096, 96]", "f32[4096, 96]"},
       "", "f32[SEQ, 64]"},
      {"hir_attention_block_latent_direct_q", K::HirAttentionBlock, [] {
         AttentionBlockAttrs b = latent_block();
         b.latent_q_rank = 0;
         return b;
       }(),
       {"f32[SEQ, 64]", "f32[64, 64]", "f32[24, 64]", "f32[128, 16]", "f32[64, 96]", "i32[SEQ]", "f32[16]",
        "f32[4096, 96]", "f32[4096, 96]"},
       "", "f32[SEQ, 64]"},
      {"hir_attention_block_latent_kv_b", K::HirAttentionBlock, latent_block(),
       {"f32[SEQ, 64]", "f32[64, 32]", "f32[24, 64]", "f32[127, 16]", "f32[64, 96]", "i32[SEQ]", "f32[16]",
        "f32[32, 64]", "f32[32]", "f32[4096, 96]", "f32[4096, 96]"},
       "", "error: attention_block latent projections do not match 4 heads of nope 8 + rope 8 (v 24)"},
      {"hir_attention_block_latent_kv_a", K::HirAttentionBlock, latent_block(),
       {"f32[SEQ, 64]", "f32[64, 32]", "f32[16, 64]", "f32[128, 16]", "f32[64, 96]", "i32[SEQ]", "f32[16]",
        "f32[32, 64]", "f32[32]", "f32[4096, 96]", "f32[4096, 96]"},
       "", "error: attention_block W_kv_a gives 16 values a row, not kv rank + rope = 24"},
      {"hir_attention_block_latent_norm", K::HirAttentionBlock, latent_block(),
       {"f32[SEQ, 64]", "f32[64, 32]", "f32[24, 64]", "f32[128, 16]", "f32[64, 96]", "i32[SEQ]", "f32[24]",
        "f32[32, 64]", "f32[32]", "f32[4096, 96]", "f32[4096, 96]"},
       "", "error: attention_block kv_a_norm must be [16], got f32[24]"},
      {"hir_attention_block_latent_cache", K::HirAttentionBlock, latent_block(),
       {"f32[SEQ, 64]", "f32[64, 32]", "f32[24, 64]", "f32[128, 16]", "f32[64, 96]", "i32[SEQ]", "f32[16]",
        "f32[32, 64]", "f32[32]", "f32[4096, 64]", "f32[4096, 64]"},
       "", "error: kv caches must be f32 (or f16/bf16)[ctx, 96], got f32[4096, 64]"},
      {"hir_attention_block_latent_output", K::HirAttentionBlock, latent_block(),
       {"f32[SEQ, 64]", "f32[64, 32]", "f32[24, 64]", "f32[128, 16]", "f32[64, 64]", "i32[SEQ]", "f32[16]",
        "f32[32, 64]", "f32[32]", "f32[4096, 96]", "f32[4096, 96]"},
       "", "error: inner dims differ"},
      {"hir_attention_block_latent_heads", K::HirAttentionBlock, [] {
         AttentionBlockAttrs b = latent_block();
         b.attn.n_kv_heads = 2;
         return b;
       }(),
       {"f32[SEQ, 64]", "f32[64, 32]", "f32[24, 64]", "f32[128, 16]", "f32[64, 96]", "i32[SEQ]", "f32[16]",
        "f32[32, 64]", "f32[32]", "f32[4096, 96]", "f32[4096, 96]"},
       "", "error: attention_block latent attention needs n_kv_heads = n_heads and head_dim = max(nope + rope, v) = 24"},
      {"hir_attention_block_latent_flags", K::HirAttentionBlock, [] {
         AttentionBlockAttrs b = latent_block();
         b.qk_norm = true;
         return b;
       }(),
       {"f32[SEQ, 64]", "f32[64, 32]", "f32[24, 64]", "f32[128, 16]", "f32[64, 96]", "i32[SEQ]", "f32[16]",
        "f32[32, 64]", "f32[32]", "f32[4096, 96]", "f32[4096, 96]"},
       "", "error: attention_block: latent attention takes no biases, q-k norms"},
      {"hir_rms_norm", K::HirRmsNorm, NormAttrs{}, {"f32[SEQ, 64]", "f32[64]"}, "", "f32[SEQ, 64]"},
      {"hir_rms_norm_gamma", K::HirRmsNorm, NormAttrs{}, {"f32[SEQ, 64]", "f32[SEQ]"}, "",
       "error: norm gamma must be [64], got f32[SEQ]"},
      {"hir_layer_norm", K::HirLayerNorm, NormAttrs{}, {"f32[SEQ, 64]", "f32[64]", "f32[64]"}, "", "f32[SEQ, 64]"},
      {"hir_layer_norm_int", K::HirLayerNorm, NormAttrs{}, {"i32[SEQ, 64]", "i32[64]"}, "",
       "error: norm input must be a float type"},
      {"hir_embedding", K::HirEmbedding, NoAttrs{}, {"q8_0[32000, 64]", "i32[SEQ]"}, "", "f32[SEQ, 64]"},
      {"hir_embedding_rank", K::HirEmbedding, NoAttrs{}, {"f32[2, 3, 4]", "i32[SEQ]"}, "",
       "error: embedding table must be [vocab, dim], got f32[2, 3, 4]"},
      // spatial ops
      {"conv2d", K::Conv, ConvAttrs{{2, 2}, {1, 1}, {1, 1}, 1}, {"f32[2, 3, 9, 7]", "f32[8, 3, 3, 3]", "f32[8]"}, "",
       "f32[2, 8, 5, 4]"},
      {"conv1d_groups_dilation", K::Conv, ConvAttrs{{3}, {2}, {2}, 4}, {"f32[BATCH, 8, 20]", "f32[12, 2, 5]"}, "",
       "f32[BATCH, 12, 6]"},
      {"conv_defaults", K::Conv, ConvAttrs{}, {"f32[1, 1, 10]", "f32[4, 1, 10]"}, "", "f32[1, 4, 1]"},
      {"conv_groups", K::Conv, ConvAttrs{{}, {}, {}, 3}, {"f32[1, 8, 10]", "f32[6, 2, 3]"}, "",
       "error: conv groups 3 must divide the 8 input and 6 output channels"},
      {"conv_weight_channels", K::Conv, ConvAttrs{{}, {}, {}, 2}, {"f32[1, 8, 10]", "f32[6, 8, 3]"}, "",
       "error: needs C/groups = 4 input channels per group"},
      {"conv_too_short", K::Conv, ConvAttrs{{1}, {0}, {3}, 1}, {"f32[1, 1, 6]", "f32[1, 1, 3]"}, "",
       "error: conv spatial dim 0 of length 6 (padding 0) is shorter than the dilated kernel (3 x 3)"},
      {"conv_rank", K::Conv, ConvAttrs{}, {"f32[8, 10]", "f32[4, 8]"}, "", "error: conv input must be [N, C, L] or [N, C, H, W]"},
      {"conv_stride_zero", K::Conv, ConvAttrs{{0, 1}, {}, {}, 1}, {"f32[1, 1, 6, 6]", "f32[1, 1, 3, 3]"}, "",
       "error: conv stride 0 is out of range"},
      {"conv_list_length", K::Conv, ConvAttrs{{1}, {}, {}, 1}, {"f32[1, 1, 6, 6]", "f32[1, 1, 3, 3]"}, "",
       "error: conv stride has 1 entries for 2 spatial dims"},
      {"conv_bias", K::Conv, ConvAttrs{}, {"f32[1, 2, 6]", "f32[4, 2, 3]", "f32[2]"}, "", "error: conv bias must be f32[4]"},
      {"conv_dtype", K::Conv, ConvAttrs{}, {"f32[1, 2, 6]", "f16[4, 2, 3]"}, "",
       "error: conv input and weight must share a float type"},
      {"conv_transpose2d", K::ConvTranspose, ConvTransposeAttrs{{2, 2}, {1, 0}, {1, 1}, {1, 0}, 2},
       {"f32[1, 4, 5, 6]", "f32[4, 3, 3, 2]", "f32[6]"}, "", "f32[1, 6, 10, 12]"},
      {"conv_transpose1d_defaults", K::ConvTranspose, ConvTransposeAttrs{}, {"f32[2, 3, 7]", "f32[3, 5, 4]"}, "",
       "f32[2, 5, 10]"},
      {"conv_transpose_channels", K::ConvTranspose, ConvTransposeAttrs{}, {"f32[2, 3, 7]", "f32[4, 5, 4]"}, "",
       "error: conv_transpose weight f32[4, 5, 4] must have the input's 3 channels first"},
      {"conv_transpose_output_padding", K::ConvTranspose, ConvTransposeAttrs{{2}, {}, {}, {2}, 1},
       {"f32[1, 3, 7]", "f32[3, 5, 4]"}, "", "error: conv_transpose output_padding 2 must be smaller than stride 2"},
      {"conv_transpose_groups", K::ConvTranspose, ConvTransposeAttrs{{}, {}, {}, {}, 2}, {"f32[1, 3, 7]", "f32[3, 5, 4]"}, "",
       "error: conv_transpose groups 2 must divide the 3 input channels"},
      {"conv_transpose_empty", K::ConvTranspose, ConvTransposeAttrs{{1}, {3}, {}, {}, 1}, {"f32[1, 3, 2]", "f32[3, 5, 1]"},
       "", "error: conv_transpose spatial dim 0 of length 2 gives no output (padding 3)"},
      {"group_norm", K::GroupNorm, GroupNormAttrs{4, 1e-5}, {"f32[2, 8, 5, 3]", "f32[8]", "f32[8]"}, "", "f32[2, 8, 5, 3]"},
      {"group_norm_no_beta", K::GroupNorm, GroupNormAttrs{8, 1e-5}, {"f32[1, 8, SEQ]", "f32[8]"}, "", "f32[1, 8, SEQ]"},
      {"group_norm_groups", K::GroupNorm, GroupNormAttrs{3, 1e-5}, {"f32[2, 8, 5]", "f32[8]"}, "",
       "error: group_norm groups 3 must divide the 8 channels"},
      {"group_norm_gamma", K::GroupNorm, GroupNormAttrs{2, 1e-5}, {"f32[2, 8, 5]", "f32[5]"}, "",
       "error: group_norm gamma must be [8], got f32[5]"},
      {"interpolate", K::Interpolate, InterpolateAttrs{InterpMode::Bicubic, {6, 9}, false}, {"f32[1, 16, 4, 4]"}, "",
       "f32[1, 16, 6, 9]"},
      {"interpolate_rank", K::Interpolate, InterpolateAttrs{InterpMode::Bilinear, {6, 9}, true}, {"f32[16, 4, 4]"}, "",
       "error: interpolate input must be [N, C, H, W]"},
      {"interpolate_size", K::Interpolate, InterpolateAttrs{InterpMode::Bilinear, {6}, false}, {"f32[1, 2, 4, 4]"}, "",
       "error: interpolate size must be two lengths"},
      {"interpolate_nearest_align", K::Interpolate, InterpolateAttrs{InterpMode::Nearest, {6, 6}, true},
       {"f32[1, 2, 4, 4]"}, "", "error: interpolate nearest takes no align_corners"},
      {"window_partition_pads", K::WindowPartition, WindowAttrs{4, 0, 0}, {"f32[2, 9, 5, 3]"}, "", "f32[12, 4, 4, 3]"},
      {"window_partition_hw", K::WindowPartition, WindowAttrs{4, 9, 5}, {"f32[2, 9, 5, 3]"}, "",
       "error: window_partition takes no height / width"},
      {"window_partition_rank", K::WindowPartition, WindowAttrs{4, 0, 0}, {"f32[9, 5, 3]"}, "",
       "error: window_partition input must be [B, H, W, C]"},
      {"window_partition_zero", K::WindowPartition, WindowAttrs{0, 0, 0}, {"f32[1, 9, 5, 3]"}, "",
       "error: window_partition window 0 must be in"},
      {"window_unpartition", K::WindowUnpartition, WindowAttrs{4, 9, 5}, {"f32[12, 4, 4, 3]"}, "", "f32[2, 9, 5, 3]"},
      {"window_unpartition_count", K::WindowUnpartition, WindowAttrs{4, 9, 5}, {"f32[7, 4, 4, 3]"}, "",
       "error: window_unpartition: 7 windows are no whole number of 9 x 5 images (6 windows each)"},
      {"window_unpartition_side", K::WindowUnpartition, WindowAttrs{3, 9, 5}, {"f32[12, 4, 4, 3]"}, "",
       "error: window_unpartition input f32[12, 4, 4, 3] must hold 3 x 3 windows"},
      {"rel_pos_attention", K::RelPosAttention, RelPosAttentionAttrs{2, 8, 3, 5, 0.0},
       {"f32[4, 15, 16]", "f32[4, 15, 16]", "f32[4, 15, 16]", "f32[5, 8]", "f32[9, 8]"}, "", "f32[4, 15, 16]"},
      {"rel_pos_attention_tokens", K::RelPosAttention, RelPosAttentionAttrs{2, 8, 3, 5, 0.0},
       {"f32[4, 14, 16]", "f32[4, 15, 16]", "f32[4, 15, 16]", "f32[5, 8]", "f32[9, 8]"}, "",
       "error: rel_pos_attention q must be f32[N, 15, 16] like q, got f32[4, 14, 16]"},
      {"rel_pos_attention_table", K::RelPosAttention, RelPosAttentionAttrs{2, 8, 3, 5, 0.0},
       {"f32[4, 15, 16]", "f32[4, 15, 16]", "f32[4, 15, 16]", "f32[5, 8]", "f32[8, 8]"}, "",
       "error: rel_pos_attention rel_w must be f32[9, 8], got f32[8, 8]"},
      {"rel_pos_attention_heads_overflow", K::RelPosAttention, RelPosAttentionAttrs{(int64_t{1} << 62) + 1, 4, 1, 1, 0.0},
       {"f32[1, 1, 4]", "f32[1, 1, 4]", "f32[1, 1, 4]", "f32[1, 4]", "f32[1, 4]"}, "",
       "error: rel_pos_attention n_heads 4611686018427387905 x head_dim 4 is too large"},
      {"rel_pos_attention_scale", K::RelPosAttention, RelPosAttentionAttrs{2, 8, 3, 5, -1.0},
       {"f32[4, 15, 16]", "f32[4, 15, 16]", "f32[4, 15, 16]", "f32[5, 8]", "f32[9, 8]"}, "",
       "error: rel_pos_attention scale must be >= 0"},
      {"fused_linear_norm_swiglu", K::FusedLinear, swiglu_norm(), {"f32[1, 64]", "q8_0[96, 64]", "q8_0[96, 64]", "f32[64]"},
       "", "f32[1, 96]"},
      {"fused_linear_cache_write", K::FusedLinear, rope_cache(), {"f32[2, 64]", "f16[32, 64]", "i32[2]", "f16[8, 32]", "i32[1]"},
       "", "f16[8, 32]"},
      {"fused_linear_inputs", K::FusedLinear, swiglu_norm(), {"f32[1, 64]", "q8_0[96, 64]", "f32[64]"}, "",
       "error: fused_linear needs 4 inputs for its flags, got 3"},
      {"fused_linear_up_weight", K::FusedLinear, swiglu_norm(), {"f32[1, 64]", "q8_0[96, 64]", "q4_0[96, 64]", "f32[64]"},
       "", "error: fused_linear up weight q4_0[96, 64] differs from the gate weight"},
      {"fused_linear_rope_fields", K::FusedLinear, stray_rope(), {"f32[1, 64]", "f32[32, 64]"}, "",
       "error: fused_linear: rope fields set without rope"},
      {"fused_linear_cache_width", K::FusedLinear, rope_cache(), {"f32[2, 64]", "f16[32, 64]", "i32[2]", "f16[8, 16]", "i32[1]"},
       "", "error: fused_linear rows f32[2, 32] do not fit the cache f16[8, 16]"},
      // generic checks
      {"wrong_attrs", K::Softmax, NormAttrs{}, {"f32[4]"}, "", "error: softmax has attributes of the wrong kind"},
      {"concat_unbounded_arity", K::Concat, AxisAttrs{0}, {}, "", "error: concat takes at least 1 inputs, got 0"},
  };
  return all;
}

class InferTest : public ::testing::TestWithParam<InferCase> {};

TEST_P(InferTest, ResultOrError) {
  testing::register_test_custom_op();
  const InferCase& c = GetParam();
  std::vector<TensorType> in;
  for (const std::string& s : c.inputs) in.push_back(ty(s));
  const TensorType declared = c.declared.empty() ? TensorType{} : ty(c.declared);
  auto t = infer_type(c.op, c.attrs, in, declared);
  if (c.want.rfind("error: ", 0) == 0) {
    ASSERT_FALSE(t.has_value()) << "got " << t->to_string();
    EXPECT_EQ(t.error().code(), ErrorCode::kVerify);
    EXPECT_NE(t.error().message().find(c.want.substr(7)), std::string::npos) << t.error().message();
  } else {
    ASSERT_TRUE(t.has_value()) << t.error().message();
    EXPECT_EQ(t->to_string(), c.want);
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, InferTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<InferCase>& i) { return i.param.name; });

// Every op kind has at least one positive and one negative inference case.
TEST(InferCoverage, EveryOpKindHasPositiveAndNegativeCases) {
  std::map<OpKind, std::pair<int, int>> counts;
  for (const InferCase& c : cases()) {
    auto& [pos, neg] = counts[c.op];
    (c.want.rfind("error: ", 0) == 0 ? neg : pos)++;
  }
  for (int k = 0; k < kNumOpKinds; ++k) {
    const auto op = static_cast<OpKind>(k);
    EXPECT_GT(counts[op].first, 0) << "no positive inference case for " << op_name(op);
    EXPECT_GT(counts[op].second, 0) << "no negative inference case for " << op_name(op);
  }
}

TEST(InferGraphAdd, ErrorNamesNodeAndLabel) {
  Graph g;
  auto x = g.add(OpKind::Input, {}, InputAttrs{"x"}, ty("f32[SEQ, 64]"));
  ASSERT_TRUE(x.has_value());
  auto bad = g.add(OpKind::Softmax, {*x}, SoftmaxAttrs{5}, {}, "blk.3.probs");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message(), "node %1 (softmax 'blk.3.probs'): softmax axis out of range");
  auto missing = g.add(OpKind::Activation, {7}, ActivationAttrs{});
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().message(), "activation: input %7 does not exist");
  EXPECT_EQ(g.size(), 1);
}

}  // namespace
}  // namespace rlx::ir
