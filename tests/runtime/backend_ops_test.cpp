// Every MIR op kind on every available backend (cpu; cuda when built and a device opens)
// against Device::reference(): small graphs with fixed-seed inputs, several dtypes and edge
// cases, fusion off. Float outputs within relative L2 1e-5 (all-f32 graphs) or 1e-2 (any
// f16/bf16 value, or a case's stated bound); integer and bool outputs exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "backend_ops_cases.h"

namespace rlx {
namespace {

using ir::ActKind;
using ir::BinaryKind;
using ir::DType;
using ir::OpKind;
using ir::ValueId;
using namespace backend_ops;

constexpr double kF32Tolerance = 1e-5;
constexpr double kHalfTolerance = 1e-2;

// ---- the cases, one function per op family ------------------------------------------------

/// Attention of `heads` query heads over `kv_heads` KV heads of `head_dim`.
ir::AttentionAttrs attention_attrs(int64_t heads, int64_t kv_heads, int64_t head_dim,
                                   ir::MaskKind mask = ir::MaskKind::Causal, int64_t window = 0) {
  ir::AttentionAttrs a;
  a.n_heads = heads;
  a.n_kv_heads = kv_heads;
  a.head_dim = head_dim;
  a.mask = mask;
  a.window = window;
  return a;
}

void elementwise_cases(std::vector<OpCase>& cases) {
  for (int k = 0; k <= static_cast<int>(ActKind::Softplus); ++k) {
    const auto kind = static_cast<ActKind>(k);
    const bool positive = kind == ActKind::Log || kind == ActKind::Sqrt || kind == ActKind::Rsqrt;
    CaseMaker c(cases, fmt::format("activation_{}_f32", ir::enum_name(kind)));
    c.output(c.b.activation(kind, c.input("x", DType::F32, {3, 1, 7}, positive ? 0.1f : -3.0f, 3.0f)));
    c.finish();
  }
  for (auto [kind, dt] :
       {std::pair{ActKind::Silu, DType::F16}, {ActKind::GeluTanh, DType::BF16}, {ActKind::Exp, DType::F16}}) {
    CaseMaker c(cases, fmt::format("activation_{}_{}", ir::enum_name(kind), ir::dtype_name(dt)));
    c.output(c.b.activation(kind, c.input("x", dt, {4, 9}, -3, 3)));
    c.finish();
  }
  for (int k = 0; k <= static_cast<int>(BinaryKind::Pow); ++k) {
    const auto kind = static_cast<BinaryKind>(k);
    const bool positive = kind == BinaryKind::Pow || kind == BinaryKind::Div;
    CaseMaker c(cases, fmt::format("binary_{}_f32_broadcast", ir::enum_name(kind)));
    const float lo = positive ? 0.5f : -2.0f;
    c.output(c.b.binary(kind, c.input("a", DType::F32, {3, 1, 5}, lo, 2), c.input("b", DType::F32, {4, 1}, lo, 2)));
    c.finish();
  }
  struct Typed {
    BinaryKind kind;
    DType dt;
    std::vector<int64_t> a, b;
    float lo, hi;
  };
  for (const Typed& t :
       {Typed{BinaryKind::Add, DType::F16, {2, 3, 4}, {4}, -2, 2},
        Typed{BinaryKind::Mul, DType::BF16, {5, 6}, {5, 1}, -2, 2},
        Typed{BinaryKind::Pow, DType::F16, {6}, {6}, 0.5f, 2}, Typed{BinaryKind::Div, DType::I32, {7}, {1}, 1, 50},
        Typed{BinaryKind::Sub, DType::I64, {3, 4}, {3, 1}, -1000, 1000},
        Typed{BinaryKind::Max, DType::I32, {2, 5}, {}, -9, 9}}) {
    CaseMaker c(cases, fmt::format("binary_{}_{}", ir::enum_name(t.kind), ir::dtype_name(t.dt)));
    ValueId a = c.input("a", t.dt, t.a, t.kind == BinaryKind::Div ? -50.0f : t.lo, t.hi);
    c.output(c.b.binary(t.kind, a, c.input("b", t.dt, t.b, t.lo, t.hi)));
    c.finish();
  }
  for (int k = 0; k <= static_cast<int>(ir::CompareKind::Ge); ++k) {  // integer-valued floats: equal pairs occur
    const auto kind = static_cast<ir::CompareKind>(k);
    CaseMaker c(cases, fmt::format("compare_{}_f32_broadcast", ir::enum_name(kind)));
    const Tensor a = random_tensor(DType::I32, {3, 4}, c.next_seed(), -2, 2),
                 b = random_tensor(DType::I32, {4}, c.next_seed(), -2, 2);
    c.output(c.b.compare(kind, c.b.cast(c.input("a", a), DType::F32), c.b.cast(c.input("b", b), DType::F32)));
    c.finish();
  }
  for (auto [kind, dt] : {std::pair{ir::CompareKind::Lt, DType::I32}, {ir::CompareKind::Eq, DType::F16}}) {
    CaseMaker c(cases, fmt::format("compare_{}_{}", ir::enum_name(kind), ir::dtype_name(dt)));
    c.output(c.b.compare(kind, c.input("a", dt, {2, 6}, -3, 3), c.input("b", dt, {2, 1}, -3, 3)));
    c.finish();
  }
  for (DType dt : {DType::F32, DType::F16, DType::I32}) {
    CaseMaker c(cases, fmt::format("where_{}_broadcast", ir::dtype_name(dt)));
    ValueId cond = c.input("c", DType::Bool, {2, 1, 4}, 0, 1);
    c.output(c.b.where(cond, c.input("a", dt, {3, 4}, -5, 5), c.input("b", dt, {1}, -5, 5)));
    c.finish();
  }
  struct CastCase {
    DType from, to;
    float lo, hi;
    const char* what;
  };
  for (const CastCase& t : {CastCase{DType::F32, DType::F16, -65000, 65000, ""},
                            {DType::F32, DType::BF16, -3, 3, ""},
                            {DType::F32, DType::I32, -300, 300, "_truncates"},
                            {DType::F32, DType::I32, -3e9f, 3e9f, "_saturates"},
                            {DType::F32, DType::I64, -1e6f, 1e6f, ""},
                            {DType::F32, DType::Bool, -1, 1, ""},
                            {DType::I32, DType::F32, -1000, 1000, ""},
                            {DType::I64, DType::F16, -5000, 5000, ""},
                            {DType::Bool, DType::F32, 0, 1, ""},
                            {DType::F16, DType::BF16, -100, 100, ""},
                            {DType::BF16, DType::F32, -100, 100, ""},
                            {DType::F16, DType::I32, -100, 100, ""},
                            {DType::I32, DType::I64, -100000, 100000, ""}}) {
    CaseMaker c(cases, fmt::format("cast_{}_to_{}{}", ir::dtype_name(t.from), ir::dtype_name(t.to), t.what));
    // f32 -> bool on integer values in [-1, 1], so that zeros occur
    Tensor x = t.to == DType::Bool ? random_tensor(DType::I32, {4, 5}, c.next_seed(), -1, 1)
                                   : random_tensor(t.from, {4, 5}, c.next_seed(), t.lo, t.hi);
    ValueId in = c.input("x", x);
    if (t.to == DType::Bool) in = c.b.cast(in, DType::F32);
    c.output(c.b.cast(in, t.to));
    c.finish();
  }
  {  // a region mixing every step kind, an f16 intermediate and broadcast inputs
    CaseMaker c(cases, "elementwise_region_mixed_steps");
    ValueId a = c.input("a", DType::F32, {3, 4}, -2, 2), b = c.input("b", DType::F32, {4}, -2, 2);
    ValueId i = c.input("i", DType::I32, {3, 1}, -3, 3);
    auto step = [](OpKind op, uint8_t kind, DType dt, std::vector<int32_t> args) {
      return ir::RegionStep{op, kind, dt, std::move(args)};
    };
    ir::RegionAttrs r;
    r.steps = {step(OpKind::Binary, static_cast<uint8_t>(BinaryKind::Mul), DType::F32, {-1, -2}),
               step(OpKind::Activation, static_cast<uint8_t>(ActKind::Silu), DType::F32, {0}),
               step(OpKind::Cast, 0, DType::F32, {-3}),
               step(OpKind::Binary, static_cast<uint8_t>(BinaryKind::Add), DType::F16, {1, 2}),
               step(OpKind::Compare, static_cast<uint8_t>(ir::CompareKind::Gt), DType::Bool, {0, 1}),
               step(OpKind::Where, 0, DType::F32, {4, 3, 1})};
    c.output(c.b.op(OpKind::ElementwiseRegion, {a, b, i}, r));
    c.finish();
  }
  {
    CaseMaker c(cases, "elementwise_region_f32_chain");
    ValueId a = c.input("a", DType::F32, {2, 3, 5}, -2, 2), b = c.input("b", DType::F32, {3, 1}, 0.5f, 2);
    ir::RegionAttrs r;
    r.steps = {{OpKind::Binary, static_cast<uint8_t>(BinaryKind::Div), DType::F32, {-1, -2}},
               {OpKind::Activation, static_cast<uint8_t>(ActKind::Tanh), DType::F32, {0}},
               {OpKind::Binary, static_cast<uint8_t>(BinaryKind::Sub), DType::F32, {1, -2}}};
    c.output(c.b.op(OpKind::ElementwiseRegion, {a, b}, r));
    c.finish();
  }
}

void matmul_cases(std::vector<OpCase>& cases) {
  const int64_t M = 5, K = 37, N = 3;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    CaseMaker c(cases, fmt::format("matmul_f32_ta{}_tb{}", int(ta), int(tb)));
    ValueId a = c.input("a", DType::F32, ta ? std::vector<int64_t>{2, K, M} : std::vector<int64_t>{2, M, K});
    c.output(
        c.b.matmul(a, c.input("b", DType::F32, tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}), ta, tb));
    c.finish();
  }
  struct Shapes {
    const char* name;
    DType dt;
    std::vector<int64_t> a, b;
    bool tb;
  };
  for (const Shapes& s : {Shapes{"matmul_f32_batch_broadcast_b", DType::F32, {1, 1, 4}, {3, 4, 1}, false},
                          Shapes{"matmul_f32_rank4_broadcast", DType::F32, {2, 1, 3, 6}, {1, 3, 6, 2}, false},
                          Shapes{"matmul_f16", DType::F16, {2, 4, 8}, {8, 5}, false},
                          Shapes{"matmul_bf16_tb", DType::BF16, {3, 16}, {7, 16}, true}}) {
    CaseMaker c(cases, s.name);
    c.output(c.b.matmul(c.input("a", s.dt, s.a), c.input("b", s.dt, s.b), false, s.tb));
    c.finish();
  }
  for (auto [dt, x_dims] : {std::pair{DType::F16, std::vector<int64_t>{3, 64}}, {DType::BF16, {2, 2, 64}}}) {
    CaseMaker c(cases, fmt::format("dequant_matmul_{}_weights", ir::dtype_name(dt)));
    c.output(c.b.dequant_matmul(c.input("x", DType::F32, x_dims), c.param("w", dt, {5, 64})));
    c.finish();
  }
  for (DType dt : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q6_K}) {
    for (bool grid : {true, false}) {
      CaseMaker c(cases, fmt::format("dequant_matmul_{}_{}", ir::dtype_name(dt), grid ? "grid_x" : "random_x"));
      ValueId x = grid ? c.input("x", grid_tensor({3, 256}, c.next_seed())) : c.input("x", DType::F32, {3, 256});
      c.output(c.b.dequant_matmul(x, c.param("w", packed_tensor(dt, 6, 256, c.next_seed()))));
      // Backends may quantize x to 8-bit activations as llama.cpp does (the vec-dot rule);
      // x on the 8-bit grid loses nothing there and keeps the f32 bound, random x may be
      // off by the quantization step (about 0.4% of |x|).
      if (!grid) c.tolerance(kHalfTolerance);
      c.finish();
    }
  }
  struct LinearCase {
    const char* name;
    DType x_dt, w_dt;
    std::vector<int64_t> x_dims;
    bool bias, transpose_b;
    ActKind act;
  };
  for (const LinearCase& t :
       {LinearCase{"fused_matmul_bias_gelu_f32", DType::F32, DType::F32, {7, 19}, true, true, ActKind::Gelu},
        {"fused_matmul_relu_not_transposed_f32", DType::F32, DType::F32, {2, 3, 19}, false, false, ActKind::Relu},
        {"fused_matmul_bias_silu_f16_weights", DType::F32, DType::F16, {4, 19}, true, true, ActKind::Silu},
        {"fused_matmul_bias_gelu_tanh_bf16", DType::BF16, DType::BF16, {3, 19}, true, true, ActKind::GeluTanh}}) {
    CaseMaker c(cases, t.name);
    std::vector<ValueId> ins{
        c.input("x", t.x_dt, t.x_dims),
        c.param("w", t.w_dt, t.transpose_b ? std::vector<int64_t>{11, 19} : std::vector<int64_t>{19, 11})};
    if (t.bias) ins.push_back(c.param("bias", t.x_dt, {11}));
    c.output(c.b.op(OpKind::FusedMatMulBiasAct, ins, ir::FusedMatMulAttrs{t.act, t.bias, t.transpose_b}));
    c.finish();
  }
  for (auto [name, wdt, tb] : {std::tuple{"fused_swiglu_f32", DType::F32, true},
                               {"fused_swiglu_not_transposed_f32", DType::F32, false},
                               {"fused_swiglu_bf16_weights", DType::BF16, true}}) {
    CaseMaker c(cases, name);
    std::vector<int64_t> w_dims = tb ? std::vector<int64_t>{13, 20} : std::vector<int64_t>{20, 13};
    ValueId x = c.input("x", DType::F32, {6, 20});
    ValueId g = c.param("wg", wdt, w_dims), u = c.param("wu", wdt, w_dims);
    c.output(c.b.op(OpKind::FusedSwiGLU, {x, g, u}, ir::FusedSwiGLUAttrs{tb}));
    c.finish();
  }
}

