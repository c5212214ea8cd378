// Type-dispatched entry points dequantize_row / quantize_row: argument checks, the
// plain F32/F16/BF16 conversions, and a switch onto the per-type block codecs.
#include <cmath>
#include <cstring>
#include <vector>

#include "formats/quant_search.h"
#include "rlx/base/half.h"
#include "rlx/formats/quant.h"

namespace rlx::formats {
namespace {

Status check_row(GgmlType type, int64_t n, const char* what) {
  const int64_t block = ggml_block_size(type);
  if (n < 0 || n % block != 0)
    return Error::invalid_argument("{}: {} elements is not a multiple of the {} block size {}", what, n,
                                   ggml_type_name(type), block);
  return {};
}

}  // namespace

bool can_dequantize(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::Q8_K:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
    case GgmlType::TQ1_0:
    case GgmlType::TQ2_0:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M: return true;
    default: return false;
  }
}

bool can_quantize(GgmlType type) { return can_dequantize(type); }

Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  if (!can_dequantize(type)) return Error::unsupported("dequantize_row: no decoder for type {}", ggml_type_name(type));
  TRY(check_row(type, n, "dequantize_row"));
  // Block structs hold f16/f32 scales: a row at an odd address (a file whose alignment
  // is 1, say) is decoded from an aligned copy instead of through misaligned members.
  if (reinterpret_cast<uintptr_t>(src) % alignof(float) != 0 && ggml_block_size(type) > 1) {
    const size_t bytes = static_cast<size_t>(*ggml_bytes_for(type, n));
    std::vector<float> aligned((bytes + sizeof(float) - 1) / sizeof(float));
    std::memcpy(aligned.data(), src, bytes);
    return dequantize_row(type, aligned.data(), dst, n);
  }
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); break;
    case GgmlType::F16: {
      const auto* p = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, p + 2 * i, 2);
        dst[i] = f16_bits_to_f32(bits);
      }
      break;
    }
    case GgmlType::BF16: {
      const auto* p = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, p + 2 * i, 2);
        dst[i] = bf16_bits_to_f32(bits);
      }
      break;
    }
    case GgmlType::Q4_0: dequantize_row_q4_0(static_cast<const BlockQ4_0*>(src), dst, n); break;
    case GgmlType::Q4_1: dequantize_row_q4_1(static_cast<const BlockQ4_1*>(src), dst, n); break;
    case GgmlType::Q5_0: dequantize_row_q5_0(static_cast<const BlockQ5_0*>(src), dst, n); break;
    case GgmlType::Q5_1: dequantize_row_q5_1(static_cast<const BlockQ5_1*>(src), dst, n); break;
    case GgmlType::Q8_0: dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n); break;
    case GgmlType::Q2_K: dequantize_row_q2_k(static_cast<const BlockQ2_K*>(src), dst, n); break;
    case GgmlType::Q3_K: dequantize_row_q3_k(static_cast<const BlockQ3_K*>(src), dst, n); break;
    case GgmlType::Q4_K: dequantize_row_q4_k(static_cast<const BlockQ4_K*>(src), dst, n); break;
    case GgmlType::Q5_K: dequantize_row_q5_k(static_cast<const BlockQ5_K*>(src), dst, n); break;
    case GgmlType::Q6_K: dequantize_row_q6_k(static_cast<const BlockQ6_K*>(src), dst, n); break;
    case GgmlType::Q8_K: dequantize_row_q8_k(static_cast<const BlockQ8_K*>(src), dst, n); break;
    case GgmlType::IQ4_NL: dequantize_row_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, n); break;
    case GgmlType::IQ4_XS: dequantize_row_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, n); break;
    case GgmlType::TQ1_0: dequantize_row_tq1_0(static_cast<const BlockTQ1_0*>(src), dst, n); break;
    case GgmlType::TQ2_0: dequantize_row_tq2_0(static_cast<const BlockTQ2_0*>(src), dst, n); break;
    case GgmlType::IQ2_XXS: dequantize_row_iq2_xxs(static_cast<const BlockIQ2_XXS*>(src), dst, n); break;
    case GgmlType::IQ2_XS: dequantize_row_iq2_xs(static_cast<const BlockIQ2_XS*>(src), dst, n); break;
    case GgmlType::IQ2_S: dequantize_row_iq2_s(static_cast<const BlockIQ2_S*>(src), dst, n); break;
    case GgmlType::IQ3_XXS: dequantize_row_iq3_xxs(static_cast<const BlockIQ3_XXS*>(src), dst, n); break;
    case GgmlType::IQ3_S: dequantize_row_iq3_s(static_cast<const BlockIQ3_S*>(src), dst, n); break;
    case GgmlType::IQ1_S: dequantize_row_iq1_s(static_cast<const BlockIQ1_S*>(src), dst, n); break;
    case GgmlType::IQ1_M: dequantize_row_iq1_m(static_cast<const BlockIQ1_M*>(src), dst, n); break;
    default: break;
  }
  return {};
}

