// The parts of the rlx Python module, each defined in its own file and called once
// from module.cpp's init.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace rlx::python {

/// rlx.Graph, rlx.parse_graph, rlx.Session, rlx.CompiledGraph, rlx.TensorSpec (graph_bindings.cpp).
void bind_graphs(pybind11::module_& m);
/// rlx.GraphBuilder and rlx.Value (builder_bindings.cpp).
void bind_builder(pybind11::module_& m);
/// rlx.Model, rlx.load_model, rlx.TextStream, rlx.synth (model_bindings.cpp).
void bind_models(pybind11::module_& m);
/// rlx.EncoderModel (encoder_bindings.cpp); bound before bind_models, whose load_model
/// returns one for an encoder's file.
void bind_encoders(pybind11::module_& m);
/// rlx.MediaModel and rlx.SamModel (media_bindings.cpp); bound before bind_models.
void bind_media(pybind11::module_& m);
/// Loads the Hugging Face folder `path` of a dinov2 / wav2vec2 (rlx.MediaModel) or sam
/// (rlx.SamModel) model (load_model's branch for them).
pybind11::object load_media(const std::string& path, const std::string& model_type, const std::string& device,
                            int threads, bool compile_cache);
/// Loads the encoder at `path` as an rlx.EncoderModel (load_model's encoder branch).
pybind11::object load_encoder(const std::string& path, const std::string& device, int threads, bool compile_cache);

}  // namespace rlx::python