void reduction_cases(std::vector<OpCase>& cases) {
  for (int k = 0; k <= static_cast<int>(ir::ReduceKind::Min); ++k) {
    const auto kind = static_cast<ir::ReduceKind>(k);
    for (bool keep : {false, true}) {
      CaseMaker c(cases, fmt::format("reduce_{}_f32{}", ir::enum_name(kind), keep ? "_keep_dims_axes_0_2" : "_axis_1"));
      ValueId x = c.input("x", DType::F32, {3, 4, 5});
      c.output(c.b.reduce(kind, x, keep ? std::vector<int64_t>{0, -1} : std::vector<int64_t>{1}, keep));
      c.finish();
    }
  }
  // Few outputs over many elements (CUDA cuts each reduction into parts): every axis of
  // [300, 701], and the strided first axis of [20000, 3].
  for (int k = 0; k <= static_cast<int>(ir::ReduceKind::Min); ++k) {
    const auto kind = static_cast<ir::ReduceKind>(k);
    CaseMaker c(cases, fmt::format("reduce_{}_f32_long_rows", ir::enum_name(kind)));
    c.output(c.b.reduce(kind, c.input("x", DType::F32, {300, 701}), {0, 1}));
    c.output(c.b.reduce(kind, c.input("y", DType::F32, {20000, 3}), {0}, /*keep_dims=*/true));
    c.finish();
  }
  for (auto [kind, dt] : {std::pair{ir::ReduceKind::Sum, DType::F16},
                          {ir::ReduceKind::Mean, DType::BF16},
                          {ir::ReduceKind::Max, DType::I32},
                          {ir::ReduceKind::Sum, DType::I64}}) {
    CaseMaker c(cases, fmt::format("reduce_{}_{}", ir::enum_name(kind), ir::dtype_name(dt)));
    c.output(c.b.reduce(kind, c.input("x", dt, {4, 6}, -100, 100), {-1}));
    c.finish();
  }
  for (auto [name, dt, axis] : {std::tuple{"softmax_f32_last_axis", DType::F32, int64_t{-1}},
                                {"softmax_f32_middle_axis", DType::F32, int64_t{1}},
                                {"softmax_f16_last_axis", DType::F16, int64_t{-1}}}) {
    CaseMaker c(cases, name);
    c.output(c.b.softmax(c.input("x", dt, {2, 7, 3}, -4, 4), axis));
    c.finish();
  }
  {  // -inf entries, and a row that is all -inf (zeros)
    CaseMaker c(cases, "softmax_f32_masked_rows");
    const float inf = std::numeric_limits<float>::infinity();
    c.output(c.b.softmax(c.input("x", Tensor::from_f32({0.5f, -inf, 2.0f, -inf, -1.0f, -inf, -inf, -inf, -inf, -inf,
                                                        3.0f, 1.0f, -2.0f, 0.0f, 0.25f},
                                                       {3, 5}))));
    c.finish();
  }
  for (auto [name, dt, axis, exclusive] : {std::tuple{"cumsum_f32_axis_1", DType::F32, int64_t{1}, false},
                                           {"cumsum_f32_exclusive", DType::F32, int64_t{1}, true},
                                           {"cumsum_i32_exclusive", DType::I32, int64_t{-1}, true},
                                           {"cumsum_f16_last_axis", DType::F16, int64_t{-1}, false}}) {
    CaseMaker c(cases, name);
    c.output(c.b.cumsum(c.input("x", dt, {2, 7, 3}, -5, 5), axis, exclusive));
    c.finish();
  }
  for (auto [name, dt, k, values] : {std::tuple{"topk_f32_indices", DType::F32, int64_t{3}, false},
                                     {"topk_f32_values", DType::F32, int64_t{3}, true},
                                     {"topk_f16_values_whole_row", DType::F16, int64_t{7}, true},
                                     {"topk_bf16_indices_with_ties", DType::BF16, int64_t{4}, false}}) {
    CaseMaker c(cases, name);
    // bf16 of values in [-2, 2] rounds many to the same number: ties break by index
    c.output(c.b.topk(c.input("x", dt, {6, 7}, -2, 2), k, values));
    c.finish();
  }
  // The argmax with finite_check over finite rows: the plain argmax (rows of 4096: the
  // CUDA row kernel; 7: the generic one). Rows with NaN / Inf: check_finite_test.cpp.
  for (int64_t len : {int64_t{7}, int64_t{4096}}) {
    CaseMaker c(cases, fmt::format("topk_argmax_finite_check_{}", len));
    c.output(c.b.topk(c.input("x", DType::F32, {3, len}, -4, 4), 1, false, /*finite_check=*/true));
    c.finish();
  }
  {  // integer-valued logits: exact ties too
    CaseMaker c(cases, "topk_f32_indices_integer_ties");
    c.output(c.b.topk(c.b.cast(c.input("x", DType::I32, {5, 9}, -3, 3), DType::F32), 4, false));
    c.finish();
  }
  for (DType dt : {DType::F32, DType::F16}) {
    // Rows: greedy, temperature + top-k, top-p, min-p (draw, temperature, top_k, top_p, min_p).
    CaseMaker c(cases, fmt::format("sample_{}_logits", ir::dtype_name(dt)));
    const std::vector<float> params{0.3f, 0.0f, 0, 1.0f, 0.0f, 0.7f,  0.8f, 5, 1.0f, 0.0f,
                                    0.5f, 1.0f, 0, 0.9f, 0.0f, 0.95f, 1.2f, 0, 1.0f, 0.1f};
    ValueId logits = c.input("logits", dt, {4, 40}, -3, 3);
    c.output(c.b.sample(logits, c.input("params", Tensor::from_f32(params, {4, ir::kSampleParams}))));
    c.finish();
  }
}

