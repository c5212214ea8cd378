// Helpers shared by the CUDA test files: skipping without a device, deterministic random
// tensors (float and packed GGUF blocks), the relative L2 error the CPU-vs-CUDA
// comparisons use, and running one graph on a device (run_on, expect_match).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "rlx/base/half.h"
#include "rlx/formats/quant.h"
#include "rlx/rlx.h"

namespace rlx::cuda_test {

/// Skips the calling test when no CUDA device is available (CI has none).
#define REQUIRE_CUDA()                                                                      \
  do {                                                                                      \
    if (!::rlx::is_available(::rlx::Device::cuda())) GTEST_SKIP() << "no CUDA device: skipped"; \
  } while (0)

inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

/// A random f32 tensor of `shape`, values uniform in [lo, hi).
inline Tensor f32(std::vector<int64_t> shape, uint32_t seed, float lo = -1, float hi = 1) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return Tensor::from_f32(random_vec(static_cast<size_t>(n), seed, lo, hi), std::move(shape));
}

/// An i32 tensor of `shape` holding `vals`.
inline Tensor i32(std::vector<int64_t> shape, const std::vector<int32_t>& vals) {
  std::vector<uint8_t> bytes(vals.size() * 4);
  std::memcpy(bytes.data(), vals.data(), bytes.size());
  return Tensor(ir::DType::I32, std::move(shape), std::move(bytes));
}

/// A random f16 tensor of `shape`, values uniform in [lo, hi) rounded to f16.
inline Tensor random_f16(std::vector<int64_t> shape, uint32_t seed, float lo = -1, float hi = 1) {
  const Tensor f = f32(shape, seed, lo, hi);
  Tensor h(ir::DType::F16, std::move(shape));
  convert_from_f32(ir::DType::F16, f.as<float>().data(), h.mutable_data(), f.num_elements());
  return h;
}

/// Random weights in a packed block type: the tensor a param takes and the exact
/// dequantization of its blocks (what a float64 reference multiplies with).
struct PackedWeights {
  Tensor packed;
  std::vector<float> deq;
};

/// rows x cols values uniform in [-1, 1) from `seed`, quantized row by row to `t`
/// (f16, or a packed dtype whose block divides cols). Failures are reported to the
/// running test.
inline PackedWeights packed_weights(ir::DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> wf = random_vec(static_cast<size_t>(rows * cols), seed);
  const auto gt = formats::ggml_type_from_name(ir::dtype_name(t));
  const auto row_bytes = ir::dtype_bytes(t, cols);
  EXPECT_TRUE(gt.has_value() && row_bytes.has_value()) << ir::dtype_name(t) << " is not a packed type";
  if (!gt || !row_bytes) return {};
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * *row_bytes));
  std::vector<float> deq(wf.size());
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(formats::quantize_row(*gt, wf.data() + r * cols, bytes.data() + r * *row_bytes, cols).ok());
    EXPECT_TRUE(formats::dequantize_row(*gt, bytes.data() + r * *row_bytes, deq.data() + r * cols, cols).ok());
  }
  return PackedWeights{Tensor(t, {rows, cols}, std::move(bytes)), std::move(deq)};
}

/// The codebook i-quants and the ternary types (the decode GEMV's kernels_gemv_codebook.cu).
inline bool is_codebook_type(ir::DType t) {
  using ir::DType;
  for (DType c : {DType::IQ3_S, DType::IQ3_XXS, DType::IQ2_S, DType::IQ2_XS, DType::IQ2_XXS, DType::IQ1_S,
                  DType::IQ1_M, DType::TQ1_0, DType::TQ2_0})
    if (t == c) return true;
  return false;
}

