// GEMM drivers: K/M/N blocking, A and B packing into per-thread scratch, the task
// grid over the thread pool, the GEMV path for small M, and batched GEMM. The inner
// loops (micro-tiles, GEMV rows, epilogues) come from the per-ISA tables.
#include "backends/cpu/kernels/gemm.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backends/cpu/kernels/amx_matmul.h"
#include "backends/cpu/kernels/bf16_dot_matmul.h"
#include "backends/cpu/kernels/gemv_tuning.h"
#include "backends/cpu/kernels/isa_kernels.h"
#include "rlx/base/status.h"

namespace rlx::cpu {
namespace {

using detail::IsaKernels;
using detail::TileEpilogue;

constexpr int64_t kKc = 256;            // K block: a B micro-panel of kc x nr stays in L1/L2
constexpr int64_t kMcTarget = 128;      // rows of an A block (rounded to the micro-tile)
constexpr int64_t kMaxPanelsPerTask = 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Resolved {
  int64_t m, n, k, lda, ldb, ldc;
};

Resolved resolve(const GemmParams& p) {
  Resolved r{p.m, p.n, p.k, p.lda, p.ldb, p.ldc};
  if (r.lda == 0) r.lda = p.k;
  if (r.ldb == 0) r.ldb = p.b_transposed ? p.k : p.n;
  if (r.ldc == 0) r.ldc = p.n;
  return r;
}

template <typename T>
void pack_b_panels_t(const T* b, bool trans, int64_t ldb, int64_t k, int64_t n, int nr, int64_t p0,
                     int64_t p1, T* dst) {
  for (int64_t p = p0; p < p1; ++p) {
    T* d = dst + (p - p0) * k * nr;
    const int64_t n0 = p * nr;
    const int64_t cols = std::min<int64_t>(nr, n - n0);
    if (trans) {
      for (int64_t c = 0; c < cols; ++c) {
        const T* row = b + (n0 + c) * ldb;
        for (int64_t kk = 0; kk < k; ++kk) d[kk * nr + c] = row[kk];
      }
      for (int64_t c = cols; c < nr; ++c)
        for (int64_t kk = 0; kk < k; ++kk) d[kk * nr + c] = T{};
    } else {
      for (int64_t kk = 0; kk < k; ++kk) {
        const T* row = b + kk * ldb + n0;
        T* dr = d + kk * nr;
        std::memcpy(dr, row, static_cast<size_t>(cols) * sizeof(T));
        for (int64_t c = cols; c < nr; ++c) dr[c] = T{};
      }
    }
  }
}

// Packs panels [p0, p1) of B into dst (panel p0 first).
void pack_b_panels(const void* b, WeightType wt, bool trans, int64_t ldb, int64_t k, int64_t n, int nr,
                   int64_t p0, int64_t p1, void* dst) {
  if (wt == WeightType::kF32) {
    pack_b_panels_t(static_cast<const float*>(b), trans, ldb, k, n, nr, p0, p1, static_cast<float*>(dst));
  } else {
    pack_b_panels_t(static_cast<const uint16_t*>(b), trans, ldb, k, n, nr, p0, p1,
                    static_cast<uint16_t*>(dst));
  }
}

// Packs rows [0, rows) x cols [k0, k0 + kc) of A into micro-panels [kc][mr], zero-padded.
void pack_a(const float* a, int64_t lda, int64_t rows, int64_t k0, int64_t kc, int mr, float* dst) {
  for (int64_t r0 = 0; r0 < rows; r0 += mr) {
    float* d = dst + (r0 / mr) * kc * mr;
    const int64_t nrow = std::min<int64_t>(mr, rows - r0);
    for (int64_t i = 0; i < nrow; ++i) {
      const float* src = a + (r0 + i) * lda + k0;
      for (int64_t kk = 0; kk < kc; ++kk) d[kk * mr + i] = src[kk];
    }
    for (int64_t i = nrow; i < mr; ++i)
      for (int64_t kk = 0; kk < kc; ++kk) d[kk * mr + i] = 0.0f;
  }
}

// C[m0:m1, panels jp0:jp1] with B panels at `bpanels` (panel jp0 first, K*nr elements each).
void compute_block(const IsaKernels& kk, const GemmParams& p, const Resolved& r, const float* a,
                   const uint8_t* bpanels, WeightType wt, int64_t m0, int64_t m1, int64_t jp0, int64_t jp1,
                   float* c, int64_t kc_block) {
  const int mr = kk.gemm_mr, nr = kk.gemm_nr;
  const size_t esize = weight_type_size(wt);
  const int64_t rows = m1 - m0;
  const int64_t kcb = std::min(kc_block, r.k);
  auto* ap = static_cast<float*>(
      thread_scratch(ScratchSlot::kPackA, static_cast<size_t>(ceil_div(rows, mr) * mr * kcb) * sizeof(float)));
  for (int64_t pc = 0; pc < r.k; pc += kcb) {
    const int64_t kc = std::min(kcb, r.k - pc);
    pack_a(a + m0 * r.lda, r.lda, rows, pc, kc, mr, ap);
    for (int64_t jp = jp0; jp < jp1; ++jp) {
      const uint8_t* bp = bpanels + static_cast<size_t>(((jp - jp0) * r.k + pc) * nr) * esize;
      const int64_t n0 = jp * nr;
      TileEpilogue ep;
      ep.bias = p.bias ? p.bias + n0 : nullptr;
      ep.act = p.act;
      ep.beta = p.beta;
      ep.first = pc == 0;
      ep.last = pc + kc == r.k;
      const int nr_valid = static_cast<int>(std::min<int64_t>(nr, r.n - n0));
      for (int64_t i = m0; i < m1; i += mr) {
        const int rows_i = static_cast<int>(std::min<int64_t>(mr, m1 - i));
        kk.gemm_tile(rows_i, kc, ap + ((i - m0) / mr) * kc * mr, bp, wt, c + i * r.ldc + n0, r.ldc, nr_valid,
                     ep);
      }
    }
  }
}

int64_t kc_block_for(const GemmParams& p) {
  // The epilogue adds beta*C after a non-linear activation: it needs the old C when the
  // last K block is done, so K is not split then.
  return (p.beta != 0.0f && p.act != Activation::kIdentity) ? p.k : kKc;
}

int64_t mc_rows(int mr) { return mr * std::max<int64_t>(1, kMcTarget / mr); }

// K == 0: C = act(bias) + beta*C.
void gemm_k0(const KernelContext& ctx, const GemmParams& p, const Resolved& r, float* c) {
  const IsaKernels& kk = detail::isa_kernels(ctx.isa);
  auto* zeros = static_cast<float*>(thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(r.n) * sizeof(float)));
  std::fill(zeros, zeros + r.n, 0.0f);
  for (int64_t i = 0; i < r.m; ++i) kk.epilogue_row(zeros, p.bias, p.act, p.beta, c + i * r.ldc, r.n);
}

void gemv(const KernelContext& ctx, const IsaKernels& kk, const GemmParams& p, const Resolved& r,
          const float* a, const void* b, WeightType wt, float* c) {
  const int threads = ctx.n_threads();
  int64_t chunk = ceil_div(r.n, static_cast<int64_t>(threads) * 8);
  chunk = std::clamp<int64_t>(ceil_div(chunk, 64) * 64, 64, 1024);
  const int64_t tasks = ceil_div(r.n, chunk);
  const int m = static_cast<int>(r.m);
  parallel_for(ctx, tasks, [&](int64_t t) {
    const int64_t n0 = t * chunk, n1 = std::min(r.n, n0 + chunk);
    auto* tmp = static_cast<float*>(
        thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(m * chunk) * sizeof(float)));
    if (p.b_transposed) {
      kk.gemv_nk(m, r.k, a, r.lda, b, wt, r.ldb, n0, n1, tmp, chunk);
    } else {
      kk.gemv_kn(m, r.k, a, r.lda, b, wt, r.ldb, n0, n1, tmp, chunk);
    }
    for (int i = 0; i < m; ++i)
      kk.epilogue_row(tmp + i * chunk, p.bias ? p.bias + n0 : nullptr, p.act, p.beta, c + i * r.ldc + n0,
                      n1 - n0);
  });
}

