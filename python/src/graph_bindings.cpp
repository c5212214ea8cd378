// rlx.Graph, rlx.Session and rlx.CompiledGraph: graphs from the IR text form (or the
// builder in builder_bindings.cpp), compiled on a device and run on NumPy arrays.
// Inputs go to the runtime without a copy when they are C-contiguous in the declared
// dtype; outputs come back as arrays over the runtime's own result buffers.
#include <pybind11/stl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "errors.h"
#include "rlx/ir/text.h"
#include "rlx/runtime/session.h"

namespace rlx::python {
namespace py = pybind11;

namespace {

/// One entry of a compiled graph's I/O manifest, as Python sees it.
struct TensorSpec {
  std::string name;
  std::string dtype;
  py::tuple shape;
};

std::vector<TensorSpec> specs(const std::vector<ir::ManifestEntry>& entries) {
  std::vector<TensorSpec> out;
  for (const ir::ManifestEntry& e : entries)
    out.push_back({e.name, std::string(ir::dtype_name(e.type.dtype)), shape_tuple(e.type.shape)});
  return out;
}

std::string names_of(const std::vector<ir::ManifestEntry>& entries) {
  std::string s;
  for (const ir::ManifestEntry& e : entries) s += (s.empty() ? "'" : ", '") + e.name + "'";
  return s.empty() ? "none" : s;
}

const ir::ManifestEntry& find_entry(const std::vector<ir::ManifestEntry>& entries, const std::string& name,
                                    const char* what) {
  for (const ir::ManifestEntry& e : entries)
    if (e.name == name) return e;
  throw ErrorException(Error::not_found("unknown {} '{}' ({}s: {})", what, name, what, names_of(entries)));
}

/// A CompiledGraph plus what the binding adds: a lock (one run at a time; the GIL is
/// released while it runs) and the data pointers the last run handed to the runtime.
class PyCompiledGraph {
 public:
  explicit PyCompiledGraph(CompiledGraph g) : graph_(std::move(g)) {}

  std::vector<TensorSpec> inputs() const { return specs(graph_.manifest().inputs); }
  std::vector<TensorSpec> params() const { return specs(graph_.manifest().params); }
  std::vector<TensorSpec> outputs() const { return specs(graph_.manifest().outputs); }
  std::string device() const { return graph_.device().to_string(); }
  std::map<std::string, uintptr_t> input_pointers() const { return input_pointers_; }

  void set_param(const std::string& name, py::handle values) {
    const ir::ManifestEntry& e = find_entry(graph_.manifest().params, name, "param");
    ArrayArg arg;
    // Packed params (GGUF blocks) take their raw bytes as a uint8 array.
    const ir::DType as = ir::is_packed(e.type.dtype) ? ir::DType::U8 : e.type.dtype;
    prepare_array(values, as, "param '" + name + "'", &arg);
    if (!ir::is_packed(e.type.dtype) && e.type.shape.is_static() && ir::Shape::of(arg.shape) != e.type.shape)
      throw ErrorException(Error::invalid_argument("param '{}': expected {}, got an array of shape {}", name,
                                                   e.type.to_string(), ir::Shape::of(arg.shape).to_string()));
    const auto* data = static_cast<const uint8_t*>(arg.view.data);
    const auto size = static_cast<size_t>(arg.view.num_bytes());
    Status s;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      s = graph_.set_param_typed(name, std::span<const uint8_t>(data, size), e.type.dtype);
    }
    check(s);
  }

  py::dict run(const py::dict& inputs) {
    const auto& manifest = graph_.manifest();
    std::vector<ArrayArg> args(inputs.size());
    std::vector<std::string> names;
    names.reserve(inputs.size());
    size_t k = 0;
    for (auto [key, value] : inputs) {
      if (!py::isinstance<py::str>(key)) throw py::type_error("run(): input names must be strings");
      names.push_back(key.cast<std::string>());
      const ir::ManifestEntry& e = find_entry(manifest.inputs, names.back(), "input");
      prepare_array(value, e.type.dtype, "input '" + names.back() + "'", &args[k++]);
    }
    std::vector<NamedTensorView> views;
    for (size_t i = 0; i < args.size(); ++i) views.push_back({names[i], args[i].view});
    Expected<std::vector<Tensor>> outs = Error::internal("not run");
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      outs = graph_.run_typed(views);
    }
    input_pointers_.clear();
    for (size_t i = 0; i < args.size(); ++i)
      input_pointers_[names[i]] = reinterpret_cast<uintptr_t>(args[i].view.data);
    std::vector<Tensor> tensors = unwrap(std::move(outs));
    py::dict result;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::string& name = manifest.outputs[i].name;
      result[py::str(name.empty() ? "output" + std::to_string(i) : name)] = to_numpy(std::move(tensors[i]));
    }
    return result;
  }

 private:
  CompiledGraph graph_;
  std::mutex mu_;
  std::map<std::string, uintptr_t> input_pointers_;
};