Status quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  if (!can_quantize(type)) return Error::unsupported("quantize_row: no encoder for type {}", ggml_type_name(type));
  TRY(check_row(type, n, "quantize_row"));
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); break;
    case GgmlType::F16: {
      auto* p = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t bits = f32_to_f16_bits(src[i]);
        std::memcpy(p + 2 * i, &bits, 2);
      }
      break;
    }
    case GgmlType::BF16: {
      auto* p = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t bits = f32_to_bf16_bits(src[i]);
        std::memcpy(p + 2 * i, &bits, 2);
      }
      break;
    }
    case GgmlType::Q4_0: quantize_row_q4_0(src, static_cast<BlockQ4_0*>(dst), n); break;
    case GgmlType::Q4_1: quantize_row_q4_1(src, static_cast<BlockQ4_1*>(dst), n); break;
    case GgmlType::Q5_0: quantize_row_q5_0(src, static_cast<BlockQ5_0*>(dst), n); break;
    case GgmlType::Q5_1: quantize_row_q5_1(src, static_cast<BlockQ5_1*>(dst), n); break;
    case GgmlType::Q8_0: quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), n); break;
    case GgmlType::Q2_K: quantize_row_q2_k(src, static_cast<BlockQ2_K*>(dst), n); break;
    case GgmlType::Q3_K: quantize_row_q3_k(src, static_cast<BlockQ3_K*>(dst), n); break;
    case GgmlType::Q4_K: quantize_row_q4_k(src, static_cast<BlockQ4_K*>(dst), n); break;
    case GgmlType::Q5_K: quantize_row_q5_k(src, static_cast<BlockQ5_K*>(dst), n); break;
    case GgmlType::Q6_K: quantize_row_q6_k(src, static_cast<BlockQ6_K*>(dst), n); break;
    case GgmlType::Q8_K: quantize_row_q8_k(src, static_cast<BlockQ8_K*>(dst), n); break;
    case GgmlType::IQ4_NL: quantize_row_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n); break;
    case GgmlType::IQ4_XS: quantize_row_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), n); break;
    case GgmlType::IQ3_S: detail::quantize_row_iq3_s(src, static_cast<BlockIQ3_S*>(dst), n, nullptr); break;
    case GgmlType::IQ3_XXS: detail::quantize_row_iq3_xxs(src, static_cast<BlockIQ3_XXS*>(dst), n, nullptr); break;
    case GgmlType::IQ2_S: detail::quantize_row_iq2_s(src, static_cast<BlockIQ2_S*>(dst), n, nullptr); break;
    case GgmlType::IQ2_XS: detail::quantize_row_iq2_xs(src, static_cast<BlockIQ2_XS*>(dst), n, nullptr); break;
    case GgmlType::IQ2_XXS: detail::quantize_row_iq2_xxs(src, static_cast<BlockIQ2_XXS*>(dst), n, nullptr); break;
    case GgmlType::IQ1_S: detail::quantize_row_iq1_s(src, static_cast<BlockIQ1_S*>(dst), n, nullptr); break;
    case GgmlType::IQ1_M: detail::quantize_row_iq1_m(src, static_cast<BlockIQ1_M*>(dst), n, nullptr); break;
    case GgmlType::TQ1_0: quantize_row_tq1_0(src, static_cast<BlockTQ1_0*>(dst), n); break;
    case GgmlType::TQ2_0: quantize_row_tq2_0(src, static_cast<BlockTQ2_0*>(dst), n); break;
    default: break;
  }
  return {};
}