// M <= kGemvMaxM against packed panels: tasks are runs of whole panels (about the
// column chunk of gemv()), each streamed once over all of K.
void gemv_prepacked(const KernelContext& ctx, const IsaKernels& kk, const GemmParams& p, const Resolved& r,
                    const float* a, const PackedB& b, float* c) {
  const int nr = kk.gemm_nr;
  const int64_t n_panels = ceil_div(r.n, nr);
  const int threads = ctx.n_threads();
  // One row: gemv_split() contiguous runs a thread (gemv_tuning.h).
  const int split = r.m == 1 ? detail::gemv_split() : 8;
  int64_t chunk = ceil_div(r.n, static_cast<int64_t>(threads) * split);
  chunk = r.m == 1 ? ceil_div(chunk, 64) * 64 : std::clamp<int64_t>(ceil_div(chunk, 64) * 64, 64, 1024);
  const int64_t ppt = std::max<int64_t>(1, chunk / nr);
  const int64_t tasks = ceil_div(n_panels, ppt);
  const int m = static_cast<int>(r.m);
  // One-row calls over large weights feed the prefetch-distance measurement, as the
  // quantized GEMVs do (an f16 / bf16 / f32 model has no other decode GEMVs).
  const size_t weight_bytes = b.bytes();
  const bool timed = m == 1 && weight_bytes >= detail::kGemvTuneMinBytes && detail::gemv_tuning_active();
  const int prefetch = timed ? detail::gemv_far_prefetch() : 0;
  const auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  parallel_for(ctx, tasks, [&](int64_t t) {
    const int64_t jp0 = t * ppt, jp1 = std::min(n_panels, jp0 + ppt);
    const int64_t width = (jp1 - jp0) * nr;
    const int64_t n0 = jp0 * nr, n1 = std::min(r.n, jp1 * nr);
    auto* tmp = static_cast<float*>(
        thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(m * ppt * nr) * sizeof(float)));
    kk.gemv_panels(m, r.k, a, r.lda, b.data(), b.type(), jp0, jp1, tmp, width);
    for (int i = 0; i < m; ++i)
      kk.epilogue_row(tmp + i * width, p.bias ? p.bias + n0 : nullptr, p.act, p.beta, c + i * r.ldc + n0,
                      n1 - n0);
  });
  if (timed)
    detail::gemv_tuning_record(
        weight_bytes, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), prefetch,
        split);
}

