// The CUDA decode path: the GEMV kernels that run linear layers at M <= 8 (float
// weights with bias/activation and SwiGLU epilogues against the CPU backend; packed
// weights at a long K against a float64 reference), and CUDA graph replay (a synthetic
// llama run with graphs and programmatic launch on gives exactly the logits of the
// step-by-step path with both off, across prefills of changing extent and decode steps
// at changing positions), and the decode-step fusions against the same run without them.
// Plus decode and prefill benchmarks (the prefill one next to a
// cuBLASLt GEMM probe at the model's shapes) that run only when RLX_CUDA_BENCH_MODEL
// names a GGUF file. Every test skips, saying so, when the build has no CUDA backend or
// the machine has no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <unistd.h>

#include "rlx/base/half.h"
#include "rlx/base/log.h"
#include "rlx/formats/quant.h"
#include "rlx/models/language_model.h"
#include "rlx/models/sampler.h"
#include "rlx/models/synth.h"
#include "rlx/rlx.h"
#include "cuda_test_util.h"
#ifdef RLX_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace rlx {
namespace {

using namespace cuda_test;

using ir::ActKind;
using ir::DType;
using ir::GraphBuilder;
using ir::OpKind;

/// Makes the registry create CUDA backends with graphs, programmatic launch, the
/// decode-step fusions and the GEMV's 8-bit x on or off (the default options again when
/// the scope ends).
class CudaGraphsMode {
 public:
  explicit CudaGraphsMode(bool graphs, bool pdl = true, bool fuse = true, bool int8_x = true) {
    set(graphs, pdl, fuse, int8_x);
  }
  ~CudaGraphsMode() {
#ifdef RLX_HAVE_CUDA
    const cuda_backend::CudaOptions d = cuda_backend::default_cuda_options();
    set(d.graphs, d.programmatic_launch, d.fuse_swiglu && d.fuse_rope_kv, d.gemv_int8_x);
#endif
  }

 private:
  static void set(bool graphs, bool pdl, bool fuse, bool int8_x) {
#ifdef RLX_HAVE_CUDA
    BackendRegistry::global().register_backend(
        DeviceKind::kCuda,
        [graphs, pdl, fuse, int8_x](const Device& device, const BackendOptions&) -> Expected<std::shared_ptr<Backend>> {
          cuda_backend::CudaOptions o = cuda_backend::default_cuda_options();
          o.graphs = graphs;
          o.programmatic_launch = pdl;
          o.fuse_swiglu = o.fuse_rope_kv = o.fuse_norm_gemv = o.group_gemvs = fuse;
          o.gemv_int8_x = int8_x;
          ASSIGN_OR_RETURN(std::shared_ptr<cuda_backend::CudaBackend> b, cuda_backend::CudaBackend::create(device.ordinal, o));
          return std::shared_ptr<Backend>(std::move(b));
        });
#else
    (void)graphs;
    (void)pdl;
    (void)fuse;
    (void)int8_x;
#endif
  }
};

// f32 / f16 / bf16 weights at decode sizes: plain, + bias + SiLU, and SwiGLU, vs the CPU
// backend.
TEST(CudaDecode, GemvFloatWeightsMatchCpu) {
  REQUIRE_CUDA();
  const int64_t N = 37, K = 520;
  for (DType wt : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t M : {1, 3}) {
      GraphBuilder b;
      auto x = b.input("x", DType::F32, {M, K});
      auto w = b.param("w", wt, {N, K});
      auto g = b.param("g", wt, {N, K});
      auto u = b.param("u", wt, {N, K});
      auto bias = b.param("bias", DType::F32, {N});
      b.output(wt == DType::F32 ? b.op(OpKind::FusedMatMulBiasAct, {x, w}, ir::FusedMatMulAttrs{}) : b.dequant_matmul(x, w),
               "plain");
      ir::FusedMatMulAttrs fa;
      fa.act = ActKind::Silu;
      fa.has_bias = true;
      b.output(b.op(OpKind::FusedMatMulBiasAct, {x, w, bias}, fa), "bias_silu");
      b.output(b.op(OpKind::FusedSwiGLU, {x, g, u}, ir::FusedSwiGLUAttrs{}), "swiglu");
      auto graph = b.build();
      ASSERT_TRUE(graph.has_value()) << graph.error().to_string();
      std::map<std::string, Tensor> params{{"w", f32({N, K}, 1)}, {"g", f32({N, K}, 2)}, {"u", f32({N, K}, 3)},
                                           {"bias", f32({N}, 4)}};
      std::map<std::string, Tensor> inputs{{"x", f32({M, K}, 5)}};
      auto cpu = run_graph(Device::cpu(), *graph, params, inputs);
      ASSERT_TRUE(cpu.has_value()) << cpu.error().to_string();
      auto gpu = run_graph(Device::cuda(), *graph, params, inputs);
      ASSERT_TRUE(gpu.has_value()) << gpu.error().to_string();
      // The GEMV rounds x to the weights' precision for every form (as cuBLAS sees f16 x);
      // the CPU does so for the plain product only, its fused forms keep x in f32: those
      // differ by that rounding (f16: 2^-11, bf16: 2^-8 relative per element).
      const double fused_tol = wt == DType::F32 ? 1e-5 : wt == DType::F16 ? 2e-3 : 1e-2;
      for (size_t i = 0; i < cpu->size(); ++i) {
        const double e = rel_l2(*(*gpu)[i].to_f32(), *(*cpu)[i].to_f32());
        EXPECT_LE(e, i == 0 ? 1e-5 : fused_tol)
            << ir::dtype_name(wt) << " M=" << M << " output " << i << ": relative L2 error " << e;
      }
    }
  }
}

