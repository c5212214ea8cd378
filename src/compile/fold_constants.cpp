// Constant folding: ops whose inputs are all constants are evaluated at compile time.
// Each dtype is read as what it is (f16/bf16 via their exact f32 value, integers as
// int64 with wrap-around to their width, bool as 0/1); float math runs in double and is
// rounded once to the result dtype; GELU is the exact erf form (gelu_tanh the tanh form).
// Not folded: integer division by zero, float->int casts out of range, huge results.
#include <cmath>
#include <cstring>

#include "emit.h"
#include "rewriter.h"
#include "rlx/compile/passes.h"

namespace rlx::compile {
using namespace ir;

namespace {

struct Tensor {
  DType dt;
  std::vector<int64_t> dims;
  const std::vector<uint8_t>* bytes;
  int64_t elem() const { return dtype_info(dt).bytes_per_block; }
};

bool is_int_like(DType t) { return is_integer(t) || t == DType::Bool; }

int64_t read_int(const Tensor& t, int64_t i) {
  const uint8_t* p = t.bytes->data() + i * t.elem();
  switch (t.dt) {
    case DType::I8: { int8_t x; std::memcpy(&x, p, 1); return x; }
    case DType::U8: case DType::Bool: return *p;
    case DType::I32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case DType::I64: { int64_t x; std::memcpy(&x, p, 8); return x; }
    default: RLX_ASSERT(!"read_int: not an integer dtype");
  }
  return 0;
}

void write_int(DType dt, int64_t v, uint8_t* p) {
  switch (dt) {
    case DType::I8: { auto x = static_cast<int8_t>(v); std::memcpy(p, &x, 1); break; }
    case DType::U8: *p = static_cast<uint8_t>(v); break;
    case DType::Bool: *p = v != 0; break;
    case DType::I32: { auto x = static_cast<int32_t>(static_cast<uint32_t>(v)); std::memcpy(p, &x, 4); break; }
    case DType::I64: std::memcpy(p, &v, 8); break;
    default: RLX_ASSERT(!"write_int: not an integer dtype");
  }
}

// Output-index -> input-element index with numpy broadcasting (right-aligned).
struct Broadcaster {
  std::vector<int64_t> out_dims;
  std::vector<std::vector<int64_t>> strides;  // per input, per output axis (0 when broadcast)
  Broadcaster(const std::vector<int64_t>& out, const std::vector<const Tensor*>& ins) : out_dims(out) {
    const size_t r = out.size();
    for (const Tensor* t : ins) {
      std::vector<int64_t> s(r, 0);
      int64_t stride = 1;
      for (size_t k = 0; k < t->dims.size(); ++k) {
        const size_t in_axis = t->dims.size() - 1 - k, out_axis = r - 1 - k;
        if (t->dims[in_axis] != 1) s[out_axis] = stride;
        stride *= t->dims[in_axis];
      }
      strides.push_back(std::move(s));
    }
  }
  int64_t index(size_t input, int64_t linear) const {
    int64_t off = 0;
    for (size_t a = out_dims.size(); a-- > 0;) {
      const int64_t c = linear % out_dims[a];
      linear /= out_dims[a];
      off += c * strides[input][a];
    }
    return off;
  }
};

double act(ActKind k, double x) {
  switch (k) {
    case ActKind::Identity: return x;
    case ActKind::Gelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case ActKind::GeluTanh: return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case ActKind::Silu: return x / (1.0 + std::exp(-x));
    case ActKind::Relu: return x > 0 ? x : 0.0;
    case ActKind::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case ActKind::Tanh: return std::tanh(x);
    case ActKind::Exp: return std::exp(x);
    case ActKind::Log: return std::log(x);
    case ActKind::Sqrt: return std::sqrt(x);
    case ActKind::Rsqrt: return 1.0 / std::sqrt(x);
    case ActKind::Neg: return -x;
    case ActKind::Abs: return std::fabs(x);
    case ActKind::Sin: return std::sin(x);
    case ActKind::Cos: return std::cos(x);
    case ActKind::Softplus: return x > 20.0 ? x : std::log1p(std::exp(x));
  }
  return x;
}

double binary_f(BinaryKind k, double a, double b) {
  switch (k) {
    case BinaryKind::Add: return a + b;
    case BinaryKind::Sub: return a - b;
    case BinaryKind::Mul: return a * b;
    case BinaryKind::Div: return a / b;
    case BinaryKind::Max: return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    case BinaryKind::Min: return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
    case BinaryKind::Pow: return std::pow(a, b);
  }
  return 0;
}

// Integer binary op with wrap-around (computed in uint64 to avoid signed overflow);
// nullopt for division by zero and negative powers.
std::optional<int64_t> binary_i(BinaryKind k, int64_t a, int64_t b) {
  const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (k) {
    case BinaryKind::Add: return static_cast<int64_t>(ua + ub);
    case BinaryKind::Sub: return static_cast<int64_t>(ua - ub);
    case BinaryKind::Mul: return static_cast<int64_t>(ua * ub);
    case BinaryKind::Div:
      if (b == 0 || (a == INT64_MIN && b == -1)) return std::nullopt;
      return a / b;
    case BinaryKind::Max: return std::max(a, b);
    case BinaryKind::Min: return std::min(a, b);
    case BinaryKind::Pow: {
      if (b < 0) return std::nullopt;
      uint64_t r = 1;
      for (int64_t i = 0; i < b && i < 64; ++i) r *= ua;
      return static_cast<int64_t>(r);
    }
  }
  return std::nullopt;
}

template <class T>
bool compare(CompareKind k, T a, T b) {
  switch (k) {
    case CompareKind::Eq: return a == b;
    case CompareKind::Ne: return a != b;
    case CompareKind::Lt: return a < b;
    case CompareKind::Le: return a <= b;
    case CompareKind::Gt: return a > b;
    case CompareKind::Ge: return a >= b;
  }
  return false;
}

// Element i of input t as double (floats) or exactly as int (ints) — the union used by
// Cast, Where and the arithmetic above.
struct Scalar {
  bool is_int;
  int64_t i;
  double f;
};
Scalar load(const Tensor& t, int64_t idx) {
  if (is_int_like(t.dt)) {
    const int64_t v = read_int(t, idx);
    return {true, v, static_cast<double>(v)};
  }
  return {false, 0, detail::decode_element(t.dt, t.bytes->data(), idx)};
}
bool store(DType dt, const Scalar& s, uint8_t* p) {
  if (is_int_like(dt)) {
    if (s.is_int) {
      write_int(dt, s.i, p);
      return true;
    }
    if (dt == DType::Bool) {
      *p = s.f != 0;
      return true;
    }
    if (!std::isfinite(s.f) || std::fabs(s.f) >= 9.2e18) return false;
    write_int(dt, static_cast<int64_t>(s.f), p);  // truncation toward zero
    return true;
  }
  const auto b = detail::encode_scalar(dt, s.f);
  std::memcpy(p, b.data(), b.size());
  return true;
}

std::optional<std::vector<uint8_t>> evaluate(const Node& n, const std::vector<Tensor>& in) {
  const auto count = n.shape.num_elements();
  if (!count || *count > kMaxFoldElements || is_packed(n.dtype)) return std::nullopt;
  for (const Tensor& t : in)
    if (is_packed(t.dt)) return std::nullopt;
  const std::vector<int64_t> out_dims = n.shape.static_dims();
  const int64_t esz = dtype_info(n.dtype).bytes_per_block;
  std::vector<uint8_t> out(static_cast<size_t>(*count * esz));
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : in) ptrs.push_back(&t);

