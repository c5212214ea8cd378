// Python's operators for the Jinja renderer (see builtins.h): arithmetic on int / float
// (64-bit ints: a result that does not fit is an error), str and list concatenation and
// repetition, `in`, slicing, and printf-style `str % args`.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "models/jinja/builtins.h"
#include "models/jinja/text.h"

namespace rlx::jinja {

namespace {

const char* op_symbol(BinOp op) {
  switch (op) {
    case BinOp::kAdd: return "+";
    case BinOp::kSub: return "-";
    case BinOp::kMul: return "*";
    case BinOp::kDiv: return "/";
    case BinOp::kFloorDiv: return "//";
    case BinOp::kMod: return "%";
    case BinOp::kPow: return "**";
  }
  return "?";
}

int64_t as_int64(const Value& v) { return v.kind() == Value::Kind::kBool ? int64_t{v.as_bool()} : v.as_int(); }

bool is_intlike(const Value& v) { return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool; }

Error overflow(int64_t x, BinOp op, int64_t y) {
  return Error::invalid_file("integer result of {} {} {} does not fit 64 bits", x, op_symbol(op), y);
}

Expected<Value> int_op(BinOp op, int64_t x, int64_t y) {
  int64_t r = 0;
  switch (op) {
    case BinOp::kAdd:
      if (__builtin_add_overflow(x, y, &r)) return overflow(x, op, y);
      return Value(r);
    case BinOp::kSub:
      if (__builtin_sub_overflow(x, y, &r)) return overflow(x, op, y);
      return Value(r);
    case BinOp::kMul:
      if (__builtin_mul_overflow(x, y, &r)) return overflow(x, op, y);
      return Value(r);
    case BinOp::kDiv:
      if (y == 0) return Error::invalid_file("division by zero");
      return Value(static_cast<double>(x) / static_cast<double>(y));
    case BinOp::kFloorDiv: {
      if (y == 0) return Error::invalid_file("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) return overflow(x, op, y);
      int64_t q = x / y;
      if (x % y != 0 && ((x < 0) != (y < 0))) --q;
      return Value(q);
    }
    case BinOp::kMod: {
      if (y == 0) return Error::invalid_file("integer modulo by zero");
      if (y == -1) return Value(int64_t{0});
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    case BinOp::kPow: {
      if (y < 0) {
        if (x == 0) return Error::invalid_file("0.0 cannot be raised to a negative power");
        return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }
      int64_t result = 1, base = x, e = y;
      while (e > 0) {
        if (e & 1)
          if (__builtin_mul_overflow(result, base, &result)) return overflow(x, op, y);
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) return overflow(x, op, y);
      }
      return Value(result);
    }
  }
  return Error::internal("unknown operator");
}

Expected<Value> float_op(BinOp op, double x, double y) {
  switch (op) {
    case BinOp::kAdd: return Value(x + y);
    case BinOp::kSub: return Value(x - y);
    case BinOp::kMul: return Value(x * y);
    case BinOp::kDiv:
      if (y == 0) return Error::invalid_file("float division by zero");
      return Value(x / y);
    case BinOp::kFloorDiv:
      if (y == 0) return Error::invalid_file("float floor division by zero");
      return Value(std::floor(x / y));
    case BinOp::kMod: {
      if (y == 0) return Error::invalid_file("float modulo");
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    case BinOp::kPow:
      if (x == 0 && y < 0) return Error::invalid_file("0.0 cannot be raised to a negative power");
      if (x < 0 && y != std::floor(y)) return Error::invalid_file("a negative number to a fractional power is complex");
      return Value(std::pow(x, y));
  }
  return Error::internal("unknown operator");
}

// s * n for a string or list.
Expected<Value> repeat(const Value& seq, int64_t n) {
  const size_t max = work_meter().max_bytes;
  if (n <= 0) return seq.is_string() ? Value(std::string()) : make_list({}, list_of(seq).is_tuple);
  const size_t unit = seq.is_string() ? seq.as_string().size() : list_of(seq).items.size();
  if (unit != 0 && (static_cast<uint64_t>(n) > max / unit)) return too_big(max);
  charge(static_cast<int64_t>(unit) * n / 8);
  if (seq.is_string()) {
    std::string out;
    out.reserve(unit * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  std::vector<Value> items;
  items.reserve(unit * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) items.insert(items.end(), list_of(seq).items.begin(), list_of(seq).items.end());
  return make_list(std::move(items), list_of(seq).is_tuple);
}

Error unsupported_operands(BinOp op, const Value& a, const Value& b) {
  return Error::invalid_file("unsupported operand type(s) for {}: '{}' and '{}'", op_symbol(op), type_name(a),
                             type_name(b));
}

}  // namespace

Expected<Value> binary_op(BinOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) return Error::invalid_file("{}", undefined_message(a));
  if (b.is_undefined()) return Error::invalid_file("{}", undefined_message(b));
  if (is_number(a) && is_number(b)) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) return float_op(op, to_double(a), to_double(b));
    return int_op(op, as_int64(a), as_int64(b));
  }
  const size_t max = work_meter().max_bytes;
  switch (op) {
    case BinOp::kAdd:
      if (a.is_string()) {
        if (!b.is_string()) return Error::invalid_file("can only concatenate str (not \"{}\") to str", type_name(b));
        if (a.as_string().size() + b.as_string().size() > max) return too_big(max);
        charge(static_cast<int64_t>((a.as_string().size() + b.as_string().size()) / 64));
        return Value(a.as_string() + b.as_string());
      }
      if (is_sequence_list(a)) {
        const bool tuple = list_of(a).is_tuple;
        if (!is_sequence_list(b) || list_of(b).is_tuple != tuple)
          return Error::invalid_file("can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b),
                                     type_name(a));
        const auto& x = list_of(a).items;
        const auto& y = list_of(b).items;
        if (x.size() + y.size() > max) return too_big(max);
        charge(static_cast<int64_t>((x.size() + y.size()) / 8));
        std::vector<Value> items;
        items.reserve(x.size() + y.size());
        items.insert(items.end(), x.begin(), x.end());
        items.insert(items.end(), y.begin(), y.end());
        return make_list_checked(std::move(items), tuple);
      }
      break;
    case BinOp::kMul: {
      const bool a_seq = a.is_string() || is_sequence_list(a);
      const bool b_seq = b.is_string() || is_sequence_list(b);
      if (a_seq && is_intlike(b)) return repeat(a, as_int64(b));
      if (b_seq && is_intlike(a)) return repeat(b, as_int64(a));
      if (a_seq || b_seq)
        return Error::invalid_file("can't multiply sequence by non-int of type '{}'", type_name(a_seq ? b : a));
      break;
    }
    case BinOp::kMod:
      if (a.is_string()) return percent_format(a.as_string(), b);
      break;
    default: break;
  }
  return unsupported_operands(op, a, b);
}

Expected<Value> unary_op(bool negate, const Value& v) {
  if (v.is_undefined()) return Error::invalid_file("{}", undefined_message(v));
  if (v.kind() == Value::Kind::kFloat) return Value(negate ? -v.as_float() : v.as_float());
  if (is_intlike(v)) {
    const int64_t i = as_int64(v);
    if (!negate) return Value(i);
    if (i == std::numeric_limits<int64_t>::min()) return Error::invalid_file("integer result of -{} does not fit 64 bits", i);
    return Value(-i);
  }
  return Error::invalid_file("bad operand type for unary {}: '{}'", negate ? "-" : "+", type_name(v));
}

Expected<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string())
        return Error::invalid_file("'in <string>' requires string as left operand, not {}", type_name(item));
      TRY(spend_search(container.as_string().size(), item.as_string().size()));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : list_of(container).items) {
        ASSIGN_OR_RETURN(bool eq, equals(v, item));
        if (eq) return true;
      }
      return false;
    case Value::Kind::kDict: {
      TRY(dict_key(item));  // unhashable -> error
      return dict_of(container).find(item) != nullptr;
    }
    default: return Error::invalid_file("argument of type '{}' is not iterable", type_name(container));
  }
}

