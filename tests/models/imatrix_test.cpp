// Importance matrices: compute_imatrix's sums equal the products' inputs computed here
// from the model's own weights; llama.cpp's GGUF and .dat files round-trip and malformed
// ones are refused with the entry named; quantizing with an imatrix lowers the error of
// a product's output over the activations it was measured on.
#include "rlx/models/imatrix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "rlx/formats/gguf.h"
#include "rlx/formats/gguf_writer.h"
#include "rlx/formats/quant.h"
#include "rlx/models/quantize.h"
#include "rlx/models/synth.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  const fs::path dir = fs::temp_directory_path() / "rlx_imatrix_test";
  fs::create_directories(dir);
  return dir;
}

// The tiny preset (dim 64, 2 layers, FFN 128, vocab 512, tied head) in f32, made once.
const std::string& tiny_model() {
  static const std::string path = [] {
    const std::string p = (temp_dir() / "tiny-f32.gguf").string();
    SynthOptions o;
    o.type = "f32";
    o.seed = 9;
    EXPECT_TRUE(write_synthetic_gguf(o, p).ok());
    return p;
  }();
  return path;
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(3, 511);
  std::vector<int32_t> t(n);
  for (int32_t& v : t) v = id(rng);
  return t;
}

std::vector<float> tensor_f32(const formats::GgufFile& f, const std::string& name) {
  const formats::GgufTensor* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  std::vector<float> v(static_cast<size_t>(t->n_elements()));
  EXPECT_TRUE(formats::dequantize_row(t->type, t->data, v.data(), t->n_elements()).ok());
  return v;
}

TEST(Imatrix, SumsAreTheProductsInputsSquared) {
  const std::vector<int32_t> tokens = random_tokens(48, 1);
  ImatrixOptions o;
  o.chunk = 16;
  o.threads = 2;
  o.dataset = "random ids";
  int64_t calls = 0;
  o.progress = [&](int64_t done, int64_t all, double ppl) {
    ++calls;
    EXPECT_EQ(all, 3);
    EXPECT_EQ(done, calls);
    EXPECT_GT(ppl, 1.0);
  };
  auto m = compute_imatrix(tiny_model(), tokens, /*bos=*/-1, o);
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(m->chunk_count, 3);
  EXPECT_EQ(m->chunk_size, 16);
  EXPECT_EQ(m->datasets, std::vector<std::string>{"random ids"});
  // Every product over a weight: 7 per layer and the tied head (token_embd as the output).
  EXPECT_EQ(m->entries.size(), 15u);
  for (const auto& [name, e] : m->entries) {
    SCOPED_TRACE(name);
    ASSERT_EQ(e.counts, std::vector<int64_t>{48});
    EXPECT_EQ(e.columns(), name.find("ffn_down") != std::string::npos ? 128 : 64);
  }
  for (const char* same : {"blk.1.attn_k.weight", "blk.1.attn_v.weight"})
    EXPECT_EQ(m->entries.at(same).sum_sq, m->entries.at("blk.1.attn_q.weight").sum_sq) << same;
  EXPECT_EQ(m->entries.at("blk.0.ffn_gate.weight").sum_sq, m->entries.at("blk.0.ffn_up.weight").sum_sq);

  // Layer 0's q/k/v read RMSNorm(token_embd[token]) * attn_norm: computed here.
  auto file = formats::GgufFile::open(tiny_model());
  ASSERT_TRUE(file);
  const std::vector<float> embd = tensor_f32(*file, "token_embd.weight"),
                           norm = tensor_f32(*file, "blk.0.attn_norm.weight");
  const double eps = file->get_float("llama.attention.layer_norm_rms_epsilon").value_or(1e-5);
  std::vector<double> want(64, 0.0);
  for (int32_t t : tokens) {
    const float* row = embd.data() + static_cast<size_t>(t) * 64;
    double ms = 0;
    for (int j = 0; j < 64; ++j) ms += static_cast<double>(row[j]) * row[j];
    const double inv = 1.0 / std::sqrt(ms / 64 + eps);
    for (int j = 0; j < 64; ++j) {
      const double x = row[j] * inv * norm[static_cast<size_t>(j)];
      want[static_cast<size_t>(j)] += x * x;
    }
  }
  const std::vector<double>& got = m->entries.at("blk.0.attn_q.weight").sum_sq;
  for (int j = 0; j < 64; ++j)
    EXPECT_NEAR(got[static_cast<size_t>(j)], want[static_cast<size_t>(j)], 1e-4 * want[static_cast<size_t>(j)] + 1e-6)
        << j;
  const std::vector<float> mean = m->importance("blk.0.attn_q.weight");
  ASSERT_EQ(mean.size(), 64u);
  EXPECT_NEAR(mean[5], want[5] / 48, 1e-4 * want[5] / 48);
  EXPECT_TRUE(m->importance("blk.0.attn_q.weight", 1).empty());  // one matrix only
  EXPECT_TRUE(m->importance("no.such.weight").empty());
}