// Packed weights at a long K and an odd N (several loads in flight per lane, a partial
// row pair at the end), against float64 math on the dequantized weights; with the 8-bit
// x path (M = 1, its types) against float64 math on x quantized as it does (tight) and
// on x itself (the quantization's own error), and with that path off (the chunks' f32
// dot). The codebook i-quants and ternary types also at 7 rows, which they keep on the
// GEMV (no few-row prefill kernel takes them).
TEST(CudaDecode, GemvPackedLongRowsMatchReference) {
  REQUIRE_CUDA();
  const int64_t N = 75, K = 4096;
  for (bool int8_x : {true, false}) {
    CudaGraphsMode mode(true, true, true, int8_x);
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::Q5_K, DType::IQ3_S, DType::IQ2_XXS,
                    DType::IQ2_S, DType::IQ1_M, DType::TQ1_0, DType::TQ2_0}) {
      const auto [packed, deq] = packed_weights(t, N, K, 80);
      const std::vector<int64_t> rows =
          is_codebook_type(t) ? std::vector<int64_t>{1, 2, 5, 7} : std::vector<int64_t>{1, 2, 5};
      for (int64_t M : rows) {  // (several rows: batched decode of that many streams)
        SCOPED_TRACE(testing::Message() << ir::dtype_name(t) << " M=" << M << " int8 x " << int8_x);
        auto graph = dequant_matmul_graph(t, M, N, K);
        ASSERT_TRUE(graph.has_value()) << graph.error().to_string();
        const Tensor xt = f32({M, K}, 81);
        auto out = run_graph(Device::cuda(), *graph, {{"w", packed}}, {{"x", xt}});
        ASSERT_TRUE(out.has_value()) << out.error().to_string();
        const auto xv = *xt.to_f32();
        const auto y = *(*out)[0].to_f32();
        const std::vector<float> seen = x_as_cuda_sees_it(t, xv, M, int8_x);
        const double e = rel_l2(y, reference_product(seen, deq, M, N, K));
        EXPECT_LE(e, 1e-5) << "relative L2 error " << e;
        if (seen != xv) {  // 8 bits per 16 or 32 elements: ~0.2 % on these uniform values
          const double e_f32 = rel_l2(y, reference_product(xv, deq, M, N, K));
          EXPECT_LE(e_f32, 1e-2) << "relative L2 error against f32 x " << e_f32;
          EXPECT_GT(e_f32, 1e-6) << "x was not quantized: the 8-bit path did not run";
        }
      }
    }
  }
}

// The 8-bit x path keeps a NaN or an infinity of x in the products it meets (f32 math
// would), instead of quantizing it away.
TEST(CudaDecode, GemvInt8XPropagatesNonFinite) {
  REQUIRE_CUDA();
  const int64_t N = 20, K = 512;
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    for (float bad : {NAN, INFINITY}) {
      SCOPED_TRACE(testing::Message() << ir::dtype_name(t) << " x holds " << bad);
      const auto [packed, deq] = packed_weights(t, N, K, 82);
      auto graph = dequant_matmul_graph(t, 1, N, K);
      ASSERT_TRUE(graph.has_value()) << graph.error().to_string();
      std::vector<float> xv = random_vec(static_cast<size_t>(K), 83);
      xv[300] = bad;
      auto out = run_graph(Device::cuda(), *graph, {{"w", packed}}, {{"x", Tensor::from_f32(xv, {1, K})}});
      ASSERT_TRUE(out.has_value()) << out.error().to_string();
      auto y = (*out)[0].to_f32();
      ASSERT_TRUE(y.has_value());
      for (float v : *y) EXPECT_FALSE(std::isfinite(v)) << "a finite output from x with " << bad;
    }
  }
}

// Sibling products over one x (as q/k/v and gate/up in a decode graph) are one launch
// group of fused_linear (fuse_linear) and run as one grouped GEMV launch: three outputs
// of different N (one not a multiple of a block's rows) for f16 and packed weights at
// M = 1 and 3, each against float64 math on the (dequantized) weights (f16: and on x
// rounded to f16, as the GEMV does).
TEST(CudaDecode, GroupedGemvMatchesReference) {
  REQUIRE_CUDA();
  const int64_t K = 512;
  const int64_t Ns[3] = {96, 24, 37};
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    std::vector<Tensor> ws;
    std::vector<std::vector<float>> deq;
    for (int i = 0; i < 3; ++i) {
      PackedWeights pw = packed_weights(t, Ns[i], K, 90 + static_cast<uint32_t>(i));
      ws.push_back(std::move(pw.packed));
      deq.push_back(std::move(pw.deq));
    }
    for (int64_t M : {1, 3}) {
      SCOPED_TRACE(testing::Message() << ir::dtype_name(t) << " M=" << M);
      GraphBuilder b;
      auto x = b.input("x", DType::F32, {M, K});
      for (int i = 0; i < 3; ++i)
        b.output(b.dequant_matmul(x, b.param(fmt::format("w{}", i), t, {Ns[i], K})), fmt::format("y{}", i));
      auto graph = b.build();
      ASSERT_TRUE(graph.has_value()) << graph.error().to_string();
      const Tensor xt = f32({M, K}, 95);
      compile::FusionReport report;
      auto out = run_graph(Device::cuda(), *graph, {{"w0", ws[0]}, {"w1", ws[1]}, {"w2", ws[2]}}, {{"x", xt}}, &report);
      ASSERT_TRUE(out.has_value()) << out.error().to_string();
      ASSERT_EQ(out->size(), 3u);
      EXPECT_EQ(report.count("linear_group"), 1) << report.to_string();
      auto xv = *xt.to_f32();
      if (t == DType::F16)
        for (float& e : xv) e = f16_bits_to_f32(f32_to_f16_bits(e));
      xv = x_as_cuda_sees_it(t, xv, M, true);  // the 8-bit x path is the default
      for (int i = 0; i < 3; ++i) {
        const std::vector<float> ref = reference_product(xv, deq[static_cast<size_t>(i)], M, Ns[i], K);
        const double e = rel_l2(*(*out)[static_cast<size_t>(i)].to_f32(), ref);
        EXPECT_LE(e, 1e-5) << "output " << i << ": relative L2 error " << e;
      }
    }
  }
}

