// `rlx serve` with an encoder, in-process on a loopback port, driven by cpp-httplib's
// client: POST /v1/embeddings for every input form equals the model's own embeddings,
// base64 decodes to the float answer, dimensions, concurrent requests, refusals in
// OpenAI's error shape (bad bodies, too-long input, unknown model, chat sent to an
// encoder), a server without a tokenizer taking token ids, and an answer past its
// patience sent chunked after keep-alive spaces. Waits are bounded only to
// end a hang; nothing is timed.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include "rlx/models/synth.h"
#include "rlx/serve/server.h"

namespace rlx::serve {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kKey = "sk-embed";
const std::vector<std::string> kTexts{"hello world", "a somewhat longer text to embed, with more words in it", "x"};

// RFC 4648 base64 decoding (the test's own, to read the server's answers).
std::vector<float> decode_floats(const std::string& b64) {
  std::vector<uint8_t> bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : b64) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '+')
      v = 62;
    else if (c == '/')
      v = 63;
    else
      break;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<uint8_t>(acc >> bits));
    }
  }
  std::vector<float> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t u = uint32_t{bytes[4 * i]} | uint32_t{bytes[4 * i + 1]} << 8 | uint32_t{bytes[4 * i + 2]} << 16 |
                       uint32_t{bytes[4 * i + 3]} << 24;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

class EmbeddingsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path dir = fs::temp_directory_path() / "rlx_serve_embeddings_test";
    fs::create_directories(dir);
    const std::string path = (dir / "bert-tiny.gguf").string();
    if (!fs::exists(path)) {
      models::SynthOptions o;
      o.preset = "bert-tiny";
      o.seed = 9;
      ASSERT_TRUE(models::write_synthetic_gguf(o, path).ok());
    }
    models::EncoderLoadOptions lo;
    lo.threads = 2;
    auto m = models::EncoderModel::load(path, lo);
    ASSERT_TRUE(m) << m.error().to_string();
    model = std::move(*m);
    auto t = load_tokenizer_from_gguf(path);
    ASSERT_TRUE(t);
    tok = std::move(*t);
    // What the model itself gives for kTexts (before the embedder owns it).
    for (const std::string& text : kTexts) ids.push_back(models::encoder_tokens(*tok, text));
    auto e = model->embed_all(ids, models::EmbedOptions{});
    ASSERT_TRUE(e) << e.error().to_string();
    want = std::move(*e);
  }

  void start(bool with_tokenizer = true, std::chrono::milliseconds patience = std::chrono::milliseconds(1000),
             std::chrono::milliseconds keep_alive = std::chrono::milliseconds(1000)) {
    auto e = Embedder::create(*model, metrics, EmbedderOptions{});
    ASSERT_TRUE(e) << e.error().to_string();
    embedder = std::move(*e);
    ServerOptions so;
    so.port = 0;
    so.api_key = kKey;
    so.model_name = "enc";
    so.max_body_bytes = 64 * 1024;
    so.patience = patience;
    so.keep_alive = keep_alive;
    server = std::make_unique<Server>(*embedder, with_tokenizer ? tok.get() : nullptr, metrics, so);
    auto bound = server->bind();
    ASSERT_TRUE(bound) << bound.error().to_string();
    port = *bound;
    serving = std::thread([this] { (void)server->serve(); });
  }

  void TearDown() override {
    if (embedder) embedder->stop();
    if (server) server->stop();
    if (serving.joinable()) serving.join();
  }

  // POSTs `body` to /v1/embeddings; the status and the parsed answer.
  std::pair<int, Json> post(const Json& body, const std::string& path = "/v1/embeddings") const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(600, 0);
    c.set_bearer_token_auth(kKey);
    auto r = c.Post(path, body.is_string() ? body.get<std::string>() : body.dump(), "application/json");
    if (!r) return {0, Json()};
    return {r->status, Json::parse(r->body, nullptr, false)};
  }

  static void expect_embedding(const Json& got, const std::vector<float>& want, const std::string& what) {
    ASSERT_TRUE(got.is_array()) << what;
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t d = 0; d < want.size(); ++d) EXPECT_NEAR(got[d].get<double>(), want[d], 1e-5) << what << " " << d;
  }

  std::unique_ptr<models::EncoderModel> model;
  std::unique_ptr<Tokenizer> tok;
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<float>> want;
  Metrics metrics;
  std::unique_ptr<Embedder> embedder;
  std::unique_ptr<Server> server;
  std::thread serving;
  int port = 0;
};