TEST(Imatrix, RefusesWhatItCannotRun) {
  ImatrixOptions o;
  o.chunk = 64;
  auto short_text = compute_imatrix(tiny_model(), random_tokens(40, 2), -1, o);
  ASSERT_FALSE(short_text);
  EXPECT_NE(short_text.error().message().find("fewer than one chunk of 64"), std::string::npos);
  o.chunk = 1;
  EXPECT_FALSE(compute_imatrix(tiny_model(), random_tokens(40, 2), -1, o));
  SynthOptions bert;
  bert.preset = "bert-tiny";
  const std::string encoder = (temp_dir() / "bert.gguf").string();
  ASSERT_TRUE(write_synthetic_gguf(bert, encoder).ok());
  o.chunk = 8;
  auto e = compute_imatrix(encoder, random_tokens(40, 2), -1, o);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message().find("encoder"), std::string::npos) << e.error().to_string();
}

Imatrix small_imatrix() {
  Imatrix m;
  m.chunk_count = 5;
  m.chunk_size = 128;
  m.datasets = {"calibration.txt"};
  m.entries["blk.0.attn_q.weight"] = {{1.5, 2.0, 0.25, 8.0}, {4}};
  m.entries["blk.0.ffn_gate_exps.weight"] = {{1, 2, 3, 4, 5, 6}, {2, 3}};  // two experts of 3 columns
  return m;
}

TEST(Imatrix, GgufFilesRoundTrip) {
  const std::string path = (temp_dir() / "round.imatrix.gguf").string();
  const Imatrix m = small_imatrix();
  ASSERT_TRUE(write_imatrix(m, path).ok());
  auto back = read_imatrix(path);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->chunk_count, 5);
  EXPECT_EQ(back->chunk_size, 128);
  EXPECT_EQ(back->datasets, m.datasets);
  ASSERT_EQ(back->entries.size(), 2u);
  for (const auto& [name, e] : m.entries) {
    EXPECT_EQ(back->entries.at(name).sum_sq, e.sum_sq) << name;
    EXPECT_EQ(back->entries.at(name).counts, e.counts) << name;
  }
  // llama.cpp's layout: in_sum2 [columns, matrices], counts [1, matrices].
  auto file = formats::GgufFile::open(path);
  ASSERT_TRUE(file);
  EXPECT_EQ(file->find_tensor("blk.0.ffn_gate_exps.weight.in_sum2")->dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(file->find_tensor("blk.0.ffn_gate_exps.weight.counts")->dims, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(back->importance("blk.0.ffn_gate_exps.weight", 1), (std::vector<float>{4.0f / 3, 5.0f / 3, 6.0f / 3}));
  EXPECT_EQ(back->importance("blk.0.attn_q.weight"), (std::vector<float>{0.375f, 0.5f, 0.0625f, 2.0f}));

  Imatrix twice = *back;
  ASSERT_TRUE(twice.merge(*back).ok());
  EXPECT_EQ(twice.chunk_count, 10);
  EXPECT_EQ(twice.entries.at("blk.0.attn_q.weight").counts, std::vector<int64_t>{8});
  EXPECT_EQ(twice.importance("blk.0.attn_q.weight"), back->importance("blk.0.attn_q.weight"));
  Imatrix other;
  other.entries["blk.0.attn_q.weight"] = {{1, 2}, {1}};
  const Status s = twice.merge(other);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("blk.0.attn_q.weight"), std::string::npos);
}

