// rlx.EncoderModel: an encoder (BERT, NomicBERT, ModernBERT; GGUF file or Hugging Face
// folder) as rlx.load_model returns it for such a file — embed() (texts or token ids to
// a float32 [n, dim] array, with the model's default pooling and normalization or the
// caller's) and forward() (Hugging Face's input_ids / attention_mask / token_type_ids to
// last_hidden_state and, for BERT, pooler_output).
//
// Every call that computes releases the GIL; one call runs on a model at a time (others
// wait). Ctrl-C stops embed() between its batched runs.
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "errors.h"
#include "model_path.h"
#include "rlx/models/encoder.h"

namespace rlx::python {
namespace py = pybind11;

namespace {

/// An integer array of rank 1 or 2 as int64 values and its [rows, cols] (a rank-1 array
/// is one row). Booleans count as 0/1 (attention masks). Raises TypeError otherwise.
struct IntMatrix {
  std::vector<int64_t> values;
  int64_t rows = 0, cols = 0;
};
IntMatrix int_matrix(py::handle obj, const std::string& name) {
  if (py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj))
    throw py::type_error(name + ": expected an integer array [batch, tokens], got a str");
  py::array a = py::module_::import("numpy").attr("asarray")(obj);
  if (a.ndim() != 1 && a.ndim() != 2)
    throw py::type_error(name + ": expected an integer array [batch, tokens] or [tokens], got rank " +
                         std::to_string(a.ndim()));
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u' && kind != 'b')
    throw py::type_error(name + ": expected integers, got numpy " + py::str(py::handle(a.dtype())).cast<std::string>());
  IntMatrix m;
  m.rows = a.ndim() == 2 ? static_cast<int64_t>(a.shape(0)) : 1;
  m.cols = static_cast<int64_t>(a.shape(a.ndim() - 1));
  auto wide = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!wide) throw py::error_already_set();
  m.values.assign(wide.data(), wide.data() + wide.size());
  return m;
}

/// Whether `item` is a sequence of token ids (a list / tuple / array of ints, not a str).
bool is_token_list(py::handle item) {
  return !py::isinstance<py::str>(item) && !py::isinstance<py::bytes>(item) &&
         (py::isinstance<py::list>(item) || py::isinstance<py::tuple>(item) || py::isinstance<py::array>(item));
}

/// Whether `item` is one integer: a Python int (not a bool) or a NumPy integer scalar.
bool is_int(py::handle item) {
  if (py::isinstance<py::bool_>(item)) return false;
  return py::isinstance<py::int_>(item) || py::isinstance(item, py::module_::import("numpy").attr("integer"));
}

class PyEncoderModel {
 public:
  static std::unique_ptr<PyEncoderModel> load(const std::string& path, const std::string& device, int threads,
                                              bool compile_cache) {
    auto m = std::unique_ptr<PyEncoderModel>(new PyEncoderModel());
    m->where_ = unwrap(cli::resolve_model_path(path));
    models::EncoderLoadOptions lo;
    lo.device = unwrap(Device::parse(device));
    lo.threads = threads;
    lo.compile_cache = compile_cache;
    Expected<std::unique_ptr<models::EncoderModel>> model = Error::internal("not loaded");
    Expected<std::unique_ptr<Tokenizer>> tok = Error::internal("not loaded");
    {
      py::gil_scoped_release nogil;
      model = models::EncoderModel::load(m->where_.path, lo);
      if (model) tok = cli::open_tokenizer(m->where_.path);
    }
    m->model_ = unwrap(std::move(model));
    if (tok)
      m->tok_ = std::move(*tok);
    else
      m->tok_error_ = tok.error();  // token ids still work; texts raise this
    return m;
  }

  std::string path() const { return where_.path; }
  std::string arch() const { return models::arch_name(model_->config().arch); }
  int64_t dim() const { return model_->config().n_embd; }
  int64_t n_vocab() const { return model_->config().n_vocab; }
  int64_t max_tokens() const { return model_->max_tokens(); }
  std::string pooling() const { return models::pooling_name(model_->default_pooling()); }
  bool normalize() const { return model_->default_normalize(); }
  bool has_pooler() const { return model_->has_pooler(); }

  std::vector<int32_t> tokenize(const std::string& text) const {
    return models::encoder_tokens(tokenizer(), text, /*truncate_to=*/0);
  }

