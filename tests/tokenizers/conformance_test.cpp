// Conformance against the reference tokenizers: for each vocabulary in
// shared/conformance/tokenizers, every case of <vocab>.gguf.inp must encode (no
// BOS/EOS, special tokens not parsed) to the ids on the matching line of .out, and
// decode back to the input where the format is lossless (all but WordPiece).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "rlx/models/tokenizer.h"

namespace rlx {
namespace {

std::string conformance_dir() {
  if (const char* env = std::getenv("RLX_CONFORMANCE_DIR")) return std::string(env) + "/tokenizers";
  return std::string(RLX_SOURCE_DIR) + "/../shared/conformance/tokenizers";
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Cases are terminated by "\n__ggml_vocab_test__\n" (the file ends with one).
std::vector<std::string> split_cases(const std::string& text) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    const size_t next = text.find(sep, pos);
    if (next == std::string::npos) break;
    out.push_back(text.substr(pos, next - pos));
    pos = next + sep.size();
  }
  if (pos < text.size()) out.push_back(text.substr(pos));
  return out;
}

std::vector<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::vector<int32_t> ids;
    int32_t id;
    while (in >> id) ids.push_back(id);
    out.push_back(std::move(ids));
  }
  return out;
}

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

class Conformance : public ::testing::TestWithParam<const char*> {};

TEST_P(Conformance, MatchesReferenceIds) {
  const std::string base = conformance_dir() + "/ggml-vocab-" + GetParam() + ".gguf";
  if (!std::filesystem::exists(base)) GTEST_SKIP() << "conformance data not found at " << base;
  auto tok = load_tokenizer_from_gguf(base);
  ASSERT_TRUE(tok.has_value()) << tok.error().to_string();
  const std::vector<std::string> cases = split_cases(read_all(base + ".inp"));
  const std::vector<std::vector<int32_t>> expected = parse_ids(read_all(base + ".out"));
  ASSERT_EQ(cases.size(), expected.size()) << "case count differs between .inp and .out";
  ASSERT_FALSE(cases.empty());

  const bool lossless = (*tok)->kind() != TokenizerKind::kWordPiece;
  size_t pass_ids = 0, pass_round = 0;
  std::string failures;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int32_t> got = (*tok)->encode(cases[i], /*add_special=*/false, /*parse_special=*/false);
    if (got == expected[i]) ++pass_ids;
    else failures += "case " + std::to_string(i) + " '" + cases[i] + "'\n  want" + join(expected[i]) + "\n  got " +
                     join(got) + "\n";
    if (lossless) {
      auto text = (*tok)->decode(got, /*render_special=*/true);
      ASSERT_TRUE(text.has_value()) << text.error().to_string();
      if (*text == cases[i]) ++pass_round;
      else failures += "case " + std::to_string(i) + " round trip gave '" + *text + "'\n";
    }
  }
  std::cout << "[ conformance ] " << GetParam() << ": ids " << pass_ids << "/" << cases.size();
  if (lossless) std::cout << ", round trip " << pass_round << "/" << cases.size();
  std::cout << "\n";
  EXPECT_EQ(pass_ids, cases.size()) << failures;
  if (lossless) {
    EXPECT_EQ(pass_round, cases.size()) << failures;
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, Conformance,
                         ::testing::Values("llama-spm", "gpt-2", "bert-bge", "phi-3", "falcon"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace rlx
