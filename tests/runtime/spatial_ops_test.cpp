// conv (1d / 2d), group_norm and interpolate on every backend (reference, cpu, and cuda
// when built and a device opens) against float64 loops written here from the ops'
// definitions (PyTorch's Conv1d/Conv2d, GroupNorm and F.interpolate): odd sizes, groups,
// strides, dilation, padding, 1x1 kernels, align_corners both ways. Also the error
// paths: malformed attributes and shapes are refused when the graph is built.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "rlx/rlx.h"
#include "rt_util.h"

namespace rlx {
namespace {

using ir::DType;
using ir::ValueId;

constexpr double kTolerance = 2e-6;  // relative L2 of f32 kernels against float64

struct Arrays {
  std::vector<int64_t> x_dims;
  std::vector<float> x;
  std::vector<std::pair<std::string, std::vector<float>>> params;
};

double rel_l2(std::span<const float> got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  if (std::isnan(diff)) return INFINITY;
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

std::vector<std::string> devices() {
  std::vector<std::string> d{"reference", "cpu"};
#ifdef RLX_HAVE_CUDA
  if (Session::create(Device::parse("cuda").value())) d.push_back("cuda");
#endif
  return d;
}

// Builds the graph with `make` (input "x" declared by the caller), runs it on every
// device and compares the single output with `want`.
void check_all_devices(const std::function<ValueId(ir::GraphBuilder&)>& make, const Arrays& data,
                       const std::vector<double>& want, const std::string& what) {
  ir::GraphBuilder b;
  b.output(make(b), "y");
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << what << ": " << g.error().to_string();
  for (const std::string& dev : devices()) {
    auto session = Session::create(Device::parse(dev).value());
    ASSERT_TRUE(session.has_value()) << dev;
    auto c = session->compile(*g);
    ASSERT_TRUE(c.has_value()) << what << " on " << dev << ": " << c.error().to_string();
    for (const auto& [name, values] : data.params) ASSERT_TRUE(c->set_param(name, values).ok()) << name;
    auto out = c->run({NamedTensorView{"x", TensorView{DType::F32, data.x_dims, data.x.data()}}});
    ASSERT_TRUE(out.has_value()) << what << " on " << dev << ": " << out.error().to_string();
    const double err = rel_l2((*out)[0].as<float>(), want);
    EXPECT_LE(err, kTolerance) << what << " on " << dev << ": relative L2 " << err;
  }
}

// ---- conv ----------------------------------------------------------------------------

struct ConvCase {
  const char* name;
  int64_t n, c, h, w;  // h = 0: conv1d over w
  int64_t o, kh, kw, groups;
  int64_t sh, sw, ph, pw, dh, dw;
  bool bias;
};

// PyTorch's convolution, in double, straight from its definition.
std::vector<double> conv_f64(const ConvCase& k, const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& bias, int64_t oh, int64_t ow) {
  const int64_t h = std::max<int64_t>(k.h, 1), cg = k.c / k.groups, og = k.o / k.groups;
  std::vector<double> y(static_cast<size_t>(k.n * k.o * oh * ow));
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = k.bias ? bias[static_cast<size_t>(o)] : 0.0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t a = 0; a < k.kh; ++a)
              for (int64_t bb = 0; bb < k.kw; ++bb) {
                const int64_t yy = i * k.sh - k.ph + a * k.dh, xx = j * k.sw - k.pw + bb * k.dw;
                if (yy < 0 || yy >= h || xx < 0 || xx >= k.w) continue;
                const int64_t cin = (o / og) * cg + ci;
                s += double(x[static_cast<size_t>(((n * k.c + cin) * h + yy) * k.w + xx)]) *
                     w[static_cast<size_t>(((o * cg + ci) * k.kh + a) * k.kw + bb)];
              }
          y[static_cast<size_t>(((n * k.o + o) * oh + i) * ow + j)] = s;
        }
  return y;
}

class ConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvTest, MatchesFloat64) {
  const ConvCase& k = GetParam();
  const bool one_d = k.h == 0;
  const int64_t h = one_d ? 1 : k.h;
  const int64_t oh = (h + 2 * k.ph - k.dh * (k.kh - 1) - 1) / k.sh + 1;
  const int64_t ow = (k.w + 2 * k.pw - k.dw * (k.kw - 1) - 1) / k.sw + 1;
  Arrays data;
  data.x_dims = one_d ? std::vector<int64_t>{k.n, k.c, k.w} : std::vector<int64_t>{k.n, k.c, k.h, k.w};
  data.x = rt_test::random_vec(static_cast<size_t>(k.n * k.c * h * k.w), 11);
  const std::vector<float> w = rt_test::random_vec(static_cast<size_t>(k.o * (k.c / k.groups) * k.kh * k.kw), 12, -0.5f, 0.5f);
  const std::vector<float> bias = rt_test::random_vec(static_cast<size_t>(k.o), 13);
  data.params.emplace_back("w", w);
  if (k.bias) data.params.emplace_back("b", bias);
  const std::vector<double> want = conv_f64(k, data.x, w, bias, oh, ow);
  check_all_devices(
      [&](ir::GraphBuilder& b) {
        const ValueId x = b.input("x", DType::F32, ir::Shape::of(data.x_dims));
        const std::vector<int64_t> w_dims = one_d ? std::vector<int64_t>{k.o, k.c / k.groups, k.kw}
                                                  : std::vector<int64_t>{k.o, k.c / k.groups, k.kh, k.kw};
        const ValueId wv = b.param("w", DType::F32, ir::Shape::of(w_dims));
        std::optional<ValueId> bv;
        if (k.bias) bv = b.param("b", DType::F32, {k.o});
        ir::ConvAttrs a;
        a.stride = one_d ? std::vector<int64_t>{k.sw} : std::vector<int64_t>{k.sh, k.sw};
        a.padding = one_d ? std::vector<int64_t>{k.pw} : std::vector<int64_t>{k.ph, k.pw};
        a.dilation = one_d ? std::vector<int64_t>{k.dw} : std::vector<int64_t>{k.dh, k.dw};
        a.groups = k.groups;
        return b.conv(x, wv, bv, a);
      },
      data, want, k.name);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvTest,
    ::testing::Values(
        // name, n, c, h, w, o, kh, kw, groups, sh, sw, ph, pw, dh, dw, bias
        ConvCase{"patch_embed_stride_eq_kernel", 2, 3, 28, 42, 8, 14, 14, 1, 14, 14, 0, 0, 1, 1, true},
        ConvCase{"odd_3x3_pad1", 1, 5, 9, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
        ConvCase{"stride2_dilation2_groups2", 2, 6, 13, 11, 4, 3, 3, 2, 2, 2, 2, 1, 2, 2, false},
        ConvCase{"asymmetric_kernel_stride", 1, 4, 10, 9, 6, 2, 5, 1, 3, 1, 0, 2, 1, 1, true},
        ConvCase{"depthwise", 1, 6, 8, 8, 6, 3, 3, 6, 1, 1, 1, 1, 1, 1, true},
        ConvCase{"pointwise_1x1", 3, 7, 5, 3, 9, 1, 1, 1, 1, 1, 0, 0, 1, 1, true},
        ConvCase{"conv1d_audio_stride5", 2, 1, 0, 401, 16, 1, 10, 1, 1, 5, 0, 0, 1, 1, false},
        ConvCase{"conv1d_grouped_pos_even_kernel", 1, 16, 0, 23, 16, 1, 8, 4, 1, 1, 0, 4, 1, 1, true},
        ConvCase{"conv1d_dilated_padded", 2, 3, 0, 17, 5, 1, 3, 1, 1, 2, 0, 3, 1, 3, true},
        ConvCase{"conv1d_large_channels", 1, 96, 0, 300, 80, 1, 3, 1, 1, 2, 0, 0, 1, 1, false}),
    [](const ::testing::TestParamInfo<ConvCase>& i) { return std::string(i.param.name); });

// ---- conv transpose ---------------------------------------------------------------------

struct ConvTCase {
  const char* name;
  int64_t n, c, h, w;  // h = 0: conv_transpose1d over w
  int64_t og, kh, kw, groups;
  int64_t sh, sw, ph, pw, dh, dw, oph, opw;
  bool bias;
};

class ConvTransposeTest : public ::testing::TestWithParam<ConvTCase> {};

TEST_P(ConvTransposeTest, MatchesFloat64) {
  const ConvTCase& k = GetParam();
  const bool one_d = k.h == 0;
  const int64_t h = one_d ? 1 : k.h, o = k.og * k.groups, cg = k.c / k.groups;
  const int64_t oh = (h - 1) * k.sh - 2 * k.ph + k.dh * (k.kh - 1) + k.oph + 1;
  const int64_t ow = (k.w - 1) * k.sw - 2 * k.pw + k.dw * (k.kw - 1) + k.opw + 1;
  Arrays data;
  data.x_dims = one_d ? std::vector<int64_t>{k.n, k.c, k.w} : std::vector<int64_t>{k.n, k.c, k.h, k.w};
  data.x = rt_test::random_vec(static_cast<size_t>(k.n * k.c * h * k.w), 41);
  const std::vector<float> w = rt_test::random_vec(static_cast<size_t>(k.c * k.og * k.kh * k.kw), 42, -0.5f, 0.5f);
  const std::vector<float> bias = rt_test::random_vec(static_cast<size_t>(o), 43);
  data.params.emplace_back("w", w);
  if (k.bias) data.params.emplace_back("b", bias);
  // PyTorch's ConvTranspose: every input element scatters through every kernel tap.
  std::vector<double> want(static_cast<size_t>(k.n * o * oh * ow), 0.0);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t i = 0; i < oh * ow; ++i) want[static_cast<size_t>((n * o + oc) * oh * ow + i)] = k.bias ? bias[static_cast<size_t>(oc)] : 0.0;
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t ci = 0; ci < k.c; ++ci)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < k.w; ++x)
          for (int64_t oo = 0; oo < k.og; ++oo)
            for (int64_t a = 0; a < k.kh; ++a)
              for (int64_t bb = 0; bb < k.kw; ++bb) {
                const int64_t qy = y * k.sh - k.ph + a * k.dh, qx = x * k.sw - k.pw + bb * k.dw;
                if (qy < 0 || qy >= oh || qx < 0 || qx >= ow) continue;
                const int64_t oc = (ci / cg) * k.og + oo;
                want[static_cast<size_t>(((n * o + oc) * oh + qy) * ow + qx)] +=
                    double(data.x[static_cast<size_t>(((n * k.c + ci) * h + y) * k.w + x)]) *
                    w[static_cast<size_t>(((ci * k.og + oo) * k.kh + a) * k.kw + bb)];
              }
  check_all_devices(
      [&](ir::GraphBuilder& b) {
        const ValueId x = b.input("x", DType::F32, ir::Shape::of(data.x_dims));
        const std::vector<int64_t> w_dims = one_d ? std::vector<int64_t>{k.c, k.og, k.kw}
                                                  : std::vector<int64_t>{k.c, k.og, k.kh, k.kw};
        const ValueId wv = b.param("w", DType::F32, ir::Shape::of(w_dims));
        std::optional<ValueId> bv;
        if (k.bias) bv = b.param("b", DType::F32, {o});
        ir::ConvTransposeAttrs a;
        a.stride = one_d ? std::vector<int64_t>{k.sw} : std::vector<int64_t>{k.sh, k.sw};
        a.padding = one_d ? std::vector<int64_t>{k.pw} : std::vector<int64_t>{k.ph, k.pw};
        a.dilation = one_d ? std::vector<int64_t>{k.dw} : std::vector<int64_t>{k.dh, k.dw};
        a.output_padding = one_d ? std::vector<int64_t>{k.opw} : std::vector<int64_t>{k.oph, k.opw};
        a.groups = k.groups;
        return b.conv_transpose(x, wv, bv, a);
      },
      data, want, k.name);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvTransposeTest,
    ::testing::Values(
        // name, n, c, h, w, og, kh, kw, groups, sh, sw, ph, pw, dh, dw, oph, opw, bias
        ConvTCase{"sam_upscale_k2_s2", 1, 8, 4, 4, 4, 2, 2, 1, 2, 2, 0, 0, 1, 1, 0, 0, true},
        ConvTCase{"odd_k3_s2_pad1_outpad1", 2, 5, 5, 7, 3, 3, 3, 1, 2, 2, 1, 1, 1, 1, 1, 1, true},
        ConvTCase{"groups_dilation", 1, 6, 4, 5, 2, 3, 2, 3, 1, 2, 0, 1, 2, 1, 0, 1, false},
        ConvTCase{"conv_transpose1d_stride3", 2, 4, 0, 9, 5, 1, 4, 2, 1, 3, 0, 1, 1, 1, 0, 2, true}),
    [](const ::testing::TestParamInfo<ConvTCase>& i) { return std::string(i.param.name); });

