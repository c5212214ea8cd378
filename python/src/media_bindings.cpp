// rlx.MediaModel (DINOv2, Wav2Vec2) and rlx.SamModel (Segment Anything) from Hugging Face
// folders, as rlx.load_model returns them: forward() on NumPy arrays with Hugging Face's
// input and output names; for SAM also encode() once / decode() many times, and
// segment() of an RGB image (SamProcessor's preparation, the best mask at the image's
// size).
//
// Every call that computes releases the GIL; one call runs on a model at a time.
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "errors.h"
#include "rlx/models/media_encoder.h"
#include "rlx/models/sam.h"

namespace rlx::python {
namespace py = pybind11;

namespace {

/// A float32 C-contiguous copy or view of `obj` with its shape (TypeError for non-numbers).
struct FloatArray {
  py::array_t<float, py::array::c_style | py::array::forcecast> array;
  std::vector<int64_t> shape;
  std::span<const float> values() const { return {array.data(), static_cast<size_t>(array.size())}; }
};
FloatArray float_input(py::handle obj, const std::string& name) {
  py::array a = py::module_::import("numpy").attr("asarray")(obj);
  const char kind = a.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u')
    throw py::type_error(name + ": expected a float array, got numpy " +
                         py::str(py::handle(a.dtype())).cast<std::string>());
  FloatArray out;
  out.array = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!out.array) throw py::error_already_set();
  for (py::ssize_t i = 0; i < out.array.ndim(); ++i) out.shape.push_back(out.array.shape(i));
  return out;
}

std::vector<py::ssize_t> dims(std::initializer_list<int64_t> d) { return {d.begin(), d.end()}; }

models::MediaLoadOptions load_options(const std::string& device, int threads, bool compile_cache) {
  models::MediaLoadOptions lo;
  lo.device = unwrap(Device::parse(device));
  lo.threads = threads;
  lo.compile_cache = compile_cache;
  return lo;
}

class PyMediaModel {
 public:
  PyMediaModel(const std::string& path, const std::string& device, int threads, bool compile_cache) : path_(path) {
    const models::MediaLoadOptions lo = load_options(device, threads, compile_cache);
    Expected<std::unique_ptr<models::MediaEncoderModel>> m = Error::internal("not loaded");
    {
      py::gil_scoped_release nogil;
      m = models::MediaEncoderModel::load(path, lo);
    }
    model_ = unwrap(std::move(m));
  }
  std::string arch() const { return models::media_arch_name(model_->config().arch); }
  std::string input_name() const { return std::string(model_->input_name()); }
  std::vector<std::string> output_names() const { return model_->output_names(); }
  int64_t dim() const { return model_->config().n_embd; }

  py::dict forward(py::handle values) {
    const FloatArray in = float_input(values, input_name());
    Expected<models::MediaOutput> out = Error::internal("not run");
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      out = model_->forward(in.shape, in.values());
    }
    models::MediaOutput o = unwrap(std::move(out));
    py::dict result;
    result["last_hidden_state"] = float_array(std::move(o.hidden), dims({o.batch, o.tokens, o.dim}));
    if (!o.pooler.empty()) result["pooler_output"] = float_array(std::move(o.pooler), dims({o.batch, o.dim}));
    return result;
  }

 private:
  std::string path_;
  std::unique_ptr<models::MediaEncoderModel> model_;
  std::mutex mu_;
};

class PySamModel {
 public:
  PySamModel(const std::string& path, const std::string& device, int threads, bool compile_cache) : path_(path) {
    const models::MediaLoadOptions lo = load_options(device, threads, compile_cache);
    Expected<std::unique_ptr<models::SamModel>> m = Error::internal("not loaded");
    {
      py::gil_scoped_release nogil;
      m = models::SamModel::load(path, lo);
    }
    model_ = unwrap(std::move(m));
  }
  int64_t image_size() const { return model_->config().image_size; }

  py::array encode(py::handle pixel_values) {
    const FloatArray px = float_input(pixel_values, "pixel_values");
    models::SamImageEmbeddings e = run_encode(px);
    return float_array(std::move(e.values), dims({e.batch, e.channels, e.side, e.side}));
  }

  py::dict decode(py::handle image_embeddings, py::handle points, py::handle labels, py::handle boxes, bool multimask) {
    const FloatArray em = float_input(image_embeddings, "image_embeddings");
    if (em.shape.size() != 4 || em.shape[2] != em.shape[3])
      throw ErrorException(Error::invalid_argument("image_embeddings: expected [batch, channels, side, side]"));
    models::SamImageEmbeddings image{em.shape[0], em.shape[1], em.shape[2], {em.values().begin(), em.values().end()}};
    return masks_dict(run_decode(image, prompts(image.batch, points, labels, boxes), multimask));
  }

