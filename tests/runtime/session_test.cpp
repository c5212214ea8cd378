// Session / CompiledGraph API: devices, end-to-end runs, params, handles, clones,
// run_slots, pipelined runs and the error messages for user mistakes.
#include <gtest/gtest.h>

#include "rt_util.h"

namespace rlx {
namespace {

using ir::DType;
using ir::GraphBuilder;
using namespace rt_test;

// y = x . W^T + b  (x [3, 5], W [4, 5], b [4]) and z = relu(y)
ir::Graph linear_graph() {
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {3, 5});
  auto w = b.param("w", DType::F32, {4, 5});
  auto bias = b.param("b", DType::F32, {4});
  auto y = b.linear(x, w, bias);
  b.output(y, "y");
  b.output(b.activation(ir::ActKind::Relu, y), "z");
  return build(b);
}

std::vector<double> linear_ref(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& bias) {
  std::vector<double> y(12);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      double s = bias[j];
      for (int k = 0; k < 5; ++k) s += double(x[i * 5 + k]) * w[j * 5 + k];
      y[i * 4 + j] = s;
    }
  return y;
}

TEST(Device, ParsesAndPrints) {
  EXPECT_EQ(Device::parse("cpu")->to_string(), "cpu");
  auto c = Device::parse("cuda:1");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->kind, DeviceKind::kCuda);
  EXPECT_EQ(c->ordinal, 1);
  EXPECT_EQ(c->to_string(), "cuda:1");
  EXPECT_EQ(Device::parse("wgpu")->kind, DeviceKind::kVulkan);
  EXPECT_FALSE(Device::parse("gpu").has_value());
  EXPECT_FALSE(Device::parse("cuda:x").has_value());
  EXPECT_FALSE(Device::parse("cuda:-1").has_value());
}

TEST(Session, UnavailableDeviceIsAnErrorValue) {
  EXPECT_TRUE(is_available(Device::cpu()));
  EXPECT_FALSE(is_available(Device{DeviceKind::kTpu, 0}));
  auto s = Session::create(Device{DeviceKind::kTpu, 0});
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message().find("tpu"), std::string::npos) << s.error().message();
  Session bad(Device{DeviceKind::kMetal, 0});
  EXPECT_FALSE(bad.ok());
  auto g = bad.compile(linear_graph());
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().code(), ErrorCode::kUnsupported);
  EXPECT_FALSE(Session::create(Device{DeviceKind::kCpu, 64}).has_value());
}

TEST(CompiledGraph, LinearEndToEnd) {
  CompiledGraph g = compile_cpu(linear_graph());
  const auto x = random_vec(15, 1), w = random_vec(20, 2), bias = random_vec(4, 3);
  ASSERT_TRUE(g.set_param("w", w).ok());
  ASSERT_TRUE(g.set_param("b", bias).ok());
  const int64_t shape[] = {3, 5};
  auto out = g.run({NamedF32{"x", x, shape}});
  ASSERT_TRUE(out.has_value()) << out.error().to_string();
  ASSERT_EQ(out->size(), 2u);
  const auto ref = linear_ref(x, w, bias);
  EXPECT_EQ((*out)[0].shape(), (std::vector<int64_t>{3, 4}));
  EXPECT_LT(max_abs_diff(as_f32((*out)[0]), ref), 1e-5);
  std::vector<double> relu(ref);
  for (double& v : relu) v = std::max(v, 0.0);
  EXPECT_LT(max_abs_diff(as_f32((*out)[1]), relu), 1e-5);

  // The manifest names everything.
  EXPECT_EQ(g.manifest().inputs.at(0).name, "x");
  EXPECT_EQ(g.manifest().params.size(), 2u);
  EXPECT_EQ(g.manifest().outputs.at(1).name, "z");

  // run_slots + arena_ptr give the same numbers without names.
  const TensorView views[] = {TensorView::f32(x, shape)};
  auto slots = g.run_slots(views);
  ASSERT_TRUE(slots.has_value()) << slots.error().to_string();
  ASSERT_EQ(slots->size(), 2u);
  EXPECT_EQ((*slots)[0].second, 12 * 4);
  const auto* y = reinterpret_cast<const float*>(g.arena_ptr() + (*slots)[0].first);
  EXPECT_LT(max_abs_diff(std::span<const float>(y, 12), ref), 1e-5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(g.arena_ptr()) % 64, 0u);

  // read_output_row: row 2 of y
  auto row = g.read_output_row(0, 2, 4);
  ASSERT_TRUE(row.has_value());
  EXPECT_LT(max_abs_diff(*row, std::span<const double>(ref.data() + 8, 4)), 1e-5);
  EXPECT_FALSE(g.read_output_row(0, 3, 4).has_value());
  EXPECT_FALSE(g.read_output_row(7, 0, 4).has_value());

  // run_read_outputs returns only the requested ones.
  const NamedTensorView named[] = {{"x", TensorView::f32(x, shape)}};
  const size_t pick[] = {1};
  auto only = g.run_read_outputs(named, pick);
  ASSERT_TRUE(only.has_value());
  ASSERT_EQ(only->size(), 1u);
  EXPECT_LT(max_abs_diff(as_f32((*only)[0]), relu), 1e-5);
}

