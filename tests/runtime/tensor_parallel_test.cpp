// Tensor-parallel groups on the CPU: device group parsing, the host communicator's
// collectives (and abort, so a failed rank never hangs its peers), and a group session
// running a graph with collectives whose weights the group splits per rank.
#include <gtest/gtest.h>

#include <thread>

#include "rlx/base/half.h"
#include "rlx/runtime/communicator.h"
#include "rt_util.h"

namespace rlx {
namespace {

using ir::DType;
using namespace rt_test;

const std::vector<int64_t> kShape23{2, 3};

TEST(DeviceGroup, ParsesConsecutiveOrdinals) {
  auto g = Device::parse("cuda:0,1");
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(g->kind, DeviceKind::kCuda);
  EXPECT_EQ(g->ordinal, 0);
  EXPECT_EQ(g->count, 2);
  EXPECT_EQ(g->to_string(), "cuda:0,1");
  EXPECT_EQ(g->rank(1).to_string(), "cuda:1");
  EXPECT_EQ(Device::parse("cpu:0,1,2,3")->count, 4);
  EXPECT_EQ(Device::parse("cpu")->count, 1);
  auto gap = Device::parse("cuda:0,2");
  ASSERT_FALSE(gap);
  EXPECT_NE(gap.error().message().find("consecutive"), std::string::npos) << gap.error().message();
  EXPECT_FALSE(Device::parse("cuda:0,"));
  EXPECT_FALSE(Device::parse("cuda:0,x"));
  EXPECT_FALSE(Device::parse("metal:0,1"));
}

TEST(HostCommunicator, SumsAndGathersAcrossThreads) {
  constexpr int kWorld = 3;
  auto comms = HostCommunicator::create_group(kWorld);
  ASSERT_EQ(comms.size(), size_t{kWorld});
  std::vector<std::vector<float>> bufs(kWorld);
  std::vector<std::vector<uint16_t>> halves(kWorld);
  std::vector<std::vector<int32_t>> gathered(kWorld, std::vector<int32_t>(2 * kWorld));
  std::vector<Status> status(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      bufs[static_cast<size_t>(r)] = {float(r), 1.0f, -2.0f * float(r), 0.5f, 7.0f};
      halves[static_cast<size_t>(r)] = {f32_to_f16_bits(0.25f * float(r + 1))};
      const int32_t mine[2] = {10 * r, 10 * r + 1};
      Status s = comms[static_cast<size_t>(r)]->all_reduce_sum(bufs[static_cast<size_t>(r)].data(), 5, DType::F32);
      if (s.ok())
        s = comms[static_cast<size_t>(r)]->all_reduce_sum(halves[static_cast<size_t>(r)].data(), 1, DType::F16);
      if (s.ok())
        s = comms[static_cast<size_t>(r)]->all_gather(mine, gathered[static_cast<size_t>(r)].data(), sizeof(mine));
      status[static_cast<size_t>(r)] = s;
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(status[static_cast<size_t>(r)].ok()) << status[static_cast<size_t>(r)].error().to_string();
    EXPECT_EQ(bufs[static_cast<size_t>(r)], (std::vector<float>{3.0f, 3.0f, -6.0f, 1.5f, 21.0f}));
    EXPECT_EQ(f16_bits_to_f32(halves[static_cast<size_t>(r)][0]), 1.5f);
    EXPECT_EQ(gathered[static_cast<size_t>(r)], (std::vector<int32_t>{0, 1, 10, 11, 20, 21}));
  }
  EXPECT_FALSE(comms[0]->all_reduce_sum(bufs[0].data(), 1, DType::I32).ok());
}

TEST(HostCommunicator, AbortReleasesWaitingRanks) {
  auto comms = HostCommunicator::create_group(2);
  float x = 1.0f;
  Status waited;
  std::thread peer([&] { waited = comms[1]->all_reduce_sum(&x, 1, DType::F32); });
  comms[0]->abort();  // rank 0 failed before its collective: rank 1 must not wait forever
  peer.join();
  ASSERT_FALSE(waited.ok());
  EXPECT_NE(waited.error().message().find("a rank failed"), std::string::npos) << waited.error().message();
  EXPECT_FALSE(comms[0]->all_reduce_sum(&x, 1, DType::F32).ok());  // closed until every rank returned
  // Once every rank is out of its collectives, the group recovers and runs again.
  for (auto& c : comms) EXPECT_TRUE(c->recover());
  float a = 2.0f, b = 3.0f;
  Status sb;
  std::thread second([&] { sb = comms[1]->all_reduce_sum(&b, 1, DType::F32); });
  const Status sa = comms[0]->all_reduce_sum(&a, 1, DType::F32);
  second.join();
  ASSERT_TRUE(sa.ok()) << sa.error().to_string();
  ASSERT_TRUE(sb.ok()) << sb.error().to_string();
  EXPECT_EQ(a, 5.0f);
  EXPECT_EQ(b, 5.0f);
}

// Rank r: y_r = x . W_r^T with W_r rows [2r, 2r+2) of a whole W[4, 3] the group splits;
// all_gather stacks the ranks' y; all_reduce sums x over the ranks.
ir::Graph group_graph() {
  ir::GraphBuilder b;
  const auto x = b.input("x", DType::F32, {2, 3});
  const auto w = b.param("w", DType::F32, {2, 3});
  b.output(b.all_gather(b.linear(x, w), 2), "y");
  b.output(b.all_reduce(x, 2), "sum");
  ir::Graph g = build(b);
  g.mutable_node(w).attrs = ir::ParamAttrs{"w", 0, 2};
  EXPECT_TRUE(ir::verify(g).ok());
  return g;
}

TEST(TensorParallelGroup, CpuGroupSplitsWeightsAndRunsCollectives) {
  auto session = Session::create(*Device::parse("cpu:0,1"), BackendOptions{1});
  ASSERT_TRUE(session) << session.error().to_string();
  EXPECT_EQ(session->backend()->target().tensor_parallel, 2);
  auto g = session->compile(group_graph());
  ASSERT_TRUE(g) << g.error().to_string();
  // The group takes the whole weight.
  EXPECT_EQ(g->manifest().params[0].type.shape.static_dims(), (std::vector<int64_t>{4, 3}));
  const std::vector<float> w = random_vec(12, 3), x = random_vec(6, 4);
  ASSERT_TRUE(g->set_param("w", w).ok());
  auto out = g->run({NamedF32{"x", x, kShape23}});
  ASSERT_TRUE(out) << out.error().to_string();
  const std::vector<float> y = as_f32((*out)[0]), sum = as_f32((*out)[1]);
  ASSERT_EQ(y.size(), 8u);  // [rank 2, row 2, 2]
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        double ref = 0;
        for (int k = 0; k < 3; ++k) ref += double(x[size_t(i * 3 + k)]) * w[size_t((2 * r + j) * 3 + k)];
        EXPECT_NEAR(y[size_t(r * 4 + i * 2 + j)], ref, 1e-5) << r << " " << i << " " << j;
      }
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(sum[i], 2.0f * x[i]);
  // A clone runs on the same group.
  auto c = g->clone();
  ASSERT_TRUE(c) << c.error().to_string();
  auto again = c->run({NamedF32{"x", x, kShape23}});
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(as_f32((*again)[0]), y);
}

TEST(TensorParallelGroup, CollectivesOutsideAGroupAreAClearError) {
  auto g = compile_cpu(group_graph());
  ASSERT_TRUE(g.set_param("w", random_vec(6, 1)).ok());
  const std::vector<float> x = random_vec(6, 2);
  auto out = g.run({NamedF32{"x", x, kShape23}});
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message().find("no communicator is bound"), std::string::npos) << out.error().message();
}

}  // namespace
}  // namespace rlx
