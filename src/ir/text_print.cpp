// The IR printer: Graph / HIR / MIR / LIR modules to the text form of text.h.
// Attributes are printed generically from each attrs struct's `fields(v)` list, so a
// new op or field prints without touching this file.
#include <cstring>
#include <type_traits>

#include "rlx/base/half.h"
#include "rlx/ir/text.h"
#include "text_internal.h"

namespace rlx::ir {
namespace text_detail {

bool has_decimal_form(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::F64:
    case DType::I8: case DType::U8: case DType::I32: case DType::I64: case DType::Bool:
      return true;
    default:
      return false;
  }
}

std::string format_element(DType t, const uint8_t* p) {
  switch (t) {
    case DType::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return fmt::format("{}", f);
    }
    case DType::F64: {
      double d;
      std::memcpy(&d, p, 8);
      return fmt::format("{}", d);
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return fmt::format("{}", t == DType::F16 ? f16_bits_to_f32(h) : bf16_bits_to_f32(h));
    }
    case DType::I8: return std::to_string(static_cast<int8_t>(p[0]));
    case DType::U8:
    case DType::Bool: return std::to_string(p[0]);
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return std::to_string(v);
    }
    case DType::I64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return std::to_string(v);
    }
    default: return {};
  }
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (u < 0x20 || u >= 0x7f) out += fmt::format("\\x{:02x}", u);
        else out += c;
    }
  }
  return out + "\"";
}

}  // namespace text_detail