  py::dict forward(py::handle pixel_values, py::handle points, py::handle labels, py::handle boxes, bool multimask) {
    const FloatArray px = float_input(pixel_values, "pixel_values");
    const models::SamPrompts pr = prompts(px.shape.empty() ? 0 : px.shape[0], points, labels, boxes);  // before the encoder
    models::SamImageEmbeddings image = run_encode(px);
    py::dict out = masks_dict(run_decode(image, pr, multimask));
    out["image_embeddings"] =
        float_array(std::move(image.values), dims({image.batch, image.channels, image.side, image.side}));
    return out;
  }

  py::tuple segment(py::handle image, py::handle points, py::handle labels, py::handle box, bool multimask) {
    py::array raw = py::module_::import("numpy").attr("asarray")(image);
    if (raw.ndim() != 3 || raw.shape(2) != 3 || raw.dtype().kind() != 'u' || raw.dtype().itemsize() != 1)
      throw py::type_error("segment(): image must be a uint8 array [height, width, 3] (RGB)");
    auto rgb = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(raw);
    if (!rgb) throw py::error_already_set();
    const int64_t h = rgb.shape(0), w = rgb.shape(1);
    const models::SamConfig& c = model_->config();
    Expected<models::SamPreprocessed> prep = Error::internal("not run");
    {
      py::gil_scoped_release nogil;
      prep = models::sam_preprocess(c, {rgb.data(), static_cast<size_t>(rgb.size())}, h, w);
    }
    const models::SamPreprocessed p = unwrap(std::move(prep));
    // Prompts in the image's pixels, moved into the resized frame.
    const py::object pts = points.is_none() ? py::none() : one_prompt(points, 2, "points must be [n, 2] (x, y)");
    const py::object lab = labels.is_none() ? py::none() : one_prompt(labels, 1, "labels must be [n]");
    const py::object bx = box.is_none() ? py::none() : one_prompt(box, 1, "box must be [x0, y0, x1, y1]");
    models::SamPrompts pr = prompts(1, pts, lab, bx);
    for (size_t i = 0; i + 1 < pr.coords.size(); i += 2)
      std::tie(pr.coords[i], pr.coords[i + 1]) = p.to_resized(pr.coords[i], pr.coords[i + 1]);
    for (size_t i = 0; i + 1 < pr.boxes.size(); i += 2)
      std::tie(pr.boxes[i], pr.boxes[i + 1]) = p.to_resized(pr.boxes[i], pr.boxes[i + 1]);
    const std::vector<int64_t> shape{1, 3, c.image_size, c.image_size};
    Expected<models::SamImageEmbeddings> enc = Error::internal("not run");
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      enc = model_->encode(shape, p.pixels);
    }
    const models::SamImageEmbeddings e = unwrap(std::move(enc));
    const models::SamMasks m = run_decode(e, pr, multimask);
    size_t best = 0;
    for (size_t i = 1; i < m.iou_scores.size(); ++i)
      if (m.iou_scores[i] > m.iou_scores[best]) best = i;
    const size_t plane = static_cast<size_t>(m.side * m.side);
    std::vector<uint8_t> mask = models::sam_mask_image(c, {m.pred_masks.data() + best * plane, plane}, p);
    py::array_t<uint8_t> out({h, w});
    std::memcpy(out.mutable_data(), mask.data(), mask.size());
    return py::make_tuple(out, m.iou_scores[best]);
  }

 private:
  // `obj` (rank `rank`) with two leading dims of one: one image, one prompt.
  static py::object one_prompt(py::handle obj, py::ssize_t rank, const char* what) {
    py::array a = py::module_::import("numpy").attr("asarray")(obj);
    if (a.ndim() != rank) throw py::type_error(std::string("segment(): ") + what);
    py::list shape;
    shape.append(1);
    shape.append(1);
    for (py::ssize_t i = 0; i < a.ndim(); ++i) shape.append(a.shape(i));
    return a.attr("reshape")(py::tuple(shape));
  }

  // SamModel's inputs as transformers names them: points [B, P, N, 2], labels [B, P, N],
  // boxes [B, P, 4].
  static models::SamPrompts prompts(int64_t batch, py::handle points, py::handle labels, py::handle boxes) {
    models::SamPrompts pr;
    if (!points.is_none()) {
      const FloatArray pt = float_input(points, "input_points");
      if (pt.shape.size() != 4 || pt.shape[0] != batch || pt.shape[3] != 2)
        throw ErrorException(Error::invalid_argument("input_points: expected [{}, prompts, points, 2]", batch));
      pr.prompts = pt.shape[1];
      pr.points = pt.shape[2];
      pr.coords.assign(pt.values().begin(), pt.values().end());
    }
    if (!labels.is_none()) {
      if (points.is_none()) throw ErrorException(Error::invalid_argument("input_labels: needs input_points"));
      for (int32_t v : token_ids(py::module_::import("numpy").attr("asarray")(labels).attr("ravel")()))
        pr.labels.push_back(v);
    }
    if (!boxes.is_none()) {
      const FloatArray bx = float_input(boxes, "input_boxes");
      if (bx.shape.size() != 3 || bx.shape[0] != batch || bx.shape[2] != 4 ||
          (!points.is_none() && bx.shape[1] != pr.prompts))
        throw ErrorException(
            Error::invalid_argument("input_boxes: expected [{}, prompts, 4] (prompts as input_points')", batch));
      pr.prompts = bx.shape[1];
      pr.boxes.assign(bx.values().begin(), bx.values().end());
    }
    return pr;
  }

  models::SamImageEmbeddings run_encode(const FloatArray& px) {
    Expected<models::SamImageEmbeddings> e = Error::internal("not run");
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      e = model_->encode(px.shape, px.values());
    }
    return unwrap(std::move(e));
  }
  models::SamMasks run_decode(const models::SamImageEmbeddings& image, const models::SamPrompts& pr, bool multimask) {
    Expected<models::SamMasks> m = Error::internal("not run");
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      m = model_->decode(image, pr, multimask);
    }
    return unwrap(std::move(m));
  }
  static py::dict masks_dict(models::SamMasks m) {
    py::dict out;
    out["pred_masks"] = float_array(std::move(m.pred_masks), dims({m.batch, m.prompts, m.masks, m.side, m.side}));
    out["iou_scores"] = float_array(std::move(m.iou_scores), dims({m.batch, m.prompts, m.masks}));
    return out;
  }

  std::string path_;
  std::unique_ptr<models::SamModel> model_;
  std::mutex mu_;
};

}  // namespace

