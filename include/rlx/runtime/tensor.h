// Tensors at the runtime boundary: `TensorView` (dtype + static shape + borrowed
// bytes) is how inputs go in; `Tensor` (owning) is how outputs come out. f32
// convenience helpers sit on top of these typed forms.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/ir/dtype.h"

namespace rlx {

/// Borrowed, read-only tensor data: `data` holds the row-major elements of `shape`
/// in `dtype` (packed dtypes: whole blocks along the last dim).
struct TensorView {
  ir::DType dtype = ir::DType::F32;
  std::span<const int64_t> shape;
  const void* data = nullptr;

  /// Element count (1 for a scalar).
  int64_t num_elements() const;
  /// Bytes of the payload (dtype-true; packed types count whole blocks).
  int64_t num_bytes() const;
  /// "f32[2, 3]".
  std::string type_string() const;

  static TensorView f32(std::span<const float> values, std::span<const int64_t> shape) {
    return {ir::DType::F32, shape, values.data()};
  }
};

/// A named input for `CompiledGraph::run`.
struct NamedTensorView {
  std::string_view name;
  TensorView view;
};

/// A named f32 input for the f32 convenience overloads.
struct NamedF32 {
  std::string_view name;
  std::span<const float> values;
  std::span<const int64_t> shape;
};

/// An owning tensor: dtype, shape and row-major bytes.
class Tensor {
 public:
  Tensor() = default;
  Tensor(ir::DType dtype, std::vector<int64_t> shape);  ///< zero-filled
  Tensor(ir::DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  static Tensor from_f32(std::vector<float> values, std::vector<int64_t> shape);
  static Tensor copy_of(const TensorView& v);

  ir::DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t num_elements() const;
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t>& mutable_bytes() { return bytes_; }
  const void* data() const { return bytes_.data(); }
  void* mutable_data() { return bytes_.data(); }
  TensorView view() const { return {dtype_, shape_, bytes_.data()}; }

  /// Typed element access when T matches the storage size (e.g. float for f32).
  template <typename T>
  std::span<const T> as() const {
    return {reinterpret_cast<const T*>(bytes_.data()), bytes_.size() / sizeof(T)};
  }
  /// The elements converted to f32 (f32/f16/bf16/f64/integers/bool); an error for packed types.
  Expected<std::vector<float>> to_f32() const;

 private:
  ir::DType dtype_ = ir::DType::F32;
  std::vector<int64_t> shape_;
  std::vector<uint8_t> bytes_;
};

/// Converts `n` elements of `from` (a non-packed dtype) at `src` to f32.
void convert_to_f32(ir::DType from, const void* src, float* dst, int64_t n);
/// Converts `n` f32 values to `to` (a non-packed dtype); integers round to nearest.
void convert_from_f32(ir::DType to, const float* src, void* dst, int64_t n);

}  // namespace rlx
