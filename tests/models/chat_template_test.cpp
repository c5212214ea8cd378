// Conformance of the Jinja renderer with transformers' apply_chat_template: every case of
// every folder of ../shared/conformance/chat/ (real model templates, reference renderings
// made with Jinja2) must render byte for byte, or raise with the template's own message.
// Skipped, saying so, when the data is absent (RLX_CONFORMANCE_DIR overrides the place).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "rlx/models/jinja.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;

fs::path chat_dir() {
  if (const char* env = std::getenv("RLX_CONFORMANCE_DIR")) return fs::path(env) / "chat";
  return fs::path(RLX_SOURCE_DIR) / ".." / "shared" / "conformance" / "chat";
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The README fixes strftime_now's clock at 2026-11-27 12:00.
std::tm conformance_clock() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 27;
  tm.tm_hour = 12;
  tm.tm_wday = 5;    // a Friday
  tm.tm_yday = 330;  // days since 1 January
  return tm;
}

TEST(ChatTemplateConformance, EveryCaseOfEveryTemplate) {
  const fs::path dir = chat_dir();
  if (!fs::is_directory(dir)) GTEST_SKIP() << "chat conformance data not found at " << dir << " (skipped)";
  std::vector<fs::path> folders;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_directory() && fs::exists(entry.path() / "cases.json")) folders.push_back(entry.path());
  std::sort(folders.begin(), folders.end());
  ASSERT_FALSE(folders.empty()) << dir << " holds no template folders";

  jinja::RenderOptions options;
  options.clock = conformance_clock;
  int cases = 0, passed = 0;
  double render_ms = 0;
  for (const fs::path& folder : folders) {
    const std::string name = folder.filename().string();
    auto tmpl = jinja::parse(read_text(folder / "template.jinja"));
    ASSERT_TRUE(tmpl) << name << ": " << tmpl.error().to_string();
    const auto doc = nlohmann::ordered_json::parse(read_text(folder / "cases.json"));
    for (const auto& c : doc.at("cases")) {
      ++cases;
      const std::string label = name + " / " + c.at("case").get<std::string>();
      jinja::ChatInputs in;
      auto messages = jinja::Value::from_json(c.at("messages"));
      ASSERT_TRUE(messages) << label;
      in.messages = *messages;
      if (!c.at("tools").is_null()) {
        auto tools = jinja::Value::from_json(c.at("tools"));
        ASSERT_TRUE(tools) << label;
        in.tools = *tools;
      }
      in.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
      in.bos_token = c.at("bos_token").get<std::string>();
      in.eos_token = c.at("eos_token").get<std::string>();
      const auto t0 = std::chrono::steady_clock::now();
      auto out = jinja::render_chat(*tmpl, in, options);
      render_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (c.contains("output")) {
        if (!out) {
          ADD_FAILURE() << label << ": expected output, got error " << out.error().to_string();
          continue;
        }
        EXPECT_EQ(*out, c.at("output").get<std::string>()) << label;
        passed += *out == c.at("output").get<std::string>();
      } else {
        if (out) {
          ADD_FAILURE() << label << ": expected the template to raise '" << c.at("error").get<std::string>()
                        << "', got output " << *out;
          continue;
        }
        // raise_exception's message, exactly, and no other kind of error.
        EXPECT_EQ(out.error().message(), c.at("error").get<std::string>()) << label;
        EXPECT_EQ(out.error().code(), ErrorCode::kInvalidArgument) << label;
        passed += out.error().message() == c.at("error").get<std::string>();
      }
    }
  }
  std::printf("chat template conformance: %d of %d cases match (%zu templates, %.2f ms rendering)\n", passed, cases,
              folders.size(), render_ms);
  EXPECT_EQ(passed, cases);
}

}  // namespace
}  // namespace rlx
