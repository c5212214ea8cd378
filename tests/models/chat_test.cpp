// Chat templates: detection from template sources and exact rendering per family.
#include <gtest/gtest.h>

#include "rlx/models/chat.h"

namespace rlx::models {
namespace {

TEST(Chat, DetectsFamiliesFromTemplateSource) {
  EXPECT_EQ(detect_chat_template("{% for m in messages %}<|start_header_id|>{{ m.role }}"), ChatTemplate::Llama3);
  EXPECT_EQ(detect_chat_template("{{'<|im_start|>' + message['role']}}"), ChatTemplate::ChatML);
  EXPECT_EQ(detect_chat_template("{{ '<start_of_turn>' + role }}"), ChatTemplate::Gemma);
  EXPECT_FALSE(detect_chat_template("{{ messages }}").has_value());
  EXPECT_EQ(parse_chat_template("chatml"), ChatTemplate::ChatML);
  EXPECT_FALSE(parse_chat_template("vicuna").has_value());
}

TEST(Chat, RendersEachFamily) {
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(*render_chat(ChatTemplate::Llama3, msgs),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(*render_chat(ChatTemplate::ChatML, msgs),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(*render_chat(ChatTemplate::Gemma, msgs),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  auto bad = render_chat(ChatTemplate::ChatML, {{"tool", "x"}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("tool"), std::string::npos);
}

TEST(Chat, RendersWithTheModelsOwnTemplate) {
  // The template `rlx synth` writes for its Llama 3.2 layout (a trimmed Llama 3 one).
  auto t = jinja::parse(
      "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
      "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if "
      "add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}");
  ASSERT_TRUE(t) << t.error().to_string();
  const std::vector<ChatMessage> msgs = {{"system", "Be brief. "}, {"user", "Hi"}};
  EXPECT_EQ(*render_chat(*t, msgs, "<|begin_of_text|>", "<|eot_id|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(*render_chat(*t, msgs, "", "", /*add_generation_prompt=*/false),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  auto raising = jinja::parse("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}"
                              "{% endif %}");
  ASSERT_TRUE(raising);
  auto err = render_chat(*raising, msgs, "", "");
  ASSERT_FALSE(err);
  EXPECT_EQ(err.error().message(), "System role not supported");
}

}  // namespace
}  // namespace rlx::models