// ---- group norm ----------------------------------------------------------------------

struct GroupNormCase {
  const char* name;
  std::vector<int64_t> dims;
  int64_t groups;
  double eps;
  bool beta;
};

class GroupNormTest : public ::testing::TestWithParam<GroupNormCase> {};

TEST_P(GroupNormTest, MatchesFloat64) {
  const GroupNormCase& k = GetParam();
  Arrays data;
  data.x_dims = k.dims;
  int64_t spatial = 1;
  for (size_t i = 2; i < k.dims.size(); ++i) spatial *= k.dims[i];
  const int64_t n = k.dims[0], c = k.dims[1], cg = c / k.groups;
  data.x = rt_test::random_vec(static_cast<size_t>(n * c * spatial), 21, -3.0f, 5.0f);
  const std::vector<float> gamma = rt_test::random_vec(static_cast<size_t>(c), 22, 0.5f, 1.5f);
  const std::vector<float> beta = rt_test::random_vec(static_cast<size_t>(c), 23);
  data.params.emplace_back("g", gamma);
  if (k.beta) data.params.emplace_back("b", beta);
  std::vector<double> want(data.x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < k.groups; ++g) {
      const int64_t base = (i * c + g * cg) * spatial, cnt = cg * spatial;
      double mean = 0, var = 0;
      for (int64_t e = 0; e < cnt; ++e) mean += data.x[static_cast<size_t>(base + e)];
      mean /= double(cnt);
      for (int64_t e = 0; e < cnt; ++e) var += std::pow(data.x[static_cast<size_t>(base + e)] - mean, 2);
      var /= double(cnt);
      for (int64_t e = 0; e < cnt; ++e) {
        const auto ch = static_cast<size_t>(g * cg + e / spatial);
        want[static_cast<size_t>(base + e)] = (data.x[static_cast<size_t>(base + e)] - mean) / std::sqrt(var + k.eps) *
                                                  gamma[ch] + (k.beta ? beta[ch] : 0.0);
      }
    }
  check_all_devices(
      [&](ir::GraphBuilder& b) {
        const ValueId x = b.input("x", DType::F32, ir::Shape::of(k.dims));
        std::optional<ValueId> bv;
        if (k.beta) bv = b.param("b", DType::F32, {c});
        return b.group_norm(x, b.param("g", DType::F32, {c}), bv, k.groups, k.eps);
      },
      data, want, k.name);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GroupNormTest,
                         ::testing::Values(GroupNormCase{"per_channel_audio", {2, 8, 319}, 8, 1e-5, true},
                                           GroupNormCase{"groups_of_3_nchw", {2, 9, 5, 7}, 3, 1e-5, true},
                                           GroupNormCase{"one_group_no_beta", {1, 5, 3, 3}, 1, 1e-6, false}),
                         [](const ::testing::TestParamInfo<GroupNormCase>& i) { return std::string(i.param.name); });