// llama.cpp's older .dat: written here from its description.
void write_dat(const std::string& path,
               const std::vector<std::tuple<std::string, int32_t, std::vector<float>>>& entries, int32_t chunks,
               const std::string& dataset) {
  std::ofstream out(path, std::ios::binary);
  auto i32 = [&](int32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  i32(static_cast<int32_t>(entries.size()));
  for (const auto& [name, calls, values] : entries) {
    i32(static_cast<int32_t>(name.size()));
    out.write(name.data(), static_cast<std::streamsize>(name.size()));
    i32(calls);
    i32(static_cast<int32_t>(values.size()));
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 4));
  }
  if (chunks >= 0) {
    i32(chunks);
    i32(static_cast<int32_t>(dataset.size()));
    out.write(dataset.data(), static_cast<std::streamsize>(dataset.size()));
  }
}

TEST(Imatrix, ReadsLlamaCppDatFiles) {
  const std::string path = (temp_dir() / "old.dat").string();
  // Each value is the column's mean x² times the calls.
  write_dat(path, {{"blk.0.attn_q.weight", 4, {4.0f, 8.0f, 2.0f}}, {"output.weight", 2, {1.0f, 3.0f}}}, 12, "wiki.txt");
  auto m = read_imatrix(path);
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ(m->importance("blk.0.attn_q.weight"), (std::vector<float>{1.0f, 2.0f, 0.5f}));
  EXPECT_EQ(m->importance("output.weight"), (std::vector<float>{0.5f, 1.5f}));
  EXPECT_EQ(m->chunk_count, 12);
  EXPECT_EQ(m->datasets, std::vector<std::string>{"wiki.txt"});
  write_dat(path, {{"a.weight", 1, {1.0f}}}, -1, "");  // no trailer
  ASSERT_TRUE(read_imatrix(path));
}