// Whether m rows against weights of `type` (packed ahead: `packed`, else null) take the
// BF16 dot products (bf16_dot_matmul.h), the one rule of gemm() and gemm_prepacked;
// counts the choice for describe_bf16_dot. AMX hosts keep these rows on their tiles (or
// their f32 panels) and are not counted.
bool takes_bf16_dot(const KernelContext& ctx, const GemmParams& p, int64_t m, WeightType type, const PackedB* packed) {
  if (type == WeightType::kF32 || m < kBf16DotMinRows || amx_enabled(ctx.isa)) return false;
  const Bf16DotPolicy policy = bf16_dot_policy();
  const bool on = !p.keep_x_f32 && (packed != nullptr ? bf16_dot_takes(ctx.isa, policy, m, *packed)
                                                      : bf16_dot_takes_unpacked(ctx.isa, policy, m, type));
  count_half_matmul(on);
  return on;
}

// gemm() for the weights gemm_prepacked sends to the BF16 dot products (so a product's
// numerics do not depend on whether its weights were packed ahead): B packed a stripe of
// columns at a time into the calling thread's kGemmPanels scratch, each stripe a view
// bf16_dot_gemm_prepacked runs over (x is converted once per stripe).
void gemm_bf16_dot_stripes(const KernelContext& ctx, const GemmParams& p, const Resolved& r, const float* a,
                           const void* b, WeightType b_type, float* c) {
  constexpr int64_t kStripeCols = 1024;
  const int64_t cols = std::min(r.n, kStripeCols);
  void* panels = thread_scratch(ScratchSlot::kGemmPanels, packed_b_bytes(ctx, r.k, cols, b_type));
  const size_t esize = weight_type_size(b_type);
  for (int64_t n0 = 0; n0 < r.n; n0 += kStripeCols) {
    const int64_t nc = std::min(kStripeCols, r.n - n0);
    const auto* bs = static_cast<const uint8_t*>(b) + static_cast<size_t>(p.b_transposed ? n0 * r.ldb : n0) * esize;
    const PackedB stripe = pack_b_into(ctx, r.k, nc, p.b_transposed, r.ldb, bs, b_type, panels);
    GemmParams q = p;
    q.n = nc;
    q.lda = r.lda;
    q.ldc = r.ldc;
    q.bias = p.bias ? p.bias + n0 : nullptr;
    bf16_dot_gemm_prepacked(ctx, q, a, stripe, c + n0);
  }
}

}  // namespace

