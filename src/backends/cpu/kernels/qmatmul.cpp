// DequantMatMul driver: checks the call, quantizes the activation rows to the weight's
// vec_dot type (as llama.cpp does), then runs either the fused dequant GEMV (N split
// across threads, integer dots from qmatmul_*.cpp) or the panel path (weight stripes
// decoded to f32 panels once per call, swept by the f32 GEMM micro-tiles of isa_kernels).
#include "backends/cpu/kernels/qmatmul.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "backends/cpu/kernels/amx_matmul.h"
#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/gemv_tuning.h"
#include "backends/cpu/kernels/isa_kernels.h"
#include "backends/cpu/kernels/qmatmul_kernels.h"
#include "backends/cpu/kernels/vnni_matmul.h"
#include "rlx/base/env.h"
#include "rlx/base/half.h"
#include "rlx/formats/quant.h"
#include "rlx/formats/quant_blocks.h"

namespace rlx::cpu {

namespace {

using formats::GgmlType;
using detail::QKind;

constexpr int64_t kKc = 256;           // K block of the panel path (a kc x nr panel slice stays in L1)
constexpr int64_t kMcTarget = 128;     // rows of activations per sweep over a stripe's panels
constexpr int64_t kMaxMr = 16;         // >= every ISA's micro-tile rows (padding of the packed rows)
constexpr int64_t kMaxPanelsPerTask = 8;
constexpr size_t kAlign = 64;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

std::optional<QKind> qkind(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return QKind::kQ4_0;
    case GgmlType::Q4_1: return QKind::kQ4_1;
    case GgmlType::Q5_0: return QKind::kQ5_0;
    case GgmlType::Q5_1: return QKind::kQ5_1;
    case GgmlType::Q8_0: return QKind::kQ8_0;
    case GgmlType::Q2_K: return QKind::kQ2_K;
    case GgmlType::Q3_K: return QKind::kQ3_K;
    case GgmlType::Q4_K: return QKind::kQ4_K;
    case GgmlType::Q5_K: return QKind::kQ5_K;
    case GgmlType::Q6_K: return QKind::kQ6_K;
    case GgmlType::IQ4_NL: return QKind::kIQ4_NL;
    case GgmlType::IQ4_XS: return QKind::kIQ4_XS;
    case GgmlType::TQ1_0: return QKind::kTQ1_0;
    case GgmlType::TQ2_0: return QKind::kTQ2_0;
    case GgmlType::IQ2_XXS: return QKind::kIQ2_XXS;
    case GgmlType::IQ2_XS: return QKind::kIQ2_XS;
    case GgmlType::IQ2_S: return QKind::kIQ2_S;
    case GgmlType::IQ3_XXS: return QKind::kIQ3_XXS;
    case GgmlType::IQ3_S: return QKind::kIQ3_S;
    case GgmlType::IQ1_S: return QKind::kIQ1_S;
    case GgmlType::IQ1_M: return QKind::kIQ1_M;
    default: return std::nullopt;
  }
}

std::optional<WeightType> float_weight(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return WeightType::kF32;
    case GgmlType::F16: return WeightType::kF16;
    case GgmlType::BF16: return WeightType::kBF16;
    default: return std::nullopt;
  }
}

// The "_1" types carry a min per block that llama.cpp multiplies with the Q8_1 block's
// s = d * Σq (rounded to f16), not with Σ d*q: the panel path extends K by one column
// per block (weight: m, activation: s) so the f32 micro-tiles reproduce that term.
bool has_min_column(GgmlType t) { return t == GgmlType::Q4_1 || t == GgmlType::Q5_1; }

int64_t k_ext(GgmlType t, int64_t k) { return has_min_column(t) ? k + k / formats::kQK : k; }

size_t act_row_bytes(GgmlType t, int64_t k) {
  switch (qmatmul_vec_dot_type(t)) {
    case GgmlType::Q8_0: return static_cast<size_t>(k / formats::kQK) * sizeof(formats::BlockQ8_0);
    case GgmlType::Q8_1: return static_cast<size_t>(k / formats::kQK) * sizeof(formats::BlockQ8_1);
    case GgmlType::Q8_K: return static_cast<size_t>(k / formats::kQK_K) * sizeof(formats::BlockQ8_K);
    default: return 0;
  }
}

