// `rlx forward --model M --input NAME=SHAPExDTYPE=@FILE ... --output NAME=@FILE ...`:
// one forward pass of a model with named inputs and outputs as raw little-endian
// files, in the IREE tool convention ("input_ids=1x7xi32=@ids.bin"; values may also
// be written inline, "input_ids=1x3xi32=101,7,102"). Names are Hugging Face's:
//   encoders: input_ids, attention_mask (ones then zeros per row; default all ones),
//             token_type_ids (default 0) -> last_hidden_state [B, n, D],
//             pooler_output [B, D] (BERT)
//   causal LMs: input_ids -> logits [B, n, vocab]
//   vision: pixel_values f32 [B, C, H, W] -> last_hidden_state [B, 1 + patches, D],
//           pooler_output [B, D] (DINOv2)
//   audio: input_values f32 [B, samples] -> last_hidden_state [B, frames, D] (Wav2Vec2)
//   segmentation (SAM): pixel_values f32 [B, 3, S, S] (or image_embeddings f32 [B, C, g, g]),
//             input_points f32 [B, P, N, 2], input_labels i32 [B, P, N] (default 1),
//             input_boxes f32 [B, P, 4] -> image_embeddings [B, C, g, g],
//             pred_masks [B, P, 3, 4g, 4g], iou_scores [B, P, 3]
// Outputs are written as float32. This interface is relied on by external checks:
// keep it stable.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>

#include <fmt/ranges.h>

#include "cli_io.h"
#include "commands.h"
#include "model_path.h"
#include "rlx/models/encoder.h"
#include "rlx/models/language_model.h"
#include "rlx/models/media_encoder.h"
#include "rlx/models/sam.h"

