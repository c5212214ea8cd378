// rlx.load_model and rlx.Model: a decoder-only language model (GGUF file or Hugging Face
// folder) with its tokenizer and chat template — logits, tokenize / detokenize,
// generate (text, or a TextStream of pieces) and chat. load_model hands an encoder's
// file to encoder_bindings.cpp (rlx.EncoderModel). Also rlx.synth, which writes a
// synthetic model (seeded random weights) for tests and examples.
//
// Every call that computes releases the GIL. One call runs on a model at a time (others
// wait); while a stream is unfinished the model refuses other calls with rlx.Error.
// Ctrl-C ends a generation after its current token: the generation loop checks for
// signals between tokens (GenerateOptions::interrupt_check).
#include <pybind11/stl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "rlx/models/media_encoder.h"
#include "chat_format.h"
#include "errors.h"
#include "model_path.h"
#include "rlx/models/generate.h"
#include "rlx/models/language_model.h"
#include "rlx/models/synth.h"
#include "text_stream.h"

namespace rlx::python {
namespace py = pybind11;

namespace {

/// Text from C++ (bytes that may end inside a UTF-8 character) as a Python str.
py::str to_str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

/// The KV-cache dtype load_model's `kv` names.
ir::DType kv_dtype(const std::string& kv) {
  if (kv == "f16") return ir::DType::F16;
  if (kv != "f32") throw ErrorException(Error::invalid_argument("kv must be \"f32\" or \"f16\", got '{}'", kv));
  return ir::DType::F32;
}

/// Sampling and stopping options of generate() and chat().
struct GenArgs {
  int32_t max_tokens = 64;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false;

  models::GenerateOptions options() const {
    models::GenerateOptions o;
    o.max_tokens = max_tokens;
    o.sampling.temperature = temperature;
    o.sampling.top_k = top_k;
    o.sampling.top_p = top_p;
    o.sampling.min_p = min_p;
    o.sampling.repetition_penalty = repetition_penalty;
    o.sampling.seed = seed;
    o.stop = stop;
    o.stop_at_eos = !ignore_eos;
    return o;
  }
};

class PyModel {
 public:
  static std::unique_ptr<PyModel> load(const std::string& path, const std::string& device, int64_t ctx,
                                       const std::string& kv, int threads, bool compile_cache) {
    auto m = std::unique_ptr<PyModel>(new PyModel());
    m->where_ = unwrap(cli::resolve_model_path(path));
    models::LoadOptions lo;
    lo.device = unwrap(Device::parse(device));
    lo.ctx = ctx;
    lo.threads = threads;
    lo.compile_cache = compile_cache;
    lo.kv_dtype = kv_dtype(kv);
    Expected<std::unique_ptr<models::LanguageModel>> model = Error::internal("not loaded");
    Expected<std::unique_ptr<Tokenizer>> tok = Error::internal("not loaded");
    {
      py::gil_scoped_release nogil;
      model = models::LanguageModel::load(m->where_.path, lo);
      if (model) tok = cli::open_tokenizer(m->where_.path);
    }
    m->model_ = unwrap(std::move(model));
    if (tok)
      m->tok_ = std::move(*tok);
    else
      m->tok_error_ = tok.error();  // the model still gives logits; text methods raise this
    return m;
  }

  std::string path() const { return where_.path; }
  std::string arch() const { return models::arch_name(model_->config().arch); }
  int64_t n_vocab() const { return model_->config().n_vocab; }

  /// Embeddings come from encoders: a language model refuses, saying so.
  [[noreturn]] void embed() const {
    throw ErrorException(Error::invalid_argument(
        "{}: embed() needs an encoder model (bert, nomic-bert, modern-bert); this is a {} language model", where_.path,
        arch()));
  }
  int64_t context_length() const { return model_->context_length(); }