  py::array embed(py::handle inputs, const std::optional<std::string>& pooling, std::optional<bool> normalize,
                  std::optional<int64_t> dimensions, int64_t batch_size, bool truncate) {
    models::EmbedOptions o;
    o.pooling = pooling ? unwrap(models::parse_pooling(*pooling)) : model_->default_pooling();
    o.normalize = normalize.value_or(model_->default_normalize());
    o.max_batch = batch_size;
    if (dimensions) {
      if (*dimensions < 1 || *dimensions > dim())
        throw ErrorException(
            Error::invalid_argument("embed: dimensions must be 1..{} (the model's width), got {}", dim(), *dimensions));
      o.dimensions = *dimensions;
    }
    std::vector<std::vector<int32_t>> ids = sequences(inputs, truncate);
    o.interrupt = [] {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) return Status(Error::invalid_argument("interrupted"));
      return Status();
    };
    Expected<std::vector<std::vector<float>>> out = Error::internal("not run");
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      out = model_->embed_all(ids, o);
    }
    if (PyErr_Occurred()) throw py::error_already_set();  // Ctrl-C: KeyboardInterrupt
    std::vector<std::vector<float>> rows = unwrap(std::move(out));
    const int64_t width = o.dimensions > 0 ? o.dimensions : dim();
    std::vector<float> flat;
    flat.reserve(rows.size() * static_cast<size_t>(width));
    for (const std::vector<float>& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    return float_array(std::move(flat), {static_cast<py::ssize_t>(rows.size()), static_cast<py::ssize_t>(width)});
  }

  py::dict forward(py::handle input_ids, py::handle attention_mask, py::handle token_type_ids) {
    const IntMatrix ids = int_matrix(input_ids, "input_ids");
    auto companion = [&](py::handle obj, const std::string& name) {
      if (obj.is_none()) return std::vector<int64_t>{};
      IntMatrix m = int_matrix(obj, name);
      if (m.rows != ids.rows || m.cols != ids.cols)
        throw ErrorException(Error::invalid_argument("{}: shape [{}, {}] differs from input_ids' [{}, {}]", name,
                                                     m.rows, m.cols, ids.rows, ids.cols));
      return std::move(m.values);
    };
    const std::vector<int64_t> mask = companion(attention_mask, "attention_mask");
    const std::vector<int64_t> types = companion(token_type_ids, "token_type_ids");
    Expected<models::EncoderOutput> out = Error::internal("not run");
    {
      py::gil_scoped_release nogil;
      Expected<models::EncoderBatch> batch = models::unpad_encoder_batch(ids.values, mask, types, ids.rows, ids.cols);
      if (!batch) {
        out = batch.error();
      } else {
        std::lock_guard<std::mutex> lock(mu_);
        out = model_->forward(batch->tokens, batch->types);
      }
    }
    models::EncoderOutput o = unwrap(std::move(out));
    py::dict result;
    result["last_hidden_state"] = float_array(
        models::padded_hidden_states(o, ids.cols),
        {static_cast<py::ssize_t>(ids.rows), static_cast<py::ssize_t>(ids.cols), static_cast<py::ssize_t>(o.dim)});
    if (model_->has_pooler())
      result["pooler_output"] =
          float_array(std::move(o.pooler), {static_cast<py::ssize_t>(ids.rows), static_cast<py::ssize_t>(o.dim)});
    return result;
  }

 private:
  PyEncoderModel() = default;

  const Tokenizer& tokenizer() const {
    if (!tok_) throw ErrorException(tok_error_);
    return *tok_;
  }

  /// embed()'s inputs as token sequences: a str, a list of str, a list of ints (one
  /// sequence, as OpenAI's API reads it), a list of int lists or a 2-D integer array.
  std::vector<std::vector<int32_t>> sequences(py::handle inputs, bool truncate) const {
    std::vector<std::vector<int32_t>> ids;
    auto add_text = [&](const std::string& text, size_t index) {
      std::vector<int32_t> t = models::encoder_tokens(tokenizer(), text, truncate ? max_tokens() : 0);
      if (static_cast<int64_t>(t.size()) > max_tokens())
        throw ErrorException(
            Error::invalid_argument("embed: text {} has {} tokens; the model takes at most {} (truncate=True cuts it)",
                                    index, t.size(), max_tokens()));
      ids.push_back(std::move(t));
    };
    if (py::isinstance<py::str>(inputs)) {
      add_text(inputs.cast<std::string>(), 0);
      return ids;
    }
    if (py::isinstance<py::array>(inputs)) {
      py::array a = py::reinterpret_borrow<py::array>(inputs);
      if (a.ndim() == 2) {
        const IntMatrix m = int_matrix(a, "embed()");
        if (m.rows == 0 || m.cols == 0)
          throw ErrorException(Error::invalid_argument("embed: no inputs (an empty array)"));
        for (int64_t r = 0; r < m.rows; ++r) {
          std::vector<int32_t> row;
          for (int64_t c = 0; c < m.cols; ++c) {
            const int64_t t = m.values[static_cast<size_t>(r * m.cols + c)];
            if (t < INT32_MIN || t > INT32_MAX)
              throw ErrorException(Error::invalid_argument("token id {} is outside the vocabulary", t));
            row.push_back(static_cast<int32_t>(t));
          }
          ids.push_back(std::move(row));
        }
        return ids;
      }
    }
    if (!py::isinstance<py::list>(inputs) && !py::isinstance<py::tuple>(inputs) && !py::isinstance<py::array>(inputs))
      throw py::type_error("embed(): expected a str, a list of str or a list of token-id lists, got " +
                           py::str(py::type::handle_of(inputs).attr("__name__")).cast<std::string>());
    py::sequence items = py::reinterpret_borrow<py::sequence>(inputs);
    if (py::len(items) == 0) throw ErrorException(Error::invalid_argument("embed: no inputs (an empty list)"));
    if (is_int(items[0])) {  // one sequence of token ids
      ids.push_back(token_ids(inputs));
      return ids;
    }
    const size_t n = py::len(items);
    for (size_t i = 0; i < n; ++i) {
      py::handle item = items[i];
      if (py::isinstance<py::str>(item)) {
        add_text(item.cast<std::string>(), i);
      } else if (is_token_list(item)) {
        ids.push_back(token_ids(item));
        if (ids.back().empty()) throw ErrorException(Error::invalid_argument("embed: input {} has no tokens", i));
      } else {
        throw py::type_error("embed(): input " + std::to_string(i) + " is a " +
                             py::str(py::type::handle_of(item).attr("__name__")).cast<std::string>() +
                             "; expected a str or a list of token ids");
      }
    }
    return ids;
  }

  cli::ModelPath where_;
  std::unique_ptr<models::EncoderModel> model_;
  std::unique_ptr<Tokenizer> tok_;
  Error tok_error_{ErrorCode::kInternal, "no tokenizer"};
  std::mutex mu_;
};

}  // namespace

