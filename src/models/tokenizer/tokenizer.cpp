// The model-independent half of every tokenizer: vocabulary checks, special-token
// partition of the input, BOS/EOS, token -> bytes, decoding and streaming decoding.
// `make_tokenizer` dispatches on VocabSpec::model to the model files.
#include <algorithm>
#include <limits>

#include "tokenizer_impl.h"
#include "unicode_util.h"

namespace rlx {
namespace tok {
namespace {

std::string source_name(const std::string& source) { return source.empty() ? "vocabulary" : source; }

// "<0xNN>" -> NN, or -1.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = t[i];
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return -1;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

Expected<Vocab> build_vocab(const VocabSpec& spec, bool default_add_bos, bool default_add_eos,
                            bool default_add_space_prefix) {
  const std::string src = source_name(spec.source);
  const size_t n = spec.tokens.size();
  if (n == 0) return Error::invalid_file("{}: the vocabulary has no tokens", src);
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return Error::invalid_file("{}: {} tokens is more than int32 ids can address", src, n);
  if (!spec.scores.empty() && spec.scores.size() != n)
    return Error::invalid_file("{}: scores has {} entries, expected one per token ({})", src, spec.scores.size(), n);
  if (!spec.token_types.empty() && spec.token_types.size() != n)
    return Error::invalid_file("{}: token_type has {} entries, expected one per token ({})", src,
                               spec.token_types.size(), n);
  for (size_t i = 0; i < spec.token_types.size(); ++i) {
    const auto t = static_cast<int32_t>(spec.token_types[i]);
    if (t < 0 || t > static_cast<int32_t>(TokenType::kByte))
      return Error::invalid_file("{}: token {} ('{}') has token type {}, expected 0..6", src, i, spec.tokens[i], t);
  }
  const std::pair<const char*, int32_t> special[] = {
      {"bos", spec.ids.bos}, {"eos", spec.ids.eos}, {"eot", spec.ids.eot}, {"unk", spec.ids.unk},
      {"pad", spec.ids.pad}, {"sep", spec.ids.sep}, {"cls", spec.ids.cls}, {"mask", spec.ids.mask}};
  for (const auto& [name, id] : special) {
    if (id < -1 || id >= static_cast<int64_t>(n))
      return Error::invalid_file("{}: {} token id {} is outside the vocabulary (0..{})", src, name, id, n - 1);
  }

  Vocab v;
  v.tokens = spec.tokens;
  v.scores = spec.scores.empty() ? std::vector<float>(n, 0.0f) : spec.scores;
  v.types = spec.token_types.empty() ? std::vector<TokenType>(n, TokenType::kNormal) : spec.token_types;
  v.ids = spec.ids;
  v.add_bos = spec.add_bos.value_or(default_add_bos);
  v.add_eos = spec.add_eos.value_or(default_add_eos);
  v.add_space_prefix = spec.add_space_prefix.value_or(default_add_space_prefix);
  v.source = src;
  v.to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    v.to_id.emplace(std::string_view(v.tokens[i]), static_cast<int32_t>(i));
    v.max_token_bytes = std::max(v.max_token_bytes, v.tokens[i].size());
  }
  if (v.add_bos && v.ids.bos < 0)
    return Error::invalid_file("{}: the vocabulary asks to add BOS but has no bos token id", src);
  if (v.add_eos && v.ids.eos < 0)
    return Error::invalid_file("{}: the vocabulary asks to add EOS but has no eos token id", src);
  return v;
}

Status build_merges(const VocabSpec& spec, const Vocab& v, MergeTable& merges) {
  merges.clear();
  merges.reserve(spec.merges.size());
  for (size_t i = 0; i < spec.merges.size(); ++i) {
    const std::string& m = spec.merges[i];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos || sp + 1 >= m.size())
      return Error::invalid_file("{}: merge {} ('{}') is not of the form 'left right'", v.source, i, m);
    const std::string_view left = std::string_view(m).substr(0, sp);
    const std::string_view right = std::string_view(m).substr(sp + 1);
    const std::string joined = std::string(left) + std::string(right);
    auto find = [&](std::string_view t) {
      auto it = v.to_id.find(t);
      return it == v.to_id.end() ? -1 : it->second;
    };
    const int32_t l = find(left), r = find(right), res = find(joined);
    if (l < 0 || r < 0 || res < 0)
      return Error::invalid_file("{}: merge {} ('{}') names '{}', which is not in the vocabulary", v.source, i, m,
                                 l < 0 ? std::string(left) : r < 0 ? std::string(right) : joined);
    merges.emplace(pair_key(l, r), Merge{static_cast<int32_t>(i), res});  // first (best) rank wins
  }
  return Status();
}

void append_metaspace_piece(std::string_view piece, std::string& out) {
  constexpr std::string_view kSpace = "\xE2\x96\x81";  // ▁ U+2581
  for (size_t i = 0; i < piece.size();) {
    if (piece.substr(i, kSpace.size()) == kSpace) {
      out.push_back(' ');
      i += kSpace.size();
    } else {
      out.push_back(piece[i++]);
    }
  }
}

TokenizerBase::TokenizerBase(Vocab vocab) : vocab_(std::move(vocab)) {
  for (size_t i = 0; i < vocab_.tokens.size(); ++i) {
    const TokenType t = vocab_.types[i];
    const std::string& text = vocab_.tokens[i];
    if (text.empty()) continue;
    if (t != TokenType::kControl && t != TokenType::kUnknown && t != TokenType::kUserDefined) continue;
    int32_t node = 0;
    for (char c : text) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
      auto [it, added] = special_edges_.try_emplace(key, static_cast<int32_t>(special_nodes_.size()));
      if (added) special_nodes_.emplace_back();
      node = it->second;
    }
    // Two specials with one spelling: the lower id wins.
    SpecialTrieNode& n = special_nodes_[static_cast<size_t>(node)];
    if (n.token < 0) n.token = static_cast<int32_t>(i);
    if (t == TokenType::kUserDefined && n.user_token < 0) n.user_token = static_cast<int32_t>(i);
  }
}

