// libFuzzer target for the tokenizers: arbitrary bytes are encoded (with and without
// special-token parsing) by a SentencePiece, a byte-level BPE and a WordPiece
// tokenizer built from small in-memory vocabularies, then decoded and streamed back.
// Checks: no crash, lossless round trip where the format promises one, and valid
// UTF-8 out of the stream decoder.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/tokenizer/unicode_util.h"
#include "rlx/models/tokenizer.h"

namespace {

struct Tokenizers {
  std::unique_ptr<rlx::Tokenizer> spm, bpe, wpm;
};

std::unique_ptr<rlx::Tokenizer> build(const rlx::VocabSpec& spec) {
  auto t = rlx::make_tokenizer(spec);
  if (!t) std::abort();  // the built-in vocabularies are valid: a failure is a bug
  return std::move(*t);
}

Tokenizers make_tokenizers() {
  const std::string sp = "\xE2\x96\x81";
  Tokenizers out;
  {
    rlx::VocabSpec s;
    s.model = "llama";
    s.tokens = {"<unk>", "<s>", "</s>", "<|user|>"};
    s.token_types = {rlx::TokenType::kUnknown, rlx::TokenType::kControl, rlx::TokenType::kControl,
                     rlx::TokenType::kUserDefined};
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      s.tokens.push_back(name);
      s.token_types.push_back(rlx::TokenType::kByte);
    }
    for (const std::string& p : {sp, std::string("a"), std::string("b"), sp + "a", std::string("ab"),
                                 std::string("\xC3\xA9"), std::string("\xE4\xB8\xAD")}) {
      s.tokens.push_back(p);
      s.token_types.push_back(rlx::TokenType::kNormal);
    }
    s.scores.assign(s.tokens.size(), -1.0f);
    s.ids = {.bos = 1, .eos = 2, .unk = 0};
    out.spm = build(s);
  }
  {
    rlx::VocabSpec s;
    s.model = "gpt2";
    s.pre = "llama-bpe";
    const auto& map = rlx::tok::byte_level_map();
    for (int b = 0; b < 256; ++b) s.tokens.push_back(map.byte_to_utf8[b]);
    s.tokens.insert(s.tokens.end(), {"ab", "\xC4\xA0" "a", "<|endoftext|>"});
    s.merges = {"a b", "\xC4\xA0 a"};
    s.token_types.assign(s.tokens.size(), rlx::TokenType::kNormal);
    s.token_types.back() = rlx::TokenType::kControl;
    out.bpe = build(s);
  }
  {
    rlx::VocabSpec s;
    s.model = "bert";
    s.tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "##b", "ab", "中", ","};
    out.wpm = build(s);
  }
  return out;
}

bool is_valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    const size_t n = rlx::tok::utf8_decode_one(s, i, &cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizers toks = make_tokenizers();
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const rlx::Tokenizer* t : {toks.spm.get(), toks.bpe.get(), toks.wpm.get()}) {
    for (bool parse_special : {false, true}) {
      const std::vector<int32_t> ids = t->encode(text, /*add_special=*/true, parse_special);
      for (int32_t id : ids)
        if (id < 0 || id >= t->n_tokens()) std::abort();
      auto decoded = t->decode(ids, /*render_special=*/false);
      if (!decoded) std::abort();
      // SentencePiece with byte fallback is lossless even for invalid UTF-8, except that
      // a literal ▁ reads back as a space and an added token is followed by a
      // dummy-prefix space: skip inputs holding either.
      if (t == toks.spm.get() && !parse_special && text.find("<|user|>") == std::string::npos &&
          text.find("\xE2\x96\x81") == std::string::npos && *decoded != text)
        std::abort();
      rlx::StreamDecoder stream(*t);
      std::string streamed;
      for (int32_t id : ids) {
        auto piece = stream.push(id);
        if (!piece) std::abort();
        streamed += *piece;
      }
      streamed += stream.flush();
      if (!is_valid_utf8(streamed)) std::abort();
    }
  }
  return 0;
}