void norm_cases(std::vector<OpCase>& cases) {
  for (auto [name, dt, beta] : {std::tuple{"layer_norm_f32_beta", DType::F32, true},
                                {"layer_norm_f32_no_beta", DType::F32, false},
                                {"layer_norm_f16_beta", DType::F16, true},
                                {"layer_norm_bf16_no_beta", DType::BF16, false}}) {
    CaseMaker c(cases, name);
    ValueId x = c.input("x", dt, {5, 13}, -3, 3), g = c.param("g", dt, {13});
    c.output(c.b.layer_norm(x, g, beta ? std::optional<ValueId>(c.param("be", dt, {13})) : std::nullopt, 1e-5));
    c.finish();
  }
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    CaseMaker c(cases, fmt::format("rms_norm_{}", ir::dtype_name(dt)));
    c.output(c.b.rms_norm(c.input("x", dt, {2, 3, 16}, -3, 3), c.param("g", dt, {16}), 1e-6));
    c.finish();
  }
  for (auto [name, kind, dt, beta] :
       {std::tuple{"fused_residual_rms_norm_f32", OpKind::FusedResidualRmsNorm, DType::F32, false},
        {"fused_residual_rms_norm_f16", OpKind::FusedResidualRmsNorm, DType::F16, false},
        {"fused_residual_layer_norm_f32_beta", OpKind::FusedResidualLayerNorm, DType::F32, true},
        {"fused_residual_layer_norm_bf16", OpKind::FusedResidualLayerNorm, DType::BF16, false}}) {
    CaseMaker c(cases, name);
    std::vector<ValueId> ins{c.input("x", dt, {5, 12}, -3, 3), c.input("res", dt, {5, 12}), c.param("g", dt, {12})};
    if (beta) ins.push_back(c.param("be", dt, {12}));
    c.output(c.b.op(kind, ins, ir::NormAttrs{1e-6}));
    c.finish();
  }
}

