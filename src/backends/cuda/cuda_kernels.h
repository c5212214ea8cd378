// Host-callable launchers of the CUDA backend's kernels, with plain-data parameter
// structs. This header is shared by the .cu files (nvcc) and the executor (C++); it
// knows nothing of the IR: the executor translates LIR nodes into these structs at
// compile time (cuda_steps.cpp) and the run loop only fills in pointers and launches.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace rlx::cuda_backend {

/// Programmatic dependent launch for the kernels of this backend (process-wide; set
/// by CudaBackend::create: on for sm_90 devices unless RLX_CUDA_PDL=0). See launch_k in
/// cuda_common.cuh.
void set_programmatic_launch(bool on);
bool programmatic_launch();

/// Element types, numbered exactly as rlx::ir::DType (checked by static_assert in
/// cuda_steps.cpp).
enum class DT : uint8_t {
  F32, F16, BF16, F64, I8, U8, I32, I64, Bool, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K,
  IQ4_NL, IQ4_XS, IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_S, IQ1_M, TQ1_0, TQ2_0
};

/// Op codes of one region step (values of ir::ActKind / BinaryKind / CompareKind are
/// passed through unchanged in `kind`).
enum class RegionOp : uint8_t { kActivation, kBinary, kCompare, kWhere, kCast };

inline constexpr int kMaxRank = 8;
inline constexpr int kMaxRegionInputs = 16;
inline constexpr int kMaxRegionSteps = 32;

struct RegionStepK {
  RegionOp op = RegionOp::kActivation;
  uint8_t kind = 0;
  DT dtype = DT::F32;  ///< the step's result dtype (intermediates are rounded to it)
  int8_t args[3] = {0, 0, 0};  ///< < 0: region input -1-arg; >= 0: an earlier step
};

/// An elementwise program over broadcast inputs; the last step is the output.
struct RegionParams {
  int rank = 1;
  int n_in = 0;
  int n_steps = 0;
  DT out_dt = DT::F32;
  bool use_double = false;  ///< evaluate in double (integer or f64 operands)
  bool contiguous = false;  ///< set by launch_region: no input broadcasts (element e at e)
  int64_t total = 0;
  int64_t dims[kMaxRank] = {};
  DT in_dt[kMaxRegionInputs] = {};
  int64_t strides[kMaxRegionInputs][kMaxRank] = {};  ///< in elements; 0 = broadcast
  const void* in[kMaxRegionInputs] = {};
  void* out = nullptr;
  RegionStepK steps[kMaxRegionSteps] = {};
};
void launch_region(const RegionParams& p, cudaStream_t s);

/// out[i] = in[in_offset + sum(idx_d * in_strides_d)], elements of `elem_bytes`.
struct StridedCopyParams {
  int rank = 1;
  int elem_bytes = 4;
  int64_t total = 0;
  int64_t dims[kMaxRank] = {};
  int64_t in_strides[kMaxRank] = {};
  int64_t in_offset = 0;
  const void* in = nullptr;
  void* out = nullptr;
};
void launch_strided_copy(const StridedCopyParams& p, cudaStream_t s);

/// dst[o, start + r, :] = src[o, r, :] for r < rows, start read on the device.
/// An out-of-range start writes nothing and stores `err_code` into *err.
struct UpdateSliceParams {
  uint8_t* dst = nullptr;
  const uint8_t* src = nullptr;
  const void* start = nullptr;
  DT start_dt = DT::I32;
  bool start_per_outer = false;  ///< one start per outer slice (a stacked cache of several sequences)
  int64_t outer = 1, dst_len = 0, src_len = 0, rows = 0, inner_bytes = 0;
  int* err = nullptr;
  int err_code = 0;
};
void launch_update_slice(const UpdateSliceParams& p, cudaStream_t s);

