// Device memory the executables of a model share on CUDA. Run memory
// (Executable::run_memory / share_run_memory): executables that run in turn hold one
// arena / scratch / workspace block, as large as the largest; a sharer that needs more
// replaces the block and the others follow it (their captured graphs re-made), with
// results equal to each executable alone. Weights bound from the same host bytes
// (set_param_shared) are uploaded once; a later set_param gives that executable its own
// copy. The CPU backend and tensor-parallel groups (a block per rank) share their run
// memory the same way. CUDA parts skip without a device.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "cuda/cuda_test_util.h"

namespace rlx {
namespace {

using cuda_test::f32;
using ir::DType;
using ir::GraphBuilder;

// y = silu(x . w) . w2 over `rows` rows: a graph whose arena grows with `rows`.
ir::Graph mlp(int64_t rows) {
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {rows, 64});
  auto w = b.param("w", DType::F32, {64, 256});
  auto w2 = b.param("w2", DType::F32, {256, 64});
  b.output(b.matmul(b.activation(ir::ActKind::Silu, b.matmul(x, w)), w2), "y");
  auto g = b.build();
  EXPECT_TRUE(g.has_value()) << g.error().to_string();
  return std::move(*g);
}

CompiledGraph compile_mlp(const Session& s, int64_t rows) {
  auto cg = s.compile(mlp(rows));
  EXPECT_TRUE(cg.has_value()) << cg.error().to_string();
  const Tensor w = f32({64, 256}, 1), w2 = f32({256, 64}, 2);
  EXPECT_TRUE(cg->set_param("w", *w.to_f32()).ok());
  EXPECT_TRUE(cg->set_param("w2", *w2.to_f32()).ok());
  return std::move(*cg);
}

std::vector<float> run_y(CompiledGraph& cg, const Tensor& x) {
  auto out = cg.run({{"x", x.view()}});
  EXPECT_TRUE(out.has_value()) << out.error().to_string();
  return out ? *(*out)[0].to_f32() : std::vector<float>{};
}

// Three executables of one backend share run memory: it grows to the largest, and each
// gives what an unshared one gives, run in any order (graph replay included on CUDA).
void check_sharers(const Device& device) {
  auto s = Session::create(device);
  ASSERT_TRUE(s.has_value());
  CompiledGraph small = compile_mlp(*s, 4), large = compile_mlp(*s, 512), alone_small = compile_mlp(*s, 4),
                alone_large = compile_mlp(*s, 512);
  const Tensor xs = f32({4, 64}, 3), xl = f32({512, 64}, 4);
  const std::vector<float> want_small = run_y(alone_small, xs), want_large = run_y(alone_large, xl);

  std::shared_ptr<RunMemory> m = small.run_memory();
  ASSERT_TRUE(m);
  const int64_t small_bytes = m->bytes();
  EXPECT_LT(cuda_test::rel_l2(run_y(small, xs), want_small), 1e-6);  // (its steps now point into the block)
  ASSERT_TRUE(large.share_run_memory(m).ok());
  EXPECT_GT(m->bytes(), small_bytes) << "the block grew to the larger sharer";
  EXPECT_EQ(large.run_memory().get(), m.get());
  // In turn, several times each (on CUDA the second run of a shape replays a captured
  // graph; the small one re-points its steps at the grown block first).
  for (int round = 0; round < 3; ++round) {
    EXPECT_LT(cuda_test::rel_l2(run_y(small, xs), want_small), 1e-6) << "round " << round;
    EXPECT_LT(cuda_test::rel_l2(run_y(large, xl), want_large), 1e-6) << "round " << round;
  }
  // Committed back to back without waiting: the second waits for the first's work.
  for (int round = 0; round < 3; ++round) {
    const std::vector<NamedTensorView> in_l{{"x", xl.view()}}, in_s{{"x", xs.view()}};
    ASSERT_TRUE(large.commit_no_wait(in_l).ok());
    ASSERT_TRUE(small.commit_no_wait(in_s).ok());
    auto ys = small.sync_pending();
    auto yl = large.sync_pending();
    ASSERT_TRUE(ys && yl);
    EXPECT_LT(cuda_test::rel_l2(*(*ys)[0].to_f32(), want_small), 1e-6) << "pipelined round " << round;
    EXPECT_LT(cuda_test::rel_l2(*(*yl)[0].to_f32(), want_large), 1e-6) << "pipelined round " << round;
  }
  // A smaller sharer joining does not shrink or move the block.
  CompiledGraph other = compile_mlp(*s, 8);
  const int64_t before = m->bytes();
  ASSERT_TRUE(other.share_run_memory(m).ok());
  EXPECT_EQ(m->bytes(), before);
  EXPECT_LT(cuda_test::rel_l2(run_y(large, xl), want_large), 1e-6);
  // Run memory of another kind is refused.
  struct Foreign final : RunMemory {
    int64_t bytes() const override { return 1; }
  };
  EXPECT_FALSE(other.share_run_memory(std::make_shared<Foreign>()).ok());
  EXPECT_FALSE(other.share_run_memory(nullptr).ok());
}

TEST(CudaRunMemory, SharersRunInTurnAndMatchAlone) {
  REQUIRE_CUDA();
  check_sharers(Device::cuda());
}

TEST(CudaRunMemory, CpuSharersRunInTurnAndMatchAlone) { check_sharers(Device::cpu()); }

// A tensor-parallel group's executables share one block per rank the same way.
TEST(CudaRunMemory, CpuGroupSharersRunInTurnAndMatchAlone) { check_sharers(*Device::parse("cpu:0,1")); }

TEST(CudaRunMemory, GroupSharersRunInTurnAndMatchAlone) {
  if (!is_available(Device::cuda(1))) GTEST_SKIP() << "fewer than two CUDA devices: skipped";
  check_sharers(*Device::parse("cuda:0,1"));
}

// Free device memory now (cudaMemGetInfo), in bytes.
int64_t device_free() {
  size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return static_cast<int64_t>(free);
}

TEST(CudaRunMemory, WeightsOfTheSameBytesAreUploadedOnce) {
  REQUIRE_CUDA();
  auto s = Session::create(Device::cuda());
  ASSERT_TRUE(s.has_value());
  // w of 64 x 65536 f32 = 16 MiB, held once on the host; w2 small.
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {4, 64});
  auto w = b.param("w", DType::F32, {64, 65536});
  b.output(b.matmul(x, w), "y");
  auto g = b.build();
  ASSERT_TRUE(g.has_value());
  const Tensor wt = f32({64, 65536}, 7), other = f32({64, 65536}, 8), xt = f32({4, 64}, 9);
  auto host = std::make_shared<AlignedBuffer>(wt.bytes().size());
  std::memcpy(host->data(), wt.bytes().data(), host->size());
  const ByteView view = ByteView::of(host);
  auto first = s->compile(*g), second = s->compile(*g);
  ASSERT_TRUE(first && second);
  ASSERT_TRUE(first->executable().set_param_shared(0, view).ok());
  const std::vector<float> want = run_y(*first, xt);
  const int64_t before = device_free();
  ASSERT_TRUE(second->executable().set_param_shared(0, view).ok());
  EXPECT_LT(before - device_free(), int64_t{8} << 20) << "the second executable uploaded the weight again";
  auto run = [&](CompiledGraph& cg) {
    auto out = cg.run({{"x", xt.view()}});
    EXPECT_TRUE(out.has_value()) << out.error().to_string();
    return out ? *(*out)[0].to_f32() : std::vector<float>{};
  };
  EXPECT_LT(cuda_test::rel_l2(run(*second), want), 1e-6);
  // A later set_param gives the second its own copy: the first keeps the shared bytes.
  ASSERT_TRUE(second->set_param("w", *other.to_f32()).ok());
  EXPECT_LT(cuda_test::rel_l2(run(*first), want), 1e-6);
  EXPECT_GT(cuda_test::rel_l2(run(*second), want), 1e-2);
}