// A one-row RMS norm (of x, or of a residual sum x + res) read only by decode products
// is computed in their prologue (fused_linear's norm, made by fuse_linear): a single and
// a grouped product over f16 and packed weights (Q4_K: the third product over Q6_K, a
// launch of its own, as attn_v in a Q4_K_M file), gamma in f32 and f16, against float64
// math on the norm computed as the norm kernel does; the residual sum (an output) is
// x + res exactly; the fusion report shows every product took the norm.
TEST(CudaDecode, NormPrologueGemvMatchesReference) {
  REQUIRE_CUDA();
  const int64_t K = 512;
  const int64_t Ns[3] = {96, 24, 37};
  const float eps = 1e-5f;
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_K}) {
    std::vector<Tensor> ws;
    std::vector<std::vector<float>> deq;
    for (int i = 0; i < 3; ++i) {
      PackedWeights pw = packed_weights(t == DType::Q4_K && i == 2 ? DType::Q6_K : t, Ns[i], K, 100 + static_cast<uint32_t>(i));
      ws.push_back(std::move(pw.packed));
      deq.push_back(std::move(pw.deq));
    }
    for (bool residual : {false, true})
      for (DType g_dt : {DType::F32, DType::F16})
        for (int parts : {1, 3}) {
          SCOPED_TRACE(testing::Message() << ir::dtype_name(t) << (residual ? " residual" : " plain") << " gamma "
                                          << ir::dtype_name(g_dt) << " parts " << parts);
          GraphBuilder b;
          auto x = b.input("x", DType::F32, {1, K});
          auto r = b.input("r", DType::F32, {1, K});
          auto gamma = b.param("g", g_dt, {K});
          ir::ValueId n = ir::kNoValue;
          if (residual) {
            auto sum = b.add(x, r);
            b.output(sum, "sum");
            n = b.rms_norm(sum, gamma, eps);
          } else {
            n = b.rms_norm(x, gamma, eps);
          }
          for (int i = 0; i < parts; ++i)
            b.output(b.dequant_matmul(n, b.param(fmt::format("w{}", i), ws[static_cast<size_t>(i)].dtype(), {Ns[i], K})),
                     fmt::format("y{}", i));
          if (!residual) b.output(b.add(x, r), "unused");  // keeps input r
          auto graph = b.build();
          ASSERT_TRUE(graph.has_value()) << graph.error().to_string();
          std::vector<float> gv = random_vec(static_cast<size_t>(K), 104, 0.5f, 1.5f);
          Tensor gt = Tensor::from_f32(gv, {K});
          if (g_dt == DType::F16) {
            std::vector<uint8_t> bytes(gv.size() * 2);
            for (size_t e = 0; e < gv.size(); ++e) {
              const uint16_t hb = f32_to_f16_bits(gv[e]);
              std::memcpy(bytes.data() + 2 * e, &hb, 2);
              gv[e] = f16_bits_to_f32(hb);
            }
            gt = Tensor(DType::F16, {K}, std::move(bytes));
          }
          std::map<std::string, Tensor> params{{"g", gt}};
          for (int i = 0; i < parts; ++i) params[fmt::format("w{}", i)] = ws[static_cast<size_t>(i)];
          const Tensor xt = f32({1, K}, 105, -2, 2), rt = f32({1, K}, 106);
          compile::FusionReport report;
          auto out = run_graph(Device::cuda(), *graph, params, {{"x", xt}, {"r", rt}}, &report);
          ASSERT_TRUE(out.has_value()) << out.error().to_string();
          EXPECT_EQ(report.count("linear_norm"), parts) << "the norm was not moved into the products:\n"
                                                       << report.to_string();
          // The norm as norm_kernel computes it: the sum in f32, squares summed in double.
          const std::vector<float> xv = *xt.to_f32(), rv = *rt.to_f32();
          std::vector<float> sv(static_cast<size_t>(K)), nv(static_cast<size_t>(K));
          double ss = 0;
          for (size_t e = 0; e < sv.size(); ++e) {
            sv[e] = residual ? xv[e] + rv[e] : xv[e];
            ss += static_cast<double>(sv[e]) * sv[e];
          }
          const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(K) + eps));
          for (size_t e = 0; e < nv.size(); ++e) nv[e] = sv[e] * scale * gv[e];
          if (t == DType::F16)
            for (float& e : nv) e = f16_bits_to_f32(f32_to_f16_bits(e));
          else
            nv = x_as_cuda_sees_it(t, nv, 1, true);  // the 8-bit x path (default)
          size_t at = 0;
          if (residual) {
            const std::vector<float> got = *(*out)[at++].to_f32();
            ASSERT_EQ(got.size(), sv.size());
            EXPECT_EQ(0, std::memcmp(got.data(), sv.data(), sv.size() * 4)) << "the residual sum differs from x + res";
          }
          for (int i = 0; i < parts; ++i) {
            const std::vector<float> ref = reference_product(nv, deq[static_cast<size_t>(i)], 1, Ns[i], K);
            const double e = rel_l2(*(*out)[at++].to_f32(), ref);
            EXPECT_LE(e, 1e-5) << "output " << i << ": relative L2 error " << e;
          }
        }
  }
}

struct DecodeTrace {
  std::vector<std::vector<float>> logits;  // one entry per forward call
};

// Prefills of changing length (so extents repeat and get captured) and decode steps at
// changing positions, with different tokens each step.
Expected<DecodeTrace> run_trace(const std::string& path, const Device& dev) {
  models::LoadOptions lo;
  lo.device = dev;
  lo.ctx = 64;
  ASSIGN_OR_RETURN(std::unique_ptr<models::LanguageModel> m, models::LanguageModel::load(path, lo));
  DecodeTrace t;
  const int64_t vocab = m->config().n_vocab;
  for (int pass = 0; pass < 3; ++pass) {
    m->reset();
    const int n_prompt = pass == 1 ? 3 : 5;
    std::vector<int32_t> prompt;
    for (int i = 0; i < n_prompt; ++i) prompt.push_back(static_cast<int32_t>((7 * i + 3 + pass) % vocab));
    ASSIGN_OR_RETURN(std::vector<float> l, m->forward(prompt, false));
    t.logits.push_back(std::move(l));
    for (int s = 0; s < 8; ++s) {
      const int32_t tok = static_cast<int32_t>((11 * s + 5 * pass + 1) % vocab);
      ASSIGN_OR_RETURN(std::vector<float> d, m->forward(std::span<const int32_t>(&tok, 1), false));
      t.logits.push_back(std::move(d));
    }
  }
  return t;
}

/// A synthetic llama of `type` (rlx synth defaults) written to a temporary file named
/// after `tag`; the caller removes it.
std::string write_synth_model(const char* type, const char* tag) {
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("rlx_cuda_{}_{}_{}.gguf", tag, type, ::getpid())).string();
  models::SynthOptions so;
  so.type = type;
  const Status st = models::write_synthetic_gguf(so, path);
  EXPECT_TRUE(st.ok()) << path << ": " << st.error().to_string();
  return path;
}