namespace rlx::cli {
namespace {

struct ForwardArgs {
  std::string model, device = "cpu";
  std::vector<std::string> inputs, outputs;
  int threads = 0;
  bool no_cache = false;
};

/// One --input: its name, shape, element type and values (as int64 or float).
struct NamedInput {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  int64_t count() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

int64_t dtype_bytes(const std::string& dt) {
  if (dt == "i32" || dt == "f32") return 4;
  if (dt == "i64") return 8;
  return 0;
}

Expected<NamedInput> parse_input(const std::string& arg) {
  const size_t eq1 = arg.find('=');
  const size_t eq2 = eq1 == std::string::npos ? std::string::npos : arg.find('=', eq1 + 1);
  if (eq1 == std::string::npos || eq2 == std::string::npos || eq1 == 0)
    return Error::invalid_argument("--input '{}': expected NAME=SHAPExDTYPE=@FILE (e.g. input_ids=1x7xi32=@ids.bin)", arg);
  NamedInput in;
  in.name = arg.substr(0, eq1);
  const std::string type = arg.substr(eq1 + 1, eq2 - eq1 - 1), value = arg.substr(eq2 + 1);
  const size_t x = type.rfind('x');
  if (x == std::string::npos)
    return Error::invalid_argument("--input {}: '{}' is not SHAPExDTYPE (e.g. 1x7xi32)", in.name, type);
  in.dtype = type.substr(x + 1);
  if (dtype_bytes(in.dtype) == 0)
    return Error::invalid_argument("--input {}: element type '{}' is not supported (i32, i64, f32)", in.name, in.dtype);
  size_t i = 0;
  const std::string dims = type.substr(0, x);
  while (i <= dims.size()) {
    size_t j = dims.find('x', i);
    if (j == std::string::npos) j = dims.size();
    const std::string d = dims.substr(i, j - i);
    char* end = nullptr;
    const long long v = std::strtoll(d.c_str(), &end, 10);
    if (d.empty() || *end != '\0' || v < 1 || v > (int64_t{1} << 31))
      return Error::invalid_argument("--input {}: dimension '{}' of '{}' is not a positive integer", in.name, d, type);
    in.shape.push_back(v);
    if (in.shape.size() > 8 || in.count() > (int64_t{1} << 28))  // each factor <= 2^31: no overflow before this
      return Error::invalid_argument("--input {}: {} is too large", in.name, type);
    i = j + 1;
  }
  const bool is_int = in.dtype != "f32";
  if (!value.empty() && value[0] == '@') {
    const std::string path = value.substr(1);
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    if (!f) return Error::io("--input {}: cannot read '{}'", in.name, path);
    const auto size = static_cast<int64_t>(f.tellg());
    const int64_t want = in.count() * dtype_bytes(in.dtype);
    if (size != want)
      return Error::invalid_argument("--input {}: '{}' has {} bytes; {} needs {}", in.name, path, size, type, want);
    f.seekg(0);
    std::vector<char> bytes(static_cast<size_t>(size));
    f.read(bytes.data(), size);
    if (!f) return Error::io("--input {}: reading '{}' failed", in.name, path);
    for (int64_t k = 0; k < in.count(); ++k) {
      const char* p = bytes.data() + k * dtype_bytes(in.dtype);
      if (in.dtype == "i32") {
        int32_t v;
        std::memcpy(&v, p, 4);
        in.ints.push_back(v);
      } else if (in.dtype == "i64") {
        int64_t v;
        std::memcpy(&v, p, 8);
        in.ints.push_back(v);
      } else {
        float v;
        std::memcpy(&v, p, 4);
        in.floats.push_back(v);
      }
    }
    return in;
  }
  // Inline values: comma-separated.
  i = 0;
  while (i <= value.size() && !value.empty()) {
    size_t j = value.find(',', i);
    if (j == std::string::npos) j = value.size();
    const std::string item = value.substr(i, j - i);
    char* end = nullptr;
    if (is_int) {
      const long long v = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0') return Error::invalid_argument("--input {}: '{}' is not an integer", in.name, item);
      in.ints.push_back(v);
    } else {
      const float v = std::strtof(item.c_str(), &end);
      if (item.empty() || *end != '\0') return Error::invalid_argument("--input {}: '{}' is not a number", in.name, item);
      in.floats.push_back(v);
    }
    i = j + 1;
  }
  const auto given = static_cast<int64_t>(is_int ? in.ints.size() : in.floats.size());
  if (given != in.count())
    return Error::invalid_argument("--input {}: {} values given; {} needs {}", in.name, given, type, in.count());
  return in;
}

/// NAME=@FILE of an --output.
Expected<std::pair<std::string, std::string>> parse_output(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 >= arg.size() || arg[eq + 1] != '@' || eq + 2 >= arg.size())
    return Error::invalid_argument("--output '{}': expected NAME=@FILE (e.g. last_hidden_state=@out.bin)", arg);
  return std::pair{arg.substr(0, eq), arg.substr(eq + 2)};
}

Status write_floats(const std::string& path, std::span<const float> v) {
  return write_output(path, std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
}

/// A [B, n] integer input as B rows.
Expected<std::vector<std::vector<int32_t>>> rows_of(const NamedInput& in, const char* what) {
  if (in.dtype == "f32") return Error::invalid_argument("--input {}: {} must be i32 or i64, got f32", in.name, what);
  if (in.shape.size() != 2 && in.shape.size() != 1)
    return Error::invalid_argument("--input {}: {} must be [batch, tokens] (or [tokens]), got rank {}", in.name, what,
                                   in.shape.size());
  const int64_t B = in.shape.size() == 2 ? in.shape[0] : 1, n = in.shape.back();
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = in.ints[static_cast<size_t>(b * n + i)];
      if (v < INT32_MIN || v > INT32_MAX) return Error::invalid_argument("--input {}: value {} is out of range", in.name, v);
      rows[static_cast<size_t>(b)].push_back(static_cast<int32_t>(v));
    }
  return rows;
}

int run_encoder(const ForwardArgs& a, const ModelPath& where, const Device& device,
                const std::map<std::string, NamedInput>& inputs,
                const std::vector<std::pair<std::string, std::string>>& outputs) {
  models::EncoderLoadOptions lo;
  lo.device = device;
  lo.threads = a.threads;
  lo.compile_cache = !a.no_cache;
  auto model = models::EncoderModel::load(where.path, lo);
  if (!model) return report(model.error());
  for (const auto& [name, in] : inputs)
    if (name != "input_ids" && name != "attention_mask" && name != "token_type_ids")
      return report(Error::invalid_argument("--input {}: this {} encoder takes input_ids, attention_mask and "
                                            "token_type_ids", name, models::arch_name((*model)->config().arch)));
  auto ids_it = inputs.find("input_ids");
  if (ids_it == inputs.end()) return report(Error::invalid_argument("--input input_ids is required"));
  const NamedInput& ids = ids_it->second;
  if (ids.dtype == "f32") return report(Error::invalid_argument("--input input_ids must be i32 or i64, got f32"));
  if (ids.shape.size() != 2 && ids.shape.size() != 1)
    return report(Error::invalid_argument("--input input_ids must be [batch, tokens] (or [tokens]), got rank {}",
                                          ids.shape.size()));
  const int64_t B = ids.shape.size() == 2 ? ids.shape[0] : 1, n = ids.shape.back();
  // attention_mask and token_type_ids: the shape of input_ids, integers.
  auto companion = [&](const char* name) -> Expected<std::span<const int64_t>> {
    auto it = inputs.find(name);
    if (it == inputs.end()) return std::span<const int64_t>{};
    if (it->second.shape != ids.shape)
      return Error::invalid_argument("--input {}: shape must equal input_ids' ({} values per row, {} rows)", name, n,
                                     B);
    if (it->second.dtype == "f32") return Error::invalid_argument("--input {} must be i32 or i64, got f32", name);
    return std::span<const int64_t>(it->second.ints);
  };
  auto mask = companion("attention_mask");
  if (!mask) return report(mask.error());
  auto types = companion("token_type_ids");
  if (!types) return report(types.error());
  auto batch = models::unpad_encoder_batch(ids.ints, *mask, *types, B, n);
  if (!batch) return report(batch.error().with_context("--input"));
  for (const auto& [name, file] : outputs) {
    if (name == "pooler_output" && !(*model)->has_pooler())
      return report(Error::invalid_argument("--output pooler_output: this model has no pooler (outputs: last_hidden_state)"));
    if (name != "last_hidden_state" && name != "pooler_output")
      return report(Error::invalid_argument("--output {}: an encoder's outputs are last_hidden_state{}", name,
                                            (*model)->has_pooler() ? " and pooler_output" : ""));
  }
  auto out = (*model)->forward(batch->tokens, batch->types);
  if (!out) return report(out.error());
  const int64_t D = out->dim;
  for (const auto& [name, file] : outputs) {
    // last_hidden_state [B, n, D]: masked rows as computed, or zeros past the run's length.
    const std::vector<float> values = name == "last_hidden_state" ? models::padded_hidden_states(*out, n) : out->pooler;
    if (Status s = write_floats(file, values); !s.ok()) return report(s.error());
    std::fprintf(stderr, "rlx: wrote %s [%s] to %s\n", name.c_str(),
                 name == "last_hidden_state" ? fmt::format("{}, {}, {}", B, n, D).c_str() : fmt::format("{}, {}", B, D).c_str(),
                 file.c_str());
  }
  return 0;
}

int run_language_model(const ForwardArgs& a, const ModelPath& where, const Device& device,
                       const std::map<std::string, NamedInput>& inputs,
                       const std::vector<std::pair<std::string, std::string>>& outputs) {
  for (const auto& [name, in] : inputs)
    if (name != "input_ids")
      return report(Error::invalid_argument("--input {}: a language model takes input_ids only", name));
  for (const auto& [name, file] : outputs)
    if (name != "logits") return report(Error::invalid_argument("--output {}: a language model's output is logits", name));
  auto ids_it = inputs.find("input_ids");
  if (ids_it == inputs.end()) return report(Error::invalid_argument("--input input_ids is required"));
  auto ids = rows_of(ids_it->second, "input_ids");
  if (!ids) return report(ids.error());
  models::LoadOptions lo;
  lo.device = device;
  lo.threads = a.threads;
  lo.compile_cache = !a.no_cache;
  lo.ctx = std::max<int64_t>(64, ids_it->second.shape.back() + 1);
  auto model = models::LanguageModel::load(where.path, lo);
  if (!model) return report(model.error());
  std::vector<float> logits;
  for (const auto& row : *ids) {  // each sequence from position 0
    (*model)->reset();
    auto r = (*model)->forward(row, /*all_rows=*/true);
    if (!r) return report(r.error());
    logits.insert(logits.end(), r->begin(), r->end());
  }
  for (const auto& [name, file] : outputs) {
    if (Status s = write_floats(file, logits); !s.ok()) return report(s.error());
    std::fprintf(stderr, "rlx: wrote logits [%zu, %lld, %lld] to %s\n", ids->size(),
                 static_cast<long long>(ids_it->second.shape.back()), static_cast<long long>((*model)->config().n_vocab),
                 file.c_str());
  }
  return 0;
}

int run_media(const ForwardArgs& a, const ModelPath& where, const Device& device,
              const std::map<std::string, NamedInput>& inputs,
              const std::vector<std::pair<std::string, std::string>>& outputs) {
  models::MediaLoadOptions lo;
  lo.device = device;
  lo.threads = a.threads;
  lo.compile_cache = !a.no_cache;
  auto model = models::MediaEncoderModel::load(where.path, lo);
  if (!model) return report(model.error());
  const std::string want(model->get()->input_name());
  const char* arch = models::media_arch_name((*model)->config().arch);
  for (const auto& [name, in] : inputs)
    if (name != want) return report(Error::invalid_argument("--input {}: a {} model takes {} only", name, arch, want));
  auto it = inputs.find(want);
  if (it == inputs.end()) return report(Error::invalid_argument("--input {} is required", want));
  if (it->second.dtype != "f32")
    return report(Error::invalid_argument("--input {}: must be f32, got {}", want, it->second.dtype));
  const std::vector<std::string> names = (*model)->output_names();
  for (const auto& [name, file] : outputs)
    if (std::find(names.begin(), names.end(), name) == names.end())
      return report(Error::invalid_argument("--output {}: a {} model's outputs are {}", name, arch, fmt::join(names, ", ")));
  auto out = (*model)->forward(it->second.shape, it->second.floats);
  if (!out) return report(out.error());
  for (const auto& [name, file] : outputs) {
    const bool hidden = name == "last_hidden_state";
    if (Status s = write_floats(file, hidden ? out->hidden : out->pooler); !s.ok()) return report(s.error());
    const std::string shape = hidden ? fmt::format("{}, {}, {}", out->batch, out->tokens, out->dim)
                                     : fmt::format("{}, {}", out->batch, out->dim);
    std::fprintf(stderr, "rlx: wrote %s [%s] to %s\n", name.c_str(), shape.c_str(), file.c_str());
  }
  return 0;
}

int run_sam(const ForwardArgs& a, const ModelPath& where, const Device& device,
            const std::map<std::string, NamedInput>& inputs,
            const std::vector<std::pair<std::string, std::string>>& outputs) {
  for (const auto& [name, in] : inputs) {
    const bool ints = name == "input_labels";
    if (name != "pixel_values" && name != "image_embeddings" && name != "input_points" && !ints && name != "input_boxes")
      return report(Error::invalid_argument("--input {}: a sam model takes pixel_values or image_embeddings, "
                                            "input_points, input_labels and input_boxes", name));
    if (ints == (in.dtype == "f32"))
      return report(Error::invalid_argument("--input {}: must be {}, got {}", name, ints ? "i32 or i64" : "f32", in.dtype));
  }
  for (const auto& [name, file] : outputs)
    if (name != "image_embeddings" && name != "pred_masks" && name != "iou_scores")
      return report(Error::invalid_argument("--output {}: a sam model's outputs are image_embeddings, pred_masks and "
                                            "iou_scores", name));
  const bool has_pixels = inputs.count("pixel_values") != 0;
  if (has_pixels == (inputs.count("image_embeddings") != 0))
    return report(Error::invalid_argument("--input: give a sam model either pixel_values or image_embeddings"));
  models::MediaLoadOptions lo;
  lo.device = device;
  lo.threads = a.threads;
  lo.compile_cache = !a.no_cache;
  auto model = models::SamModel::load(where.path, lo);
  if (!model) return report(model.error());
  models::SamImageEmbeddings image;
  if (has_pixels) {
    const NamedInput& px = inputs.at("pixel_values");
    auto e = (*model)->encode(px.shape, px.floats);
    if (!e) return report(e.error());
    image = std::move(*e);
  } else {
    const NamedInput& em = inputs.at("image_embeddings");
    if (em.shape.size() != 4 || em.shape[2] != em.shape[3])
      return report(Error::invalid_argument("--input image_embeddings: must be [batch, channels, side, side]"));
    image = {em.shape[0], em.shape[1], em.shape[2], em.floats};
  }
  models::SamPrompts prompts;
  bool decode = false;
  if (auto it = inputs.find("input_points"); it != inputs.end()) {
    const NamedInput& pt = it->second;
    if (pt.shape.size() != 4 || pt.shape[0] != image.batch || pt.shape[3] != 2)
      return report(Error::invalid_argument("--input input_points: must be [{}, prompts, points, 2], got [{}]",
                                            image.batch, fmt::join(pt.shape, ", ")));
    prompts.prompts = pt.shape[1];
    prompts.points = pt.shape[2];
    prompts.coords = pt.floats;
    decode = true;
  }
  if (auto it = inputs.find("input_labels"); it != inputs.end()) {
    if (!decode) return report(Error::invalid_argument("--input input_labels: needs input_points"));
    if (it->second.shape != std::vector<int64_t>{image.batch, prompts.prompts, prompts.points})
      return report(Error::invalid_argument("--input input_labels: must be [{}, {}, {}] like input_points", image.batch,
                                            prompts.prompts, prompts.points));
    for (int64_t l : it->second.ints) {
      if (l < INT32_MIN || l > INT32_MAX)
        return report(Error::invalid_argument("--input input_labels: value {} is none of 1, 0, -1, -10", l));
      prompts.labels.push_back(static_cast<int32_t>(l));
    }
  }
  if (auto it = inputs.find("input_boxes"); it != inputs.end()) {
    const NamedInput& bx = it->second;
    if (bx.shape.size() != 3 || bx.shape[0] != image.batch || bx.shape[2] != 4 || (decode && bx.shape[1] != prompts.prompts))
      return report(Error::invalid_argument("--input input_boxes: must be [{}, prompts, 4] (prompts as input_points'), "
                                            "got [{}]", image.batch, fmt::join(bx.shape, ", ")));
    prompts.prompts = bx.shape[1];
    prompts.boxes = bx.floats;
    decode = true;
  }
  std::optional<models::SamMasks> masks;
  for (const auto& [name, file] : outputs) {
    if (name != "image_embeddings" && !decode)
      return report(Error::invalid_argument("--output {}: needs input_points or input_boxes", name));
  }
  if (decode) {
    auto m = (*model)->decode(image, prompts);
    if (!m) return report(m.error());
    masks = std::move(*m);
  }
  for (const auto& [name, file] : outputs) {
    std::span<const float> values = image.values;
    std::string shape = fmt::format("{}, {}, {}, {}", image.batch, image.channels, image.side, image.side);
    if (name == "pred_masks") {
      values = masks->pred_masks;
      shape = fmt::format("{}, {}, {}, {}, {}", masks->batch, masks->prompts, masks->masks, masks->side, masks->side);
    } else if (name == "iou_scores") {
      values = masks->iou_scores;
      shape = fmt::format("{}, {}, {}", masks->batch, masks->prompts, masks->masks);
    }
    if (Status s = write_floats(file, values); !s.ok()) return report(s.error());
    std::fprintf(stderr, "rlx: wrote %s [%s] to %s\n", name.c_str(), shape.c_str(), file.c_str());
  }
  return 0;
}

int run_forward(const ForwardArgs& a) {
  auto device = Device::parse(a.device);
  if (!device) return report(device.error());
  std::map<std::string, NamedInput> inputs;
  for (const std::string& arg : a.inputs) {
    auto in = parse_input(arg);
    if (!in) return report(in.error());
    if (inputs.count(in->name)) return report(Error::invalid_argument("--input {} is given twice", in->name));
    inputs.emplace(in->name, std::move(*in));
  }
  std::vector<std::pair<std::string, std::string>> outputs;
  for (const std::string& arg : a.outputs) {
    auto o = parse_output(arg);
    if (!o) return report(o.error());
    outputs.push_back(std::move(*o));
  }
  auto where = resolve_model_path(a.model);
  if (!where) return report(where.error());
  if (where->hf) {  // vision and audio encoders have no ModelConfig: their own driver
    auto type = models::hf_model_type(where->path);
    if (!type) return report(type.error());
    if (models::is_media_model_type(*type)) return run_media(a, *where, *device, inputs, outputs);
    if (*type == "sam") return run_sam(a, *where, *device, inputs, outputs);
  }
  auto opened = open_model(*where);
  if (!opened) return report(opened.error());
  return models::is_encoder(opened->config.arch) ? run_encoder(a, *where, *device, inputs, outputs)
                                                 : run_language_model(a, *where, *device, inputs, outputs);
}

}  // namespace

void add_forward_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand("forward", "One forward pass with named inputs and outputs as raw files");
  auto a = std::make_shared<ForwardArgs>();
  cmd->add_option("-m,--model", a->model, "GGUF file or Hugging Face folder (config.json + safetensors)")
      ->required()
      ->check(model_path_check());
  cmd->add_option("--input", a->inputs, "NAME=SHAPExDTYPE=@FILE (raw little-endian), or =v1,v2,... inline")
      ->default_str("")
      ->required();
  cmd->add_option("--output", a->outputs, "NAME=@FILE: write that output as float32 little-endian (@- for standard output)")
      ->required()
      ->default_str("");
  cmd->add_option("--device", a->device, device_help(true));
  cmd->add_option("-t,--threads", a->threads, "CPU threads")->check(kThreadCount);
  cmd->add_flag("--no-cache", a->no_cache, "compile everything (no AOT disk cache of compiled executables)");
  cmd->callback([run, a] { *run = [a] { return run_forward(*a); }; });
}

}  // namespace rlx::cli