/// causal_conv1d (ir::CausalConvAttrs): one thread per (sequence, channel) walks the
/// rows; the state [batch, kernel-1, chans] is updated in place from the real rows.
/// seq i32[batch, 2]; an entry that does not fit the rows stores err_code into *err.
struct CausalConvParams {
  float* state = nullptr;
  const float* x = nullptr;
  const float* w = nullptr;  // [chans, kernel]
  const int32_t* seq = nullptr;
  float* y = nullptr;
  int64_t batch = 0, rows = 0, chans = 0, kernel = 0;
  bool silu = false;
  int* err = nullptr;
  int err_code = 0;
};
void launch_causal_conv1d(const CausalConvParams& p, cudaStream_t s);

/// gated_delta_rule (ir::DeltaRuleAttrs), token by token: one block per (sequence,
/// value head), one thread per value column of the state [dk, dv] (updated in place).
struct DeltaRuleParams {
  float* state = nullptr;  // [batch, hv, dk, dv]
  const float *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
  const int32_t* seq = nullptr;
  float* out = nullptr;
  int64_t batch = 0, rows = 0, hk = 0, hv = 0, dk = 0, dv = 0;
  int64_t chunk = 0;  // rows a chunk (from prepare_gated_delta_chunked); 0: token by token
  float* work = nullptr;  // the chunked form's workspace (gated_delta_workspace_bytes)
  bool l2norm = true;
  float scale = 1.0f;
  int* err = nullptr;
  int err_code = 0;
};
void launch_gated_delta_rule(const DeltaRuleParams& p, cudaStream_t s);
/// The check mode's record (CudaOptions::check_finite): the first step, in stream order,
/// whose result held a NaN or an infinity (index + 1; 0: none yet), and the smallest
/// such element of it with its value's bits, (element << 32) | bits (~0: none).
struct FiniteRecord {
  int step = 0;
  int pad = 0;
  unsigned long long first = ~0ull;
};
/// Records step `step`'s result `data` (n elements of dt: f32, f16 or bf16) in *rec when
/// it holds a non-finite value and no earlier step has; changes nothing else.
void launch_check_finite(const void* data, DT dt, int64_t n, int step, FiniteRecord* rec, cudaStream_t s);

/// The chunk the chunked delta-rule kernel runs for a wanted chunk and key head dim: the
/// largest of want (at most 64), then halvings down to 8, whose shared memory fits this
/// device (its opt-in limit raised for later launches); 0 when none fits.
int64_t prepare_gated_delta_chunked(int64_t want, int64_t dk);
/// Device bytes the chunked form needs for p (its shapes and chunk); 0 for chunk 0.
int64_t gated_delta_workspace_bytes(const DeltaRuleParams& p);

/// out[o, i, :] = table[o, idx[i], :]. Packed tables (outer == 1) are dequantized
/// row by row into `out_dt`. An index out of range stores `err_code` into *err.
struct GatherParams {
  const uint8_t* table = nullptr;
  const void* idx = nullptr;
  uint8_t* out = nullptr;
  DT table_dt = DT::F32, idx_dt = DT::I32, out_dt = DT::F32;
  int64_t outer = 1, axis_len = 0, n_idx = 0;
  int64_t inner_bytes = 0;   ///< plain tables
  int64_t row_elems = 0;     ///< packed tables: elements per row
  int64_t row_bytes = 0;     ///< packed tables: bytes per row (scales excluded when split)
  int64_t d_offset = 0;      ///< packed tables in the split layout (see packed_split)
  int* err = nullptr;
  int err_code = 0;
};
void launch_gather(const GatherParams& p, cudaStream_t s);
/// True when gather / dequantize / GEMV kernels decode `t`.
bool packed_supported(DT t);

/// Row norms over the last dim: RMS (rms) or layer norm; residual forms add `res`
/// first and write [2, rows, d]: the sum, then the normed sum.
struct NormParams {
  const void* x = nullptr;
  const void* res = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  void* out = nullptr;
  DT x_dt = DT::F32, out_dt = DT::F32, g_dt = DT::F32, b_dt = DT::F32;
  int64_t rows = 0, d = 0;
  float eps = 1e-5f;
  bool rms = true;
  bool affine_const = false;  ///< no kernel writes gamma / beta (params): read before pdl_wait
};
void launch_norm(const NormParams& p, cudaStream_t s);