bool takes_importance(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: case GgmlType::IQ3_S: case GgmlType::IQ3_XXS:
    case GgmlType::IQ2_S: case GgmlType::IQ2_XS: case GgmlType::IQ2_XXS: case GgmlType::IQ1_S: case GgmlType::IQ1_M:
      return true;
    default: return false;
  }
}

Status quantize_row_weighted(GgmlType type, const float* src, void* dst, int64_t n, const float* qw) {
  if (qw == nullptr || !takes_importance(type)) return quantize_row(type, src, dst, n);
  TRY(check_row(type, n, "quantize_row_weighted"));
  for (int64_t i = 0; i < n; ++i)
    if (!(qw[i] >= 0.0f) || !std::isfinite(qw[i]))
      return Error::invalid_argument("quantize_row_weighted: importance {} of element {} is not a finite value >= 0",
                                     qw[i], i);
  switch (type) {
    case GgmlType::Q4_0: detail::quantize_row_q4_0(src, static_cast<BlockQ4_0*>(dst), n, qw); break;
    case GgmlType::Q4_1: detail::quantize_row_q4_1(src, static_cast<BlockQ4_1*>(dst), n, qw); break;
    case GgmlType::Q5_0: detail::quantize_row_q5_0(src, static_cast<BlockQ5_0*>(dst), n, qw); break;
    case GgmlType::Q5_1: detail::quantize_row_q5_1(src, static_cast<BlockQ5_1*>(dst), n, qw); break;
    case GgmlType::Q2_K: detail::quantize_row_q2_k(src, static_cast<BlockQ2_K*>(dst), n, qw); break;
    case GgmlType::Q3_K: detail::quantize_row_q3_k(src, static_cast<BlockQ3_K*>(dst), n, qw); break;
    case GgmlType::Q4_K: detail::quantize_row_q4_k(src, static_cast<BlockQ4_K*>(dst), n, qw); break;
    case GgmlType::Q5_K: detail::quantize_row_q5_k(src, static_cast<BlockQ5_K*>(dst), n, qw); break;
    case GgmlType::Q6_K: detail::quantize_row_q6_k(src, static_cast<BlockQ6_K*>(dst), n, qw); break;
    case GgmlType::IQ4_NL: detail::quantize_row_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n, qw); break;
    case GgmlType::IQ4_XS: detail::quantize_row_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), n, qw); break;
    case GgmlType::IQ3_S: detail::quantize_row_iq3_s(src, static_cast<BlockIQ3_S*>(dst), n, qw); break;
    case GgmlType::IQ3_XXS: detail::quantize_row_iq3_xxs(src, static_cast<BlockIQ3_XXS*>(dst), n, qw); break;
    case GgmlType::IQ2_S: detail::quantize_row_iq2_s(src, static_cast<BlockIQ2_S*>(dst), n, qw); break;
    case GgmlType::IQ2_XS: detail::quantize_row_iq2_xs(src, static_cast<BlockIQ2_XS*>(dst), n, qw); break;
    case GgmlType::IQ2_XXS: detail::quantize_row_iq2_xxs(src, static_cast<BlockIQ2_XXS*>(dst), n, qw); break;
    case GgmlType::IQ1_S: detail::quantize_row_iq1_s(src, static_cast<BlockIQ1_S*>(dst), n, qw); break;
    case GgmlType::IQ1_M: detail::quantize_row_iq1_m(src, static_cast<BlockIQ1_M*>(dst), n, qw); break;
    default: break;
  }
  return {};
}

}  // namespace rlx::formats