void TokenizerBase::partition(std::string_view text, bool parse_special, std::vector<Fragment>& out) const {
  size_t start = 0;
  size_t i = 0;
  while (i < text.size()) {
    // The longest special spelled from i on that this call may match.
    int32_t hit = -1;
    int32_t node = 0;
    for (size_t j = i; j < text.size(); ++j) {
      const auto edge = special_edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[j]));
      if (edge == special_edges_.end()) break;
      node = edge->second;
      const SpecialTrieNode& n = special_nodes_[static_cast<size_t>(node)];
      const int32_t id = parse_special ? n.token : n.user_token;
      if (id >= 0) hit = id;
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (i > start) out.push_back({start, i, -1});
    out.push_back({i, i + vocab_.tokens[hit].size(), hit});
    i += vocab_.tokens[hit].size();
    start = i;
  }
  if (start < text.size()) out.push_back({start, text.size(), -1});
}

std::vector<int32_t> TokenizerBase::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && vocab_.add_bos) out.push_back(vocab_.ids.bos);
  std::vector<Fragment> fragments;
  partition(text, parse_special, fragments);
  bool after_special = true;
  for (const Fragment& f : fragments) {
    if (f.special >= 0) {
      out.push_back(f.special);
      after_special = true;
    } else {
      encode_fragment(text.substr(f.begin, f.end - f.begin), after_special, out);
      after_special = false;
    }
  }
  if (add_special && vocab_.add_eos) out.push_back(vocab_.ids.eos);
  return out;
}