void rope_and_attention_cases(std::vector<OpCase>& cases) {
  struct RopeCase {
    const char* name;
    ir::RopeLayout layout;
    int64_t n_rot;
    ir::RopeScaling scaling;
    std::vector<double> freq_factors;
    double attn_factor;
    int64_t offset, width, in_width;
    DType dt, pos_dt;
  };
  using ir::RopeLayout, ir::RopeScaling;
  for (const RopeCase& t :
       {RopeCase{
            "rope_normal_f32", RopeLayout::Normal, 8, RopeScaling::None, {}, 1.0, 0, 0, 24, DType::F32, DType::I32},
        {"rope_neox_partial_rotation",
         RopeLayout::Neox,
         4,
         RopeScaling::None,
         {},
         1.0,
         0,
         0,
         24,
         DType::F32,
         DType::I32},
        {"rope_normal_partial_linear",
         RopeLayout::Normal,
         6,
         RopeScaling::Linear,
         {},
         1.0,
         0,
         0,
         24,
         DType::F32,
         DType::I32},
        {"rope_neox_llama3", RopeLayout::Neox, 8, RopeScaling::Llama3, {}, 1.0, 0, 0, 24, DType::F32, DType::I32},
        {"rope_normal_yarn_factors_attn_factor",
         RopeLayout::Normal,
         8,
         RopeScaling::Yarn,
         {1.0, 2.5, 1.25, 4.0},
         1.07,
         0,
         0,
         24,
         DType::F32,
         DType::I32},
        {"rope_neox_column_slice_factors",
         RopeLayout::Neox,
         6,
         RopeScaling::None,
         {1.0, 3.0, 8.0},
         1.2,
         16,
         16,
         40,
         DType::F32,
         DType::I32},
        {"rope_neox_f16_i64_positions",
         RopeLayout::Neox,
         8,
         RopeScaling::None,
         {},
         1.0,
         0,
         0,
         24,
         DType::F16,
         DType::I64}}) {
    CaseMaker c(cases, t.name);
    ir::RopeAttrs r;
    r.head_dim = 8;
    r.n_rot = t.n_rot;
    r.layout = t.layout;
    r.theta = t.scaling == RopeScaling::Llama3 ? 500.0 : 10000.0;
    r.scaling = t.scaling;
    r.factor = 2.0;
    r.original_context = 16;  // puts llama3's and yarn's bands inside these few pairs
    r.freq_factors = t.freq_factors;
    r.attn_factor = t.attn_factor;
    r.offset = t.offset;
    r.width = t.width;
    const std::vector<int64_t> x_dims =
        t.dt == DType::F16 ? std::vector<int64_t>{2, 5, t.in_width} : std::vector<int64_t>{5, t.in_width};
    ValueId x = c.input("x", t.dt, x_dims, -2, 2);
    const std::vector<int32_t> pos{0, 3, 7, 100, 2};
    Tensor pt = t.pos_dt == DType::I32
                    ? tensor_of<int32_t>(DType::I32, {5}, pos)
                    : tensor_of<int64_t>(DType::I64, {5}, std::vector<int64_t>(pos.begin(), pos.end()));
    c.output(c.b.rope(x, c.input("pos", pt), r));
    c.finish();
  }
  struct AttnCase {
    const char* name;
    ir::MaskKind mask;
    int64_t batch, S, T, H, KV, window;
    double scale, softcap;
    bool q_pos;
    DType q_dt, kv_dt;
  };
  using ir::MaskKind;
  for (const AttnCase& t :
       {AttnCase{"attention_causal_gqa_batch2", MaskKind::Causal, 2, 3, 7, 4, 2, 0, 0, 0, false, DType::F32,
                 DType::F32},
        {"attention_no_mask", MaskKind::None, 2, 3, 7, 2, 2, 0, 0, 0, false, DType::F32, DType::F32},
        {"attention_sliding_window_mqa", MaskKind::SlidingWindow, 2, 3, 7, 3, 1, 3, 0, 0, false, DType::F32,
         DType::F32},
        {"attention_softcap_query_positions", MaskKind::Causal, 1, 3, 7, 2, 1, 0, 0, 5.0, true, DType::F32, DType::F32},
        {"attention_window_query_positions_rank2", MaskKind::SlidingWindow, 0, 3, 6, 2, 2, 2, 0.3, 0, true, DType::F32,
         DType::F32},
        {"attention_decode_one_query", MaskKind::Causal, 1, 1, 9, 4, 1, 0, 0, 0, false, DType::F32, DType::F32},
        {"attention_more_queries_than_keys", MaskKind::Causal, 1, 4, 2, 2, 1, 0, 0, 0, false, DType::F32, DType::F32},
        {"attention_f16", MaskKind::Causal, 1, 4, 6, 4, 2, 0, 0, 0, false, DType::F16, DType::F16},
        {"attention_f32_q_f16_kv", MaskKind::Causal, 1, 2, 8, 4, 2, 0, 0, 0, false, DType::F32, DType::F16}}) {
    CaseMaker c(cases, t.name);
    ir::AttentionAttrs a = attention_attrs(t.H, t.KV, 5, t.mask, t.window);
    a.scale = t.scale;
    a.softcap = t.softcap;
    auto dims = [&](int64_t rows, int64_t heads) {  // batch 0: rank 2, no batch dim
      return t.batch == 0 ? std::vector<int64_t>{rows, heads * 5} : std::vector<int64_t>{t.batch, rows, heads * 5};
    };
    ValueId q = c.input("q", t.q_dt, dims(t.S, t.H), -2, 2);
    ValueId k = c.input("k", t.kv_dt, dims(t.T, t.KV), -2, 2), v = c.input("v", t.kv_dt, dims(t.T, t.KV));
    std::optional<ValueId> q_pos;
    if (t.q_pos) q_pos = c.input("q_pos", tensor_of<int32_t>(DType::I32, {t.S}, {1, 4, 2}));
    c.output(c.b.attention(q, k, v, a, q_pos));
    c.finish();
  }
  // The encoder form: sequences padded to one length, each attending to its own valid
  // keys (kv_len), bidirectional or in a local window; one sequence has no key at all.
  for (auto [name, mask, window, lens] :
       {std::tuple{"attention_kv_len_bidirectional", MaskKind::None, int64_t{0}, std::vector<int32_t>{6, 2, 4}},
        {"attention_kv_len_local", MaskKind::Local, int64_t{1}, std::vector<int32_t>{6, 3, 5}},
        {"attention_kv_len_empty_sequence", MaskKind::None, int64_t{0}, std::vector<int32_t>{6, 0, 1}}}) {
    CaseMaker c(cases, name);
    const ir::AttentionAttrs a = attention_attrs(4, 2, 8, mask, window);
    const auto B = static_cast<int64_t>(lens.size());
    ValueId q = c.input("q", DType::F32, {B, 6, 32}, -2, 2);
    ValueId k = c.input("k", DType::F32, {B, 6, 16}, -2, 2), v = c.input("v", DType::F32, {B, 6, 16});
    ValueId pos = c.input("pos", tensor_of<int32_t>(DType::I32, {6}, {0, 1, 2, 3, 4, 5}));
    ValueId kv_len = c.input("kv_len", tensor_of<int32_t>(DType::I32, {B}, lens));
    c.output(c.b.op(ir::OpKind::Attention, {q, k, v, pos, kv_len}, a));
    c.finish();
  }
}

