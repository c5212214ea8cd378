// CompileProfile tests: presets, TOML round trips, errors naming key/file/line, load_or,
// and the mapping to CompileOptions.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "rlx/compile/profile.h"

namespace rlx::compile {
namespace {

TEST(Profile, EveryPresetRoundTripsThroughToml) {
  for (const std::string& name : CompileProfile::preset_names()) {
    auto p = CompileProfile::preset(name);
    ASSERT_TRUE(p.has_value()) << name;
    auto back = CompileProfile::parse(p->to_toml(), name + ".rlx.toml");
    ASSERT_TRUE(back.has_value()) << back.error().to_string();
    EXPECT_EQ(*back, *p) << name << "\n" << p->to_toml();
  }
}

TEST(Profile, PresetPolicies) {
  EXPECT_EQ(CompileProfile::preset("llama32_prefill")->fusion.policy, ir::FusionPolicy::Direct);
  EXPECT_EQ(CompileProfile::preset("qwen3_decode")->fusion.policy, ir::FusionPolicy::Fusable);
  EXPECT_TRUE(CompileProfile::preset("sam2_memory_attention")->fusion.skip);
  EXPECT_TRUE(CompileProfile::preset("llada2_diffusion")->fusion.skip);
  EXPECT_FALSE(CompileProfile::preset("flux2")->fusion.skip);
  auto bad = CompileProfile::preset("llama99");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("llama99"), std::string::npos);
}

TEST(Profile, OverridesRoundTripAndMapToOptions) {
  CompileProfile p = *CompileProfile::preset("gemma_prefill");
  p.precision.compute = Precision::BF16;
  p.precision.mixed = MixedPrecision::Auto;
  p.backends["gpu0"].max_region_steps = 24;
  p.backends["cpu"].unfuse_regions = true;
  p.fusion.assert_clean = true;
  auto back = CompileProfile::parse(p.to_toml());
  ASSERT_TRUE(back.has_value()) << back.error().to_string();
  EXPECT_EQ(*back, p);
  // A backend declaring GPU-sized fusion limits, named as its section.
  const CompileOptions gpu = p.to_compile_options(Target("gpu0", FusionLimits::gpu()));
  EXPECT_EQ(gpu.fusion.target, FusionTarget::Auto);
  ASSERT_TRUE(gpu.fusion.limits.has_value());
  EXPECT_EQ(gpu.fusion.limits->max_steps, 24);
  EXPECT_EQ(gpu.fusion.limits->max_inputs, 16);  // the rest from the target's own limits
  EXPECT_FALSE(gpu.fusion.unfuse_regions);
  EXPECT_EQ(gpu.precision, Precision::BF16);
  EXPECT_EQ(gpu.mixed, MixedPrecision::Auto);
  EXPECT_TRUE(gpu.assert_fusion_clean);
  EXPECT_EQ(effective_fusion_limits(gpu.fusion, Target("gpu0", FusionLimits::gpu())).max_steps, 24);
  const CompileOptions cpu = p.to_compile_options(Target("cpu"));
  EXPECT_TRUE(cpu.fusion.unfuse_regions);
  EXPECT_FALSE(cpu.fusion.limits.has_value());
  EXPECT_EQ(effective_fusion_limits(cpu.fusion, Target("cpu")), FusionLimits::cpu());
  // A fixed target picks its class's limits on any backend.
  FusionOptions fixed;
  fixed.target = FusionTarget::Gpu;
  EXPECT_EQ(effective_fusion_limits(fixed, Target("cpu")), FusionLimits::gpu());
  // A backend section that is not a name is refused.
  auto bad = CompileProfile::parse("[backend.\"Cuda!\"]\nskip_fusion = true\n", "p.toml");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("is not a backend name"), std::string::npos) << bad.error().message();
}

TEST(Profile, UnknownKeyNamesKeyFileAndLine) {
  auto p = CompileProfile::parse("[fusion]\npolicy = \"direct\"\npolcy = \"fusable\"\n", "model.rlx.toml");
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().message(), "model.rlx.toml:3: unknown key 'fusion.polcy'");
}

TEST(Profile, BadValuesAreErrors) {
  auto a = CompileProfile::parse("[precision]\ncompute = \"f8\"\n", "p.toml");
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message().find("precision.compute"), std::string::npos) << a.error().message();
  EXPECT_NE(a.error().message().find("p.toml:2"), std::string::npos);
  auto b = CompileProfile::parse("[passes]\ndce = 1\n", "p.toml");
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.error().message().find("passes.dce"), std::string::npos);
  // A section for any backend name parses (the runtime checks the name against the
  // devices it knows: check_profile_backends); its keys are checked here.
  auto c = CompileProfile::parse("[backend.metal]\nskip_fusion = true\n", "p.toml");
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  EXPECT_TRUE(*c->backends.at("metal").skip_fusion);
  auto c2 = CompileProfile::parse("[backend.metal]\nskip_fusoin = true\n", "p.toml");
  ASSERT_FALSE(c2.has_value());
  EXPECT_NE(c2.error().message().find("backend.metal.skip_fusoin"), std::string::npos) << c2.error().message();
  auto d = CompileProfile::parse("[fusion\n", "broken.toml");
  ASSERT_FALSE(d.has_value());
  EXPECT_NE(d.error().message().find("broken.toml:1"), std::string::npos) << d.error().message();
}

TEST(Profile, LoadAndLoadOr) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/rlx_profile_test.rlx.toml";
  std::ofstream(path) << "name = \"mine\"\n[fusion]\nskip = true\n";
  auto p = CompileProfile::load(path);
  ASSERT_TRUE(p.has_value()) << p.error().to_string();
  EXPECT_EQ(p->name, "mine");
  EXPECT_TRUE(p->fusion.skip);
  const CompileProfile fallback = *CompileProfile::preset("encoder");
  auto missing = CompileProfile::load_or(dir + "/does_not_exist.rlx.toml", fallback);
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(*missing, fallback);
  EXPECT_FALSE(CompileProfile::load(dir + "/does_not_exist.rlx.toml").has_value());
  std::ofstream(path) << "[fusion]\nskip = \"yes\"\n";
  auto bad = CompileProfile::load_or(path, fallback);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find(path), std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace rlx::compile
