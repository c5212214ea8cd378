// Byte-level BPE pre-tokenization: the regex sets of the common model families
// (selected by GGUF `tokenizer.ggml.pre`) and an ICU-based splitter that applies
// them in order, keeping both the matches and the text between them as words.
#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <atomic>

#include "rlx/base/log.h"
#include "tokenizer_impl.h"

namespace rlx::tok {
namespace {

// Hugging Face's tokenizer.json patterns, written for ICU (which reads \p{..},
// lookahead, (?i:..) and possessive quantifiers the way Oniguruma does).
constexpr const char* kGpt2 = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";
constexpr const char* kLlama3 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kQwen2 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kGpt2NoTail = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr const char* kCjk = R"re([一-龥ࠀ-一가-퟿]+)re";
constexpr const char* kTekken =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kPoro = R"re( ?[^(\s|.,!?…。，、।۔،)]+)re";

const std::vector<std::string>* find_regexes(std::string_view name) {
  static const std::vector<std::string> kDefault = {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2NoTail, R"re(\p{N}+)re",
                                                    "[0-9][0-9][0-9]"};
  static const std::vector<std::string> kGpt2Set = {kGpt2};
  static const std::vector<std::string> kLlama3Set = {kLlama3};
  static const std::vector<std::string> kQwen2Set = {kQwen2};
  static const std::vector<std::string> kDeepseekLlm = {
      R"re([\r\n])re",
      R"re(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)re",
      R"re(\s?[!-/:-~！-／：-～‘-‟　-。]+)re",
      R"re(\s+$)re",
      kCjk,
      R"re(\p{N}+)re"};
  static const std::vector<std::string> kDeepseek3 = {
      R"re(\p{N}{1,3})re", R"re([一-龥぀-ゟ゠-ヿ]+)re",
      R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"};
  static const std::vector<std::string> kDeepseekCoder = {R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re",
                                                          kCjk, R"re(\p{N})re"};
  static const std::vector<std::string> kFalcon = {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2NoTail, "[0-9][0-9][0-9]"};
  static const std::vector<std::string> kStarcoder = {R"re(\p{N})re", kGpt2NoTail};
  static const std::vector<std::string> kPoroSet = {kPoro};
  static const std::vector<std::string> kViking = {kPoro, R"re(\p{N})re"};
  static const std::vector<std::string> kTekkenSet = {kTekken};
  static const std::vector<std::string> kGpt4oSet = {kGpt4o};
  static const std::vector<std::string> kChameleon = {
      R"re(<sentinel:[0-9]+>)re", R"re((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)re", R"re(([\t\n]|    |  ))re",
      R"re(\p{N})re", R"re([\p{P}!-/:-@\[-`{-~])re", kGpt2NoTail};
  static const std::vector<std::string> kBailing = {
      R"re('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)re"};
  static const std::vector<std::string> kSeedCoder = {
      R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re"};
  static const std::vector<std::string> kSuperBpe = {R"re(\p{N}+)re", R"re((?=(\d{3})+(?!\d)))re"};

  struct Entry {
    std::string_view name;
    const std::vector<std::string>* regexes;
  };
  static const Entry kTable[] = {
      {"default", &kDefault},       {"llama3", &kLlama3Set},      {"llama-v3", &kLlama3Set},
      {"llama-bpe", &kLlama3Set},   {"falcon3", &kLlama3Set},     {"falcon-h1", &kLlama3Set},
      {"pixtral", &kLlama3Set},     {"midm-2.0", &kLlama3Set},    {"lfm2", &kLlama3Set},
      {"dbrx", &kLlama3Set},        {"smaug-bpe", &kLlama3Set},   {"chatglm-bpe", &kLlama3Set},
      {"deepseek-llm", &kDeepseekLlm}, {"deepseek-v3", &kDeepseek3}, {"hunyuan-dense", &kDeepseek3},
      {"deepseek-coder", &kDeepseekCoder}, {"falcon", &kFalcon},
      {"gpt-2", &kGpt2Set},         {"phi-2", &kGpt2Set},         {"mpt", &kGpt2Set},
      {"olmo", &kGpt2Set},          {"jais", &kGpt2Set},          {"trillion", &kGpt2Set},
      {"jina-es", &kGpt2Set},       {"jina-de", &kGpt2Set},       {"gigachat", &kGpt2Set},
      {"jina-v1-en", &kGpt2Set},    {"jina-v2-es", &kGpt2Set},    {"jina-v2-de", &kGpt2Set},
      {"jina-v2-code", &kGpt2Set},  {"roberta-bpe", &kGpt2Set},   {"granite-docling", &kGpt2Set},
      {"starcoder", &kStarcoder},   {"refact", &kStarcoder},      {"command-r", &kStarcoder},
      {"smollm", &kStarcoder},      {"codeshell", &kStarcoder},   {"exaone", &kStarcoder},
      {"minerva-7b", &kStarcoder},  {"qwen2", &kQwen2Set},        {"deepseek-r1-qwen", &kQwen2Set},
      {"megrez", &kQwen2Set},       {"stablelm2", &kQwen2Set},    {"hunyuan", &kQwen2Set},
      {"grok-2", &kQwen2Set},       {"poro-chat", &kPoroSet},     {"bloom", &kPoroSet},
      {"gpt3-finnish", &kPoroSet},  {"viking", &kViking},         {"tekken", &kTekkenSet},
      {"chameleon", &kChameleon},   {"gpt-4o", &kGpt4oSet},       {"minimax-m2", &kGpt4oSet},
      {"bailingmoe", &kBailing},    {"llada-moe", &kBailing},     {"seed-coder", &kSeedCoder},
      {"superbpe", &kSuperBpe},
  };
  if (name.empty()) return &kDefault;
  for (const Entry& e : kTable)
    if (e.name == name) return e.regexes;
  return nullptr;
}

// ICU's \s lacks \v and U+0085, which Oniguruma's (and Rust's) include: spell the
// White_Space property out.
std::string to_icu_syntax(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char c = pattern[i + 1];
      if (c == 's') out += "\\p{White_Space}";
      else if (c == 'S') out += "\\P{White_Space}";
      else {
        out.push_back('\\');
        out.push_back(c);
      }
      ++i;
      continue;
    }
    out.push_back(pattern[i]);
  }
  return out;
}

}  // namespace

Expected<std::vector<std::string>> pre_tokenizer_regexes(std::string_view name) {
  const std::vector<std::string>* r = find_regexes(name);
  if (r == nullptr) return Error::not_found("unknown pre-tokenizer '{}'", name);
  return *r;
}

bool pre_tokenizer_ignores_merges(std::string_view name) {
  static constexpr std::string_view kNames[] = {"llama3",  "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                                                "pixtral", "midm-2.0", "lfm2",      "tekken"};
  for (std::string_view n : kNames)
    if (n == name) return true;
  return false;
}

// ICU match-engine steps one find() may take (a step is about a millisecond): a
// pattern such as (a|aa)+$ backtracks exponentially and would otherwise hang.
constexpr int32_t kRegexStepLimit = 2000;

struct RegexSplitter::Impl {
  std::vector<std::unique_ptr<icu::RegexPattern>> patterns;
  std::vector<std::string> sources;  ///< the patterns as given, for messages
  mutable std::atomic<bool> warned{false};
};

RegexSplitter::RegexSplitter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RegexSplitter::~RegexSplitter() = default;

Expected<std::unique_ptr<RegexSplitter>> RegexSplitter::create(const std::vector<std::string>& patterns) {
  auto impl = std::make_unique<Impl>();
  for (const std::string& p : patterns) {
    UErrorCode status = U_ZERO_ERROR;
    UParseError perr{};
    const icu::UnicodeString up = icu::UnicodeString::fromUTF8(to_icu_syntax(p));
    std::unique_ptr<icu::RegexPattern> compiled(icu::RegexPattern::compile(up, 0, perr, status));
    if (U_FAILURE(status) || !compiled)
      return Error::invalid_argument("pre-tokenizer regex '{}' does not compile (ICU: {} at offset {})", p,
                                     u_errorName(status), perr.offset);
    impl->patterns.push_back(std::move(compiled));
    impl->sources.push_back(p);
  }
  return std::unique_ptr<RegexSplitter>(new RegexSplitter(std::move(impl)));
}

void RegexSplitter::split(const std::vector<char32_t>& cps,
                          std::vector<std::pair<uint32_t, uint32_t>>& words) const {
  words.clear();
  if (cps.empty()) return;
  const icu::UnicodeString text = icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(cps.data()),
                                                                static_cast<int32_t>(cps.size()));
  const int32_t n16 = text.length();
  // UTF-16 offset -> code point index (defined at code point boundaries).
  std::vector<uint32_t> cp_at(static_cast<size_t>(n16) + 1, 0);
  {
    int32_t u = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
      cp_at[u] = static_cast<uint32_t>(i);
      u += cps[i] > 0xFFFF ? 2 : 1;
    }
    cp_at[n16] = static_cast<uint32_t>(cps.size());
  }

