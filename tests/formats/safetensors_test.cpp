// safetensors reader tests: valid files (all dtypes, __metadata__), one hostile input per
// validation rule with its message checked, sharded checkpoints through an index, and the
// Hugging Face checkpoints of the conformance data (skipped when absent). Hostile files:
// deep nesting, 30,000 tensors, links out of the folder, FIFOs, directories and devices.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include "rlx/formats/mapped_file.h"
#include "rlx/formats/safetensors.h"

namespace rlx::formats {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> make_file(const std::string& header, size_t data_bytes, uint64_t declared_len = ~0ull) {
  const uint64_t len = declared_len == ~0ull ? header.size() : declared_len;
  std::vector<uint8_t> out(8);
  std::memcpy(out.data(), &len, 8);
  out.insert(out.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i));
  return out;
}

void expect_error(const std::vector<uint8_t>& bytes, ErrorCode code, std::initializer_list<std::string> fragments) {
  Expected<SafetensorsFile> f = SafetensorsFile::parse(bytes, "bad.safetensors");
  ASSERT_FALSE(f.has_value()) << "parse unexpectedly succeeded";
  EXPECT_EQ(f.error().code(), code) << f.error().to_string();
  for (const std::string& frag : fragments)
    EXPECT_NE(f.error().message().find(frag), std::string::npos)
        << "message '" << f.error().message() << "' lacks '" << frag << "'";
}

void expect_tensor_error(const std::string& entry, size_t data_bytes, std::initializer_list<std::string> fragments,
                         ErrorCode code = ErrorCode::kInvalidFile) {
  expect_error(make_file(R"({"w":)" + entry + "}", data_bytes), code, fragments);
}

TEST(Safetensors, ParsesTensorsAndMetadata) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},)"
      R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"s":{"dtype":"I64","shape":[],"data_offsets":[28,36]}})";
  const std::vector<uint8_t> bytes = make_file(header, 36);
  Expected<SafetensorsFile> f = SafetensorsFile::parse(bytes, "ok.safetensors");
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  EXPECT_EQ(f->metadata().at("format"), "pt");
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors()[0].name, "a");  // sorted by offset
  const SafetensorsTensor& a = **f->tensor("a");
  EXPECT_EQ(a.dtype, SafetensorsDType::kF32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.n_elements(), 6);
  EXPECT_EQ(a.data, bytes.data() + 8 + header.size());
  const SafetensorsTensor& b = **f->tensor("b");
  EXPECT_EQ(b.n_bytes, 4u);
  EXPECT_EQ(b.data[0], 24);
  EXPECT_EQ((*f->tensor("s"))->n_elements(), 1);
  EXPECT_EQ(f->tensor("zzz").error().message(), "ok.safetensors: tensor 'zzz' not found");
}

