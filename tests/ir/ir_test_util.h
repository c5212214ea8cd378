// Helpers shared by the IR unit tests: terse tensor types ("f32[SEQ, 64]"), a
// structural graph comparison, a graph that holds every op kind, and golden files.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include "rlx/ir/builder.h"
#include "rlx/ir/custom_op.h"
#include "rlx/ir/graph.h"
#include "rlx/ir/module.h"

namespace rlx::ir::testing {

/// "f32[SEQ, 2*SEQ, 64]" -> TensorType, built with parse_dtype/parse_dim only (so
/// inference tests do not depend on the IR text parser). Asserts on malformed text.
inline TensorType ty(std::string_view text) {
  const size_t open = text.find('[');
  EXPECT_NE(open, std::string_view::npos) << text;
  auto dt = parse_dtype(text.substr(0, open));
  EXPECT_TRUE(dt.has_value()) << text;
  std::vector<Dim> dims;
  std::string_view rest = text.substr(open + 1, text.size() - open - 2);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view part = rest.substr(0, comma);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    auto d = parse_dim(part);
    EXPECT_TRUE(d.has_value()) << "dim '" << part << "' in " << text;
    dims.push_back(d.value_or(Dim(0)));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return TensorType{dt.value_or(DType::F32), Shape(std::move(dims))};
}

/// Registers the custom op used by the tests: "test.same" returns its first input's type.
inline void register_test_custom_op() {
  CustomOpDef def;
  def.name = "test.same";
  def.min_inputs = 1;
  def.max_inputs = 2;
  def.infer = [](const std::vector<TensorType>& in, const std::string& config) -> Expected<TensorType> {
    if (config == "fail") return Error::verify("test.same: config says fail");
    return in[0];
  };
  register_custom_op(std::move(def));
}

/// Field-by-field equality of two graphs (ops, types, inputs, attrs, labels, outputs).
inline void expect_graphs_equal(const Graph& a, const Graph& b) {
  ASSERT_EQ(a.size(), b.size());
  for (ValueId v = 0; v < a.size(); ++v) {
    const Node& x = a.node(v);
    const Node& y = b.node(v);
    EXPECT_EQ(x.op, y.op) << "%" << v;
    EXPECT_EQ(x.dtype, y.dtype) << "%" << v;
    EXPECT_EQ(x.shape, y.shape) << "%" << v << " " << x.shape.to_string() << " vs " << y.shape.to_string();
    EXPECT_EQ(x.inputs, y.inputs) << "%" << v;
    EXPECT_TRUE(attrs_equal(x.attrs, y.attrs)) << "%" << v << " (" << op_name(x.op) << ")";
    EXPECT_EQ(x.label, y.label) << "%" << v;
  }
  ASSERT_EQ(a.outputs().size(), b.outputs().size());
  for (size_t i = 0; i < a.outputs().size(); ++i) {
    EXPECT_EQ(a.outputs()[i].value, b.outputs()[i].value);
    EXPECT_EQ(a.outputs()[i].name, b.outputs()[i].name);
  }
}

/// A verified graph with at least one node of every OpKind (HIR included), labels on
/// some nodes and symbolic dims. Tests assert the coverage, so a new op kind must be
/// added here.
inline Graph all_ops_graph() {
  register_test_custom_op();
  GraphBuilder b;
  const Dim seq = Dim::symbol(SEQ);
  auto x = b.input("x", DType::F32, {seq, 64});
  auto pos = b.input("pos", DType::I32, {seq});
  auto start = b.input("start", DType::I32, {1});
  auto row = b.input("row", DType::F32, {1, 64});
  auto w = b.param("w", DType::F32, {128, 64});
  auto bias = b.param("b", DType::F32, {128});
  auto gamma = b.param("gamma", DType::F32, {64});
  auto qw = b.param("qw", DType::Q8_0, {128, 64});
  auto sq = b.param("sq", DType::F32, {64, 64});
  auto wd = b.param("wd", DType::F32, {64, 128});
  auto kv = b.handle("kv", DType::F32, {16, 64});
  auto c = b.constant_f32({2}, {1.0f, 2.5f});
  auto c16 = b.constant(DType::F16, {2}, {0x00, 0x3c, 0x01, 0x7c});  // 1.0, a signalling NaN
  auto act = b.label("blk.0.act").activation(ActKind::Silu, x);
  auto sum = b.add(act, x);
  auto cmp = b.compare(CompareKind::Lt, x, sum);
  auto sel = b.where(cmp, x, sum);
  auto half = b.cast(sel, DType::F16);
  auto mm = b.matmul(x, w, false, true);
  auto dq = b.dequant_matmul(x, qw);
  auto red = b.reduce(ReduceKind::Mean, mm, {-1}, true);
  auto sm = b.softmax(dq, -1);
  auto cs = b.cumsum(sm, 1, true);
  auto tk = b.topk(cs, 4, false);
  auto sampling = b.input("sampling", DType::F32, {seq, 5});
  auto smp = b.sample(cs, sampling);
  auto ln = b.layer_norm(x, gamma, gamma, 1e-6);
  auto rn = b.rms_norm(ln, gamma, 1e-5);
  RopeAttrs rope;
  rope.head_dim = 32;
  rope.n_rot = 32;
  rope.layout = RopeLayout::Neox;
  rope.theta = 1e6;
  rope.scaling = RopeScaling::Llama3;
  rope.factor = 8;
  auto ro = b.rope(rn, pos, rope);
  AttentionAttrs at;
  at.n_heads = 2;
  at.n_kv_heads = 1;
  at.head_dim = 32;
  at.mask = MaskKind::SlidingWindow;
  at.window = 128;
  at.softcap = 50;
  auto k = b.narrow(ro, 1, 0, 32);
  auto attn = b.label("blk.0.attn").attention(ro, k, k, at, pos);
  auto rs = b.reshape(attn, {Dim::symbol(SEQ, 2), 32});
  auto tr = b.transpose(rs, {1, 0});
  auto cat = b.concat({x, x, attn}, 0);
  auto ex = b.expand(row, {seq, 64});
  auto ga = b.gather(w, pos, 0);
  auto up = b.update_slice(kv, x, start, 0);
  auto fm = b.op(OpKind::FusedMatMulBiasAct, {x, w, bias}, FusedMatMulAttrs{ActKind::Gelu, true, true});
  auto sw = b.op(OpKind::FusedSwiGLU, {x, w, w}, FusedSwiGLUAttrs{true});
  auto frr = b.op(OpKind::FusedResidualRmsNorm, {x, ex, gamma}, NormAttrs{1e-6});
  auto frl = b.op(OpKind::FusedResidualLayerNorm, {x, ex, gamma, gamma}, NormAttrs{1e-5});
  FusedLinearAttrs fla;  // a decode step's k: norm, rope, the rows written into a cache
  fla.norm = fla.rope = fla.cache_write = true;
  fla.rope_attrs.head_dim = 16;
  fla.rope_attrs.n_rot = 16;
  fla.group = 0;
  auto kc = b.handle("kc", DType::F16, {16, 128});
  auto fl = b.op(OpKind::FusedLinear, {x, qw, gamma, pos, kc, start}, fla);
  RegionAttrs region;
  region.steps = {
      {OpKind::Activation, static_cast<uint8_t>(ActKind::Silu), DType::F32, {-1}},
      {OpKind::Binary, static_cast<uint8_t>(BinaryKind::Mul), DType::F32, {0, -2}},
      {OpKind::Compare, static_cast<uint8_t>(CompareKind::Gt), DType::Bool, {1, -3}},
      {OpKind::Where, 0, DType::F32, {2, 1, -1}},
      {OpKind::Cast, 0, DType::F16, {3}},
  };
  auto rg = b.op(OpKind::ElementwiseRegion, {x, row, gamma}, region);
  auto cu = b.op(OpKind::Custom, {x}, CustomAttrs{"test.same", "scale=2; \"quoted\"\n"});
  auto route = b.moe_route(b.narrow(x, 1, 0, 4), MoeRouteAttrs{2, MoeGating::Sigmoid, true});
  auto eg = b.param("eg", DType::Q8_0, {4, 32, 64});
  auto moe = b.moe_ffn(x, route, eg, eg, b.param("ed", DType::F16, {4, 64, 32}), ActKind::GeluTanh);
  // recurrent state (MIR: before the HIR nodes): one sequence of SEQ rows, 4 value heads of 16 over 4 key heads of 16
  auto seqi = b.input("seq", DType::I32, {1, 2});
  auto conv = b.causal_conv1d(b.handle("conv_state", DType::F32, {1, 3, 64}), x, b.param("cw", DType::F32, {64, 4}),
                              seqi, ActKind::Silu);
  auto gb = b.narrow(x, 1, 0, 4);
  auto delta = b.gated_delta_rule(b.handle("ssm_state", DType::F32, {1, 4, 16, 16}), conv, conv, x, gb, gb, seqi,
                                  DeltaRuleAttrs{16, 16, 8, true, 0});
  auto img = b.input("img", DType::F32, {2, 4, 9, 7});
  auto cw = b.param("conv_w", DType::F32, {6, 2, 3, 3});
  auto cb = b.param("conv_b", DType::F32, {6});
  auto cv = b.label("patch").conv(img, cw, cb, ConvAttrs{{2, 1}, {1, 0}, {1, 2}, 2});
  auto cg = b.param("gn_g", DType::F32, {6});
  auto gn = b.group_norm(cv, cg, cg, 3, 1e-5);
  auto ip = b.interpolate(gn, InterpolateAttrs{InterpMode::Bicubic, {7, 5}, false});
  auto ct = b.conv_transpose(ip, b.param("ctw", DType::F32, {6, 2, 2, 2}), std::nullopt,
                             ConvTransposeAttrs{{2, 2}, {0, 1}, {}, {1, 0}, 3});
  auto win = b.window_partition(b.transpose(ip, {0, 2, 3, 1}), 4);  // [2, 7, 5, 6] -> [8, 4, 4, 6]
  auto tok = b.reshape(win, Shape{8, 16, 6});
  auto rp = b.rel_pos_attention(tok, tok, tok, b.param("rel_h", DType::F32, {7, 3}), b.param("rel_w", DType::F32, {7, 3}),
                                RelPosAttentionAttrs{2, 3, 4, 4, 0.0});
  auto unwin = b.window_unpartition(b.reshape(rp, Shape{8, 4, 4, 6}), 4, 7, 5);
  auto hl = b.op(OpKind::HirLinear, {x, w, bias}, FusedMatMulAttrs{ActKind::Relu, true, true});
  auto hs = b.op(OpKind::HirSwiGLUFfn, {x, w, w, wd}, NoAttrs{});
  auto hg = b.op(OpKind::HirGeluFfn, {x, w, w, wd}, GeluFfnAttrs{true, false});
  AttentionBlockAttrs blk;
  blk.attn.n_heads = 2;
  blk.attn.n_kv_heads = 2;
  blk.attn.head_dim = 32;
  blk.rope.n_rot = 16;
  blk.qk_norm = true;
  auto qn = b.param("qn", DType::F32, {32});
  auto ha = b.label("blk.0").op(OpKind::HirAttentionBlock, {x, sq, sq, sq, sq, pos, qn, qn}, blk);
  auto hr = b.op(OpKind::HirRmsNorm, {x, gamma}, NormAttrs{1e-6});
  auto hln = b.op(OpKind::HirLayerNorm, {x, gamma}, NormAttrs{1e-5});
  auto he = b.op(OpKind::HirEmbedding, {w, pos}, NoAttrs{});
  auto ar = b.label("blk.0.all_reduce").all_reduce(mm, 2);
  auto ag = b.all_gather(tk, 4);
  for (ValueId v : {c, c16, half, red, tk, smp, tr, cat, ga, up, fm, sw, frr, frl, rg, cu, hl, hs, hg, ha, hr, hln, he, moe,
                    delta, ct, unwin, fl, ar, ag})
    b.output(v);
  b.output(attn, "attn_out");
  auto g = b.build();
  EXPECT_TRUE(g.has_value()) << (g ? "" : g.error().message());
  return g ? std::move(*g) : Graph{};
}

/// The op kinds present in `g`.
inline std::set<OpKind> kinds_in(const Graph& g) {
  std::set<OpKind> s;
  for (const Node& n : g.nodes()) s.insert(n.op);
  return s;
}

/// Path of a golden file under tests/golden/ir/.
inline std::string golden_path(const std::string& name) {
  return std::string(RLX_SOURCE_DIR) + "/tests/golden/ir/" + name;
}

/// Compares `actual` with the golden file; RLX_UPDATE_GOLDEN=1 rewrites it instead.
inline void expect_golden(const std::string& name, const std::string& actual) {
  const std::string path = golden_path(name);
  if (const char* u = std::getenv("RLX_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path) << actual;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing golden file " << path << " (run with RLX_UPDATE_GOLDEN=1)";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(actual, ss.str()) << "golden " << path << " differs (RLX_UPDATE_GOLDEN=1 rewrites it)";
}

/// A small LIR module using every slot kind, a symbolic dim and unbound symbols.
inline LirModule small_lir() {
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {Dim::symbol(SEQ), 64});
  auto w = b.param("w", DType::Q4_0, {128, 64});
  auto h = b.handle("kv", DType::F32, {16, 64});
  auto c = b.scalar(0.5f);
  auto y = b.dequant_matmul(x, w);
  auto r = b.label("flat").reshape(y, {Dim::symbol(SEQ, 128)});
  auto s = b.mul(r, c);
  b.output(s, "y");
  b.output(h, "kv_out");
  LirModule m;
  m.graph = std::move(b.build()).value();
  BufferPlan& p = m.plan;
  p.alignment = 64;
  p.arena_size = 1024;
  p.unshared_bytes = 2048;
  p.slots = {
      {SlotKind::kArena, 0, 256, kNoValue},   // x
      {SlotKind::kParam, 0, 2304, kNoValue},  // w
      {SlotKind::kHandle, 0, 4096, kNoValue}, // kv
      {SlotKind::kConstant, 0, 4, kNoValue},  // c
      {SlotKind::kArena, 256, 512, kNoValue}, // y
      {SlotKind::kView, 0, 512, y},           // r aliases y
      {SlotKind::kArena, 0, 512, kNoValue},   // s reuses x's bytes
  };
  p.schedule = {x, w, h, c, y, r, s};
  auto entry = [&](const std::string& name, ValueId v, int64_t bytes) {
    return ManifestEntry{name, v, m.graph.node(v).type(), bytes, p.slots[static_cast<size_t>(v)]};
  };
  m.manifest.inputs = {entry("x", x, 256)};
  m.manifest.params = {entry("w", w, 2304)};
  m.manifest.handles = {entry("kv", h, 4096)};
  m.manifest.outputs = {entry("y", s, 512), entry("kv_out", h, 4096)};
  m.dynamic_symbols = {SEQ, intern_symbol("LIR_TEST_SYM")};
  return m;
}

inline void expect_slots_equal(const BufferSlot& a, const BufferSlot& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.size, b.size);
  EXPECT_EQ(a.root, b.root);
}

inline void expect_entries_equal(const std::vector<ManifestEntry>& a, const std::vector<ManifestEntry>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].value, b[i].value);
    EXPECT_EQ(a[i].type, b[i].type);
    EXPECT_EQ(a[i].bytes, b[i].bytes);
    expect_slots_equal(a[i].slot, b[i].slot);
  }
}

/// Every part of two LIR modules equal: graph, plan (alignment, sizes, slots, schedule),
/// manifest and unbound symbols.
inline void expect_lirs_equal(const LirModule& a, const LirModule& b) {
  expect_graphs_equal(a.graph, b.graph);
  EXPECT_EQ(b.plan.alignment, a.plan.alignment);
  EXPECT_EQ(b.plan.arena_size, a.plan.arena_size);
  EXPECT_EQ(b.plan.unshared_bytes, a.plan.unshared_bytes);
  ASSERT_EQ(b.plan.slots.size(), a.plan.slots.size());
  for (size_t i = 0; i < a.plan.slots.size(); ++i) expect_slots_equal(a.plan.slots[i], b.plan.slots[i]);
  EXPECT_EQ(b.plan.schedule, a.plan.schedule);
  expect_entries_equal(a.manifest.inputs, b.manifest.inputs);
  expect_entries_equal(a.manifest.params, b.manifest.params);
  expect_entries_equal(a.manifest.handles, b.manifest.handles);
  expect_entries_equal(a.manifest.outputs, b.manifest.outputs);
  EXPECT_EQ(b.dynamic_symbols, a.dynamic_symbols);
}

}  // namespace rlx::ir::testing