py::object load_encoder(const std::string& path, const std::string& device, int threads, bool compile_cache) {
  return py::cast(PyEncoderModel::load(path, device, threads, compile_cache));
}

void bind_encoders(py::module_& m) {
  py::class_<PyEncoderModel>(m, "EncoderModel",
                             "An encoder model (BERT, NomicBERT, ModernBERT) with its tokenizer (see load_model).")
      .def_property_readonly("path", &PyEncoderModel::path)
      .def_property_readonly("arch", &PyEncoderModel::arch)
      .def_property_readonly("dim", &PyEncoderModel::dim, "Width of the hidden states and embeddings.")
      .def_property_readonly("n_vocab", &PyEncoderModel::n_vocab)
      .def_property_readonly("max_tokens", &PyEncoderModel::max_tokens, "The longest sequence the model takes.")
      .def_property_readonly("pooling", &PyEncoderModel::pooling,
                             "The default pooling of embed(): \"cls\", \"mean\" or \"last\", as the model's files say.")
      .def_property_readonly("normalize", &PyEncoderModel::normalize,
                             "Whether embed() L2-normalizes by default (a sentence-transformers Normalize module).")
      .def_property_readonly("has_pooler", &PyEncoderModel::has_pooler,
                             "True when forward() also returns BERT's pooler_output.")
      .def("tokenize", &PyEncoderModel::tokenize, py::arg("text"),
           "Token ids of `text` as embed() reads it ([CLS] text [SEP] for WordPiece).")
      .def("embed", &PyEncoderModel::embed, py::arg("inputs"), py::kw_only(), py::arg("pooling") = py::none(),
           py::arg("normalize") = py::none(), py::arg("dimensions") = py::none(), py::arg("batch_size") = 32,
           py::arg("truncate") = true,
           "float32 embeddings [n, dim] of a str, a list of str, a list of token ids (one input) or a list of "
           "token-id lists, in input order. pooling (\"cls\", \"mean\", \"last\") and normalize default to the "
           "model's; dimensions keeps the first values and L2-normalizes them again; batch_size: most inputs per "
           "run. A text longer than max_tokens keeps its first tokens and its final [SEP] (truncate=False: "
           "raises); token-id inputs are never cut.")
      .def("forward", &PyEncoderModel::forward, py::arg("input_ids"), py::arg("attention_mask") = py::none(),
           py::arg("token_type_ids") = py::none(),
           "One forward pass in Hugging Face's layout: input_ids [batch, n] (or [n]), attention_mask ones then "
           "zeros per row, token_type_ids. Returns {\"last_hidden_state\": float32 [batch, n, dim]} and, when "
           "has_pooler, \"pooler_output\": float32 [batch, dim].");
}

}  // namespace rlx::python