TEST_F(EmbeddingsServerTest, TextsEqualTheModelsEmbeddings) {
  start();
  auto [status, j] = post({{"model", "enc"}, {"input", kTexts}});
  ASSERT_EQ(status, 200) << j.dump();
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "enc");
  ASSERT_EQ(j["data"].size(), kTexts.size());
  int64_t tokens = 0;
  for (size_t i = 0; i < kTexts.size(); ++i) {
    EXPECT_EQ(j["data"][i]["object"], "embedding");
    EXPECT_EQ(j["data"][i]["index"], i);
    expect_embedding(j["data"][i]["embedding"], want[i], kTexts[i]);
    tokens += static_cast<int64_t>(ids[i].size());
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], tokens);
  EXPECT_EQ(j["usage"]["total_tokens"], tokens);
  // One string, token ids, lists of token ids: the same embeddings.
  auto [s1, one] = post({{"model", "enc"}, {"input", kTexts[1]}});
  ASSERT_EQ(s1, 200) << one.dump();
  expect_embedding(one["data"][0]["embedding"], want[1], "one string");
  auto [s2, flat] = post({{"model", "enc"}, {"input", ids[0]}});
  ASSERT_EQ(s2, 200) << flat.dump();
  ASSERT_EQ(flat["data"].size(), 1u);
  expect_embedding(flat["data"][0]["embedding"], want[0], "token ids");
  auto [s3, lists] = post({{"model", "enc"}, {"input", ids}, {"encoding_format", "float"}});
  ASSERT_EQ(s3, 200) << lists.dump();
  for (size_t i = 0; i < ids.size(); ++i) expect_embedding(lists["data"][i]["embedding"], want[i], "lists");
}

TEST_F(EmbeddingsServerTest, Base64AndDimensions) {
  start();
  auto [status, j] = post({{"model", "enc"}, {"input", kTexts}, {"encoding_format", "base64"}});
  ASSERT_EQ(status, 200) << j.dump();
  for (size_t i = 0; i < kTexts.size(); ++i) {
    ASSERT_TRUE(j["data"][i]["embedding"].is_string());
    const std::vector<float> v = decode_floats(j["data"][i]["embedding"]);
    ASSERT_EQ(v.size(), want[i].size());
    for (size_t d = 0; d < v.size(); ++d) EXPECT_NEAR(v[d], want[i][d], 1e-5) << i << " " << d;
  }
  auto [s2, short_ones] = post({{"model", "enc"}, {"input", kTexts[0]}, {"dimensions", 16}});
  ASSERT_EQ(s2, 200) << short_ones.dump();
  double norm = 0;
  for (int d = 0; d < 16; ++d) norm += double(want[0][d]) * want[0][d];
  std::vector<float> expect(want[0].begin(), want[0].begin() + 16);
  for (float& x : expect) x = static_cast<float>(x / std::sqrt(norm));
  expect_embedding(short_ones["data"][0]["embedding"], expect, "dimensions 16");
}

