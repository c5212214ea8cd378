// rel_pos_attention on the CPU (see rel_pos_attention.h). Per chunk of items: every
// (item, head)'s K and V packed once into GEMM panels (calling thread's kPanels scratch,
// in parallel), then tasks over (item, head, block of up to kRows query rows), each with
// its whole score block in thread scratch, multiplying against those panels.
#include "backends/cpu/kernels/rel_pos_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/isa_kernels.h"

namespace rlx::cpu {
namespace {

constexpr int64_t kRows = 64;                      // query rows per task
constexpr int64_t kScoreBytes = int64_t{4} << 20;  // a task's score block stays under this
constexpr size_t kPanelBytes = size_t{256} << 20;  // packed K and V of one chunk of items

}  // namespace

void rel_pos_attention_f32(const KernelContext& ctx, const RelPosAttentionParams& p, const float* q, const float* k,
                           const float* v, const float* rel_h, const float* rel_w, float* o) {
  const int64_t H = p.n_heads, D = p.head_dim, gh = p.grid_h, gw = p.grid_w, T = gh * gw, W = H * D;
  if (p.items <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  const float scale = p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(D));
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  // Fewer rows per task for long grids keep the score block in scratch of bounded size.
  const int64_t rows_max = std::clamp<int64_t>(kScoreBytes / (4 * T), 1, kRows);
  const int64_t blocks = (T + rows_max - 1) / rows_max;
  const int64_t lh = 2 * gh - 1, lw = 2 * gw - 1;
  const KernelContext one = ctx.single_threaded();
  const size_t k_bytes = (packed_b_bytes(one, D, T, WeightType::kF32) + 63) / 64 * 64;
  const size_t v_bytes = (packed_b_bytes(one, T, D, WeightType::kF32) + 63) / 64 * 64;
  const size_t rw_bytes = (static_cast<size_t>(lw * D) * sizeof(float) + 63) / 64 * 64;
  const int64_t per_item = H * static_cast<int64_t>(k_bytes + v_bytes);
  const int64_t chunk = std::clamp<int64_t>(static_cast<int64_t>(kPanelBytes) / per_item, 1, p.items);
  // The calling thread's kPanels scratch (no GEMM kernel touches it): the table of width
  // offsets reversed, so that a row's offsets run forward with xj, then the panels.
  auto* rw_rev =
      static_cast<float*>(thread_scratch(ScratchSlot::kPanels, rw_bytes + static_cast<size_t>(chunk * per_item)));
  uint8_t* panels = reinterpret_cast<uint8_t*>(rw_rev) + rw_bytes;
  for (int64_t r = 0; r < lw; ++r) std::copy(rel_w + (lw - 1 - r) * D, rel_w + (lw - r) * D, rw_rev + r * D);
  std::vector<PackedB> packed(static_cast<size_t>(2 * chunk * H));
  for (int64_t n0 = 0; n0 < p.items; n0 += chunk) {
    const int64_t items = std::min(chunk, p.items - n0);
    parallel_for(ctx, items * H, [&](int64_t t) {
      const int64_t n = n0 + t / H, h = t % H;
      uint8_t* dst = panels + t * static_cast<int64_t>(k_bytes + v_bytes);
      packed[static_cast<size_t>(2 * t)] =
          pack_b_into(one, D, T, true, W, k + n * T * W + h * D, WeightType::kF32, dst);
      packed[static_cast<size_t>(2 * t + 1)] =
          pack_b_into(one, T, D, false, W, v + n * T * W + h * D, WeightType::kF32, dst + k_bytes);
    });
    parallel_for(ctx, items * H * blocks, [&](int64_t task) {
      const int64_t blk = task % blocks, pair = task / blocks, h = pair % H, n = n0 + pair / H;
      const int64_t i0 = blk * rows_max, rows = std::min(rows_max, T - i0);
      // Scratch: scores [rows][T], the bias tables [rows][lh] and [rows][lw], row sums.
      auto* s = static_cast<float*>(
          thread_scratch(ScratchSlot::kAttention, static_cast<size_t>(rows * (T + lh + lw + 1)) * sizeof(float)));
      float* bh = s + rows * T;
      float* bw = bh + rows * lh;
      float* sums = bw + rows * lw;
      const float* qb = q + (n * T + i0) * W + h * D;
      GemmParams g;
      g.m = rows;
      g.k = D;
      g.lda = W;
      g.n = T;
      gemm_prepacked(one, g, qb, packed[static_cast<size_t>(2 * pair)], s);  // q kᵀ
      g.n = lh;
      g.ldb = D;
      gemm(one, g, qb, rel_h, WeightType::kF32, bh);  // q . rel_h[r] for every offset r
      g.n = lw;
      gemm(one, g, qb, rw_rev, WeightType::kF32, bw);  // q . rel_w[lw - 1 - r]
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r, yi = i / gw, xi = i % gw;
        float* sr = s + r * T;
        const float* bhr = bh + r * lh + yi + gh - 1;  // bhr[-yj]: offset yi - yj
        const float* bwr = bw + r * lw + gw - 1 - xi;  // bwr[xj]: offset xi - xj
        for (int64_t yj = 0; yj < gh; ++yj) {
          float* sy = sr + yj * gw;
          const float by = bhr[-yj];
          for (int64_t xj = 0; xj < gw; ++xj) sy[xj] = scale * sy[xj] + by + bwr[xj];
        }
        const float mx = kk.reduce_row(ReduceOp::kMax, sr, T);
        kk.binary_bs(BinaryOp::kSub, sr, mx, sr, T);
        kk.unary(UnaryOp::kExp, sr, sr, T);
        sums[r] = kk.reduce_row(ReduceOp::kSum, sr, T);
      }
      GemmParams g2;
      g2.m = rows;
      g2.n = D;
      g2.k = T;
      g2.lda = T;
      g2.ldc = W;
      float* ob = o + (n * T + i0) * W + h * D;
      gemm_prepacked(one, g2, s, packed[static_cast<size_t>(2 * pair + 1)], ob);  // p v
      for (int64_t r = 0; r < rows; ++r) kk.binary_bs(BinaryOp::kMul, ob + r * W, 1.0f / sums[r], ob + r * W, D);
    });
  }
}

}  // namespace rlx::cpu
