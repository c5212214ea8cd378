// GGUF writer tests: every metadata type and several tensor types survive a write ->
// read round trip (from memory and from disk), offsets honour the alignment, and bad
// requests are refused with clear messages.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <numeric>

#include "rlx/formats/gguf.h"
#include "rlx/formats/gguf_writer.h"
#include "rlx/formats/quant.h"

namespace rlx::formats {
namespace {

using V = GgufMetaValue;

GgufWriter make_writer() {
  GgufWriter w;
  EXPECT_TRUE(w.set_alignment(64).ok());
  EXPECT_TRUE(w.add("t.u8", V::u8(250)).ok());
  EXPECT_TRUE(w.add("t.i8", V::i8(-100)).ok());
  EXPECT_TRUE(w.add("t.u16", V::u16(60000)).ok());
  EXPECT_TRUE(w.add("t.i16", V::i16(-30000)).ok());
  EXPECT_TRUE(w.add_u32("t.u32", 123456).ok());
  EXPECT_TRUE(w.add_i32("t.i32", -123456).ok());
  EXPECT_TRUE(w.add_f32("t.f32", 0.1f).ok());
  EXPECT_TRUE(w.add_bool("t.bool", true).ok());
  EXPECT_TRUE(w.add_string("t.string", "héllo").ok());
  EXPECT_TRUE(w.add_u64("t.u64", ~0ull).ok());
  EXPECT_TRUE(w.add("t.i64", V::i64(-(1ll << 50))).ok());
  EXPECT_TRUE(w.add("t.f64", V::f64(1e300)).ok());
  EXPECT_TRUE(w.add_string_array("t.tokens", {"<s>", "", "abc"}).ok());
  EXPECT_TRUE(w.add_f32_array("t.scores", {1.0f, -2.0f}).ok());
  EXPECT_TRUE(w.add_i32_array("t.types", {1, 2, 3}).ok());
  EXPECT_TRUE(w.add("t.nested", V::array(GgufValueType::kArray,
                                         {V::array(GgufValueType::kBool, {V::boolean(true), V::boolean(false)}),
                                          V::array(GgufValueType::kString, {V::string("x")})}))
                  .ok());
  std::vector<float> ramp(512);
  std::iota(ramp.begin(), ramp.end(), -256.0f);
  EXPECT_TRUE(w.add_tensor_f32("f32", GgmlType::F32, {3}, std::span<const float>(ramp).first(3)).ok());
  EXPECT_TRUE(w.add_tensor_f32("f16", GgmlType::F16, {4, 2}, std::span<const float>(ramp).first(8)).ok());
  EXPECT_TRUE(w.add_tensor_f32("bf16", GgmlType::BF16, {5}, std::span<const float>(ramp).first(5)).ok());
  EXPECT_TRUE(w.add_tensor_f32("q4_0", GgmlType::Q4_0, {64, 2}, std::span<const float>(ramp).first(128)).ok());
  EXPECT_TRUE(w.add_tensor_f32("q4_k", GgmlType::Q4_K, {256, 2}, ramp).ok());
  return w;
}

void check_file(const GgufFile& f) {
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(*f.get_u32("general.alignment"), 64u);
  EXPECT_EQ(*f.get_u8("t.u8"), 250);
  EXPECT_EQ(*f.get_i8("t.i8"), -100);
  EXPECT_EQ(*f.get_u16("t.u16"), 60000);
  EXPECT_EQ(*f.get_i16("t.i16"), -30000);
  EXPECT_EQ(*f.get_u32("t.u32"), 123456u);
  EXPECT_EQ(*f.get_i32("t.i32"), -123456);
  EXPECT_EQ(*f.get_f32("t.f32"), 0.1f);
  EXPECT_TRUE(*f.get_bool("t.bool"));
  EXPECT_EQ(*f.get_string("t.string"), "héllo");
  EXPECT_EQ(*f.get_u64("t.u64"), ~0ull);
  EXPECT_EQ(*f.get_i64("t.i64"), -(1ll << 50));
  EXPECT_EQ(*f.get_f64("t.f64"), 1e300);
  EXPECT_EQ(*f.get_string_array("t.tokens"), (std::vector<std::string_view>{"<s>", "", "abc"}));
  EXPECT_EQ(*f.get_f32_array("t.scores"), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(*f.get_int_array("t.types"), (std::vector<int64_t>{1, 2, 3}));
  const GgufArray* nested = *f.get_array("t.nested");
  ASSERT_EQ(nested->arrays.size(), 2u);
  EXPECT_EQ(nested->arrays[0].elem_type, GgufValueType::kBool);
  EXPECT_TRUE(nested->arrays[0].scalar_at<bool>(0));
  EXPECT_FALSE(nested->arrays[0].scalar_at<bool>(1));
  EXPECT_EQ(nested->arrays[1].strings.at(0), "x");

  ASSERT_EQ(f.tensors().size(), 5u);
  for (const GgufTensor& t : f.tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;
  const GgufTensor& f16 = **f.tensor("f16");
  EXPECT_EQ(f16.type, GgmlType::F16);
  EXPECT_EQ(f16.shape(), (std::vector<int64_t>{2, 4}));
  std::vector<float> values(8);
  ASSERT_TRUE(dequantize_row(f16.type, f16.data, values.data(), 8).ok());
  EXPECT_EQ(values[7], -249.0f);
  const GgufTensor& bf16 = **f.tensor("bf16");
  ASSERT_TRUE(dequantize_row(bf16.type, bf16.data, values.data(), 5).ok());
  EXPECT_EQ(values[4], -252.0f);
  const GgufTensor& q4k = **f.tensor("q4_k");
  EXPECT_EQ(q4k.n_bytes, 288u);
  std::vector<float> ramp(512);
  std::iota(ramp.begin(), ramp.end(), -256.0f);
  std::vector<uint8_t> expected(288);
  ASSERT_TRUE(quantize_row(GgmlType::Q4_K, ramp.data(), expected.data(), 512).ok());
  EXPECT_EQ(std::vector<uint8_t>(q4k.data, q4k.data + q4k.n_bytes), expected);
}

TEST(GgufWriter, RoundTripsInMemory) {
  Expected<std::vector<uint8_t>> bytes = make_writer().to_bytes();
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(bytes->size() % 64, 0u);
  Expected<GgufFile> f = GgufFile::parse(*bytes, "mem.gguf");
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  check_file(*f);
}

TEST(GgufWriter, RoundTripsThroughDisk) {
  const std::string path = (std::filesystem::temp_directory_path() / "rlx_gguf_writer_test.gguf").string();
  ASSERT_TRUE(make_writer().write_file(path).ok());
  Expected<GgufFile> f = GgufFile::open(path);
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  ASSERT_NE(f->mapping(), nullptr);
  check_file(*f);
  const GgufTensor& t = **f->tensor("q4_0");
  EXPECT_GE(t.data, f->mapping()->bytes().data());
  EXPECT_LE(t.data + t.n_bytes, f->mapping()->bytes().data() + f->mapping()->size());
  std::remove(path.c_str());
}

TEST(GgufWriter, RefusesBadRequests) {
  GgufWriter w;
  ASSERT_TRUE(w.add_u32("k", 1).ok());
  Status s = w.add_u32("k", 2);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), "gguf writer: duplicate metadata key 'k'");
  s = w.add("general.alignment", V::u32(64));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("set_alignment"), std::string::npos);
  s = w.add("mixed", V::array(GgufValueType::kU32, {V::u32(1), V::f32(2.0f)}));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), "gguf writer: key 'mixed': array of u32 holds a f32 item");
  s = w.set_alignment(24);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), "gguf writer: alignment 24 is not a non-zero power of two");
  ASSERT_TRUE(w.add_tensor("w", GgmlType::F32, {2}, std::vector<uint8_t>(8)).ok());
  s = w.add_tensor("w", GgmlType::F32, {2}, std::vector<uint8_t>(8));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), "gguf writer: duplicate tensor name 'w'");
  s = w.add_tensor("short", GgmlType::Q8_0, {32}, std::vector<uint8_t>(30));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), "gguf writer: tensor 'short': 30 bytes given, 32 Q8_0 elements need 34");
  s = w.add_tensor("rows", GgmlType::Q4_K, {128, 2}, std::vector<uint8_t>(144));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("row length 128 is not a multiple of the Q4_K block size 256"), std::string::npos);
  s = w.add_tensor("deep", GgmlType::F32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), "gguf writer: tensor 'deep': 5 dims, max is 4");
}

}  // namespace
}  // namespace rlx::formats