// An answer past its patience (0 here) is a chunked 200: keep-alive spaces, then the same
// JSON body, which parses as it is. (A long request ahead keeps the embedder busy, so
// the short one waits past several keep-alives.)
TEST_F(EmbeddingsServerTest, AnAnswerPastItsPatienceIsOneJsonBody) {
  start(true, std::chrono::milliseconds(0), std::chrono::milliseconds(1));
  std::vector<std::vector<int32_t>> long_ones;
  for (int i = 0; i < 32; ++i)
    long_ones.push_back(std::vector<int32_t>(static_cast<size_t>(embedder->max_tokens()), 100 + i));
  SubmitRefusal why = SubmitRefusal::kNone;
  std::shared_ptr<EmbeddingJob> busy = embedder->submit(std::move(long_ones), 0, &why);  // queued before the post
  ASSERT_TRUE(busy);
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(600, 0);
  c.set_bearer_token_auth(kKey);
  auto r = c.Post("/v1/embeddings", Json{{"model", "enc"}, {"input", kTexts}}.dump(), "application/json");
  std::optional<Expected<std::vector<std::vector<float>>>> done;
  for (int i = 0; i < 600 && !done; ++i) done = busy->wait(std::chrono::milliseconds(1000));
  ASSERT_TRUE(done.has_value() && *done);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Transfer-Encoding"), "chunked");
  ASSERT_FALSE(r->body.empty());
  EXPECT_EQ(r->body[0], ' ') << "no keep-alive space before the body";
  const Json j = Json::parse(r->body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r->body;
  ASSERT_EQ(j["data"].size(), kTexts.size());
  for (size_t i = 0; i < kTexts.size(); ++i) expect_embedding(j["data"][i]["embedding"], want[i], kTexts[i]);
}

TEST_F(EmbeddingsServerTest, ConcurrentRequestsEachGetTheirOwn) {
  start();
  std::vector<std::thread> clients;
  std::vector<std::pair<int, Json>> answers(12);
  for (size_t k = 0; k < answers.size(); ++k)
    clients.emplace_back([&, k] { answers[k] = post({{"model", "enc"}, {"input", kTexts[k % kTexts.size()]}}); });
  for (auto& t : clients) t.join();
  for (size_t k = 0; k < answers.size(); ++k) {
    ASSERT_EQ(answers[k].first, 200) << answers[k].second.dump();
    expect_embedding(answers[k].second["data"][0]["embedding"], want[k % kTexts.size()], "client " + std::to_string(k));
  }
  EXPECT_EQ(metrics.embedding_requests.load(), 12);
  EXPECT_LE(metrics.embedding_turns.load(), 12);
}

TEST_F(EmbeddingsServerTest, RefusalsAre4xxWithErrorBodies) {
  start();
  struct Case {
    Json body;
    std::string path;
    int status;
    std::string says;
  };
  const std::string long_text = [] {
    std::string s;
    for (int i = 0; i < 300; ++i) s += "word ";
    return s;
  }();
  const Case cases[] = {
      {Json("{not json"), "/v1/embeddings", 400, "not valid JSON"},
      {{{"model", "enc"}}, "/v1/embeddings", 400, "'input' is required"},
      {{{"model", "enc"}, {"input", ""}}, "/v1/embeddings", 400, "empty string"},
      {{{"model", "enc"}, {"input", Json::array()}}, "/v1/embeddings", 400, "empty list"},
      {{{"model", "enc"}, {"input", long_text}}, "/v1/embeddings", 400, "the model takes at most 128"},
      {{{"model", "enc"}, {"input", {1, 5000}}}, "/v1/embeddings", 400, "outside the vocabulary"},
      {{{"model", "enc"}, {"input", "x"}, {"dimensions", 4096}}, "/v1/embeddings", 400, "'dimensions'"},
      {{{"model", "enc"}, {"input", "x"}, {"encoding_format", "int8"}}, "/v1/embeddings", 400, "encoding_format"},
      {{{"model", "other"}, {"input", "x"}}, "/v1/embeddings", 404, "does not exist"},
      {Json("{\"model\": \"enc\", \"input\": \"" + std::string(100 * 1024, 'a') + "\"}"), "/v1/embeddings", 413,
       "too large"},
      {{{"model", "enc"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}},
       "/v1/chat/completions",
       400,
       "is an embedding model"},
      {{{"model", "enc"}, {"prompt", "hi"}}, "/v1/completions", 400, "is an embedding model"},
  };
  for (const Case& c : cases) {
    auto [status, j] = post(c.body, c.path);
    EXPECT_EQ(status, c.status) << c.body.dump().substr(0, 80);
    ASSERT_TRUE(j.is_object() && j["error"]["message"].is_string()) << j.dump();
    EXPECT_NE(j["error"]["message"].get<std::string>().find(c.says), std::string::npos) << j.dump();
  }
  httplib::Client no_key("127.0.0.1", port);
  auto r = no_key.Post("/v1/embeddings", R"({"model": "enc", "input": "x"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  httplib::Client c("127.0.0.1", port);
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(Json::parse(health->body)["status"], "ok");
  auto [still, j] = post({{"model", "enc"}, {"input", "still there"}});
  EXPECT_EQ(still, 200) << j.dump();
  auto metrics_text = c.Get("/metrics");
  ASSERT_TRUE(metrics_text);
  EXPECT_NE(metrics_text->body.find("rlx_embedding_requests_total 1"), std::string::npos);
  EXPECT_NE(metrics_text->body.find("rlx_http_requests_total{path=\"/v1/embeddings\",code=\"400\"}"),
            std::string::npos);
}

TEST_F(EmbeddingsServerTest, WithoutATokenizerTokenIdsStillWork) {
  start(/*with_tokenizer=*/false);
  auto [status, j] = post({{"model", "enc"}, {"input", "hello"}});
  EXPECT_EQ(status, 400);
  EXPECT_NE(j["error"]["message"].get<std::string>().find("has no tokenizer"), std::string::npos) << j.dump();
  auto [s2, ok] = post({{"model", "enc"}, {"input", ids[2]}});
  ASSERT_EQ(s2, 200) << ok.dump();
  expect_embedding(ok["data"][0]["embedding"], want[2], "token ids");
}

}  // namespace
}  // namespace rlx::serve