// ---- interpolate ---------------------------------------------------------------------

struct InterpCase {
  const char* name;
  ir::InterpMode mode;
  bool align;
  int64_t ih, iw, oh, ow;
};

// F.interpolate's taps of output index i along one dim, in double.
std::vector<std::pair<int64_t, double>> interp_taps(ir::InterpMode mode, bool align, int64_t i, int64_t in, int64_t out) {
  auto clamp = [&](int64_t j) { return std::min(std::max<int64_t>(j, 0), in - 1); };
  if (mode == ir::InterpMode::Nearest)
    return {{std::min<int64_t>(static_cast<int64_t>(std::floor(double(i) * double(in) / double(out))), in - 1), 1.0}};
  double s = align ? (out > 1 ? double(i) * double(in - 1) / double(out - 1) : 0.0)
                   : (double(i) + 0.5) * double(in) / double(out) - 0.5;
  if (mode == ir::InterpMode::Bilinear) {
    if (!align) s = std::max(s, 0.0);
    const double f = s - std::floor(s);
    const auto j = static_cast<int64_t>(std::floor(s));
    return {{clamp(j), 1 - f}, {clamp(j + 1), f}};
  }
  // Keys' cubic convolution, a = -0.75 (PyTorch's upsample_bicubic2d).
  const double a = -0.75, t = s - std::floor(s);
  const auto j = static_cast<int64_t>(std::floor(s));
  auto near = [&](double d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };
  auto far = [&](double d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };
  return {{clamp(j - 1), far(t + 1)}, {clamp(j), near(t)}, {clamp(j + 1), near(1 - t)}, {clamp(j + 2), far(2 - t)}};
}