TEST(Safetensors, AcceptsEveryListedDType) {
  const std::pair<const char*, int> dtypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                                {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  for (const auto& [dtype, size] : dtypes) {
    const std::string header = std::string(R"({"w":{"dtype":")") + dtype + R"(","shape":[1],"data_offsets":[0,)" +
                               std::to_string(size) + "]}}";
    Expected<SafetensorsFile> f = SafetensorsFile::parse(make_file(header, 8), "ok.safetensors");
    ASSERT_TRUE(f.has_value()) << dtype << ": " << f.error().to_string();
    EXPECT_EQ(safetensors_dtype_name(f->tensors()[0].dtype), dtype);
    EXPECT_EQ(safetensors_dtype_size(f->tensors()[0].dtype), static_cast<size_t>(size));
  }
}

TEST(Safetensors, RejectsShortFilesAndBadHeaderLengths) {
  expect_error({1, 2, 3}, ErrorCode::kInvalidFile, {"bad.safetensors: byte 0: file is 3 bytes, too short"});
  expect_error(make_file("{}", 0, 500), ErrorCode::kInvalidFile,
               {"byte 0: header length 500 exceeds the 2 bytes after the length field"});
  expect_error(make_file("{}", 0, 200'000'000), ErrorCode::kInvalidFile,
               {"header length 200000000 exceeds the 100000000-byte limit"});
  expect_error(make_file("{}", 0, ~0ull - 1), ErrorCode::kInvalidFile, {"header length 18446744073709551614"});
}

TEST(Safetensors, RejectsBadJson) {
  expect_error(make_file(R"({"w": [1, 2)", 0), ErrorCode::kParse, {"bad.safetensors: byte", "JSON header does not parse"});
  expect_error(make_file("[1,2]", 0), ErrorCode::kInvalidFile, {"byte 8: JSON header is a array, expected an object"});
  expect_error(make_file(std::string(100, '[') + std::string(100, ']'), 0), ErrorCode::kInvalidFile,
               {"byte 72: JSON header nests deeper than 64 levels"});
}

TEST(Safetensors, RejectsNumberOverflowInJson) {  // found by rlx_fuzz_safetensors
  expect_error(make_file(R"({"w":{"dtype":"F32","shape":[66e326],"data_offsets":[0,4]}})", 4), ErrorCode::kParse,
               {"bad.safetensors: byte 8: JSON header does not parse", "number overflow parsing '66e326'"});
}

TEST(Safetensors, RejectsDuplicateKeys) {
  const std::string entry = R"({"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
  expect_error(make_file(R"({"w":)" + entry + R"(,"w":)" + entry + "}", 1), ErrorCode::kInvalidFile,
               {"bad.safetensors: byte 9: duplicate key 'w' in the JSON header"});
}

TEST(Safetensors, RejectsDuplicateKeysInsideAnEntry) {
  expect_error(make_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"dtype":"F32"}})", 4),
               ErrorCode::kInvalidFile, {"byte 9: tensor 'w': duplicate key 'dtype' in its entry"});
  expect_error(make_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"shape":[4]}})", 4),
               ErrorCode::kInvalidFile, {"tensor 'w': duplicate key 'shape' in its entry"});
}

// 30,000 tensors parse (no per-tensor search through the header, no quadratic duplicate
// check). Not a speed test: the bound only catches the hang of the quadratic reader (over
// 20 s in Release, minutes under the sanitizers); the linear one takes about 0.1 s in
// Release and 4 s in the ASan build on a busy 2-core machine.
TEST(Safetensors, ParsesManyTensorsQuickly) {
  const int n = 30000;
  std::string header = "{";
  for (int i = 0; i < n; ++i)
    header += fmt::format(R"({}"model.layers.{}.weight":{{"dtype":"U8","shape":[1],"data_offsets":[{},{}]}})",
                          i ? "," : "", i, i, i + 1);
  header += "}";
  const std::vector<uint8_t> bytes = make_file(header, n);
  const auto start = std::chrono::steady_clock::now();
  Expected<SafetensorsFile> f = SafetensorsFile::parse(bytes, "many.safetensors");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  EXPECT_EQ(f->tensors().size(), static_cast<size_t>(n));
  EXPECT_LT(seconds, 60.0);
}

TEST(Safetensors, RejectsMalformedEntries) {
  expect_tensor_error("5", 0, {"byte 9: tensor 'w': entry is a number, expected an object"});
  expect_tensor_error(R"({"shape":[1],"data_offsets":[0,4]})", 4, {"tensor 'w': missing or non-string 'dtype'"});
  expect_tensor_error(R"({"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]})", 1,
                      {"tensor 'w': dtype 'F8_E4M3' is not supported"}, ErrorCode::kUnsupported);
  expect_tensor_error(R"({"dtype":"F32","data_offsets":[0,4]})", 4, {"tensor 'w': missing or non-array 'shape'"});
  expect_tensor_error(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})", 4,
                      {"tensor 'w': shape entry -1 is not a non-negative integer"});
  expect_tensor_error(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})", 4,
                      {"tensor 'w': shape entry 1.5 is not a non-negative integer"});
  expect_tensor_error(R"({"dtype":"F32","shape":[1],"data_offsets":[0]})", 4,
                      {"tensor 'w': 'data_offsets' must be an array of two integers"});
  expect_tensor_error(R"({"dtype":"F32","shape":[1],"data_offsets":[0,-4]})", 4,
                      {"tensor 'w': data_offsets [0,-4] are not non-negative integers"});
  expect_error(make_file(R"({"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1), ErrorCode::kInvalidFile,
               {"tensor with an empty name"});
}

