// rlx.GraphBuilder and rlx.Value: a small builder for graphs written in Python, over
// ir::GraphBuilder. Every call checks its result at once, so a bad shape or dtype
// raises rlx.Error at the line that caused it (the builder is then finished: its
// first error is kept, as ir::GraphBuilder does).
//
//   b = rlx.GraphBuilder()
//   x = b.input("x", "f32", [4, 64]); w = b.param("w", "f32", [128, 64])
//   b.output(b.activation("silu", b.linear(x, w)), "y")
//   graph = b.build()
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "errors.h"
#include "rlx/ir/builder.h"

namespace rlx::python {
namespace py = pybind11;

namespace {

/// A shape as Python gives it: ints and symbol names.
using Dims = std::vector<std::variant<int64_t, std::string>>;

struct BuilderState {
  ir::GraphBuilder builder;
  bool built = false;
};

/// A value of a graph being built: its builder and id.
struct Value {
  std::shared_ptr<BuilderState> state;
  ir::ValueId id;
};

template <typename E>
E parse_kind(const std::string& text, const char* what) {
  if (std::optional<E> e = ir::parse_enum<E>(text)) return *e;
  std::string names;
  for (std::string_view n : ir::enum_names(E{})) names += (names.empty() ? "" : ", ") + std::string(n);
  throw ErrorException(Error::invalid_argument("unknown {} '{}' (one of: {})", what, text, names));
}

ir::DType parse_dtype(const std::string& text) {
  if (std::optional<ir::DType> d = ir::parse_dtype(text)) return *d;
  throw ErrorException(Error::invalid_argument("unknown dtype '{}' (f32, f16, bf16, i32, ...)", text));
}

/// A shape from a list of ints and symbol names ("SEQ", "2*SEQ").
ir::Shape parse_shape(const Dims& dims) {
  std::vector<ir::Dim> out;
  for (const auto& d : dims) {
    if (const int64_t* n = std::get_if<int64_t>(&d)) {
      if (*n < 0) throw ErrorException(Error::invalid_argument("shape dim {} is negative", *n));
      out.emplace_back(*n);
    } else {
      const std::string& text = std::get<std::string>(d);
      std::optional<ir::Dim> dim = ir::parse_dim(text);
      if (!dim) throw ErrorException(Error::invalid_argument("shape dim '{}' is not a number or symbol", text));
      out.push_back(*dim);
    }
  }
  return ir::Shape(std::move(out));
}

class PyGraphBuilder {
 public:
  PyGraphBuilder() : state_(std::make_shared<BuilderState>()) {}

  Value input(const std::string& name, const std::string& dtype, const Dims& shape) {
    return made(b().input(name, parse_dtype(dtype), parse_shape(shape)));
  }
  Value param(const std::string& name, const std::string& dtype, const Dims& shape) {
    return made(b().param(name, parse_dtype(dtype), parse_shape(shape)));
  }
  Value constant(py::handle values, const std::string& dtype) {
    ArrayArg arg;
    const ir::DType dt = parse_dtype(dtype);
    prepare_array(values, dt, "constant", &arg);
    const auto* bytes = static_cast<const uint8_t*>(arg.view.data);
    return made(b().constant(dt, ir::Shape::of(arg.shape),
                             std::vector<uint8_t>(bytes, bytes + arg.view.num_bytes())));
  }
  Value activation(const std::string& kind, const Value& x) {
    return made(b().activation(parse_kind<ir::ActKind>(kind, "activation"), id(x)));
  }
  Value binary(const std::string& kind, const Value& a, const Value& c) {
    return made(b().binary(parse_kind<ir::BinaryKind>(kind, "binary op"), id(a), id(c)));
  }
  Value matmul(const Value& a, const Value& c, bool transpose_a, bool transpose_b) {
    return made(b().matmul(id(a), id(c), transpose_a, transpose_b));
  }
  Value linear(const Value& x, const Value& w, const std::optional<Value>& bias, const std::string& act) {
    std::optional<ir::ValueId> bias_id;
    if (bias) bias_id = id(*bias);
    return made(b().linear(id(x), id(w), bias_id, parse_kind<ir::ActKind>(act, "activation")));
  }
  Value softmax(const Value& x, int64_t axis) { return made(b().softmax(id(x), axis)); }
  Value reduce(const std::string& kind, const Value& x, std::vector<int64_t> axes, bool keep_dims) {
    return made(b().reduce(parse_kind<ir::ReduceKind>(kind, "reduction"), id(x), std::move(axes), keep_dims));
  }
  Value rms_norm(const Value& x, const Value& gamma, double eps) { return made(b().rms_norm(id(x), id(gamma), eps)); }
  Value reshape(const Value& x, const Dims& shape) {
    return made(b().reshape(id(x), parse_shape(shape)));
  }
  Value transpose(const Value& x, std::vector<int64_t> perm) { return made(b().transpose(id(x), std::move(perm))); }
  Value cast(const Value& x, const std::string& dtype) { return made(b().cast(id(x), parse_dtype(dtype))); }
  void output(const Value& v, const std::string& name) {
    b().output(id(v), name);
    raise_if_failed();
  }
  ir::Graph build() {
    ir::GraphBuilder& builder = b();
    state_->built = true;
    return unwrap(builder.build());
  }