void gemm(const KernelContext& ctx, const GemmParams& p, const float* a, const void* b, WeightType b_type,
          float* c) {
  const Resolved r = resolve(p);
  if (r.m <= 0 || r.n <= 0) return;
  if (r.k <= 0) return gemm_k0(ctx, p, r, c);
  const IsaKernels& kk = detail::isa_kernels(ctx.isa);
  if (r.m <= kGemvMaxM) return gemv(ctx, kk, p, r, a, b, b_type, c);
  if (takes_bf16_dot(ctx, p, r.m, b_type, nullptr)) return gemm_bf16_dot_stripes(ctx, p, r, a, b, b_type, c);

  // Tasks are stripes of B panels: each packs its stripe once, then sweeps all of M.
  const int nr = kk.gemm_nr;
  const size_t esize = weight_type_size(b_type);
  const int64_t n_panels = ceil_div(r.n, nr);
  const int threads = ctx.n_threads();
  int64_t spp = std::min<int64_t>(kMaxPanelsPerTask, n_panels);
  while (spp > 1 && ceil_div(n_panels, spp) < 2 * threads) spp = ceil_div(spp, 2);
  const int64_t tasks = ceil_div(n_panels, spp);
  const int64_t kc_block = kc_block_for(p);
  const int64_t mc = mc_rows(kk.gemm_mr);
  parallel_for(ctx, tasks, [&](int64_t t) {
    const int64_t jp0 = t * spp, jp1 = std::min(n_panels, jp0 + spp);
    auto* bp = static_cast<uint8_t*>(
        thread_scratch(ScratchSlot::kPackB, static_cast<size_t>((jp1 - jp0) * r.k * nr) * esize));
    pack_b_panels(b, b_type, p.b_transposed, r.ldb, r.k, r.n, nr, jp0, jp1, bp);
    for (int64_t m0 = 0; m0 < r.m; m0 += mc)
      compute_block(kk, p, r, a, bp, b_type, m0, std::min(r.m, m0 + mc), jp0, jp1, c, kc_block);
  });
}

PackedB pack_b(const KernelContext& ctx, int64_t k, int64_t n, bool b_transposed, int64_t ldb, const void* b,
               WeightType b_type) {
  return pack_b(ctx, k, n, b_transposed, ldb, b, b_type, SIZE_MAX, nullptr);
}

