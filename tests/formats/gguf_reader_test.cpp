// GGUF reader tests: valid files of each version and every metadata type, typed
// accessors, and one hostile input per validation rule with its error message checked
// (file name, field and byte offset).
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "gguf_test_util.h"
#include "rlx/formats/gguf.h"

namespace rlx::formats {
namespace {

using testing::RawGguf;

constexpr uint32_t kU32 = 4, kF32 = 6, kBool = 7, kString = 8, kArray = 9, kU8 = 0;

Expected<GgufFile> parse(const RawGguf& g) { return GgufFile::parse(g.bytes(), "bad.gguf"); }

// Parsing must fail with `code` and a message containing every fragment.
void expect_error(const RawGguf& g, ErrorCode code, std::initializer_list<std::string> fragments) {
  Expected<GgufFile> f = parse(g);
  ASSERT_FALSE(f.has_value()) << "parse unexpectedly succeeded";
  EXPECT_EQ(f.error().code(), code) << f.error().to_string();
  for (const std::string& frag : fragments)
    EXPECT_NE(f.error().message().find(frag), std::string::npos)
        << "message '" << f.error().message() << "' lacks '" << frag << "'";
}

// A v3 header with `n_tensors` tensors and `n_kv` keys; the caller appends the rest.
RawGguf header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  RawGguf g(version);
  g.count(n_tensors).count(n_kv);
  return g;
}

TEST(GgufReader, ParsesAllScalarTypesAndArrays) {
  RawGguf g = header(0, 14);
  g.key("a.u8", 0).u8(200);
  g.key("a.i8", 1).u8(0xfe);
  g.key("a.u16", 2).u8(0x34).u8(0x12);
  g.key("a.i16", 3).u8(0xff).u8(0xff);
  g.key("a.u32", 4).u32(4000000000u);
  g.key("a.i32", 5).i32(-7);
  g.key("a.f32", 6).f32(1.5f);
  g.key("a.bool", 7).u8(1);
  g.key("a.string", 8).str("hello");
  g.key("a.u64", 10).u64(1ull << 40);
  g.key("a.i64", 11).u64(static_cast<uint64_t>(-5ll));
  g.key("a.f64", 12).u64(0x400c000000000000ull);  // 3.5
  g.key("a.strings", kArray).u32(kString).count(2).str("x").str("yz");
  g.key("a.nested", kArray).u32(kArray).count(2).u32(kF32).count(1).f32(2.0f).u32(kU32).count(2).u32(7).u32(8);
  Expected<GgufFile> f = parse(g);
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(*f->get_u8("a.u8"), 200);
  EXPECT_EQ(*f->get_i8("a.i8"), -2);
  EXPECT_EQ(*f->get_u16("a.u16"), 0x1234);
  EXPECT_EQ(*f->get_i16("a.i16"), -1);
  EXPECT_EQ(*f->get_u32("a.u32"), 4000000000u);
  EXPECT_EQ(*f->get_i32("a.i32"), -7);
  EXPECT_EQ(*f->get_f32("a.f32"), 1.5f);
  EXPECT_TRUE(*f->get_bool("a.bool"));
  EXPECT_EQ(*f->get_string("a.string"), "hello");
  EXPECT_EQ(*f->get_u64("a.u64"), 1ull << 40);
  EXPECT_EQ(*f->get_i64("a.i64"), -5);
  EXPECT_EQ(*f->get_f64("a.f64"), 3.5);
  EXPECT_EQ(*f->get_int("a.u32"), 4000000000ll);
  EXPECT_EQ(*f->get_int("a.i8"), -2);
  EXPECT_EQ(*f->get_float("a.f32"), 1.5);
  const std::vector<std::string_view> strings = *f->get_string_array("a.strings");
  ASSERT_EQ(strings.size(), 2u);
  EXPECT_EQ(strings[1], "yz");
  const GgufArray* nested = *f->get_array("a.nested");
  ASSERT_EQ(nested->arrays.size(), 2u);
  EXPECT_EQ(nested->arrays[0].scalar_at<float>(0), 2.0f);
  EXPECT_EQ(nested->arrays[1].scalar_at<uint32_t>(1), 8u);
  EXPECT_EQ(f->metadata().size(), 14u);
  EXPECT_EQ(f->metadata()[0].key, "a.u8");
  EXPECT_EQ(f->metadata()[0].offset, 24u);
}

TEST(GgufReader, TypedAccessorErrorsNameKeyAndOffset) {
  RawGguf g = header(0, 2);
  g.key("n", kU32).u32(5);
  g.key("scores", kArray).u32(kF32).count(1).f32(0.5f);
  Expected<GgufFile> f = parse(g);
  ASSERT_TRUE(f.has_value());
  Expected<int32_t> wrong = f->get_i32("n");
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().message(), "bad.gguf: byte 24: key 'n' has type u32, expected i32");
  Expected<uint32_t> missing = f->get_u32("absent");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(missing.error().message(), "bad.gguf: metadata key 'absent' not found");
  Expected<std::vector<int32_t>> wrong_array = f->get_i32_array("scores");
  ASSERT_FALSE(wrong_array.has_value());
  EXPECT_NE(wrong_array.error().message().find("key 'scores' is an array of f32, expected i32"), std::string::npos);
  EXPECT_EQ((*f->get_f32_array("scores"))[0], 0.5f);
  EXPECT_FALSE(f->tensor("w").has_value());
  EXPECT_EQ(f->tensor("w").error().message(), "bad.gguf: tensor 'w' not found");
}

