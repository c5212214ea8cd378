// VocabSpec from the `tokenizer.ggml.*` metadata of a GGUF file (read through the
// formats/ GGUF reader). Required keys missing or of the wrong type give errors that
// name the file and key; optional special ids that point outside the vocabulary are
// dropped with a warning, as llama.cpp does.
#include "rlx/base/log.h"
#include "rlx/models/tokenizer.h"

namespace rlx {
namespace {

constexpr std::string_view kWordStart = "\xE2\x96\x81";  // ▁: GGUF's WordPiece word-start marker

}  // namespace

Expected<VocabSpec> vocab_from_gguf(const formats::GgufFile& file) {
  VocabSpec spec;
  spec.source = file.name();
  ASSIGN_OR_RETURN(std::string_view model, file.get_string("tokenizer.ggml.model"));
  spec.model = std::string(model);
  if (file.contains("tokenizer.ggml.pre")) {
    ASSIGN_OR_RETURN(std::string_view pre, file.get_string("tokenizer.ggml.pre"));
    spec.pre = std::string(pre);
  }
  {
    ASSIGN_OR_RETURN(std::vector<std::string_view> tokens, file.get_string_array("tokenizer.ggml.tokens"));
    spec.tokens.assign(tokens.begin(), tokens.end());
  }
  const auto n = static_cast<int64_t>(spec.tokens.size());
  if (file.contains("tokenizer.ggml.scores")) {
    ASSIGN_OR_RETURN(spec.scores, file.get_f32_array("tokenizer.ggml.scores"));
  }
  if (file.contains("tokenizer.ggml.token_type")) {
    ASSIGN_OR_RETURN(std::vector<int64_t> types, file.get_int_array("tokenizer.ggml.token_type"));
    spec.token_types.reserve(types.size());
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] < 0 || types[i] > static_cast<int64_t>(TokenType::kByte))
        return Error::invalid_file("{}: tokenizer.ggml.token_type[{}] is {}, expected 0..6", file.name(), i,
                                   types[i]);
      spec.token_types.push_back(static_cast<TokenType>(types[i]));
    }
  }
  if (file.contains("tokenizer.ggml.merges")) {
    ASSIGN_OR_RETURN(std::vector<std::string_view> merges, file.get_string_array("tokenizer.ggml.merges"));
    spec.merges.assign(merges.begin(), merges.end());
  }

  struct IdKey {
    const char* key;
    int32_t* id;
    bool required_in_range;
  };
  const IdKey id_keys[] = {
      {"tokenizer.ggml.bos_token_id", &spec.ids.bos, true},
      {"tokenizer.ggml.eos_token_id", &spec.ids.eos, true},
      {"tokenizer.ggml.unknown_token_id", &spec.ids.unk, true},
      {"tokenizer.ggml.eot_token_id", &spec.ids.eot, false},
      {"tokenizer.ggml.padding_token_id", &spec.ids.pad, false},
      {"tokenizer.ggml.seperator_token_id", &spec.ids.sep, false},  // sic: the GGUF spelling
      {"tokenizer.ggml.separator_token_id", &spec.ids.sep, false},
      {"tokenizer.ggml.cls_token_id", &spec.ids.cls, false},
      {"tokenizer.ggml.mask_token_id", &spec.ids.mask, false},
  };
  for (const IdKey& k : id_keys) {
    if (!file.contains(k.key)) continue;
    ASSIGN_OR_RETURN(int64_t id, file.get_int(k.key));
    if (id < 0 || id >= n) {
      if (k.required_in_range)
        return Error::invalid_file("{}: {} is {}, outside the vocabulary (0..{})", file.name(), k.key, id, n - 1);
      log(LogLevel::kWarn, "{}: ignoring {} = {}, outside the vocabulary (0..{})", file.name(), k.key, id, n - 1);
      continue;
    }
    *k.id = static_cast<int32_t>(id);
  }
  struct FlagKey {
    const char* key;
    std::optional<bool>* flag;
  };
  const FlagKey flag_keys[] = {{"tokenizer.ggml.add_bos_token", &spec.add_bos},
                               {"tokenizer.ggml.add_eos_token", &spec.add_eos},
                               {"tokenizer.ggml.add_space_prefix", &spec.add_space_prefix},
                               {"tokenizer.ggml.remove_extra_whitespaces", &spec.remove_extra_whitespaces}};
  for (const FlagKey& k : flag_keys) {
    if (!file.contains(k.key)) continue;
    ASSIGN_OR_RETURN(bool v, file.get_bool(k.key));
    *k.flag = v;
  }
  if (file.contains("tokenizer.ggml.precompiled_charsmap")) {
    // Raw bytes, written as an array of u8 or i8 depending on the converter.
    ASSIGN_OR_RETURN(const formats::GgufArray* a, file.get_array("tokenizer.ggml.precompiled_charsmap"));
    if (a->elem_type != formats::GgufValueType::kU8 && a->elem_type != formats::GgufValueType::kI8)
      return Error::invalid_file("{}: tokenizer.ggml.precompiled_charsmap holds {}, expected bytes (u8 or i8)",
                                 file.name(), formats::gguf_value_type_name(a->elem_type));
    spec.precompiled_charsmap.assign(reinterpret_cast<const char*>(a->raw), a->count);
  }
  if (spec.model == "bert") {
    // convert_hf_to_gguf rewrites WordPiece vocabularies: word starts get ▁, "##" goes.
    spec.wordpiece_word_prefix = std::string(kWordStart);
    spec.wordpiece_continuing_prefix.clear();
  }
  return spec;
}