PackedB PackedB::header(int64_t k, int64_t n, WeightType type, IsaLevel isa, int nr) {
  PackedB out;
  out.k_ = k;
  out.n_ = n;
  out.type_ = type;
  out.isa_ = isa;
  out.nr_ = nr;
  return out;
}

PackedB PackedB::view(const KernelContext& ctx, int64_t k, int64_t n, WeightType type, const void* bytes) {
  const IsaKernels& kk = detail::isa_kernels(ctx.isa);
  PackedB out = header(k, n, type, kk.isa, kk.gemm_nr);
  if (n <= 0 || k <= 0) return out;
  out.data_ = static_cast<const uint8_t*>(bytes);
  out.bytes_ = packed_b_bytes(ctx, k, n, type);
  return out;
}

size_t packed_b_bytes(const KernelContext& ctx, int64_t k, int64_t n, WeightType b_type) {
  const int nr = detail::isa_kernels(ctx.isa).gemm_nr;
  return static_cast<size_t>(ceil_div(n, nr) * k * nr) * weight_type_size(b_type);
}

namespace {
// Packs every panel of B ([N,K] if b_transposed else [K,N], row stride ldb or 0 for
// dense) into dst, about step_bytes at a time, calling done(columns packed) after each.
void pack_all_panels(const KernelContext& ctx, const IsaKernels& kk, int64_t k, int64_t n, bool b_transposed,
                     int64_t ldb, const void* b, WeightType b_type, uint8_t* dst, size_t step_bytes,
                     const std::function<void(int64_t)>& done) {
  if (ldb == 0) ldb = b_transposed ? k : n;
  const int64_t n_panels = ceil_div(n, kk.gemm_nr);
  const size_t panel_bytes = static_cast<size_t>(k * kk.gemm_nr) * weight_type_size(b_type);
  const int64_t step = static_cast<int64_t>(std::clamp<size_t>(step_bytes / panel_bytes, 1, static_cast<size_t>(n_panels)));
  for (int64_t p0 = 0; p0 < n_panels; p0 += step) {
    const int64_t p1 = std::min(n_panels, p0 + step);
    parallel_for(ctx, p1 - p0, [&](int64_t i) {
      const int64_t pi = p0 + i;
      pack_b_panels(b, b_type, b_transposed, ldb, k, n, kk.gemm_nr, pi, pi + 1, dst + pi * panel_bytes);
    });
    if (done) done(std::min(n, p1 * kk.gemm_nr));
  }
}
}  // namespace

PackedB pack_b_into(const KernelContext& ctx, int64_t k, int64_t n, bool b_transposed, int64_t ldb, const void* b,
                    WeightType b_type, void* dst) {
  return pack_b_into(ctx, k, n, b_transposed, ldb, b, b_type, dst, SIZE_MAX, nullptr);
}

PackedB pack_b_into(const KernelContext& ctx, int64_t k, int64_t n, bool b_transposed, int64_t ldb, const void* b,
                    WeightType b_type, void* dst, size_t step_bytes, const std::function<void(int64_t)>& done) {
  const IsaKernels& kk = detail::isa_kernels(ctx.isa);
  PackedB out = PackedB::header(k, n, b_type, kk.isa, kk.gemm_nr);
  if (n <= 0 || k <= 0) return out;
  auto* d = static_cast<uint8_t*>(dst);
  pack_all_panels(ctx, kk, k, n, b_transposed, ldb, b, b_type, d, step_bytes, done);
  out.data_ = d;  // the caller's memory: nothing allocated or freed here
  out.bytes_ = packed_b_bytes(ctx, k, n, b_type);
  return out;
}