// The activation values the dot products see, as f32 (k_ext values; the extra columns
// of the "_1" types hold s).
void dequantize_activation_row(GgmlType t, const uint8_t* src, float* dst, int64_t k) {
  switch (qmatmul_vec_dot_type(t)) {
    case GgmlType::Q8_0:
      return formats::dequantize_row_q8_0(reinterpret_cast<const formats::BlockQ8_0*>(src), dst, k);
    case GgmlType::Q8_1: {
      const auto* a = reinterpret_cast<const formats::BlockQ8_1*>(src);
      for (int64_t b = 0; b < k / formats::kQK; ++b) {
        const float d = f16_bits_to_f32(a[b].d);
        for (int i = 0; i < formats::kQK; ++i) dst[b * formats::kQK + i] = d * static_cast<float>(a[b].qs[i]);
        dst[k + b] = f16_bits_to_f32(a[b].s);
      }
      return;
    }
    default: return formats::dequantize_row_q8_k(reinterpret_cast<const formats::BlockQ8_K*>(src), dst, k);
  }
}

// A weight row as f32 (k_ext values): the type's dequantization, except that the "_1"
// types give d*q here and their mins in the extra columns.
template <typename Block, bool kFive>
void dequantize_weight_row_min(const Block* w, float* dst, int64_t k) {
  for (int64_t b = 0; b < k / formats::kQK; ++b) {
    const float d = f16_bits_to_f32(w[b].d);
    uint32_t qh = 0;
    if constexpr (kFive) std::memcpy(&qh, w[b].qh, sizeof qh);
    for (int i = 0; i < formats::kQK / 2; ++i) {
      int q0 = w[b].qs[i] & 0x0F, q1 = w[b].qs[i] >> 4;
      if constexpr (kFive) {
        q0 |= static_cast<int>((qh >> i) & 1) << 4;
        q1 |= static_cast<int>((qh >> (i + 16)) & 1) << 4;
      }
      dst[b * formats::kQK + i] = d * static_cast<float>(q0);
      dst[b * formats::kQK + i + 16] = d * static_cast<float>(q1);
    }
    dst[k + b] = f16_bits_to_f32(w[b].m);
  }
}

void dequantize_weight_row(GgmlType t, const uint8_t* src, float* dst, int64_t k) {
  if (t == GgmlType::Q4_1) {
    return dequantize_weight_row_min<formats::BlockQ4_1, false>(reinterpret_cast<const formats::BlockQ4_1*>(src),
                                                                 dst, k);
  }
  if (t == GgmlType::Q5_1) {
    return dequantize_weight_row_min<formats::BlockQ5_1, true>(reinterpret_cast<const formats::BlockQ5_1*>(src),
                                                                dst, k);
  }
  const Status s = formats::dequantize_row(t, src, dst, k);
  RLX_ASSERT(s.ok());
}

struct Call {
  GgmlType type;
  int64_t m, n, k, kx, lda, ldc;
  size_t w_row_bytes, a_row_bytes;
  const float* bias;
  uint8_t* act;     // [m] quantized activation rows
  float* packed_a;  // panel path: K blocks of [ceil(m/mr) row blocks][kc][mr]
};

void add_bias(const float* bias, float* y, int64_t cols) {
  if (bias == nullptr) return;
  for (int64_t j = 0; j < cols; ++j) y[j] += bias[j];
}