Expected<bool> compare_op(CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::kEq: return equals(a, b);
    case CmpOp::kNe: {
      ASSIGN_OR_RETURN(bool eq, equals(a, b));
      return !eq;
    }
    case CmpOp::kIn: return contains(b, a);
    case CmpOp::kNotIn: {
      ASSIGN_OR_RETURN(bool in, contains(b, a));
      return !in;
    }
    default: break;
  }
  static constexpr const char* kNames[] = {"==", "!=", "<", "<=", ">", ">="};
  ASSIGN_OR_RETURN(int c, compare(a, b, kNames[static_cast<int>(op)]));
  if (c == 2) return false;  // NaN: unordered
  switch (op) {
    case CmpOp::kLt: return c < 0;
    case CmpOp::kLe: return c <= 0;
    case CmpOp::kGt: return c > 0;
    default: return c >= 0;
  }
}

Expected<Value> slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) return Error::invalid_file("{}", undefined_message(obj));
  if (!obj.is_string() && !is_sequence_list(obj))
    return Error::invalid_file("'{}' object is not subscriptable", type_name(obj));
  auto bound = [](const Value& v, const char* what) -> Expected<std::optional<int64_t>> {
    if (v.is_none()) return std::optional<int64_t>();
    if (!is_intlike(v))
      return Error::invalid_file("slice {} must be an integer or None, not {}", what, type_name(v));
    return std::optional<int64_t>(as_int64(v));
  };
  ASSIGN_OR_RETURN(std::optional<int64_t> b, bound(start, "start"));
  ASSIGN_OR_RETURN(std::optional<int64_t> e, bound(stop, "stop"));
  ASSIGN_OR_RETURN(std::optional<int64_t> s, bound(step, "step"));
  const int64_t st = s.value_or(1);
  if (st == 0) return Error::invalid_file("slice step cannot be zero");
  if (obj.is_string()) TRY(spend(static_cast<int64_t>(obj.as_string().size() / 64)));
  const bool ascii = obj.is_string() && text::is_ascii(obj.as_string());
  std::u32string cps;
  if (obj.is_string() && !ascii) cps = text::decode(obj.as_string());
  const int64_t n = static_cast<int64_t>(obj.is_string() ? (ascii ? obj.as_string().size() : cps.size())
                                                         : list_of(obj).items.size());
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t from = adjust(b, st < 0 ? n - 1 : 0);
  const int64_t to = adjust(e, st < 0 ? -1 : n);
  std::vector<int64_t> picks;
  for (int64_t i = from; st > 0 ? i < to : i > to; i += st) {
    picks.push_back(i);
    if (st > 0 ? i > INT64_MAX - st : i < INT64_MIN - st) break;
  }
  charge(static_cast<int64_t>(picks.size()) / 8);
  if (obj.is_string()) {
    std::string out;
    for (int64_t i : picks) {
      if (ascii) {
        out.push_back(obj.as_string()[static_cast<size_t>(i)]);
      } else {
        text::append_utf8(out, cps[static_cast<size_t>(i)]);
      }
    }
    return Value(std::move(out));
  }
  std::vector<Value> items;
  items.reserve(picks.size());
  for (int64_t i : picks) items.push_back(list_of(obj).items[static_cast<size_t>(i)]);
  return make_list(std::move(items), list_of(obj).is_tuple);
}