TEST(Safetensors, RejectsBadOffsets) {
  expect_tensor_error(R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})", 8,
                      {"tensor 'w': data_offsets [8, 4] end before they begin"});
  expect_tensor_error(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})", 8,
                      {"byte 9: tensor 'w': data_offsets [0, 16] run past the 8-byte data section"});
  expect_tensor_error(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", 8,
                      {"tensor 'w': 3 F32 elements need 12 bytes but data_offsets [0, 8] hold 8"});
  expect_tensor_error(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})", 8,
                      {"tensor 'w': element count of shape [4294967296,4294967296] overflows int64"});
  expect_tensor_error(R"({"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]})", 8,
                      {"tensor 'w': 2305843009213693952 F64 elements need"});
  const std::string overlap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_error(make_file(overlap, 12), ErrorCode::kInvalidFile,
               {"tensor 'b': data [4, 12) overlaps tensor 'a' at [0, 8)"});
}

TEST(Safetensors, RejectsNonStringMetadata) {
  expect_error(make_file(R"({"__metadata__":{"n":5}})", 0), ErrorCode::kInvalidFile,
               {"byte 9: '__metadata__' entry 'n' is a number, expected a string"});
}

class ShardedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rlx_st_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    write("model-00001-of-00002.safetensors",
          make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4));
    write("model-00002-of-00002.safetensors",
          make_file(R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2));
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream(dir_ / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                       static_cast<std::streamsize>(bytes.size()));
  }
  void write_index(const std::string& weight_map) {
    const std::string text = R"({"metadata":{"total_size":6},"weight_map":)" + weight_map + "}";
    write("model.safetensors.index.json", std::vector<uint8_t>(text.begin(), text.end()));
  }
  fs::path dir_;
};

TEST_F(ShardedCheckpoint, OpensThroughIndexOrDirectory) {
  write_index(R"({"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"})");
  for (const fs::path& p : {dir_, dir_ / "model.safetensors.index.json"}) {
    Expected<SafetensorsModel> m = SafetensorsModel::open(p.string());
    ASSERT_TRUE(m.has_value()) << m.error().to_string();
    EXPECT_EQ(m->shards().size(), 2u);
    EXPECT_EQ(m->tensor_names(), (std::vector<std::string_view>{"a", "b"}));
    EXPECT_EQ((*m->tensor("b"))->dtype, SafetensorsDType::kU8);
    EXPECT_EQ(m->index_metadata().at("total_size"), "6");
    EXPECT_FALSE(m->tensor("c").has_value());
  }
}

TEST_F(ShardedCheckpoint, RejectsTensorMissingFromItsShard) {
  write_index(R"({"a":"model-00002-of-00002.safetensors"})");
  Expected<SafetensorsModel> m = SafetensorsModel::open(dir_.string());
  ASSERT_FALSE(m.has_value());
  EXPECT_NE(m.error().message().find(
                "weight_map puts tensor 'a' in 'model-00002-of-00002.safetensors', which does not contain it"),
            std::string::npos)
      << m.error().message();
}

TEST_F(ShardedCheckpoint, RejectsPathsOutsideTheFolder) {
  write_index(R"({"a":"../model-00001-of-00002.safetensors"})");
  Expected<SafetensorsModel> m = SafetensorsModel::open(dir_.string());
  ASSERT_FALSE(m.has_value());
  EXPECT_NE(m.error().message().find("is not a plain file name"), std::string::npos) << m.error().message();
}

TEST_F(ShardedCheckpoint, RejectsDeeplyNestedIndex) {
  const int levels = 100000;  // used to overflow the stack when the metadata was dumped
  const std::string text = R"({"metadata":{"x":)" + std::string(levels, '[') + std::string(levels, ']') +
                           R"(},"weight_map":{"a":"model-00001-of-00002.safetensors"}})";
  write("model.safetensors.index.json", std::vector<uint8_t>(text.begin(), text.end()));
  Expected<SafetensorsModel> m = SafetensorsModel::open(dir_.string());
  ASSERT_FALSE(m.has_value());
  EXPECT_NE(m.error().message().find("JSON nests deeper than 128 levels"), std::string::npos) << m.error().message();
}

