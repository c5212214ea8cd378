// `rlx info MODEL`: architecture, metadata (long arrays summarised), tensor table
// and bytes per dtype of a GGUF file; for a Hugging Face folder the config summary,
// the stored tensors and the parameter count.
#include <cstdio>
#include <map>

#include "commands.h"
#include "model_path.h"
#include "rlx/formats/gguf.h"
#include "rlx/models/model_config.h"

namespace rlx::cli {
namespace {

std::string value_text(const formats::GgufValue& v) {
  using formats::GgufValueType;
  if (auto* s = std::get_if<std::string_view>(&v.data)) {
    std::string t(s->substr(0, 120));
    if (s->size() > 120) t += fmt::format("… ({} bytes)", s->size());
    return "\"" + t + "\"";
  }
  if (auto* a = std::get_if<formats::GgufArray>(&v.data)) {
    std::string t = fmt::format("[{} × {}]", a->count, formats::gguf_value_type_name(a->elem_type));
    const uint64_t shown = std::min<uint64_t>(a->count, 6);
    std::string items;
    for (uint64_t i = 0; i < shown; ++i) {
      if (i) items += ", ";
      if (a->elem_type == GgufValueType::kString) items += "\"" + std::string(a->strings[i].substr(0, 24)) + "\"";
      else if (a->elem_type == GgufValueType::kArray) items += "[…]";
      else if (a->elem_type == GgufValueType::kF32 || a->elem_type == GgufValueType::kF64)
        items += fmt::format("{:g}", a->scalar_at<double>(i));
      else items += fmt::format("{}", a->scalar_at<int64_t>(i));
    }
    return t + " " + items + (a->count > shown ? ", …" : "");
  }
  if (auto* u = std::get_if<uint64_t>(&v.data)) return fmt::format("{}", *u);
  if (auto* i = std::get_if<int64_t>(&v.data)) return fmt::format("{}", *i);
  if (auto* d = std::get_if<double>(&v.data)) return fmt::format("{:g}", *d);
  if (auto* b = std::get_if<bool>(&v.data)) return *b ? "true" : "false";
  return "?";
}

int run_info_hf(const ModelPath& where) {
  auto model = open_model(where);
  if (!model) return report(model.error());
  auto tensors = list_stored_tensors(where);
  if (!tensors) return report(tensors.error());
  std::printf("folder: %s (Hugging Face: config.json + safetensors)\n", where.path.c_str());
  std::printf("architecture: %s\n", models::arch_name(model->config.arch));
  std::printf("config: %s\n", model->config.summary().c_str());
  int64_t n_params = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> by_type;  // dtype -> (tensors, bytes)
  for (const StoredTensor& t : *tensors) {
    n_params += t.n_elements;
    auto& e = by_type[t.dtype];
    ++e.first;
    e.second += t.n_bytes;
  }
  std::printf("parameters: %lld (%.2f M)\n", static_cast<long long>(n_params), n_params / 1e6);
  std::printf("\ntensors (%zu):\n", tensors->size());
  for (const StoredTensor& t : *tensors) {
    std::string shape;
    for (int64_t d : t.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    std::printf("  %-48s %-6s [%s]\n", t.name.c_str(), t.dtype.c_str(), shape.c_str());
  }
  std::printf("\nsize by type:\n");
  for (const auto& [type, e] : by_type)
    std::printf("  %-6s %4lld tensors %12lld bytes\n", type.c_str(), static_cast<long long>(e.first),
                static_cast<long long>(e.second));
  return 0;
}

int run_info(const std::string& arg) {
  auto where = resolve_model_path(arg);
  if (!where) return report(where.error());
  if (where->hf) return run_info_hf(*where);
  const std::string& path = where->path;
  auto file = formats::GgufFile::open(path);
  if (!file) return report(file.error());
  const auto& f = *file;
  std::printf("file: %s (GGUF v%u, alignment %u)\n", path.c_str(), f.version(), f.alignment());
  if (auto arch = f.get_string("general.architecture")) std::printf("architecture: %.*s\n", int(arch->size()), arch->data());
  int64_t n_params = 0, n_expert_params = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> by_type;  // type -> (tensors, bytes)
  for (const auto& t : f.tensors()) {
    n_params += t.n_elements();
    if (t.name.find("_exps.") != std::string::npos) n_expert_params += t.n_elements();
    auto& e = by_type[std::string(formats::ggml_type_name(t.type))];
    ++e.first;
    e.second += static_cast<int64_t>(t.n_bytes);
  }
  std::printf("parameters: %lld (%.2f M)\n", static_cast<long long>(n_params), n_params / 1e6);
  if (auto config = models::config_from_gguf(f); config && config->n_expert > 0) {
    // A token reads the shared tensors and n_expert_used of the n_expert stacked experts.
    const int64_t active =
        n_params - n_expert_params + n_expert_params / config->n_expert * config->n_expert_used;
    std::printf("experts: %lld per MoE layer, %lld used per token; active parameters per token: %lld (%.2f M)\n",
                static_cast<long long>(config->n_expert), static_cast<long long>(config->n_expert_used),
                static_cast<long long>(active), active / 1e6);
  }
  std::printf("\nmetadata (%zu keys):\n", f.metadata().size());
  for (const auto& kv : f.metadata())
    std::printf("  %-44s %s\n", kv.key.c_str(), value_text(kv.value).c_str());
  std::printf("\ntensors (%zu):\n", f.tensors().size());
  for (const auto& t : f.tensors()) {
    std::string shape;
    for (int64_t d : t.shape()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    std::printf("  %-40s %-6s [%s]\n", t.name.c_str(), std::string(formats::ggml_type_name(t.type)).c_str(),
                shape.c_str());
  }
  std::printf("\nsize by type:\n");
  for (const auto& [type, e] : by_type)
    std::printf("  %-6s %4lld tensors %12lld bytes\n", type.c_str(), static_cast<long long>(e.first),
                static_cast<long long>(e.second));
  return 0;
}

}  // namespace

void add_info_command(CLI::App& app, Runner* run) {
  auto* cmd =
      app.add_subcommand("info", "Describe a model (GGUF file or Hugging Face folder): metadata, tensors, sizes");
  auto path = std::make_shared<std::string>(), flag = std::make_shared<std::string>();
  auto* positional = cmd->add_option("model", *path, "GGUF file or Hugging Face folder");
  cmd->add_option("-m,--model", *flag, "the model, as a flag")->excludes(positional);
  cmd->callback([run, path, flag] {
    if (path->empty() && flag->empty()) throw CLI::RequiredError("model (a GGUF file or Hugging Face folder)");
    const std::string model = path->empty() ? *flag : *path;
    *run = [model] { return run_info(model); };
  });
}

}  // namespace rlx::cli