PackedB pack_b(const KernelContext& ctx, int64_t k, int64_t n, bool b_transposed, int64_t ldb, const void* b,
               WeightType b_type, size_t step_bytes, const std::function<void(int64_t)>& done) {
  const IsaKernels& kk = detail::isa_kernels(ctx.isa);
  PackedB out = PackedB::header(k, n, b_type, kk.isa, kk.gemm_nr);
  if (n <= 0 || k <= 0) return out;
  out.owned_ = AlignedBuffer(packed_b_bytes(ctx, k, n, b_type), 64);
  out.data_ = out.owned_.data();
  out.bytes_ = out.owned_.size();
  pack_all_panels(ctx, kk, k, n, b_transposed, ldb, b, b_type, out.owned_.data(), step_bytes, done);
  return out;
}

void gemm_prepacked(const KernelContext& ctx, const GemmParams& p, const float* a, const PackedB& b, float* c) {
  RLX_ASSERT(p.k == b.k() && p.n == b.n());
  const Resolved r = resolve(p);
  if (r.m <= 0 || r.n <= 0) return;
  if (r.k <= 0) return gemm_k0(ctx, p, r, c);
  const IsaKernels& kk = detail::isa_kernels(b.isa());
  RLX_ASSERT(kk.gemm_nr == b.nr());
  if (r.m <= kGemvMaxM) return gemv_prepacked(ctx, kk, p, r, a, b, c);
  GemmParams resolved = p;  // what the many-row kernels of other files take
  resolved.lda = r.lda;
  resolved.ldc = r.ldc;
  if (r.m >= amx_min_rows() && b.nr() == 32 && b.type() != WeightType::kF32 && amx_enabled(ctx.isa))
    return amx_gemm_prepacked(ctx, resolved, a, b, c);
  if (takes_bf16_dot(ctx, p, r.m, b.type(), &b)) return bf16_dot_gemm_prepacked(ctx, resolved, a, b, c);
  const int64_t n_panels = ceil_div(r.n, kk.gemm_nr);
  const int64_t mc = mc_rows(kk.gemm_mr);
  const int64_t m_blocks = ceil_div(r.m, mc);
  const int threads = ctx.n_threads();
  int64_t ppt = std::min<int64_t>(kMaxPanelsPerTask, n_panels);
  while (ppt > 1 && m_blocks * ceil_div(n_panels, ppt) < 4 * threads) ppt = ceil_div(ppt, 2);
  const int64_t n_blocks = ceil_div(n_panels, ppt);
  const int64_t kc_block = kc_block_for(p);
  const size_t panel_bytes = static_cast<size_t>(r.k * kk.gemm_nr) * weight_type_size(b.type());
  parallel_for(ctx, m_blocks * n_blocks, [&](int64_t t) {
    const int64_t mb = t % m_blocks, nb = t / m_blocks;
    const int64_t jp0 = nb * ppt, jp1 = std::min(n_panels, jp0 + ppt);
    const int64_t m0 = mb * mc, m1 = std::min(r.m, m0 + mc);
    compute_block(kk, p, r, a, b.data() + jp0 * panel_bytes, b.type(), m0, m1, jp0, jp1, c, kc_block);
  });
}

void batched_gemm(const KernelContext& ctx, const GemmParams& p, int64_t batch, const float* a, int64_t stride_a,
                  const void* b, WeightType b_type, int64_t stride_b, float* c, int64_t stride_c) {
  if (batch <= 0) return;
  const size_t esize = weight_type_size(b_type);
  auto one = [&](const KernelContext& cx, int64_t i) {
    gemm(cx, p, a + i * stride_a, static_cast<const uint8_t*>(b) + static_cast<size_t>(i * stride_b) * esize,
         b_type, c + i * stride_c);
  };
  if (batch >= ctx.n_threads() && ctx.n_threads() > 1) {
    const KernelContext inner = ctx.single_threaded();
    parallel_for(ctx, batch, [&](int64_t i) { one(inner, i); });
  } else {
    for (int64_t i = 0; i < batch; ++i) one(ctx, i);
  }
}

}  // namespace rlx::cpu