TEST(GgufReader, ParsesVersion1WithThirtyTwoBitCounts) {
  RawGguf g = header(1, 1, 1);
  g.key("general.name", kString).str("v1");
  g.tensor("w", {4, 2}, 0, 0);
  g.pad_to(32).zeros(32);
  Expected<GgufFile> f = parse(g);
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  EXPECT_EQ(f->version(), 1u);
  EXPECT_EQ(*f->get_string("general.name"), "v1");
  const GgufTensor& t = f->tensors().at(0);
  EXPECT_EQ(t.dims, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(t.n_bytes, 32u);
  EXPECT_EQ(t.data, g.bytes().data() + f->data_offset());
}

TEST(GgufReader, ParsesVersion2TensorsWithCustomAlignment) {
  RawGguf g = header(2, 1, 2);
  g.key("general.alignment", kU32).u32(64);
  g.tensor("a", {32}, 8, 0);   // Q8_0: 34 bytes
  g.tensor("b", {3}, 0, 64);   // F32: 12 bytes
  g.pad_to(64);
  const size_t data_at = g.size();
  g.zeros(76);
  Expected<GgufFile> f = parse(g);
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset(), data_at);
  EXPECT_EQ((*f->tensor("a"))->type, GgmlType::Q8_0);
  EXPECT_EQ((*f->tensor("a"))->n_bytes, 34u);
  EXPECT_EQ((*f->tensor("b"))->data, g.bytes().data() + data_at + 64);
}

TEST(GgufReader, RejectsTooShortAndBadMagic) {
  RawGguf tiny(3);
  expect_error(RawGguf(3), ErrorCode::kInvalidFile,
               {"bad.gguf: byte 8: header tensor count: needs 8 bytes but only 0 remain (file is 8 bytes; truncated?)"});
  Expected<GgufFile> f = GgufFile::parse(std::span<const uint8_t>(tiny.bytes().data(), 2), "bad.gguf");
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().message(), "bad.gguf: byte 0: file is 2 bytes, too short for the GGUF magic");
  std::vector<uint8_t> wrong = {'G', 'G', 'M', 'L', 3, 0, 0, 0};
  f = GgufFile::parse(wrong, "bad.gguf");
  ASSERT_FALSE(f.has_value());
  EXPECT_NE(f.error().message().find("byte 0: bad magic 47 47 4d 4c"), std::string::npos);
}

TEST(GgufReader, RejectsBigEndianFiles) {
  std::vector<uint8_t> swapped = {'G', 'G', 'U', 'F', 0, 0, 0, 3};
  Expected<GgufFile> f = GgufFile::parse(swapped, "be.gguf");
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(f.error().message().find("be.gguf: byte 4: version field 0x03000000 looks byte-swapped: big-endian"),
            std::string::npos);
  std::vector<uint8_t> fugg = {'F', 'U', 'G', 'G', 0, 0, 0, 3};
  f = GgufFile::parse(fugg, "be.gguf");
  ASSERT_FALSE(f.has_value());
  EXPECT_NE(f.error().message().find("big-endian GGUF files are not supported"), std::string::npos);
}

TEST(GgufReader, RejectsUnknownVersion) {
  expect_error(RawGguf(4).u64(0).u64(0), ErrorCode::kUnsupported, {"bad.gguf: byte 4: GGUF version 4"});
  expect_error(RawGguf(0).u64(0).u64(0), ErrorCode::kUnsupported, {"GGUF version 0"});
}

TEST(GgufReader, RejectsAbsurdCounts) {
  expect_error(header(0, 1ull << 60), ErrorCode::kInvalidFile,
               {"bad.gguf: byte 16: metadata count 1152921504606846976 cannot fit"});
  expect_error(header(1ull << 40, 0), ErrorCode::kInvalidFile, {"byte 8: tensor count 1099511627776 cannot fit"});
}