void movement_cases(std::vector<OpCase>& cases) {
  {
    CaseMaker c(cases, "reshape_f32");
    c.output(c.b.reshape(c.input("x", DType::F32, {2, 3, 4}), {4, 6}));
    c.finish();
  }
  {
    CaseMaker c(cases, "reshape_i64");
    c.output(c.b.reshape(c.input("x", DType::I64, {6}, -1e6f, 1e6f), {2, 3}));
    c.finish();
  }
  for (auto [name, dt, dims, perm] :
       {std::tuple{"transpose_f32_201", DType::F32, std::vector<int64_t>{2, 3, 4}, std::vector<int64_t>{2, 0, 1}},
        {"transpose_f16_10", DType::F16, {5, 3}, {1, 0}},
        {"transpose_i32_rank4", DType::I32, {2, 3, 2, 4}, {3, 1, 0, 2}}}) {
    CaseMaker c(cases, name);
    c.output(c.b.transpose(c.input("x", dt, dims, -50, 50), perm));
    c.finish();
  }
  for (auto [name, dt, axis, start, len] :
       {std::tuple{"narrow_f32_axis_1", DType::F32, int64_t{1}, int64_t{1}, int64_t{3}},
        {"narrow_i64_axis_0", DType::I64, int64_t{0}, int64_t{1}, int64_t{1}},
        {"narrow_bf16_last_axis", DType::BF16, int64_t{-1}, int64_t{0}, int64_t{2}}}) {
    CaseMaker c(cases, name);
    c.output(c.b.narrow(c.input("x", dt, {2, 5, 3}, -9, 9), axis, start, ir::Dim(len)));
    c.finish();
  }
  {
    CaseMaker c(cases, "concat_f32_three_axis_1");
    ValueId a = c.input("a", DType::F32, {2, 1, 3}), b = c.input("b", DType::F32, {2, 4, 3});
    c.output(c.b.concat({a, b, c.input("c", DType::F32, {2, 2, 3})}, 1));
    c.finish();
  }
  for (auto [name, dt, axis] :
       {std::tuple{"concat_i32_axis_0", DType::I32, int64_t{0}}, {"concat_f16_last_axis", DType::F16, int64_t{-1}}}) {
    CaseMaker c(cases, name);
    c.output(c.b.concat({c.input("a", dt, {3, 2}, -9, 9), c.input("b", dt, {3, 2}, -9, 9)}, axis));
    c.finish();
  }
  for (auto [name, dt, from, to] :
       {std::tuple{"expand_f32", DType::F32, std::vector<int64_t>{3, 1}, std::vector<int64_t>{2, 3, 4}},
        {"expand_i32_scalar", DType::I32, {}, {2, 2}},
        {"expand_bool", DType::Bool, {1, 4}, {3, 4}}}) {
    CaseMaker c(cases, name);
    c.output(c.b.expand(c.input("x", dt, from, dt == DType::Bool ? 0 : -9, 9), ir::Shape::of(to)));
    c.finish();
  }
  {
    CaseMaker c(cases, "gather_f32_rows_i32_indices");
    ValueId table = c.input("t", DType::F32, {10, 6});
    c.output(c.b.gather(table, c.input("i", tensor_of<int32_t>(DType::I32, {4}, {3, 0, 9, 3}))));
    c.finish();
  }
  {
    CaseMaker c(cases, "gather_f16_axis_1_i64_2d_indices");
    ValueId table = c.input("t", DType::F16, {3, 8, 2});
    c.output(c.b.gather(table, c.input("i", tensor_of<int64_t>(DType::I64, {2, 2}, {7, 1, 1, 0})), 1));
    c.finish();
  }
  for (auto [dt, cols] : {std::pair{DType::Q8_0, int64_t{64}}, {DType::Q4_K, int64_t{256}}}) {
    CaseMaker c(cases, fmt::format("gather_{}_packed_rows", ir::dtype_name(dt)));
    ValueId table = c.param("t", packed_tensor(dt, 6, cols, c.next_seed()));
    c.output(c.b.gather(table, c.input("i", tensor_of<int32_t>(DType::I32, {3}, {5, 0, 2}))));
    c.finish();
  }
  for (auto [name, dt, dims, src_dims, axis, start] :
       {std::tuple{"update_slice_f32_rows", DType::F32, std::vector<int64_t>{8, 6}, std::vector<int64_t>{3, 6},
                   int64_t{0}, int64_t{2}},
        {"update_slice_f16_axis_1_i64_start", DType::F16, {2, 8, 4}, {2, 3, 4}, int64_t{1}, int64_t{5}}}) {
    // The handle is read back after the run as one more output.
    CaseMaker c(cases, name);
    ValueId cache = c.handle("cache", dt, dims);
    ValueId src = c.input("src", dt, src_dims);
    Tensor st = dt == DType::F32 ? tensor_of<int32_t>(DType::I32, {1}, {static_cast<int32_t>(start)})
                                 : tensor_of<int64_t>(DType::I64, {1}, {start});
    ValueId updated = c.b.update_slice(cache, src, c.input("start", st), axis);
    c.output(updated);
    c.output(c.b.reduce(ir::ReduceKind::Sum, updated, {axis}));
    c.finish();
  }
  {  // A stacked KV cache of 3 sequences, each written at its own row (one start per slice).
    CaseMaker c(cases, "update_slice_start_per_sequence");
    ValueId cache = c.handle("cache", DType::F16, {3, 8, 4});
    ValueId src = c.input("src", DType::F16, {3, 2, 4});
    ValueId updated = c.b.update_slice(cache, src, c.input("start", tensor_of<int32_t>(DType::I32, {3}, {6, 0, 3})), 1);
    c.output(updated);
    c.output(c.b.reduce(ir::ReduceKind::Sum, updated, {1}));
    c.finish();
  }
}

