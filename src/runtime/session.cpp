// Session: compile pipeline + backend. Symbolic graphs compile once as a template
// and are specialized with the binding, which also yields the bucket axis of every
// value for set_active_extent.
#include "rlx/runtime/session.h"

#include "rlx/base/env.h"

#include <set>

#include "rlx/compile/memory_plan.h"
#include "rlx/compile/pipeline.h"

namespace rlx {
namespace {

// The bucket symbol: the first symbolic dim of the graph's inputs, in input order.
ir::SymbolId bucket_symbol(const ir::Graph& g) {
  for (ir::ValueId v : g.inputs())
    for (const ir::Dim& d : g.node(v).shape)
      if (!d.is_static()) return d.syms[0];
  return 0;
}

ExtentInfo extent_info(const ir::Graph& tmpl, ir::SymbolId sym, int64_t upper) {
  ExtentInfo e;
  e.symbol = sym;
  e.upper = upper;
  e.axis.assign(static_cast<size_t>(tmpl.size()), -1);
  for (ir::ValueId v = 0; v < tmpl.size(); ++v) {
    int axis = -1;
    bool combined = false;
    const ir::Shape& s = tmpl.node(v).shape;
    for (int64_t i = 0; i < s.rank(); ++i) {
      const ir::Dim& d = s[i];
      const bool has = d.syms[0] == sym || d.syms[1] == sym;
      if (!has) continue;
      if (d == ir::Dim::symbol(sym) && axis < 0) axis = static_cast<int>(i);
      else combined = true;
    }
    e.axis[static_cast<size_t>(v)] = combined ? -2 : axis;
  }
  return e;
}

}  // namespace

Session::Session(Device device, BackendOptions options) : device_(device) {
  auto b = BackendRegistry::global().get(device, options);
  if (b) backend_ = *b;
  else error_ = b.error();
}

Expected<Session> Session::create(Device device, BackendOptions options) {
  Session s(device, options);
  if (!s.ok()) return *s.error_;
  return s;
}

Status Session::status() const {
  if (error_) return *error_;
  return {};
}

Expected<CompiledGraph> Session::compile(const ir::Graph& graph) const { return compile_with(graph, {}); }

Expected<CompiledGraph> Session::compile_hir(const ir::HirModule& hir) const { return compile_hir_with(hir, {}); }

Expected<CompiledGraph> Session::compile_with(const ir::Graph& graph, const compile::CompileOptions& options) const {
  if (!ok()) return *error_;
  compile::CompileOptions o = options;
  o.binding = {};
  if (o.ir_dump_dir.empty()) o.ir_dump_dir = env_config().ir_dump_dir;  // RLX_IR_DUMP
  ASSIGN_OR_RETURN(compile::CompileResult r,
                   compile::compile_mir(ir::MirModule{graph}, o, backend_->supported_ops(), backend_->target()));
  return finish(r.lir, options, std::move(r.fusion), std::move(r.dispatch));
}

Expected<CompiledGraph> Session::compile_hir_with(const ir::HirModule& hir, const compile::CompileOptions& options) const {
  if (!ok()) return *error_;
  compile::CompileOptions o = options;
  o.binding = {};
  if (o.ir_dump_dir.empty()) o.ir_dump_dir = env_config().ir_dump_dir;  // RLX_IR_DUMP
  ASSIGN_OR_RETURN(compile::CompileResult r,
                   compile::compile_hir(hir, o, backend_->supported_ops(), backend_->target()));
  return finish(r.lir, options, std::move(r.fusion), std::move(r.dispatch));
}

Expected<CompiledGraph> Session::compile_lir(const ir::LirModule& lir, const compile::CompileOptions& options) const {
  if (!ok()) return *error_;
  return finish(lir, options, {}, {});
}

Expected<CompiledGraph> Session::finish(const ir::LirModule& lir, const compile::CompileOptions& options,
                                        compile::FusionReport fusion, compile::DispatchReport dispatch) const {
  ExtentInfo extent;
  const ir::LirModule* runnable = &lir;
  ir::LirModule bound;
  if (!lir.dynamic_symbols.empty()) {
    std::string missing;
    for (ir::SymbolId s : lir.dynamic_symbols)
      if (!options.binding.has(s)) missing += (missing.empty() ? "" : ", ") + ir::symbol_name(s);
    if (!missing.empty())
      return Error::invalid_argument("graph has unbound symbols {}: set CompileOptions::binding", missing);
    ASSIGN_OR_RETURN(bound, compile::specialize(lir, options.binding, compile::plan_options(options)));
    runnable = &bound;
    const ir::SymbolId sym = bucket_symbol(lir.graph);
    if (sym != 0 && options.binding.has(sym)) extent = extent_info(lir.graph, sym, options.binding.get(sym));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Executable> exe, backend_->compile_with_extent(*runnable, options, extent));
  return CompiledGraph(device_, std::move(exe), std::move(fusion), std::move(dispatch), extent.symbol, extent.upper);
}

}  // namespace rlx
