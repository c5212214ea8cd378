// Encoder configs and names: BERT / NomicBERT (both key spellings) / ModernBERT (layer
// types or the older global_attn_every_n_layers) read from config.json, hostile values
// rejected with the key named, Hugging Face tensor names mapped to GGUF names, pooling
// and normalization. Each config is written by the test.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "rlx/models/encoder.h"
#include "rlx/models/model_config.h"
#include "rlx/models/weight_source.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

Expected<ModelConfig> hf(const std::string& name, const std::string& json) {
  const fs::path dir = fs::temp_directory_path() / "rlx_encoder_config_test";
  fs::create_directories(dir);
  const fs::path p = dir / (name + ".json");
  std::ofstream(p) << json;
  return config_from_hf(p.string());
}

TEST(EncoderConfig, Bert) {
  auto c = hf("bert", R"({"model_type": "bert", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "intermediate_size": 96, "max_position_embeddings": 40, "type_vocab_size": 2,
      "layer_norm_eps": 1e-12, "hidden_act": "gelu"})");
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_TRUE(is_encoder(c->arch));
  EXPECT_EQ(c->arch, Arch::Bert);
  EXPECT_EQ(c->n_positions, 40);
  EXPECT_EQ(c->n_token_types, 2);
  EXPECT_EQ(c->ffn, FfnKind::Gelu);
  EXPECT_TRUE(c->linear_bias);
  EXPECT_FALSE(c->pre_norm);
  EXPECT_FALSE(c->gelu_tanh);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-12);
  EXPECT_EQ(c->pooling, Pooling::Cls);
}

TEST(EncoderConfig, NomicBertGpt2Keys) {
  auto c = hf("nomic", R"({"model_type": "nomic_bert", "vocab_size": 100, "n_embd": 64, "n_layer": 2, "n_head": 4,
      "n_inner": 96, "rotary_emb_base": 1000, "rotary_emb_fraction": 1.0, "layer_norm_epsilon": 1e-12,
      "activation_function": "swiglu", "type_vocab_size": 2})");
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->arch, Arch::NomicBert);
  EXPECT_EQ(c->n_embd, 64);
  EXPECT_EQ(c->n_ff, 96);
  EXPECT_EQ(c->n_positions, 0);
  EXPECT_DOUBLE_EQ(c->rope.theta, 1000.0);
  EXPECT_EQ(c->rope.layout, ir::RopeLayout::Neox);
  EXPECT_EQ(c->ffn, FfnKind::SwiGLU);
  EXPECT_EQ(c->pooling, Pooling::Mean);
}

TEST(EncoderConfig, ModernBertOlderKeys) {
  auto c = hf("modern", R"({"model_type": "modernbert", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 4,
      "num_attention_heads": 4, "intermediate_size": 96, "global_attn_every_n_layers": 3, "local_attention": 128,
      "global_rope_theta": 160000, "local_rope_theta": 10000, "norm_eps": 1e-5, "norm_bias": false,
      "hidden_activation": "gelu"})");
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->arch, Arch::ModernBert);
  EXPECT_TRUE(c->pre_norm);
  EXPECT_FALSE(c->norm_bias);
  EXPECT_EQ(c->sliding_window, 64);  // keys within 64 either side
  EXPECT_FALSE(c->layer_is_sliding(0));
  EXPECT_TRUE(c->layer_is_sliding(1));
  EXPECT_TRUE(c->layer_is_sliding(2));
  EXPECT_FALSE(c->layer_is_sliding(3));
  EXPECT_DOUBLE_EQ(c->rope.theta, 160000.0);
  EXPECT_DOUBLE_EQ(c->rope_theta_local, 10000.0);
  EXPECT_EQ(c->ffn, FfnKind::GeGLU);
}

