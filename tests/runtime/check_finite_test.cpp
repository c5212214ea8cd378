// BackendOptions::check_finite (RLX_CHECK_FINITE=1): the CPU backend (and CUDA, where
// this machine has a GPU) names the first op whose result holds a NaN or an infinity,
// in one warning per executable, and changes no result; without the option nothing is
// said.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "rlx/base/env.h"
#include "rlx/runtime/session.h"
#include "runtime/rt_util.h"

namespace rlx {
namespace {

using ir::DType;

// x [2, 4] -> exp(x) (finite) -> log(x) (NaN for x < 0) -> softmax: the log is the
// first step whose result is not finite.
ir::Graph nan_graph() {
  ir::GraphBuilder b;
  auto x = b.input("x", DType::F32, {2, 4});
  auto e = b.reduce(ir::ReduceKind::Sum, b.activation(ir::ActKind::Exp, x), {1}, /*keep_dims=*/true);
  auto l = b.activation(ir::ActKind::Log, b.sub(x, e));  // x - sum(exp(x)) < 0: NaN
  b.output(b.softmax(l), "y");
  return rt_test::build(b);
}

struct Ran {
  std::vector<float> y;
  std::string log;
};

Ran run_twice(const Device& dev, bool check) {
  BackendOptions o;
  o.threads = 1;
  o.check_finite = check;
  Session s(dev, o);
  auto g = s.compile(nan_graph());
  EXPECT_TRUE(g.has_value()) << g.error().to_string();
  if (!g) return {};
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, 1.0f, -3.0f, 0.25f};
  const int64_t shape[] = {2, 4};
  Ran r;
  testing::internal::CaptureStderr();
  for (int i = 0; i < 2; ++i) {
    auto out = g->run({NamedF32{"x", x, shape}});
    EXPECT_TRUE(out.has_value()) << out.error().to_string();
    if (out) r.y = rt_test::as_f32((*out)[0]);
  }
  r.log = testing::internal::GetCapturedStderr();
  return r;
}

TEST(CheckFinite, NamesTheFirstNonFiniteOpOnce) {
  if (env_config().check_finite) GTEST_SKIP() << "RLX_CHECK_FINITE=1 turns the check on for every backend";
  std::vector<Device> devices{Device::cpu()};
  if (is_available(Device::cuda())) devices.push_back(Device::cuda());
  for (const Device& dev : devices) {
    SCOPED_TRACE(dev.to_string());
    const Ran on = run_twice(dev, true), off = run_twice(dev, false);
    const size_t at = on.log.find("check_finite: step ");
    ASSERT_NE(at, std::string::npos) << on.log;
    EXPECT_EQ(on.log.find("check_finite", at + 1), std::string::npos) << "warned more than once: " << on.log;
    const std::string line = on.log.substr(at, on.log.find('\n', at) - at);
    EXPECT_NE(line.find("log"), std::string::npos) << line;
    EXPECT_EQ(line.find("softmax"), std::string::npos) << "named a later op: " << line;
    EXPECT_NE(line.find("nan"), std::string::npos) << line;
    EXPECT_EQ(off.log.find("check_finite"), std::string::npos) << off.log;
    // The check changes no result (NaN where the graph makes NaN).
    ASSERT_EQ(on.y.size(), off.y.size());
    for (size_t i = 0; i < on.y.size(); ++i) EXPECT_EQ(std::isnan(on.y[i]), std::isnan(off.y[i])) << i;
  }
}

// topk finite_check (k = 1 indices): -1 for a row holding a NaN or an infinity, the
// argmax otherwise, on every backend this machine has (the CUDA row kernel for rows of
// 4096 floats, the generic kernel for rows of 37).
TEST(CheckFinite, ArgmaxGivesMinusOneForANonFiniteRow) {
  for (const int64_t len : {int64_t{37}, int64_t{4096}}) {
    ir::GraphBuilder b;
    b.output(b.topk(b.input("x", DType::F32, {4, len}), 1, false, /*finite_check=*/true), "next");
    const ir::Graph graph = rt_test::build(b);
    std::vector<float> x(static_cast<size_t>(4 * len));
    for (int64_t i = 0; i < 4 * len; ++i) x[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i));
    x[static_cast<size_t>(0 * len + 5)] = 3.0f;                                     // row 0: argmax 5
    x[static_cast<size_t>(1 * len + len - 1)] = std::nanf("");                      // row 1: NaN (last)
    x[static_cast<size_t>(2 * len + 2)] = -std::numeric_limits<float>::infinity();  // row 2: -Inf
    x[static_cast<size_t>(3 * len + 9)] = 2.5f;                                     // row 3: argmax 9
    const int64_t shape[] = {4, len};
    for (const Device d : {Device::cpu(), Device{DeviceKind::kReference, 0}, Device::cuda()}) {
      if (!is_available(d)) continue;
      SCOPED_TRACE(d.to_string() + " len " + std::to_string(len));
      Session s(d);
      auto g = s.compile(graph);
      ASSERT_TRUE(g.has_value()) << g.error().to_string();
      auto out = g->run({NamedF32{"x", x, shape}});
      ASSERT_TRUE(out.has_value()) << out.error().to_string();
      const auto next = (*out)[0].as<int32_t>();
      EXPECT_EQ(next[0], 5);
      EXPECT_EQ(next[1], -1);
      EXPECT_EQ(next[2], -1);
      EXPECT_EQ(next[3], 9);
    }
  }
}

}  // namespace
}  // namespace rlx
