// Paged KV caches on CUDA (PagedDeviceMemory, LanguageModel's KV memory): a large cache
// is a reserved address range that device memory backs chunk by chunk as sequences
// grow; the results equal caches allocated whole, a sequence given back frees its
// memory, a copied prefix lands in backed rows, a run the full card cannot back fails
// for memory and runs once memory is back, and a graph run directly (nobody backing its
// handle) behaves as if the handle were not paged. Skipped without a device.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "rlx/models/language_model.h"
#include "rlx/models/synth.h"
#ifdef RLX_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace rlx {
namespace {

using cuda_test::f32;
using cuda_test::rel_l2;
using ir::DType;
using ir::GraphBuilder;

std::string synth_llama(const char* tag) {
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("rlx_cuda_paged_{}_{}.gguf", tag, ::getpid())).string();
  models::SynthOptions so;
  so.type = "f32";
  const Status st = models::write_synthetic_gguf(so, path);
  EXPECT_TRUE(st.ok()) << path << ": " << st.error().to_string();
  return path;
}

std::vector<std::vector<int32_t>> prompt_for(int64_t seq, int64_t batch) {
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(batch));
  for (int32_t i = 0; i < 9 + seq; ++i)
    tokens[static_cast<size_t>(seq)].push_back(static_cast<int32_t>(3 + 37 * i + seq) % 500);
  return tokens;
}

TEST(CudaPagedKv, CachesTakeMemoryAsSequencesGrowAndMatchWholeCaches) {
  REQUIRE_CUDA();
  const std::string path = synth_llama("grow");
  constexpr int64_t kBatch = 4;
  models::LoadOptions lo;
  lo.device = Device::cuda();
  lo.batch = kBatch;
  lo.ctx = 65536;  // caches of 4 x 65536 rows: reserved, paged
  lo.compile_cache = false;
  models::LoadOptions small = lo;
  small.ctx = 64;  // small caches: one block, backed whole
  auto m = models::LanguageModel::load(path, lo);
  auto whole = models::LanguageModel::load(path, small);
  ASSERT_TRUE(m && whole);
  auto& pm = **m;
  auto& wm = **whole;

  ASSERT_TRUE(pm.forward_batch(prompt_for(0, kBatch), false));
  ASSERT_TRUE(wm.forward_batch(prompt_for(0, kBatch), false));
  const models::KvMemoryState one = pm.kv_memory_state();
  if (!one.paged) GTEST_SKIP() << "this device has no virtual memory management (or RLX_CUDA_PAGED_HANDLES=0)";
  EXPECT_GT(one.resident, 0);
  EXPECT_LT(one.resident, one.reserved / kBatch) << "one sequence of four took its whole share";
  EXPECT_GE(one.resident, one.backed) << "backed rows without memory under them";

  for (int64_t b = 1; b < kBatch; ++b) {
    auto p = pm.forward_batch(prompt_for(b, kBatch), false);
    auto w = wm.forward_batch(prompt_for(b, kBatch), false);
    ASSERT_TRUE(p && w) << (p ? w.error().to_string() : p.error().to_string());
    EXPECT_LT(rel_l2((*p)[static_cast<size_t>(b)], (*w)[static_cast<size_t>(b)]), 1e-5) << "sequence " << b;
  }
  // Greedy decoding of all four through captured graphs: the same tokens.
  std::vector<std::vector<int32_t>> step(kBatch, std::vector<int32_t>{42});
  for (int i = 0; i < 8; ++i) {
    auto p = pm.forward_batch_greedy(step);
    auto w = wm.forward_batch_greedy(step);
    ASSERT_TRUE(p && w);
    EXPECT_EQ(*p, *w) << "step " << i;
    for (int64_t b = 0; b < kBatch; ++b) step[static_cast<size_t>(b)] = {(*p)[static_cast<size_t>(b)]};
  }
  const models::KvMemoryState all = pm.kv_memory_state();
  EXPECT_LT(all.resident, all.reserved / 2);

  // A sequence given back frees its chunks; the others go on unchanged.
  ASSERT_TRUE(pm.release_sequence(1).ok());
  ASSERT_TRUE(wm.release_sequence(1).ok());
  EXPECT_LT(pm.kv_memory_state().resident, all.resident);
  std::vector<std::vector<int32_t>> next(kBatch);
  next[2] = {7};
  auto p = pm.forward_batch(next, false);
  auto w = wm.forward_batch(next, false);
  ASSERT_TRUE(p && w);
  EXPECT_LT(rel_l2((*p)[2], (*w)[2]), 1e-5);

  // A prefix copied into the freed sequence lands in rows backed for it.
  ASSERT_TRUE(pm.copy_prefix(0, 1, 5).ok());
  ASSERT_TRUE(wm.copy_prefix(0, 1, 5).ok());
  std::vector<std::vector<int32_t>> rest(kBatch);
  rest[1] = {11, 12, 13};
  p = pm.forward_batch(rest, false);
  w = wm.forward_batch(rest, false);
  ASSERT_TRUE(p && w);
  EXPECT_LT(rel_l2((*p)[1], (*w)[1]), 1e-5);
  std::filesystem::remove(path);
}