// ---------------------------------------------------------------- GEMV path
void run_gemv(const KernelContext& ctx, const Call& c, const uint8_t* w, float* y) {
  const detail::QKernels& qk = detail::qkernels(ctx.isa);
  const int kind = static_cast<int>(*qkind(c.type));
  static const bool zmm_unset = env_config().cpu_gemv_zmm < 0;  // RLX_CPU_GEMV_ZMM not given
  const bool zmm = detail::gemv_one_row_zmm() ||
                   (zmm_unset && (qk.one_row_everywhere & detail::kind_bit(*qkind(c.type))) != 0);
  const detail::QGemvFn fn = c.m == 1 && qk.gemv_one_row[kind] != nullptr && zmm ? qk.gemv_one_row[kind] : qk.gemv[kind];
  const int64_t max_rows = qk.max_rows_of[kind] != 0 ? qk.max_rows_of[kind] : qk.max_rows;
  const int64_t nb = c.k / formats::ggml_block_size(c.type);
  // Chunks of weight rows. Several rows: enough tasks to balance, small enough (<= 256
  // KiB) to stay in cache while every group of 4 activation rows passes over them. One
  // row reuses no weight: its rows go in gemv_split() contiguous runs a thread, so that
  // each thread streams its own part of the matrix.
  const int threads = ctx.n_threads();
  const int split = c.m == 1 ? detail::gemv_split() : 8;
  int64_t chunk = ceil_div(c.n, static_cast<int64_t>(threads) * split);
  if (c.m == 1) {
    chunk = ceil_div(chunk, 16) * 16;
  } else {
    const int64_t cache_rows = std::max<int64_t>(16, (int64_t{256} << 10) / static_cast<int64_t>(c.w_row_bytes));
    chunk = std::clamp<int64_t>(ceil_div(chunk, 16) * 16, 16, std::min<int64_t>(512, cache_rows));
  }
  const int64_t tasks = ceil_div(c.n, chunk);
  const size_t weight_bytes = static_cast<size_t>(c.n) * c.w_row_bytes;
  const bool timed = c.m == 1 && weight_bytes >= detail::kGemvTuneMinBytes && detail::gemv_tuning_active();
  const int prefetch = timed ? detail::gemv_far_prefetch() : 0;
  const auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  parallel_for(ctx, tasks, [&](int64_t t) {
    const int64_t n0 = t * chunk, n1 = std::min(c.n, n0 + chunk);
    for (int64_t r0 = 0; r0 < c.m; r0 += max_rows) {
      const int rows = static_cast<int>(std::min<int64_t>(max_rows, c.m - r0));
      float* out = y + r0 * c.ldc + n0;
      fn(rows, nb, w, c.w_row_bytes, c.act + static_cast<size_t>(r0) * c.a_row_bytes, c.a_row_bytes, n0, n1, out,
         c.ldc);
      for (int r = 0; r < rows; ++r) add_bias(c.bias ? c.bias + n0 : nullptr, out + r * c.ldc, n1 - n0);
    }
  });
  if (timed)
    detail::gemv_tuning_record(weight_bytes,
                               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                               prefetch, split);
}

// ---------------------------------------------------------------- panel path
// Activations: dequantized quantized rows, packed once per call into micro-panels
// [kc][mr] per K block (block at pc starts at pc * m_pad floats), zero rows past m.
void pack_activations(const KernelContext& ctx, const Call& c, int mr) {
  const int64_t m_pad = ceil_div(c.m, mr) * mr;
  parallel_for(ctx, m_pad / mr, [&](int64_t rb) {
    auto* rows = static_cast<float*>(
        thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(mr * c.kx) * sizeof(float)));
    for (int i = 0; i < mr; ++i) {
      const int64_t r = rb * mr + i;
      if (r < c.m) {
        dequantize_activation_row(c.type, c.act + static_cast<size_t>(r) * c.a_row_bytes, rows + i * c.kx, c.k);
      } else {
        std::fill(rows + i * c.kx, rows + (i + 1) * c.kx, 0.0f);
      }
    }
    for (int64_t pc = 0; pc < c.kx; pc += kKc) {
      const int64_t kc = std::min(kKc, c.kx - pc);
      float* dst = c.packed_a + pc * m_pad + rb * mr * kc;
      for (int64_t kk = 0; kk < kc; ++kk)
        for (int i = 0; i < mr; ++i) dst[kk * mr + i] = rows[i * c.kx + pc + kk];
    }
  });
}