// The KV cache stays on the device: the prefill and decode executables bind one device
// storage, so a step moves only its inputs in and its outputs out (counted by the
// executable), never the cache, also when the model switches between the two.
TEST(CudaDecode, KvCacheStaysOnTheDeviceAcrossVariants) {
  REQUIRE_CUDA();
  const std::string path = write_synth_model("f32", "state");
  models::LoadOptions lo;
  lo.device = Device::cuda();
  lo.ctx = 64;
  lo.compile_cache = false;
  auto m = models::LanguageModel::load(path, lo);
  ASSERT_TRUE(m) << m.error().to_string();
  const int64_t vocab = (*m)->config().n_vocab;
  const models::ModelConfig& c = (*m)->config();
  const int64_t kv_bytes = 2 * c.n_layer * lo.ctx * c.n_head_kv * c.head_dim * 4;
  std::vector<int32_t> prompt = {1, 5, 9, 13, 17};
  ASSERT_TRUE((*m)->forward(prompt, false));
  CompiledGraph* prefill = (*m)->last_executable();
  const int32_t next = 3;
  ASSERT_TRUE((*m)->forward(std::span<const int32_t>(&next, 1), false));  // first decode step (compiles)
  CompiledGraph* decode = (*m)->last_executable();
  ASSERT_NE(prefill, decode);
  for (int round = 0; round < 2; ++round) {
    const TransferStats d0 = decode->transfer_stats();
    ASSERT_TRUE((*m)->forward(std::span<const int32_t>(&next, 1), false));
    const TransferStats d1 = decode->transfer_stats();
    EXPECT_EQ(d1.runs - d0.runs, 1);
    EXPECT_LE(d1.host_to_device - d0.host_to_device, 64) << "a decode step moved more than its token and position";
    EXPECT_LE(d1.device_to_host - d0.device_to_host, vocab * 4 + 64) << "more than the logits came back";
    const TransferStats p0 = prefill->transfer_stats();
    ASSERT_TRUE((*m)->forward(prompt, false));  // back to the prefill executable, and on
    const TransferStats p1 = prefill->transfer_stats();
    EXPECT_LT(p1.host_to_device - p0.host_to_device, kv_bytes / 8) << "the KV cache went through the host";
    EXPECT_LT(p1.device_to_host - p0.device_to_host, kv_bytes / 8) << "the KV cache went through the host";
  }
  auto a = prefill->handle_storage(), b = decode->handle_storage();
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.get(), b[i].second.get()) << a[i].first;
  std::filesystem::remove(path);
}

TEST(CudaGraphs, ReplayMatchesStepByStepAcrossDecodeSteps) {
  REQUIRE_CUDA();
  for (const char* type : {"f32", "f16", "q8_0", "q4_k_m"}) {
    SCOPED_TRACE(type);
    const std::string path = write_synth_model(type, "graph");
    Expected<DecodeTrace> direct = Error::internal("not run"), graphs = Error::internal("not run");
    {
      CudaGraphsMode off(false, false);  // step by step, each kernel after the last has finished
      direct = run_trace(path, Device::cuda());
    }
    graphs = run_trace(path, Device::cuda());  // defaults: graphs and programmatic launch
    ASSERT_TRUE(direct.has_value()) << direct.error().to_string();
    ASSERT_TRUE(graphs.has_value()) << graphs.error().to_string();
    ASSERT_EQ(direct->logits.size(), graphs->logits.size());
    for (size_t i = 0; i < direct->logits.size(); ++i) {
      ASSERT_EQ(direct->logits[i].size(), graphs->logits[i].size());
      EXPECT_EQ(0, std::memcmp(direct->logits[i].data(), graphs->logits[i].data(), direct->logits[i].size() * 4))
          << "call " << i << ": graph replay differs from the step-by-step run (rel L2 "
          << rel_l2(graphs->logits[i], direct->logits[i]) << ")";
    }
    if (std::string(type) == "f32") {  // and both match the CPU backend
      auto cpu = run_trace(path, Device::cpu());
      ASSERT_TRUE(cpu.has_value()) << cpu.error().to_string();
      for (size_t i = 0; i < cpu->logits.size(); ++i) {
        const double e = rel_l2(graphs->logits[i], cpu->logits[i]);
        EXPECT_LE(e, 1e-4) << "call " << i << ": CUDA vs CPU relative L2 error " << e;
      }
    }
    std::filesystem::remove(path);
  }
}

// The decode fusions (fused_linear: the norm prologue, SwiGLU, residual, rope and
// KV-cache epilogues, q/k/v in one launch) against the same model run with them off, across prefills of changing extent (M = 3, 5: the GEMV path) and
// decode steps; both runs step by step so that only the fusions differ, and the step
// lists must show the fusions applied (and not when off). (The default mode,
// fusions on, is checked against the CPU backend by ReplayMatchesStepByStepAcrossDecodeSteps.)
TEST(CudaDecode, FusedStepsMatchUnfused) {
  REQUIRE_CUDA();
  // (Not q4_k_m: this small model's rows of 64 are no multiple of 256, so its q4_k_m is
  // llama-quantize's fallbacks, Q5_0 and Q8_0, and the fused GEMV has no Q5_0 form.)
  for (const char* type : {"f32", "f16", "q8_0", "q4_0"}) {
    SCOPED_TRACE(type);
    const std::string path = write_synth_model(type, "fuse");
    Expected<DecodeTrace> fused = Error::internal("not run"), plain = Error::internal("not run");
    // The executables' step lists (RLX_LOG=debug output) show whether the fusions applied.
    const LogLevel level = log_level();
    set_log_level(LogLevel::kDebug);
    std::string plain_steps, fused_steps;
    {
      CudaGraphsMode off(false, false, false);
      testing::internal::CaptureStderr();
      plain = run_trace(path, Device::cuda());
      plain_steps = testing::internal::GetCapturedStderr();
    }
    {
      CudaGraphsMode on(false, true, true);  // (programmatic launch on: the prologues' early reads)
      testing::internal::CaptureStderr();
      fused = run_trace(path, Device::cuda());
      fused_steps = testing::internal::GetCapturedStderr();
    }
    set_log_level(level);
    ASSERT_TRUE(plain.has_value()) << plain.error().to_string();
    ASSERT_TRUE(fused.has_value()) << fused.error().to_string();
    // A step's description names its node ("%12 (fused_linear 'blk.0.attn.q')"), a launch
    // group's joins its members' with " + ".
    auto step_lines_with = [](const std::string& steps, std::initializer_list<const char*> parts) {
      int n = 0;
      std::istringstream in(steps);
      for (std::string line; std::getline(in, line);) {
        bool all = line.find("cuda step") != std::string::npos;
        for (const char* p : parts) all = all && line.find(p) != std::string::npos;
        n += all;
      }
      return n;
    };
    // q, k and v of each layer in one launch, rope and the KV-cache rows in its epilogue
    // (no rope step left in the decode executable's list: the prefills' ropes of several
    // rows go to a rope_kv launch, "(rope) + ").
    for (const char* layer : {"blk.0", "blk.1"}) {
      const std::string q = fmt::format("(fused_linear '{}.attn.q') + ", layer);
      EXPECT_GE(step_lines_with(fused_steps, {q.c_str(), ".attn.k')"}), 1) << layer << ":\n" << fused_steps;
      // the SwiGLU with the ffn norm in its prologue, the residual adds in o and down
      for (const char* name : {"ffn.swiglu", "attn.o')", "ffn.down')"}) {
        const std::string want = fmt::format("(fused_linear '{}.{}", layer, name);
        EXPECT_GE(step_lines_with(fused_steps, {want.c_str()}), 1) << want << " is not a fused_linear:\n" << fused_steps;
      }
    }
    EXPECT_EQ(step_lines_with(fused_steps, {"(rope)"}), step_lines_with(fused_steps, {"(rope) + "}))
        << "a rope step of its own:\n" << fused_steps;
    EXPECT_EQ(step_lines_with(plain_steps, {"fused_linear"}), 0) << plain_steps;
    EXPECT_GE(step_lines_with(plain_steps, {"(rms_norm"}), 1) << plain_steps;
    ASSERT_EQ(plain->logits.size(), fused->logits.size());
    double worst = 0;
    for (size_t i = 0; i < plain->logits.size(); ++i) {
      ASSERT_EQ(plain->logits[i].size(), fused->logits[i].size());
      const double e = rel_l2(fused->logits[i], plain->logits[i]);
      worst = std::max(worst, e);
      EXPECT_LE(e, 1e-6) << "call " << i << ": fused decode steps differ from unfused (relative L2 " << e << ")";
    }
    std::printf("[ fused vs unfused ] %s: worst relative L2 %.3g over %zu calls\n", type, worst, plain->logits.size());
    std::filesystem::remove(path);
  }
}