TEST(GgufReader, RejectsTruncatedMetadata) {
  RawGguf g = header(0, 1);
  g.key("k", kU32);  // value missing
  expect_error(g, ErrorCode::kInvalidFile, {"bad.gguf: byte 37: k: needs 4 bytes but only 0 remain"});
}

TEST(GgufReader, RejectsAbsurdStringLength) {
  RawGguf g = header(0, 1);
  g.key("name", kString).u64(1ull << 62).zeros(8);
  expect_error(g, ErrorCode::kInvalidFile,
               {"byte 40: name: string length 4611686018427387904 exceeds the 8 bytes left"});
  RawGguf key_len = header(0, 1);
  key_len.u64(~0ull).zeros(16);
  expect_error(key_len, ErrorCode::kInvalidFile, {"byte 24: metadata entry #0 key: string length"});
}

TEST(GgufReader, RejectsAbsurdArrayCount) {
  RawGguf g = header(0, 1);
  g.key("tokens", kArray).u32(kString).u64(1ull << 50).zeros(16);
  expect_error(g, ErrorCode::kInvalidFile, {"byte 46: key 'tokens': array of 1125899906842624 string elements"});
  RawGguf scalars = header(0, 1);
  scalars.key("scores", kArray).u32(kF32).u64(5).zeros(16);
  expect_error(scalars, ErrorCode::kInvalidFile, {"key 'scores': array of 5 f32 elements cannot fit in the 16"});
}

TEST(GgufReader, RejectsUnknownValueTypes) {
  RawGguf g = header(0, 1);
  g.key("k", 13).u32(0);
  expect_error(g, ErrorCode::kInvalidFile, {"bad.gguf: byte 33: key 'k': unknown value type 13"});
  RawGguf arr = header(0, 1);
  arr.key("k", kArray).u32(99).u64(0);
  expect_error(arr, ErrorCode::kInvalidFile, {"byte 37: key 'k': unknown array element type 99"});
}

TEST(GgufReader, RejectsDeeplyNestedArrays) {
  RawGguf g = header(0, 1);
  g.key("deep", kArray);
  for (int i = 0; i < 20; ++i) g.u32(kArray).u64(1);
  g.u32(kU8).u64(0);
  expect_error(g, ErrorCode::kInvalidFile, {"key 'deep': arrays nested deeper than 8 levels"});
}

TEST(GgufReader, RejectsBadBool) {
  RawGguf g = header(0, 1);
  g.key("flag", kBool).u8(2);
  expect_error(g, ErrorCode::kInvalidFile, {"byte 40: key 'flag': bool value 2 is neither 0 nor 1"});
}

TEST(GgufReader, RejectsDuplicateKeys) {
  RawGguf g = header(0, 2);
  g.key("dup", kU32).u32(1);
  const size_t second = g.size();
  g.key("dup", kU32).u32(2);
  expect_error(g, ErrorCode::kInvalidFile,
               {"bad.gguf: byte " + std::to_string(second) + ": duplicate metadata key 'dup' (first at byte 24)"});
}

TEST(GgufReader, RejectsEmptyKey) {
  RawGguf g = header(0, 1);
  g.key("", kU32).u32(1);
  expect_error(g, ErrorCode::kInvalidFile, {"byte 24: metadata entry #0 has an empty key"});
}

TEST(GgufReader, RejectsTooManyDims) {
  RawGguf g = header(1, 0);
  g.tensor("w", {1, 1, 1, 1, 1}, 0, 0);
  expect_error(g, ErrorCode::kInvalidFile, {"bad.gguf: byte 33: tensor 'w': 5 dims, max is 4"});
}

TEST(GgufReader, RejectsElementCountOverflow) {
  RawGguf g = header(1, 0);
  g.tensor("w", {1ull << 32, 1ull << 32}, 0, 0);
  expect_error(g, ErrorCode::kInvalidFile, {"byte 45: tensor 'w': element count overflows int64 at dim 1"});
  RawGguf negative = header(1, 0);
  negative.tensor("w", {~0ull}, 0, 0);
  expect_error(negative, ErrorCode::kInvalidFile, {"tensor 'w': dim 0 is 18446744073709551615, which is negative"});
  RawGguf bytes = header(1, 0);
  bytes.tensor("w", {1ull << 62}, 0, 0);  // F32: 2^64 bytes
  expect_error(bytes, ErrorCode::kInvalidFile, {"tensor 'w': byte size of 4611686018427387904 elements overflows"});
}

