// VocabSpec from a Hugging Face tokenizer.json: BPE (byte-level, or SentencePiece-
// style with byte fallback), WordPiece and Unigram models, their pre-tokenizers and
// normalizers, added tokens and the BOS/EOS template of the post-processor.
// Unsupported pieces are errors.
#include <optional>

#include <nlohmann/json.hpp>

#include "rlx/base/json_limits.h"
#include "rlx/formats/mapped_file.h"
#include "rlx/models/tokenizer.h"
#include "tokenizer_impl.h"

namespace rlx {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kMetaSpace = "\xE2\x96\x81";  // ▁

// The member `key` of object `j`, or a null value: a reference, never a copy of the subtree.
const Json& member(const Json& j, const char* key) {
  static const Json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// A token id of a post-processor: an integer that fits int32 (2^32 + 4 must not wrap to 4).
Expected<int32_t> checked_id(const Json& v, const char* what, const std::string& name) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
    return Error::parse("{}: post_processor '{}' id {} is not a token id", name, what, v.dump());
  return static_cast<int32_t>(v.get<int64_t>());
}

bool is_type(const Json& j, std::string_view type) {
  return j.is_object() && j.contains("type") && j["type"].is_string() && j["type"].get<std::string>() == type;
}

// True if `j` (a pre-tokenizer or normalizer, possibly a Sequence) contains `type`.
const Json* find_component(const Json& j, std::string_view type, const char* list_key) {
  if (!j.is_object()) return nullptr;
  if (is_type(j, type)) return &j;
  if (is_type(j, "Sequence") && j.contains(list_key) && j[list_key].is_array()) {
    for (const Json& item : j[list_key])
      if (const Json* hit = find_component(item, type, list_key)) return hit;
  }
  return nullptr;
}

// Escapes `literal` for use inside an ICU regex.
std::string regex_quote(const std::string& literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// Appends the regexes of a byte-level pre-tokenizer; sets add_space_prefix from ByteLevel.
Status collect_regexes(const Json& pt, const std::string& name, VocabSpec& spec) {
  if (pt.is_null()) return Status();
  if (!pt.is_object() || !pt.contains("type"))
    return Error::parse("{}: pre_tokenizer is not an object with a 'type'", name);
  const std::string type = pt["type"].get<std::string>();
  if (type == "Sequence") {
    for (const Json& item : pt.at("pretokenizers")) TRY(collect_regexes(item, name, spec));
  } else if (type == "ByteLevel") {
    if (pt.value("add_prefix_space", false)) spec.add_space_prefix = true;
    if (pt.value("use_regex", true)) {
      ASSIGN_OR_RETURN(std::vector<std::string> gpt2, tok::pre_tokenizer_regexes("gpt-2"));
      spec.pre_regexes.insert(spec.pre_regexes.end(), gpt2.begin(), gpt2.end());
    }
  } else if (type == "Split") {
    const std::string behavior = pt.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated" || pt.value("invert", false))
      return Error::unsupported("{}: pre_tokenizer Split with behavior '{}'{} is not supported", name, behavior,
                                pt.value("invert", false) ? " (inverted)" : "");
    const Json& pattern = pt.at("pattern");
    if (pattern.contains("Regex")) spec.pre_regexes.push_back(pattern["Regex"].get<std::string>());
    else if (pattern.contains("String")) spec.pre_regexes.push_back(regex_quote(pattern["String"].get<std::string>()));
    else return Error::parse("{}: pre_tokenizer Split has neither pattern.Regex nor pattern.String", name);
  } else if (type == "Digits") {
    spec.pre_regexes.push_back(pt.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+");
  } else if (type == "Punctuation") {
    spec.pre_regexes.push_back("[\\p{P}!-/:-@\\[-`{-~]");
  } else {
    return Error::unsupported("{}: pre_tokenizer '{}' is not supported with a byte-level BPE model", name, type);
  }
  return Status();
}

// RFC 4648 base64 (standard alphabet; '=' padding and whitespace allowed); nullopt on
// any other character.
std::optional<std::string> base64_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+') v = 62;
    else if (c == '/') v = 63;
    else if (c == '=' || c == '\n' || c == '\r' || c == ' ') continue;
    else return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

// The normalizer and pre-tokenizer of a Unigram model, as SentencePiece options:
// Precompiled (the charsmap), whitespace collapsing (Replace of " {2,}", Strip,
// WhitespaceSplit), the ▁ prefix (Metaspace / Prepend). Other components are refused.
Status read_unigram_text_options(const Json& norm, const Json& pre, const std::string& name, VocabSpec& spec) {
  bool collapse = false, prefix = false;
  std::vector<const Json*> parts;
  auto flatten = [&](auto&& self, const Json& j, const char* list_key) -> void {
    if (!j.is_object()) return;
    if (is_type(j, "Sequence") && j.contains(list_key) && j[list_key].is_array()) {
      for (const Json& item : j[list_key]) self(self, item, list_key);
    } else {
      parts.push_back(&j);
    }
  };
  flatten(flatten, norm, "normalizers");
  for (const Json* n : parts) {
    const std::string type = n->value("type", std::string());
    if (type == "Precompiled") {
      const Json& cm = member(*n, "precompiled_charsmap");
      if (cm.is_null()) continue;
      if (!cm.is_string()) return Error::parse("{}: normalizer Precompiled.precompiled_charsmap is not a string", name);
      auto bytes = base64_decode(cm.get<std::string>());
      if (!bytes) return Error::parse("{}: normalizer Precompiled.precompiled_charsmap is not base64", name);
      spec.precompiled_charsmap = std::move(*bytes);
    } else if (type == "Replace") {
      const Json& pat = member(*n, "pattern");
      const std::string regex = member(pat, "Regex").is_string() ? member(pat, "Regex").get<std::string>() : "";
      const std::string literal = member(pat, "String").is_string() ? member(pat, "String").get<std::string>() : "";
      const std::string content = n->value("content", std::string());
      if (regex == " {2,}" && content == " ") collapse = true;
      else if (literal == " " && content == kMetaSpace) continue;  // spaces as ▁: what the model does anyway
      else return Error::unsupported("{}: normalizer Replace of '{}' by '{}' is not supported with a Unigram model",
                                     name, regex.empty() ? literal : regex, content);
    } else if (type == "Strip") {
      collapse = true;
    } else if (type == "Prepend") {
      prefix = prefix || n->value("prepend", std::string()) == kMetaSpace;
    } else {
      return Error::unsupported("{}: normalizer '{}' is not supported with a Unigram model", name, type);
    }
  }
  if (find_component(pre, "WhitespaceSplit", "pretokenizers")) collapse = true;
  if (const Json* ms = find_component(pre, "Metaspace", "pretokenizers")) {
    const std::string scheme = ms->value("prepend_scheme", std::string());
    prefix = prefix || scheme == "always" || scheme == "first" || (scheme.empty() && ms->value("add_prefix_space", true));
  }
  spec.remove_extra_whitespaces = collapse;
  spec.add_space_prefix = prefix;
  return Status();
}

// Resolves BOS/EOS from the post-processor (TemplateProcessing / BertProcessing / RobertaProcessing).
Status read_post_processor(const Json& pp, VocabSpec& spec, const std::unordered_map<std::string, int32_t>& ids,
                           const std::string& name) {
  auto id_of = [&](const std::string& content) {
    auto it = ids.find(content);
    return it == ids.end() ? -1 : it->second;
  };
  if (pp.is_null()) {
    spec.add_bos = false;
    spec.add_eos = false;
    return {};
  }
  if (is_type(pp, "Sequence") && pp.contains("processors")) {
    for (const Json& p : pp["processors"])
      if (!is_type(p, "ByteLevel")) TRY(read_post_processor(p, spec, ids, name));
    if (!spec.add_bos) spec.add_bos = false;
    if (!spec.add_eos) spec.add_eos = false;
    return {};
  }
  if (is_type(pp, "TemplateProcessing") && pp.contains("single") && pp["single"].is_array()) {
    bool seen_sequence = false;
    int32_t bos = -1, eos = -1;
    for (const Json& item : pp["single"]) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
      } else if (item.contains("SpecialToken")) {
        const int32_t id = id_of(item["SpecialToken"].value("id", std::string()));
        if (!seen_sequence && bos < 0) bos = id;
        if (seen_sequence && eos < 0) eos = id;
      }
    }
    spec.add_bos = bos >= 0;
    spec.add_eos = eos >= 0;
    if (bos >= 0) spec.ids.bos = bos;
    if (eos >= 0) spec.ids.eos = eos;
    return {};
  }
  if ((is_type(pp, "BertProcessing") || is_type(pp, "RobertaProcessing")) && pp.contains("cls") &&
      pp.contains("sep")) {
    ASSIGN_OR_RETURN(spec.ids.cls, checked_id(pp["cls"].at(1), "cls", name));
    ASSIGN_OR_RETURN(spec.ids.sep, checked_id(pp["sep"].at(1), "sep", name));
    spec.ids.bos = spec.ids.cls;
    spec.ids.eos = spec.ids.sep;
    spec.add_bos = true;
    spec.add_eos = true;
    return {};
  }
  spec.add_bos = false;
  spec.add_eos = false;
  return {};
}

Expected<VocabSpec> parse_hf(const Json& j, const std::string& name) {
  VocabSpec spec;
  spec.source = name;
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    return Error::parse("{}: no 'model' object", name);
  const Json& model = j["model"];
  const std::string type = model.value("type", std::string());
  if (type != "BPE" && type != "WordPiece" && type != "Unigram")
    return Error::unsupported("{}: tokenizer model '{}' is not supported (expected BPE, WordPiece or Unigram)", name,
                              type);
  const bool unigram = type == "Unigram";
  if (!model.contains("vocab") || (unigram ? !model["vocab"].is_array() : !model["vocab"].is_object()))
    return Error::parse("{}: model.vocab is not {}", name, unigram ? "an array of [piece, score]" : "an object");

  // Vocabulary: model.vocab plus added_tokens, dense ids.
  const Json empty = Json::array();
  const Json& added = j.contains("added_tokens") && j["added_tokens"].is_array() ? j["added_tokens"] : empty;
  const size_t limit = model["vocab"].size() + added.size();
  std::vector<std::string> tokens(limit);
  std::vector<bool> seen(limit, false);
  std::vector<TokenType> types(limit, TokenType::kNormal);
  std::vector<float> scores;
  size_t n = 0;
  auto place = [&](int64_t id, const std::string& text, TokenType t) -> Status {
    if (id < 0 || static_cast<size_t>(id) >= limit)
      return Error::parse("{}: token '{}' has id {}, outside 0..{}", name, text, id, limit - 1);
    tokens[id] = text;
    types[id] = t;
    seen[id] = true;
    n = std::max(n, static_cast<size_t>(id) + 1);
    return Status();
  };
  if (unigram) {
    scores.assign(limit, 0.0f);
    int64_t id = 0;
    for (const Json& entry : model["vocab"]) {
      if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number())
        return Error::parse("{}: model.vocab[{}] is not [piece, score]", name, id);
      TRY(place(id, entry[0].get<std::string>(), TokenType::kNormal));
      scores[id++] = entry[1].get<float>();
    }
  } else {
    for (const auto& [text, id] : model["vocab"].items()) {
      if (!id.is_number_integer()) return Error::parse("{}: model.vocab['{}'] is not an integer id", name, text);
      TRY(place(id.get<int64_t>(), text, TokenType::kNormal));
    }
  }
  for (const Json& a : added) {
    const std::string content = a.at("content").get<std::string>();
    TRY(place(a.at("id").get<int64_t>(), content,
              a.value("special", false) ? TokenType::kControl : TokenType::kUserDefined));
  }
  for (size_t i = 0; i < n; ++i)
    if (!seen[i]) return Error::parse("{}: no token has id {} (ids must be dense)", name, i);
  tokens.resize(n);
  types.resize(n);
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < n; ++i) ids.emplace(tokens[i], static_cast<int32_t>(i));
  auto id_of = [&](const Json& v) -> int32_t {
    if (!v.is_string()) return -1;
    auto it = ids.find(v.get<std::string>());
    return it == ids.end() ? -1 : it->second;
  };
  if (model.contains("unk_token")) spec.ids.unk = id_of(model["unk_token"]);
  if (unigram && model.contains("unk_id") && !model["unk_id"].is_null()) {
    const Json& u = model["unk_id"];
    if (!u.is_number_integer() || u.get<int64_t>() < 0 || u.get<int64_t>() >= static_cast<int64_t>(n))
      return Error::parse("{}: model.unk_id {} is not a token id", name, u.dump());
    spec.ids.unk = static_cast<int32_t>(u.get<int64_t>());
    types[spec.ids.unk] = TokenType::kUnknown;
  }
  if (spec.ids.unk >= 0 && types[spec.ids.unk] == TokenType::kControl) types[spec.ids.unk] = TokenType::kUnknown;

  const Json& pre = member(j, "pre_tokenizer");
  const Json& norm = member(j, "normalizer");
  if (unigram) {
    spec.model = "t5";
    scores.resize(n);
    spec.scores = std::move(scores);
    spec.byte_fallback = model.value("byte_fallback", false);
    if (*spec.byte_fallback) {
      for (size_t i = 0; i < n; ++i) {
        const std::string& t = tokens[i];
        if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>') types[i] = TokenType::kByte;
      }
    }
    TRY(read_unigram_text_options(norm, pre, name, spec));
  } else if (type == "WordPiece") {
    spec.model = "bert";
    spec.wordpiece_continuing_prefix = model.value("continuing_subword_prefix", std::string("##"));
    spec.wordpiece_max_chars_per_word = model.value("max_input_chars_per_word", 100);
    if (const Json* bn = find_component(norm, "BertNormalizer", "normalizers")) {
      spec.wordpiece_lowercase = bn->value("lowercase", true);
      if (bn->contains("strip_accents") && (*bn)["strip_accents"].is_boolean())
        spec.wordpiece_strip_accents = (*bn)["strip_accents"].get<bool>();
    } else {
      spec.wordpiece_lowercase = false;
    }
  } else {
    const Json& merges = member(model, "merges");
    if (!merges.is_null() && !merges.is_array()) return Error::parse("{}: model.merges is not an array", name);
    for (const Json& m : merges) {
      if (m.is_string()) spec.merges.push_back(m.get<std::string>());
      else if (m.is_array() && m.size() == 2) spec.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      else return Error::parse("{}: a model.merges entry is neither 'a b' nor [a, b]", name);
    }
    if (model.contains("ignore_merges") && model["ignore_merges"].is_boolean())
      spec.ignore_merges = model["ignore_merges"].get<bool>();
    const bool byte_level = find_component(pre, "ByteLevel", "pretokenizers") != nullptr ||
                            is_type(member(j, "decoder"), "ByteLevel");
    if (byte_level) {
      spec.model = "gpt2";
      spec.add_space_prefix = false;
      TRY(collect_regexes(pre, name, spec));
    } else {
      spec.model = "llama";
      // SentencePiece-style: spaces are ▁ (normalizer Replace or Metaspace), maybe prefixed.
      bool prefix = false;
      if (const Json* ms = find_component(pre, "Metaspace", "pretokenizers"))
        prefix = ms->value("add_prefix_space", false) || ms->value("prepend_scheme", std::string()) == "first" ||
                 ms->value("prepend_scheme", std::string()) == "always";
      if (const Json* pp = find_component(norm, "Prepend", "normalizers"))
        prefix = prefix || pp->value("prepend", std::string()) == kMetaSpace;
      spec.add_space_prefix = prefix;
      if (model.value("byte_fallback", false)) {
        for (size_t i = 0; i < n; ++i) {
          const std::string& t = tokens[i];
          if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>') types[i] = TokenType::kByte;
        }
      }
    }
  }
  spec.tokens = std::move(tokens);
  spec.token_types = std::move(types);
  TRY(read_post_processor(member(j, "post_processor"), spec, ids, name));
  return spec;
}

}  // namespace

Expected<VocabSpec> vocab_from_hf_tokenizer_json_text(std::string_view json, const std::string& name) {
  TRY(check_json_depth(json, name));  // the readers below recurse into Sequence components
  const Json j = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error::parse("{}: not valid JSON", name);
  try {
    return parse_hf(j, name);
  } catch (const Json::exception& e) {  // a field of the wrong JSON type
    return Error::parse("{}: unexpected tokenizer.json structure: {}", name, e.what());
  }
}

Expected<VocabSpec> vocab_from_hf_tokenizer_json(const std::string& path) {
  ASSIGN_OR_RETURN(formats::MappedFile file, formats::MappedFile::open(path));
  return vocab_from_hf_tokenizer_json_text(
      std::string_view(reinterpret_cast<const char*>(file.bytes().data()), file.size()), path);
}

}  // namespace rlx