/// Rotary embedding; inv_freq (n_rot/2 doubles, every scaling folded in) lives in
/// device memory; the rotated pairs are multiplied by mscale (the attention factor).
struct RopeParams {
  const void* x = nullptr;
  const void* pos = nullptr;
  void* out = nullptr;
  const double* inv_freq = nullptr;
  float mscale = 1.0f;
  DT x_dt = DT::F32, out_dt = DT::F32, pos_dt = DT::I32;
  int64_t rows = 0, seq = 0, width = 0, head_dim = 0, n_rot = 0;
  int64_t in_width = 0, in_offset = 0;  ///< input row length and first column read
  bool neox = false;
};
void launch_rope(const RopeParams& p, cudaStream_t s);

/// A decode step's rope(q), rope(k) and the two KV-cache writes in one launch: q and k
/// as launch_rope (k.out may be null: k then only goes to the cache); k's first k_rows
/// rows are also written into k_cache rows [start, start + k_rows) (a cache row laid
/// out as k's output row, same dtype), v's rows copied into v_cache rows [start, start +
/// v_rows). Starts are read on the device; one out of range skips that cache and stores
/// err_code into *err (as launch_update_slice). Several sequences (outer > 1: a batched
/// step): the caches are stacks [outer, len, width], k's and v's rows are outer runs of
/// k_rows / v_rows rows, and run o goes to slice o from its own start (start[o]).
struct RopeKvParams {
  RopeParams q, k;
  void* k_cache = nullptr;
  const void* k_start = nullptr;
  DT k_start_dt = DT::I32;
  int64_t k_len = 0, k_rows = 0;  ///< cache rows, rows written (a sequence's)
  const void* v = nullptr;
  void* v_cache = nullptr;
  const void* v_start = nullptr;
  DT v_dt = DT::F32, v_start_dt = DT::I32;
  int64_t v_len = 0, v_rows = 0, v_width = 0;
  int64_t outer = 1;  ///< sequences (cache slices); > 1: a start per sequence
  int* err = nullptr;
  int err_code = 0;
};
void launch_rope_kv(const RopeKvParams& p, cudaStream_t s);

/// A tensor seen as [outer, len, inner] around one axis.
struct AxisParams {
  const void* x = nullptr;
  void* out = nullptr;
  DT in_dt = DT::F32, out_dt = DT::F32;
  int64_t outer = 1, len = 1, inner = 1;
  int64_t active_len = 1;  ///< softmax: elements of the axis that take part (extent)
  bool exclusive = false;  ///< cumsum
  int64_t k = 1;           ///< topk
  bool values = false;     ///< topk: write values instead of i32 indices
  bool finite_check = false;  ///< topk (k == 1 indices): -1 for a row with a NaN or an infinity
};
void launch_softmax(const AxisParams& p, cudaStream_t s);
void launch_cumsum(const AxisParams& p, cudaStream_t s);
void launch_topk(const AxisParams& p, cudaStream_t s);

/// The `sample` op: out[r] = the token rlx::choose_token picks from row r of
/// logits[rows, len] (len < 2^31) with row r of params[rows, 5] (draw, temperature,
/// top_k, top_p, min_p; clamped as rlx::read_sample_params, top_k at most 1024).
inline constexpr int kSampleMaxTopK = 1024;  ///< ir::kMaxSampleTopK (checked in cuda_steps.cpp)
inline constexpr int kSampleParamCount = 5;  ///< ir::kSampleParams
struct SampleParams {
  const void* logits = nullptr;
  const float* params = nullptr;
  int32_t* out = nullptr;
  DT logits_dt = DT::F32;
  int64_t rows = 0, len = 0;
};
void launch_sample(const SampleParams& p, cudaStream_t s);

/// Reduce (kind = ir::ReduceKind value) over `red` dims for every output element.
struct ReduceParams {
  const void* x = nullptr;
  void* out = nullptr;
  DT in_dt = DT::F32, out_dt = DT::F32;
  uint8_t kind = 0;
  int n_kept = 0, n_red = 0;
  int64_t n_out = 1, n_red_elems = 1, mean_count = 1;
  int64_t kept_dims[kMaxRank] = {}, kept_strides[kMaxRank] = {};
  int64_t red_dims[kMaxRank] = {}, red_strides[kMaxRank] = {};
  /// splits > 1: each output's reduction is cut into that many block-sized parts whose
  /// results go to `partial` [n_out * splits] (doubles), then combined by a second kernel
  /// (few outputs over many elements would otherwise run on few blocks).
  int64_t splits = 1;
  double* partial = nullptr;
};
void launch_reduce(const ReduceParams& p, cudaStream_t s);

