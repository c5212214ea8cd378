// CompileProfile: presets, TOML reading (toml++) with key/line-precise errors, TOML
// writing, and the mapping onto CompileOptions.
#include "rlx/compile/profile.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

namespace rlx::compile {
namespace {

std::string where(const std::string& source, const toml::node& n) {
  const auto& b = n.source().begin;
  return b.line ? fmt::format("{}:{}", source, b.line) : source;
}

std::string_view policy_name(ir::FusionPolicy p) { return p == ir::FusionPolicy::Fusable ? "fusable" : "direct"; }

// Reads typed values out of one table, rejecting unknown keys and wrong types.
class Reader {
 public:
  Reader(const std::string& source, const toml::table& t, std::string prefix)
      : source_(source), table_(t), prefix_(std::move(prefix)) {}

  Status check_keys(const std::set<std::string>& allowed) const {
    for (const auto& [k, v] : table_) {
      const std::string key(k.str());
      if (!allowed.count(key))
        return Error::parse("{}: unknown key '{}{}'", where(source_, v), prefix_, key);
    }
    return {};
  }
  Status boolean(const char* key, bool& out) const {
    const toml::node* n = table_.get(key);
    if (!n) return {};
    if (!n->is_boolean()) return Error::parse("{}: '{}{}' must be true or false", where(source_, *n), prefix_, key);
    out = n->as_boolean()->get();
    return {};
  }
  Status opt_boolean(const char* key, std::optional<bool>& out) const {
    if (!table_.get(key)) return {};
    bool v = false;
    TRY(boolean(key, v));
    out = v;
    return {};
  }
  Status opt_int(const char* key, std::optional<int32_t>& out) const {
    const toml::node* n = table_.get(key);
    if (!n) return {};
    if (!n->is_integer() || n->as_integer()->get() < 0 || n->as_integer()->get() > 1 << 20)
      return Error::parse("{}: '{}{}' must be an integer in [0, 1048576]", where(source_, *n), prefix_, key);
    out = static_cast<int32_t>(n->as_integer()->get());
    return {};
  }
  template <class E, class Parse>
  Status choice(const char* key, E& out, Parse parse, const char* allowed) const {
    const toml::node* n = table_.get(key);
    if (!n) return {};
    if (!n->is_string()) return Error::parse("{}: '{}{}' must be a string ({})", where(source_, *n), prefix_, key, allowed);
    auto v = parse(n->as_string()->get());
    if (!v)
      return Error::parse("{}: '{}{}' = \"{}\" is not one of {}", where(source_, *n), prefix_, key,
                          n->as_string()->get(), allowed);
    out = *v;
    return {};
  }
  Expected<const toml::table*> sub(const char* key) const {
    const toml::node* n = table_.get(key);
    if (!n) return static_cast<const toml::table*>(nullptr);
    if (!n->is_table()) return Error::parse("{}: '{}{}' must be a table", where(source_, *n), prefix_, key);
    return n->as_table();
  }