TEST(GgufReader, RejectsUnknownTensorType) {
  RawGguf g = header(1, 0);
  g.tensor("w", {32}, 4, 0);  // Q4_2 was removed from the format
  expect_error(g, ErrorCode::kInvalidFile, {"bad.gguf: byte 45: tensor 'w': unknown ggml type id 4"});
  RawGguf huge = header(1, 0);
  huge.tensor("w", {32}, 1000, 0);
  expect_error(huge, ErrorCode::kInvalidFile, {"unknown ggml type id 1000"});
}

TEST(GgufReader, RejectsRowNotMultipleOfBlock) {
  RawGguf g = header(1, 0);
  g.tensor("w", {40, 2}, 12, 0);  // Q4_K needs rows of 256
  expect_error(g, ErrorCode::kInvalidFile, {"tensor 'w': row length 40 is not a multiple of the Q4_K block size 256"});
}

TEST(GgufReader, RejectsDuplicateTensorNames) {
  RawGguf g = header(2, 0);
  g.tensor("w", {4}, 0, 0);
  const size_t second = g.size();
  g.tensor("w", {4}, 0, 32);
  g.pad_to(32).zeros(64);
  expect_error(g, ErrorCode::kInvalidFile,
               {"byte " + std::to_string(second) + ": duplicate tensor name 'w' (first at byte 24)"});
}

TEST(GgufReader, RejectsBadAlignment) {
  for (uint32_t bad : {0u, 3u, 48u}) {
    RawGguf g = header(0, 1);
    g.key("general.alignment", kU32).u32(bad);
    expect_error(g, ErrorCode::kInvalidFile,
                 {"bad.gguf: byte 24: key 'general.alignment' is " + std::to_string(bad) +
                  ", expected a non-zero power of two"});
  }
  RawGguf typed = header(0, 1);
  typed.key("general.alignment", kF32).f32(32.0f);
  expect_error(typed, ErrorCode::kInvalidFile, {"key 'general.alignment' has type f32, expected u32"});
}

TEST(GgufReader, RejectsMisalignedTensorOffset) {
  RawGguf g = header(1, 0);
  g.tensor("w", {4}, 0, 8);
  g.pad_to(32).zeros(64);
  expect_error(g, ErrorCode::kInvalidFile,
               {"bad.gguf: byte 24: tensor 'w': data offset 8 is not a multiple of the alignment 32"});
}

TEST(GgufReader, RejectsTensorPastEnd) {
  RawGguf g = header(1, 0);
  g.tensor("w", {16}, 0, 32);  // 64 bytes at 32, but only 64 bytes of data
  g.pad_to(32).zeros(64);
  expect_error(g, ErrorCode::kInvalidFile,
               {"byte 24: tensor 'w': data [32, +64) runs past the end of the data section (64 bytes"});
  RawGguf far = header(1, 0);
  far.tensor("w", {4}, 0, ~0ull & ~31ull);
  far.pad_to(32).zeros(32);
  expect_error(far, ErrorCode::kInvalidFile, {"tensor 'w': data [18446744073709551584, +16) runs past the end"});
}

TEST(GgufReader, RejectsDataSectionPastEnd) {
  RawGguf g = header(1, 0);
  g.tensor("w", {0}, 0, 0);  // no padding, no data
  expect_error(g, ErrorCode::kInvalidFile, {"tensor data section would start at byte 64", "past the end of the file"});
}

TEST(GgufReader, RejectsOverlappingTensors) {
  RawGguf g = header(2, 0);
  g.tensor("a", {16}, 0, 0);  // [0, 64)
  const size_t second = g.size();
  g.tensor("b", {8}, 0, 32);  // [32, 64)
  g.pad_to(32).zeros(64);
  expect_error(g, ErrorCode::kInvalidFile,
               {"byte " + std::to_string(second) + ": tensor 'b': data [32, +32) overlaps tensor 'a' at [0, +64)"});
}

TEST(GgufReader, RejectsEmptyTensorName) {
  RawGguf g = header(1, 0);
  g.tensor("", {4}, 0, 0);
  expect_error(g, ErrorCode::kInvalidFile, {"byte 24: tensor info #0 has an empty name"});
}

TEST(GgufReader, AcceptsFileWithoutTensorsOrPadding) {
  RawGguf g = header(0, 1);
  g.key("general.architecture", kString).str("llama");
  Expected<GgufFile> f = parse(g);
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_TRUE(f->contains("general.architecture"));
  EXPECT_FALSE(f->contains("general.name"));
}

TEST(GgufReader, OpenReportsMissingFile) {
  Expected<GgufFile> f = GgufFile::open("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(f.error().message(), "/nonexistent/dir/model.gguf: no such file");
}

}  // namespace
}  // namespace rlx::formats