  py::array logits(py::handle tokens) {
    const std::vector<int32_t> ids = token_ids(tokens);
    Expected<std::vector<float>> out = Error::internal("not run");
    std::mutex& mu = lock_model();
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu);
      model_->reset();
      out = model_->forward(ids, /*all_rows=*/true);
    }
    std::vector<float> values = unwrap(std::move(out));
    return float_array(std::move(values), {static_cast<py::ssize_t>(ids.size()),
                                           static_cast<py::ssize_t>(model_->config().n_vocab)});
  }

  std::vector<int32_t> tokenize(const std::string& text, bool add_special, bool parse_special) {
    return tokenizer().encode(text, add_special, parse_special);
  }

  py::str detokenize(py::handle tokens, bool render_special) {
    return to_str(unwrap(tokenizer().decode(token_ids(tokens), render_special)));
  }

  py::object generate(py::handle prompt, const GenArgs& args, bool stream, bool add_special) {
    std::vector<int32_t> ids = py::isinstance<py::str>(prompt)
                                   ? tokenizer().encode(prompt.cast<std::string>(), add_special, false)
                                   : token_ids(prompt);
    tokenizer();  // generation decodes text: a model without a tokenizer raises here
    return run_generation(std::move(ids), args.options(), stream);
  }

  py::object chat(const py::list& messages, const std::string& template_name, const GenArgs& args, bool stream) {
    std::vector<models::ChatMessage> msgs;
    for (py::handle m : messages) {
      if (!py::isinstance<py::dict>(m)) throw py::type_error("chat(): each message must be a dict with role and content");
      py::dict d = py::reinterpret_borrow<py::dict>(m);
      if (!d.contains("role") || !d.contains("content"))
        throw py::type_error("chat(): each message needs \"role\" and \"content\"");
      msgs.push_back({py::str(d["role"]).cast<std::string>(), py::str(d["content"]).cast<std::string>()});
    }
    const Tokenizer& tok = tokenizer();
    const std::string source = unwrap(models::read_chat_template(where_.path));
    ChatFormat format = unwrap(chat_format(where_.path, source, template_name, tok));
    if (!format.warning.empty() && PyErr_WarnEx(PyExc_RuntimeWarning, format.warning.c_str(), 1) != 0)
      throw py::error_already_set();
    std::vector<int32_t> ids = unwrap(chat_prompt(format, msgs, tok));
    models::GenerateOptions options = args.options();
    if (format.builtin)
      for (std::string& s : models::chat_stop_strings(*format.builtin)) options.stop.push_back(std::move(s));
    return run_generation(std::move(ids), std::move(options), stream);
  }

 private:
  PyModel() = default;

  const Tokenizer& tokenizer() const {
    if (!tok_) throw ErrorException(tok_error_);
    return *tok_;
  }

  /// The model's lock, for a call that computes; raises while a stream is unfinished.
  std::mutex& lock_model() {
    refuse_while_streaming();
    return mu_;
  }
  void refuse_while_streaming() const {
    if (streaming_.load())
      throw ErrorException(Error::invalid_argument(
          "the model is streaming a generation: read the stream to its end or close() it first"));
  }

  py::object run_generation(std::vector<int32_t> ids, models::GenerateOptions options, bool stream) {
    if (stream) return start_stream(std::move(ids), std::move(options));
    options.interrupt_check = [] {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) return Status(Error::invalid_argument("interrupted"));
      return Status();
    };
    Expected<models::GenerateResult> r = Error::internal("not run");
    std::mutex& mu = lock_model();
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu);
      r = models::generate(*model_, *tok_, ids, options, nullptr);
    }
    if (PyErr_Occurred()) throw py::error_already_set();  // Ctrl-C: KeyboardInterrupt
    return to_str(unwrap(std::move(r)).text);
  }

  py::object start_stream(std::vector<int32_t> ids, models::GenerateOptions options) {
    refuse_while_streaming();
    streaming_.store(true);  // other calls are refused until the stream is read to its end, closed or dropped
    py::object self = py::cast(this, py::return_value_policy::reference);
    auto job = [this, ids = std::move(ids), options = std::move(options)](
                   const std::function<void(const std::string&)>& emit,
                   const std::function<Status()>& check) mutable -> Status {
      std::lock_guard<std::mutex> lock(mu_);  // waits for a call another thread started before
      options.interrupt_check = check;
      Expected<models::GenerateResult> r = models::generate(*model_, *tok_, ids, options, emit);
      if (!r) return r.error();
      return {};
    };
    return py::cast(std::make_unique<TextStream>(self, std::move(job), [this] { streaming_.store(false); }));
  }

  cli::ModelPath where_;
  std::unique_ptr<models::LanguageModel> model_;
  std::unique_ptr<Tokenizer> tok_;
  Error tok_error_{ErrorCode::kInternal, "no tokenizer"};
  std::mutex mu_;
  std::atomic<bool> streaming_{false};
};