 private:
  const std::string& source_;
  const toml::table& table_;
  std::string prefix_;
};

std::optional<ir::FusionPolicy> parse_policy(std::string_view s) {
  if (s == "direct") return ir::FusionPolicy::Direct;
  if (s == "fusable") return ir::FusionPolicy::Fusable;
  return std::nullopt;
}

Status read_backend(const std::string& source, const toml::table& t, const std::string& name, BackendOverride& o) {
  Reader r(source, t, "backend." + name + ".");
  TRY(r.check_keys({"skip_fusion", "unfuse_regions", "max_region_inputs", "max_region_steps"}));
  TRY(r.opt_boolean("skip_fusion", o.skip_fusion));
  TRY(r.opt_boolean("unfuse_regions", o.unfuse_regions));
  TRY(r.opt_int("max_region_inputs", o.max_region_inputs));
  TRY(r.opt_int("max_region_steps", o.max_region_steps));
  return {};
}

void write_backend(std::ostringstream& s, const char* name, const BackendOverride& o) {
  if (o == BackendOverride{}) return;
  s << "\n[backend." << name << "]\n";
  if (o.skip_fusion) s << "skip_fusion = " << (*o.skip_fusion ? "true" : "false") << "\n";
  if (o.unfuse_regions) s << "unfuse_regions = " << (*o.unfuse_regions ? "true" : "false") << "\n";
  if (o.max_region_inputs) s << "max_region_inputs = " << *o.max_region_inputs << "\n";
  if (o.max_region_steps) s << "max_region_steps = " << *o.max_region_steps << "\n";
}

}  // namespace

std::vector<std::string> CompileProfile::preset_names() {
  return {"llama32_prefill", "llama32_decode", "qwen3_prefill", "qwen3_decode", "qwen35_prefill",
          "qwen35_decode",   "gemma_prefill",  "gemma_decode",  "encoder",      "sam_encoder",
          "sam2_memory_attention", "sam3", "flux2", "llada2_diffusion"};
}

Expected<CompileProfile> CompileProfile::preset(std::string_view name) {
  CompileProfile p;
  p.name = std::string(name);
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  const bool family = name.rfind("llama32_", 0) == 0 || name.rfind("qwen3_", 0) == 0 ||
                      name.rfind("qwen35_", 0) == 0 || name.rfind("gemma_", 0) == 0;
  if (family && ends_with("_prefill")) return p;  // Direct: HIR ops straight to fused MIR
  if (family && ends_with("_decode")) {
    // Fusable: primitives around the in-place KV-cache update, fused by the passes.
    p.fusion.policy = ir::FusionPolicy::Fusable;
    return p;
  }
  if (name == "encoder" || name == "sam_encoder" || name == "sam3" || name == "flux2") return p;
  if (name == "sam2_memory_attention" || name == "llada2_diffusion") {
    p.fusion.skip = true;  // attention shapes the fused kernels do not cover
    return p;
  }
  std::string known;
  for (const std::string& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  return Error::not_found("unknown compile profile preset '{}' (known: {})", name, known);
}

Expected<CompileProfile> CompileProfile::parse(std::string_view text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return Error::parse("{}:{}: {}", source, e.source().begin.line, e.description());
  }
  CompileProfile p;
  Reader top(source, root, "");
  TRY(top.check_keys({"name", "fusion", "passes", "precision", "backend"}));
  if (const toml::node* n = root.get("name")) {
    if (!n->is_string()) return Error::parse("{}: 'name' must be a string", where(source, *n));
    p.name = n->as_string()->get();
  }
  ASSIGN_OR_RETURN(const toml::table* fusion, top.sub("fusion"));
  if (fusion) {
    Reader r(source, *fusion, "fusion.");
    TRY(r.check_keys({"policy", "target", "assert_clean", "skip"}));
    TRY(r.choice("policy", p.fusion.policy, parse_policy, "direct, fusable"));
    TRY(r.choice("target", p.fusion.target, parse_fusion_target, "auto, cpu, cuda"));
    TRY(r.boolean("assert_clean", p.fusion.assert_clean));
    TRY(r.boolean("skip", p.fusion.skip));
  }
  ASSIGN_OR_RETURN(const toml::table* passes, top.sub("passes"));
  if (passes) {
    Reader r(source, *passes, "passes.");
    TRY(r.check_keys({"dce", "constant_folding", "verbose"}));
    TRY(r.boolean("dce", p.passes.dce));
    TRY(r.boolean("constant_folding", p.passes.constant_folding));
    TRY(r.boolean("verbose", p.passes.verbose));
  }
  ASSIGN_OR_RETURN(const toml::table* prec, top.sub("precision"));
  if (prec) {
    Reader r(source, *prec, "precision.");
    TRY(r.check_keys({"compute", "mixed"}));
    TRY(r.choice("compute", p.precision.compute, parse_precision, "f32, f16, bf16"));
    TRY(r.choice("mixed", p.precision.mixed, parse_mixed_precision, "none, auto"));
  }
  ASSIGN_OR_RETURN(const toml::table* backend, top.sub("backend"));
  if (backend) {
    Reader r(source, *backend, "backend.");
    for (const auto& [key, node] : *backend) {
      const std::string name(key.str());
      const bool plain = !name.empty() && name.size() <= 32 &&
                         std::all_of(name.begin(), name.end(), [](char c) {
                           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
                         });
      if (!plain)
        return Error::parse("{}: 'backend.{}' is not a backend name (lower-case letters, digits, '_')",
                            where(source, node), name);
      ASSIGN_OR_RETURN(const toml::table* section, r.sub(name.c_str()));
      TRY(read_backend(source, *section, name, p.backends[name]));
    }
  }
  return p;
}

Expected<CompileProfile> CompileProfile::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Error::not_found("compile profile '{}' cannot be opened", path);
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) return Error::io("reading compile profile '{}' failed", path);
  return parse(s.str(), path);
}

Expected<CompileProfile> CompileProfile::load_or(const std::string& path, const CompileProfile& fallback) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return fallback;
  return load(path);
}

std::string CompileProfile::to_toml() const {
  std::ostringstream s;
  auto b = [](bool v) { return v ? "true" : "false"; };
  s << "name = \"" << name << "\"\n\n[fusion]\npolicy = \"" << policy_name(fusion.policy) << "\"\ntarget = \""
    << to_string(fusion.target) << "\"\nassert_clean = " << b(fusion.assert_clean) << "\nskip = " << b(fusion.skip)
    << "\n\n[passes]\ndce = " << b(passes.dce) << "\nconstant_folding = " << b(passes.constant_folding)
    << "\nverbose = " << b(passes.verbose) << "\n\n[precision]\ncompute = \"" << to_string(precision.compute)
    << "\"\nmixed = \"" << to_string(precision.mixed) << "\"\n";
  for (const auto& [name, o] : backends) write_backend(s, name.c_str(), o);
  return s.str();
}

CompileOptions CompileProfile::to_compile_options(const Target& target) const {
  CompileOptions o;
  o.dce = passes.dce;
  o.constant_folding = passes.constant_folding;
  o.verbose = passes.verbose;
  o.assert_fusion_clean = fusion.assert_clean;
  o.fusion.skip = fusion.skip;
  o.fusion.target = fusion.target;
  const auto it = backends.find(target.name);
  const BackendOverride ov = it == backends.end() ? BackendOverride{} : it->second;
  if (ov.skip_fusion) o.fusion.skip = *ov.skip_fusion;
  if (ov.unfuse_regions) o.fusion.unfuse_regions = *ov.unfuse_regions;
  if (ov.max_region_inputs || ov.max_region_steps) {
    FusionLimits l = effective_fusion_limits(o.fusion, target);
    if (ov.max_region_inputs) l.max_inputs = *ov.max_region_inputs;
    if (ov.max_region_steps) l.max_steps = *ov.max_region_steps;
    o.fusion.limits = l;
  }
  o.precision = precision.compute;
  o.mixed = precision.mixed;
  return o;
}

}  // namespace rlx::compile
