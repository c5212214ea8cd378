// resolve_model_path and the helpers that open what it points to (config and weights,
// the stored tensor list, the tokenizer) for GGUF files and Hugging Face folders alike.
#include "model_path.h"

#include <cstdio>
#include <filesystem>

#include "rlx/formats/gguf.h"
#include "rlx/formats/safetensors.h"

namespace rlx::cli {
namespace {

namespace fs = std::filesystem;

// A file of a Hugging Face folder that stands for the folder: its config.json, a
// .safetensors shard or an index.
bool names_hf_file(const fs::path& p) {
  const std::string name = p.filename().string();
  if (name == "config.json") return true;
  auto ends_with = [&name](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends_with(".safetensors") || ends_with(".safetensors.index.json");
}

}  // namespace

Expected<ModelPath> resolve_model_path(const std::string& arg) {
  std::error_code ec;
  const fs::path p(arg);
  const fs::file_status st = fs::status(p, ec);
  if (ec || !fs::exists(st)) return Error::not_found("model '{}' does not exist", arg);
  if (fs::is_directory(st)) {
    if (!fs::is_regular_file(p / "config.json", ec))
      return Error::invalid_argument(
          "model '{}' is a folder without config.json (expected a GGUF file or a Hugging Face folder: config.json + "
          "safetensors)",
          arg);
    return ModelPath{arg, true};
  }
  if (!fs::is_regular_file(st)) return Error::invalid_argument("model '{}' is not a regular file or folder", arg);
  if (names_hf_file(p)) {
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    if (!fs::is_regular_file(dir / "config.json", ec))
      return Error::invalid_argument(
          "model '{}': its folder has no config.json (a Hugging Face model needs config.json next to its "
          "safetensors)",
          arg);
    return ModelPath{dir.string(), true};
  }
  return ModelPath{arg, false};
}

CLI::Validator model_path_check() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        auto r = resolve_model_path(value);
        return r ? std::string() : r.error().message();
      },
      "MODEL", "model path");
}

Expected<OpenedModel> open_model(const ModelPath& where) {
  OpenedModel m;
  m.where = where;
  if (where.hf) {
    ASSIGN_OR_RETURN(m.config, models::config_from_hf((fs::path(where.path) / "config.json").string()));
    ASSIGN_OR_RETURN(m.weights, models::SafetensorsWeightSource::open(where.path, m.config));
    return m;
  }
  ASSIGN_OR_RETURN(formats::GgufFile file, formats::GgufFile::open(where.path));
  auto shared = std::make_shared<const formats::GgufFile>(std::move(file));
  ASSIGN_OR_RETURN(m.config, models::config_from_gguf(*shared));
  m.weights = std::make_unique<models::GgufWeightSource>(shared);
  return m;
}

Expected<std::vector<StoredTensor>> list_stored_tensors(const ModelPath& where) {
  std::vector<StoredTensor> out;
  if (where.hf) {
    ASSIGN_OR_RETURN(formats::SafetensorsModel st, formats::SafetensorsModel::open(where.path));
    for (const formats::SafetensorsFile& shard : st.shards())
      for (const formats::SafetensorsTensor& t : shard.tensors())
        out.push_back({t.name, std::string(formats::safetensors_dtype_name(t.dtype)), t.shape, t.n_elements(),
                       static_cast<int64_t>(t.n_bytes)});
    return out;
  }
  ASSIGN_OR_RETURN(formats::GgufFile f, formats::GgufFile::open(where.path));
  for (const auto& t : f.tensors())
    out.push_back({t.name, std::string(formats::ggml_type_name(t.type)), t.shape(), t.n_elements(),
                   static_cast<int64_t>(t.n_bytes)});
  return out;
}

bool is_expert_tensor(const std::string& name) {
  return name.find("_exps.") != std::string::npos || name.find(".experts.") != std::string::npos;
}

Expected<std::unique_ptr<Tokenizer>> open_tokenizer(const std::string& path) {
  fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec))
    p /= "tokenizer.json";
  else if (names_hf_file(p))
    p = (p.has_parent_path() ? p.parent_path() : fs::path(".")) / "tokenizer.json";
  if (p.filename() == "tokenizer.json" && !fs::exists(p, ec))
    return Error::not_found("'{}' has no tokenizer.json (the text commands need the model's tokenizer)",
                            p.parent_path().string());
  if (p.extension() == ".json") {
    ASSIGN_OR_RETURN(VocabSpec spec, vocab_from_hf_tokenizer_json(p.string()));
    return make_tokenizer(spec);
  }
  return load_tokenizer_from_gguf(path);
}

void warn_vocab_mismatch(const Tokenizer& tok, int64_t n_vocab, const std::string& path) {
  if (tok.n_tokens() >= n_vocab) return;
  std::fprintf(stderr,
               "rlx: %s: the tokenizer has %d tokens, the model %lld output rows; ids past the tokenizer's add no "
               "text if generated\n",
               path.c_str(), tok.n_tokens(), static_cast<long long>(n_vocab));
}

}  // namespace rlx::cli