TEST_F(ShardedCheckpoint, RejectsLinksOutOfTheFolder) {
  const fs::path outside = dir_.string() + "_outside";
  fs::create_directories(outside);
  fs::copy_file(dir_ / "model-00001-of-00002.safetensors", outside / "stolen.safetensors",
                fs::copy_options::overwrite_existing);
  fs::create_symlink(outside / "stolen.safetensors", dir_ / "link.safetensors");
  write_index(R"({"a":"link.safetensors"})");
  Expected<SafetensorsModel> m = SafetensorsModel::open(dir_.string());
  fs::remove_all(outside);
  ASSERT_FALSE(m.has_value());
  EXPECT_NE(m.error().message().find("shard 'link.safetensors' resolves to"), std::string::npos)
      << m.error().message();
  EXPECT_NE(m.error().message().find("outside the model folder"), std::string::npos) << m.error().message();
  // A link that stays inside the folder is fine.
  fs::create_directories(dir_ / "sub");
  fs::rename(dir_ / "model-00001-of-00002.safetensors", dir_ / "sub" / "real.safetensors");
  fs::create_symlink(dir_ / "sub" / "real.safetensors", dir_ / "inside.safetensors");
  write_index(R"({"a":"inside.safetensors"})");
  Expected<SafetensorsModel> ok = SafetensorsModel::open(dir_.string());
  EXPECT_TRUE(ok.has_value()) << ok.error().to_string();
}

// A FIFO, a directory or a device as model data: a clear error, and no blocking open on
// the FIFO (nobody ever writes to it).
TEST_F(ShardedCheckpoint, RefusesFilesThatAreNotRegular) {
  ASSERT_EQ(::mkfifo((dir_ / "model.safetensors").c_str(), 0600), 0);
  Expected<SafetensorsModel> fifo = SafetensorsModel::open(dir_.string());
  ASSERT_FALSE(fifo.has_value());
  EXPECT_NE(fifo.error().message().find("is a FIFO; model data must be a regular file"), std::string::npos)
      << fifo.error().message();
  fs::create_directories(dir_ / "shard_dir.safetensors");
  write_index(R"({"a":"shard_dir.safetensors"})");
  Expected<SafetensorsModel> dir = SafetensorsModel::open(dir_.string());
  ASSERT_FALSE(dir.has_value());
  EXPECT_NE(dir.error().message().find("is a directory"), std::string::npos) << dir.error().message();
  Expected<MappedFile> dev = MappedFile::open("/dev/null");
  ASSERT_FALSE(dev.has_value());
  EXPECT_NE(dev.error().message().find("/dev/null: is a character device"), std::string::npos)
      << dev.error().message();
}

TEST_F(ShardedCheckpoint, ReportsMissingShard) {
  write_index(R"({"a":"model-00009-of-00009.safetensors"})");
  Expected<SafetensorsModel> m = SafetensorsModel::open(dir_.string());
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(m.error().message().find("model-00009-of-00009.safetensors: no such file"), std::string::npos);
}

TEST(SafetensorsConformance, EveryHuggingFaceCheckpointOpens) {
  const char* env = std::getenv("RLX_CONFORMANCE_DIR");
  const fs::path hf = fs::path(env != nullptr && *env != '\0' ? env : RLX_SOURCE_DIR "/../shared/conformance") / "hf";
  if (!fs::is_directory(hf)) GTEST_SKIP() << "skipped: no conformance data at " << hf.string();
  int opened = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(hf)) {
    const fs::path file = e.path() / "model.safetensors";
    if (!fs::exists(file)) continue;
    Expected<SafetensorsFile> f = SafetensorsFile::open(file.string());
    ASSERT_TRUE(f.has_value()) << f.error().to_string();
    EXPECT_FALSE(f->tensors().empty()) << file;
    Expected<SafetensorsModel> m = SafetensorsModel::open(e.path().string());
    ASSERT_TRUE(m.has_value()) << m.error().to_string();
    EXPECT_EQ(m->tensor_names().size(), f->tensors().size());
    ++opened;
  }
  EXPECT_GT(opened, 0);
}

}  // namespace
}  // namespace rlx::formats