Status write_vocab_to_gguf(const VocabSpec& spec, formats::GgufWriter& w) {
  using formats::GgufMetaValue;
  using formats::GgufValueType;
  const std::string src = spec.source.empty() ? "vocabulary" : spec.source;
  const size_t n = spec.tokens.size();
  auto type_of = [&](size_t i) { return spec.token_types.empty() ? TokenType::kNormal : spec.token_types[i]; };
  std::vector<std::string> tokens = spec.tokens;
  if (spec.model == "bert") {
    // GGUF's WordPiece spelling: word starts take ▁, continuations lose their prefix.
    const std::string& cont = spec.wordpiece_continuing_prefix;
    for (size_t i = 0; i < n; ++i) {
      if (type_of(i) != TokenType::kNormal) continue;
      std::string& t = tokens[i];
      if (!cont.empty() && t.starts_with(cont)) t.erase(0, cont.size());
      else if (!spec.wordpiece_word_prefix.empty() && t.starts_with(spec.wordpiece_word_prefix)) continue;
      else t = std::string(kWordStart) + t;
    }
  }
  TRY(w.add_string("tokenizer.ggml.model", spec.model));
  if (spec.model == "gpt2") {
    auto pre = spec.pre_regexes.empty() ? Expected<std::string>(spec.pre.empty() ? "default" : spec.pre)
                                        : pre_tokenizer_name(spec.pre_regexes);
    if (!pre) return pre.error().with_context(src);
    TRY(w.add_string("tokenizer.ggml.pre", *pre));
  } else if (!spec.pre.empty()) {
    TRY(w.add_string("tokenizer.ggml.pre", spec.pre));
  }
  TRY(w.add_string_array("tokenizer.ggml.tokens", tokens));
  if (!spec.scores.empty()) TRY(w.add_f32_array("tokenizer.ggml.scores", spec.scores));
  std::vector<int32_t> types(n);
  for (size_t i = 0; i < n; ++i) types[i] = static_cast<int32_t>(type_of(i));
  TRY(w.add_i32_array("tokenizer.ggml.token_type", types));
  if (!spec.merges.empty()) TRY(w.add_string_array("tokenizer.ggml.merges", spec.merges));
  const std::pair<const char*, int32_t> ids[] = {
      {"tokenizer.ggml.bos_token_id", spec.ids.bos},        {"tokenizer.ggml.eos_token_id", spec.ids.eos},
      {"tokenizer.ggml.unknown_token_id", spec.ids.unk},    {"tokenizer.ggml.eot_token_id", spec.ids.eot},
      {"tokenizer.ggml.padding_token_id", spec.ids.pad},    {"tokenizer.ggml.seperator_token_id", spec.ids.sep},
      {"tokenizer.ggml.cls_token_id", spec.ids.cls},        {"tokenizer.ggml.mask_token_id", spec.ids.mask}};
  for (const auto& [key, id] : ids)
    if (id >= 0) TRY(w.add_u32(key, static_cast<uint32_t>(id)));
  const std::pair<const char*, std::optional<bool>> flags[] = {
      {"tokenizer.ggml.add_bos_token", spec.add_bos},
      {"tokenizer.ggml.add_eos_token", spec.add_eos},
      {"tokenizer.ggml.add_space_prefix", spec.add_space_prefix},
      {"tokenizer.ggml.remove_extra_whitespaces", spec.remove_extra_whitespaces}};
  for (const auto& [key, flag] : flags)
    if (flag) TRY(w.add_bool(key, *flag));
  if (!spec.precompiled_charsmap.empty()) {
    std::vector<GgufMetaValue> bytes;
    bytes.reserve(spec.precompiled_charsmap.size());
    for (char c : spec.precompiled_charsmap) bytes.push_back(GgufMetaValue::u8(static_cast<uint8_t>(c)));
    TRY(w.add("tokenizer.ggml.precompiled_charsmap", GgufMetaValue::array(GgufValueType::kU8, std::move(bytes))));
  }
  return {};
}

Expected<VocabSpec> vocab_from_gguf(const std::string& path) {
  ASSIGN_OR_RETURN(formats::GgufFile file, formats::GgufFile::open(path));
  return vocab_from_gguf(file);
}

Expected<std::unique_ptr<Tokenizer>> load_tokenizer_from_gguf(const std::string& path) {
  ASSIGN_OR_RETURN(VocabSpec spec, vocab_from_gguf(path));
  return make_tokenizer(spec);
}

}  // namespace rlx
