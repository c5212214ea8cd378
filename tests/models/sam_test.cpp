// SamConfig from config.json (defaults, the checks that the three parts agree, errors
// naming the key) and SAM's image pre- and post-processing (SamProcessor's resize,
// normalization and padding; post_process_masks' upscaling and threshold), checked
// against values computed here by hand. The model itself is checked against transformers
// in tests/integration/sam_conformance_test.cpp.
#include "rlx/models/sam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

// A config.json of a tiny SAM (128 px, 16 px patches, 8x8 grid) with `edit` applied to
// its text, in its own folder.
Expected<SamConfig> parse(const std::string& find = {}, const std::string& replace = {}) {
  std::string text = R"({"model_type": "sam",
    "vision_config": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "mlp_dim": 128,
                      "image_size": 128, "patch_size": 16, "output_channels": 32, "window_size": 4,
                      "global_attn_indexes": [1], "num_pos_feats": 16},
    "prompt_encoder_config": {"hidden_size": 32, "image_embedding_size": 8, "image_size": 128},
    "mask_decoder_config": {"hidden_size": 32, "num_attention_heads": 2, "mlp_dim": 64, "iou_head_hidden_dim": 32}})";
  if (!find.empty()) {
    const size_t at = text.find(find);
    EXPECT_NE(at, std::string::npos) << find;
    if (at != std::string::npos) text.replace(at, find.size(), replace);
  }
  const fs::path dir = fs::temp_directory_path() / "rlx_sam_test";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << text;
  return sam_config_from_hf((dir / "config.json").string());
}

TEST(SamConfig, ReadsTheThreePartsWithTransformersDefaults) {
  auto c = parse();
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->grid(), 8);
  EXPECT_EQ(c->mask_side(), 32);
  EXPECT_EQ(c->window, 4);
  EXPECT_EQ(c->global_layers, std::vector<int64_t>{1});
  EXPECT_EQ(c->dec_layers, 2);  // transformers' defaults
  EXPECT_EQ(c->downsample, 2);
  EXPECT_EQ(c->iou_depth, 3);
  EXPECT_EQ(c->multimask, 3);
  EXPECT_EQ(c->vision_act, ir::ActKind::Gelu);
  EXPECT_EQ(c->dec_act, ir::ActKind::Relu);
}

TEST(SamConfig, ErrorsNameTheKey) {
  auto fails = [](const Expected<SamConfig>& c, const std::string& want) {
    ASSERT_FALSE(c.has_value());
    EXPECT_NE(c.error().message().find(want), std::string::npos) << c.error().message();
  };
  fails(parse("\"image_embedding_size\": 8", "\"image_embedding_size\": 16"),
        "image_embedding_size 16 differs from the encoder's 8 x 8 patches");
  fails(parse("\"global_attn_indexes\": [1]", "\"global_attn_indexes\": [5]"),
        "global_attn_indexes entry 5 is no layer");
  fails(parse("\"patch_size\": 16", "\"patch_size\": 48"), "image_size 128 is not a multiple of patch_size 48");
  fails(parse("\"num_pos_feats\": 16", "\"num_pos_feats\": 12"), "must agree");
  fails(parse("\"model_type\": \"sam\"", "\"model_type\": \"sam2\""), "model_type 'sam2' is not sam");
  fails(parse("\"mask_decoder_config\": {", "\"mask_decoder_config\": 3, \"x\": {"),
        "'mask_decoder_config' must be an object");
}

TEST(SamImage, AnImageOfTheModelsSizeIsOnlyNormalized) {
  auto c = parse();
  ASSERT_TRUE(c);
  std::vector<uint8_t> rgb(128 * 128 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 7 % 256);
  auto p = sam_preprocess(*c, rgb, 128, 128);
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(p->resized_height, 128);
  EXPECT_EQ(p->resized_width, 128);
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdev[3] = {0.229f, 0.224f, 0.225f};
  for (int64_t ch = 0; ch < 3; ++ch)
    for (int64_t i = 0; i < 128 * 128; i += 37) {
      const float want = (static_cast<float>(rgb[static_cast<size_t>(3 * i + ch)]) / 255.0f - mean[ch]) / stdev[ch];
      EXPECT_NEAR(p->pixels[static_cast<size_t>(ch * 128 * 128 + i)], want, 1e-5) << ch << " " << i;
    }
}

TEST(SamImage, AWideImageShrinksToTheLongestSideAndIsPadded) {
  auto c = parse();
  ASSERT_TRUE(c);
  // 300 x 100, one colour: 128 x 43 (int(100 * 128/300 + 0.5)), the rest zero padding.
  std::vector<uint8_t> rgb(300 * 100 * 3);
  for (size_t i = 0; i < rgb.size(); i += 3) {
    rgb[i] = 200;
    rgb[i + 1] = 100;
    rgb[i + 2] = 0;
  }
  auto p = sam_preprocess(*c, rgb, 100, 300);
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(p->resized_width, 128);
  EXPECT_EQ(p->resized_height, 43);
  const float red = (200.0f / 255.0f - 0.485f) / 0.229f;
  EXPECT_NEAR(p->pixels[0], red, 1e-5);
  EXPECT_NEAR(p->pixels[42 * 128 + 127], red, 1e-5);
  EXPECT_EQ(p->pixels[43 * 128], 0.0f);  // first padded row
  const auto [x, y] = p->to_resized(150.0f, 50.0f);
  EXPECT_NEAR(x, 64.0f, 1e-4);
  EXPECT_NEAR(y, 21.5f, 1e-4);
  EXPECT_FALSE(sam_preprocess(*c, rgb, 0, 300));
  EXPECT_FALSE(sam_preprocess(*c, rgb, 101, 300));  // bytes do not match
}

TEST(SamImage, MasksComeBackAtTheImagesSizeThresholdedAtZero) {
  auto c = parse();
  ASSERT_TRUE(c);
  std::vector<uint8_t> rgb(64 * 32 * 3, 0);
  auto p = sam_preprocess(*c, rgb, 32, 64);  // resized to 128 x 64: the lower half is padding
  ASSERT_TRUE(p);
  // Logits positive on the left half of the 32 x 32 mask: the left half of the image.
  std::vector<float> low(32 * 32);
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t col = 0; col < 32; ++col) low[static_cast<size_t>(r * 32 + col)] = col < 16 ? 1.0f : -1.0f;
  const std::vector<uint8_t> m = sam_mask_image(*c, low, *p);
  ASSERT_EQ(m.size(), 64u * 32u);
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t col = 0; col < 64; ++col) {
      if (col == 31 || col == 32) continue;  // the interpolated edge
      EXPECT_EQ(m[static_cast<size_t>(r * 64 + col)], col < 32 ? 255 : 0) << r << ", " << col;
    }
}

}  // namespace
}  // namespace rlx::models
