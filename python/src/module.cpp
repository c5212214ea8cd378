// The rlx._rlx extension module: its version, rlx.Error, and the graph, builder,
// encoder, media and model bindings. The Python package `rlx` (python/rlx/__init__.py) re-exports it.
#include <pybind11/pybind11.h>

#include <string>

#include "bindings.h"
#include "errors.h"
#include "rlx/runtime/aot_cache.h"

PYBIND11_MODULE(_rlx, m) {
  m.doc() = "RLX: a machine-learning compiler and runtime for transformer models (C++ core).";
  m.attr("__version__") = std::string(rlx::kRlxVersion);
  rlx::python::register_errors(m);
  rlx::python::bind_graphs(m);
  rlx::python::bind_builder(m);
  rlx::python::bind_encoders(m);
  rlx::python::bind_media(m);
  rlx::python::bind_models(m);
}
