// compute_imatrix (see rlx/models/imatrix.h; the files are imatrix_file.cpp).
//
// The statistics come from the model's own graph: the decoder's HIR is lowered to MIR,
// where every linear product is explicit, and for each product whose weight is a model
// parameter the graph gets one more output, the column sums of its input's squares
// (reduce_sum(x * x) over the rows). Inputs shared by several products (q, k and v; gate
// and up) are reduced once. The taps are ordinary ops, so the run is the model's normal
// compiled run on any backend, plus a reduction per distinct product input.
#include "rlx/models/imatrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "rlx/compile/lower.h"
#include "rlx/formats/gguf.h"
#include "rlx/models/decoder.h"
#include "rlx/models/model_config.h"
#include "rlx/models/weight_source.h"
#include "rlx/runtime/session.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;
using ir::DType;
using ir::OpKind;
using ir::ValueId;

struct OpenedWeights {
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
};

// The model's config and weights as LanguageModel::load opens them.
Expected<OpenedWeights> open_weights(const std::string& path) {
  OpenedWeights o;
  if (fs::is_directory(path)) {
    ASSIGN_OR_RETURN(o.config, config_from_hf((fs::path(path) / "config.json").string()));
    ASSIGN_OR_RETURN(o.weights, SafetensorsWeightSource::open(path, o.config));
  } else {
    ASSIGN_OR_RETURN(formats::GgufFile file, formats::GgufFile::open(path));
    auto shared = std::make_shared<const formats::GgufFile>(std::move(file));
    ASSIGN_OR_RETURN(o.config, config_from_gguf(*shared));
    o.weights = std::make_unique<GgufWeightSource>(shared);
    if (o.config.ssm_grouped_projections) o.weights = regroup_delta_net_projections(std::move(o.weights), o.config);
  }
  if (is_encoder(o.config.arch))
    return Error::unsupported("{}: an importance matrix is made for decoders; {} is an encoder", path,
                              arch_name(o.config.arch));
  if (o.config.fused_projections) o.weights = split_fused_projections(std::move(o.weights), o.config);
  return o;
}

// The parameter a product reads as its weight, or its name empty.
std::string param_name(const ir::Graph& g, ValueId v) {
  const ir::Node& n = g.node(v);
  return n.op == OpKind::Param ? n.attr<ir::ParamAttrs>().name : std::string();
}

// Adds to `mir` one output per distinct input of a parameter-weighted product: the
// column sums of its squares. Returns (output name, the weights reading that input).
Expected<std::vector<std::pair<std::string, std::vector<std::string>>>> add_input_taps(ir::Graph& g) {
  std::map<ValueId, std::vector<std::string>> readers;  // product input -> weights
  for (ValueId v = 0; v < g.size(); ++v) {
    const ir::Node& n = g.node(v);
    std::vector<size_t> weight_inputs;
    switch (n.op) {
      case OpKind::MatMul: {
        const auto& a = n.attr<ir::MatMulAttrs>();
        if (a.transpose_b && !a.transpose_a) weight_inputs = {1};
        break;
      }
      case OpKind::DequantMatMul:
        weight_inputs = {1};
        break;
      case OpKind::FusedMatMulBiasAct:
        if (n.attr<ir::FusedMatMulAttrs>().transpose_b) weight_inputs = {1};
        break;
      case OpKind::FusedSwiGLU:
        if (n.attr<ir::FusedSwiGLUAttrs>().transpose_b) weight_inputs = {1, 2};
        break;
      default:
        break;
    }
    for (size_t i : weight_inputs) {
      const std::string w = param_name(g, n.inputs[i]);
      if (w.empty() || g.node(n.inputs[i]).shape.rank() != 2) continue;
      auto& names = readers[n.inputs[0]];
      if (std::find(names.begin(), names.end(), w) == names.end()) names.push_back(w);
    }
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> taps;
  for (auto& [x, weights] : readers) {
    const int64_t rank = g.node(x).shape.rank();
    if (g.node(x).dtype != DType::F32 || rank < 2) continue;
    std::vector<int64_t> rows(static_cast<size_t>(rank - 1));
    for (int64_t a = 0; a < rank - 1; ++a) rows[static_cast<size_t>(a)] = a;
    ASSIGN_OR_RETURN(ValueId sq, g.add(OpKind::Binary, {x, x}, ir::BinaryAttrs{ir::BinaryKind::Mul}));
    ASSIGN_OR_RETURN(ValueId sum, g.add(OpKind::Reduce, {sq}, ir::ReduceAttrs{ir::ReduceKind::Sum, rows, false}));
    const std::string name = fmt::format("imatrix.{}", taps.size());
    g.add_output(sum, name);
    taps.emplace_back(name, std::move(weights));
  }
  return taps;
}

// The log-likelihood of each next token of rows [from, rows - 1) of `logits` [rows, vocab].
void add_nll(const float* logits, int64_t rows, int64_t vocab, const int32_t* tokens, int64_t from, double* nll,
             int64_t* count) {
  for (int64_t r = from; r + 1 < rows; ++r) {
    const float* l = logits + r * vocab;
    double mx = -INFINITY;
    for (int64_t j = 0; j < vocab; ++j) mx = std::max(mx, static_cast<double>(l[j]));
    double z = 0;
    for (int64_t j = 0; j < vocab; ++j) z += std::exp(static_cast<double>(l[j]) - mx);
    const int32_t next = tokens[r + 1];
    if (next < 0 || next >= vocab) continue;
    *nll += std::log(z) + mx - static_cast<double>(l[next]);
    ++*count;
  }
}

}  // namespace