  switch (n.op) {
    case OpKind::Reshape:
      return *in[0].bytes;
    case OpKind::Expand: {
      Broadcaster bc(out_dims, ptrs);
      for (int64_t i = 0; i < *count; ++i)
        std::memcpy(out.data() + i * esz, in[0].bytes->data() + bc.index(0, i) * esz, static_cast<size_t>(esz));
      return out;
    }
    case OpKind::Narrow:
    case OpKind::Transpose: {
      // Gather each output element from its source coordinate.
      const std::vector<int64_t>& src_dims = in[0].dims;
      std::vector<int64_t> src_strides(src_dims.size(), 1);
      for (size_t a = src_dims.size(); a-- > 1;) src_strides[a - 1] = src_strides[a] * src_dims[a];
      for (int64_t i = 0; i < *count; ++i) {
        int64_t rem = i, src = 0;
        for (size_t a = out_dims.size(); a-- > 0;) {
          const int64_t c = rem % out_dims[a];
          rem /= out_dims[a];
          if (n.op == OpKind::Transpose) {
            src += c * src_strides[static_cast<size_t>(n.attr<TransposeAttrs>().perm[a])];
          } else {
            const auto& na = n.attr<NarrowAttrs>();
            const int64_t axis = na.axis < 0 ? na.axis + static_cast<int64_t>(src_dims.size()) : na.axis;
            src += (c + (static_cast<int64_t>(a) == axis ? na.start : 0)) * src_strides[a];
          }
        }
        std::memcpy(out.data() + i * esz, in[0].bytes->data() + src * esz, static_cast<size_t>(esz));
      }
      return out;
    }
    default: break;
  }

