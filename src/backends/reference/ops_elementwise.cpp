// Reference kernels for the elementwise ops: Activation, Binary, Compare, Where, Cast and
// ElementwiseRegion. Each single op is a one-step region; a region evaluates its steps
// per output element in double, rounding every step's result to the step's dtype (so a
// fused chain equals its unfused ops), with numpy broadcasting of the inputs.
#include <cmath>

#include "backends/reference/reference_kernels.h"

namespace rlx::reference_backend {

using ir::OpKind;

double activation(ir::ActKind kind, double x) {
  using ir::ActKind;
  switch (kind) {
    case ActKind::Identity:
      return x;
    case ActKind::Gelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case ActKind::GeluTanh: {
      const double c = std::sqrt(2.0 / M_PI);
      return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
    }
    case ActKind::Silu:
      return x / (1.0 + std::exp(-x));
    case ActKind::Relu:
      return x > 0 ? x : 0.0;
    case ActKind::Sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case ActKind::Tanh:
      return std::tanh(x);
    case ActKind::Exp:
      return std::exp(x);
    case ActKind::Log:
      return std::log(x);
    case ActKind::Sqrt:
      return std::sqrt(x);
    case ActKind::Rsqrt:
      return 1.0 / std::sqrt(x);
    case ActKind::Neg:
      return -x;
    case ActKind::Abs:
      return std::fabs(x);
    case ActKind::Sin:
      return std::sin(x);
    case ActKind::Cos:
      return std::cos(x);
    case ActKind::Softplus:  // as torch: x itself past 20
      return x > 20 ? x : std::log1p(std::exp(x));
  }
  return x;
}

namespace {

double binary(ir::BinaryKind kind, double a, double b) {
  using ir::BinaryKind;
  switch (kind) {
    case BinaryKind::Add:
      return a + b;
    case BinaryKind::Sub:
      return a - b;
    case BinaryKind::Mul:
      return a * b;
    case BinaryKind::Div:
      return a / b;
    case BinaryKind::Max:
      return a > b ? a : b;  // NaN in a: b, as the other backends
    case BinaryKind::Min:
      return a < b ? a : b;
    case BinaryKind::Pow:
      return std::pow(a, b);
  }
  return a;
}

bool compare(ir::CompareKind kind, double a, double b) {
  using ir::CompareKind;
  switch (kind) {
    case CompareKind::Eq:
      return a == b;
    case CompareKind::Ne:
      return a != b;
    case CompareKind::Lt:
      return a < b;
    case CompareKind::Le:
      return a <= b;
    case CompareKind::Gt:
      return a > b;
    case CompareKind::Ge:
      return a >= b;
  }
  return false;
}

double evaluate(const ir::RegionStep& step, const std::vector<double>& args) {
  switch (step.op) {
    case OpKind::Activation:
      return activation(static_cast<ir::ActKind>(step.kind), args[0]);
    case OpKind::Binary:
      return binary(static_cast<ir::BinaryKind>(step.kind), args[0], args[1]);
    case OpKind::Compare:
      return compare(static_cast<ir::CompareKind>(step.kind), args[0], args[1]) ? 1.0 : 0.0;
    case OpKind::Where:
      return args[0] != 0 ? args[1] : args[2];
    default:
      return args[0];  // Cast: the value; storing it in the step's dtype converts it
  }
}

// Evaluates `steps` (args < 0: node input -1-arg; >= 0: an earlier step) for every
// output element and stores the last step's value.
Status run_steps(const RefCall& call, const std::vector<ir::RegionStep>& steps) {
  std::vector<std::vector<double>> inputs;
  for (const RefInput& in : call.in) {
    ASSIGN_OR_RETURN(std::vector<double> values, read_values(in));
    inputs.push_back(std::move(values));
  }
  const std::vector<int64_t>& dims = call.out.dims;
  const int64_t n = element_count(dims);
  std::vector<double> step_values(steps.size()), args;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int64_t> index = unravel(i, dims);
    for (size_t s = 0; s < steps.size(); ++s) {
      args.clear();
      for (int32_t a : steps[s].args) {
        if (a >= 0) {
          args.push_back(step_values[static_cast<size_t>(a)]);
        } else {
          const auto k = static_cast<size_t>(-1 - a);
          args.push_back(inputs[k][static_cast<size_t>(broadcast_flat(index, call.in[k].dims))]);
        }
      }
      step_values[s] = round_to(steps[s].dtype, evaluate(steps[s], args));
    }
    store_element(call.out.dtype, call.out.data, i, step_values.back());
  }
  return {};
}

// The node as a one-step region over all its inputs.
Status run_single(const RefCall& call, OpKind op, uint8_t kind) {
  ir::RegionStep step;
  step.op = op;
  step.kind = kind;
  step.dtype = call.out.dtype;
  for (size_t i = 0; i < call.in.size(); ++i) step.args.push_back(-1 - static_cast<int32_t>(i));
  return run_steps(call, {step});
}

}  // namespace

Status run_activation(const RefCall& call) {
  return run_single(call, OpKind::Activation, static_cast<uint8_t>(call.attr<ir::ActivationAttrs>().kind));
}

Status run_binary(const RefCall& call) {
  return run_single(call, OpKind::Binary, static_cast<uint8_t>(call.attr<ir::BinaryAttrs>().kind));
}

Status run_compare(const RefCall& call) {
  return run_single(call, OpKind::Compare, static_cast<uint8_t>(call.attr<ir::CompareAttrs>().kind));
}

Status run_where(const RefCall& call) { return run_single(call, OpKind::Where, 0); }

Status run_cast(const RefCall& call) { return run_single(call, OpKind::Cast, 0); }

Status run_elementwise_region(const RefCall& call) {
  const auto& steps = call.attr<ir::RegionAttrs>().steps;
  if (steps.empty()) return kernel_error(call, "elementwise_region has no steps");
  return run_steps(call, steps);
}

}  // namespace rlx::reference_backend