py::object load_media(const std::string& path, const std::string& model_type, const std::string& device, int threads,
                      bool compile_cache) {
  if (model_type == "sam") return py::cast(std::make_unique<PySamModel>(path, device, threads, compile_cache));
  return py::cast(std::make_unique<PyMediaModel>(path, device, threads, compile_cache));
}

void bind_media(py::module_& m) {
  py::class_<PyMediaModel>(m, "MediaModel",
                           "A vision or audio encoder from a Hugging Face folder: DINOv2 or Wav2Vec2 (see load_model).")
      .def_property_readonly("arch", &PyMediaModel::arch, "\"dinov2\" or \"wav2vec2\".")
      .def_property_readonly("input_name", &PyMediaModel::input_name, "pixel_values or input_values.")
      .def_property_readonly("output_names", &PyMediaModel::output_names)
      .def_property_readonly("dim", &PyMediaModel::dim, "Width of the hidden states.")
      .def("forward", &PyMediaModel::forward, py::arg("values"),
           "One forward pass: pixel_values float32 [batch, 3, height, width] (DINOv2) or input_values [batch, "
           "samples] (Wav2Vec2). Returns {\"last_hidden_state\": [batch, tokens, dim]} and, for DINOv2, "
           "\"pooler_output\": [batch, dim].");
  py::class_<PySamModel>(m, "SamModel",
                         "Segment Anything from a Hugging Face folder (see load_model): encode an image once, prompt "
                         "it many times.")
      .def_property_readonly("image_size", &PySamModel::image_size, "Side of the square input the encoder takes.")
      .def("encode", &PySamModel::encode, py::arg("pixel_values"),
           "image_embeddings float32 [batch, channels, side, side] of pixel_values [batch, 3, S, S] (prepared as "
           "SamProcessor does).")
      .def("decode", &PySamModel::decode, py::arg("image_embeddings"), py::kw_only(),
           py::arg("input_points") = py::none(), py::arg("input_labels") = py::none(),
           py::arg("input_boxes") = py::none(), py::arg("multimask") = true,
           "Masks of prompts on encode()'s output: input_points [batch, prompts, points, 2] (resized-image "
           "pixels), input_labels [batch, prompts, points] (1 object, 0 background, -1 not a point; default 1), "
           "input_boxes [batch, prompts, 4]. Returns {\"pred_masks\": [batch, prompts, 3 (or 1), 4g, 4g] "
           "low-resolution logits, \"iou_scores\": [batch, prompts, 3 (or 1)]}.")
      .def("forward", &PySamModel::forward, py::arg("pixel_values"), py::kw_only(),
           py::arg("input_points") = py::none(), py::arg("input_labels") = py::none(),
           py::arg("input_boxes") = py::none(), py::arg("multimask") = true,
           "encode() then decode(), as transformers' SamModel: also returns \"image_embeddings\".")
      .def("segment", &PySamModel::segment, py::arg("image"), py::kw_only(), py::arg("points") = py::none(),
           py::arg("labels") = py::none(), py::arg("box") = py::none(), py::arg("multimask") = true,
           "One prompt on an RGB image (uint8 [height, width, 3]): points [n, 2] and box [4] in the image's pixels, "
           "labels [n]. Returns (mask uint8 [height, width], 255 inside; its predicted IoU) for the best mask.");
}

}  // namespace rlx::python