TEST(CompiledGraph, ErrorsNameTheProblem) {
  CompiledGraph g = compile_cpu(linear_graph());
  const auto x = random_vec(15, 1);
  const int64_t shape[] = {3, 5};
  const int64_t bad_shape[] = {3, 6};
  const std::vector<float> x6(18, 0.5f);

  // missing params are reported at run time
  auto r = g.run({NamedF32{"x", x, shape}});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("param 'w' was never set"), std::string::npos) << r.error().message();

  ASSERT_TRUE(g.set_param("w", random_vec(20, 2)).ok());
  ASSERT_TRUE(g.set_param("b", random_vec(4, 3)).ok());

  r = g.run({NamedF32{"q", x, shape}});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("unknown input 'q'"), std::string::npos) << r.error().message();

  r = g.run({NamedF32{"x", x6, bad_shape}});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("expected f32[3, 5], got f32[3, 6]"), std::string::npos) << r.error().message();

  const std::vector<uint16_t> half(15, 0);
  const NamedTensorView wrong_dtype[] = {{"x", TensorView{DType::F16, shape, half.data()}}};
  r = g.run(wrong_dtype);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("got f16[3, 5]"), std::string::npos) << r.error().message();

  r = g.run(std::span<const NamedF32>{});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("input 'x' is missing"), std::string::npos) << r.error().message();

  r = g.run({NamedF32{"x", std::span<const float>(x.data(), 14), shape}});
  ASSERT_FALSE(r.has_value());

  auto st = g.set_param("nope", x);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("unknown param 'nope'"), std::string::npos);
  st = g.set_param("w", x);  // 15 values for [4, 5]
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("param 'w'"), std::string::npos) << st.error().message();
  const std::vector<uint8_t> q(18 * 2, 0);
  st = g.set_param_typed("w", q, DType::Q8_0);
  ASSERT_FALSE(st.ok());

  st = g.bind_handle("kv", std::span<const float>(x));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("unknown handle 'kv'"), std::string::npos) << st.error().message();
  EXPECT_FALSE(g.read_handle("kv").has_value());

  const TensorView too_few[] = {TensorView::f32(x, shape), TensorView::f32(x, shape)};
  EXPECT_FALSE(g.run_slots(too_few).has_value());

  EXPECT_FALSE(g.set_active_extent(1, 3).ok());  // no symbolic dim
  EXPECT_FALSE(g.sync_pending().has_value());   // nothing committed
}

TEST(CompiledGraph, HalfParamsAreStoredOrConverted) {
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {2, 8});
  auto w = b.param("w", DType::F16, {3, 8});
  b.output(b.linear(x, w), "y");
  CompiledGraph g = compile_cpu(build(b));
  const auto xv = random_vec(16, 4), wv = random_vec(24, 5);
  std::vector<uint16_t> wh(24);
  std::vector<float> wr(24);
  for (int i = 0; i < 24; ++i) {
    wh[i] = f32_to_f16_bits(wv[i]);
    wr[i] = f16_bits_to_f32(wh[i]);
  }
  ASSERT_TRUE(g.set_param_typed("w", std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(wh.data()), 48),
                                DType::F16)
                  .ok());
  const int64_t shape[] = {2, 8};
  auto out = g.run({NamedF32{"x", xv, shape}});
  ASSERT_TRUE(out.has_value()) << out.error().to_string();
  std::vector<double> ref(6);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 8; ++k) ref[i * 3 + j] += double(xv[i * 8 + k]) * wr[j * 8 + k];
  EXPECT_LT(max_abs_diff(as_f32((*out)[0]), ref), 1e-5);
  // f32 data for an f16 param is converted (same rounding as above).
  ASSERT_TRUE(g.set_param("w", wv).ok());
  auto out2 = g.run({NamedF32{"x", xv, shape}});
  ASSERT_TRUE(out2.has_value());
  EXPECT_LT(max_abs_diff(as_f32((*out2)[0]), ref), 1e-5);
}

