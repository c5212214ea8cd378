// Portable DequantMatMul GEMV loops of the i-quant and ternary weight types. Each
// 256-value super-block is unpacked into 32 runs of 8 signed byte values with an integer
// scale per run (and, for IQ1_S / IQ1_M, the sign of the run's delta); the dot with a
// Q8_K activation block is then exact in int32 and scaled once per super-block as
// llama.cpp's ggml_vec_dot_<type>_q8_K does: d_w * d_x * (factor * Σ ls * dot
// + delta * Σ ls * sign * Σq). IQ4_NL (32-value blocks, Q8_0 activations) has its own.
// The vector tables use these loops for the codebook types (their SIMD loops cover
// IQ4_NL, IQ4_XS, TQ1_0 and TQ2_0).
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/qmatmul_kernels.h"
#include "rlx/base/half.h"
#include "rlx/formats/iq_grids.h"
#include "rlx/formats/quant_blocks.h"

namespace rlx::cpu::detail {
namespace {

using namespace rlx::formats;

inline float h2f(uint16_t h) { return f16_bits_to_f32(h); }
inline int8_t signed_level(uint64_t entry, int j, uint8_t signs) {
  const int v = static_cast<int>((entry >> (8 * j)) & 0xFF);
  return static_cast<int8_t>((signs >> j) & 1 ? -v : v);
}

struct Runs {
  int8_t v[256];
  int16_t ls[32];
  int8_t delta_sign[32];  // IQ1 only
  float d;
};

void fill_grid_run(Runs& o, int r, uint64_t entry, uint8_t signs, int ls) {
  for (int j = 0; j < 8; ++j) o.v[8 * r + j] = signed_level(entry, j, signs);
  o.ls[r] = static_cast<int16_t>(ls);
}

void unpack_iq2_xxs(const void* p, Runs& o) {
  const auto& b = *static_cast<const BlockIQ2_XXS*>(p);
  o.d = h2f(b.d);
  for (int g = 0; g < 8; ++g) {
    uint8_t idx[4];
    uint32_t meta;
    std::memcpy(idx, b.qs + 4 * g, 4);
    std::memcpy(&meta, b.qs + 4 * g + 2, 4);
    const int ls = 2 * static_cast<int>(meta >> 28) + 1;
    for (int l = 0; l < 4; ++l) fill_grid_run(o, 4 * g + l, kIq2xxsGrid[idx[l]], iq_sign_byte(meta >> (7 * l)), ls);
  }
}

void unpack_iq2_xs(const void* p, Runs& o) {
  const auto& b = *static_cast<const BlockIQ2_XS*>(p);
  o.d = h2f(b.d);
  for (int r = 0; r < 32; ++r) {
    const int nib = (b.scales[r / 4] >> (4 * ((r % 4) / 2))) & 0xF;
    fill_grid_run(o, r, kIq2xsGrid[b.qs[r] & 511], iq_sign_byte(b.qs[r] >> 9), 2 * nib + 1);
  }
}

void unpack_iq2_s(const void* p, Runs& o) {
  const auto& b = *static_cast<const BlockIQ2_S*>(p);
  o.d = h2f(b.d);
  for (int r = 0; r < 32; ++r) {
    const int nib = (b.scales[r / 4] >> (4 * ((r % 4) / 2))) & 0xF;
    const int index = b.qs[r] | (((b.qh[r / 4] >> (2 * (r % 4))) & 3) << 8);
    fill_grid_run(o, r, kIq2sGrid[index], b.qs[32 + r], 2 * nib + 1);
  }
}

void unpack_iq3_xxs(const void* p, Runs& o) {
  const auto& b = *static_cast<const BlockIQ3_XXS*>(p);
  o.d = h2f(b.d);
  for (int g = 0; g < 8; ++g) {
    uint32_t meta;
    std::memcpy(&meta, b.qs + kQK_K / 4 + 4 * g, 4);
    const int ls = 2 * static_cast<int>(meta >> 28) + 1;
    for (int l = 0; l < 4; ++l) {
      const int r = 4 * g + l;
      const uint64_t entry = uint64_t{kIq3xxsGrid[b.qs[2 * r]]} | uint64_t{kIq3xxsGrid[b.qs[2 * r + 1]]} << 32;
      fill_grid_run(o, r, entry, iq_sign_byte(meta >> (7 * l)), ls);
    }
  }
}

void unpack_iq3_s(const void* p, Runs& o) {
  const auto& b = *static_cast<const BlockIQ3_S*>(p);
  o.d = h2f(b.d);
  for (int r = 0; r < 32; ++r) {
    const int g = r / 4;
    const int nib = (b.scales[g / 2] >> (4 * (g % 2))) & 0xF;
    const int q0 = 2 * r, q1 = 2 * r + 1;
    const int i0 = b.qs[q0] | (((b.qh[q0 / 8] >> (q0 % 8)) & 1) << 8);
    const int i1 = b.qs[q1] | (((b.qh[q1 / 8] >> (q1 % 8)) & 1) << 8);
    fill_grid_run(o, r, uint64_t{kIq3sGrid[i0]} | uint64_t{kIq3sGrid[i1]} << 32, b.signs[r], 2 * nib + 1);
  }
}

void unpack_iq1_s(const void* p, Runs& o) {
  const auto& b = *static_cast<const BlockIQ1_S*>(p);
  o.d = h2f(b.d);
  for (int g = 0; g < 8; ++g) {
    const uint16_t qh = b.qh[g];
    for (int l = 0; l < 4; ++l) {
      const int r = 4 * g + l;
      fill_grid_run(o, r, kIq1sGrid[b.qs[r] | (((qh >> (3 * l)) & 7) << 8)], 0, 2 * ((qh >> 12) & 7) + 1);
      o.delta_sign[r] = static_cast<int8_t>(qh & 0x8000 ? -1 : 1);
    }
  }
}

void unpack_iq1_m(const void* p, Runs& o) {
  const auto& b = *static_cast<const BlockIQ1_M*>(p);
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof sc);
  o.d =
      h2f(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)));
  for (int r = 0; r < 32; ++r) {
    const int half = r / 2;  // scale per 16 values
    const uint8_t h = static_cast<uint8_t>(b.qh[r / 2] >> (4 * (r % 2)));
    fill_grid_run(o, r, kIq1sGrid[b.qs[r] | ((h & 7) << 8)], 0, 2 * ((sc[half / 4] >> (3 * (half % 4))) & 7) + 1);
    o.delta_sign[r] = static_cast<int8_t>(h & 0x08 ? -1 : 1);
  }
}