void run_panels(const KernelContext& ctx, const Call& c, const uint8_t* w, float* y) {
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  const int mr = kk.gemm_mr, nr = kk.gemm_nr;
  pack_activations(ctx, c, mr);
  const int64_t m_pad = ceil_div(c.m, mr) * mr;
  const int64_t mc = mr * std::max<int64_t>(1, kMcTarget / mr);
  const int64_t n_panels = ceil_div(c.n, nr);
  const int threads = ctx.n_threads();
  int64_t ppt = std::min(kMaxPanelsPerTask, n_panels);
  while (ppt > 1 && ceil_div(n_panels, ppt) < 2 * threads) ppt = ceil_div(ppt, 2);
  const int64_t panel_floats = c.kx * nr;
  parallel_for(ctx, ceil_div(n_panels, ppt), [&](int64_t t) {
    const int64_t p0 = t * ppt, p1 = std::min(n_panels, p0 + ppt);
    auto* panels = static_cast<float*>(
        thread_scratch(ScratchSlot::kPackB, static_cast<size_t>((p1 - p0) * panel_floats) * sizeof(float)));
    auto* row = static_cast<float*>(thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(c.kx) * sizeof(float)));
    // Decode the stripe's weight rows once into [K][nr] panels (zero columns past n).
    for (int64_t j = p0 * nr; j < p1 * nr; ++j) {
      float* dst = panels + ((j / nr) - p0) * panel_floats + (j % nr);
      if (j < c.n) {
        dequantize_weight_row(c.type, w + static_cast<size_t>(j) * c.w_row_bytes, row, c.k);
        for (int64_t kx = 0; kx < c.kx; ++kx) dst[kx * nr] = row[kx];
      } else {
        for (int64_t kx = 0; kx < c.kx; ++kx) dst[kx * nr] = 0.0f;
      }
    }
    for (int64_t pc = 0; pc < c.kx; pc += kKc) {
      const int64_t kc = std::min(kKc, c.kx - pc);
      for (int64_t m0 = 0; m0 < c.m; m0 += mc) {
        const int64_t m1 = std::min(c.m, m0 + mc);
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t n0 = p * nr;
          detail::TileEpilogue ep;
          ep.bias = c.bias ? c.bias + n0 : nullptr;
          ep.first = pc == 0;
          ep.last = pc + kc == c.kx;
          const int nr_valid = static_cast<int>(std::min<int64_t>(nr, c.n - n0));
          const float* bp = panels + (p - p0) * panel_floats + pc * nr;
          for (int64_t i = m0; i < m1; i += mr) {
            const int rows = static_cast<int>(std::min<int64_t>(mr, m1 - i));
            kk.gemm_tile(rows, kc, c.packed_a + pc * m_pad + i * kc, bp, WeightType::kF32, y + i * c.ldc + n0, c.ldc,
                         nr_valid, ep);
          }
        }
      }
    }
  });
}

}  // namespace

void qmatmul_quantize_activation(GgmlType type, const float* x, void* dst, int64_t k, IsaLevel isa) {
  switch (qmatmul_vec_dot_type(type)) {
    case GgmlType::Q8_0: return detail::qkernels(isa).quantize_q8_0(x, dst, k);
    case GgmlType::Q8_1: return detail::qkernels(isa).quantize_q8_1(x, dst, k);
    case GgmlType::Q8_K: return detail::qkernels(isa).quantize_q8_k(x, dst, k);
    default: RLX_ASSERT(false && "qmatmul_quantize_activation: not a quantized weight type");
  }
}

bool qmatmul_supported(GgmlType type) { return qkind(type).has_value() || float_weight(type).has_value(); }

GgmlType qmatmul_vec_dot_type(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL: return GgmlType::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return GgmlType::Q8_1;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS:
    case GgmlType::TQ1_0:
    case GgmlType::TQ2_0: return GgmlType::Q8_K;
    default: return formats::ggml_is_codebook_type(type) ? GgmlType::Q8_K : type;
  }
}

namespace {

QMatmulPath auto_path_without_tiles(GgmlType type, int64_t m, IsaLevel isa) {
  if (m >= vnni_min_rows() && vnni_supports(type) && vnni_enabled(isa)) return QMatmulPath::kVnni;
  const std::optional<QKind> kind = qkind(type);
  if (kind && (detail::qkernels(isa).int_prefill & detail::kind_bit(*kind)) != 0) return QMatmulPath::kGemv;
  return m <= kQGemvMaxM ? QMatmulPath::kGemv : QMatmulPath::kPanel;
}

// The path a call takes: `requested`, or for kAuto qmatmul_auto_path's choice unless the
// tiles cannot take this k (not a multiple of 64).
QMatmulPath resolve_path(GgmlType type, int64_t m, int64_t k, IsaLevel isa, QMatmulPath requested) {
  if (requested != QMatmulPath::kAuto) return requested;
  const QMatmulPath path = qmatmul_auto_path(type, m, isa);
  return path == QMatmulPath::kAmx && k % 64 != 0 ? auto_path_without_tiles(type, m, isa) : path;
}

}  // namespace