ir::DimBinding parse_bindings(const std::map<std::string, int64_t>& bindings) {
  ir::DimBinding b;
  for (const auto& [name, value] : bindings) {
    const std::optional<ir::SymbolId> s = ir::try_intern_symbol(name);
    if (!s) throw ErrorException(Error::invalid_argument("binding '{}': too many symbols", name));
    if (value <= 0) throw ErrorException(Error::invalid_argument("binding '{}': size {} is not positive", name, value));
    b.set(*s, value);
  }
  return b;
}

}  // namespace

void bind_graphs(py::module_& m) {
  py::class_<TensorSpec>(m, "TensorSpec", "Name, dtype and shape of a compiled graph's input, param or output.")
      .def_readonly("name", &TensorSpec::name)
      .def_readonly("dtype", &TensorSpec::dtype, "\"f32\", \"f16\", \"bf16\", \"i32\", ...")
      .def_readonly("shape", &TensorSpec::shape, "ints, or strings for symbolic dims (\"SEQ\")")
      .def("__repr__", [](const TensorSpec& s) {
        return "TensorSpec(name=" + py::repr(py::str(s.name)).cast<std::string>() + ", dtype='" + s.dtype +
               "', shape=" + py::repr(s.shape).cast<std::string>() + ")";
      });

  py::class_<ir::Graph>(m, "Graph", "A graph of RLX IR (from parse_graph or a GraphBuilder).")
      .def_static(
          "parse", [](const std::string& text) { return unwrap(ir::parse_graph(text)); }, py::arg("text"),
          "Parses the IR text form (see include/rlx/ir/text.h); errors name the line and column.")
      .def("__str__", [](const ir::Graph& g) { return ir::print(g); })
      .def("__repr__", [](const ir::Graph& g) { return "<rlx.Graph of " + std::to_string(g.size()) + " nodes>"; });
  m.def(
      "parse_graph", [](const std::string& text) { return unwrap(ir::parse_graph(text)); }, py::arg("text"),
      "Parses a graph from the IR text form; the same as Graph.parse.");

  py::class_<PyCompiledGraph>(m, "CompiledGraph",
                              "A graph compiled for one device. set_param the weights, then run() again and again.")
      .def_property_readonly("inputs", &PyCompiledGraph::inputs)
      .def_property_readonly("params", &PyCompiledGraph::params)
      .def_property_readonly("outputs", &PyCompiledGraph::outputs)
      .def_property_readonly("device", &PyCompiledGraph::device)
      .def("set_param", &PyCompiledGraph::set_param, py::arg("name"), py::arg("values"),
           "Sets a weight. Float arrays for float params (converted to the declared dtype), int32 for i32, "
           "uint8 raw blocks for packed (GGUF) params.")
      .def("run", &PyCompiledGraph::run, py::arg("inputs"),
           "Runs with {name: array} and returns {output name: array}. A C-contiguous array of the declared "
           "dtype is read in place (no copy); other arrays are converted once. The GIL is released while it runs.")
      .def_property_readonly("input_pointers", &PyCompiledGraph::input_pointers,
                             "Data pointers the last run() handed to the runtime, by input name: equal to "
                             "array.ctypes.data when an input was used without a copy.");

  py::class_<Session>(m, "Session", "Compiles graphs for one device (\"cpu\", \"cuda\", \"cuda:1\", \"reference\").")
      .def(py::init([](const std::string& device) {
             Device d = unwrap(Device::parse(device));
             return unwrap(Session::create(d));
           }),
           py::arg("device") = "cpu")
      .def_property_readonly("device", [](const Session& s) { return s.device().to_string(); })
      .def(
          "compile",
          [](const Session& s, py::object graph, const std::map<std::string, int64_t>& bindings) {
            ir::Graph g = py::isinstance<py::str>(graph) ? unwrap(ir::parse_graph(graph.cast<std::string>()))
                                                         : graph.cast<ir::Graph>();
            compile::CompileOptions options;
            options.binding = parse_bindings(bindings);
            Expected<CompiledGraph> compiled = Error::internal("not compiled");
            {
              py::gil_scoped_release nogil;
              compiled = s.compile_with(g, options);
            }
            return std::make_unique<PyCompiledGraph>(unwrap(std::move(compiled)));
          },
          py::arg("graph"), py::arg("bindings") = std::map<std::string, int64_t>{},
          "Compiles a Graph (or its IR text). bindings give sizes to symbolic dims, e.g. {\"SEQ\": 8}.");
}

}  // namespace rlx::python