 private:
  ir::GraphBuilder& b() {
    if (state_->built) throw ErrorException(Error::invalid_argument("this GraphBuilder has already built its graph"));
    raise_if_failed();
    return state_->builder;
  }
  void raise_if_failed() const {
    if (const auto& e = state_->builder.error()) throw ErrorException(*e);
  }
  ir::ValueId id(const Value& v) const {
    if (v.state != state_) throw ErrorException(Error::invalid_argument("a Value of another GraphBuilder was passed"));
    return v.id;
  }
  Value made(ir::ValueId v) {
    raise_if_failed();
    return Value{state_, v};
  }
  std::shared_ptr<BuilderState> state_;
};

// Value operators: `op` adds a node combining two values of the same builder.
template <typename Op>
Value combine(const Value& a, const Value& c, Op op) {
  if (a.state != c.state) throw ErrorException(Error::invalid_argument("a Value of another GraphBuilder was passed"));
  if (a.state->built) throw ErrorException(Error::invalid_argument("this GraphBuilder has already built its graph"));
  ir::GraphBuilder& b = a.state->builder;
  if (const auto& e = b.error()) throw ErrorException(*e);
  const ir::ValueId v = op(b, a.id, c.id);
  if (const auto& e = b.error()) throw ErrorException(*e);
  return Value{a.state, v};
}

Value value_binary(const Value& a, const Value& c, ir::BinaryKind k) {
  return combine(a, c, [k](ir::GraphBuilder& b, ir::ValueId x, ir::ValueId y) { return b.binary(k, x, y); });
}

}  // namespace

void bind_builder(py::module_& m) {
  py::class_<Value>(m, "Value", "A value of a graph being built by a GraphBuilder (+, -, *, / and @ build ops).")
      .def_property_readonly("dtype",
                             [](const Value& v) { return std::string(ir::dtype_name(v.state->builder.type(v.id).dtype)); })
      .def_property_readonly("shape", [](const Value& v) { return shape_tuple(v.state->builder.type(v.id).shape); })
      .def("__add__", [](const Value& a, const Value& c) { return value_binary(a, c, ir::BinaryKind::Add); })
      .def("__sub__", [](const Value& a, const Value& c) { return value_binary(a, c, ir::BinaryKind::Sub); })
      .def("__mul__", [](const Value& a, const Value& c) { return value_binary(a, c, ir::BinaryKind::Mul); })
      .def("__truediv__", [](const Value& a, const Value& c) { return value_binary(a, c, ir::BinaryKind::Div); })
      .def("__matmul__",
           [](const Value& a, const Value& c) {
             return combine(a, c, [](ir::GraphBuilder& b, ir::ValueId x, ir::ValueId y) { return b.matmul(x, y); });
           })
      .def("__repr__", [](const Value& v) {
        return "<rlx.Value %" + std::to_string(v.id) + " " + v.state->builder.type(v.id).to_string() + ">";
      });

  py::class_<PyGraphBuilder>(m, "GraphBuilder", "Builds a Graph op by op; build() returns it, verified.")
      .def(py::init<>())
      .def("input", &PyGraphBuilder::input, py::arg("name"), py::arg("dtype"), py::arg("shape"),
           "A graph input; shape: ints and symbol names (\"SEQ\").")
      .def("param", &PyGraphBuilder::param, py::arg("name"), py::arg("dtype"), py::arg("shape"), "A weight (set_param).")
      .def("constant", &PyGraphBuilder::constant, py::arg("values"), py::arg("dtype") = "f32",
           "A constant tensor with the array's shape.")
      .def("activation", &PyGraphBuilder::activation, py::arg("kind"), py::arg("x"),
           "silu, gelu, gelu_tanh, relu, sigmoid, tanh, exp, log, sqrt, rsqrt, neg, abs, sin, cos, identity.")
      .def("binary", &PyGraphBuilder::binary, py::arg("kind"), py::arg("a"), py::arg("b"),
           "add, sub, mul, div, max, min, pow (NumPy broadcasting).")
      .def("matmul", &PyGraphBuilder::matmul, py::arg("a"), py::arg("b"), py::arg("transpose_a") = false,
           py::arg("transpose_b") = false)
      .def("linear", &PyGraphBuilder::linear, py::arg("x"), py::arg("w"), py::arg("bias") = std::nullopt,
           py::arg("act") = "identity", "x @ w.T (+ bias), then the activation; w is [out, in].")
      .def("softmax", &PyGraphBuilder::softmax, py::arg("x"), py::arg("axis") = -1)
      .def("reduce", &PyGraphBuilder::reduce, py::arg("kind"), py::arg("x"), py::arg("axes"),
           py::arg("keep_dims") = false, "sum, mean, max, min over `axes`.")
      .def("rms_norm", &PyGraphBuilder::rms_norm, py::arg("x"), py::arg("gamma"), py::arg("eps") = 1e-5)
      .def("reshape", &PyGraphBuilder::reshape, py::arg("x"), py::arg("shape"))
      .def("transpose", &PyGraphBuilder::transpose, py::arg("x"), py::arg("perm"))
      .def("cast", &PyGraphBuilder::cast, py::arg("x"), py::arg("dtype"))
      .def("output", &PyGraphBuilder::output, py::arg("value"), py::arg("name") = "", "Marks a graph output.")
      .def("build", &PyGraphBuilder::build, "The graph, verified; the builder cannot be used afterwards.");
}

}  // namespace rlx::python