// Sizes past the CPU kernels' block, vector and thread splits (tails included).
void larger_cases(std::vector<OpCase>& cases) {
  {
    CaseMaker c(cases, "matmul_f32_blocked_140x45x130");
    c.output(c.b.matmul(c.input("a", DType::F32, {140, 45}), c.input("b", DType::F32, {45, 130})));
    c.finish();
  }
  {
    CaseMaker c(cases, "fused_swiglu_f32_40_rows_wide");
    ValueId x = c.input("x", DType::F32, {40, 96});
    ValueId g = c.param("wg", DType::F32, {200, 96}), u = c.param("wu", DType::F32, {200, 96});
    c.output(c.b.op(OpKind::FusedSwiGLU, {x, g, u}, ir::FusedSwiGLUAttrs{true}));
    c.finish();
  }
  for (DType dt : {DType::Q4_0, DType::Q6_K}) {  // 40 rows: the prefill paths
    CaseMaker c(cases, fmt::format("dequant_matmul_{}_grid_x_40_rows", ir::dtype_name(dt)));
    ValueId x = c.input("x", grid_tensor({40, 512}, c.next_seed()));
    c.output(c.b.dequant_matmul(x, c.param("w", packed_tensor(dt, 24, 512, c.next_seed()))));
    // CUDA's prefill (over 8 rows) multiplies dequantized f16 weights by x in f16 on the
    // tensor cores (both rounded to 11 bits), as tests/cuda DequantMatMulPacked states;
    // measured 1.7e-4 on an H200. An integer tile path would meet the f32 bound.
    c.cuda_tolerance(2e-3);
    c.finish();
  }
  // Several sequences over a stacked cache, each query row at its own sequence's
  // position (q_pos [B, S]): batched decode (S = 1) and batched prefill rows, f32 and f16
  // caches, head_dim 64 (the GPU's decode and tensor-core kernels), a sliding window.
  for (auto [name, S, kv_dt, mask, pos] :
       {std::tuple{"attention_positions_per_sequence_decode", int64_t{1}, DType::F32, ir::MaskKind::Causal,
                   std::vector<int32_t>{40, 3, 0, 17}},
        {"attention_positions_per_sequence_decode_f16_kv", int64_t{1}, DType::F16, ir::MaskKind::Causal,
         std::vector<int32_t>{12, 47, 5, 30}},
        {"attention_positions_per_sequence_rows", int64_t{3}, DType::F32, ir::MaskKind::Causal,
         std::vector<int32_t>{4, 5, 6, 0, 1, 2, 30, 31, 32, 9, 10, 11}},
        {"attention_positions_per_sequence_window", int64_t{2}, DType::F32, ir::MaskKind::SlidingWindow,
         std::vector<int32_t>{20, 21, 2, 3, 44, 45, 7, 8}}}) {
    CaseMaker c(cases, name);
    const ir::AttentionAttrs a = attention_attrs(4, 2, 64, mask, 6);
    ValueId q = c.input("q", DType::F32, {4, S, 4 * 64}), k = c.input("k", kv_dt, {4, 48, 2 * 64});
    ValueId q_pos = c.input("q_pos", tensor_of<int32_t>(DType::I32, {4, S}, pos));
    c.output(c.b.attention(q, k, c.input("v", kv_dt, {4, 48, 2 * 64}), a, q_pos));
    c.finish();
  }
  for (auto [name, S, T, kv_dt] :
       {std::tuple{"attention_head_dim_64_long_context", int64_t{5}, int64_t{70}, DType::F32},
        {"attention_head_dim_64_decode_f16_kv", int64_t{1}, int64_t{50}, DType::F16}}) {
    CaseMaker c(cases, name);
    const ir::AttentionAttrs a = attention_attrs(4, 2, 64);
    ValueId q = c.input("q", DType::F32, {S, 4 * 64}), k = c.input("k", kv_dt, {T, 2 * 64});
    c.output(c.b.attention(q, k, c.input("v", kv_dt, {T, 2 * 64}), a));
    c.finish();
  }
  {
    CaseMaker c(cases, "rope_neox_head_dim_128_far_positions");
    ir::RopeAttrs r;
    r.head_dim = r.n_rot = 128;
    r.layout = ir::RopeLayout::Neox;
    r.theta = 500000.0;
    const std::vector<int32_t> pos{0, 1, 511, 4000, 32767, 9, 100000};
    ValueId x = c.input("x", DType::F32, {7, 2 * 128});
    c.output(c.b.rope(x, c.input("pos", tensor_of<int32_t>(DType::I32, {7}, pos)), r));
    c.finish();
  }
  {
    CaseMaker c(cases, "norms_f32_wide_rows");
    ValueId x = c.input("x", DType::F32, {3, 1000}, -3, 3), g = c.param("g", DType::F32, {1000});
    c.output(c.b.rms_norm(x, g, 1e-6));
    c.output(c.b.layer_norm(x, g, c.param("be", DType::F32, {1000}), 1e-5));
    c.finish();
  }
  {
    CaseMaker c(cases, "softmax_and_activations_f32_long_rows");
    ValueId x = c.input("x", DType::F32, {3, 1001}, -10, 10);
    c.output(c.b.softmax(x));
    c.output(c.b.activation(ActKind::Gelu, x));
    c.output(c.b.activation(ActKind::Exp, x));
    c.output(c.b.activation(ActKind::Silu, x));
    c.finish();
  }
}

// Stacked expert weights [experts, rows, cols] of packed `dt`: each expert's rows as
// packed_tensor makes them.
Tensor packed_experts(DType dt, int64_t experts, int64_t rows, int64_t cols, uint32_t seed) {
  const Tensor t = packed_tensor(dt, experts * rows, cols, seed);
  return Tensor(dt, {experts, rows, cols}, std::vector<uint8_t>(t.bytes().begin(), t.bytes().end()));
}