class InterpolateTest : public ::testing::TestWithParam<InterpCase> {};

TEST_P(InterpolateTest, MatchesFloat64) {
  const InterpCase& k = GetParam();
  const int64_t planes = 2 * 3;
  Arrays data;
  data.x_dims = {2, 3, k.ih, k.iw};
  data.x = rt_test::random_vec(static_cast<size_t>(planes * k.ih * k.iw), 31);
  std::vector<double> want(static_cast<size_t>(planes * k.oh * k.ow));
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < k.oh; ++i)
      for (int64_t j = 0; j < k.ow; ++j) {
        double s = 0;
        for (auto [yi, wy] : interp_taps(k.mode, k.align, i, k.ih, k.oh))
          for (auto [xi, wx] : interp_taps(k.mode, k.align, j, k.iw, k.ow))
            s += wy * wx * data.x[static_cast<size_t>((p * k.ih + yi) * k.iw + xi)];
        want[static_cast<size_t>((p * k.oh + i) * k.ow + j)] = s;
      }
  check_all_devices(
      [&](ir::GraphBuilder& b) {
        return b.interpolate(b.input("x", DType::F32, ir::Shape::of(data.x_dims)),
                             ir::InterpolateAttrs{k.mode, {k.oh, k.ow}, k.align});
      },
      data, want, k.name);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, InterpolateTest,
    ::testing::Values(InterpCase{"bicubic_up_dinov2_positions", ir::InterpMode::Bicubic, false, 4, 4, 6, 6},
                      InterpCase{"bicubic_down_nonsquare", ir::InterpMode::Bicubic, false, 7, 5, 3, 8},
                      InterpCase{"bicubic_align_corners", ir::InterpMode::Bicubic, true, 5, 6, 9, 4},
                      InterpCase{"bicubic_to_one", ir::InterpMode::Bicubic, true, 5, 6, 1, 1},
                      InterpCase{"bilinear_up", ir::InterpMode::Bilinear, false, 3, 4, 7, 9},
                      InterpCase{"bilinear_align_corners", ir::InterpMode::Bilinear, true, 6, 5, 4, 11},
                      InterpCase{"nearest_up_down", ir::InterpMode::Nearest, false, 5, 7, 8, 3}),
    [](const ::testing::TestParamInfo<InterpCase>& i) { return std::string(i.param.name); });