/// Comma-separated integers from the environment variable `name` (else `def`).
// RLX_CUDA_BENCH_DEVICE: the device the benchmarks load the model on (default cuda:0; a
// tensor-parallel group such as cuda:0,1).
Expected<Device> bench_device() {
  const char* d = std::getenv("RLX_CUDA_BENCH_DEVICE");
  if (d == nullptr) return Device::cuda();
  return Device::parse(d);
}

std::vector<int64_t> env_list(const char* name, const char* def) {
  const char* c = std::getenv(name);
  std::stringstream ss(c ? c : def);
  std::vector<int64_t> v;
  for (std::string item; std::getline(ss, item, ',');) v.push_back(std::stoll(item));
  return v;
}

// Decode speed of a real-sized model (not a test: it runs only when RLX_CUDA_BENCH_MODEL
// names a GGUF file). For each context in RLX_CUDA_BENCH_CTX (default "128,2048"):
// prefill that many tokens, warm the decode executable, time RLX_CUDA_BENCH_STEPS
// (default 64) decode steps through LanguageModel::forward (logits copied to the host
// every step, as a generation loop sees them). Prints one line per context.
TEST(CudaBench, Decode) {
  const char* model = std::getenv("RLX_CUDA_BENCH_MODEL");
  if (model == nullptr) GTEST_SKIP() << "RLX_CUDA_BENCH_MODEL is not set: benchmark skipped";
  REQUIRE_CUDA();
  const std::vector<int64_t> contexts = env_list("RLX_CUDA_BENCH_CTX", "128,2048");
  const char* st = std::getenv("RLX_CUDA_BENCH_STEPS");
  const int steps = st ? std::atoi(st) : 64;
  int64_t max_ctx = 0;
  for (int64_t c : contexts) max_ctx = std::max(max_ctx, c);
  models::LoadOptions lo;
  auto device = bench_device();
  ASSERT_TRUE(device.has_value()) << "RLX_CUDA_BENCH_DEVICE: " << device.error().to_string();
  lo.device = *device;
  lo.ctx = max_ctx + steps + 8;
  auto m = models::LanguageModel::load(model, lo);
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  const int64_t vocab = (*m)->config().n_vocab;
  for (int64_t ctx : contexts) {
    (*m)->reset();
    std::vector<int32_t> prompt(static_cast<size_t>(ctx));
    for (int64_t i = 0; i < ctx; ++i) prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % vocab);
    auto r = (*m)->forward(prompt, false);
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    int32_t next = 1;
    for (int w = 0; w < 3; ++w) {  // the first run is step by step, the second captures
      r = (*m)->forward(std::span<const int32_t>(&next, 1), false);
      ASSERT_TRUE(r.has_value()) << r.error().to_string();
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      r = (*m)->forward(std::span<const int32_t>(&next, 1), false);
      ASSERT_TRUE(r.has_value()) << r.error().to_string();
      next = static_cast<int32_t>((next * 31 + 7) % vocab);
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const char* graphs =
        std::getenv("RLX_CUDA_GRAPHS") && std::string(std::getenv("RLX_CUDA_GRAPHS")) == "0" ? "off" : "on";
    std::printf("decode ctx %lld on %s: %.1f tok/s (%.3f ms/token, %d steps, graphs %s)\n", static_cast<long long>(ctx),
                lo.device.to_string().c_str(), steps * 1000.0 / ms, ms / steps, steps, graphs);
    if ((*m)->last_executable() != nullptr)
      std::printf("  decode executable: %s\n", (*m)->last_executable()->executable().describe().c_str());
    // Greedy generation as `rlx run --temp 0` runs it: the argmax on the device, one
    // token back per step (each step feeds the token it got).
    (*m)->reset();
    ASSERT_TRUE((*m)->forward(prompt, false).has_value());
    Expected<int32_t> tok = (*m)->forward_greedy(std::span<const int32_t>(&next, 1));
    for (int w = 0; w < 2 && tok.has_value(); ++w) tok = (*m)->forward_greedy(std::span<const int32_t>(&*tok, 1));
    ASSERT_TRUE(tok.has_value()) << tok.error().to_string();
    const auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      tok = (*m)->forward_greedy(std::span<const int32_t>(&*tok, 1));
      ASSERT_TRUE(tok.has_value()) << tok.error().to_string();
    }
    const double gms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    std::printf("decode ctx %lld: %.1f tok/s (%.3f ms/token, %d steps, graphs %s, greedy token on the device)\n",
                static_cast<long long>(ctx), steps * 1000.0 / gms, gms / steps, steps, graphs);
    // Sampling (temperature 0.8, top-k 40, top-p 0.95): the `sample` op on the device
    // with the sampler's draws, then the logits copied back to the host sampler.
    models::SamplingOptions so;
    so.temperature = 0.8f;
    so.top_k = 40;
    so.top_p = 0.95f;
    for (const bool on_device : {true, false}) {
      models::Sampler sampler(so);
      std::vector<int32_t> history;
      auto step = [&](int32_t in) -> Expected<int32_t> {
        if (on_device) return (*m)->forward_sample(std::span<const int32_t>(&in, 1), so.filter(), sampler.next_draw());
        ASSIGN_OR_RETURN(std::vector<float> l, (*m)->forward(std::span<const int32_t>(&in, 1), false));
        return sampler.sample(l, history);
      };
      (*m)->reset();
      ASSERT_TRUE((*m)->forward(prompt, false).has_value());
      Expected<int32_t> s = step(next);
      for (int w = 0; w < 2 && s.has_value(); ++w) s = step(*s);
      ASSERT_TRUE(s.has_value()) << s.error().to_string();
      const auto t2 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) {
        s = step(*s);
        ASSERT_TRUE(s.has_value()) << s.error().to_string();
      }
      const double sms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t2).count();
      std::printf("decode ctx %lld: %.1f tok/s (%.3f ms/token, %d steps, graphs %s, sampled %s)\n",
                  static_cast<long long>(ctx), steps * 1000.0 / sms, sms / steps, steps, graphs,
                  on_device ? "on the device (sample op)" : "on the host (logits copied)");
    }
  }
}