TEST(Imatrix, MalformedFilesNameTheProblem) {
  const std::string dat = (temp_dir() / "bad.dat").string();
  auto expect_error = [&](const std::string& path, const std::string& needle) {
    auto m = read_imatrix(path);
    ASSERT_FALSE(m) << path << " was accepted";
    EXPECT_NE(m.error().message().find(needle), std::string::npos) << m.error().to_string();
  };
  write_dat(dat, {{"blk.0.attn_q.weight", -3, {1.0f}}}, -1, "");
  expect_error(dat, "has -3 calls");
  write_dat(dat, {{"blk.0.attn_q.weight", 1, {std::nanf("")}}}, -1, "");
  expect_error(dat, "holds nan");
  {
    std::ofstream out(dat, std::ios::binary);
    const int32_t huge = 1 << 30;
    out.write(reinterpret_cast<const char*>(&huge), 4);
  }
  expect_error(dat, "entries in 4 bytes");
  write_dat(dat, {{"blk.0.attn_q.weight", 1, {1.0f, 2.0f}}}, -1, "");
  fs::resize_file(dat, fs::file_size(dat) - 3);
  expect_error(dat, "truncated values");
  expect_error((temp_dir() / "missing.dat").string(), "cannot read");

  const std::string gguf = (temp_dir() / "bad.imatrix.gguf").string();
  {
    formats::GgufWriter w;
    ASSERT_TRUE(w.add_string("general.type", "model").ok());
    ASSERT_TRUE(w.write_file(gguf).ok());
  }
  expect_error(gguf, "not an imatrix");
  {
    formats::GgufWriter w;
    ASSERT_TRUE(
        w.add_tensor_f32("x.weight.in_sum2", formats::GgmlType::F32, {4, 1}, std::vector<float>{1, 2, 3, 4}).ok());
    ASSERT_TRUE(w.write_file(gguf).ok());
  }
  expect_error(gguf, "has no 'x.weight.counts'");
  {
    formats::GgufWriter w;
    ASSERT_TRUE(
        w.add_tensor_f32("x.weight.in_sum2", formats::GgmlType::F32, {4, 1}, std::vector<float>{1, -2, 3, 4}).ok());
    ASSERT_TRUE(w.add_tensor_f32("x.weight.counts", formats::GgmlType::F32, {1, 1}, std::vector<float>{2}).ok());
    ASSERT_TRUE(w.write_file(gguf).ok());
  }
  expect_error(gguf, "not a sum of squares");
  {
    formats::GgufWriter w;
    ASSERT_TRUE(w.add_tensor_f32("x.weight.in_sum2", formats::GgmlType::F32, {3, 1}, std::vector<float>{1, 2, 3}).ok());
    ASSERT_TRUE(w.add_tensor_f32("x.weight.counts", formats::GgmlType::F32, {1, 2}, std::vector<float>{2, 2}).ok());
    ASSERT_TRUE(w.write_file(gguf).ok());
  }
  expect_error(gguf, "holds 3 values for 2 matrices");
  {  // (found by rlx_fuzz_imatrix: a tensor of no elements)
    formats::GgufWriter w;
    ASSERT_TRUE(w.add_tensor("x.weight.in_sum2", formats::GgmlType::F32, {0, 1}, {}).ok());
    ASSERT_TRUE(w.add_tensor_f32("x.weight.counts", formats::GgmlType::F32, {1, 1}, std::vector<float>{2}).ok());
    ASSERT_TRUE(w.write_file(gguf).ok());
  }
  expect_error(gguf, "holds no values");
}

// The error a quantized W adds to W x over activations X (rows of `k` values) whose
// columns have very different scales, with and without the imatrix measured on X.
TEST(Imatrix, ImportanceLowersTheProductsOutputError) {
  constexpr int64_t k = 512, n = 16, samples = 256;
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::lognormal_distribution<float> scale(0.0f, 1.2f);
  std::vector<float> w(static_cast<size_t>(n * k)), x(static_cast<size_t>(samples * k)), col(static_cast<size_t>(k));
  for (float& v : w) v = 0.05f * normal(rng);
  for (float& v : col) v = scale(rng);
  Imatrix m;
  ImatrixEntry& e = m.entries["blk.0.ffn_down.weight"];
  e.sum_sq.assign(static_cast<size_t>(k), 0.0);
  e.counts = {samples};
  for (int64_t s = 0; s < samples; ++s)
    for (int64_t j = 0; j < k; ++j) {
      const float v = col[static_cast<size_t>(j)] * normal(rng);
      x[static_cast<size_t>(s * k + j)] = v;
      e.sum_sq[static_cast<size_t>(j)] += static_cast<double>(v) * v;
    }
  auto output_error = [&](formats::GgmlType type, const Imatrix* im) {
    formats::GgufWriter writer;
    auto used = add_quantized_tensor(writer, "blk.0.ffn_down.weight", type, {k, n}, w, im);
    EXPECT_TRUE(used) << used.error().to_string();
    EXPECT_EQ(*used, im != nullptr);
    auto bytes = writer.to_bytes();
    auto file = formats::GgufFile::parse(std::move(*bytes), "q.gguf");
    EXPECT_TRUE(file);
    const std::vector<float> q = tensor_f32(*file, "blk.0.ffn_down.weight");
    double err = 0;
    for (int64_t s = 0; s < samples; ++s)
      for (int64_t r = 0; r < n; ++r) {
        double d = 0;
        for (int64_t j = 0; j < k; ++j)
          d += (static_cast<double>(w[static_cast<size_t>(r * k + j)]) - q[static_cast<size_t>(r * k + j)]) *
               x[static_cast<size_t>(s * k + j)];
        err += d * d;
      }
    return err;
  };
  for (formats::GgmlType type : {formats::GgmlType::Q4_0, formats::GgmlType::Q3_K, formats::GgmlType::Q4_K,
                                 formats::GgmlType::Q6_K, formats::GgmlType::IQ4_XS}) {
    SCOPED_TRACE(formats::ggml_type_name(type));
    const double plain = output_error(type, nullptr), weighted = output_error(type, &m);
    EXPECT_LT(weighted, 0.9 * plain) << "with the imatrix " << weighted << ", without " << plain;
  }
  // An entry of another width is not used (the caller reports the matrix).
  Imatrix narrow;
  narrow.entries["blk.0.ffn_down.weight"] = {std::vector<double>(256, 1.0), {1}};
  formats::GgufWriter writer;
  auto used = add_quantized_tensor(writer, "blk.0.ffn_down.weight", formats::GgmlType::Q4_K, {k, n}, w, &narrow);
  ASSERT_TRUE(used);
  EXPECT_FALSE(*used);
}