/// Attention over q[B, S, H*hd], k/v[B, T, KVH*hd] -> out[B, S, H*hd]. `partial`
/// (split keys) holds splits * B*H*S * (hd + 2) floats when splits > 1.
struct AttentionParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* q_pos = nullptr;  ///< null: queries aligned to the end of the keys
  /// q_pos elements between batch items: 0 (one [S] for all) or S_full (q_pos [B, S]).
  int64_t pos_bstride = 0;
  const int32_t* kv_len = nullptr;  ///< null, or valid keys per batch item (padding mask)
  void* out = nullptr;
  float* partial = nullptr;
  DT dt = DT::F32, out_dt = DT::F32, pos_dt = DT::I32;
  int64_t batch = 1, S = 0, T = 0, S_full = 0, T_full = 0;
  int n_heads = 1, n_kv = 1, hd = 1;
  int mask = 1;  ///< ir::MaskKind: 0 none, 1 causal, 2 sliding window, 3 local
  int64_t window = 0;
  float scale = 1.0f, softcap = 0.0f;
  int splits = 1;
  /// One query row per (batch, head) (S == 1): the decode kernel, one block per KV head
  /// and split of the keys the row sees (split on the device, by its position).
  bool decode = false;
  /// Decode: blocks that fit one wave (the multiprocessor count): while the blocks
  /// with keys fit it, each serves one query head, else one KV head's group.
  int64_t decode_wave = 1;
  /// Decode with splits > 1: one counter per (batch, head), zero before the launch and
  /// left at zero after it (the last block of a head (group) merges the splits).
  unsigned* counters = nullptr;
  bool kv_vec = false;  ///< set by launch_attention: K rows are 16-byte aligned
  /// Decode: rows that see few keys take the one-trip path (one block per query head,
  /// every K / V load issued at once) when head_dim is 32 or 64 and q, K, V
  /// are 16-byte aligned (launch_attention checks; false keeps the general path).
  bool short_ok = true;
  bool group_grid = false;  ///< set by launch_attention: decode blocks per KV head's group, not per query head
  /// Decode of more rows (batch x query heads) than one wave of blocks: the many-streams
  /// kernel (attention_decode_rows_supported; splits from attention_decode_rows_splits),
  /// taken when K / V are 16-byte aligned, else the decode kernel's group grid.
  bool many_rows = false;
  /// Prefill (attention_tc_supported, splits == 1): the tensor-core kernel, with q, k, v
  /// and the softmax weights rounded to f16 for the products (f32 accumulation and
  /// softmax); falls back to the f32 kernel when K / V rows are not 16-byte aligned.
  bool tensor_cores = false;
  /// Prefill on the tensor cores with head_dim 64 / 128 (attention_flash_supported): scratch
  /// of attention_flash_scratch_bytes for K and V rounded to f16, which selects the
  /// pipelined kernel (kernels_attention_flash.cu); null keeps the one-stage kernel.
  void* kv16 = nullptr;
};
void launch_attention(const AttentionParams& p, cudaStream_t s);
/// True when the tensor-core prefill kernel covers this shape: at least two query rows
/// that, times the query heads per KV head, fill its 64-row block (16 rows at 4 heads
/// per KV head); head_dim 64, 128 or 256.
bool attention_tc_supported(int64_t S, int n_heads, int n_kv, int64_t hd);
/// True when the pipelined tensor-core prefill kernel takes this head_dim and K / V type
/// (head_dim 64 or 128; f32, f16 or bf16 K / V).
bool attention_flash_supported(int hd, DT dt);
/// Scratch the pipelined prefill kernel needs for f16 copies of K and V.
int64_t attention_flash_scratch_bytes(int64_t batch, int64_t T_full, int n_kv, int hd);
/// The pipelined prefill kernel (launch_attention calls it when p.kv16 is set, p.splits
/// is 1 and K / V rows and the output are aligned for it).
void launch_attention_flash(const AttentionParams& p, cudaStream_t s);
/// Head dims the attention kernel handles (1..256).
bool attention_head_dim_supported(int64_t hd);
/// Split count for the general kernel: enough blocks for `sms` multiprocessors.
int attention_splits(int64_t batch, int64_t S, int64_t T, int n_heads, int sms);
/// True when the decode kernel covers this shape (S == 1, n_heads / n_kv <= 8).
bool attention_decode_supported(int64_t S, int n_heads, int n_kv, int hd);
/// Split count for the decode kernel with `groups` blocks per batch row (the most a
/// launch takes; with more query-head blocks than one wave, launch_attention keeps to a
/// wave's worth of KV-group blocks).
int attention_decode_splits(int64_t batch, int64_t T, int groups, int sms);
/// True when the many-streams decode kernel (kernels_attention_rows.cu: a block per KV
/// head's group, sequence and split of at least 32 keys) takes `p`: S == 1, f32 or bf16
/// rows of head_dim 32, 64, 128 or 256, and query heads a group (rounded up to 1, 4 or
/// 8) times head_dim at most 1,024.
bool attention_decode_rows_supported(const AttentionParams& p);
/// Splits of the keys for it: several blocks a multiprocessor, at most 32, each at least
/// 32 keys of `T`.
int attention_decode_rows_splits(int64_t batch, int64_t T, int n_kv, int sms);
/// Runs it (p.splits splits; with more than one, p.partial and p.counters as for the
/// decode kernel). K and V must be 16-byte aligned (launch_attention checks).
void launch_attention_decode_rows(const AttentionParams& p, cudaStream_t s);