Expected<Value> percent_format(const std::string& fmt, const Value& args) {
  // As Python: a tuple gives the arguments; anything else is the one argument, and a
  // dict also serves %(name)s (a dict or a list left unused is no error).
  std::vector<Value> positional;
  const Value* mapping = nullptr;
  bool lenient = false;
  if (is_sequence_list(args) && list_of(args).is_tuple) {
    positional = list_of(args).items;
  } else {
    positional.push_back(args);
    if (args.kind() == Value::Kind::kDict) mapping = &args;
    lenient = args.kind() == Value::Kind::kDict || is_sequence_list(args);
  }
  const size_t max = work_meter().max_bytes;
  std::string out;
  size_t next = 0, i = 0;
  while (i < fmt.size()) {
    const char c = fmt[i];
    if (c != '%') {
      out.push_back(c);
      ++i;
      continue;
    }
    ++i;
    if (i >= fmt.size()) return Error::invalid_file("incomplete format");
    if (fmt[i] == '%') {
      out.push_back('%');
      ++i;
      continue;
    }
    Value arg;
    bool used_mapping = false;  // %(name)s
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos) return Error::invalid_file("incomplete format key");
      if (mapping == nullptr) return Error::invalid_file("format requires a mapping");
      const Value* v = dict_of(*mapping).find(Value(fmt.substr(i + 1, close - i - 1)));
      if (v == nullptr) return Error::invalid_file("format key '{}' not found", fmt.substr(i + 1, close - i - 1));
      arg = *v;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) flags.push_back(fmt[i++]);
    int width = 0, precision = -1;
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) {
      width = width * 10 + (fmt[i++] - '0');
      if (static_cast<size_t>(width) > max || width > 100'000'000) return too_big(max);
    }
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      precision = 0;
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) {
        precision = precision * 10 + (fmt[i++] - '0');
        if (precision > 1000) return Error::invalid_file("format precision too big");
      }
    }
    if (i >= fmt.size()) return Error::invalid_file("incomplete format");
    const char type = fmt[i++];
    if (std::string_view("sra").find(type) == std::string_view::npos && width > 1000)
      return Error::invalid_file("format width {} too big for a number", width);
    if (!used_mapping) {
      if (next >= positional.size()) return Error::invalid_file("not enough arguments for format string");
      arg = positional[next++];
    }
    std::string piece;
    std::string spec = "%" + flags + (width ? std::to_string(width) : "") +
                       (precision >= 0 ? "." + std::to_string(precision) : "");
    char buf[1536];
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        ASSIGN_OR_RETURN(piece, type == 's' ? to_str(arg) : to_repr(arg));
        if (precision >= 0 && static_cast<size_t>(precision) < piece.size()) piece.resize(static_cast<size_t>(precision));
        const size_t len = text::length(piece);
        if (static_cast<size_t>(width) > len) {
          const std::string pad(static_cast<size_t>(width) - len, ' ');
          piece = flags.find('-') != std::string::npos ? piece + pad : pad + piece;
        }
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o':
      case 'c': {
        if (!is_number(arg))
          return Error::invalid_file("%{} format: a number is required, not {}", type, type_name(arg));
        const double d = to_double(arg);
        if (arg.kind() == Value::Kind::kFloat && !(std::fabs(d) < 9.2e18))
          return Error::invalid_file("%{} format: {} does not fit 64 bits", type, text::float_repr(d));
        const auto v = arg.kind() == Value::Kind::kFloat ? static_cast<long long>(d) : static_cast<long long>(as_int64(arg));
        if (type == 'c') {
          if (v < 0 || v > 0x10FFFF) return Error::invalid_file("%c arg not in range(0x110000)");
          text::append_utf8(piece, static_cast<char32_t>(v));
          break;
        }
        const char conv = (type == 'i' || type == 'u') ? 'd' : type;
        spec += std::string("ll") + conv;
        std::snprintf(buf, sizeof buf, spec.c_str(), v);
        piece = buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!is_number(arg))
          return Error::invalid_file("must be real number, not {}", type_name(arg));
        spec += type;
        std::snprintf(buf, sizeof buf, spec.c_str(), to_double(arg));
        piece = buf;
        break;
      }
      default: return Error::invalid_file("unsupported format character '{}'", type);
    }
    out += piece;
    if (out.size() > max) return too_big(max);
  }
  if (!lenient && next < positional.size())
    return Error::invalid_file("not all arguments converted during string formatting");
  charge(static_cast<int64_t>(out.size() / 64));
  return Value(std::move(out));
}

}  // namespace rlx::jinja