// A KV budget on the device: a run past it is refused before anything is mapped.
TEST(CudaPagedKv, BudgetRefusesARun) {
  REQUIRE_CUDA();
  const std::string path = synth_llama("budget");
  models::LoadOptions lo;
  lo.device = Device::cuda();
  lo.batch = 4;
  lo.ctx = 65536;
  lo.compile_cache = false;
  lo.kv_memory = 1;  // less than one page
  auto m = models::LanguageModel::load(path, lo);
  ASSERT_TRUE(m);
  auto out = (*m)->forward_batch(prompt_for(0, 4), false);
  if (out && !(*m)->kv_memory_state().paged) GTEST_SKIP() << "caches not paged on this device";
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code(), ErrorCode::kResourceExhausted) << out.error().to_string();
  std::filesystem::remove(path);
}

// The card itself running out while caches grow (no KV budget; the rest of the card
// taken by another allocation): the run that needs a new chunk fails for memory before
// anything ran (kResourceExhausted, kv_memory_failed, the sequence's tokens unchanged),
// and once memory is free again the same run succeeds with the logits of a model that
// never failed: the server's retry (make room, run the step again) relies on this.
TEST(CudaPagedKv, DeviceOutOfMemoryFailsARunThatRunsOnceMemoryIsBack) {
  REQUIRE_CUDA();
#ifdef RLX_HAVE_CUDA
  const std::string path = synth_llama("oom");
  constexpr int64_t kBatch = 4, kChunk = 2048;
  models::LoadOptions lo;
  lo.device = Device::cuda();
  lo.batch = kBatch;
  lo.ctx = 65536;
  lo.compile_cache = false;
  lo.compact_rows = false;  // one executable for every run below: nothing compiles while the card is full
  auto m = models::LanguageModel::load(path, lo);
  auto ref = models::LanguageModel::load(path, lo);
  ASSERT_TRUE(m && ref);
  std::vector<int32_t> chunk(static_cast<size_t>(kChunk));
  for (int64_t i = 0; i < kChunk; ++i) chunk[static_cast<size_t>(i)] = static_cast<int32_t>(3 + (i * 37) % 480);
  // Every sequence's first rows, through the executable of four sequences x kChunk rows.
  std::vector<std::vector<int32_t>> first(kBatch);
  first[0] = chunk;
  first[3] = {5};
  ASSERT_TRUE((*m)->forward_batch(first, false));
  ASSERT_TRUE((*ref)->forward_batch(first, false));
  const models::KvMemoryState st = (*m)->kv_memory_state();
  if (!st.paged) GTEST_SKIP() << "caches not paged on this device";
  // Take the card: blocks from 1 GiB down to 1 MiB while they can be had, so less than
  // one 2 MiB chunk stays free (cudaMalloc's failures are cleared as they come).
  std::vector<void*> hog;
  for (size_t bytes = size_t{1} << 30; bytes >= (size_t{1} << 20); bytes /= 2)
    for (void* p = nullptr; cudaMalloc(&p, bytes) == cudaSuccess; p = nullptr) hog.push_back(p);
  (void)cudaGetLastError();
  auto give_back = [&] {
    for (void* p : hog) (void)cudaFree(p);
    hog.clear();
  };
  std::vector<std::vector<int32_t>> grow(kBatch);
  grow[1] = chunk;
  std::optional<Error> failure;
  const int64_t runs = st.page_rows / kChunk + 2;  // enough to need a chunk past the first
  for (int64_t r = 0; r < runs && !failure; ++r) {
    const int64_t before = (*m)->n_past(1);
    auto out = (*m)->forward_batch(grow, false);
    if (out) {
      if (!(*ref)->forward_batch(grow, false)) {
        give_back();
        FAIL() << "the reference model failed beside it";
      }
      continue;
    }
    EXPECT_EQ((*m)->n_past(1), before) << "a failed run moved the sequence";
    failure = out.error();
  }
  give_back();
  ASSERT_TRUE(failure) << "no run needed memory the card did not have (" << runs << " runs of " << kChunk << ")";
  EXPECT_EQ(failure->code(), ErrorCode::kResourceExhausted) << failure->to_string();
  EXPECT_TRUE((*m)->kv_memory_failed());
  auto again = (*m)->forward_batch(grow, false);
  auto want = (*ref)->forward_batch(grow, false);
  ASSERT_TRUE(again && want) << (again ? want.error().to_string() : again.error().to_string());
  EXPECT_FALSE((*m)->kv_memory_failed());
  EXPECT_LT(rel_l2((*again)[1], (*want)[1]), 1e-5);
  std::filesystem::remove(path);
#endif
}