void moe_cases(std::vector<OpCase>& cases) {
  struct Route {
    const char* name;
    DType dt;
    int64_t rows, experts, k;
    ir::MoeGating gating;
    bool normalize;
  };
  for (const Route& r : {Route{"softmax_top2_normalized_f32", DType::F32, 5, 8, 2, ir::MoeGating::Softmax, true},
                         Route{"softmax_top3_f16", DType::F16, 4, 6, 3, ir::MoeGating::Softmax, false},
                         Route{"sigmoid_top2_bf16", DType::BF16, 3, 16, 2, ir::MoeGating::Sigmoid, true},
                         Route{"softmax_all_experts", DType::F32, 2, 4, 4, ir::MoeGating::Softmax, false},
                         Route{"softmax_top1_normalized", DType::F32, 5, 8, 1, ir::MoeGating::Softmax, true},
                         Route{"sigmoid_top1", DType::F32, 3, 5, 1, ir::MoeGating::Sigmoid, false}}) {
    CaseMaker c(cases, fmt::format("moe_route_{}", r.name));
    c.output(c.b.moe_route(c.input("logits", r.dt, {r.rows, r.experts}, -3, 3), {r.k, r.gating, r.normalize}));
    c.finish();
  }
  {  // equal logits: the lower expert wins
    CaseMaker c(cases, "moe_route_ties_to_lower_expert");
    const Tensor logits = random_tensor(DType::I32, {6, 8}, c.next_seed(), -1, 1);
    c.output(c.b.moe_route(c.b.cast(c.input("logits", logits), DType::F32), {3, ir::MoeGating::Softmax, true}));
    c.finish();
  }
  struct Ffn {
    const char* name;
    DType dt;
    int64_t rows, experts, k, dim, hidden;
    ActKind act;
  };
  for (const Ffn& f : {Ffn{"f32_prefill", DType::F32, 9, 4, 2, 32, 24, ActKind::Silu},
                       Ffn{"f32_one_row_of_8_experts", DType::F32, 1, 8, 2, 32, 16, ActKind::Silu},
                       Ffn{"f16_gelu_tanh", DType::F16, 5, 4, 1, 32, 24, ActKind::GeluTanh},
                       Ffn{"bf16", DType::BF16, 4, 3, 2, 16, 8, ActKind::Silu},
                       Ffn{"q8_0", DType::Q8_0, 7, 4, 2, 64, 64, ActKind::Silu},
                       Ffn{"q4_k", DType::Q4_K, 3, 3, 2, 256, 256, ActKind::Silu}}) {
    CaseMaker c(cases, fmt::format("moe_ffn_{}", f.name));
    const ValueId x = c.input("x", DType::F32, {f.rows, f.dim});
    const ValueId route =
        c.b.moe_route(c.input("logits", DType::F32, {f.rows, f.experts}, -2, 2), {f.k, ir::MoeGating::Softmax, true});
    auto weight = [&](const char* name, int64_t rows, int64_t cols) {
      if (ir::is_packed(f.dt)) return c.param(name, packed_experts(f.dt, f.experts, rows, cols, c.next_seed()));
      return c.param(name, f.dt, {f.experts, rows, cols}, -0.5f, 0.5f);
    };
    const ValueId g = weight("w_gate", f.hidden, f.dim), u = weight("w_up", f.hidden, f.dim);
    c.output(c.b.moe_ffn(x, route, g, u, weight("w_down", f.dim, f.hidden), f.act));
    // Packed experts: backends may quantize x and the gated hidden values to 8 bits (see
    // dequant_matmul); the hidden values' wide spread within a block costs more than x's
    // (measured 1.1-1.2e-2 on the CPU).
    if (ir::is_packed(f.dt)) c.tolerance(3e-2);
    c.finish();
  }
  // Routes given directly: rows routed to no expert (their output is 0), every row to one
  // expert (the others are never read), and a row that weighs every expert.
  for (auto [name, route] :
       {std::pair{"rows_routed_nowhere", std::vector<float>{0, 0, 0, 0.5f, 0.5f, 0, 0, 0, 0, 0, 0, 0}},
        {"all_rows_to_one_expert", std::vector<float>{0, 0.7f, 0, 0, 1.5f, 0, 0, -1, 0}},
        {"one_row_all_experts", std::vector<float>{0.25f, 0.5f, 0.125f}}}) {
    const int64_t experts = 3, rows = static_cast<int64_t>(route.size()) / experts, dim = 32, hidden = 16;
    CaseMaker c(cases, fmt::format("moe_ffn_{}", name));
    const ValueId x = c.input("x", DType::F32, {rows, dim});
    const ValueId r = c.input("route", Tensor::from_f32(route, {rows, experts}));
    const ValueId g = c.param("w_gate", DType::F32, {experts, hidden, dim}, -0.5f, 0.5f);
    const ValueId u = c.param("w_up", DType::F32, {experts, hidden, dim}, -0.5f, 0.5f);
    c.output(c.b.moe_ffn(x, r, g, u, c.param("w_down", DType::F32, {experts, dim, hidden}, -0.5f, 0.5f)));
    c.finish();
  }
}

// Gated delta-net state ops: a continued sequence, a fresh one with padding rows, and
// rows past one chunk of the prefill form; the state handles are compared after the run.
void recurrent_cases(std::vector<OpCase>& cases) {
  for (auto [chunk, rows] : {std::pair{int64_t{0}, int64_t{1}}, {int64_t{4}, int64_t{11}}, {int64_t{64}, int64_t{9}}}) {
    CaseMaker c(cases, fmt::format("gated_delta_rule_chunk{}_rows{}", chunk, rows));
    const int64_t batch = 2, hk = 2, hv = 4, dk = 6, dv = 5;
    const ValueId st = c.handle("ssm", DType::F32, {batch, hv, dk, dv});
    const ValueId q = c.input("q", DType::F32, {batch * rows, hk * dk});
    const ValueId k = c.input("k", DType::F32, {batch * rows, hk * dk});
    const ValueId v = c.input("v", DType::F32, {batch * rows, hv * dv});
    const ValueId g = c.input("g", DType::F32, {batch * rows, hv}, -1.0f, 0.0f);
    const ValueId beta = c.input("beta", DType::F32, {batch * rows, hv}, 0.0f, 1.0f);
    const ValueId seq = c.input("seq", tensor_of<int32_t>(DType::I32, {batch, 2},
                                                          {3, static_cast<int32_t>(rows), 0,
                                                           static_cast<int32_t>(std::max<int64_t>(rows - 2, 1))}));
    ir::DeltaRuleAttrs a;
    a.head_k_dim = dk;
    a.head_v_dim = dv;
    a.chunk = chunk;
    c.output(c.b.gated_delta_rule(st, q, k, v, g, beta, seq, a));
    c.finish();
  }
  for (ir::ActKind act : {ir::ActKind::Silu, ir::ActKind::Identity}) {
    CaseMaker c(cases, fmt::format("causal_conv1d_{}", ir::enum_name(act)));
    const int64_t batch = 2, rows = 5, chans = 9, kernel = 4;
    const ValueId st = c.handle("conv", DType::F32, {batch, kernel - 1, chans});
    const ValueId x = c.input("x", DType::F32, {batch * rows, chans});
    const ValueId w = c.param("w", DType::F32, {chans, kernel});
    const ValueId seq = c.input("seq", tensor_of<int32_t>(DType::I32, {batch, 2}, {2, 5, 0, 2}));
    c.output(c.b.causal_conv1d(st, x, w, seq, act));
    c.finish();
  }
}

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> all;
    elementwise_cases(all);
    matmul_cases(all);
    reduction_cases(all);
    norm_cases(all);
    rope_and_attention_cases(all);
    movement_cases(all);
    larger_cases(all);
    moe_cases(all);
    recurrent_cases(all);
    spatial_cases(all);
    fused_linear_cases(all);
    return all;
  }();
  return cases;
}

