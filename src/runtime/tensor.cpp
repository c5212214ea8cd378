// TensorView / Tensor helpers and dtype conversions at the runtime boundary.
#include "rlx/runtime/tensor.h"

#include <cmath>

#include "rlx/base/half.h"

namespace rlx {

using ir::DType;

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorView::num_bytes() const { return ir::dtype_bytes(dtype, num_elements()).value_or(-1); }

std::string TensorView::type_string() const {
  std::string s = std::string(ir::dtype_name(dtype)) + "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  bytes_.assign(static_cast<size_t>(ir::dtype_bytes(dtype_, num_elements()).value_or(0)), 0);
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes)
    : dtype_(dtype), shape_(std::move(shape)), bytes_(std::move(bytes)) {}

Tensor Tensor::from_f32(std::vector<float> values, std::vector<int64_t> shape) {
  std::vector<uint8_t> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return Tensor(DType::F32, std::move(shape), std::move(bytes));
}

Tensor Tensor::copy_of(const TensorView& v) {
  const auto* p = static_cast<const uint8_t*>(v.data);
  return Tensor(v.dtype, std::vector<int64_t>(v.shape.begin(), v.shape.end()),
                std::vector<uint8_t>(p, p + v.num_bytes()));
}

int64_t Tensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

Expected<std::vector<float>> Tensor::to_f32() const {
  if (ir::is_packed(dtype_)) return Error::unsupported("to_f32: packed dtype {}", ir::dtype_name(dtype_));
  std::vector<float> out(static_cast<size_t>(num_elements()));
  convert_to_f32(dtype_, bytes_.data(), out.data(), num_elements());
  return out;
}

void convert_to_f32(DType from, const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    switch (from) {
      case DType::F32: std::memcpy(&dst[i], p + 4 * i, 4); break;
      case DType::F16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); dst[i] = f16_bits_to_f32(h); break; }
      case DType::BF16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); dst[i] = bf16_bits_to_f32(h); break; }
      case DType::F64: { double d; std::memcpy(&d, p + 8 * i, 8); dst[i] = static_cast<float>(d); break; }
      case DType::I8: dst[i] = static_cast<int8_t>(p[i]); break;
      case DType::U8: case DType::Bool: dst[i] = p[i]; break;
      case DType::I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); dst[i] = static_cast<float>(v); break; }
      case DType::I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); dst[i] = static_cast<float>(v); break; }
      default: dst[i] = 0; break;
    }
  }
}

void convert_from_f32(DType to, const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const float v = src[i];
    const double r = std::isfinite(v) ? std::nearbyint(static_cast<double>(v)) : 0.0;
    switch (to) {
      case DType::F32: std::memcpy(p + 4 * i, &v, 4); break;
      case DType::F16: { const uint16_t h = f32_to_f16_bits(v); std::memcpy(p + 2 * i, &h, 2); break; }
      case DType::BF16: { const uint16_t h = f32_to_bf16_bits(v); std::memcpy(p + 2 * i, &h, 2); break; }
      case DType::F64: { const double d = v; std::memcpy(p + 8 * i, &d, 8); break; }
      case DType::I8: p[i] = static_cast<uint8_t>(static_cast<int8_t>(std::fmax(-128.0, std::fmin(127.0, r)))); break;
      case DType::U8: p[i] = static_cast<uint8_t>(std::fmax(0.0, std::fmin(255.0, r))); break;
      case DType::Bool: p[i] = v != 0 ? 1 : 0; break;
      case DType::I32: {
        const auto w = static_cast<int32_t>(std::fmax(-2147483648.0, std::fmin(2147483647.0, r)));
        std::memcpy(p + 4 * i, &w, 4);
        break;
      }
      case DType::I64: {
        const auto w = static_cast<int64_t>(std::fmax(-9.2e18, std::fmin(9.2e18, r)));
        std::memcpy(p + 8 * i, &w, 8);
        break;
      }
      default: break;
    }
  }
}

}  // namespace rlx
