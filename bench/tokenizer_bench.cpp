// Encoding throughput (MB/s of input text) of the tokenizers on ~1 MB of English-like
// and ~1 MB of mixed-script text, generated deterministically. Vocabularies come from
// shared/conformance/tokenizers (or $RLX_CONFORMANCE_DIR/tokenizers). The floor next to
// them is one UTF-8 decode pass over the same text, the least any tokenizer must do.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "models/tokenizer/unicode_util.h"
#include "rlx/models/tokenizer.h"

namespace {

constexpr size_t kTextBytes = 1 << 20;

// Small deterministic generator (64-bit LCG), so every run sees the same text.
struct Lcg {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33);
  }
};

std::string make_text(const std::vector<std::string>& words, const std::vector<std::string>& punct) {
  Lcg rng;
  std::string text;
  text.reserve(kTextBytes + 64);
  size_t in_line = 0;
  while (text.size() < kTextBytes) {
    const uint32_t r = rng.next();
    if (r % 13 == 0) text += std::to_string(rng.next() % 100000);
    else text += words[r % words.size()];
    if (r % 7 == 0) text += punct[rng.next() % punct.size()];
    if (++in_line > 12 && r % 5 == 0) {
      text += r % 3 == 0 ? "\n\n" : "\n";
      in_line = 0;
    } else {
      text += ' ';
    }
  }
  return text;
}

const std::string& english_text() {
  static const std::string text = make_text(
      {"the", "of", "and", "to", "in", "is", "that", "for", "it", "was", "on", "with", "as", "be", "at", "by",
       "this", "had", "not", "are", "but", "from", "or", "have", "an", "they", "which", "one", "you", "were",
       "tokenizer", "compiler", "runtime", "transformer", "International", "Wednesday", "don't", "I'm",
       "we'll", "they've", "performance", "memory", "bandwidth", "accelerator", "quantization", "RLX"},
      {",", ".", "!", "?", ";", ":", " -", "'s", "\"", "(", ")"});
  return text;
}

const std::string& mixed_text() {
  static const std::string text = make_text(
      {"the", "compiler", "Grüße", "façade", "naïve", "Ελληνικά", "λόγος", "привет", "мир", "данные",
       "日本語", "東京", "中文", "分词器", "한국어", "토큰", "العربية", "مرحبا", "हिन्दी", "नमस्ते",
       "ภาษาไทย", "עברית", "🙂", "🚀🔥", "Ω≈ç√", "ﬁle", "x²", "über", "ĳssel", "ẞ"},
      {",", ".", "。", "、", "!", "？", "«", "»", "…", "—"});
  return text;
}

std::string vocab_dir() {
  if (const char* env = std::getenv("RLX_CONFORMANCE_DIR")) return std::string(env) + "/tokenizers";
  return (std::filesystem::path(__FILE__).parent_path() / "../../shared/conformance/tokenizers").string();
}

const rlx::Tokenizer* tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<rlx::Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  auto t = rlx::load_tokenizer_from_gguf(vocab_dir() + "/ggml-vocab-" + name + ".gguf");
  auto* raw = t ? t->get() : nullptr;
  cache.emplace(name, t ? std::move(*t) : nullptr);
  return raw;
}

void BM_Encode(benchmark::State& state, const std::string& vocab, const std::string* text) {
  const rlx::Tokenizer* t = tokenizer(vocab);
  if (t == nullptr) {
    state.SkipWithError(("vocabulary not found in " + vocab_dir()).c_str());
    return;
  }
  size_t n_ids = 0;
  for (auto _ : state) {
    std::vector<int32_t> ids = t->encode(*text, false, false);
    n_ids = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text->size()));
  state.counters["tokens"] = static_cast<double>(n_ids);
  state.counters["bytes/token"] = static_cast<double>(text->size()) / static_cast<double>(std::max<size_t>(n_ids, 1));
}

void BM_Utf8DecodeFloor(benchmark::State& state, const std::string* text) {
  for (auto _ : state) {
    std::vector<char32_t> cps = rlx::tok::utf8_to_cps(*text);
    benchmark::DoNotOptimize(cps.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text->size()));
}

void BM_Decode(benchmark::State& state, const std::string& vocab) {
  const rlx::Tokenizer* t = tokenizer(vocab);
  if (t == nullptr) {
    state.SkipWithError(("vocabulary not found in " + vocab_dir()).c_str());
    return;
  }
  const std::vector<int32_t> ids = t->encode(english_text(), false, false);
  for (auto _ : state) {
    auto text = t->decode(ids, false);
    benchmark::DoNotOptimize(text->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * english_text().size()));
}

const bool kRegistered = [] {
  for (const char* v : {"llama-spm", "gpt-2", "falcon", "bert-bge", "phi-3"}) {
    benchmark::RegisterBenchmark((std::string("encode/english/") + v).c_str(), BM_Encode, std::string(v),
                                 &english_text())->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("encode/mixed/") + v).c_str(), BM_Encode, std::string(v),
                                 &mixed_text())->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("decode/english/gpt-2", BM_Decode, std::string("gpt-2"))->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("floor/utf8_decode/english", BM_Utf8DecodeFloor, &english_text())
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("floor/utf8_decode/mixed", BM_Utf8DecodeFloor, &mixed_text())
      ->Unit(benchmark::kMillisecond);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
