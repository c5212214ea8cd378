// The cases of the backend op tests (backend_ops_test.cpp): one small graph per case with
// its inputs, weights and initial handle contents, made with CaseMaker from fixed-seed
// data. Case families that live in their own files (backend_ops_spatial_test.cpp)
// include this header too.
#pragma once

#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "rlx/formats/quant.h"
#include "rlx/rlx.h"
#include "rt_util.h"

namespace rlx::backend_ops {

using ir::DType;
using ir::ValueId;

// One graph with its inputs, weights and initial handle contents.
struct OpCase {
  std::string name;
  ir::Graph graph;
  std::optional<Error> build_error;
  std::map<std::string, Tensor> inputs, params, handles;
  double tolerance = 0;  // 0: by the graph's float dtypes
  // On CUDA, when its documented arithmetic differs (0: as on every backend).
  double cuda_tolerance = 0;
};

inline uint32_t seed_of(const std::string& name) {  // FNV-1a: the same seeds on every platform
  uint32_t h = 2166136261u;
  for (char ch : name) h = (h ^ static_cast<uint8_t>(ch)) * 16777619u;
  return h;
}

// Uniform values in [lo, hi] stored as `dt`: floats rounded to the dtype, integers
// rounded to the nearest, bool nonzero.
inline Tensor random_tensor(DType dt, std::vector<int64_t> dims, uint32_t seed, float lo, float hi) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  const std::vector<float> values = rt_test::random_vec(static_cast<size_t>(n), seed, lo, hi);
  Tensor t(dt, std::move(dims));
  convert_from_f32(dt, values.data(), t.mutable_data(), n);
  return t;
}

template <typename T>
inline Tensor tensor_of(DType dt, std::vector<int64_t> dims, const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return Tensor(dt, std::move(dims), std::move(bytes));
}

// Random rows of `dt` (packed) blocks: rows x cols values in [-1, 1) quantized row by row.
inline Tensor packed_tensor(DType dt, int64_t rows, int64_t cols, uint32_t seed) {
  const auto type = formats::ggml_type_from_name(ir::dtype_name(dt));
  const int64_t row_bytes = ir::dtype_bytes(dt, cols).value_or(0);
  std::vector<float> values = random_tensor(DType::F32, {rows, cols}, seed, -1, 1).to_f32().value();
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * row_bytes));
  for (int64_t r = 0; r < rows; ++r) {
    const Status st = formats::quantize_row(*type, values.data() + r * cols, bytes.data() + r * row_bytes, cols);
    RLX_ASSERT(st.ok());
  }
  return Tensor(dt, {rows, cols}, std::move(bytes));
}

// x values on an 8-bit grid: q / 128 with q in [-127, 127] and +-127 in every run of 16,
// so that quantizing x to 8-bit activations (Q8_0, Q8_K, per-16 int8) loses nothing.
inline Tensor grid_tensor(std::vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> q(-127, 127);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = (i % 16 == 0 ? (rng() % 2 ? 127 : -127) : q(rng)) / 128.0f;
  return Tensor::from_f32(std::move(v), std::move(dims));
}

// Builds one case: boundary values with their data, the graph, outputs; finish() adds it.
class CaseMaker {
 public:
  CaseMaker(std::vector<OpCase>& cases, std::string name) : cases_(cases), seed_(seed_of(name)) {
    case_.name = std::move(name);
  }
  ValueId input(const std::string& name, Tensor t) {
    return boundary(&ir::GraphBuilder::input, name, std::move(t), case_.inputs);
  }
  ValueId input(const std::string& name, DType dt, std::vector<int64_t> dims, float lo = -1, float hi = 1) {
    return input(name, random_tensor(dt, std::move(dims), seed_++, lo, hi));
  }
  ValueId param(const std::string& name, Tensor t) {
    return boundary(&ir::GraphBuilder::param, name, std::move(t), case_.params);
  }
  ValueId param(const std::string& name, DType dt, std::vector<int64_t> dims, float lo = -1, float hi = 1) {
    return param(name, random_tensor(dt, std::move(dims), seed_++, lo, hi));
  }
  /// A handle with random initial contents.
  ValueId handle(const std::string& name, DType dt, std::vector<int64_t> dims) {
    return boundary(&ir::GraphBuilder::handle, name, random_tensor(dt, std::move(dims), seed_++, -1, 1), case_.handles);
  }
  uint32_t next_seed() { return seed_++; }
  void output(ValueId v) { b.output(v, fmt::format("out{}", n_outputs_++)); }
  void tolerance(double t) { case_.tolerance = t; }
  void cuda_tolerance(double t) { case_.cuda_tolerance = t; }
  void finish() {
    auto g = b.build();
    if (g)
      case_.graph = std::move(*g);
    else
      case_.build_error = g.error();
    cases_.push_back(std::move(case_));
  }

  ir::GraphBuilder b;

 private:
  using Declare = ValueId (ir::GraphBuilder::*)(const std::string&, DType, ir::Shape);
  // Declares boundary value `name` with t's type and keeps t as its data.
  ValueId boundary(Declare declare, const std::string& name, Tensor t, std::map<std::string, Tensor>& data) {
    const ValueId v = (b.*declare)(name, t.dtype(), ir::Shape::of(t.shape()));
    data[name] = std::move(t);
    return v;
  }

  std::vector<OpCase>& cases_;
  OpCase case_;
  uint32_t seed_;
  int n_outputs_ = 0;
};

/// conv, conv_transpose, group_norm and interpolate cases (backend_ops_spatial_test.cpp).
void spatial_cases(std::vector<OpCase>& cases);
void fused_linear_cases(std::vector<OpCase>& cases);

}  // namespace rlx::backend_ops