/// rlx.load_model: an rlx.EncoderModel for an encoder's file, an rlx.MediaModel or
/// rlx.SamModel for a vision / audio / segmentation folder, else an rlx.Model.
py::object load_model(const std::string& path, const std::string& device, int64_t ctx, const std::string& kv,
                      int threads, bool compile_cache) {
  (void)kv_dtype(kv);
  const cli::ModelPath where = unwrap(cli::resolve_model_path(path));
  if (where.hf) {  // vision, audio and segmentation folders have their own classes
    const std::string type = unwrap(models::hf_model_type(where.path));
    if (models::is_media_model_type(type) || type == "sam") return load_media(where.path, type, device, threads, compile_cache);
  }
  Expected<cli::OpenedModel> opened = Error::internal("not opened");
  {
    py::gil_scoped_release nogil;
    opened = cli::open_model(where);
  }
  if (models::is_encoder(unwrap(std::move(opened)).config.arch))
    return load_encoder(path, device, threads, compile_cache);
  return py::cast(PyModel::load(path, device, ctx, kv, threads, compile_cache));
}

}  // namespace

void bind_models(py::module_& m) {
  py::class_<TextStream>(m, "TextStream",
                         "Text pieces of a generation as they are decoded (generate/chat with stream=True). "
                         "Ctrl-C or close() ends the generation.")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__",
           [](TextStream& s) {
             std::optional<std::string> piece = s.next();
             if (!piece) throw py::stop_iteration();
             return to_str(*piece);
           })
      .def("close", &TextStream::close, "Stops the generation after its current token.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](TextStream& s, py::args) { s.close(); });

  auto gen_args = [](int32_t max_tokens, float temperature, int32_t top_k, float top_p, float min_p,
                     float repetition_penalty, uint64_t seed, std::optional<std::vector<std::string>> stop,
                     bool ignore_eos) {
    GenArgs a;
    a.max_tokens = max_tokens;
    a.temperature = temperature;
    a.top_k = top_k;
    a.top_p = top_p;
    a.min_p = min_p;
    a.repetition_penalty = repetition_penalty;
    a.seed = seed;
    if (stop) a.stop = *stop;
    a.ignore_eos = ignore_eos;
    return a;
  };

  py::class_<PyModel>(m, "Model", "A language model with its tokenizer (see load_model).")
      .def_property_readonly("path", &PyModel::path)
      .def_property_readonly("arch", &PyModel::arch)
      .def_property_readonly("n_vocab", &PyModel::n_vocab)
      .def_property_readonly("context_length", &PyModel::context_length)
      .def(
          "embed", [](const PyModel& self, const py::args&, const py::kwargs&) { self.embed(); },
          "Raises rlx.Error: embeddings need an encoder model (load_model returns an EncoderModel for one).")
      .def("logits", &PyModel::logits, py::arg("tokens"),
           "float32 logits [len(tokens), n_vocab] from an empty context: row i scores the token after tokens[0..i].")
      .def("tokenize", &PyModel::tokenize, py::arg("text"), py::arg("add_special") = true,
           py::arg("parse_special") = false, "Token ids of `text` (BOS added as the vocabulary asks).")
      .def("detokenize", &PyModel::detokenize, py::arg("tokens"), py::arg("render_special") = false,
           "The text of token ids.")
      .def(
          "generate",
          [gen_args](PyModel& self, py::handle prompt, int32_t max_tokens, float temperature, int32_t top_k,
                     float top_p, float min_p, float repetition_penalty, uint64_t seed,
                     std::optional<std::vector<std::string>> stop, bool ignore_eos, bool stream, bool add_special) {
            return self.generate(prompt,
                                 gen_args(max_tokens, temperature, top_k, top_p, min_p, repetition_penalty, seed,
                                          std::move(stop), ignore_eos),
                                 stream, add_special);
          },
          py::arg("prompt"), py::kw_only(), py::arg("max_tokens") = 64, py::arg("temperature") = 0.0f,
          py::arg("top_k") = 0, py::arg("top_p") = 1.0f, py::arg("min_p") = 0.0f,
          py::arg("repetition_penalty") = 1.0f, py::arg("seed") = 0, py::arg("stop") = py::none(),
          py::arg("ignore_eos") = false, py::arg("stream") = false, py::arg("add_special") = true,
          "Continues `prompt` (text, or token ids). Returns the generated text, or with stream=True a TextStream "
          "of its pieces. temperature 0 is greedy; stop strings end it (and are not returned).")
      .def(
          "chat",
          [gen_args](PyModel& self, const py::list& messages, const std::string& template_name, int32_t max_tokens,
                     float temperature, int32_t top_k, float top_p, float min_p, float repetition_penalty,
                     uint64_t seed, std::optional<std::vector<std::string>> stop, bool stream) {
            return self.chat(messages, template_name,
                             gen_args(max_tokens, temperature, top_k, top_p, min_p, repetition_penalty, seed,
                                      std::move(stop), false),
                             stream);
          },
          py::arg("messages"), py::kw_only(), py::arg("template") = "", py::arg("max_tokens") = 256,
          py::arg("temperature") = 0.0f, py::arg("top_k") = 0, py::arg("top_p") = 1.0f, py::arg("min_p") = 0.0f,
          py::arg("repetition_penalty") = 1.0f, py::arg("seed") = 0, py::arg("stop") = py::none(),
          py::arg("stream") = false,
          "The assistant's reply to `messages` ([{\"role\": ..., \"content\": ...}]), rendered with the model's "
          "own chat template, or the built-in `template` (\"llama3\", \"chatml\", \"gemma\").");

  m.def("load_model", &load_model, py::arg("path"), py::kw_only(), py::arg("device") = "cpu", py::arg("ctx") = 512,
        py::arg("kv") = "f32", py::arg("threads") = 0, py::arg("compile_cache") = true,
        "Loads a GGUF file or a Hugging Face folder (config.json + safetensors [+ tokenizer.json]): a Model for a "
        "language model, an EncoderModel for an encoder (bert, nomic-bert, modern-bert). ctx: KV-cache length in "
        "tokens; kv: \"f32\" or \"f16\" (both for language models only); threads: CPU threads (0: RLX_THREADS or "
        "all cores).");

  m.def(
      "synth",
      [](const std::string& path, const std::string& arch, const std::string& preset, const std::string& type,
         uint64_t seed, const std::string& chat_template) {
        models::SynthOptions o;
        o.arch = arch;
        o.preset = preset;
        o.type = type;
        o.seed = seed;
        o.chat_template = chat_template;
        Status s;
        {
          py::gil_scoped_release nogil;
          s = models::write_synthetic_gguf(o, path);
        }
        check(s);
      },
      py::arg("path"), py::kw_only(), py::arg("arch") = "", py::arg("preset") = "tiny", py::arg("type") = "f32",
      py::arg("seed") = 0, py::arg("chat_template") = "",
      "Writes a GGUF model with seeded random weights (as `rlx synth`): for tests and examples.");
}

}  // namespace rlx::python
