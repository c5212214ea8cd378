// CUDA kernels of a prompt's many rows against the CPU backend: norms over 64 or more
// rows (the form that reads gamma late, for more rows in flight), rope over many heads (one angle for up to eight heads of a
// row, pass-through dims, a head count that is not a multiple of eight) and elementwise
// regions that take the eight-wide kernel (casts of matmul inputs, silu(gate) * up, a
// residual add over f16) next to shapes that keep the interpreter (a length that is not a
// multiple of eight, a broadcast). Skips without a CUDA device.
#include <gtest/gtest.h>

#include <vector>

#include "cuda_test_util.h"

namespace rlx {
namespace {

using namespace cuda_test;

using ir::ActKind;
using ir::DType;
using ir::GraphBuilder;
using ir::OpKind;

// Row lengths on both sides of the block kernel's two and four elements a thread, the
// longest of eight a thread (2,048) and one past it (2,080: rows re-read from memory).
TEST(CudaPrefillRows, NormsOfManyRows) {
  REQUIRE_CUDA();
  for (int64_t d : {300, 1000, 2048, 2080}) {
    SCOPED_TRACE(testing::Message() << "d=" << d);
    const int64_t rows = 100;
    GraphBuilder b;
    auto x = b.input("x", DType::F32, {rows, d});
    auto r = b.input("r", DType::F32, {rows, d});
    auto g = b.param("g", DType::F32, {d});
    auto be = b.param("be", DType::F32, {d});
    b.output(b.rms_norm(x, g, 1e-5), "rms");
    b.output(b.layer_norm(x, g, be, 1e-5), "ln");
    b.output(b.op(OpKind::FusedResidualRmsNorm, {x, r, g}, ir::NormAttrs{1e-6}), "frms");
    b.output(b.op(OpKind::FusedResidualLayerNorm, {x, r, g, be}, ir::NormAttrs{1e-6}), "fln");
    Case c;
    c.inputs["x"] = f32({rows, d}, 40, -3, 3);
    c.inputs["r"] = f32({rows, d}, 41);
    c.params["g"] = f32({d}, 42);
    c.params["be"] = f32({d}, 43);
    expect_match(b, c, 1e-5);
  }
}

// 13 heads of 64 (a group of eight and one of five), interleaved and neox pairs, a
// partial rotation (dims past n_rot pass through), 70 rows at scattered positions.
TEST(CudaPrefillRows, RopeOfManyHeads) {
  REQUIRE_CUDA();
  const int64_t rows = 70, heads = 13, hd = 64;
  for (bool neox : {false, true}) {
    for (int64_t n_rot : {64, 48}) {
      SCOPED_TRACE(testing::Message() << "neox=" << neox << " n_rot=" << n_rot);
      GraphBuilder b;
      auto x = b.input("x", DType::F32, {rows, heads * hd});
      auto pos = b.input("pos", DType::I32, {rows});
      ir::RopeAttrs ra;
      ra.head_dim = hd;
      ra.n_rot = n_rot;
      if (neox) ra.layout = ir::RopeLayout::Neox;
      b.output(b.rope(x, pos, ra), "y");
      Case c;
      c.inputs["x"] = f32({rows, heads * hd}, 50, -2, 2);
      std::vector<int32_t> pv;
      for (int32_t i = 0; i < rows; ++i) pv.push_back(i * 37 % 4099);
      c.inputs["pos"] = i32({rows}, pv);
      expect_match(b, c, 1e-5);
    }
  }
}

TEST(CudaPrefillRows, RegionsEightWide) {
  REQUIRE_CUDA();
  {  // silu(gate) * up over a prompt's rows, and its f16 cast (a down projection's input)
    GraphBuilder b;
    auto gate = b.input("gate", DType::F32, {64, 1000});
    auto up = b.input("up", DType::F32, {64, 1000});
    auto h = b.mul(b.activation(ActKind::Silu, gate), up);
    b.output(h, "h");
    b.output(b.cast(b.activation(ActKind::Silu, gate), DType::F16), "h16");
    b.output(b.cast(gate, DType::BF16), "g16");
    Case c;
    c.opt.fusion.skip = false;
    c.inputs["gate"] = f32({64, 1000}, 60, -6, 6);
    c.inputs["up"] = f32({64, 1000}, 61);
    expect_match(b, c, 1e-6);
  }
  {  // a residual add over f16 rows, f16 out; gelu then a product
    GraphBuilder b;
    auto x = b.input("x", DType::F16, {32, 256});
    auto y = b.input("y", DType::F16, {32, 256});
    b.output(b.add(x, y), "s");
    b.output(b.mul(b.activation(ActKind::Gelu, x), y), "gg");
    Case c;
    c.opt.fusion.skip = false;
    c.inputs["x"] = random_f16({32, 256}, 62, -2, 2);
    c.inputs["y"] = random_f16({32, 256}, 63);
    expect_match(b, c, 1e-6);
  }
  {  // the interpreter: 7 x 33 elements (not a multiple of eight) and a broadcast row
    GraphBuilder b;
    auto x = b.input("x", DType::F32, {7, 33});
    auto y = b.input("y", DType::F32, {33});
    b.output(b.mul(b.activation(ActKind::Silu, x), x), "a");
    b.output(b.add(x, y), "bc");
    Case c;
    c.opt.fusion.skip = false;
    c.inputs["x"] = f32({7, 33}, 64);
    c.inputs["y"] = f32({33}, 65);
    expect_match(b, c, 1e-6);
  }
}

}  // namespace
}  // namespace rlx