TEST(EncoderConfig, HostileValuesNameTheKey) {
  const std::string base = R"("vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 96)";
  struct Bad {
    const char* name;
    std::string json, want;
  };
  for (const Bad& b : {
           Bad{"act", R"({"model_type": "bert", "hidden_act": "relu", )" + base + "}", "hidden_act 'relu'"},
           Bad{"act_type", R"({"model_type": "bert", "hidden_act": 3, )" + base + "}", "'hidden_act' must be a string"},
           Bad{"pos", R"({"model_type": "bert", "position_embedding_type": "relative_key", )" + base + "}",
               "position_embedding_type 'relative_key'"},
           Bad{"window", R"({"model_type": "modernbert", "local_attention": -4, )" + base + "}", "'local_attention'"},
           Bad{"every", R"({"model_type": "modernbert", "global_attn_every_n_layers": 0, )" + base + "}",
               "'global_attn_every_n_layers'"},
           Bad{"bias", R"({"model_type": "modernbert", "attention_bias": true, )" + base + "}", "'attention_bias'"},
           Bad{"fraction", R"({"model_type": "nomic_bert", "rotary_emb_fraction": 0, )" + base + "}",
               "'rotary_emb_fraction'"},
           Bad{"eps", R"({"model_type": "bert", "layer_norm_eps": "x", )" + base + "}", "'layer_norm_eps' must be a number"},
       }) {
    auto c = hf(std::string("bad_") + b.name, b.json);
    ASSERT_FALSE(c) << b.name;
    EXPECT_NE(c.error().to_string().find(b.want), std::string::npos) << b.name << ": " << c.error().to_string();
  }
}

TEST(EncoderNames, HuggingFaceToGguf) {
  EXPECT_EQ(hf_to_gguf_encoder_name("embeddings.word_embeddings.weight", Arch::Bert), "token_embd.weight");
  EXPECT_EQ(hf_to_gguf_encoder_name("bert.encoder.layer.11.attention.self.query.bias", Arch::Bert), "blk.11.attn_q.bias");
  EXPECT_EQ(hf_to_gguf_encoder_name("encoder.layer.0.output.LayerNorm.gamma", Arch::Bert),
            "blk.0.layer_output_norm.weight");
  EXPECT_EQ(hf_to_gguf_encoder_name("encoder.layer.0.attention.output.LayerNorm.bias", Arch::Bert),
            "blk.0.attn_output_norm.bias");
  EXPECT_EQ(hf_to_gguf_encoder_name("pooler.dense.weight", Arch::Bert), "pooler.weight");
  EXPECT_EQ(hf_to_gguf_encoder_name("encoder.layers.2.mlp.fc12.weight", Arch::NomicBert), "blk.2.ffn_gate.weight");
  EXPECT_EQ(hf_to_gguf_encoder_name("encoder.layers.2.attn.Wqkv.weight", Arch::NomicBert), "blk.2.attn_qkv.weight");
  EXPECT_EQ(hf_to_gguf_encoder_name("model.layers.1.mlp.Wi.weight", Arch::ModernBert), "blk.1.ffn_up.weight");
  EXPECT_EQ(hf_to_gguf_encoder_name("final_norm.weight", Arch::ModernBert), "output_norm.weight");
  EXPECT_EQ(hf_to_gguf_encoder_name("encoder.layer.x.attention.self.query.weight", Arch::Bert), "");
  EXPECT_EQ(hf_to_gguf_encoder_name("cls.predictions.bias", Arch::Bert), "");
  EXPECT_EQ(hf_to_gguf_encoder_name("encoder.layer.0.attention.self.query.weight.extra", Arch::Bert), "");
}

TEST(EncoderPooling, PoolsAndNormalizes) {
  const std::vector<float> states{1, 2, 3, 4, 5, 6};  // 3 tokens x 2
  EXPECT_EQ(*pool_states(states, 3, 2, Pooling::Cls), (std::vector<float>{1, 2}));
  EXPECT_EQ(*pool_states(states, 3, 2, Pooling::Last), (std::vector<float>{5, 6}));
  EXPECT_EQ(*pool_states(states, 3, 2, Pooling::Mean), (std::vector<float>{3, 4}));
  EXPECT_EQ(*pool_states(states, 2, 2, Pooling::Mean), (std::vector<float>{2, 3}));  // only the real tokens
  EXPECT_FALSE(pool_states(states, 3, 2, Pooling::None));
  EXPECT_FALSE(pool_states(states, 4, 2, Pooling::Mean));
  std::vector<float> v{3, 4};
  l2_normalize(v);
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[1], 0.8f);
  std::vector<float> z{0, 0};
  l2_normalize(z);
  EXPECT_EQ(z, (std::vector<float>{0, 0}));
  EXPECT_EQ(*parse_pooling("mean"), Pooling::Mean);
  EXPECT_FALSE(parse_pooling("max"));
}

}  // namespace
}  // namespace rlx::models