/// Packed types whose blocks are not a multiple of 16 bytes (Q4_0, Q8_0, Q6_K) are stored
/// on the device in a split layout (launch_repack_split, at set_param): every block
/// without its 2-byte f16 scale, row-major, then all the scales ([rows, blocks per row]),
/// `d_offset` bytes after the start. Kernels that read packed weights take `row_bytes`
/// (bytes of one row's blocks, scales excluded when split) and `d_offset` (0: as stored).
bool packed_split(DT t);
/// Rewrites `n_blocks` blocks of type `t` from the GGUF layout `raw` into the split layout.
void launch_repack_split(DT t, const uint8_t* raw, uint8_t* out, int64_t n_blocks, cudaStream_t s);

/// y[m, n] = sum_k x[m, k] * W[n, k] for packed W [N, K] (row-major blocks), f32 x/y.
/// Reads every weight byte once for up to 8 rows of x (decode GEMV, any packed type;
/// launch_gemv is the fast path for the types it covers).
struct QGemvParams {
  const float* x = nullptr;
  const uint8_t* w = nullptr;
  float* y = nullptr;
  DT w_dt = DT::Q8_0;
  int64_t M = 1, N = 0, K = 0, row_bytes = 0, d_offset = 0;
};
void launch_qgemv(const QGemvParams& p, cudaStream_t s);
/// True for the packed weight types whose products llama.cpp's CPU backend takes over x
/// rounded to Q8_0 blocks (Q8_0, Q4_0): the CUDA matmuls round x the same way.
bool q8_0_activations(DT w);
/// x [rows, K] (f32, K a multiple of 32) rounded to llama.cpp's Q8_0 activations: per
/// block of 32, x' = f16(max|x| / 127) * round-half-even(x * 127 / max|x|) (not finite
/// values pass through), written as out_dt (F32 or F16).
void launch_round_q8_0(const float* x, void* out, DT out_dt, int64_t rows, int64_t K, cudaStream_t s);
/// Dequantizes packed W [N, K] into f16 (row-major) for the cuBLAS prefill path.
void launch_dequant_f16(DT w_dt, const uint8_t* w, void* out_f16, int64_t N, int64_t K, int64_t row_bytes,
                        int64_t d_offset, cudaStream_t s);