// Greedy decoding with the argmax on the device (LanguageModel::forward_greedy, one token
// copied back) picks, step by step, the host argmax of the same model's CUDA logits.
TEST(CudaDecode, GreedyTokenOnDeviceEqualsHostArgmax) {
  REQUIRE_CUDA();
  for (const char* type : {"f32", "q4_k_m"}) {
    SCOPED_TRACE(type);
    const std::string path = write_synth_model(type, "greedy");
    models::LoadOptions lo;
    lo.device = Device::cuda();
    lo.ctx = 64;
    lo.max_chunk = 8;  // a 13-token prompt in two chunks
    auto a = models::LanguageModel::load(path, lo);
    auto b = models::LanguageModel::load(path, lo);
    ASSERT_TRUE(a && b);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 13; ++i) prompt.push_back(1 + (i * 37) % 200);
    auto logits = (*a)->forward(prompt, false);
    auto picked = (*b)->forward_greedy(prompt);
    ASSERT_TRUE(logits && picked) << (logits ? picked.error().to_string() : logits.error().to_string());
    for (int step = 0; step < 12; ++step) {
      const int32_t host = models::argmax(*logits);
      ASSERT_EQ(*picked, host) << "step " << step;
      logits = (*a)->forward(std::span<const int32_t>(&host, 1), false);
      picked = (*b)->forward_greedy(std::span<const int32_t>(&host, 1));
      ASSERT_TRUE(logits && picked);
    }
    std::filesystem::remove(path);
  }
}

// Batched decode on the device (what `rlx bench --batch` and a server's many streams
// run): four streams of different lengths step together through CUDA graphs; each
// stream's logits match the same stream run alone, and the argmax taken on the device
// (forward_batch_greedy) is the host argmax of the batched logits; then runs over fewer
// of the streams.
TEST(CudaDecode, BatchedStreamsMatchSeparateRuns) {
  REQUIRE_CUDA();
  for (const char* type : {"f32", "q4_k_m"}) {
    SCOPED_TRACE(type);
    const std::string path = write_synth_model(type, "batched");
    models::LoadOptions lo;
    lo.device = Device::cuda();
    lo.ctx = 64;
    lo.compile_cache = false;
    std::vector<std::unique_ptr<models::LanguageModel>> alone;  // one model per stream, fed the same tokens
    for (int b = 0; b < 4; ++b) {
      auto m = models::LanguageModel::load(path, lo);
      ASSERT_TRUE(m) << m.error().to_string();
      alone.push_back(std::move(*m));
    }
    lo.batch = 4;
    auto logits = models::LanguageModel::load(path, lo);
    auto greedy = models::LanguageModel::load(path, lo);
    ASSERT_TRUE(logits && greedy);
    std::vector<std::vector<int32_t>> in(4);
    for (size_t b = 0; b < 4; ++b)
      for (size_t i = 0; i < 3 + 4 * b; ++i) in[b].push_back(static_cast<int32_t>(1 + (i * 37 + b * 11) % 200));
    // (packed weights: the products quantize x to 8 bits, and the batched run's row
    // count picks other kernels than a lone stream's)
    const double bound = std::string(type) == "f32" ? 1e-4 : 2e-2;
    for (int step = 0; step < 6; ++step) {  // the third and later decode steps replay a captured graph
      // The prefill and decode executables' steps (RLX_LOG=debug, built at their first
      // runs): each layer's ropes and its writes into the stacked caches are one rope_kv
      // launch.
      const LogLevel level = log_level();
      if (step == 0) {
        set_log_level(LogLevel::kDebug);
        testing::internal::CaptureStderr();
      }
      auto l = (*logits)->forward_batch(in, false);
      if (step == 1) {
        set_log_level(level);
        std::istringstream steps(testing::internal::GetCapturedStderr());
        int ropes = 0, fused = 0;
        for (std::string line; std::getline(steps, line);) {
          if (line.find("cuda step") == std::string::npos || line.find("(rope)") == std::string::npos) continue;
          ++ropes;
          fused += line.find("(rope) + ") != std::string::npos && line.find("(update_slice)") != std::string::npos;
        }
        EXPECT_GE(fused, 2) << "no rope_kv launch over the stacked caches";
        EXPECT_EQ(ropes, fused) << "a rope step of its own in the batched decode executable";
      }
      auto g = (*greedy)->forward_batch_greedy(in);
      ASSERT_TRUE(l && g) << (l ? g.error().to_string() : l.error().to_string());
      for (size_t b = 0; b < 4; ++b) {
        auto one = alone[b]->forward(in[b], false);
        ASSERT_TRUE(one) << one.error().to_string();
        EXPECT_LT(rel_l2((*l)[b], *one), bound) << "step " << step << ", stream " << b;
        EXPECT_EQ((*g)[b], models::argmax((*l)[b])) << "step " << step << ", stream " << b;
        in[b] = {(*g)[b]};
      }
    }
    // Fewer streams: runs over the first sequence alone (an executable of its own over
    // the front of the stacked caches), then over the first two (the bucket of four)
    // leave the idle streams alone; a last run over all four finds those where they were.
    for (int step = 0; step < 7; ++step) {
      const size_t active = step < 3 ? 1 : step < 6 ? 2 : 4;
      const int64_t covered = active == 1 ? 1 : 4;
      std::vector<std::vector<int32_t>> some(4);
      for (size_t b = 0; b < active; ++b) some[b] = in[b];
      auto l = (*logits)->forward_batch(some, false);
      auto g = (*greedy)->forward_batch_greedy(some);
      ASSERT_TRUE(l && g) << (l ? g.error().to_string() : l.error().to_string());
      EXPECT_EQ((*logits)->last_run_sequences(), covered) << "step " << step;
      EXPECT_EQ((*greedy)->last_run_sequences(), covered) << "step " << step;
      for (size_t b = 0; b < 4; ++b) {
        if (b >= active) {
          EXPECT_TRUE((*l)[b].empty());
          EXPECT_EQ((*g)[b], models::kNoBatchToken);
          continue;
        }
        auto one = alone[b]->forward(in[b], false);
        ASSERT_TRUE(one) << one.error().to_string();
        EXPECT_LT(rel_l2((*l)[b], *one), bound) << "fewer streams, step " << step << ", stream " << b;
        EXPECT_EQ((*g)[b], models::argmax((*l)[b])) << "fewer streams, step " << step << ", stream " << b;
        in[b] = {(*g)[b]};
      }
    }
    std::filesystem::remove(path);
  }
}