QMatmulPath qmatmul_auto_path(GgmlType type, int64_t m, IsaLevel isa) {
  if (m >= amx_min_rows() && amx_supports(type) && amx_enabled(isa)) return QMatmulPath::kAmx;
  return auto_path_without_tiles(type, m, isa);
}

size_t qmatmul_scratch_bytes(GgmlType type, int64_t m, int64_t k, QMatmulPath path, IsaLevel isa) {
  if (!qkind(type) || m <= 0 || k <= 0 || k % formats::ggml_block_size(type) != 0) return 0;
  path = resolve_path(type, m, k, isa, path);
  const size_t rows = kAlign + align_up(static_cast<size_t>(m) * act_row_bytes(type, k));
  if (path == QMatmulPath::kGemv) return rows;
  // A run with fewer rows than the build's (below amx_min_rows()) takes the path it would
  // without the tiles in the same scratch: the largest of those needs is at the most
  // rows that still miss the tiles.
  if (path == QMatmulPath::kAmx) {
    const int64_t below = std::min(m, amx_min_rows() - 1);
    const size_t without = below > 0 ? qmatmul_scratch_bytes(type, below, k, auto_path_without_tiles(type, below, isa), isa)
                                     : 0;
    return std::max(rows + amx_dequant_scratch_bytes(type, m, k), without);
  }
  if (path == QMatmulPath::kVnni) {
    const int64_t below = std::min(m, vnni_min_rows() - 1);
    const size_t without = below > 0 ? qmatmul_scratch_bytes(type, below, k, auto_path_without_tiles(type, below, isa), isa) : 0;
    return std::max(rows + vnni_dequant_scratch_bytes(type, m, k), without);
  }
  return rows + static_cast<size_t>(m + kMaxMr) * static_cast<size_t>(k_ext(type, k)) * sizeof(float);
}