inline constexpr int kMaxGemvM = 8;
/// Most rows a packed product of the 8-bit x path runs on the GEMV; more take the int8
/// tensor cores (Q8_0 / Q4_0) or f16 cuBLAS. Measured on an H200, q4_k_m decode of several
/// streams: 8 rows 5.55 ms a step on the GEMV against 3.85 ms for 16 rows through cuBLAS;
/// 4 rows 2.67 ms.
inline constexpr int kGemvX8MaxRows = 5;
inline constexpr int kMaxGemvParts = 4;
inline constexpr int64_t kGemvSmemLimit = 48 * 1024;
/// Shared memory the GEMV may take for several rows of 8-bit x (raised above the default
/// 48 KiB; within what every GPU since sm_80 except sm_86 / sm_89 (99 KiB) allows a
/// block, static part included).
inline constexpr int64_t kGemvX8SmemLimit = 96 * 1024;

/// Decode GEMV (M <= kMaxGemvM rows of x): y[m, n] = epilogue(sum_k x[m, k] * W[n, k]),
/// W [N, K] of f32/f16/bf16 (x rounded to W's precision first) or packed Q8_0 / Q4_0 /
/// Q4_K / Q6_K (x in f32, or in 8 bits: x_int8). Epilogue: act(v + bias[n]) (act: ir::ActKind), or with
/// `swiglu` silu(x . W[n]) * (x . W2[n]).
struct GemvParams {
  const void* x = nullptr;
  const uint8_t* w = nullptr;
  const uint8_t* w2 = nullptr;  ///< up weights (swiglu), same type and layout as w
  const void* bias = nullptr;
  void* y = nullptr;
  DT x_dt = DT::F32, w_dt = DT::F16, bias_dt = DT::F32, y_dt = DT::F32;
  int64_t M = 1, N = 0, K = 0;
  int64_t row_bytes = 0, d_offset = 0;  ///< as for QGemvParams
  uint8_t act = 0;
  bool swiglu = false;
  bool x_vec4 = false;  ///< x is f32 and 16-byte aligned: staged with float4 loads
  /// Packed weights of a gemv_x8_type at M = 1 with x_vec4: x is quantized to 8 bits per
  /// 16 elements while staged and the products are integer dots (dp4a); ~0.3 % relative
  /// error, the CPU backend's K-quant products quantize x likewise (per 256 or 32).
  bool x_int8 = false;
  bool w_const = false;  ///< no kernel writes w / w2 (params): read before pdl_wait
  /// Grouped launch of sibling products over the same x (q/k/v, gate/up): n_parts > 1
  /// replaces w, y, N and d_offset by part i's for the blocks of part i (no swiglu, no
  /// bias; every part has this dtype, K and epilogue).
  int n_parts = 1;
  const uint8_t* part_w[kMaxGemvParts] = {};
  void* part_y[kMaxGemvParts] = {};
  int64_t part_N[kMaxGemvParts] = {}, part_d_offset[kMaxGemvParts] = {};
  /// A decode step's q / k / v products taking over rope and the KV-cache writes (M = 1,
  /// f32 y, no other epilogue; rkv as for launch_rope_kv with one row, non-neox rope):
  /// part i's role is 0 (plain output y), kRoleQ (rope -> rkv.q.out), kRoleK (rope -> its
  /// k cache row, and rkv.k.out when set) or kRoleV (-> its v cache row). A rotated pair
  /// is two neighbouring rows of one block, exchanged through shared memory.
  static constexpr uint8_t kRoleQ = 1, kRoleK = 2, kRoleV = 3;
  uint8_t part_role[kMaxGemvParts] = {};
  RopeKvParams rkv;
  /// RMS-norm prologue (fuse_norm_gemv; M = 1, f32 x with x_vec4): the product's x is
  /// rms_norm(x) * norm_gamma, which every block computes from x as the norm kernel does
  /// (sum of squares in double).
  bool norm = false;
  const void* norm_gamma = nullptr;
  DT norm_g_dt = DT::F32;
  float norm_eps = 1e-5f;
  bool norm_gamma_const = false;  ///< no kernel writes gamma (a param): read before pdl_wait
};
/// Shared memory the GEMV stages x in (M * K floats plus padding; with the norm
/// prologue also the K floats of the residual sum and K of gamma).
int64_t gemv_smem_bytes(DT w_dt, int64_t M, int64_t K, bool norm = false);
/// True for the packed types whose GEMV can take x in 8 bits (GemvParams::x_int8).
bool gemv_x8_type(DT w_dt);
/// Shared memory the GEMV stages M rows of 8-bit x in (GemvParams::x_int8).
int64_t gemv_x8_smem_bytes(int64_t M, int64_t K);
/// True when launch_gemv covers weights of `w_dt` at this M and K; `x8`: the launch will
/// take the 8-bit x path (x_int8, f32 x 16-byte aligned), whose rows take less room.
bool gemv_supported(DT w_dt, int64_t M, int64_t K, bool x8 = false);
/// True when the launch of `p` (one the GEMV covers) leaves shared memory for the norm
/// prologue's rows (GemvParams::norm), on the path it takes (8-bit or f32 x).
bool gemv_norm_fits(const GemvParams& p);
void launch_gemv(const GemvParams& p, cudaStream_t s);
/// True for the codebook i-quants and ternary types (IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS,
/// IQ2_XXS, IQ1_S, IQ1_M, TQ1_0, TQ2_0), whose GEMV chunks live in kernels_gemv_codebook.cu.
bool gemv_codebook_type(DT w_dt);
/// launch_gemv for a gemv_codebook_type (launch_gemv calls it; nothing for other types).
void launch_gemv_codebook(const GemvParams& p, cudaStream_t s);

