// Op kinds (generated from ops.def) and their typed attributes. Every attrs
// struct lists its fields once in `fields(v)`; printing, parsing, equality and
// fingerprinting are generic over that list.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/ir/dtype.h"
#include "rlx/ir/shape.h"

namespace rlx::ir {

enum class OpKind : uint8_t {
#define OP(name, text, min_in, max_in, category, attrs) name,
#include "rlx/ir/ops.def"
#undef OP
};

/// Collective: an op over the ranks of a tensor-parallel group; it runs only on a backend
/// bound into one (Executable::bind_communicator).
enum class OpCategory : uint8_t { Boundary, Elementwise, Compute, Reduction, Norm, Movement, Fused, Extension, Hir, Collective };

struct OpInfo {
  std::string_view name;  ///< text form, e.g. "matmul"
  int min_inputs;
  int max_inputs;         ///< -1 = unbounded
  OpCategory category;
};

const OpInfo& op_info(OpKind k);
inline std::string_view op_name(OpKind k) { return op_info(k).name; }
std::optional<OpKind> parse_op_kind(std::string_view text);
inline constexpr int kNumOpKinds = 0
#define OP(name, text, min_in, max_in, category, attrs) +1
#include "rlx/ir/ops.def"
#undef OP
    ;
inline bool is_hir_op(OpKind k) { return op_info(k).category == OpCategory::Hir; }
inline bool is_elementwise(OpKind k) { return op_info(k).category == OpCategory::Elementwise; }
/// Ops that update their first input — a handle (recurrent state) — in place while
/// producing their output: causal_conv1d and gated_delta_rule. Like update_slice they
/// are writes: never removed, merged or reordered past another user of the handle.
inline bool updates_state(OpKind k) { return k == OpKind::CausalConv1d || k == OpKind::GatedDeltaRule; }

// ---- enums used by attributes (each with a name table for the text form) ----------

#define RLX_ACT_KINDS(X) \
  X(Identity, "identity") X(Gelu, "gelu") X(GeluTanh, "gelu_tanh") X(Silu, "silu") X(Relu, "relu") \
  X(Sigmoid, "sigmoid") X(Tanh, "tanh") X(Exp, "exp") X(Log, "log") X(Sqrt, "sqrt") X(Rsqrt, "rsqrt") \
  X(Neg, "neg") X(Abs, "abs") X(Sin, "sin") X(Cos, "cos") X(Softplus, "softplus")
#define RLX_BINARY_KINDS(X) \
  X(Add, "add") X(Sub, "sub") X(Mul, "mul") X(Div, "div") X(Max, "max") X(Min, "min") X(Pow, "pow")
#define RLX_COMPARE_KINDS(X) X(Eq, "eq") X(Ne, "ne") X(Lt, "lt") X(Le, "le") X(Gt, "gt") X(Ge, "ge")
#define RLX_REDUCE_KINDS(X) X(Sum, "sum") X(Mean, "mean") X(Max, "max") X(Min, "min")
#define RLX_MASK_KINDS(X) X(None, "none") X(Causal, "causal") X(SlidingWindow, "sliding_window") X(Local, "local")
#define RLX_ROPE_LAYOUTS(X) X(Normal, "normal") X(Neox, "neox")
#define RLX_MOE_GATINGS(X) X(Softmax, "softmax") X(Sigmoid, "sigmoid")
#define RLX_ROPE_SCALINGS(X) X(None, "none") X(Linear, "linear") X(Llama3, "llama3") X(Yarn, "yarn")
#define RLX_INTERP_MODES(X) X(Nearest, "nearest") X(Bilinear, "bilinear") X(Bicubic, "bicubic")

#define RLX_ENUM_MEMBER(name, text) name,
enum class ActKind : uint8_t { RLX_ACT_KINDS(RLX_ENUM_MEMBER) };
enum class BinaryKind : uint8_t { RLX_BINARY_KINDS(RLX_ENUM_MEMBER) };
enum class CompareKind : uint8_t { RLX_COMPARE_KINDS(RLX_ENUM_MEMBER) };
enum class ReduceKind : uint8_t { RLX_REDUCE_KINDS(RLX_ENUM_MEMBER) };
enum class MaskKind : uint8_t { RLX_MASK_KINDS(RLX_ENUM_MEMBER) };
enum class RopeLayout : uint8_t { RLX_ROPE_LAYOUTS(RLX_ENUM_MEMBER) };
enum class RopeScaling : uint8_t { RLX_ROPE_SCALINGS(RLX_ENUM_MEMBER) };
enum class MoeGating : uint8_t { RLX_MOE_GATINGS(RLX_ENUM_MEMBER) };
enum class InterpMode : uint8_t { RLX_INTERP_MODES(RLX_ENUM_MEMBER) };
#undef RLX_ENUM_MEMBER

/// Name tables: enum_names(E{}) lists the text of every value in order.
const std::vector<std::string_view>& enum_names(ActKind);
const std::vector<std::string_view>& enum_names(BinaryKind);
const std::vector<std::string_view>& enum_names(CompareKind);
const std::vector<std::string_view>& enum_names(ReduceKind);
const std::vector<std::string_view>& enum_names(MaskKind);
const std::vector<std::string_view>& enum_names(RopeLayout);
const std::vector<std::string_view>& enum_names(RopeScaling);
const std::vector<std::string_view>& enum_names(MoeGating);
const std::vector<std::string_view>& enum_names(InterpMode);
template <typename E>
std::string_view enum_name(E e) { return enum_names(E{})[static_cast<size_t>(e)]; }
template <typename E>
std::optional<E> parse_enum(std::string_view text) {
  const auto& names = enum_names(E{});
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return static_cast<E>(i);
  return std::nullopt;
}

// ---- attribute structs -------------------------------------------------------------
// fields(v) calls v("name", member) for every field, in print order.

struct NoAttrs {
  template <class V> void fields(V&&) {}
};
struct InputAttrs {
  std::string name;
  template <class V> void fields(V&& v) { v("name", name); }
};
/// A weight. In a graph sharded for tensor parallelism (compile/shard_tensor_parallel)
/// every rank holds part `rank` of `shard_parts` equal parts of the full weight along
/// `shard_axis`: the node's shape is that part's; the full weight has shard_parts times
/// as many elements along the axis. shard_parts 1 (axis -1): the full weight.
struct ParamAttrs {
  std::string name;
  int64_t shard_axis = -1;
  int64_t shard_parts = 1;
  template <class V> void fields(V&& v) { v("name", name); v("shard_axis", shard_axis); v("shard_parts", shard_parts); }
};
struct HandleAttrs {
  std::string name;
  template <class V> void fields(V&& v) { v("name", name); }
};
/// Constant payload: raw little-endian bytes of the node's dtype and shape.
struct ConstantData {
  std::shared_ptr<const std::vector<uint8_t>> bytes;
  friend bool operator==(const ConstantData& a, const ConstantData& b);
};
struct ConstantAttrs {
  ConstantData data;
  template <class V> void fields(V&& v) { v("data", data); }
};
struct ActivationAttrs {
  ActKind kind = ActKind::Identity;
  template <class V> void fields(V&& v) { v("kind", kind); }
};
struct BinaryAttrs {
  BinaryKind kind = BinaryKind::Add;
  template <class V> void fields(V&& v) { v("kind", kind); }
};
struct CompareAttrs {
  CompareKind kind = CompareKind::Eq;
  template <class V> void fields(V&& v) { v("kind", kind); }
};
/// y = op(a) @ op(b), batched over leading dims (broadcast), op = optional transpose of the last two.
struct MatMulAttrs {
  bool transpose_a = false;
  bool transpose_b = false;
  template <class V> void fields(V&& v) { v("transpose_a", transpose_a); v("transpose_b", transpose_b); }
};
struct ReduceAttrs {
  ReduceKind kind = ReduceKind::Sum;
  std::vector<int64_t> axes;
  bool keep_dims = false;
  template <class V> void fields(V&& v) { v("kind", kind); v("axes", axes); v("keep_dims", keep_dims); }
};
struct SoftmaxAttrs {
  int64_t axis = -1;
  template <class V> void fields(V&& v) { v("axis", axis); }
};
struct CumsumAttrs {
  int64_t axis = -1;
  bool exclusive = false;
  template <class V> void fields(V&& v) { v("axis", axis); v("exclusive", exclusive); }
};
/// Top-k along the last axis, sorted descending; output i32 indices or the values.
/// `finite_check` (k == 1 indices only): a row holding a NaN or an infinity gives
/// index -1, so that a greedy token picked on a device says when the logits were
/// garbage without a second pass over them.
struct TopKAttrs {
  int64_t k = 1;
  bool values = false;
  bool finite_check = false;
  template <class V> void fields(V&& v) { v("k", k); v("values", values); v("finite_check", finite_check); }
};
/// The `sample` op: one token per row of logits[.., V], chosen as rlx::choose_token
/// defines from the row's parameters (input 2, f32[.., kSampleParams]): the uniform draw
/// u in [0, 1), temperature (<= 0: the best-ranked token), top_k, top_p and min_p.
/// Parameters are run-time data: one executable serves every filter, and a batch may
/// give each sequence its own. Out-of-range values are clamped (draw to [0, 1), top_k
/// to [1, kMaxSampleTopK] with 0 meaning kMaxSampleTopK, top_p to (0, 1], min_p to
/// [0, 1)); the op ranks at most kMaxSampleTopK candidates.
inline constexpr int64_t kMaxSampleTopK = 1024;
inline constexpr int64_t kSampleParams = 5;  ///< draw, temperature, top_k, top_p, min_p
struct NormAttrs {
  double eps = 1e-5;
  template <class V> void fields(V&& v) { v("eps", eps); }
};
/// Rotary embedding on x[.., S, n_heads*head_dim] at positions pos[S]. Only the
/// first n_rot dims of each head rotate. Normal = adjacent pairs, Neox = half split.
/// With width > 0 the op reads columns [offset, offset + width) of each input row (the
/// q or k slice of a fused qkv projection, see fuse_narrow_rope) and outputs `width`
/// columns; width = 0 means the whole row (offset must then be 0).
///
/// Pair i turns by pos * inv_freq[i] (rope_inv_freq): theta^(-2i/n_rot), scaled as
/// `scaling` says, then divided by freq_factors[i] when the model file gives per-pair
/// factors (GGUF rope_freqs / rope_factors_long|short, HF longrope factors). The
/// rotated pair is multiplied by attn_factor (YaRN's and LongRoPE's magnitude scale).
struct RopeAttrs {
  int64_t head_dim = 0;
  int64_t n_rot = 0;
  RopeLayout layout = RopeLayout::Normal;
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::None;
  double factor = 1.0;                ///< linear: pos / factor; llama3: low-frequency divisor; yarn: context scale
  double low_freq_factor = 1.0;       ///< llama3 only
  double high_freq_factor = 4.0;      ///< llama3 only
  int64_t original_context = 8192;    ///< llama3 and yarn: the context the model was trained at
  double beta_fast = 32.0;            ///< yarn: rotations per original context where extrapolation ends
  double beta_slow = 1.0;             ///< yarn: rotations per original context where interpolation starts
  double ext_factor = 1.0;            ///< yarn: weight of the extrapolated frequency in the ramp (0: interpolate)
  std::vector<double> freq_factors;   ///< empty, or n_rot/2 positive divisors of the pair frequencies
  double attn_factor = 1.0;           ///< the rotated pairs are scaled by this (cos and sin times attn_factor)
  int64_t offset = 0;                 ///< first input column read
  int64_t width = 0;                  ///< columns read and written (0 = the input's width)
  template <class V> void fields(V&& v) {
    v("head_dim", head_dim); v("n_rot", n_rot); v("layout", layout); v("theta", theta);
    v("scaling", scaling); v("factor", factor); v("low_freq_factor", low_freq_factor);
    v("high_freq_factor", high_freq_factor); v("original_context", original_context);
    v("beta_fast", beta_fast); v("beta_slow", beta_slow); v("ext_factor", ext_factor);
    v("freq_factors", freq_factors); v("attn_factor", attn_factor);
    v("offset", offset); v("width", width);
  }
  friend bool operator==(const RopeAttrs&, const RopeAttrs&) = default;
};
/// The rotation frequencies of `r`, in double: inv_freq[i] = theta^(-2i/n_rot) for
/// i < n_rot/2, then scaled as r.scaling says (linear: / factor; llama3: by wavelength,
/// as Llama 3.1 defines it; yarn: a ramp between the interpolated and extrapolated
/// frequency over the correction range of beta_fast..beta_slow rotations, as YaRN
/// defines it), then divided by r.freq_factors[i] when given. Every backend and the
/// primitive rope form use this table.
std::vector<double> rope_inv_freq(const RopeAttrs& r);
/// YaRN's correction range [low, high] of pair indices (floored / ceiled, clamped to
/// [0, n_rot - 1]): pairs below low keep their frequency, pairs above high are fully
/// interpolated.
std::pair<double, double> rope_yarn_range(const RopeAttrs& r);
/// An error naming the field when r's scaling fields are out of range (a factor that is
/// not positive and finite, freq_factors of the wrong length, ...).
Status check_rope_attrs(const RopeAttrs& r);
/// Multi-head attention. q[.., S, n_heads*head_dim], k/v[.., T, n_kv_heads*head_dim];
/// query head h reads kv head h / (n_heads / n_kv_heads). Optional q_pos[S] gives each
/// query's absolute position (keys sit at 0..T-1); without it queries are aligned to
/// the end of the keys (pos = T - S + i). scores = q.k * scale, then softcap*tanh(s/softcap)
/// when softcap > 0, then the mask (causal: key <= pos; sliding: pos - key < window;
/// local: |pos - key| <= window, both directions, as ModernBERT's local layers).
/// Optional kv_len i32[B] (input 5; q_pos must then be given), B the product of q's
/// leading dims: batch item b attends only to keys 0 .. kv_len[b]-1 (a padding mask
/// for sequences of different lengths in one batch; a query row with no key left
/// outputs zeros).
struct AttentionAttrs {
  int64_t n_heads = 1;
  int64_t n_kv_heads = 1;
  int64_t head_dim = 1;
  MaskKind mask = MaskKind::Causal;
  int64_t window = 0;
  double scale = 0.0;    ///< 0 = 1/sqrt(head_dim)
  double softcap = 0.0;  ///< 0 = off
  template <class V> void fields(V&& v) {
    v("n_heads", n_heads); v("n_kv_heads", n_kv_heads); v("head_dim", head_dim); v("mask", mask);
    v("window", window); v("scale", scale); v("softcap", softcap);
  }
};
/// Target shape of Reshape / Expand.
struct ShapeAttrs {
  Shape shape;
  template <class V> void fields(V&& v) { v("shape", shape); }
};
struct TransposeAttrs {
  std::vector<int64_t> perm;
  template <class V> void fields(V&& v) { v("perm", perm); }
};
struct NarrowAttrs {
  int64_t axis = 0;
  int64_t start = 0;
  Dim length;
  template <class V> void fields(V&& v) { v("axis", axis); v("start", start); v("length", length); }
};
/// all_reduce / all_gather: the number of ranks of the group (>= 2). Every rank runs the
/// same graph; the rank itself is the executable's, not the node's.
struct CollectiveAttrs {
  int64_t world = 2;
  template <class V> void fields(V&& v) { v("world", world); }
};
struct AxisAttrs {
  int64_t axis = 0;
  template <class V> void fields(V&& v) { v("axis", axis); }
};
/// y = act(x @ W^T + bias) (transpose_b = true: W is [N, K], the nn.Linear/GGUF layout).
struct FusedMatMulAttrs {
  ActKind act = ActKind::Identity;
  bool has_bias = false;
  bool transpose_b = true;
  template <class V> void fields(V&& v) { v("act", act); v("has_bias", has_bias); v("transpose_b", transpose_b); }
};
/// y = silu(x @ Wg^T) * (x @ Wu^T) (transpose_b = true: weights are [N, K]).
struct FusedSwiGLUAttrs {
  bool transpose_b = true;
  template <class V> void fields(V&& v) { v("transpose_b", transpose_b); }
};
/// A linear product with the prologue and epilogues a decode GEMV kernel folds into
/// itself, made by fuse_linear for products of few rows on a backend whose
/// Target::fused_linear takes them (CUDA decode). Inputs, in order:
///   x[.., K] (f32), w[N, K] (f32 / f16 / bf16 or packed, as dequant_matmul's),
///   w_up[N, K] (swiglu; w's dtype), gamma[K] (norm), residual (residual; the result's
///   shape), pos i32[rows] (rope), cache[L, N] and start i32[1] (cache_write).
/// With xn = norm ? rms_norm(x, eps) * gamma : x (the norm kernel's arithmetic):
///   y = xn . w^T (f32 accumulation; packed weights as dequant_matmul computes them)
///   swiglu: y = silu(y) * (xn . w_up^T)      residual: y = y + residual
///   rope: y = rope(y, pos) with `rope` (whole rows: offset 0, width 0)
///   cache_write: the result is cache with rows [start, start + rows) replaced by y
///   (rounded to cache's dtype), as update_slice(cache, y, start) on axis 0.
/// Products with the same group >= 0 read the same x (and norm): the backend runs them
/// as one launch. Every value a group member reads is made before the first member.
struct FusedLinearAttrs {
  bool norm = false;
  double eps = 1e-5;  ///< the norm prologue's epsilon
  bool swiglu = false;
  bool residual = false;
  bool rope = false;
  RopeAttrs rope_attrs;
  bool cache_write = false;
  int64_t group = -1;
  template <class V> void fields(V&& v) {
    v("norm", norm); v("eps", eps); v("swiglu", swiglu); v("residual", residual); v("rope", rope);
    v("rope_head_dim", rope_attrs.head_dim); v("rope_n_rot", rope_attrs.n_rot); v("rope_layout", rope_attrs.layout);
    v("rope_theta", rope_attrs.theta); v("rope_scaling", rope_attrs.scaling); v("rope_factor", rope_attrs.factor);
    v("rope_low_freq_factor", rope_attrs.low_freq_factor); v("rope_high_freq_factor", rope_attrs.high_freq_factor);
    v("rope_original_context", rope_attrs.original_context); v("rope_beta_fast", rope_attrs.beta_fast);
    v("rope_beta_slow", rope_attrs.beta_slow); v("rope_ext_factor", rope_attrs.ext_factor);
    v("rope_freq_factors", rope_attrs.freq_factors); v("rope_attn_factor", rope_attrs.attn_factor);
    v("cache_write", cache_write); v("group", group);
  }
  /// Index of each optional input, or -1 when the flags leave it out.
  int w_up_input() const { return swiglu ? 2 : -1; }
  int gamma_input() const { return norm ? 2 + swiglu : -1; }
  int residual_input() const { return residual ? 2 + swiglu + norm : -1; }
  int pos_input() const { return rope ? 2 + swiglu + norm + residual : -1; }
  int cache_input() const { return cache_write ? 2 + swiglu + norm + residual + rope : -1; }
  /// Inputs the flags call for.
  size_t num_inputs() const { return 2 + swiglu + norm + residual + rope + 2 * cache_write; }
};
/// One step of an ElementwiseRegion: op (Activation/Binary/Compare/Where/Cast), its kind
/// value, result dtype, and args (< 0: region input -1-arg; >= 0: an earlier step).
struct RegionStep {
  OpKind op = OpKind::Activation;
  uint8_t kind = 0;
  DType dtype = DType::F32;
  std::vector<int32_t> args;
  friend bool operator==(const RegionStep&, const RegionStep&) = default;
};
/// A fused chain of elementwise ops over broadcastable inputs; the last step is the output.
struct RegionAttrs {
  std::vector<RegionStep> steps;
  template <class V> void fields(V&& v) { v("steps", steps); }
};
/// A user-registered op: its name selects the shape function and kernels; config is
/// an opaque string the op's own code interprets.
struct CustomAttrs {
  std::string name;
  std::string config;
  template <class V> void fields(V&& v) { v("name", name); v("config", config); }
};
struct GeluFfnAttrs {
  bool gated = false;  ///< true: GeGLU gelu(x.Wg)*(x.Wu); false: gelu(x.Wu)
  bool tanh_approx = true;
  template <class V> void fields(V&& v) { v("gated", gated); v("tanh_approx", tanh_approx); }
};
/// HIR attention block: inputs x, wq, wk, wv, wo, pos, then optionally bq, bk, bv
/// (qkv_bias), q_norm, k_norm (qk_norm; per-head RMSNorm weights), k_cache, v_cache
/// (kv_cache; handles [ctx, n_kv_heads*head_dim] written at pos[0]).
struct AttentionBlockAttrs {
  AttentionAttrs attn;
  RopeAttrs rope;
  bool use_rope = true;
  bool qkv_bias = false;
  bool qk_norm = false;
  double qk_norm_eps = 1e-6;
  bool kv_cache = false;
  /// Multiply q by the attention scale before q.k (and attend with scale 1), as
  /// llama.cpp's Gemma 2 graph does; only rounding (e.g. an f16 KV cache) can tell.
  bool prescale_q = false;
  /// Sequences in one run (kv_cache only): x holds batch*S rows, sequence b at rows
  /// [b*S, (b+1)*S) with its own positions in pos and its own pair of caches (inputs
  /// k_0, v_0, k_1, v_1, ... after the other inputs). Projections run over all rows.
  int64_t batch = 1;
  /// Encoder form (no kv_cache): x holds B sequences of S rows each ([B*S, D]), the
  /// positions input is i32[S] (shared by the sequences), and one more input follows the
  /// others, kv_len i32[B]: sequence b's first kv_len[b] rows are real, its other rows
  /// padding that no row attends to (their own outputs are computed and meaningless).
  bool key_lengths = false;
  /// Gated attention (Qwen3.5): the q projection yields 2*head_dim per head, [q_h | g_h],
  /// and the heads' output is multiplied by sigmoid(g) before the output projection.
  bool q_gate = false;
  /// Compact rows (batch > 1 with a kv cache): x holds only the T real rows of the run
  /// ([T, D], no padding), so the projections and everything after the block compute T
  /// rows, not batch*S. The positions input stays padded (i32[batch*S], sequence b at
  /// [b*S, (b+1)*S)), and two inputs follow the caches: slot_rows i32[batch*S] (the
  /// compact row whose k/v/q fill each padded row; any row for a padding one) and
  /// row_slots i32[T] (the padded row of each compact row). Rope runs on the compact rows
  /// at their padded positions; the cache write and the attention run on the padded
  /// layout as without compact rows; each compact row takes its padded row's output.
  bool compact_rows = false;
  /// Multi-head latent attention (MiniCPM3; DeepSeek-V2's projections), on when
  /// latent_kv_rank > 0. Each head's query and key are [nope | rope] (latent_nope_dim +
  /// latent_rope_dim wide); keys and values are expanded per head from one latent
  /// c = rms_norm((x W_kv_a)[:kv rank]) by W_kv_b, and the rotary part of every head's key
  /// is one vector shared by the heads, (x W_kv_a)[kv rank:]. Inputs 1..4 are then W_q
  /// [H*(nope+rope), q rank or D], W_kv_a [kv rank + rope, D], W_kv_b [H*(nope+v), kv rank]
  /// and W_o [D, H*v]; after the positions come kv_a_norm [kv rank] and, when
  /// latent_q_rank > 0, W_q_a [q rank, D] and q_a_norm [q rank] (then q = rms_norm(x W_q_a)
  /// W_q). The norms use qk_norm_eps. rope turns the rope part (rope.n_rot =
  /// latent_rope_dim); attn.n_kv_heads equals attn.n_heads, and attn.head_dim is
  /// max(nope + rope, v): the width per head of the cache and the attention, q/k/v
  /// zero-padded to it; attn.scale 0 means 1/sqrt(nope + rope). No biases, q-k norms,
  /// gate or encoder form.
  int64_t latent_q_rank = 0;
  int64_t latent_kv_rank = 0;
  int64_t latent_rope_dim = 0;
  int64_t latent_nope_dim = 0;
  int64_t latent_v_dim = 0;
  bool latent() const { return latent_kv_rank > 0; }
  template <class V> void fields(V&& v) {
    attn.fields(v);
    v("rope_n_rot", rope.n_rot); v("rope_layout", rope.layout); v("rope_theta", rope.theta);
    v("rope_scaling", rope.scaling); v("rope_factor", rope.factor);
    v("rope_low_freq_factor", rope.low_freq_factor); v("rope_high_freq_factor", rope.high_freq_factor);
    v("rope_original_context", rope.original_context); v("rope_beta_fast", rope.beta_fast);
    v("rope_beta_slow", rope.beta_slow); v("rope_ext_factor", rope.ext_factor);
    v("rope_freq_factors", rope.freq_factors); v("rope_attn_factor", rope.attn_factor);
    v("use_rope", use_rope); v("qkv_bias", qkv_bias); v("qk_norm", qk_norm);
    v("qk_norm_eps", qk_norm_eps); v("kv_cache", kv_cache); v("prescale_q", prescale_q);
    v("batch", batch); v("key_lengths", key_lengths); v("q_gate", q_gate);
    v("compact_rows", compact_rows); v("latent_q_rank", latent_q_rank); v("latent_kv_rank", latent_kv_rank);
    v("latent_rope_dim", latent_rope_dim); v("latent_nope_dim", latent_nope_dim); v("latent_v_dim", latent_v_dim);
  }
};

/// Router of a mixture of experts: logits[T, E] -> f32[T, E] expert weights, zero
/// except for the k chosen experts of each row. Gating Softmax: p = softmax(row);
/// Sigmoid: p = sigmoid(row). The chosen experts are the k largest p (ties: the
/// lower expert index); their weights are p, divided by the sum of the chosen p when
/// `normalize` (softmax gating with normalize equals a softmax over the chosen logits).
struct MoeRouteAttrs {
  int64_t k = 1;
  MoeGating gating = MoeGating::Softmax;
  bool normalize = false;
  template <class V> void fields(V&& v) { v("k", k); v("gating", gating); v("normalize", normalize); }
};
/// Expert feed-forward of a mixture of experts over stacked expert weights:
///   y[t] = sum over experts e with route[t, e] != 0 of
///          route[t, e] * w_down[e] . (act(w_gate[e] . x[t]) * (w_up[e] . x[t]))
/// x f32[T, D], route f32[T, E] (moe_route's output), w_gate / w_up [E, F, D],
/// w_down [E, D, F] in f32, f16, bf16 or one packed block type per weight. Experts
/// with a zero weight are not computed (a backend reads only the chosen experts).
struct MoeFfnAttrs {
  ActKind act = ActKind::Silu;  ///< Silu: SwiGLU experts; GeluTanh / Gelu: GeGLU experts
  template <class V> void fields(V&& v) { v("act", act); }
};

/// Causal depthwise conv1d over the rows of each sequence, with a carried state
/// (Mamba / gated delta-net's short convolution). Inputs: state handle f32[B, K-1, C]
/// (the last K-1 input rows each sequence has seen), x f32[B*S, C] (sequence b at rows
/// b*S ..), w f32[C, K], seq i32[B, 2] = (tokens seen before, real rows of this run)
/// per sequence. With window_b = the state's rows when tokens seen > 0, else zeros:
///   y[b, t, c] = act(sum_j w[c, j] * concat(window_b, x_b)[t + j, c])
/// and the state becomes the last K-1 rows of concat(window_b, the real rows of x_b);
/// rows past a sequence's real count are padding: computed, but they never reach the
/// state. Output f32[B*S, C].
struct CausalConvAttrs {
  ActKind act = ActKind::Silu;  ///< Identity or Silu
  template <class V> void fields(V&& v) { v("act", act); }
};
/// The gated delta rule (gated delta-net's linear attention) with a recurrent state per
/// sequence and value head, S_h f32[Dk, Dv]. Inputs: state handle f32[B, Hv, Dk, Dv],
/// q, k f32[B*S, Hk*Dk], v f32[B*S, Hv*Dv], g (log decay, <= 0) and beta f32[B*S, Hv],
/// seq i32[B, 2] as in causal_conv1d (tokens seen 0: the state starts at zero). Value
/// head h reads q/k head h / (Hv / Hk). Per real row t, in order:
///   q, k <- l2-normalized (eps 1e-6, when l2norm_qk); q <- q * scale
///   S <- exp(g_t) S;  S <- S + k_t (beta_t (v_t - S^T k_t))^T;  o_t = S^T q_t
/// Output f32[B*S, Hv*Dv] (padding rows are computed from the state reached, and leave
/// it unchanged). chunk > 0 evaluates the same recurrence chunk by chunk (the WY / UT
/// form: parallel within a chunk of that many rows, sequential across chunks); 0 runs it
/// token by token (the decode form).
struct DeltaRuleAttrs {
  int64_t head_k_dim = 0, head_v_dim = 0;
  int64_t chunk = 64;
  bool l2norm_qk = true;
  double scale = 0;  ///< 0: 1/sqrt(head_k_dim)
  template <class V> void fields(V&& v) {
    v("head_k_dim", head_k_dim); v("head_v_dim", head_v_dim); v("chunk", chunk); v("l2norm_qk", l2norm_qk);
    v("scale", scale);
  }
};
/// Convolution over the spatial dims of x[N, C, *S] (one spatial dim: NCL, conv1d; two:
/// NCHW, conv2d) with weight w[O, C/groups, *K] and an optional bias[O]. Channels split
/// into `groups` equal groups; output channel o reads the input channels of group
/// o / (O/groups):
///   y[n, o, p] = bias[o] + sum over c' < C/groups, k < K of
///                w[o, c', k] * x[n, g*C/groups + c', p*stride - padding + k*dilation]
/// where input positions outside [0, S) read 0 (zero padding at both ends). Output size
/// per spatial dim: (S + 2*padding - dilation*(K-1) - 1) / stride + 1 (floor), >= 1.
/// stride / padding / dilation hold one entry per spatial dim, or are empty (1 / 0 / 1).
struct ConvAttrs {
  std::vector<int64_t> stride;
  std::vector<int64_t> padding;
  std::vector<int64_t> dilation;
  int64_t groups = 1;
  template <class V> void fields(V&& v) {
    v("stride", stride); v("padding", padding); v("dilation", dilation); v("groups", groups);
  }
};
/// Transposed convolution (conv's gradient with respect to its input, "deconvolution") of
/// x[N, C, *S] (1 or 2 spatial dims) with w[C, O/groups, *K] (PyTorch's ConvTranspose
/// layout) and an optional bias[O]. Input channel c of group g = c / (C/groups) scatters
/// into the output channels of that group:
///   y[n, o, q] = bias[o] + sum over c in group(o), k, p with q = p*stride - padding + k*dilation
///                of x[n, c, p] * w[c, o - g*O/groups, k]
/// Output size per spatial dim: (S-1)*stride - 2*padding + dilation*(K-1) + output_padding + 1,
/// >= 1; output_padding < max(stride, dilation), as in PyTorch. Lists hold one entry per
/// spatial dim, or are empty (stride 1, padding 0, dilation 1, output_padding 0).
struct ConvTransposeAttrs {
  std::vector<int64_t> stride;
  std::vector<int64_t> padding;
  std::vector<int64_t> dilation;
  std::vector<int64_t> output_padding;
  int64_t groups = 1;
  template <class V> void fields(V&& v) {
    v("stride", stride); v("padding", padding); v("dilation", dilation); v("output_padding", output_padding);
    v("groups", groups);
  }
};
/// Group normalization of x[N, C, *S] (rank >= 2): the channels split into `groups`
/// equal groups; each (n, group) is normalized over its C/groups channels and all
/// spatial positions, y = (x - mean) / sqrt(var + eps) * gamma[c] (+ beta[c]), var the
/// biased variance (as torch.nn.GroupNorm).
struct GroupNormAttrs {
  int64_t groups = 1;
  double eps = 1e-5;
  template <class V> void fields(V&& v) { v("groups", groups); v("eps", eps); }
};
/// Resampling of x[N, C, H, W] to [N, C, size[0], size[1]] as torch.nn.functional.interpolate
/// (antialias off). Source coordinate of output index i along a dim of input length L and
/// output length M: align_corners ? i * (L-1)/(M-1) (0 when M == 1) : (i + 0.5) * L/M - 0.5.
/// Nearest: input index min(floor(i * L/M), L-1) (torch's legacy "nearest"; align_corners
/// must be false). Bilinear: the two neighbours, weights 1-t and t (source clamped at 0
/// when not align_corners). Bicubic: the four neighbours floor(s)-1 .. floor(s)+2 with
/// Keys' cubic convolution weights (a = -0.75), indices clamped to [0, L-1].
struct InterpolateAttrs {
  InterpMode mode = InterpMode::Bicubic;
  std::vector<int64_t> size;  ///< output H, W
  bool align_corners = false;
  template <class V> void fields(V&& v) { v("mode", mode); v("size", size); v("align_corners", align_corners); }
};

/// window_partition / window_unpartition (SAM's windowed ViT attention). Partition cuts
/// x[B, H, W, C], zero padded at the bottom and right to multiples of `window`, into
/// [B * ceil(H/window) * ceil(W/window), window, window, C], windows in row-major order per
/// image; `height` and `width` must be 0. Unpartition is its inverse for an image of
/// `height` x `width` (>= 1): it puts the windows back and drops the padding.
struct WindowAttrs {
  int64_t window = 1;
  int64_t height = 0;
  int64_t width = 0;
  template <class V> void fields(V&& v) { v("window", window); v("height", height); v("width", width); }
};
/// Self-attention over a grid of grid_h x grid_w tokens with SAM's decomposed relative
/// position bias. q, k, v are [N, T, H*D] (T = grid_h * grid_w, token t at row t / grid_w,
/// column t % grid_w); rel_h is [2*grid_h - 1, D], rel_w [2*grid_w - 1, D]. For each item
/// n, head h, query i at (yi, xi) and key j at (yj, xj):
///   s_ij = scale * q_i . k_j + q_i . rel_h[yi - yj + grid_h - 1] + q_i . rel_w[xi - xj + grid_w - 1]
/// (the bias uses the unscaled query), o_i = sum_j softmax_j(s_ij) v_j. No mask.
struct RelPosAttentionAttrs {
  int64_t n_heads = 1;
  int64_t head_dim = 1;
  int64_t grid_h = 1;
  int64_t grid_w = 1;
  double scale = 0.0;  ///< 0 = 1/sqrt(head_dim)
  template <class V> void fields(V&& v) {
    v("n_heads", n_heads); v("head_dim", head_dim); v("grid_h", grid_h); v("grid_w", grid_w); v("scale", scale);
  }
};

using Attrs = std::variant<NoAttrs, InputAttrs, ParamAttrs, HandleAttrs, ConstantAttrs, ActivationAttrs,
                           BinaryAttrs, CompareAttrs, MatMulAttrs, ReduceAttrs, SoftmaxAttrs, CumsumAttrs,
                           TopKAttrs, NormAttrs, RopeAttrs, AttentionAttrs, ShapeAttrs, TransposeAttrs,
                           NarrowAttrs, AxisAttrs, FusedMatMulAttrs, FusedSwiGLUAttrs, RegionAttrs,
                           CustomAttrs, GeluFfnAttrs, AttentionBlockAttrs, MoeRouteAttrs, MoeFfnAttrs,
                           CausalConvAttrs, DeltaRuleAttrs,
                           ConvAttrs, GroupNormAttrs, InterpolateAttrs, ConvTransposeAttrs, FusedLinearAttrs,
                           CollectiveAttrs, WindowAttrs, RelPosAttentionAttrs>;

/// Default-constructed attrs of the type ops.def gives `kind`.
Attrs default_attrs(OpKind kind);
/// True when `attrs` holds the type ops.def gives `kind`.
bool attrs_match(OpKind kind, const Attrs& attrs);
/// Structural equality of attrs (field by field; constant data by bytes).
bool attrs_equal(const Attrs& a, const Attrs& b);

}  // namespace rlx::ir