TEST(CompiledGraph, CloneIsIndependent) {
  // y = x * 2 + h, where handle h is bumped in place by UpdateSlice every run.
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {4, 3});
  auto w = b.param("w", DType::F32, {3});
  auto h = b.handle("h", DType::F32, {6, 3});
  auto start = b.input("start", DType::I32, {1});
  auto y = b.mul(x, w);
  auto hn = b.update_slice(h, y, start, 0);
  b.output(y, "y");
  b.output(hn, "h_out");
  CompiledGraph g = compile_cpu(build(b));
  const std::vector<float> w1{1, 2, 3}, w2{-1, -1, -1};
  ASSERT_TRUE(g.set_param("w", w1).ok());
  auto c = g.clone();
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  const std::vector<float> xv(12, 1.0f);
  const int64_t xs[] = {4, 3}, ss[] = {1};
  const int32_t s0 = 0, s2 = 2;
  auto run = [&](CompiledGraph& cg, const int32_t& s) {
    const NamedTensorView in[] = {{"x", TensorView::f32(xv, xs)}, {"start", TensorView{DType::I32, ss, &s}}};
    return cg.run(in);
  };
  // The clone keeps the original weights when the original changes its own.
  ASSERT_TRUE(g.set_param("w", w2).ok());
  auto a = run(g, s0);
  auto bb = run(*c, s2);
  ASSERT_TRUE(a.has_value() && bb.has_value());
  EXPECT_EQ(as_f32((*a)[0])[1], -1.0f);
  EXPECT_EQ(as_f32((*bb)[0])[1], 2.0f);
  // Each has its own handle: rows 0..3 written in g, rows 2..5 in the clone.
  auto hg = g.read_handle("h");
  auto hc = c->read_handle("h");
  ASSERT_TRUE(hg.has_value() && hc.has_value());
  const auto hgv = as_f32(*hg), hcv = as_f32(*hc);
  EXPECT_EQ(hgv[0], -1.0f);
  EXPECT_EQ(hgv[5 * 3], 0.0f);
  EXPECT_EQ(hcv[0], 0.0f);
  EXPECT_EQ(hcv[5 * 3 + 2], 3.0f);
  // The output view of the handle shows the updated handle.
  EXPECT_EQ(as_f32((*bb)[1]), hcv);
  // Writing past the end of the handle is an error, not a crash.
  const int32_t s5 = 5;
  auto over = run(g, s5);
  ASSERT_FALSE(over.has_value());
  EXPECT_NE(over.error().message().find("exceeds"), std::string::npos) << over.error().message();
  // bind_handle replaces contents; read back exactly.
  std::vector<float> hv(18);
  for (int i = 0; i < 18; ++i) hv[i] = float(i);
  ASSERT_TRUE(g.bind_handle("h", hv).ok());
  EXPECT_EQ(as_f32(*g.read_handle("h")), hv);
  const int64_t wrong[] = {5, 3};
  EXPECT_FALSE(g.bind_handle("h", TensorView::f32(hv, wrong)).ok());
}

TEST(CompiledGraph, PipelinedRunsKeepEachOutput) {
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {2, 2});
  b.output(b.activation(ir::ActKind::Neg, x), "y");
  CompiledGraph g = compile_cpu(build(b));
  const std::vector<float> a{1, 2, 3, 4}, c{5, 6, 7, 8};
  const int64_t s[] = {2, 2};
  std::vector<std::vector<NamedTensorView>> sets = {{{"x", TensorView::f32(a, s)}}, {{"x", TensorView::f32(c, s)}}};
  auto outs = g.run_pipelined(sets);
  ASSERT_TRUE(outs.has_value()) << outs.error().to_string();
  ASSERT_EQ(outs->size(), 2u);
  EXPECT_EQ(as_f32((*outs)[0][0]), (std::vector<float>{-1, -2, -3, -4}));
  EXPECT_EQ(as_f32((*outs)[1][0]), (std::vector<float>{-5, -6, -7, -8}));
  ASSERT_TRUE(g.commit_no_wait(sets[0]).ok());
  EXPECT_FALSE(g.commit_no_wait(sets[1]).ok());  // one pending at a time
  auto o = g.sync_pending();
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(as_f32((*o)[0]), (std::vector<float>{-1, -2, -3, -4}));
}

}  // namespace
}  // namespace rlx