/// moe_route over logits [rows, experts] (experts <= kMoeMaxExperts): the softmax (or
/// sigmoid) probabilities of each row, the k largest kept (ties: the lower expert; NaN
/// below every number), divided by their sum when `normalize`, the rest 0; f32 out.
inline constexpr int kMoeMaxExperts = 1024;
struct MoeRouteParams {
  const void* logits = nullptr;
  float* out = nullptr;
  DT in_dt = DT::F32;
  int64_t rows = 0, experts = 0, k = 1;
  bool sigmoid = false, normalize = false;
};
void launch_moe_route(const MoeRouteParams& p, cudaStream_t s);

/// moe_ffn: y[t] = sum over the nonzero route[t, e] (at most k_max a row, taken in expert
/// order) of route[t, e] * W_down[e] . (act(W_gate[e] . x[t]) * (W_up[e] . x[t])).
/// x f32 [rows, dim], route f32 [rows, experts], W_gate / W_up [experts, hidden, dim],
/// W_down [experts, dim, hidden] in f32 / f16 / bf16 or a packed type packed_supported
/// decodes (as stored: rows of blocks, `*_row_bytes` a row). h: rows * k_max * hidden
/// floats of scratch (the gated hidden rows of each token's slots); d: rows * k_max * dim
/// floats of scratch (each slot's down product, summed over the slots in order last: a
/// block a pair, for runs of few rows), or null (a block a token sums its slots).
/// act: ir::ActKind. The expert ids are found on the device (no host copy).
struct MoeFfnParams {
  const float* x = nullptr;
  const float* route = nullptr;
  const uint8_t* w_gate = nullptr;
  const uint8_t* w_up = nullptr;
  const uint8_t* w_down = nullptr;
  float* h = nullptr;
  float* d = nullptr;
  float* y = nullptr;
  DT gate_dt = DT::F32, up_dt = DT::F32, down_dt = DT::F32;
  int64_t rows = 0, experts = 0, dim = 0, hidden = 0, k_max = 1;
  int64_t gate_row_bytes = 0, up_row_bytes = 0, down_row_bytes = 0;
  uint8_t act = 3;
};
void launch_moe_ffn(const MoeFfnParams& p, cudaStream_t s);
/// Rows of the hidden / output tiles of launch_moe_ffn's blocks (grid limits: at most
/// 65535 tiles along hidden and along dim).
inline constexpr int64_t kMoeRowsPerBlock = 16;

}  // namespace rlx::cuda_backend
