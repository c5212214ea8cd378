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

Expected<VocabSpec> vocab_from_gguf(const std::string& path) {
  ASSIGN_OR_RETURN(formats::GgufFile file, formats::GgufFile::open(path));
  return vocab_from_gguf(file);
}

Expected<std::unique_ptr<Tokenizer>> load_tokenizer_from_gguf(const std::string& path) {
  ASSIGN_OR_RETURN(VocabSpec spec, vocab_from_gguf(path));
  return make_tokenizer(spec);
}

}  // namespace rlx