TEST(Imatrix, QuantizeGgufTakesIt) {
  const std::string in = (temp_dir() / "two.gguf").string();
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> a(256 * 4), b(256 * 4);
  for (float& v : a) v = normal(rng);
  for (float& v : b) v = normal(rng);
  {
    formats::GgufWriter w;
    ASSERT_TRUE(w.add_string("general.architecture", "llama").ok());
    ASSERT_TRUE(w.add_tensor_f32("blk.0.ffn_up.weight", formats::GgmlType::F32, {256, 4}, a).ok());
    ASSERT_TRUE(w.add_tensor_f32("blk.0.ffn_gate.weight", formats::GgmlType::F32, {256, 4}, b).ok());
    ASSERT_TRUE(w.write_file(in).ok());
  }
  auto imatrix = std::make_shared<Imatrix>();
  ImatrixEntry& e = imatrix->entries["blk.0.ffn_up.weight"];
  e.counts = {1};
  for (int j = 0; j < 256; ++j) e.sum_sq.push_back(j % 17 == 0 ? 50.0 : 0.01);
  QuantizeOptions o;
  o.mix = "q4_k_m";
  const std::string plain_path = (temp_dir() / "plain.gguf").string(),
                    weighted_path = (temp_dir() / "im.gguf").string();
  ASSERT_TRUE(quantize_gguf(in, plain_path, o).ok());
  o.imatrix = imatrix;
  std::vector<std::string> without;
  o.on_no_importance = [&](const std::string& name) { without.push_back(name); };
  ASSERT_TRUE(quantize_gguf(in, weighted_path, o).ok());
  EXPECT_EQ(without, std::vector<std::string>{"blk.0.ffn_gate.weight"});
  auto plain = formats::GgufFile::open(plain_path), weighted = formats::GgufFile::open(weighted_path);
  ASSERT_TRUE(plain && weighted);
  auto bytes = [](const formats::GgufFile& f, const char* name) {
    const formats::GgufTensor* t = f.find_tensor(name);
    return std::vector<uint8_t>(t->data, t->data + t->n_bytes);
  };
  EXPECT_NE(bytes(*plain, "blk.0.ffn_up.weight"), bytes(*weighted, "blk.0.ffn_up.weight"));
  EXPECT_EQ(bytes(*plain, "blk.0.ffn_gate.weight"), bytes(*weighted, "blk.0.ffn_gate.weight"));
}

}  // namespace
}  // namespace rlx::models