void unpack_iq4_xs(const void* p, Runs& o) {
  const auto& b = *static_cast<const BlockIQ4_XS*>(p);
  o.d = h2f(b.d);
  for (int g = 0; g < 8; ++g) {
    const int ls = iq4_xs_scale(b, g);
    for (int j = 0; j < 16; ++j) {
      o.v[32 * g + j] = kIq4nlValues[b.qs[16 * g + j] & 0xF];
      o.v[32 * g + 16 + j] = kIq4nlValues[b.qs[16 * g + j] >> 4];
    }
    for (int l = 0; l < 4; ++l) o.ls[4 * g + l] = static_cast<int16_t>(ls);
  }
}

void unpack_tq1_0(const void* p, Runs& o) {
  const auto& b = *static_cast<const BlockTQ1_0*>(p);
  o.d = h2f(b.d);
  int e = 0;
  for (int n = 0; n < 5; ++n)
    for (int m = 0; m < 32; ++m) o.v[e++] = static_cast<int8_t>(tq1_trit(b.qs[m], n) - 1);
  for (int n = 0; n < 5; ++n)
    for (int m = 0; m < 16; ++m) o.v[e++] = static_cast<int8_t>(tq1_trit(b.qs[32 + m], n) - 1);
  for (int n = 0; n < 4; ++n)
    for (int j = 0; j < 4; ++j) o.v[e++] = static_cast<int8_t>(tq1_trit(b.qh[j], n) - 1);
  for (int16_t& ls : o.ls) ls = 1;
}