// ---- refused at build ------------------------------------------------------------------

TEST(SpatialOpErrors, BadShapesAndAttrsAreRefusedWithTheRule) {
  auto error_of = [](const std::function<ValueId(ir::GraphBuilder&)>& make) {
    ir::GraphBuilder b;
    b.output(make(b), "y");
    auto g = b.build();
    return g ? std::string() : g.error().message();
  };
  const std::string stem = error_of([](ir::GraphBuilder& b) {
    const ValueId x = b.input("x", DType::F32, {1, 3, 8, 8}), w = b.param("w", DType::F32, {4, 2, 3, 3});
    return b.label("stem").conv(x, w, std::nullopt, ir::ConvAttrs{});
  });
  EXPECT_NE(stem.find("conv weight f32[4, 2, 3, 3] needs C/groups = 3"), std::string::npos) << stem;
  EXPECT_NE(stem.find("conv 'stem'"), std::string::npos) << stem;
  EXPECT_NE(error_of([](ir::GraphBuilder& b) {
              return b.conv(b.input("x", DType::F32, {1, 3, 4, 4}), b.param("w", DType::F32, {4, 3, 5, 5}), std::nullopt,
                            ir::ConvAttrs{});
            }).find("shorter than the dilated kernel"),
            std::string::npos);
  EXPECT_NE(error_of([](ir::GraphBuilder& b) {
              return b.conv(b.input("x", DType::F32, {1, 4, 9}), b.param("w", DType::F32, {4, 4, 3}), std::nullopt,
                            ir::ConvAttrs{{1, 1}, {}, {}, 1});
            }).find("conv stride has 2 entries for 1 spatial dims"),
            std::string::npos);
  EXPECT_NE(error_of([](ir::GraphBuilder& b) {
              return b.group_norm(b.input("x", DType::F32, {1, 6, 9}), b.param("g", DType::F32, {6}), std::nullopt, 4, 1e-5);
            }).find("group_norm groups 4 must divide the 6 channels"),
            std::string::npos);
  EXPECT_NE(error_of([](ir::GraphBuilder& b) {
              return b.interpolate(b.input("x", DType::I32, {1, 1, 4, 4}),
                                   ir::InterpolateAttrs{ir::InterpMode::Bicubic, {8, 8}, false});
            }).find("interpolate input must be a float type"),
            std::string::npos);
}

// The CPU backend computes these ops in f32 only: an f16 conv is refused naming the node.
TEST(SpatialOpErrors, CpuRefusesHalfPrecisionConv) {
  ir::GraphBuilder b;
  b.output(b.conv(b.input("x", DType::F16, {1, 2, 8}), b.param("w", DType::F16, {2, 2, 3}), std::nullopt,
                               ir::ConvAttrs{}),
           "y");
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  auto c = Session(Device::cpu()).compile(*g);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().to_string().find("(conv"), std::string::npos) << c.error().to_string();
  EXPECT_NE(c.error().to_string().find("f32"), std::string::npos) << c.error().to_string();
}

}  // namespace
}  // namespace rlx
