// Matmul weights pre-packed at set_param (CPU backend): the same results as packing per
// call for f32/f16/bf16 weights at prefill and decode shapes, a refresh when a param is
// set again, one packed copy for every executable bound from one ParamStore, and a tied
// weight (Gather + LM head) left unpacked and read in its own layout by the Gather, also
// after another executable packed it and released its file pages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "rlx/base/env.h"
#include "rlx/base/half.h"
#include "rlx/formats/mapped_file.h"
#include "rlx/runtime/model_pipeline.h"
#include "runtime/rt_util.h"

namespace rlx {
namespace {

using ir::DType;
using rt_test::max_abs_diff;
using rt_test::random_vec;

// Sessions with pre-packing on and off (distinct backend instances: the option is part
// of the registry key).
Session packing_session() { return Session(Device::cpu(), BackendOptions{2, true}); }
Session per_call_session() { return Session(Device::cpu(), BackendOptions{2, false}); }

const cpu_backend::CpuBackend& cpu_of(const Session& s) {
  return dynamic_cast<const cpu_backend::CpuBackend&>(*s.backend());
}

// `values` in `dt` (f32 bytes, or f16/bf16 bits).
std::vector<uint8_t> encode(const std::vector<float>& values, DType dt) {
  std::vector<uint8_t> out(values.size() * (dt == DType::F32 ? 4 : 2));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dt == DType::F32) {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t h = dt == DType::F16 ? f32_to_f16_bits(values[i]) : f32_to_bf16_bits(values[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

enum class Kind { kLinear, kSwiGLU, kMatMulKN };

// x [M, K] times weight(s) of dtype `dt`: linear (w [N, K]), SwiGLU (gate/up [N, K])
// or w [K, N] (a plain matmul for f32, relu(x . w) for half weights).
ir::Graph weight_graph(Kind kind, DType dt, int64_t M, int64_t K, int64_t N) {
  ir::GraphBuilder b;
  auto x = b.input("x", DType::F32, {M, K});
  ir::ValueId y = 0;
  if (kind == Kind::kLinear) {
    y = b.linear(x, b.param("w", dt, {N, K}));
  } else if (kind == Kind::kSwiGLU) {
    y = b.op(ir::OpKind::FusedSwiGLU, {x, b.param("w", dt, {N, K}), b.param("wu", dt, {N, K})},
             ir::FusedSwiGLUAttrs{true});
  } else if (dt == DType::F32) {
    y = b.matmul(x, b.param("w", dt, {K, N}));
  } else {  // MatMul takes one dtype: half weights [K, N] through the fused op
    ir::FusedMatMulAttrs a;
    a.transpose_b = false;
    a.act = ir::ActKind::Relu;
    y = b.op(ir::OpKind::FusedMatMulBiasAct, {x, b.param("w", dt, {K, N})}, a);
  }
  b.output(y, "y");
  return rt_test::build(b);
}

struct Weights {
  std::vector<uint8_t> w, wu;
};

Weights make_weights(Kind kind, DType dt, int64_t K, int64_t N, uint32_t seed) {
  Weights ws;
  ws.w = encode(random_vec(static_cast<size_t>(K * N), seed), dt);
  if (kind == Kind::kSwiGLU) ws.wu = encode(random_vec(static_cast<size_t>(K * N), seed + 1), dt);
  return ws;
}

void set_weights(CompiledGraph& g, Kind kind, DType dt, const Weights& ws) {
  ASSERT_TRUE(g.set_param_typed("w", ws.w, dt).ok());
  if (kind == Kind::kSwiGLU) {
    ASSERT_TRUE(g.set_param_typed("wu", ws.wu, dt).ok());
  }
}

std::vector<float> run_x(CompiledGraph& g, const std::vector<float>& x, int64_t M, int64_t K) {
  const int64_t shape[] = {M, K};
  auto out = g.run({NamedF32{"x", x, shape}});
  EXPECT_TRUE(out.has_value()) << out.error().to_string();
  return out ? rt_test::as_f32((*out)[0]) : std::vector<float>{};
}

TEST(PackedWeights, SameResultsAsPackingPerCall) {
  if (!env_config().cpu_prepack) GTEST_SKIP() << "RLX_CPU_PREPACK=0";
  Session on = packing_session(), off = per_call_session();
  ASSERT_TRUE(cpu_of(on).prepacks_weights());
  ASSERT_FALSE(cpu_of(off).prepacks_weights());
  // Decode (M = 1), the GEMV range (M <= 4) and prefill rows, with K and N that are not
  // multiples of the vector width or the panel width.
  const int64_t Ms[] = {1, 3, 5, 17, 64};
  const std::pair<int64_t, int64_t> KNs[] = {{37, 45}, {130, 97}, {256, 64}};
  for (Kind kind : {Kind::kLinear, Kind::kSwiGLU, Kind::kMatMulKN}) {
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      for (int64_t M : Ms) {
        for (auto [K, N] : KNs) {
          SCOPED_TRACE(testing::Message() << "kind " << static_cast<int>(kind) << " " << ir::dtype_name(dt) << " M "
                                          << M << " K " << K << " N " << N);
          const ir::Graph graph = weight_graph(kind, dt, M, K, N);
          auto a = on.compile(graph);
          auto b = off.compile(graph);
          ASSERT_TRUE(a.has_value()) << a.error().to_string();
          ASSERT_TRUE(b.has_value()) << b.error().to_string();
          const Weights ws = make_weights(kind, dt, K, N, static_cast<uint32_t>(M * 1000 + K));
          const int n_weights = kind == Kind::kSwiGLU ? 2 : 1;
          const int64_t packs = cpu_of(on).packed_weight_stats().packs;
          set_weights(*a, kind, dt, ws);
          set_weights(*b, kind, dt, ws);
          // set_param packs privately (the executable owns the bytes): not through the cache.
          EXPECT_EQ(cpu_of(on).packed_weight_stats().packs, packs);
          EXPECT_NE(a->executable().describe().find(fmt::format("{} weights pre-packed", n_weights)), std::string::npos)
              << a->executable().describe();
          EXPECT_NE(b->executable().describe().find("0 weights pre-packed"), std::string::npos)
              << b->executable().describe();
          // The same weights bound in place: packed through the backend's cache.
          ParamStore store;
          ASSERT_TRUE(
              store
                  .add("w", dt, kind == Kind::kMatMulKN ? std::vector<int64_t>{K, N} : std::vector<int64_t>{N, K}, ws.w)
                  .ok());
          if (kind == Kind::kSwiGLU) {
            ASSERT_TRUE(store.add("wu", dt, {N, K}, ws.wu).ok());
          }
          auto c = on.compile(graph);
          ASSERT_TRUE(c.has_value());
          ASSERT_TRUE(store.bind(*c).has_value());
          EXPECT_EQ(cpu_of(on).packed_weight_stats().packs, packs + n_weights);
          const auto x = random_vec(static_cast<size_t>(M * K), 7);
          const auto ya = run_x(*a, x, M, K), yb = run_x(*b, x, M, K), yc = run_x(*c, x, M, K);
          ASSERT_EQ(ya.size(), static_cast<size_t>(M * N));
          // On an AMX host, packed f16 / bf16 weights of a product with enough rows run on
          // the AMX tiles, which round the activations to bf16 (about 2^-9 relative a
          // term); per-call packing runs the AVX-512 panels with f32 activations.
          const bool amx = cpu::resolve_isa(cpu::isa_cap_from_name(env_config().cpu_isa)) == cpu::IsaLevel::kAmx && dt != DType::F32 &&
                           M >= env_config().cpu_amx_min_rows;
          const double tol = amx ? 3e-3 : 1e-4;
          EXPECT_LE(max_abs_diff(ya, yb), tol) << "prepacked (set_param) vs per-call";
          EXPECT_LE(max_abs_diff(yc, yb), tol) << "prepacked (bound in place) vs per-call";
        }
      }
    }
  }
}

TEST(PackedWeights, SetParamAgainRefreshesThePackedCopy) {
  if (!env_config().cpu_prepack) GTEST_SKIP() << "RLX_CPU_PREPACK=0";
  Session on = packing_session(), off = per_call_session();
  const int64_t M = 9, K = 40, N = 33;
  for (int64_t m : {int64_t{1}, M}) {
    const ir::Graph graph = weight_graph(Kind::kSwiGLU, DType::F16, m, K, N);
    auto a = on.compile(graph);
    auto b = off.compile(graph);
    ASSERT_TRUE(a.has_value() && b.has_value());
    const auto x = random_vec(static_cast<size_t>(m * K), 3);
    const Weights w1 = make_weights(Kind::kSwiGLU, DType::F16, K, N, 11);
    const Weights w2 = make_weights(Kind::kSwiGLU, DType::F16, K, N, 21);
    set_weights(*a, Kind::kSwiGLU, DType::F16, w1);
    const auto y1 = run_x(*a, x, m, K);
    // The executable owns its copy: set_param overwrites it in place, and the packed
    // copy must follow.
    set_weights(*a, Kind::kSwiGLU, DType::F16, w2);
    set_weights(*b, Kind::kSwiGLU, DType::F16, w2);
    const auto y2 = run_x(*a, x, m, K), ref = run_x(*b, x, m, K);
    EXPECT_LE(max_abs_diff(y2, ref), 1e-4);
    EXPECT_GT(max_abs_diff(y1, y2), 1e-2) << "the two weights must give different results";

    // A shared (zero-copy) weight replaced by set_param: the new bytes are used.
    ParamStore store;
    ASSERT_TRUE(store.add("w", DType::F16, {N, K}, w1.w).ok());
    ASSERT_TRUE(store.add("wu", DType::F16, {N, K}, w1.wu).ok());
    auto c = on.compile(graph);
    ASSERT_TRUE(c.has_value());
    auto bound = store.bind(*c);
    ASSERT_TRUE(bound.has_value());
    EXPECT_EQ(bound->shared, 2u);
    EXPECT_LE(max_abs_diff(run_x(*c, x, m, K), y1), 1e-4);
    set_weights(*c, Kind::kSwiGLU, DType::F16, w2);
    EXPECT_LE(max_abs_diff(run_x(*c, x, m, K), ref), 1e-4);

    // A clone shares the packed copy until one side sets the param again.
    auto d = a->clone();
    ASSERT_TRUE(d.has_value());
    set_weights(*d, Kind::kSwiGLU, DType::F16, w1);
    EXPECT_LE(max_abs_diff(run_x(*d, x, m, K), y1), 1e-4);
    EXPECT_LE(max_abs_diff(run_x(*a, x, m, K), ref), 1e-4);
  }
}

TEST(PackedWeights, OneStoreTwoExecutablesPackOnce) {
  if (!env_config().cpu_prepack) GTEST_SKIP() << "RLX_CPU_PREPACK=0";
  Session on = packing_session(), off = per_call_session();
  const int64_t K = 48, N = 70;
  const Weights ws = make_weights(Kind::kSwiGLU, DType::BF16, K, N, 5);
  ParamStore store;
  ASSERT_TRUE(store.add("w", DType::BF16, {N, K}, ws.w).ok());
  ASSERT_TRUE(store.add("wu", DType::BF16, {N, K}, ws.wu).ok());
  const auto before = cpu_of(on).packed_weight_stats();
  int64_t live = 0;
  {
    // A prefill-like and a decode-like executable of one model.
    auto prefill = on.compile(weight_graph(Kind::kSwiGLU, DType::BF16, 16, K, N));
    auto decode = on.compile(weight_graph(Kind::kSwiGLU, DType::BF16, 1, K, N));
    ASSERT_TRUE(prefill.has_value() && decode.has_value());
    ASSERT_TRUE(store.bind(*prefill).has_value());
    ASSERT_TRUE(store.bind(*decode).has_value());
    const auto after = cpu_of(on).packed_weight_stats();
    EXPECT_EQ(after.packs - before.packs, 2) << "gate and up packed once each";
    EXPECT_EQ(after.hits - before.hits, 2) << "the second executable reuses both";
    // Binding again (e.g. a recompiled bucket) packs nothing.
    ASSERT_TRUE(store.bind(*decode).has_value());
    EXPECT_EQ(cpu_of(on).packed_weight_stats().packs, after.packs);
    for (int64_t m : {int64_t{16}, int64_t{1}}) {
      auto ref = off.compile(weight_graph(Kind::kSwiGLU, DType::BF16, m, K, N));
      ASSERT_TRUE(ref.has_value());
      set_weights(*ref, Kind::kSwiGLU, DType::BF16, ws);
      const auto x = random_vec(static_cast<size_t>(m * K), 9);
      EXPECT_LE(max_abs_diff(run_x(m == 1 ? *decode : *prefill, x, m, K), run_x(*ref, x, m, K)), 1e-4);
    }
    live = cpu_of(on).packed_weight_stats().live;
  }
  // The packed copies live as long as an executable uses them.
  EXPECT_EQ(cpu_of(on).packed_weight_stats().live, live - 2);
}

// A weight read by another op besides the matmul (a tied embedding: Gather + LM head)
// is not packed: both layouts would stay resident. The table is a view of a file
// mapping, as models load it; a second graph that reads it only through a matmul packs
// it and releases its pages, and the Gather still reads the original rows afterwards.
TEST(PackedWeights, TiedWeightKeepsItsLayoutForOtherOps) {
  if (!env_config().cpu_prepack) GTEST_SKIP() << "RLX_CPU_PREPACK=0";
  const int64_t V = 300, D = 64, S = 5;
  const auto table = random_vec(static_cast<size_t>(V * D), 17);
  const std::vector<uint8_t> bytes = encode(table, DType::F16);
  const auto path = std::filesystem::temp_directory_path() / "rlx_packed_weights_test.bin";
  {
    std::ofstream f(path, std::ios::binary);
    // Leading bytes so that the table does not start on a page boundary.
    const std::vector<char> pad(1000, 0);
    f.write(pad.data(), static_cast<std::streamsize>(pad.size()));
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  auto mapped = formats::MappedFile::open(path.string());
  ASSERT_TRUE(mapped.has_value()) << mapped.error().to_string();
  auto owner = std::make_shared<const formats::MappedFile>(std::move(mapped).value());
  const ByteView view = ByteView::file_pages(owner->bytes().data() + 1000, bytes.size(), owner);
  std::filesystem::remove(path);  // the mapping keeps the file's pages
  ParamStore store;
  ASSERT_TRUE(store.add_shared("emb", SharedParam{DType::F16, {V, D}, view}).ok());

  ir::GraphBuilder b;
  auto ids = b.input("ids", DType::I32, {S});
  auto emb = b.param("emb", DType::F16, {V, D});
  auto x = b.cast(b.gather(emb, ids, 0), DType::F32);  // [S, D]
  b.output(x, "rows");
  b.output(b.linear(x, emb), "logits");  // [S, V]
  const ir::Graph tied = rt_test::build(b);

  Session on = packing_session(), off = per_call_session();
  const int64_t packs = cpu_of(on).packed_weight_stats().packs;
  auto a = on.compile(tied);
  auto r = off.compile(tied);
  ASSERT_TRUE(a.has_value() && r.has_value());
  auto bound = store.bind(*a);
  ASSERT_TRUE(bound.has_value());
  EXPECT_EQ(bound->shared, 1u);
  EXPECT_EQ(cpu_of(on).packed_weight_stats().packs, packs) << "a tied weight is not packed";
  EXPECT_EQ(a->executable().param_data(0), view.data()) << "the table stays bound in place";
  ASSERT_TRUE(store.bind(*r).has_value());

  // The LM head alone: packed (once), and the table's file pages released.
  auto head = on.compile(weight_graph(Kind::kLinear, DType::F16, S, D, V));
  auto head_ref = off.compile(weight_graph(Kind::kLinear, DType::F16, S, D, V));
  ASSERT_TRUE(head.has_value() && head_ref.has_value());
  ParamStore head_store;
  ASSERT_TRUE(head_store.add_shared("w", SharedParam{DType::F16, {V, D}, view}).ok());
  ASSERT_TRUE(head_store.bind(*head).has_value());
  ASSERT_TRUE(head_store.bind(*head_ref).has_value());
  EXPECT_EQ(cpu_of(on).packed_weight_stats().packs, packs + 1);
  const auto xs = random_vec(static_cast<size_t>(S * D), 4);
  EXPECT_LE(max_abs_diff(run_x(*head, xs, S, D), run_x(*head_ref, xs, S, D)), 1e-4);

  const std::vector<int32_t> tok{0, 299, 7, 150, 7};
  const int64_t shape[] = {S};
  const NamedTensorView in[] = {{"ids", TensorView{DType::I32, shape, tok.data()}}};
  auto ya = a->run(in);
  auto yr = r->run(in);
  ASSERT_TRUE(ya.has_value() && yr.has_value());
  const auto rows = rt_test::as_f32((*ya)[0]);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t d = 0; d < D; ++d)
      EXPECT_EQ(rows[static_cast<size_t>(s * D + d)],
                f16_bits_to_f32(f32_to_f16_bits(table[static_cast<size_t>(tok[s] * D + d)])));
  EXPECT_LE(max_abs_diff(rt_test::as_f32((*ya)[1]), rt_test::as_f32((*yr)[1])), 1e-4);
}

// The folder of packed copies: the first cache packs a file-mapped weight (one with a
// file key) straight into a folder file; a second cache, as a second process would,
// maps that file instead of packing, byte for byte the same panels. A file that does
// not match (truncated, changed on disk, or made for other bytes under the same name)
// is never used; a
// weight without a file key, or a cache without a folder, writes nothing.
TEST(PackedWeights, FolderKeepsPackedCopiesAcrossCaches) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("rlx_packed_folder_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const int64_t K = 96, N = 70;
  const std::vector<uint8_t> bytes = encode(random_vec(static_cast<size_t>(K * N), 23), DType::F16);
  const fs::path file = dir.string() + ".bin";
  {
    std::ofstream f(file, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  auto mapped = formats::MappedFile::open(file.string());
  ASSERT_TRUE(mapped.has_value()) << mapped.error().to_string();
  auto owner = std::make_shared<const formats::MappedFile>(std::move(mapped).value());
  const std::string file_key = owner->identity() + "@0";
  const ByteView view = ByteView::file_pages(owner->bytes().data(), bytes.size(), owner, file_key);
  const cpu::KernelContext ctx{nullptr, cpu::IsaLevel::kAmx};
  cpu_backend::PackRequest req;
  req.k = K;
  req.n = N;
  req.type = cpu::WeightType::kF16;
  const auto want = cpu_backend::PackedWeightCache::pack(ctx, bytes.data(), req);
  auto same = [&](const cpu::PackedB& p) {
    return p.bytes() == want->bytes() && p.nr() == want->nr() && std::memcmp(p.data(), want->data(), p.bytes()) == 0;
  };
  auto folder_files = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".rlxpack" ? 1 : 0;
    return n;
  };

  {
    cpu_backend::PackedWeightCache first(dir.string());
    auto p = first.get(ctx, view, 0, req);
    EXPECT_TRUE(same(*p));
    EXPECT_EQ(first.stats().packs, 1);
    EXPECT_EQ(first.stats().disk_writes, 1);
    EXPECT_EQ(folder_files(), 1);
  }
  {
    cpu_backend::PackedWeightCache second(dir.string());
    auto p = second.get(ctx, view, 0, req);
    EXPECT_TRUE(same(*p));
    EXPECT_EQ(second.stats().packs, 0);
    EXPECT_EQ(second.stats().disk_hits, 1);
  }
  // One payload byte changed on disk: the checksum refuses the file, the weight is
  // packed again (the right panels) and the file rewritten, which the next cache maps.
  for (const auto& e : fs::directory_iterator(dir)) {
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(4096 + 10);
    const char c = static_cast<char>(f.get());
    f.seekp(4096 + 10);
    f.put(static_cast<char>(c ^ 0x20));
  }
  {
    cpu_backend::PackedWeightCache damaged(dir.string());
    EXPECT_TRUE(same(*damaged.get(ctx, view, 0, req)));
    EXPECT_EQ(damaged.stats().disk_hits, 0);
    EXPECT_EQ(damaged.stats().packs, 1);
    EXPECT_EQ(damaged.stats().disk_writes, 1);
  }
  {
    cpu_backend::PackedWeightCache after(dir.string());
    EXPECT_TRUE(same(*after.get(ctx, view, 0, req)));
    EXPECT_EQ(after.stats().disk_hits, 1);
  }
  {
    // The same bytes under another name (another file or offset): not this copy.
    cpu_backend::PackedWeightCache other_process(dir.string());
    const ByteView other = ByteView::file_pages(owner->bytes().data(), bytes.size(), owner, file_key + "0");
    EXPECT_TRUE(same(*other_process.get(ctx, other, 0, req)));
    EXPECT_EQ(other_process.stats().packs, 1);
    EXPECT_EQ(folder_files(), 2);
  }
  // Truncate every folder file: each is refused and packed again.
  for (const auto& e : fs::directory_iterator(dir)) fs::resize_file(e.path(), 5000);
  {
    cpu_backend::PackedWeightCache third(dir.string());
    EXPECT_TRUE(same(*third.get(ctx, view, 0, req)));
    EXPECT_EQ(third.stats().disk_hits, 0);
    EXPECT_EQ(third.stats().packs, 1);
  }
  // A file whose header names other bytes (as a hash collision would): refused.
  for (const auto& e : fs::directory_iterator(dir)) {
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);
    f.put('#');
  }
  {
    cpu_backend::PackedWeightCache fourth(dir.string());
    EXPECT_TRUE(same(*fourth.get(ctx, view, 0, req)));
    EXPECT_EQ(fourth.stats().disk_hits, 0);
  }
  // A temporary file left by a process that is gone (killed while packing) is deleted
  // when a file is next written; the files in use stay.
  const fs::path stale = dir / "0123456789abcdef.rlxpack.tmp.999999999.0";
  { std::ofstream(stale) << "half a packing"; }
  {
    cpu_backend::PackedWeightCache fifth(dir.string());
    const ByteView renamed = ByteView::file_pages(owner->bytes().data(), bytes.size(), owner, file_key + "1");
    EXPECT_TRUE(same(*fifth.get(ctx, renamed, 0, req)));
    EXPECT_EQ(fifth.stats().disk_writes, 1);
    EXPECT_FALSE(fs::exists(stale));
  }
  // No file key, or no folder: nothing written.
  fs::remove_all(dir);
  {
    cpu_backend::PackedWeightCache keyless(dir.string()), no_folder;
    const ByteView anonymous = ByteView::file_pages(owner->bytes().data(), bytes.size(), owner);
    EXPECT_TRUE(same(*keyless.get(ctx, anonymous, 0, req)));
    EXPECT_TRUE(same(*no_folder.get(ctx, view, 0, req)));
    EXPECT_EQ(keyless.stats().disk_writes + no_folder.stats().disk_writes, 0);
    EXPECT_FALSE(fs::exists(dir));
  }
  fs::remove(file);
}

}  // namespace
}  // namespace rlx
