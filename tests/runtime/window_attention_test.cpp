// SAM's windowed ViT attention (window_partition -> rel_pos_attention ->
// window_unpartition) on every backend (reference, cpu, and cuda when built and a device
// opens) against float64 loops written here the way transformers' SamVisionAttention
// computes it: zero padding to whole windows, the decomposed relative-position bias
// from get_rel_pos's index rule (q - k + k_size - 1), softmax, the padding cropped.
// Odd grids, padding, several windows and images, one head and many, head_dim not a
// power of two, grids longer than one query or key tile, and grids long enough for CUDA's
// GEMM form. Also the build-time refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "rlx/rlx.h"
#include "rt_util.h"

namespace rlx {
namespace {

using ir::DType;
using ir::Shape;
using ir::ValueId;

constexpr double kTolerance = 2e-6;  // relative L2 of f32 kernels against float64

struct WindowCase {
  const char* name;
  int64_t batch, height, width;
  int64_t window;  // 0: global attention over the whole grid
  int64_t heads, head_dim;
};

std::vector<std::string> devices() {
  std::vector<std::string> d{"reference", "cpu"};
#ifdef RLX_HAVE_CUDA
  if (Session::create(Device::parse("cuda").value())) d.push_back("cuda");
#endif
  return d;
}

// SAM's attention over x[B, H, W, 3*heads*D] (q | k | v per pixel), in double.
std::vector<double> sam_attention_f64(const WindowCase& k, const std::vector<float>& x, const std::vector<float>& rel_h,
                                      const std::vector<float>& rel_w) {
  const int64_t D = k.head_dim, C = k.heads * D, win_h = k.window ? k.window : k.height,
                win_w = k.window ? k.window : k.width;
  const int64_t ph = (win_h - k.height % win_h) % win_h, pw = (win_w - k.width % win_w) % win_w;
  const int64_t hp = k.height + ph, wp = k.width + pw;
  // Padded pixel (b, y, x), part 0 (q), 1 (k) or 2 (v), channel c.
  auto at = [&](int64_t b, int64_t y, int64_t xx, int64_t part, int64_t c) -> double {
    if (y >= k.height || xx >= k.width) return 0.0;
    return x[static_cast<size_t>(((b * k.height + y) * k.width + xx) * 3 * C + part * C + c)];
  };
  std::vector<double> out(static_cast<size_t>(k.batch * k.height * k.width * C));
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const int64_t tokens = win_h * win_w;
  std::vector<double> s(static_cast<size_t>(tokens));
  for (int64_t b = 0; b < k.batch; ++b)
    for (int64_t wy = 0; wy < hp; wy += win_h)
      for (int64_t wx = 0; wx < wp; wx += win_w)
        for (int64_t h = 0; h < k.heads; ++h)
          for (int64_t qi = 0; qi < tokens; ++qi) {
            const int64_t qy = qi / win_w, qx = qi % win_w;
            if (wy + qy >= k.height || wx + qx >= k.width) continue;  // cropped: never read
            double mx = -INFINITY;
            for (int64_t kj = 0; kj < tokens; ++kj) {
              const int64_t ky = kj / win_w, kx = kj % win_w;
              double dot = 0, bias_h = 0, bias_w = 0;
              for (int64_t c = 0; c < D; ++c) {
                const double qv = at(b, wy + qy, wx + qx, 0, h * D + c);
                dot += qv * at(b, wy + ky, wx + kx, 1, h * D + c);
                bias_h += qv * rel_h[static_cast<size_t>((qy - ky + win_h - 1) * D + c)];
                bias_w += qv * rel_w[static_cast<size_t>((qx - kx + win_w - 1) * D + c)];
              }
              s[static_cast<size_t>(kj)] = dot * scale + bias_h + bias_w;
              mx = std::max(mx, s[static_cast<size_t>(kj)]);
            }
            double sum = 0;
            for (double& e : s) sum += (e = std::exp(e - mx));
            for (int64_t c = 0; c < D; ++c) {
              double o = 0;
              for (int64_t kj = 0; kj < tokens; ++kj)
                o += s[static_cast<size_t>(kj)] / sum * at(b, wy + kj / win_w, wx + kj % win_w, 2, h * D + c);
              out[static_cast<size_t>(((b * k.height + wy + qy) * k.width + wx + qx) * C + h * D + c)] = o;
            }
          }
  return out;
}

// The op graph of one SAM attention: windows (when windowed), the three projections'
// parts, rel_pos_attention, the windows put back.
ValueId sam_attention_graph(ir::GraphBuilder& b, const WindowCase& k) {
  const int64_t C = k.heads * k.head_dim, win_h = k.window ? k.window : k.height, win_w = k.window ? k.window : k.width;
  ValueId x = b.input("x", DType::F32, Shape{k.batch, k.height, k.width, 3 * C});
  int64_t items = k.batch;
  if (k.window) {
    x = b.window_partition(x, k.window);
    items = k.batch * ((k.height + k.window - 1) / k.window) * ((k.width + k.window - 1) / k.window);
  }
  x = b.reshape(x, Shape{items, win_h * win_w, 3 * C});
  const ValueId q = b.narrow(x, 2, 0, ir::Dim(C)), kk = b.narrow(x, 2, C, ir::Dim(C)),
                v = b.narrow(x, 2, 2 * C, ir::Dim(C));
  const ValueId o = b.rel_pos_attention(q, kk, v, b.param("rel_h", DType::F32, {2 * win_h - 1, k.head_dim}),
                                        b.param("rel_w", DType::F32, {2 * win_w - 1, k.head_dim}),
                                        ir::RelPosAttentionAttrs{k.heads, k.head_dim, win_h, win_w, 0.0});
  if (!k.window) return b.reshape(o, Shape{k.batch, k.height, k.width, C});
  return b.window_unpartition(b.reshape(o, Shape{items, win_h, win_w, C}), k.window, k.height, k.width);
}

class WindowAttentionTest : public ::testing::TestWithParam<WindowCase> {};

TEST_P(WindowAttentionTest, MatchesSamInFloat64) {
  const WindowCase& k = GetParam();
  const int64_t C = k.heads * k.head_dim, win_h = k.window ? k.window : k.height, win_w = k.window ? k.window : k.width;
  const std::vector<int64_t> x_dims{k.batch, k.height, k.width, 3 * C};
  const std::vector<float> x = rt_test::random_vec(static_cast<size_t>(k.batch * k.height * k.width * 3 * C), 7);
  const std::vector<float> rel_h =
      rt_test::random_vec(static_cast<size_t>((2 * win_h - 1) * k.head_dim), 8, -0.5f, 0.5f);
  const std::vector<float> rel_w =
      rt_test::random_vec(static_cast<size_t>((2 * win_w - 1) * k.head_dim), 9, -0.5f, 0.5f);
  const std::vector<double> want = sam_attention_f64(k, x, rel_h, rel_w);
  ir::GraphBuilder b;
  b.output(sam_attention_graph(b, k), "y");
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  for (const std::string& dev : devices()) {
    auto session = Session::create(Device::parse(dev).value());
    ASSERT_TRUE(session.has_value()) << dev;
    auto c = session->compile(*g);
    ASSERT_TRUE(c.has_value()) << dev << ": " << c.error().to_string();
    ASSERT_TRUE(c->set_param("rel_h", rel_h).ok());
    ASSERT_TRUE(c->set_param("rel_w", rel_w).ok());
    auto out = c->run({NamedTensorView{"x", TensorView{DType::F32, x_dims, x.data()}}});
    ASSERT_TRUE(out.has_value()) << dev << ": " << out.error().to_string();
    const std::span<const float> got = (*out)[0].as<float>();
    ASSERT_EQ(got.size(), want.size()) << dev;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      diff += (got[i] - want[i]) * (got[i] - want[i]);
      norm += want[i] * want[i];
    }
    const double err = std::sqrt(diff / norm);
    EXPECT_LE(err, kTolerance) << k.name << " on " << dev << ": relative L2 " << err;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, WindowAttentionTest,
                         ::testing::Values(WindowCase{"windows_padded_two_images", 2, 9, 7, 4, 2, 8},
                                           WindowCase{"one_exact_window_one_head", 1, 4, 4, 4, 1, 16},
                                           WindowCase{"global_nonsquare_odd_head_dim", 1, 5, 6, 0, 3, 5},
                                           WindowCase{"global_longer_than_a_tile", 1, 9, 11, 0, 2, 32},
                                           WindowCase{"windows_of_sam_b_shape", 1, 16, 16, 14, 2, 64},
                      WindowCase{"global_long_grid_two_images", 2, 32, 33, 0, 2, 16}),
                         [](const ::testing::TestParamInfo<WindowCase>& i) { return std::string(i.param.name); });

TEST(WindowAttentionErrors, BadShapesAreRefusedWhenBuilt) {
  auto refused = [](const std::function<void(ir::GraphBuilder&)>& make, const std::string& want) {
    ir::GraphBuilder b;
    make(b);
    auto g = b.build();
    ASSERT_FALSE(g.has_value());
    EXPECT_NE(g.error().message().find(want), std::string::npos) << g.error().message();
  };
  refused(
      [](ir::GraphBuilder& b) {
        b.output(b.window_unpartition(b.input("x", DType::F32, Shape{5, 4, 4, 3}), 4, 8, 8));
      },
      "5 windows are no whole number of 8 x 8 images");
  refused(
      [](ir::GraphBuilder& b) {
        const ValueId q = b.input("q", DType::F32, Shape{2, 12, 8});
        b.output(b.rel_pos_attention(q, q, q, b.param("rh", DType::F32, {5, 4}), b.param("rw", DType::F32, {7, 4}),
                                     ir::RelPosAttentionAttrs{2, 4, 3, 3, 0.0}));
      },
      "rel_pos_attention q must be f32[N, 9, 8]");
}

}  // namespace
}  // namespace rlx