// A server's mixed steps on the device (one token for each decoding stream, a chunk for
// a newcomer) run on compact rows (products over the real rows only, attention over the
// padded layout): the logits equal the same steps padded, the device's greedy pick is
// the host argmax of them, and replayed graphs of the compact executables hold.
TEST(CudaDecode, CompactRowsEqualPaddedRuns) {
  REQUIRE_CUDA();
  for (const char* type : {"f32", "q4_k_m"}) {
    SCOPED_TRACE(type);
    const std::string path = write_synth_model(type, "compact");
    models::LoadOptions lo;
    lo.device = Device::cuda();
    lo.ctx = 256;
    lo.batch = 8;
    lo.compile_cache = false;
    std::vector<std::string> made;
    models::LoadOptions compact = lo, padded = lo;
    padded.compact_rows = false;
    compact.on_compile = [&](const std::string& what) { made.push_back(what); };
    auto c = models::LanguageModel::load(path, compact);
    auto p = models::LanguageModel::load(path, padded);
    auto g = models::LanguageModel::load(path, compact);
    ASSERT_TRUE(c && p && g);
    std::vector<std::vector<int32_t>> in(8);
    for (size_t b = 0; b < 8; ++b)
      for (size_t i = 0; i < 2 + b; ++i) in[b].push_back(static_cast<int32_t>(1 + (i * 29 + b * 13) % 200));
    // (packed weights: the products quantize x to 8 bits, and compact rows pick other
    // kernels for their row count than the padded run)
    const double bound = std::string(type) == "f32" ? 1e-5 : 2e-2;
    for (int step = 0; step < 8; ++step) {
      // Every other step one stream takes a chunk of 20 or 40 tokens while the rest decode.
      if (step % 2 == 1) {
        in[static_cast<size_t>(step)].clear();
        for (int i = 0; i < (step < 4 ? 20 : 40); ++i) in[static_cast<size_t>(step)].push_back(3 + (i * 7 + step) % 150);
      }
      auto want = (*p)->forward_batch(in, false);
      auto got = (*c)->forward_batch(in, false);
      auto pick = (*g)->forward_batch_greedy(in);
      ASSERT_TRUE(want && got && pick) << "step " << step;
      for (size_t b = 0; b < 8; ++b) {
        EXPECT_LT(rel_l2((*got)[b], (*want)[b]), bound) << "step " << step << ", stream " << b;
        EXPECT_EQ((*pick)[b], models::argmax((*got)[b])) << "step " << step << ", stream " << b;
        in[b] = {(*pick)[b]};
      }
    }
    const auto compact_made =
        std::count_if(made.begin(), made.end(), [](const std::string& w) { return w.find(" real)") != std::string::npos; });
    EXPECT_GE(compact_made, 2);  // the 20- and 40-token steps' buckets
    std::filesystem::remove(path);
  }
}

// A prefix handed between sequences on the device (the server's cross-slot prefix cache:
// LanguageModel::copy_prefix, a device-to-device copy of every cache's rows) continues
// as if the receiving sequence had been fed it: its next logits equal one model's fed the
// whole prompt, through the same batched executables.
TEST(CudaDecode, CopiedPrefixContinuesLikeAFreshPrefill) {
  REQUIRE_CUDA();
  const std::string path = write_synth_model("f32", "copied");
  models::LoadOptions lo;
  lo.device = Device::cuda();
  lo.ctx = 64;
  lo.compile_cache = false;
  lo.batch = 4;
  auto a = models::LanguageModel::load(path, lo);
  auto b = models::LanguageModel::load(path, lo);
  ASSERT_TRUE(a && b);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 19; ++i) prompt.push_back(1 + (i * 37) % 200);
  std::vector<std::vector<int32_t>> in(4);
  in[0] = prompt;
  ASSERT_TRUE((*a)->forward_batch(in, false));
  ASSERT_TRUE((*a)->copy_prefix(0, 3, 12).ok());
  EXPECT_EQ((*a)->n_past(3), 12);
  std::vector<std::vector<int32_t>> rest(4), fresh(4);
  rest[3].assign(prompt.begin() + 12, prompt.end());
  fresh[3] = prompt;
  auto got = (*a)->forward_batch(rest, false);
  auto want = (*b)->forward_batch(fresh, false);
  ASSERT_TRUE(got && want) << (got ? want.error().to_string() : got.error().to_string());
  EXPECT_LT(rel_l2((*got)[3], (*want)[3]), 1e-4);
  EXPECT_FALSE((*a)->copy_prefix(3, 3, 1).ok());
  std::filesystem::remove(path);
}