// On a group, a weight split along its inner axis (a row-parallel linear) is copied into
// one part per rank; the group's second executable bound to the same whole bytes gets
// the same parts, which CUDA then does not upload again (measured on cuda:0 when
// `measure_cuda0`).
void check_group_parts(const Device& group, bool measure_cuda0) {
  auto s = Session::create(group);
  ASSERT_TRUE(s.has_value()) << s.error().to_string();
  // Rank r: y_r = x . w_r with w_r columns [32768 r, 32768 (r + 1)) of w[64, 65536] (8 MiB
  // a part, not contiguous in w); all_gather stacks the ranks' y.
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {4, 64});
  auto w = b.param("w", DType::F32, {64, 32768});
  b.output(b.all_gather(b.matmul(x, w), 2), "y");
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  g->mutable_node(w).attrs = ir::ParamAttrs{"w", 1, 2};
  const Tensor wt = f32({64, 65536}, 7), xt = f32({4, 64}, 9);
  auto host = std::make_shared<AlignedBuffer>(wt.bytes().size());
  std::memcpy(host->data(), wt.bytes().data(), host->size());
  const ByteView view = ByteView::of(host);
  auto first = s->compile(*g), second = s->compile(*g);
  ASSERT_TRUE(first && second) << (first ? second.error().to_string() : first.error().to_string());
  ASSERT_TRUE(first->executable().set_param_shared(0, view).ok());
  auto run = [&](CompiledGraph& cg) {
    auto out = cg.run({{"x", xt.view()}});
    EXPECT_TRUE(out.has_value()) << out.error().to_string();
    return out ? *(*out)[0].to_f32() : std::vector<float>{};
  };
  const std::vector<float> want = run(*first);
  // The reference: y[r, i, j] = sum_k x[i, k] w[k, 32768 r + j].
  const std::vector<float> xs = *xt.to_f32(), ws = *wt.to_f32();
  ASSERT_EQ(want.size(), size_t{2 * 4 * 32768});
  std::vector<float> ref(want.size());
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 32768; ++j) {
        double acc = 0;
        for (int k = 0; k < 64; ++k) acc += double(xs[size_t(i * 64 + k)]) * ws[size_t(k * 65536 + 32768 * r + j)];
        ref[size_t((r * 4 + i) * 32768 + j)] = static_cast<float>(acc);
      }
  EXPECT_LT(cuda_test::rel_l2(want, ref), 1e-5);
  int64_t before = 0;
  if (measure_cuda0) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    before = device_free();
  }
  ASSERT_TRUE(second->executable().set_param_shared(0, view).ok());
  if (measure_cuda0) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    EXPECT_LT(before - device_free(), int64_t{4} << 20) << "the second executable uploaded rank 0's part again";
  }
  EXPECT_LT(cuda_test::rel_l2(run(*second), want), 1e-6);
}

TEST(CudaRunMemory, CpuGroupWeightPartsSplitAlongTheInnerAxis) {
  check_group_parts(*Device::parse("cpu:0,1"), /*measure_cuda0=*/false);
}

TEST(CudaRunMemory, GroupWeightPartsAreUploadedOnce) {
  if (!is_available(Device::cuda(1))) GTEST_SKIP() << "fewer than two CUDA devices: skipped";
  check_group_parts(*Device::parse("cuda:0,1"), /*measure_cuda0=*/true);
}

}  // namespace
}  // namespace rlx
