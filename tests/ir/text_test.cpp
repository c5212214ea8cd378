// The IR text form: print/parse round trips for every op kind and tier, constant
// data exactness, hand-written input, golden files, parse errors with line/column,
// and random mutations that must yield a graph or an error, never a crash.
#include "rlx/ir/text.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "ir_test_util.h"

namespace rlx::ir {
namespace {

using testing::all_ops_graph;
using testing::expect_golden;
using testing::expect_graphs_equal;
using testing::small_lir;

TEST(TextRoundTrip, EveryOpKind) {
  const Graph g = all_ops_graph();
  const std::set<OpKind> present = testing::kinds_in(g);
  for (int k = 0; k < kNumOpKinds; ++k)
    EXPECT_TRUE(present.count(static_cast<OpKind>(k))) << "all_ops_graph lacks " << op_name(static_cast<OpKind>(k));
  const std::string text = print(g);
  auto parsed = parse_graph(text);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message() << "\n" << text;
  expect_graphs_equal(g, *parsed);
  EXPECT_EQ(print(*parsed), text);
  EXPECT_EQ(fingerprint(*parsed), fingerprint(g));
  expect_golden("all_ops.graph", text);
}

// A weight split for tensor parallelism prints its shard fields (a whole one does not),
// parses back to the same node, and a split that is none is a verifier error.
TEST(TextRoundTrip, ShardedParams) {
  GraphBuilder b;
  const ValueId x = b.input("x", DType::F32, {2, 8});
  const ValueId w = b.param("w", DType::F32, {4, 8});
  const ValueId whole = b.param("g", DType::F32, {8});
  b.output(b.all_reduce(b.mul(b.linear(x, w), b.scalar(1.0f)), 2), "y");
  b.output(whole, "g_out");
  Graph g = std::move(b.build()).value();
  g.mutable_node(w).attrs = ParamAttrs{"w", 0, 2};
  ASSERT_TRUE(verify(g).ok());
  const std::string text = print(g);
  EXPECT_NE(text.find("param \"w\" {shard_axis=0, shard_parts=2}"), std::string::npos) << text;
  EXPECT_EQ(text.find("shard_axis=-1"), std::string::npos) << text;
  auto parsed = parse_graph(text);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message();
  expect_graphs_equal(g, *parsed);
  for (const ParamAttrs& bad : {ParamAttrs{"w", 2, 2}, ParamAttrs{"w", 0, 1}, ParamAttrs{"w", -1, 2}}) {
    g.mutable_node(w).attrs = bad;
    const Status s = verify(g);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message().find("is no split of a rank-2 weight"), std::string::npos) << s.error().message();
  }
}

TEST(TextRoundTrip, EveryOpKindAsMirWhenNoHir) {
  // Drop the HIR nodes (and the outputs that use them): what is left is a MIR graph.
  const Graph all = all_ops_graph();
  Graph g;
  for (const Node& n : all.nodes())
    if (!is_hir_op(n.op)) g.add_unchecked(n);
  for (const GraphOutput& o : all.outputs())
    if (o.value < g.size()) g.add_output(o.value, o.name);
  ASSERT_TRUE(verify(g).ok()) << verify(g).error().message();
  const MirModule m{g};
  const std::string text = print(m);
  EXPECT_EQ(text.rfind("mir {\n", 0), 0u);
  auto parsed = parse_mir(text);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message();
  expect_graphs_equal(g, parsed->graph);
  EXPECT_EQ(print(*parsed), text);
}

TEST(TextRoundTrip, HirKeepsItsPolicy) {
  for (FusionPolicy p : {FusionPolicy::Direct, FusionPolicy::Fusable}) {
    const HirModule m{all_ops_graph(), p};
    const std::string text = print(m);
    EXPECT_EQ(text.substr(0, text.find('\n')), fmt::format("hir policy={} {{", fusion_policy_name(p)));
    auto parsed = parse_hir(text);
    ASSERT_TRUE(parsed.has_value()) << parsed.error().message();
    EXPECT_EQ(parsed->policy, p);
    expect_graphs_equal(m.graph, parsed->graph);
  }
  auto bare = parse_hir("hir {\n %x = input \"x\" : f32[4]\n output %x\n}");
  ASSERT_TRUE(bare.has_value()) << bare.error().message();
  EXPECT_EQ(bare->policy, FusionPolicy::Direct);
}

TEST(TextRoundTrip, LirWithPlanAndManifest) {
  const LirModule m = small_lir();
  const std::string text = print(m);
  expect_golden("small.lir", text);
  auto parsed = parse_lir(text);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message() << "\n" << text;
  testing::expect_lirs_equal(m, *parsed);
  EXPECT_EQ(parsed->plan.alignment, 64);
  EXPECT_EQ(parsed->plan.arena_size, 1024);
  EXPECT_EQ(parsed->plan.unshared_bytes, 2048);
  EXPECT_EQ(parsed->plan.bytes_saved(), 1024);
  EXPECT_EQ(print(*parsed), text);
}

TEST(TextRoundTrip, EmptyLirSections) {
  LirModule m;
  m.graph = parse_graph("%x = input \"x\" : f32[2]\noutput %x").value();
  const std::string text = print(m);
  auto parsed = parse_lir(text);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message();
  EXPECT_TRUE(parsed->plan.slots.empty());
  EXPECT_TRUE(parsed->plan.schedule.empty());
  EXPECT_TRUE(parsed->dynamic_symbols.empty());
  EXPECT_EQ(print(*parsed), text);
}

// ---- constants ----------------------------------------------------------------------

Graph constant_graph(DType dt, Shape shape, std::vector<uint8_t> bytes) {
  GraphBuilder b;
  b.output(b.constant(dt, std::move(shape), std::move(bytes)), "c");
  return std::move(b.build()).value();
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

void expect_constant_round_trip(const Graph& g, const std::string& want_data) {
  const std::string text = print(g);
  EXPECT_NE(text.find("{data=" + want_data + "}"), std::string::npos) << text;
  auto parsed = parse_graph(text);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message();
  const auto& a = g.node(0).attr<ConstantAttrs>().data;
  const auto& b = parsed->node(0).attr<ConstantAttrs>().data;
  ASSERT_TRUE(a.bytes && b.bytes);
  EXPECT_EQ(*a.bytes, *b.bytes) << text;
}

TEST(TextConstants, F32DecimalsAndSpecialValues) {
  expect_constant_round_trip(constant_graph(DType::F32, {3}, bytes_of<float>({1.0f, 2.5f, -0.1f})), "[1, 2.5, -0.1]");
  const float denorm = std::numeric_limits<float>::denorm_min();
  const float inf = std::numeric_limits<float>::infinity();
  expect_constant_round_trip(constant_graph(DType::F32, {4}, bytes_of<float>({-0.0f, inf, -inf, denorm})),
                             "[-0, inf, -inf, 1e-45]");
  // A NaN with a payload has no exact decimal form: the whole constant goes hex.
  const std::vector<uint8_t> nan_payload = {0x01, 0x00, 0xc0, 0x7f, 0x00, 0x00, 0x80, 0x3f};
  expect_constant_round_trip(constant_graph(DType::F32, {2}, nan_payload), "0x0100c07f0000803f");
}

TEST(TextConstants, HalfTypesIntegersBoolF64) {
  // f16: 1.0, -2.0, smallest subnormal, 65504 (max).
  expect_constant_round_trip(constant_graph(DType::F16, {4}, {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0xff, 0x7b}),
                             "[1, -2, 5.9604645e-08, 65504]");
  // bf16: 1.0, 3.0e38-ish (0x7f7f), -0.
  expect_constant_round_trip(constant_graph(DType::BF16, {3}, {0x80, 0x3f, 0x7f, 0x7f, 0x00, 0x80}),
                             "[1, 3.3895314e+38, -0]");
  expect_constant_round_trip(constant_graph(DType::F64, {2}, bytes_of<double>({0.1, 1e-300})), "[0.1, 1e-300]");
  expect_constant_round_trip(constant_graph(DType::I8, {3}, {0x80, 0x7f, 0xff}), "[-128, 127, -1]");
  expect_constant_round_trip(constant_graph(DType::U8, {2}, {0, 255}), "[0, 255]");
  expect_constant_round_trip(constant_graph(DType::I32, {2}, bytes_of<int32_t>({INT32_MIN, 7})), "[-2147483648, 7]");
  expect_constant_round_trip(constant_graph(DType::I64, {1}, bytes_of<int64_t>({INT64_MAX})), "[9223372036854775807]");
  expect_constant_round_trip(constant_graph(DType::Bool, {2}, {1, 0}), "[1, 0]");
  // A bool byte that is neither 0 nor 1 is kept exactly, in hex.
  expect_constant_round_trip(constant_graph(DType::Bool, {2}, {2, 0}), "0x0200");
}

TEST(TextConstants, PackedBytesAreHex) {
  std::vector<uint8_t> block(18);
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<uint8_t>(i * 17);
  const Graph g = constant_graph(DType::Q4_0, {1, 32}, block);
  expect_constant_round_trip(g, "0x00112233445566778899aabbccddeeff1021");
  EXPECT_FALSE(parse_graph("%c = constant {data=0x00} : f32[1]\noutput %c").has_value());
}

TEST(TextConstants, EmptyAndHandWrittenForms) {
  auto g = parse_graph(R"(
    %a = constant {data=[]} : f32[0]
    %b = constant {data=[true, false, 1]} : bool[3]
    %c = constant {data=[1e3, -inf]} : f16[2]
    %d = constant {data=0X00FF} : u8[2]
    output %a
    output %b
    output %c
    output %d)");
  ASSERT_TRUE(g.has_value()) << g.error().message();
  EXPECT_TRUE(g->node(0).attr<ConstantAttrs>().data.bytes->empty());
  EXPECT_EQ(*g->node(1).attr<ConstantAttrs>().data.bytes, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(*g->node(2).attr<ConstantAttrs>().data.bytes, (std::vector<uint8_t>{0xd0, 0x63, 0x00, 0xfc}));
  EXPECT_EQ(*g->node(3).attr<ConstantAttrs>().data.bytes, (std::vector<uint8_t>{0x00, 0xff}));
}

// ---- hand-written text --------------------------------------------------------------

TEST(TextParse, StyleGuideExampleWithoutHeaderOrTypes) {
  auto m = parse_mir(R"(
    %0 = input f32[8, 4096]
    %1 = activation.silu %0
    %2 = binary.mul %1, %0
    output %2)");
  ASSERT_TRUE(m.has_value()) << m.error().message();
  const Graph& g = m->graph;
  ASSERT_EQ(g.size(), 3);
  EXPECT_EQ(g.node(0).attr<InputAttrs>().name, "0");
  EXPECT_EQ(g.node(1).attr<ActivationAttrs>().kind, ActKind::Silu);
  EXPECT_EQ(g.node(2).attr<BinaryAttrs>().kind, BinaryKind::Mul);
  EXPECT_EQ(g.node(2).type(), (TensorType{DType::F32, Shape{8, 4096}}));
  EXPECT_EQ(g.outputs()[0].name, "out0");
}

TEST(TextParse, FreeFormNamesCommentsDefaultsAndLabels) {
  auto m = parse_mir(R"(mir {   # a comment after the header
  // a full-line comment
  %x      = input "tokens" : f32[BATCH*SEQ, 64]   # trailing comment
  %w.up   = param "w"      : f32[128, 64]
  %h      = fused_matmul_bias_act %x, %w.up {act=silu} : f32[BATCH*SEQ, 128] @"blk.0.ffn"
  %sum    = reduce.max %h {axes=[-1]}
  %r      = reshape %x {shape=[BATCH, SEQ, 64]} @"unflatten \"q\""
  output %sum "m"
  output %r
})");
  ASSERT_TRUE(m.has_value()) << m.error().message();
  const Graph& g = m->graph;
  ASSERT_EQ(g.size(), 5);
  const auto& f = g.node(2).attr<FusedMatMulAttrs>();
  EXPECT_EQ(f.act, ActKind::Silu);
  EXPECT_FALSE(f.has_bias);    // default
  EXPECT_TRUE(f.transpose_b);  // default
  EXPECT_EQ(g.node(2).label, "blk.0.ffn");
  EXPECT_EQ(g.node(2).inputs, (std::vector<ValueId>{0, 1}));
  EXPECT_EQ(g.node(3).shape.to_string(), "[BATCH*SEQ]");
  EXPECT_EQ(g.node(4).label, "unflatten \"q\"");
  EXPECT_EQ(g.outputs()[0].name, "m");
  EXPECT_EQ(g.outputs()[1].name, "out1");
  EXPECT_EQ(print_node(g, 2),
            "%2 = fused_matmul_bias_act %0, %1 {act=silu, has_bias=false, transpose_b=true} : f32[BATCH*SEQ, 128] "
            "@\"blk.0.ffn\"");
}

TEST(TextParse, NewSymbolsAreInterned) {
  auto g = parse_graph("%x = input \"x\" : f32[TEXT_TEST_TOKENS, 3*TEXT_TEST_TOKENS]\noutput %x");
  ASSERT_TRUE(g.has_value()) << g.error().message();
  const SymbolId s = intern_symbol("TEXT_TEST_TOKENS");
  EXPECT_EQ(g->node(0).shape, (Shape{Dim::symbol(s), Dim::symbol(s, 3)}));
}

TEST(TextParse, StringsAndDoublesRoundTripExactly) {
  testing::register_test_custom_op();
  GraphBuilder b;
  auto x = b.input("in \"quoted\" \\ \t\n\x01\xc3\xa9", DType::F32, {4});
  auto n = b.label("caf\xc3\xa9\r").rms_norm(x, b.param("g", DType::F32, {4}), 4.9406564584124654e-324);
  auto r = b.op(OpKind::Custom, {n}, CustomAttrs{"test.same", std::string("nul\0byte", 8)});
  b.output(r, "\"y\"");
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << g.error().message();
  const std::string text = print(*g);
  EXPECT_NE(text.find("\\x01\\xc3\\xa9"), std::string::npos) << text;
  EXPECT_NE(text.find("{eps=5e-324}"), std::string::npos) << text;
  auto parsed = parse_graph(text);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message() << "\n" << text;
  expect_graphs_equal(*g, *parsed);
}

TEST(TextParse, RegionStepsPrintReadably) {
  const Graph g = all_ops_graph();
  const std::string text = print(g);
  EXPECT_NE(text.find("{steps=[activation.silu(i0) : f32, binary.mul(s0, i1) : f32, compare.gt(s1, i2) : bool, "
                      "where(s2, s1, i0) : f32, cast(s3) : f16]}"),
            std::string::npos)
      << text;
  // Out-of-table kinds keep their number.
  auto h = parse_graph(R"(
    %x = input "x" : f32[4]
    %r = elementwise_region %x {steps=[activation.200(i0) : f32, cast.7(s0) : f16]}
    output %r)");
  ASSERT_TRUE(h.has_value()) << h.error().message();
  const auto& steps = h->node(1).attr<RegionAttrs>().steps;
  EXPECT_EQ(steps[0].kind, 200);
  EXPECT_EQ(steps[1].kind, 7);
  EXPECT_NE(print(*h).find("steps=[activation.200(i0) : f32, cast.7(s0) : f16]"), std::string::npos);
}

TEST(TextParse, WrittenTypeMustMatchInference) {
  auto g = parse_graph(R"(
    %x = input "x" : f32[SEQ, 64]
    %y = activation.relu %x : f32[SEQ, 64]
    %z = cast %y : f16[SEQ, 64]
    output %z)");
  ASSERT_TRUE(g.has_value()) << g.error().message();
  EXPECT_EQ(g->node(2).type(), (TensorType{DType::F16, Shape{Dim::symbol(SEQ), 64}}));
  auto bad_cast = parse_graph("%x = input \"x\" : f32[2]\n%z = cast %x : f16[3]\noutput %z");
  ASSERT_FALSE(bad_cast.has_value());
  EXPECT_EQ(bad_cast.error().message(), "line 2, col 16: %z is written as f16[3] but its inputs give f16[2]");
}

// ---- errors ---------------------------------------------------------------------------

struct ErrorCase {
  std::string line4;
  std::string message;
};

// Each case replaces line 4 of a small MIR module and checks the whole message.
TEST(TextErrors, NameLineColumnAndCause) {
  const std::vector<ErrorCase> cases = {
      {"  %y = matmul %x, %w {transpose_b=true} : f32[SEQ, 129]",
       "line 4, col 43: %y is written as f32[SEQ, 129] but its inputs give f32[SEQ, 128]"},
      {"  %y = matmul %x %w", "line 4, col 18: expected ',' between operands, got '%w'"},
      {"  %y = matmull %x, %w", "line 4, col 8: unknown op 'matmull'"},
      {"  %y = matmul %x, %v", "line 4, col 19: unknown value %v"},
      {"  %y = matmul %x, %w {transpose_c=true}",
       "line 4, col 23: matmul has no attribute 'transpose_c' (it has: transpose_a, transpose_b)"},
      {"  %y = matmul %x, %w",
       "line 4, col 8: %y: node %2 (matmul): matmul inner dims differ: f32[SEQ, 64] vs f32[128, 64]"},
      {"  %y = binary.mull %x, %x", "line 4, col 8: unknown binary kind 'mull' (one of: add, sub, mul, div, max, min, pow)"},
      {"  %y = hir.linear %x, %w", "line 4, col 8: HIR op 'hir.linear' in a MIR module (lower it first)"},
      {"  %y = activation.silu %x {kind=relu}", "line 4, col 28: attribute 'kind' given twice"},
      {"  %y = constant {data=[1, 2]} : q4_0[1, 32]", "line 4, col 23: q4_0 constant data must be hex bytes (0x...)"},
      {"  %y = constant {data=[1, 2]} : f32[3]",
       "line 4, col 8: %y: node %2 (constant): constant f32[3] needs 12 bytes, has 8"},
      {"  %y = constant {data=[1, x]} : f32[2]", "line 4, col 27: 'x' is not a valid f32 value"},
      {"  %y = input \"y\"", "line 4, col 17: expected a type (': f32[SEQ, 64]') for input, got end of line"},
      {"  %y = input \"y : f32[1]", "line 4, col 14: unterminated string"},
      {"  %y = input \"y\" : f32[1] $", "line 4, col 27: unexpected character '$'"},
      {"  %x = input \"x2\" : f32[1]", "line 4, col 3: value %x is already defined"},
      {"  %z = param \"w\" : f32[1]", "line 4, col 3: duplicate param name 'w' (first on line 3)"},
      {"  %y = activation.silu %x : f32[SEQ, 64] @label", "line 4, col 43: expected a quoted label after '@', got 'label'"},
      {"  %y = reduce.sum %x {axes=[1, }", "line 4, col 32: expected an integer, got '}'"},
      {"  %y = reduce.sum %x {axes=[0], keep_dims=yes}", "line 4, col 43: expected true or false, got 'yes'"},
      {"  %y = softmax %x {axis=-1} {axis=0}", "line 4, col 29: unexpected '{' after the end of the statement"},
      {"  %y = input \"y\" : f32[SEQ*SEQ*BATCH]", "line 4, col 24: dim needs more than two symbols or overflows"},
      {"  %y = input \"y\" : f33[4]", "line 4, col 20: expected a type like f32[SEQ, 64], got 'f33'"},
      {"  %y = transpose %x {perm=[0, 0]}", "line 4, col 8: %y: node %2 (transpose): transpose perm is not a permutation"},
      {"  %y = input \"y\" : f32[99999999999999999999]", "line 4, col 24: expected an integer, got '99999999999999999999'"},
      {"  %y = activation.silu %x : f32[SEQ, 64] @\"a\\qb\"", "line 4, col 45: bad escape in string (use \\\", \\\\, \\n, \\t, \\r or \\xHH)"},
      {"  %y % = x", "line 4, col 6: expected a value name after '%'"},
      {"  output %x \"o\" extra", "line 4, col 17: unexpected 'extra' after the end of the statement"},
      {"  output %x \"y\"", "line 5, col 10: duplicate output name 'y'"},
  };
  for (const ErrorCase& c : cases) {
    const std::string text = "mir {\n  %x = input \"x\" : f32[SEQ, 64]\n  %w = param \"w\" : f32[128, 64]\n" + c.line4 +
                             "\n  output %x \"y\"\n}\n";
    auto m = parse_mir(text);
    ASSERT_FALSE(m.has_value()) << c.line4;
    EXPECT_EQ(m.error().code(), ErrorCode::kParse) << c.line4;
    EXPECT_EQ(m.error().message(), c.message) << c.line4;
  }
}

TEST(TextErrors, ModuleLevel) {
  auto expect_error = [](const Expected<MirModule>& m, const std::string& message) {
    ASSERT_FALSE(m.has_value()) << message;
    EXPECT_EQ(m.error().code(), ErrorCode::kParse);
    EXPECT_EQ(m.error().message(), message);
  };
  expect_error(parse_mir("mir {\n  %x = input \"x\" : f32[4]\n}\n"), "line 3, col 1: graph has no outputs");
  expect_error(parse_mir("mir {\n  %x = input \"x\" : f32[4]\n  output %x\n} mir"),
               "line 4, col 3: unexpected 'mir' after the closing '}'");
  expect_error(parse_mir("mir {\n  %x = input \"x\" : f32[4]\n"), "line 3, col 1: expected '}' to close the module, got end of input");
  expect_error(parse_mir("hir policy=direct {\n}"), "line 1, col 1: expected a 'mir' module, got 'hir'");
  expect_error(parse_mir(""), "line 1, col 1: graph has no outputs");
  expect_error(parse_mir("mir [ }"), "line 1, col 5: expected '{' after 'mir', got '['");
  auto hir = parse_hir("hir policy=eager {\n}");
  ASSERT_FALSE(hir.has_value());
  EXPECT_EQ(hir.error().message(), "line 1, col 12: expected a fusion policy (direct or fusable), got 'eager'");
  auto lir = parse_lir("%x = input \"x\" : f32[4]\noutput %x\n");
  ASSERT_FALSE(lir.has_value());
  EXPECT_EQ(lir.error().message(), "line 1, col 1: expected 'lir {', got '%x'");
}

TEST(TextErrors, LirSections) {
  const std::string head = "lir {\n  %a = input \"a\" : f32[4]\n  %b = activation.exp %a\n  output %b\n";
  auto expect_error = [&](const std::string& body, const std::string& message) {
    auto m = parse_lir(head + body + "}\n");
    ASSERT_FALSE(m.has_value()) << body;
    EXPECT_EQ(m.error().message(), message) << body;
  };
  expect_error("  plan align=64 arena=16 unshared=32 {\n    %b arena offset=0 size=16\n  }\n",
               "line 6, col 5: slot for %b out of order (slots list %0, %1, ... in value order)");
  expect_error("  plan align=64 arena=16 unshared=32 {\n    %a stack offset=0\n  }\n",
               "line 6, col 8: expected a slot kind (arena, view, param, handle, constant), got 'stack'");
  expect_error("  plan align=64 arena=16 unshared=32 {\n    %a arena offset=0 length=4\n  }\n",
               "line 6, col 23: unknown slot field 'length' (offset, size, root)");
  expect_error("  plan size=4 {\n  }\n", "line 5, col 8: unknown plan field 'size' (align, arena, unshared)");
  expect_error("  schedule [%a, %c]\n", "line 5, col 17: unknown value %c");
  expect_error("  dynamic [SEQ]\n  dynamic [SEQ]\n", "line 6, col 3: 'dynamic' section given twice");
  expect_error("  manifest {\n    input \"a\" %a : f32[4] size=16 arena\n  }\n",
               "line 6, col 27: expected 'bytes=', got 'size'");
}

// ---- mutations ------------------------------------------------------------------------

// Random edits of valid text must give a verified graph or a parse error naming a
// line, never a crash (run under ASan/UBSan too).
TEST(TextFuzz, MutatedTextGivesGraphOrError) {
  const std::string texts[] = {print(all_ops_graph()), print(small_lir())};
  const std::string alphabet = "%=,:{}[]()*@\"#/\\-.0123456789eaxSEQ_ \n\t\x01\xff";
  std::mt19937 rng(20240611);
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  int parsed = 0, rejected = 0;
  for (int iter = 0; iter < 700; ++iter) {
    const bool lir = iter % 3 == 2;
    std::string t = texts[lir ? 1 : 0];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t p = pick(t.size());
      switch (rng() % 6) {
        case 0: if (!t.empty()) t.erase(p, 1 + pick(8)); break;
        case 1: t.insert(p, 1, alphabet[pick(alphabet.size())]); break;
        case 2: if (!t.empty()) t[p] = alphabet[pick(alphabet.size())]; break;
        case 3: t.resize(p); break;
        case 4: t.insert(pick(t.size()), t.substr(p, 1 + pick(40))); break;
        default: if (!t.empty()) std::swap(t[p], t[pick(t.size())]); break;
      }
    }
    auto check = [&](const auto& r, const Graph* g) {
      if (r.has_value()) {
        ++parsed;
        EXPECT_TRUE(verify(*g, true).ok()) << t;
      } else {
        ++rejected;
        EXPECT_EQ(r.error().code(), ErrorCode::kParse) << t;
        EXPECT_EQ(r.error().message().rfind("line ", 0), 0u) << r.error().message();
      }
    };
    if (lir) {
      auto r = parse_lir(t);
      check(r, r ? &r->graph : nullptr);
    } else {
      auto r = parse_graph(t);
      check(r, r ? &*r : nullptr);
      auto m = parse_mir(t);
      check(m, m ? &m->graph : nullptr);
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace rlx::ir