// Sampling with the `sample` op on the device (LanguageModel::forward_sample, one token
// copied back) picks, step by step, what choose_token picks on the host from the same
// model's CUDA logits with the same draw (draws within 1e-6 of a cumulative boundary
// are not compared; at most 2 of the 16 steps may be such).
TEST(CudaDecode, SampledTokenOnDeviceEqualsHostChoice) {
  REQUIRE_CUDA();
  const TokenFilter filter{0.9, 40, 0.95, 0.02};
  for (const char* type : {"f32", "q4_k_m"}) {
    SCOPED_TRACE(type);
    const std::string path = write_synth_model(type, "sampled");
    models::LoadOptions lo;
    lo.device = Device::cuda();
    lo.ctx = 64;
    lo.max_chunk = 8;
    auto a = models::LanguageModel::load(path, lo);
    auto b = models::LanguageModel::load(path, lo);
    ASSERT_TRUE(a && b);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 13; ++i) prompt.push_back(1 + (i * 37) % 200);
    std::mt19937_64 rng(5);
    auto draw = [&] { return static_cast<double>(rng() >> 40) * 0x1p-24; };  // as Sampler::next_draw
    double u = draw();
    auto logits = (*a)->forward(prompt, false);
    auto picked = (*b)->forward_sample(prompt, filter, u);
    ASSERT_TRUE(logits && picked) << (logits ? picked.error().to_string() : logits.error().to_string());
    TokenChoiceScratch scratch;
    int skipped = 0;
    for (int step = 0; step < 16; ++step) {
      const int32_t host = choose_token(*logits, filter, u, scratch);
      if (choose_token(*logits, filter, std::max(0.0, u - 1e-6), scratch) == host &&
          choose_token(*logits, filter, std::min(0.999999999, u + 1e-6), scratch) == host)
        ASSERT_EQ(*picked, host) << "step " << step << ", draw " << u;
      else
        ++skipped;
      u = draw();
      logits = (*a)->forward(std::span<const int32_t>(&host, 1), false);
      picked = (*b)->forward_sample(std::span<const int32_t>(&host, 1), filter, u);
      ASSERT_TRUE(logits && picked);
    }
    EXPECT_LE(skipped, 2);
    std::filesystem::remove(path);
  }
}

// Prefill speed of a real-sized model next to its limit (not a test: it runs only when
// RLX_CUDA_BENCH_MODEL names a GGUF file). First the limit: cuBLASLt f16 GEMM time at
// each distinct linear shape of the model for every prefill length in
// RLX_CUDA_BENCH_PREFILL (default "512,2048"), and the prefill rate the model's linear
// layers alone would allow at those times (attention, norms and the LM head not
// counted). Then, per length: RLX_CUDA_BENCH_PREFILL_RUNS (default 5) timed
// LanguageModel::forward calls of that many tokens from an empty cache (last row's
// logits to the host), after two warm-up calls (compile, graph capture). One chunk per
// prefill unless RLX_CUDA_BENCH_CHUNK sets LoadOptions::max_chunk.
TEST(CudaBench, Prefill) {
  const char* model = std::getenv("RLX_CUDA_BENCH_MODEL");
  if (model == nullptr) GTEST_SKIP() << "RLX_CUDA_BENCH_MODEL is not set: benchmark skipped";
  REQUIRE_CUDA();
  const std::vector<int64_t> lengths = env_list("RLX_CUDA_BENCH_PREFILL", "512,2048");
  const int runs = static_cast<int>(env_list("RLX_CUDA_BENCH_PREFILL_RUNS", "5").at(0));
  int64_t max_len = 0;
  for (int64_t n : lengths) max_len = std::max(max_len, n);
  models::LoadOptions lo;
  auto device = bench_device();
  ASSERT_TRUE(device.has_value()) << "RLX_CUDA_BENCH_DEVICE: " << device.error().to_string();
  lo.device = *device;
  lo.ctx = max_len;
  lo.max_chunk = std::getenv("RLX_CUDA_BENCH_CHUNK") ? env_list("RLX_CUDA_BENCH_CHUNK", "").at(0) : max_len;
  auto m = models::LanguageModel::load(model, lo);
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  const models::ModelConfig& c = (*m)->config();
  auto backend = BackendRegistry::global().get(lo.device.rank(0));
  ASSERT_TRUE(backend.has_value()) << backend.error().to_string();
  // The linear layers of one block: q, k, v, o, gate, up, down ([N, K] each).
  const int64_t q_n = c.n_head * c.head_dim, kv_n = c.n_head_kv * c.head_dim;
  const std::vector<std::pair<int64_t, int64_t>> linears{{q_n, c.n_embd},    {kv_n, c.n_embd}, {kv_n, c.n_embd},
                                                         {c.n_embd, q_n},    {c.n_ff, c.n_embd}, {c.n_ff, c.n_embd},
                                                         {c.n_embd, c.n_ff}};
  for (int64_t n : lengths) {
    std::map<std::pair<int64_t, int64_t>, double> ms_of;
    double layer_ms = 0, flops = 0;
    for (const auto& nk : linears) {
      if (!ms_of.count(nk)) {
        auto t = (*backend)->measure_gemm_ms(n, nk.first, nk.second, ir::DType::F32);
        ASSERT_TRUE(t.has_value()) << t.error().to_string();
        auto t16 = (*backend)->measure_gemm_ms(n, nk.first, nk.second, ir::DType::F16);
        ASSERT_TRUE(t16.has_value()) << t16.error().to_string();
        ms_of[nk] = *t;
        std::printf("cublaslt gemm %lldx%lldx%lld (f16 x f16, f32 accumulate): f32 out %.4f ms = %.0f TFLOP/s, "
                    "f16 out %.4f ms = %.0f TFLOP/s\n",
                    static_cast<long long>(n), static_cast<long long>(nk.first), static_cast<long long>(nk.second), *t,
                    2e-9 * n * nk.first * nk.second / *t, *t16, 2e-9 * n * nk.first * nk.second / *t16);
      }
      layer_ms += ms_of[nk];
      flops += 2.0 * n * nk.first * nk.second;
    }
    std::printf("cublaslt bound prefill %lld: linear layers %.3f ms (%lld layers, %.0f TFLOP/s) -> %.0f tok/s\n",
                static_cast<long long>(n), layer_ms * c.n_layer, static_cast<long long>(c.n_layer),
                flops * 1e-9 / layer_ms, n * 1000.0 / (layer_ms * c.n_layer));
  }
  const int64_t vocab = c.n_vocab;
  for (int64_t n : lengths) {
    std::vector<int32_t> prompt(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % vocab);
    std::vector<double> ms;
    for (int r = 0; r < runs + 2; ++r) {
      (*m)->reset();
      const auto t0 = std::chrono::steady_clock::now();
      auto out = (*m)->forward(prompt, false);
      ASSERT_TRUE(out.has_value()) << out.error().to_string();
      if (r >= 2) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    std::printf("prefill %lld: %.0f tok/s (median %.3f ms, min %.3f ms, %d runs, chunk %lld, graphs %s)\n",
                static_cast<long long>(n), n * 1000.0 / med, med, ms.front(), runs, static_cast<long long>(lo.max_chunk),
                std::getenv("RLX_CUDA_GRAPHS") && std::string(std::getenv("RLX_CUDA_GRAPHS")) == "0" ? "off" : "on");
  }
}

}  // namespace
}  // namespace rlx
