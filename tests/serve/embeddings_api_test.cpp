// The /v1/embeddings body parser and response builder of `rlx serve`: every input form
// the OpenAI API documents, refusals naming the field, base64 against RFC 4648's test
// vectors, and the response's shape (base64 embeddings decode to the float ones).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "rlx/serve/api.h"

namespace rlx::serve {
namespace {

using Json = nlohmann::json;

std::string refusal(const std::string& body) {
  auto r = parse_embeddings_request(body);
  return r ? std::string{} : r.error().message();
}

TEST(EmbeddingsApi, InputForms) {
  auto one = parse_embeddings_request(R"({"model": "m", "input": "hello"})");
  ASSERT_TRUE(one) << one.error().to_string();
  EXPECT_EQ(one->model, "m");
  EXPECT_EQ(one->texts, std::vector<std::string>{"hello"});
  EXPECT_TRUE(one->token_inputs.empty());
  EXPECT_FALSE(one->base64);
  EXPECT_EQ(one->dimensions, 0);

  auto texts = parse_embeddings_request(R"({"model": "m", "input": ["a", "b c"], "encoding_format": "base64",
                                            "dimensions": 16, "user": "u1"})");
  ASSERT_TRUE(texts) << texts.error().to_string();
  EXPECT_EQ(texts->texts, (std::vector<std::string>{"a", "b c"}));
  EXPECT_TRUE(texts->base64);
  EXPECT_EQ(texts->dimensions, 16);

  auto ids = parse_embeddings_request(R"({"model": "m", "input": [101, 7, 102], "encoding_format": "float"})");
  ASSERT_TRUE(ids) << ids.error().to_string();
  ASSERT_EQ(ids->token_inputs.size(), 1u);  // a list of ids is one input
  EXPECT_EQ(ids->token_inputs[0], (std::vector<int32_t>{101, 7, 102}));
  EXPECT_TRUE(ids->texts.empty());

  auto lists = parse_embeddings_request(R"({"model": "m", "input": [[1, 2], [3]]})");
  ASSERT_TRUE(lists) << lists.error().to_string();
  ASSERT_EQ(lists->token_inputs.size(), 2u);
  EXPECT_EQ(lists->token_inputs[1], std::vector<int32_t>{3});
}

TEST(EmbeddingsApi, RefusalsNameTheField) {
  struct Case {
    std::string body, says;
  };
  const Case cases[] = {
      {R"({"input": "x"})", "'model' is required"},
      {R"({"model": 1, "input": "x"})", "'model'"},
      {R"({"model": "m"})", "'input' is required"},
      {R"({"model": "m", "input": ""})", "'input' must not be an empty string"},
      {R"({"model": "m", "input": []})", "'input' is an empty list"},
      {R"({"model": "m", "input": 5})", "'input' must be a string, a list of strings"},
      {R"({"model": "m", "input": {"text": "x"}})", "'input' must be"},
      {R"({"model": "m", "input": ["a", ""]})", "'input[1]' must not be an empty string"},
      {R"({"model": "m", "input": ["a", 3]})", "'input[1]' must be a string"},
      {R"({"model": "m", "input": [[1], "a"]})", "'input[1]' must be a list of token ids"},
      {R"({"model": "m", "input": [[1], []]})", "'input[1]' is an empty list of tokens"},
      {R"({"model": "m", "input": [1, -2]})", "'input[1]' must be a token id"},
      {R"({"model": "m", "input": [1.5]})", "'input[0]' must be a token id"},
      {R"({"model": "m", "input": [4294967296]})", "'input[0]' must be a token id"},
      {R"({"model": "m", "input": [[1, 2.5]]})", "'input[0][1]' must be a token id"},
      {R"({"model": "m", "input": [null]})", "'input[0]' must be a string, a token id or a list"},
      {R"({"model": "m", "input": "x", "encoding_format": "int8"})", "'encoding_format' must be \"float\" or"},
      {R"({"model": "m", "input": "x", "encoding_format": 1})", "'encoding_format'"},
      {R"({"model": "m", "input": "x", "dimensions": 0})", "'dimensions' must be between 1"},
      {R"({"model": "m", "input": "x", "dimensions": "8"})", "'dimensions' must be an integer"},
      {R"({"model": "m", "input": "x", "user": 3})", "'user'"},
  };
  for (const Case& c : cases) {
    auto r = parse_embeddings_request(c.body);
    ASSERT_FALSE(r) << c.body;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << c.body;
    EXPECT_NE(r.error().message().find(c.says), std::string::npos) << c.body << " -> " << r.error().message();
  }
  std::string many = R"({"model": "m", "input": [)";
  for (size_t i = 0; i <= kMaxEmbeddingInputs; ++i) many += i ? ",\"a\"" : "\"a\"";
  many += "]}";
  EXPECT_NE(refusal(many).find("at most 2048"), std::string::npos);
  auto bad = parse_embeddings_request("{\"model\": \"m\", \"input\": [");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), ErrorCode::kParse);
  EXPECT_NE(refusal("[1]").find("JSON object"), std::string::npos);
  EXPECT_NE(refusal(std::string(100, '[')).find("nests deeper"), std::string::npos);
}

TEST(EmbeddingsApi, Base64MatchesRfc4648) {
  auto enc = [](const std::string& s) {
    return base64_encode(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  };
  EXPECT_EQ(enc(""), "");
  EXPECT_EQ(enc("f"), "Zg==");
  EXPECT_EQ(enc("fo"), "Zm8=");
  EXPECT_EQ(enc("foo"), "Zm9v");
  EXPECT_EQ(enc("foob"), "Zm9vYg==");
  EXPECT_EQ(enc("fooba"), "Zm9vYmE=");
  EXPECT_EQ(enc("foobar"), "Zm9vYmFy");
  const uint8_t high[] = {0xfb, 0xff, 0xbf};
  EXPECT_EQ(base64_encode(high), "+/+/");
}

TEST(EmbeddingsApi, ResponseBody) {
  const std::vector<std::vector<float>> e{{1.0f, -2.5f}, {0.0f, 1.0f}};
  const Json j = Json::parse(embeddings_body("enc", e, /*base64=*/false, 9));
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "enc");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 9);
  EXPECT_EQ(j["usage"]["total_tokens"], 9);
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][1]["object"], "embedding");
  EXPECT_EQ(j["data"][1]["index"], 1);
  EXPECT_EQ(j["data"][0]["embedding"], Json::array({1.0, -2.5}));
  // base64 of float32 little-endian: 1.0f = 00 00 80 3f, -2.5f = 00 00 20 c0.
  const Json b = Json::parse(embeddings_body("enc", e, /*base64=*/true, 9));
  EXPECT_EQ(b["data"][0]["embedding"], "AACAPwAAIMA=");
  EXPECT_EQ(b["data"][1]["embedding"], "AAAAAAAAgD8=");
}

}  // namespace
}  // namespace rlx::serve