  Broadcaster bc(out_dims, ptrs);
  for (int64_t i = 0; i < *count; ++i) {
    uint8_t* dst = out.data() + i * esz;
    std::vector<Scalar> s;
    for (size_t k = 0; k < in.size(); ++k) s.push_back(load(in[k], bc.index(k, i)));
    Scalar r{false, 0, 0};
    switch (n.op) {
      case OpKind::Activation: r.f = act(n.attr<ActivationAttrs>().kind, s[0].f); break;
      case OpKind::Binary: {
        const BinaryKind k = n.attr<BinaryAttrs>().kind;
        if (s[0].is_int) {
          auto v = binary_i(k, s[0].i, s[1].i);
          if (!v) return std::nullopt;
          r = {true, *v, 0};
        } else {
          r.f = binary_f(k, s[0].f, s[1].f);
        }
        break;
      }
      case OpKind::Compare: {
        const CompareKind k = n.attr<CompareAttrs>().kind;
        r = {true, s[0].is_int ? compare(k, s[0].i, s[1].i) : compare(k, s[0].f, s[1].f), 0};
        break;
      }
      case OpKind::Where: r = s[0].i != 0 ? s[1] : s[2]; break;
      case OpKind::Cast: r = s[0]; break;
      default: return std::nullopt;
    }
    if (!store(n.dtype, r, dst)) return std::nullopt;
  }
  return out;
}

bool foldable(OpKind k) {
  switch (k) {
    case OpKind::Activation: case OpKind::Binary: case OpKind::Compare: case OpKind::Where: case OpKind::Cast:
    case OpKind::Reshape: case OpKind::Expand: case OpKind::Narrow: case OpKind::Transpose: return true;
    default: return false;
  }
}

}  // namespace

MirModule fold_constants(const MirModule& m) {
  const Graph& g = m.graph;
  detail::Rewriter rw(g);
  bool any = false;
  for (ValueId v = 0; v < g.size(); ++v) {
    const Node& n = g.node(v);
    bool all_const = foldable(n.op) && n.shape.is_static();
    std::vector<Tensor> in;
    for (ValueId i : n.inputs) {
      const Node& c = rw.dst().node(rw.map(i));
      if (c.op != OpKind::Constant || !c.shape.is_static() || !c.attr<ConstantAttrs>().data.bytes) {
        all_const = false;
        break;
      }
      in.push_back({c.dtype, c.shape.static_dims(), c.attr<ConstantAttrs>().data.bytes.get()});
    }
    std::optional<std::vector<uint8_t>> data;
    if (all_const) data = evaluate(n, in);
    if (!data) {
      rw.copy(v);
      continue;
    }
    rw.b().label(n.label);
    rw.set(v, rw.b().constant(n.dtype, n.shape, std::move(*data)));
    any = true;
  }
  MirModule out{rw.finish_ok()};
  return any ? eliminate_dead_code(out) : out;
}

}  // namespace rlx::compile