// ---- running and comparing -------------------------------------------------------------------

// Compiles `c` on `device` with fusion and folding off, runs it once, and returns its
// outputs followed by every handle's contents after the run.
Expected<std::vector<Tensor>> run_case(const Device& device, const OpCase& c) {
  ASSIGN_OR_RETURN(Session session, Session::create(device));
  compile::CompileOptions o;
  o.fusion.skip = true;
  o.constant_folding = false;
  ASSIGN_OR_RETURN(CompiledGraph g, session.compile_with(c.graph, o));
  for (const auto& [name, t] : c.params) TRY(g.set_param_typed(name, t.bytes(), t.dtype()));
  for (const auto& [name, t] : c.handles) TRY(g.bind_handle(name, t.view()));
  std::vector<NamedTensorView> views;
  for (const auto& [name, t] : c.inputs) views.push_back({name, t.view()});
  ASSIGN_OR_RETURN(std::vector<Tensor> outputs, g.run_typed(views));
  for (const auto& [name, t] : c.handles) {
    ASSIGN_OR_RETURN(Tensor contents, g.read_handle(name));
    outputs.push_back(std::move(contents));
  }
  return outputs;
}

// The case's bound on float outputs: its own, else by the narrowest float dtype in the graph.
double tolerance_of(const OpCase& c) {
  if (c.tolerance > 0) return c.tolerance;
  for (const ir::Node& n : c.graph.nodes())
    if (n.dtype == DType::F16 || n.dtype == DType::BF16) return kHalfTolerance;
  return kF32Tolerance;
}

// ||got - want|| / ||want|| (||got - want|| when want is all zeros); infinity on NaN.
double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  if (std::isnan(diff)) return INFINITY;
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

class BackendOps : public ::testing::TestWithParam<std::tuple<size_t, std::string>> {};

TEST_P(BackendOps, MatchesReference) {
  const auto& [index, device_name] = GetParam();
  const OpCase& c = op_cases()[index];
  ASSERT_FALSE(c.build_error.has_value()) << c.name << ": " << c.build_error->to_string();
  const Device device = Device::parse(device_name).value();
  if (device.kind == DeviceKind::kCuda) {
#ifndef RLX_HAVE_CUDA
    GTEST_SKIP() << "this build has no CUDA backend: cuda skipped";
#endif
    auto session = Session::create(device);
    if (!session) GTEST_SKIP() << "no CUDA device (" << session.error().to_string() << "): cuda skipped";
  }
  auto want = run_case(Device::reference(), c);
  ASSERT_TRUE(want.has_value()) << "reference: " << want.error().to_string();
  auto got = run_case(device, c);
  ASSERT_TRUE(got.has_value()) << device_name << ": " << got.error().to_string();
  ASSERT_EQ(got->size(), want->size());
  const double tol = device.kind == DeviceKind::kCuda && c.cuda_tolerance > 0 ? c.cuda_tolerance : tolerance_of(c);
  for (size_t i = 0; i < want->size(); ++i) {
    const Tensor &w = (*want)[i], &g = (*got)[i];
    ASSERT_EQ(ir::dtype_name(g.dtype()), ir::dtype_name(w.dtype())) << "output " << i;
    ASSERT_EQ(g.shape(), w.shape()) << "output " << i;
    if (!ir::is_float(w.dtype())) {  // integers and bools: byte for byte
      const auto diff = std::mismatch(w.bytes().begin(), w.bytes().end(), g.bytes().begin());
      if (diff.first != w.bytes().end()) {
        const auto element = (diff.first - w.bytes().begin()) / ir::dtype_info(w.dtype()).bytes_per_block;
        ADD_FAILURE() << c.name << " on " << device_name << ": output " << i << " differs at element " << element
                      << ": " << g.to_f32().value()[static_cast<size_t>(element)] << " for "
                      << w.to_f32().value()[static_cast<size_t>(element)];
      }
      continue;
    }
    const double err = relative_l2(g.to_f32().value(), w.to_f32().value());
    RecordProperty(fmt::format("rel_l2_out{}", i), fmt::format("{:.3g}", err));
    EXPECT_LE(err, tol) << c.name << " on " << device_name << ": output " << i << " relative L2 error " << err
                        << " exceeds " << tol;
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, BackendOps,
                         ::testing::Combine(::testing::Range(size_t{0}, op_cases().size()),
                                            ::testing::Values(std::string("cpu"), std::string("cuda"))),
                         [](const ::testing::TestParamInfo<BackendOps::ParamType>& info) {
                           return op_cases()[std::get<0>(info.param)].name + "_on_" + std::get<1>(info.param);
                         });

// Every MIR op kind reaches the reference backend's kernel in at least one case (boundary
// kinds appear in every graph; Custom has user kernels only; HIR kinds never reach a backend).
TEST(BackendOps, EveryMirOpKindHasACase) {
  std::set<OpKind> covered;
  std::set<std::string> names;
  Session reference(Device::reference());
  for (const OpCase& c : op_cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << "two cases named " << c.name;
    ASSERT_FALSE(c.build_error.has_value()) << c.name << ": " << c.build_error->to_string();
    compile::CompileOptions o;
    o.fusion.skip = true;
    o.constant_folding = false;
    auto g = reference.compile_with(c.graph, o);
    ASSERT_TRUE(g.has_value()) << c.name << ": " << g.error().to_string();
    for (const auto& [kind, entry] : g->dispatch_report().kinds)
      if (entry.native > 0) covered.insert(kind);
  }
  for (int i = 0; i < ir::kNumOpKinds; ++i) {
    const auto kind = static_cast<OpKind>(i);
    // (Collectives need a group: tests/runtime/tensor_parallel_test.cpp and the CUDA group tests.)
    if (ir::is_hir_op(kind) || ir::op_info(kind).category == ir::OpCategory::Boundary || kind == OpKind::Custom ||
        ir::op_info(kind).category == ir::OpCategory::Collective)
      continue;
    EXPECT_TRUE(covered.count(kind)) << "no backend_ops case runs op kind " << ir::op_name(kind);
  }
}

}  // namespace
}  // namespace rlx
