// The parts of the rlx Python module, each defined in its own file and called once
// from module.cpp's init.
#pragma once

#include <pybind11/pybind11.h>

namespace rlx::python {

/// rlx.Graph, rlx.parse_graph, rlx.Session, rlx.CompiledGraph, rlx.TensorSpec (graph_bindings.cpp).
void bind_graphs(pybind11::module_& m);
/// rlx.GraphBuilder and rlx.Value (builder_bindings.cpp).
void bind_builder(pybind11::module_& m);
/// rlx.Model, rlx.load_model, rlx.TextStream, rlx.synth (model_bindings.cpp).
void bind_models(pybind11::module_& m);

}  // namespace rlx::python