namespace {

using text_detail::quote;

std::string hex_bytes(const std::vector<uint8_t>& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s = "0x";
  s.reserve(2 + 2 * bytes.size());
  for (uint8_t b : bytes) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

// Constant data: decimals when every element round-trips bit-exactly, else hex.
std::string format_data(const ConstantData& d, DType dt) {
  if (!d.bytes) return "none";
  const std::vector<uint8_t>& bytes = *d.bytes;
  if (bytes.empty()) return "[]";
  const auto elem = static_cast<size_t>(dtype_info(dt).bytes_per_block);
  if (!text_detail::has_decimal_form(dt) || bytes.size() % elem != 0) return hex_bytes(bytes);
  std::string s = "[";
  uint8_t back[8];
  for (size_t i = 0; i < bytes.size(); i += elem) {
    const std::string e = text_detail::format_element(dt, bytes.data() + i);
    if (!text_detail::parse_element(dt, e, back) || std::memcmp(back, bytes.data() + i, elem) != 0)
      return hex_bytes(bytes);
    if (i) s += ", ";
    s += e;
  }
  return s + "]";
}

std::string region_step_op(const RegionStep& st) {
  std::string s(op_name(st.op));
  auto named = [&](const auto& names) {
    if (st.kind < names.size()) s += "." + std::string(names[st.kind]);
    else s += "." + std::to_string(st.kind);
  };
  if (st.op == OpKind::Activation) named(enum_names(ActKind{}));
  else if (st.op == OpKind::Binary) named(enum_names(BinaryKind{}));
  else if (st.op == OpKind::Compare) named(enum_names(CompareKind{}));
  else if (st.kind != 0) s += "." + std::to_string(st.kind);
  return s;
}

std::string region_arg(int32_t a) {
  if (a < 0) return "i" + std::to_string(-(static_cast<int64_t>(a) + 1));
  return "s" + std::to_string(a);
}

// Text of one attribute value, by field type.
struct ValueFormatter {
  DType dtype;  // the node's dtype (for constant data)

  std::string operator()(const std::string& v) const { return quote(v); }
  std::string operator()(const bool& v) const { return v ? "true" : "false"; }
  std::string operator()(const int64_t& v) const { return std::to_string(v); }
  std::string operator()(const double& v) const { return fmt::format("{}", v); }
  std::string operator()(const DType& v) const { return std::string(dtype_name(v)); }
  std::string operator()(const Dim& v) const { return v.to_string(); }
  std::string operator()(const Shape& v) const { return v.to_string(); }
  std::string operator()(const std::vector<int64_t>& v) const {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  }
  std::string operator()(const std::vector<double>& v) const {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + fmt::format("{}", v[i]);
    return s + "]";
  }
  std::string operator()(const ConstantData& v) const { return format_data(v, dtype); }
  std::string operator()(const std::vector<RegionStep>& steps) const {
    std::string s = "[";
    for (size_t i = 0; i < steps.size(); ++i) {
      const RegionStep& st = steps[i];
      if (i) s += ", ";
      s += region_step_op(st) + "(";
      for (size_t j = 0; j < st.args.size(); ++j) s += (j ? ", " : "") + region_arg(st.args[j]);
      s += ") : " + std::string(dtype_name(st.dtype));
    }
    return s + "]";
  }
  template <typename E>
  std::enable_if_t<std::is_enum_v<E>, std::string> operator()(const E& v) const {
    const auto& names = enum_names(E{});
    const auto i = static_cast<size_t>(v);
    return i < names.size() ? std::string(names[i]) : std::to_string(i);
  }
};

// The pieces of a node's attributes: an optional op suffix (a leading `kind` enum),
// an optional positional name (boundary ops), and `name=value` pairs.
struct AttrText {
  std::string suffix;
  std::string positional;
  std::vector<std::string> pairs;
};

AttrText attr_text(const Node& n) {
  AttrText t;
  ValueFormatter fmt_value{n.dtype};
  const bool boundary = op_info(n.op).category == OpCategory::Boundary && attrs_match(n.op, n.attrs);
  const bool own_attrs = attrs_match(n.op, n.attrs);
  std::visit(
      [&](const auto& a) {
        bool first = true;
        const_cast<std::decay_t<decltype(a)>&>(a).fields([&](const char* name, auto& f) {
          using F = std::decay_t<decltype(f)>;
          const bool is_first = first;
          first = false;
          if constexpr (std::is_enum_v<F>) {
            if (is_first && own_attrs && std::strcmp(name, "kind") == 0) {
              t.suffix = fmt_value(f);
              return;
            }
          }
          if constexpr (std::is_same_v<F, std::string>) {
            if (is_first && boundary && std::strcmp(name, "name") == 0) {
              t.positional = quote(f);
              return;
            }
          }
          // fused_linear: the fields of a prologue / epilogue it does not have are left out
          // (the parser gives them their defaults, which is what such a node holds).
          if constexpr (std::is_same_v<std::decay_t<decltype(a)>, FusedLinearAttrs>) {
            if ((!a.rope && std::strncmp(name, "rope_", 5) == 0) || (!a.norm && std::strcmp(name, "eps") == 0)) return;
          }
          // A param's shard fields only when it is a shard (see ParamAttrs).
          if constexpr (std::is_same_v<std::decay_t<decltype(a)>, ParamAttrs>) {
            if (a.shard_parts == 1 && std::strncmp(name, "shard_", 6) == 0) return;
          }
          t.pairs.push_back(std::string(name) + "=" + fmt_value(f));
        });
      },
      n.attrs);
  return t;
}

std::string value_ref(ValueId v) { return v == kNoValue ? "none" : "%" + std::to_string(v); }

void print_body(const Graph& g, std::string& out) {
  for (ValueId v = 0; v < g.size(); ++v) out += "  " + print_node(g, v) + "\n";
  for (const GraphOutput& o : g.outputs()) out += "  output " + value_ref(o.value) + " " + quote(o.name) + "\n";
}

std::string slot_text(const BufferSlot& s) {
  std::string t = fmt::format("{} offset={} size={}", slot_kind_name(s.kind), s.offset, s.size);
  if (s.root != kNoValue) t += " root=" + value_ref(s.root);
  return t;
}

}  // namespace

std::string_view slot_kind_name(SlotKind k) {
  switch (k) {
    case SlotKind::kArena: return "arena";
    case SlotKind::kView: return "view";
    case SlotKind::kParam: return "param";
    case SlotKind::kHandle: return "handle";
    case SlotKind::kConstant: return "constant";
  }
  return "?";
}

std::string_view fusion_policy_name(FusionPolicy p) {
  return p == FusionPolicy::Fusable ? "fusable" : "direct";
}

std::string print_node(const Graph& g, ValueId v) {
  const Node& n = g.node(v);
  const AttrText a = attr_text(n);
  std::string s = "%" + std::to_string(v) + " = " + std::string(op_name(n.op));
  if (!a.suffix.empty()) s += "." + a.suffix;
  if (!a.positional.empty()) s += " " + a.positional;
  for (size_t i = 0; i < n.inputs.size(); ++i) s += (i ? ", " : " ") + value_ref(n.inputs[i]);
  for (size_t i = 0; i < a.pairs.size(); ++i) s += (i ? ", " : " {") + a.pairs[i];
  if (!a.pairs.empty()) s += "}";
  s += " : " + n.type().to_string();
  if (!n.label.empty()) s += " @" + quote(n.label);
  return s;
}

std::string print(const Graph& g) {
  std::string out = "graph {\n";
  print_body(g, out);
  return out + "}\n";
}

std::string print(const HirModule& m) {
  std::string out = fmt::format("hir policy={} {{\n", fusion_policy_name(m.policy));
  print_body(m.graph, out);
  return out + "}\n";
}

std::string print(const MirModule& m) {
  std::string out = "mir {\n";
  print_body(m.graph, out);
  return out + "}\n";
}

std::string print(const LirModule& m) {
  std::string out = "lir {\n";
  print_body(m.graph, out);
  const BufferPlan& p = m.plan;
  out += fmt::format("  plan align={} arena={} unshared={} {{\n", p.alignment, p.arena_size, p.unshared_bytes);
  for (size_t i = 0; i < p.slots.size(); ++i) out += fmt::format("    %{} {}\n", i, slot_text(p.slots[i]));
  out += "  }\n  schedule [";
  for (size_t i = 0; i < p.schedule.size(); ++i) out += (i ? ", " : "") + value_ref(p.schedule[i]);
  out += "]\n  manifest {\n";
  auto section = [&](const char* title, const std::vector<ManifestEntry>& es) {
    for (const ManifestEntry& e : es)
      out += fmt::format("    {} {} {} : {} bytes={} {}\n", title, quote(e.name), value_ref(e.value),
                         e.type.to_string(), e.bytes, slot_text(e.slot));
  };
  section("input", m.manifest.inputs);
  section("param", m.manifest.params);
  section("handle", m.manifest.handles);
  section("output", m.manifest.outputs);
  out += "  }\n  dynamic [";
  for (size_t i = 0; i < m.dynamic_symbols.size(); ++i) out += (i ? ", " : "") + symbol_name(m.dynamic_symbols[i]);
  return out + "]\n}\n";
}

}  // namespace rlx::ir
