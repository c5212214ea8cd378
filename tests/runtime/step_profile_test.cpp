// The step-profile report shared by the backends (runtime/step_profile.h): how steps
// are grouped (layer index out, weight dtype in) and how the table is summed and ordered.
#include "runtime/step_profile.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rlx::runtime {
namespace {

TEST(StepProfile, GroupsDropTheLayerIndex) {
  EXPECT_EQ(profile_group("%3 (rms_norm 'blk.0.attn_norm')"), "rms_norm attn_norm");
  EXPECT_EQ(profile_group("%17 (dequant_matmul 'blk.15.ffn_down')", "q6_k"), "dequant_matmul ffn_down q6_k");
  EXPECT_EQ(profile_group("%2 (gather 'token_embd')", "f16"), "gather token_embd f16");
  EXPECT_EQ(profile_group("%9 (rope)"), "rope");
  EXPECT_EQ(profile_group("plain"), "plain");
  // A "blk." without a layer number is dropped too, and the search goes on past it.
  EXPECT_EQ(profile_group("%1 (add 'blk.x blk.12.y')"), "add x y");
}

TEST(StepProfile, SumsPerGroupLargestFirst) {
  const std::vector<std::string> groups = {"matmul q4_k", "rope", "matmul q4_k", "matmul q6_k"};
  const std::vector<double> ms = {4.0, 1.0, 6.0, 3.0};  // summed over 2 runs
  const std::string table = format_profile("header line", groups, ms, 2);
  const std::vector<std::string> lines = [&] {
    std::vector<std::string> out;
    size_t at = 0;
    for (size_t nl = table.find('\n'); nl != std::string::npos; at = nl + 1, nl = table.find('\n', at))
      out.push_back(table.substr(at, nl - at));
    return out;
  }();
  ASSERT_EQ(lines.size(), 4u) << table;
  EXPECT_EQ(lines[0], "header line");
  // matmul q4_k: 2 steps, (4 + 6) / 2 runs = 5 ms per run, 2500 us per step.
  EXPECT_NE(lines[1].find("matmul q4_k"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("2 steps"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("5.000 ms/run"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("2500.00 us/step"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("matmul q6_k"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("1.500 ms/run"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("rope"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("0.500 ms/run"), std::string::npos) << lines[3];
}

TEST(StepProfile, NoRunsGiveNoDivisionByZero) {
  const std::vector<std::string> groups = {"a"};
  const std::vector<double> ms = {0.0};
  const std::string table = format_profile("h", groups, ms, 0);
  EXPECT_NE(table.find("0.000 ms/run"), std::string::npos) << table;
}

}  // namespace
}  // namespace rlx::runtime
