// AOT disk cache: entry round trip, a fresh pipeline loading from disk without lowering,
// passes or planning, every corruption case (flipped byte, truncation, stale version,
// foreign device or key, garbage) falling back to a compile that rewrites the entry, and
// concurrent writers never producing a partial entry.
#include "rlx/runtime/aot_cache.h"

#include <gtest/gtest.h>

#include <functional>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "rlx/base/hash.h"
#include "rlx/compile/memory_plan.h"
#include "rlx/ir/text.h"
#include "rlx/runtime/model_pipeline.h"
#include "rt_util.h"

namespace rlx {
namespace {

using ir::DType;
using ir::Dim;
using ir::DimBinding;
using namespace rt_test;

constexpr int64_t kD = 16, kF = 24;

// x[seq, kD] -> rms_norm -> SwiGLU FFN -> residual; then causal self-attention over a
// linear projection (a module with views, fused ops and a bucket axis).
Expected<ir::HirModule> small_hir() {
  ir::GraphBuilder b;
  const Dim seq = Dim::symbol(ir::SEQ);
  auto x = b.input("x", DType::F32, {seq, kD});
  auto pos = b.input("pos", DType::I32, {seq});
  auto norm = b.param("norm", DType::F32, {kD});
  auto gate = b.param("gate", DType::F32, {kF, kD});
  auto up = b.param("up", DType::F32, {kF, kD});
  auto down = b.param("down", DType::F32, {kD, kF});
  auto wq = b.param("wq", DType::F32, {kD, kD});
  auto wk = b.param("wk", DType::F32, {kD / 2, kD});
  auto wv = b.param("wv", DType::F32, {kD / 2, kD});
  auto wo = b.param("wo", DType::F32, {kD, kD});
  auto h = b.op(ir::OpKind::HirRmsNorm, {x, norm}, ir::NormAttrs{1e-5});
  auto x1 = b.add(x, b.op(ir::OpKind::HirSwiGLUFfn, {h, gate, up, down}, ir::NoAttrs{}));
  ir::AttentionBlockAttrs a;
  a.attn.n_heads = 4;
  a.attn.n_kv_heads = 2;
  a.attn.head_dim = 4;
  a.rope.head_dim = 4;
  a.rope.n_rot = 4;
  b.output(b.add(x1, b.op(ir::OpKind::HirAttentionBlock, {x1, wq, wk, wv, wo, pos}, a)), "y");
  ASSIGN_OR_RETURN(ir::Graph g, b.build());
  return ir::HirModule{std::move(g), ir::FusionPolicy::Direct};
}

ParamStore make_store() {
  ParamStore s;
  uint32_t seed = 21;
  auto add = [&](const char* n, std::vector<int64_t> shape) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    EXPECT_TRUE(s.add_f32(n, shape, random_vec(static_cast<size_t>(count), seed++, -0.4f, 0.4f)).ok());
  };
  add("norm", {kD});
  add("gate", {kF, kD});
  add("up", {kF, kD});
  add("down", {kD, kF});
  add("wq", {kD, kD});
  add("wk", {kD / 2, kD});
  add("wv", {kD / 2, kD});
  add("wo", {kD, kD});
  return s;
}

std::vector<float> run(CompiledGraph& g, int64_t n, uint32_t seed) {
  const std::vector<float> x = random_vec(static_cast<size_t>(n * kD), seed);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  const int64_t xs[] = {n, kD}, ps[] = {n};
  auto out = g.run({{"x", TensorView::f32(x, xs)}, {"pos", {DType::I32, ps, pos.data()}}});
  if (!out) ADD_FAILURE() << out.error().to_string();
  return out ? as_f32((*out)[0]) : std::vector<float>{};
}

// A fresh directory per test, removed afterwards.
class AotDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("rlx_aot_{}_{}_{}", info->test_suite_name(), info->name(), static_cast<long>(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string read(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  static void write(const std::filesystem::path& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << bytes;
  }

  // Specializes (key 1, SEQ=n) in a fresh pipeline; returns it and its result.
  AotSpecialization specialize(int64_t n, ModelCompilePipeline& p, const compile::CompileOptions& opt = {}) {
    auto a = p.get_or_specialize_aot(dir_, "small", 1, DimBinding{{ir::SEQ, n}}, small_hir, opt);
    if (!a) ADD_FAILURE() << a.error().to_string();
    return std::move(a).value();
  }

  std::filesystem::path dir_;
};

TEST_F(AotDir, EntryRoundTrip) {
  ModelCompilePipeline p(Device::cpu());
  ASSERT_TRUE(p.build_template(small_hir, {}).has_value());
  auto s = p.specialize(DimBinding{{ir::SEQ, 6}, {ir::BATCH, 1}}, {});
  ASSERT_TRUE(s.has_value());
  const std::string bytes = encode_aot_entry(0xabcdef, "cpu", *s);
  EXPECT_EQ(bytes.substr(0, kAotMagic.size()), kAotMagic);
  auto back = decode_aot_entry(bytes, 0xabcdef, "cpu");
  ASSERT_TRUE(back.has_value()) << back.error().to_string();
  EXPECT_EQ(ir::print(back->lir), ir::print(s->lir));
  EXPECT_EQ(back->binding.to_string(), "BATCH=1,SEQ=6");
  EXPECT_EQ(back->extent.symbol, ir::SEQ);
  EXPECT_EQ(back->extent.upper, 6);
  EXPECT_EQ(back->extent.axis, s->extent.axis);
  // And with no bucket axis at all.
  SpecializedModel plain = *s;
  plain.extent = {};
  auto back2 = decode_aot_entry(encode_aot_entry(1, "cpu", plain), 1, "cpu");
  ASSERT_TRUE(back2.has_value()) << back2.error().to_string();
  EXPECT_TRUE(back2->extent.empty());
  EXPECT_EQ(parse_dim_binding("")->values().size(), 0u);
  EXPECT_FALSE(parse_dim_binding("SEQ").has_value());
  EXPECT_FALSE(parse_dim_binding("SEQ=-1").has_value());
}

// The folder stays bounded: past kMaxEntries entries a store removes the oldest ones
// (entries of earlier builds are never read again), keeping the newest.
TEST_F(AotDir, StoreKeepsTheFolderBounded) {
  ModelCompilePipeline p(Device::cpu());
  ASSERT_TRUE(p.build_template(small_hir, {}).has_value());
  auto s = p.specialize(DimBinding{{ir::SEQ, 2}, {ir::BATCH, 1}}, {});
  ASSERT_TRUE(s.has_value());
  const AotCache cache(dir_);
  ASSERT_TRUE(cache.store("old", 1, "cpu", *s).ok());
  const auto old_entry = cache.path_for("old", 1);
  std::filesystem::last_write_time(old_entry, std::filesystem::file_time_type::clock::now() - std::chrono::hours(48));
  for (uint64_t k = 0; k < AotCache::kMaxEntries; ++k) {  // one past the bound
    const std::filesystem::path dst = cache.path_for("many", k);
    std::filesystem::copy_file(old_entry, dst);
    std::filesystem::last_write_time(dst, std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  }
  ASSERT_TRUE(cache.store("new", 2, "cpu", *s).ok());
  size_t left = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) left += e.path().extension() == ".rlxaot";
  EXPECT_EQ(left, AotCache::kMaxEntries * 3 / 4);
  EXPECT_FALSE(std::filesystem::exists(old_entry)) << "the oldest entry stays";
  EXPECT_TRUE(cache.load("new", 2, "cpu").has_value()) << "the newest entry went";
}

TEST_F(AotDir, FreshPipelineLoadsWithoutLoweringOrPlanning) {
  const ParamStore store = make_store();
  std::vector<float> want;
  {
    ModelCompilePipeline first(Device::cpu());
    AotSpecialization a = specialize(8, first);
    EXPECT_FALSE(a.from_disk);
    EXPECT_TRUE(std::filesystem::exists(a.path));
    EXPECT_EQ(a.path.filename().string(), fmt::format("small__{:016x}.rlxaot", a.entry_key));
    EXPECT_EQ(first.stats().template_builds, 1);
    EXPECT_EQ(first.stats().aot_stores, 1);
    auto g = first.compile_lir(a.model, {});
    ASSERT_TRUE(g.has_value());
    ASSERT_TRUE(store.bind(*g).has_value());
    want = run(*g, 8, 5);
  }
  ModelCompilePipeline fresh(Device::cpu());
  AotSpecialization b = specialize(8, fresh);
  EXPECT_TRUE(b.from_disk);
  const PipelineStats st = fresh.stats();
  EXPECT_EQ(st.template_builds, 0);  // no lowering, no passes
  EXPECT_EQ(st.specializations, 0);  // no planning
  EXPECT_EQ(st.aot_loads, 1);
  EXPECT_EQ(st.aot_rejects, 0);
  auto g = fresh.compile_lir(b.model, {});
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  EXPECT_EQ(g->bucket_upper(), 8);  // the bucket axis survives the disk
  ASSERT_TRUE(store.bind(*g).has_value());
  EXPECT_EQ(max_abs_diff(run(*g, 8, 5), want), 0.0);
  // Through the in-memory cache: get_or_compile_aot.
  auto v = fresh.get_or_compile_aot(dir_, "small", 1, DimBinding{{ir::SEQ, 8}}, small_hir, {});
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(fresh.stats().template_builds, 0);
  EXPECT_TRUE(fresh.contains(1));
}

TEST_F(AotDir, EntryKeysSeparateBindingsAndOptions) {
  ModelCompilePipeline p(Device::cpu());
  compile::CompileOptions nodce;
  nodce.dce = false;
  const uint64_t k8 = specialize(8, p).entry_key;
  EXPECT_NE(specialize(4, p).entry_key, k8);
  EXPECT_NE(specialize(8, p, nodce).entry_key, k8);
  auto other_key = p.get_or_specialize_aot(dir_, "small", 2, DimBinding{{ir::SEQ, 8}}, small_hir, {});
  ASSERT_TRUE(other_key.has_value());
  EXPECT_NE(other_key->entry_key, k8);
  // Same request from another pipeline: the same key and a load.
  ModelCompilePipeline q(Device::cpu());
  AotSpecialization again = specialize(8, q);
  EXPECT_EQ(again.entry_key, k8);
  EXPECT_TRUE(again.from_disk);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 4);
  EXPECT_FALSE(p.get_or_specialize_aot(dir_, "../escape", 1, DimBinding{{ir::SEQ, 8}}, small_hir, {}).has_value());
}

// Each corruption must be rejected (never trusted), fall back to a compile and leave a
// valid entry behind for the next process.
class AotCorruption : public AotDir {
 protected:
  // `edit` changes the payload; the header is re-encoded with a matching length and checksum.
  static void rewrite_payload(const std::filesystem::path& p, const std::function<void(std::string&)>& edit) {
    const std::string b = read(p);
    const size_t start = b.find("\n\n") + 2;
    std::string payload = b.substr(start);
    edit(payload);
    std::string header = b.substr(0, start);
    const size_t pl = header.find("payload=");
    const size_t pe = header.find('\n', pl);
    header.replace(pl, pe - pl, fmt::format("payload={}", payload.size()));
    const size_t cl = header.find("checksum=");
    header.replace(cl + 9, 16, fmt::format("{:016x}", bulk_checksum(payload.data(), payload.size())));
    write(p, header + payload);
  }

  void expect_rebuilt(const std::string& what, const std::function<void(const std::filesystem::path&)>& corrupt,
                      const std::string& reason) {
    SCOPED_TRACE(what);
    std::filesystem::path path;
    {
      ModelCompilePipeline p(Device::cpu());
      path = specialize(8, p).path;
    }
    corrupt(path);
    AotCache cache(dir_);
    std::string why;
    const std::string name = path.filename().string();
    const uint64_t key = std::stoull(name.substr(name.find("__") + 2, 16), nullptr, 16);
    EXPECT_FALSE(cache.load("small", key, "cpu", &why).has_value());
    EXPECT_NE(why.find(reason), std::string::npos) << why;
    ModelCompilePipeline p(Device::cpu());
    AotSpecialization a = specialize(8, p);
    EXPECT_FALSE(a.from_disk);
    EXPECT_EQ(p.stats().aot_rejects, 1);
    EXPECT_EQ(p.stats().template_builds, 1);  // compiled instead
    auto g = p.compile_lir(a.model, {});
    ASSERT_TRUE(g.has_value());
    const ParamStore store = make_store();
    ASSERT_TRUE(store.bind(*g).has_value());
    EXPECT_EQ(run(*g, 8, 9).size(), static_cast<size_t>(8 * kD));
    ModelCompilePipeline next(Device::cpu());
    EXPECT_TRUE(specialize(8, next).from_disk) << "the entry was not rewritten";
  }
};

TEST_F(AotCorruption, FlippedPayloadByte) {
  expect_rebuilt("flip", [](const std::filesystem::path& p) {
    std::string b = read(p);
    b[b.size() - 40] ^= 0x01;
    write(p, b);
  }, "checksum");
}

TEST_F(AotCorruption, FlippedHeaderByte) {
  expect_rebuilt("flip header", [](const std::filesystem::path& p) {
    std::string b = read(p);
    b[2] ^= 0x20;  // magic
    write(p, b);
  }, "magic");
}

TEST_F(AotCorruption, Truncated) {
  expect_rebuilt("truncate", [](const std::filesystem::path& p) {
    std::string b = read(p);
    write(p, b.substr(0, b.size() / 2));
  }, "truncated");
}

TEST_F(AotCorruption, TruncatedInsideTheHeader) {
  expect_rebuilt("truncate header", [](const std::filesystem::path& p) { write(p, read(p).substr(0, 30)); }, "header");
}

TEST_F(AotCorruption, WrongRlxVersion) {
  expect_rebuilt("version", [](const std::filesystem::path& p) {
    std::string b = read(p);
    const size_t at = b.find(fmt::format("rlx={}", kRlxVersion));
    ASSERT_NE(at, std::string::npos);
    b.replace(at, 4 + kRlxVersion.size(), "rlx=0.0.1-old");
    write(p, b);
  }, "stale RLX version");
}

TEST_F(AotCorruption, WrongFormatVersion) {
  expect_rebuilt("format", [](const std::filesystem::path& p) {
    std::string b = read(p);
    const size_t at = b.find("format=");
    b.replace(at, fmt::format("format={}", kAotFormatVersion).size(), "format=99");
    write(p, b);
  }, "stale format");
}

TEST_F(AotCorruption, WrongDevice) {
  expect_rebuilt("device", [](const std::filesystem::path& p) {
    std::string b = read(p);
    const size_t at = b.find("device=cpu");
    b.replace(at, 10, "device=cuda:0");
    write(p, b);
  }, "foreign device");
}

TEST_F(AotCorruption, ForeignKey) {
  // Another entry's (valid) file copied under this entry's name.
  expect_rebuilt("key", [this](const std::filesystem::path& p) {
    ModelCompilePipeline other(Device::cpu());
    const std::filesystem::path q = specialize(4, other).path;
    std::filesystem::copy_file(q, p, std::filesystem::copy_options::overwrite_existing);
  }, "foreign key");
}

TEST_F(AotCorruption, GarbageAndEmpty) {
  expect_rebuilt("garbage", [](const std::filesystem::path& p) { write(p, std::string(500, '\x7f')); }, "magic");
  expect_rebuilt("empty", [](const std::filesystem::path& p) { write(p, ""); }, "magic");
}

// A writer bug (or a hand edit) that keeps the checksum right: the LIR is still checked.
TEST_F(AotCorruption, ValidChecksumOverBrokenLir) {
  expect_rebuilt("truncated lir", [](const std::filesystem::path& p) {
    rewrite_payload(p, [](std::string& payload) { payload.resize(payload.find("RLXLIR") + 40); });
  }, "AOT payload");
  expect_rebuilt("bad op kind", [](const std::filesystem::path& p) {
    // The first node's op byte follows "RLXLIR", the version byte, the schema fingerprint
    // and the node count (varints).
    rewrite_payload(p, [](std::string& payload) {
      size_t op = payload.find("RLXLIR") + 7;
      while (static_cast<uint8_t>(payload[op]) & 0x80) ++op;  // skip the fingerprint varint
      ++op;
      while (static_cast<uint8_t>(payload[op]) & 0x80) ++op;  // skip the count varint
      payload[op + 1] = static_cast<char>(0xfe);
    });
  }, "op value 254 out of range");
}

TEST_F(AotDir, ConcurrentWritersNeverLeaveAPartialEntry) {
  ModelCompilePipeline p(Device::cpu());
  const AotSpecialization a = specialize(8, p);
  const std::filesystem::path path = a.path;
  std::filesystem::remove(path);
  AotCache cache(dir_);
  std::atomic<bool> stop{false};
  std::atomic<int> rejected{0}, loaded{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t)
    writers.emplace_back([&] {
      for (int i = 0; i < 25; ++i) EXPECT_TRUE(cache.store("small", a.entry_key, "cpu", a.model).ok());
    });
  std::thread reader([&] {
    while (!stop.load()) {
      std::string why;
      if (cache.load("small", a.entry_key, "cpu", &why)) ++loaded;
      else if (!why.empty()) ++rejected;
    }
  });
  for (auto& w : writers) w.join();
  stop = true;
  reader.join();
  EXPECT_EQ(rejected.load(), 0);
  EXPECT_TRUE(cache.load("small", a.entry_key, "cpu").has_value());
  for (const auto& e : std::filesystem::directory_iterator(dir_))
    EXPECT_EQ(e.path().extension(), ".rlxaot") << "temporary file left: " << e.path();
}

TEST_F(AotDir, AotComponentsGoThroughTheDisk) {
  ModelComponent c;
  c.seq_bucket = 4;
  c.exec.mode = CompilationMode::kAot;
  {
    ModelCompilePipeline p(Device::cpu());
    p.set_aot_cache(dir_, "llama-test");
    auto v = p.get_or_compile_component(c, small_hir, {});
    ASSERT_TRUE(v.has_value()) << v.error().to_string();
    EXPECT_EQ(p.stats().aot_stores, 1);
  }
  ModelCompilePipeline p(Device::cpu());
  p.set_aot_cache(dir_, "llama-test");
  auto v = p.get_or_compile_component(c, small_hir, {});
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(p.stats().aot_loads, 1);
  EXPECT_EQ(p.stats().template_builds, 0);
  EXPECT_EQ((*v)->manifest.inputs[0].type.to_string(), "f32[4, 16]");
}

}  // namespace
}  // namespace rlx