// A large handle of a graph run directly (nobody backs it) is backed whole at the first
// run: update_slice writes far into it and read_handle reads it back.
TEST(CudaPagedKv, UnmanagedLargeHandleIsBackedWhole) {
  REQUIRE_CUDA();
  constexpr int64_t kRows = 8192, kWidth = 512;  // 16 MiB: a paged handle
  GraphBuilder b;
  auto cache = b.handle("cache", DType::F32, {kRows, kWidth});
  auto src = b.input("src", DType::F32, {2, kWidth});
  auto start = b.input("start", DType::I32, {1});
  auto upd = b.update_slice(cache, src, start, 0);
  b.output(b.reduce(ir::ReduceKind::Sum, upd, {1}), "rowsum");
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  auto s = Session::create(Device::cuda());
  ASSERT_TRUE(s.has_value());
  auto cg = s->compile(*g);
  ASSERT_TRUE(cg.has_value()) << cg.error().to_string();
  const Tensor x = f32({2, kWidth}, 5);
  const int32_t start_row = static_cast<int32_t>(kRows - 2);
  std::vector<uint8_t> start_bytes(4);
  std::memcpy(start_bytes.data(), &start_row, 4);
  const Tensor at(DType::I32, {1}, std::move(start_bytes));
  auto out = cg->run({{"src", x.view()}, {"start", at.view()}});
  ASSERT_TRUE(out.has_value()) << out.error().to_string();
  auto h = cg->read_handle("cache");
  ASSERT_TRUE(h.has_value());
  const std::vector<float> hv = *h->to_f32(), xv = *x.to_f32();
  for (int64_t j = 0; j < 2 * kWidth; ++j)
    ASSERT_EQ(hv[static_cast<size_t>((kRows - 2) * kWidth + j)], xv[static_cast<size_t>(j)]) << j;
  for (int64_t j = 0; j < kWidth; ++j) ASSERT_EQ(hv[static_cast<size_t>(j)], 0.0f) << j;
}

}  // namespace
}  // namespace rlx