void unpack_tq2_0(const void* p, Runs& o) {
  const auto& b = *static_cast<const BlockTQ2_0*>(p);
  o.d = h2f(b.d);
  for (int e = 0; e < 256; ++e)
    o.v[e] = static_cast<int8_t>(((b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3) - 1);
  for (int16_t& ls : o.ls) ls = 1;
}

using UnpackFn = void (*)(const void*, Runs&);

// factor: the scale step of the type (IQ2: (2s+1)/8, IQ3_XXS: (2s+1)/4); kDelta: IQ1.
template <UnpackFn kUnpack, size_t kBlockBytes, bool kDelta>
float dot_runs(const uint8_t* w, const BlockQ8_K* a, int64_t nb, float factor) {
  float sum = 0.0f;
  Runs o;
  for (int64_t b = 0; b < nb; ++b) {
    kUnpack(w + b * kBlockBytes, o);
    const int8_t* q = a[b].qs;
    int32_t isum = 0, dsum = 0;
    for (int r = 0; r < 32; ++r) {
      int32_t s = 0, qsum = 0;
      for (int j = 0; j < 8; ++j) {
        s += o.v[8 * r + j] * q[8 * r + j];
        if constexpr (kDelta) qsum += q[8 * r + j];
      }
      isum += o.ls[r] * s;
      if constexpr (kDelta) dsum += o.ls[r] * o.delta_sign[r] * qsum;
    }
    float block = factor * static_cast<float>(isum);
    if constexpr (kDelta) block += kIq1Delta * static_cast<float>(dsum);
    sum += o.d * a[b].d * block;
  }
  return sum;
}

template <UnpackFn kUnpack, size_t kBlockBytes, bool kDelta>
void gemv_runs(int m, int64_t nb, const uint8_t* w, size_t w_row_bytes, const uint8_t* act, size_t act_row_bytes,
               int64_t n0, int64_t n1, float* out, int64_t ldo, float factor) {
  for (int64_t j = n0; j < n1; ++j)
    for (int r = 0; r < m; ++r)
      out[r * ldo + (j - n0)] = dot_runs<kUnpack, kBlockBytes, kDelta>(
          w + j * w_row_bytes, reinterpret_cast<const BlockQ8_K*>(act + r * act_row_bytes), nb, factor);
}

}  // namespace

#define RLX_RUNS_GEMV(name, unpack, block, delta, factor)                                                            \
  void name(int m, int64_t nb, const uint8_t* w, size_t wrb, const uint8_t* act, size_t arb, int64_t n0, int64_t n1, \
            float* out, int64_t ldo) {                                                                               \
    gemv_runs<&unpack, sizeof(block), delta>(m, nb, w, wrb, act, arb, n0, n1, out, ldo, factor);                     \
  }
RLX_RUNS_GEMV(gemv_iq2_xxs_rows, unpack_iq2_xxs, BlockIQ2_XXS, false, 0.125f)
RLX_RUNS_GEMV(gemv_iq2_xs_rows, unpack_iq2_xs, BlockIQ2_XS, false, 0.125f)
RLX_RUNS_GEMV(gemv_iq2_s_rows, unpack_iq2_s, BlockIQ2_S, false, 0.125f)
RLX_RUNS_GEMV(gemv_iq3_xxs_rows, unpack_iq3_xxs, BlockIQ3_XXS, false, 0.25f)
RLX_RUNS_GEMV(gemv_iq3_s_rows, unpack_iq3_s, BlockIQ3_S, false, 1.0f)
RLX_RUNS_GEMV(gemv_iq1_s_rows, unpack_iq1_s, BlockIQ1_S, true, 1.0f)
RLX_RUNS_GEMV(gemv_iq1_m_rows, unpack_iq1_m, BlockIQ1_M, true, 1.0f)
RLX_RUNS_GEMV(gemv_iq4_xs_rows, unpack_iq4_xs, BlockIQ4_XS, false, 1.0f)
RLX_RUNS_GEMV(gemv_tq1_0_rows, unpack_tq1_0, BlockTQ1_0, false, 1.0f)
RLX_RUNS_GEMV(gemv_tq2_0_rows, unpack_tq2_0, BlockTQ2_0, false, 1.0f)
#undef RLX_RUNS_GEMV

void gemv_iq4_nl_rows(int m, int64_t nb, const uint8_t* w, size_t w_row_bytes, const uint8_t* act, size_t act_row_bytes,
                      int64_t n0, int64_t n1, float* out, int64_t ldo) {
  for (int64_t j = n0; j < n1; ++j) {
    const auto* wb = reinterpret_cast<const BlockIQ4_NL*>(w + j * w_row_bytes);
    for (int r = 0; r < m; ++r) {
      const auto* ab = reinterpret_cast<const BlockQ8_0*>(act + r * act_row_bytes);
      float sum = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t s = 0;
        for (int i = 0; i < 16; ++i)
          s += kIq4nlValues[wb[b].qs[i] & 0xF] * ab[b].qs[i] + kIq4nlValues[wb[b].qs[i] >> 4] * ab[b].qs[i + 16];
        sum += h2f(wb[b].d) * h2f(ab[b].d) * static_cast<float>(s);
      }
      out[r * ldo + (j - n0)] = sum;
    }
  }
}

}  // namespace rlx::cpu::detail