std::string TokenizerBase::token_to_piece(int32_t id, bool render_special) const {
  std::string out;
  if (!valid_id(id)) return out;
  const std::string& text = vocab_.tokens[id];
  switch (vocab_.types[id]) {
    case TokenType::kControl:
    case TokenType::kUnknown:
      if (render_special) out = text;
      break;
    case TokenType::kUserDefined:
      out = text;
      break;
    case TokenType::kByte: {
      const int b = parse_byte_token(text);
      if (b >= 0) out.push_back(static_cast<char>(b));
      else append_text_piece(id, out);
      break;
    }
    case TokenType::kNormal:
    case TokenType::kUnused:
    case TokenType::kUndefined:
      append_text_piece(id, out);
      break;
  }
  return out;
}

Expected<std::string> TokenizerBase::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  bool first = true;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!valid_id(ids[i]))
      return Error::invalid_argument("{}: token id {} (position {}) is outside the vocabulary (0..{})",
                                     vocab_.source, ids[i], i, n_tokens() - 1);
    std::string piece = token_to_piece(ids[i], render_special);
    if (first && !piece.empty()) {
      if (strips_leading_space() && piece[0] == ' ') piece.erase(0, 1);
      first = false;
    }
    out += piece;
  }
  return out;
}

std::string_view TokenizerBase::token_text(int32_t id) const {
  return valid_id(id) ? std::string_view(vocab_.tokens[id]) : std::string_view();
}

TokenType TokenizerBase::token_type(int32_t id) const {
  return valid_id(id) ? vocab_.types[id] : TokenType::kUndefined;
}

std::optional<int32_t> TokenizerBase::token_id(std::string_view text) const {
  const int32_t id = find(text);
  if (id < 0) return std::nullopt;
  return id;
}

bool TokenizerBase::is_end_of_generation(int32_t id) const {
  return id >= 0 && (id == vocab_.ids.eos || id == vocab_.ids.eot);
}

bool TokenizerBase::is_special(int32_t id) const {
  if (!valid_id(id)) return false;
  const TokenType t = vocab_.types[id];
  return t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined;
}

}  // namespace tok

Expected<std::unique_ptr<Tokenizer>> make_tokenizer(const VocabSpec& spec) {
  const std::string& m = spec.model;
  if (m == "llama" || m == "gemma" || m == "gemma3" || m == "spm") return tok::make_sentencepiece_tokenizer(spec);
  if (m == "gpt2" || m == "bpe") return tok::make_byte_level_bpe_tokenizer(spec);
  if (m == "bert" || m == "wpm" || m == "wordpiece") return tok::make_wordpiece_tokenizer(spec);
  if (m == "t5" || m == "ugm" || m == "unigram") return tok::make_unigram_tokenizer(spec);
  return Error::unsupported("{}: tokenizer model '{}' is not supported (expected llama, gemma, gpt2, bert or t5)",
                            spec.source.empty() ? "vocabulary" : spec.source, m);
}

Expected<std::string> StreamDecoder::push(int32_t id) {
  if (id < 0 || id >= tokenizer_->n_tokens())
    return Error::invalid_argument("token id {} is outside the vocabulary (0..{})", id, tokenizer_->n_tokens() - 1);
  if (at_start_) {
    // decode() of the first visible piece drops the space that encoding prepended.
    const int32_t one[] = {id};
    ASSIGN_OR_RETURN(std::string piece, tokenizer_->decode(one, render_special_));
    if (!piece.empty()) at_start_ = false;
    pending_ += piece;
  } else {
    pending_ += tokenizer_->token_to_piece(id, render_special_);
  }
  std::string out;
  for (;;) {
    const tok::Utf8Scan scan = tok::utf8_scan(pending_);
    out.append(pending_, 0, scan.complete);
    if (!scan.invalid_at_complete) {
      pending_.erase(0, scan.complete);
      break;
    }
    tok::append_utf8(out, tok::kReplacementChar);
    pending_.erase(0, scan.complete + 1);
  }
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  tok::append_sanitized_utf8(out, pending_);
  pending_.clear();
  at_start_ = true;
  return out;
}

}  // namespace rlx