Expected<Imatrix> compute_imatrix(const std::string& model_path, std::span<const int32_t> tokens, int32_t bos,
                                  const ImatrixOptions& o) {
  if (o.chunk < 2 || o.chunk > (int64_t{1} << 20))
    return Error::invalid_argument("imatrix chunk size must be in [2, {}], got {}", int64_t{1} << 20, o.chunk);
  const int64_t whole = static_cast<int64_t>(tokens.size()) / o.chunk;
  if (whole == 0)
    return Error::invalid_argument("the calibration text has {} tokens, fewer than one chunk of {}", tokens.size(),
                                   o.chunk);
  const int64_t chunks = o.max_chunks > 0 ? std::min(whole, o.max_chunks) : whole;
  ASSIGN_OR_RETURN(OpenedWeights m, open_weights(model_path));
  DecoderOptions d;
  d.seq = ir::Dim(o.chunk);
  // Each chunk attends within itself; a hybrid's graph keeps its state in handles next to
  // a KV cache of the chunk's rows, all zeroed before each chunk.
  d.ctx = m.config.has_recurrent_layers() ? o.chunk : 0;
  ASSIGN_OR_RETURN(BuiltModel built, build_decoder(m.config, *m.weights, d));
  ASSIGN_OR_RETURN(ir::MirModule mir, compile::lower(built.hir));
  ASSIGN_OR_RETURN(auto taps, add_input_taps(mir.graph));
  if (taps.empty())
    return Error::unsupported("{}: the model has no linear product over a weight to measure", model_path);
  BackendOptions bo;
  bo.threads = o.threads;
  ASSIGN_OR_RETURN(Session session, Session::create(o.device, bo));
  ASSIGN_OR_RETURN(CompiledGraph graph, session.compile_with(mir.graph, {}));
  for (const std::string& name : built.param_names) {
    ASSIGN_OR_RETURN(WeightView w, m.weights->take(name));
    if (Status s = graph.set_param_typed(name, w.bytes, w.dtype); !s.ok())
      return s.error().with_context(fmt::format("{}: weight '{}'", model_path, name));
  }

  // Output slots: the logits and every tap, by name.
  const auto& outs = graph.manifest().outputs;
  auto output_index = [&](std::string_view name) -> int64_t {
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i].name == name) return static_cast<int64_t>(i);
    return -1;
  };
  const int64_t logits_at = output_index("logits");
  Imatrix result;
  result.chunk_size = o.chunk;
  if (!o.dataset.empty()) result.datasets.push_back(o.dataset);
  std::vector<std::pair<int64_t, const std::vector<std::string>*>> tap_slots;
  for (const auto& [name, weights] : taps) tap_slots.emplace_back(output_index(name), &weights);

  std::vector<int32_t> chunk(static_cast<size_t>(o.chunk)), pos(chunk.size());
  for (int64_t i = 0; i < o.chunk; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  const int32_t seq_info[2] = {0, static_cast<int32_t>(o.chunk)};  // a fresh state, every row real
  const int64_t shape[1] = {o.chunk};
  const int64_t seq_shape[2] = {1, 2};
  // A hybrid's state handles, zeroed before every chunk from one zero buffer.
  std::vector<std::vector<int64_t>> handle_dims;
  int64_t most_handle_bytes = 0;
  for (const ir::ManifestEntry& h : graph.manifest().handles) {
    handle_dims.push_back(h.type.shape.static_dims());
    most_handle_bytes = std::max(most_handle_bytes, h.bytes);
  }
  const std::vector<uint8_t> zeros(static_cast<size_t>(most_handle_bytes));
  double nll = 0;
  int64_t scored = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    std::copy_n(tokens.begin() + c * o.chunk, o.chunk, chunk.begin());
    if (bos >= 0) chunk[0] = bos;
    // Recurrent state starts empty for every chunk.
    const auto& handles = graph.manifest().handles;
    for (size_t k = 0; k < handles.size(); ++k)
      TRY(graph.bind_handle(handles[k].name, TensorView{handles[k].type.dtype, handle_dims[k], zeros.data()}));
    std::vector<NamedTensorView> in;
    for (const ir::ManifestEntry& e : graph.manifest().inputs) {
      if (e.name == "tokens")
        in.push_back({e.name, TensorView{DType::I32, shape, chunk.data()}});
      else if (e.name == "pos")
        in.push_back({e.name, TensorView{DType::I32, shape, pos.data()}});
      else if (e.name == "seq")
        in.push_back({e.name, TensorView{DType::I32, seq_shape, seq_info}});
      else
        return Error::unsupported("{}: the decoder takes an input '{}' the imatrix run does not feed", model_path,
                                  e.name);
    }
    ASSIGN_OR_RETURN(std::vector<Tensor> out, graph.run(std::span<const NamedTensorView>(in)));
    for (const auto& [slot, weights] : tap_slots) {
      const std::span<const float> sums = out[static_cast<size_t>(slot)].as<float>();
      for (const std::string& w : *weights) {
        ImatrixEntry& e = result.entries[w];
        if (e.counts.empty()) {
          e.counts.assign(1, 0);
          e.sum_sq.assign(sums.size(), 0.0);
        }
        for (size_t k = 0; k < sums.size(); ++k) e.sum_sq[k] += sums[k];
        e.counts[0] += o.chunk;
      }
    }
    if (logits_at >= 0) {
      const Tensor& l = out[static_cast<size_t>(logits_at)];
      add_nll(l.as<float>().data(), o.chunk, l.shape().back(), chunk.data(), o.chunk / 2, &nll, &scored);
    }
    result.chunk_count = c + 1;
    if (o.progress) o.progress(c + 1, chunks, scored > 0 ? std::exp(nll / static_cast<double>(scored)) : 0.0);
  }
  return result;
}

}  // namespace rlx::models