Status dequant_matmul(const KernelContext& ctx, const QMatmulParams& p, GgmlType type, const float* x,
                      const void* w_packed, float* y, QMatmulScratch scratch) {
  if (!qmatmul_supported(type))
    return Error::unsupported("dequant_matmul: weight type {} has no matmul kernel",
                              formats::ggml_type_name(type));
  if (p.m < 0 || p.n < 0 || p.k < 0)
    return Error::invalid_argument("dequant_matmul: negative shape m={} n={} k={}", p.m, p.n, p.k);
  const int64_t block = formats::ggml_block_size(type);
  if (p.k % block != 0)
    return Error::invalid_argument("dequant_matmul: k={} is not a multiple of {}'s block size {}", p.k,
                                   formats::ggml_type_name(type), block);
  const int64_t lda = p.lda == 0 ? p.k : p.lda, ldc = p.ldc == 0 ? p.n : p.ldc;
  if (lda < p.k || ldc < p.n)
    return Error::invalid_argument("dequant_matmul: lda={} < k={} or ldc={} < n={}", lda, p.k, ldc, p.n);
  if (p.m == 0 || p.n == 0) return Status::ok_status();
  if (y == nullptr || (p.k > 0 && (x == nullptr || w_packed == nullptr)))
    return Error::invalid_argument("dequant_matmul: null operand");
  if (p.k == 0) {
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) y[i * ldc + j] = p.bias ? p.bias[j] : 0.0f;
    return Status::ok_status();
  }
  if (const std::optional<WeightType> wt = float_weight(type)) {
    GemmParams g;
    g.m = p.m;
    g.n = p.n;
    g.k = p.k;
    g.lda = lda;
    g.ldc = ldc;
    g.bias = p.bias;
    g.keep_x_f32 = true;  // whatever m is (an MoE expert's rows vary with the batch)
    gemm(ctx, g, x, w_packed, *wt, y);
    return Status::ok_status();
  }
  const QMatmulPath path = resolve_path(type, p.m, p.k, ctx.isa, p.path);
  const size_t need = qmatmul_scratch_bytes(type, p.m, p.k, path, ctx.isa);
  if (scratch.data == nullptr || scratch.bytes < need)
    return Error::invalid_argument("dequant_matmul: scratch of {} bytes, {} needs {} (qmatmul_scratch_bytes)",
                                   scratch.bytes, formats::ggml_type_name(type), need);
  if (path == QMatmulPath::kAmx && !amx_enabled(ctx.isa))
    return Error::unsupported("dequant_matmul: path kAmx without usable AMX tiles (isa cap {})",
                              isa_name(resolve_isa(ctx.isa)));
  if (path == QMatmulPath::kVnni && !vnni_enabled(ctx.isa))
    return Error::unsupported("dequant_matmul: path kVnni without AVX-512 VNNI (isa cap {})",
                              isa_name(resolve_isa(ctx.isa)));
  if (path == QMatmulPath::kVnni && !vnni_supports(type))
    return Error::unsupported("dequant_matmul: path kVnni has no tile loop for {} weights",
                              formats::ggml_type_name(type));
  if (path == QMatmulPath::kAmx && !amx_supports(type))
    return Error::unsupported("dequant_matmul: path kAmx has no tile loop for {} weights",
                              formats::ggml_type_name(type));

  Call c;
  c.type = type;
  c.m = p.m;
  c.n = p.n;
  c.k = p.k;
  c.kx = k_ext(type, p.k);
  c.lda = lda;
  c.ldc = ldc;
  c.w_row_bytes = static_cast<size_t>(p.k / block * formats::ggml_block_bytes(type));
  c.a_row_bytes = act_row_bytes(type, p.k);
  c.bias = p.bias;
  auto* base = reinterpret_cast<uint8_t*>(align_up(reinterpret_cast<uintptr_t>(scratch.data)));
  c.act = base;
  c.packed_a = path == QMatmulPath::kPanel
                   ? reinterpret_cast<float*>(base + align_up(static_cast<size_t>(p.m) * c.a_row_bytes))
                   : nullptr;

  // Quantize the activation rows (several rows per task when the rows are short).
  const int64_t rows_per_task = std::max<int64_t>(1, 4096 / p.k);
  parallel_for(ctx, ceil_div(p.m, rows_per_task), [&](int64_t t) {
    for (int64_t r = t * rows_per_task; r < std::min(p.m, (t + 1) * rows_per_task); ++r)
      qmatmul_quantize_activation(type, x + r * lda, c.act + static_cast<size_t>(r) * c.a_row_bytes, p.k, ctx.isa);
  });

  if (path == QMatmulPath::kAmx) {
    uint8_t* amx_scratch = base + align_up(static_cast<size_t>(p.m) * c.a_row_bytes);
    const size_t amx_bytes = scratch.bytes - static_cast<size_t>(amx_scratch - static_cast<uint8_t*>(scratch.data));
    return amx_dequant_matmul(ctx, p.m, p.n, p.k, c.act, c.a_row_bytes, type, w_packed, c.w_row_bytes, p.bias, y, ldc,
                              amx_scratch, amx_bytes);
  }
  if (path == QMatmulPath::kVnni) {
    uint8_t* vnni_scratch = base + align_up(static_cast<size_t>(p.m) * c.a_row_bytes);
    const size_t vnni_bytes = scratch.bytes - static_cast<size_t>(vnni_scratch - static_cast<uint8_t*>(scratch.data));
    return vnni_dequant_matmul(ctx, p.m, p.n, p.k, c.act, c.a_row_bytes, type, w_packed, c.w_row_bytes, p.bias, y,
                               ldc, vnni_scratch, vnni_bytes);
  }
  if (path == QMatmulPath::kGemv) {
    run_gemv(ctx, c, static_cast<const uint8_t*>(w_packed), y);
  } else {
    run_panels(ctx, c, static_cast<const uint8_t*>(w_packed), y);
  }
  return Status::ok_status();
}

}  // namespace rlx::cpu