  std::vector<std::pair<int32_t, int32_t>> pieces{{0, n16}};
  std::vector<std::pair<int32_t, int32_t>> next;
  for (const auto& pattern : impl_->patterns) {
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::RegexMatcher> m(pattern->matcher(text, status));
    if (U_FAILURE(status) || !m) continue;  // only on allocation failure; the piece stays whole
    m->setTimeLimit(kRegexStepLimit, status);
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const auto& [begin, end] : pieces) {
      status = U_ZERO_ERROR;
      m->region(begin, end, status);
      int32_t pos = begin;
      while (U_SUCCESS(status) && m->find(status)) {
        const int32_t ms = m->start(status);
        const int32_t me = m->end(status);
        if (U_FAILURE(status)) break;
        if (ms > pos) next.emplace_back(pos, ms);
        if (me > ms) next.emplace_back(ms, me);
        pos = std::max(pos, me);
      }
      if (status == U_REGEX_TIME_OUT && !impl_->warned.exchange(true))
        RLX_LOG_WARN("pre-tokenizer regex '{}' ran past its time limit (catastrophic backtracking?); the rest of "
                     "the text stays one piece",
                     impl_->sources[static_cast<size_t>(&pattern - impl_->patterns.data())]);
      if (pos < end) next.emplace_back(pos, end);
    }
    pieces.swap(next);
  }
  words.reserve(pieces.size());
  for (const auto& [b, e] : pieces) words.emplace_back(cp_at[b], cp_at[e]);
}

}  // namespace rlx::tok

namespace rlx {

Expected<std::string> pre_tokenizer_name(const std::vector<std::string>& regexes) {
  // The names llama.cpp's converter writes, most common first; the first with exactly
  // these regexes wins.
  static constexpr std::string_view kPreferred[] = {"llama-bpe", "qwen2", "gpt-2", "default", "deepseek-llm",
                                                    "deepseek-v3", "deepseek-coder", "falcon", "starcoder",
                                                    "poro-chat", "viking", "tekken", "chameleon", "gpt-4o",
                                                    "bailingmoe", "seed-coder", "superbpe"};
  for (std::string_view name : kPreferred) {
    const std::vector<std::string>* r = tok::find_regexes(name);
    if (r != nullptr && *r == regexes) return std::string(name);
  }
  return Error::unsupported("pre-tokenizer regexes ({}) match no named GGUF pre-tokenizer", regexes.size());
}

}  // namespace rlx
