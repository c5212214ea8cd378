// The OpenAI request parser and response builders of `rlx serve`: good bodies give the
// fields and defaults the API documents; malformed JSON, wrong types, missing fields,
// values out of range and features the server lacks are refused naming the field.
#include <gtest/gtest.h>

#include <string>

#include "rlx/serve/api.h"

namespace rlx::serve {
namespace {

using Json = nlohmann::json;

Expected<ApiRequest> chat(const std::string& body) { return parse_request(body, Endpoint::kChat); }
Expected<ApiRequest> completion(const std::string& body) { return parse_request(body, Endpoint::kCompletion); }

// The error message of a refused body ("" when it was accepted).
std::string refusal(const Expected<ApiRequest>& r) { return r ? std::string{} : r.error().message(); }

TEST(ServeApi, ChatDefaults) {
  auto r = chat(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->messages.size(), 1u);
  EXPECT_EQ(r->messages[0]["content"], "hi");
  EXPECT_FLOAT_EQ(r->sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 1.0f);
  EXPECT_FALSE(r->max_tokens.has_value());
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->seed_given);
  EXPECT_EQ(r->top_logprobs, -1);
}

TEST(ServeApi, ChatFields) {
  auto r = chat(R"({"model": "m", "messages": [{"role": "system", "content": null},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
      "temperature": 0, "top_p": 0.5, "max_tokens": 7, "seed": 42, "stop": ["x", "y"], "stream": true,
      "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 3, "n": 1,
      "unknown_field": {"ignored": true}})");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->messages[0]["content"], "");
  EXPECT_EQ(r->messages[1]["content"], "ab");
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.5f);
  EXPECT_EQ(r->max_tokens, 7);
  EXPECT_TRUE(r->seed_given);
  EXPECT_EQ(r->sampling.seed, 42u);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->top_logprobs, 3);
}

TEST(ServeApi, CompletionPromptForms) {
  auto text = completion(R"({"model": "m", "prompt": "once", "stop": "."})");
  ASSERT_TRUE(text) << text.error().to_string();
  EXPECT_EQ(text->prompt_text, "once");
  EXPECT_EQ(text->stop, std::vector<std::string>{"."});
  auto one = completion(R"({"model": "m", "prompt": ["once"]})");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->prompt_text, "once");
  auto ids = completion(R"({"model": "m", "prompt": [1, 2, 3], "logprobs": 2})");
  ASSERT_TRUE(ids);
  EXPECT_EQ(ids->prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ids->top_logprobs, 2);
  auto nested = completion(R"({"model": "m", "prompt": [[4, 5]]})");
  ASSERT_TRUE(nested);
  EXPECT_EQ(nested->prompt_ids, (std::vector<int32_t>{4, 5}));
}

TEST(ServeApi, MalformedJson) {
  for (const char* body : {"", "{", "{\"model\": }", "nonsense", "{\"model\": \"m\",}", "\xff\xfe"}) {
    auto r = chat(body);
    ASSERT_FALSE(r) << body;
    EXPECT_EQ(r.error().code(), ErrorCode::kParse) << body;
  }
  auto array = chat("[1, 2]");
  ASSERT_FALSE(array);
  EXPECT_NE(array.error().message().find("JSON object"), std::string::npos);
}

TEST(ServeApi, DeepNestingIsRefusedWithoutRecursion) {
  const std::string deep = "{\"model\": \"m\", \"x\": " + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "}";
  auto r = chat(deep);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("nests deeper"), std::string::npos);
  // Brackets inside strings do not count.
  auto s = chat(R"({"model": "m", "messages": [{"role": "user", "content": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}]})");
  EXPECT_TRUE(s) << s.error().to_string();
}

TEST(ServeApi, WrongTypesNameTheField) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  struct Case {
    std::string body, field;
  };
  const Case cases[] = {
      {R"({"model": 3, )" + msgs + "}", "'model'"},
      {R"({"model": "m", "messages": "hi"})", "'messages'"},
      {R"({"model": "m", "messages": [3]})", "'messages[0]'"},
      {R"({"model": "m", "messages": [{"content": "x"}]})", "'messages[0].role'"},
      {R"({"model": "m", "messages": [{"role": "user", "content": 5}]})", "'messages[0].content'"},
      {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "image_url"},
      {R"({"model": "m", "temperature": "hot", )" + msgs + "}", "'temperature'"},
      {R"({"model": "m", "temperature": 3, )" + msgs + "}", "'temperature'"},
      {R"({"model": "m", "top_p": 0, )" + msgs + "}", "'top_p'"},
      {R"({"model": "m", "max_tokens": 1.5, )" + msgs + "}", "'max_tokens'"},
      {R"({"model": "m", "max_tokens": 0, )" + msgs + "}", "'max_tokens'"},
      {R"({"model": "m", "max_tokens": 18446744073709551615, )" + msgs + "}", "'max_tokens'"},
      {R"({"model": "m", "seed": "x", )" + msgs + "}", "'seed'"},
      {R"({"model": "m", "stream": "yes", )" + msgs + "}", "'stream'"},
      {R"({"model": "m", "stop": 3, )" + msgs + "}", "'stop'"},
      {R"({"model": "m", "stop": ["a", "b", "c", "d", "e"], )" + msgs + "}", "'stop'"},
      {R"({"model": "m", "n": 2, )" + msgs + "}", "'n'"},
      {R"({"model": "m", "top_logprobs": 2, )" + msgs + "}", "'top_logprobs'"},
      {R"({"model": "m", "logprobs": true, "top_logprobs": 21, )" + msgs + "}", "'top_logprobs'"},
      {R"({"model": "m", "logit_bias": {"1": 5}, )" + msgs + "}", "'logit_bias'"},
      {R"({"model": "m", "tool_choice": {"type": "function"}, )" + msgs + "}", "'tool_choice'"},
      {R"({"model": "m", "messages": []})", "'messages'"},
      {R"({"model": "m"})", "'messages' is required"},
      {R"({)" + msgs + "}", "'model' is required"},
  };
  for (const Case& c : cases) {
    auto r = chat(c.body);
    ASSERT_FALSE(r) << c.body;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << c.body;
    EXPECT_NE(r.error().message().find(c.field), std::string::npos) << c.body << " -> " << r.error().message();
  }
  EXPECT_NE(refusal(completion(R"({"model": "m"})")).find("'prompt' is required"), std::string::npos);
  EXPECT_NE(refusal(completion(R"({"model": "m", "prompt": [-1]})")).find("'prompt[0]'"), std::string::npos);
  EXPECT_NE(refusal(completion(R"({"model": "m", "prompt": ["a", "b"]})")).find("one"), std::string::npos);
  EXPECT_NE(refusal(completion(R"({"model": "m", "prompt": "a", "logprobs": 9})")).find("'logprobs'"),
            std::string::npos);
  EXPECT_NE(refusal(completion(R"({"model": "m", "prompt": "a", "echo": true})")).find("'echo'"), std::string::npos);
}

TEST(ServeApi, ErrorBodyShape) {
  const Json j = Json::parse(error_body("bad \"thing\"", "invalid_request_error", "model_not_found"));
  EXPECT_EQ(j["error"]["message"], "bad \"thing\"");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["code"], "model_not_found");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_TRUE(Json::parse(error_body("x", "server_error"))["error"]["code"].is_null());
}

TEST(ServeApi, ModelsBody) {
  const Json j = Json::parse(models_body("tiny", 123));
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "tiny");
  EXPECT_EQ(j["data"][0]["object"], "model");
}

}  // namespace
}  // namespace rlx::serve