/// x as the decode GEMV's 8-bit path sees it (GemvParams::x_int8): every 16 elements of
/// a row quantized to int8 with d = max|x| / 127 and dequantized again (x.size() a
/// multiple of 16, as the path's K is).
inline std::vector<float> x8_like_gemv(const std::vector<float>& x) {
  EXPECT_EQ(x.size() % 16, 0u) << "x8_like_gemv: not whole 16-element segments";
  std::vector<float> out(x.size());
  for (size_t s = 0; s + 16 <= x.size(); s += 16) {
    float amax = 0.0f;
    for (size_t i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[s + i]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f, d = amax / 127.0f;
    for (size_t i = 0; i < 16; ++i) out[s + i] = d * std::nearbyint(x[s + i] * id);
  }
  return out;
}

/// x rounded to llama.cpp's Q8_0 activations (its quantize_row_q8_0): per block of 32,
/// d = f16(max|x| / 127), x' = d * round-half-even(x * 127 / max|x|).
inline std::vector<float> q8_0_like_llama_cpp(const std::vector<float>& x) {
  EXPECT_EQ(x.size() % 32, 0u) << "q8_0_like_llama_cpp: not whole 32-element blocks";
  std::vector<float> out(x.size());
  for (size_t b = 0; b + 32 <= x.size(); b += 32) {
    float amax = 0.0f;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f, d = f16_bits_to_f32(f32_to_f16_bits(amax / 127.0f));
    for (size_t i = 0; i < 32; ++i) out[b + i] = d * std::nearbyint(x[b + i] * id);
  }
  return out;
}

/// x rounded to llama.cpp's Q8_K activations (quantize_row_q8_K, here through the CPU
/// backend's own formats::quantize_activation_q8_k): d * q per 256-value block.
inline std::vector<float> q8_k_like_llama_cpp(const std::vector<float>& x) {
  EXPECT_EQ(x.size() % 256, 0u) << "q8_k_like_llama_cpp: not whole 256-element blocks";
  std::vector<formats::BlockQ8_K> blocks(x.size() / 256);
  formats::quantize_activation_q8_k(x.data(), blocks.data(), static_cast<int64_t>(x.size()));
  std::vector<float> out(x.size());
  for (size_t b = 0; b < blocks.size(); ++b)
    for (size_t i = 0; i < 256; ++i) out[b * 256 + i] = blocks[b].d * static_cast<float>(blocks[b].qs[i]);
  return out;
}

/// True where a CUDA product of M rows over K-quant weights of type t takes x as Q8_K
/// blocks (launch_kqmma), with the backend's default options (int8_prefill): from
/// kKqMmaMinRows = 2 (one row is the GEMV's) up to kKqMmaMaxRows = 32.
inline bool cuda_takes_q8_k(ir::DType t, int64_t M, bool int8_x) {
  if (t != ir::DType::Q4_K && t != ir::DType::Q5_K && t != ir::DType::Q6_K) return false;
  (void)int8_x;  // (from two rows with the int8 products on, whatever the GEMV's x)
  return M >= 2 && M <= 32;
}

/// The x a CUDA product over weights of type t sees: llama.cpp's Q8_0 activations for
/// Q8_0 / Q4_0 weights (every path), its Q8_K ones for the K-quants' few-row products,
/// the GEMV's 16-element 8-bit segments for the other packed types it runs at
/// 1..kGemvX8MaxRows rows with int8_x, else x itself (float weights: the caller rounds to
/// the weights' type).
inline std::vector<float> x_as_cuda_sees_it(ir::DType t, const std::vector<float>& x, int64_t M, bool int8_x) {
  if (t == ir::DType::Q8_0 || t == ir::DType::Q4_0) return q8_0_like_llama_cpp(x);
  if (cuda_takes_q8_k(t, M, int8_x)) return q8_k_like_llama_cpp(x);
  if (int8_x && M <= 5 &&  // (the GEMV's rows, kGemvX8MaxRows; more take the few-row kernels or cuBLAS)
      (t == ir::DType::Q4_K || t == ir::DType::Q6_K || t == ir::DType::IQ4_XS || t == ir::DType::IQ4_NL))
    return x8_like_gemv(x);
  if (int8_x && M <= 8 && is_codebook_type(t))  // (the GEMV's rows, kMaxGemvM: no few-row prefill kernel)
    return x8_like_gemv(x);
  return x;
}

/// The graph y = x [M, K] . w[N, K]^T (input "x" f32, param "w" of type t, output "y").
inline Expected<ir::Graph> dequant_matmul_graph(ir::DType t, int64_t M, int64_t N, int64_t K) {
  ir::GraphBuilder b;
  auto x = b.input("x", ir::DType::F32, {M, K});
  b.output(b.dequant_matmul(x, b.param("w", t, {N, K})), "y");
  return b.build();
}

/// Float64 products of x [M, K] with the rows of w [N, K] -> [M, N].
inline std::vector<float> reference_product(const std::vector<float>& x, const std::vector<float>& w, int64_t M,
                                            int64_t N, int64_t K) {
  std::vector<float> ref(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(x[static_cast<size_t>(m * K + k)]) * w[static_cast<size_t>(n * K + k)];
      ref[static_cast<size_t>(m * N + n)] = static_cast<float>(s);
    }
  return ref;
}

/// silu(g) * u element by element, in double: the reference of a SwiGLU over the float64
/// products g and u.
inline std::vector<float> swiglu_reference(const std::vector<float>& g, const std::vector<float>& u) {
  std::vector<float> ref(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double gd = g[i];
    ref[i] = static_cast<float>(gd / (1.0 + std::exp(-gd)) * u[i]);
  }
  return ref;
}

/// ||a - b|| / ||b|| (||a - b|| when b is zero); NaN counts as a mismatch.
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    if (std::isnan(d)) return INFINITY;
    num += d * d;
    den += double(b[i]) * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

/// A graph's inputs and params, and its compile options (fusion and folding off, so
/// that each op reaches its own kernel).
struct Case {
  std::map<std::string, Tensor> inputs, params;
  compile::CompileOptions opt;
  Case() {
    opt.fusion.skip = true;
    opt.constant_folding = false;
  }
};

// Compiles `g` on `dev` (fusion passes off unless `fusion` is given: then they run and
// their report is stored there) and runs it once.
inline Expected<std::vector<Tensor>> run_graph(const Device& dev, const ir::Graph& g, const std::map<std::string, Tensor>& params,
                                               const std::map<std::string, Tensor>& inputs,
                                               compile::FusionReport* fusion = nullptr) {
  compile::CompileOptions opt;
  opt.fusion.skip = fusion == nullptr;
  opt.constant_folding = false;
  ASSIGN_OR_RETURN(Session s, Session::create(dev));
  ASSIGN_OR_RETURN(CompiledGraph cg, s.compile_with(g, opt));
  if (fusion != nullptr) *fusion = cg.fusion_report();
  for (const auto& [name, t] : params) TRY(cg.set_param_typed(name, t.bytes(), t.dtype()));
  std::vector<NamedTensorView> views;
  for (const auto& [name, t] : inputs) views.push_back({name, t.view()});
  return cg.run_typed(views);
}

/// Compiles `g` on `dev`, sets the params and runs it once on the inputs.
inline Expected<std::vector<Tensor>> run_on(const Device& dev, const ir::Graph& g, const Case& c) {
  ASSIGN_OR_RETURN(Session s, Session::create(dev));
  ASSIGN_OR_RETURN(CompiledGraph cg, s.compile_with(g, c.opt));
  for (const auto& [name, t] : c.params) TRY(cg.set_param_typed(name, t.bytes(), t.dtype()));
  std::vector<NamedTensorView> views;
  for (const auto& [name, t] : c.inputs) views.push_back({name, t.view()});
  return cg.run_typed(views);
}

/// Builds `b`, runs it on the CPU and on CUDA, and compares every output.
inline void expect_match(ir::GraphBuilder& b, const Case& c, double tol = 1e-5) {
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  auto cpu = run_on(Device::cpu(), *g, c);
  ASSERT_TRUE(cpu.has_value()) << cpu.error().to_string();
  auto gpu = run_on(Device::cuda(), *g, c);
  ASSERT_TRUE(gpu.has_value()) << gpu.error().to_string();
  ASSERT_EQ(cpu->size(), gpu->size());
  for (size_t i = 0; i < cpu->size(); ++i) {
    const Tensor& x = (*cpu)[i];
    const Tensor& y = (*gpu)[i];
    ASSERT_EQ(x.dtype(), y.dtype());
    ASSERT_EQ(x.shape(), y.shape());
    if (ir::is_float(x.dtype())) {
      auto fx = x.to_f32(), fy = y.to_f32();
      ASSERT_TRUE(fx && fy);
      const double e = rel_l2(*fy, *fx);
      EXPECT_LE(e, tol) << "output " << i << ": relative L2 error " << e;
    } else {
      EXPECT_EQ(x.bytes(), y.bytes()) << "output " << i << " (integer) differs";
    }
  }
}

}  // namespace rlx::cuda_test
