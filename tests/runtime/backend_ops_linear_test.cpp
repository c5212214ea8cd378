// The backend op cases of fused_linear (the decode GEMV's prologue and epilogues as one
// op), run by backend_ops_test.cpp on every backend against the reference; a backend
// without the fused kernel runs its legalized primitive form.
#include "backend_ops_cases.h"

namespace rlx::backend_ops {

void fused_linear_cases(std::vector<OpCase>& cases) {
  const auto attrs = [](bool norm, bool swiglu, bool residual, bool rope, bool cache_write) {
    ir::FusedLinearAttrs a;
    a.norm = norm;
    a.swiglu = swiglu;
    a.residual = residual;
    a.rope = rope;
    if (rope) {
      a.rope_attrs.head_dim = 32;
      a.rope_attrs.n_rot = 32;
      a.rope_attrs.theta = 10000;
    }
    a.cache_write = cache_write;
    return a;
  };
  {  // the SwiGLU of a decode FFN over Q8_0 weights, its RMS norm recomputed
    CaseMaker c(cases, "fused_linear_norm_swiglu_q8_0");
    const ValueId x = c.input("x", DType::F32, {1, 64});
    const ValueId wg = c.param("wg", packed_tensor(DType::Q8_0, 40, 64, c.next_seed()));
    const ValueId wu = c.param("wu", packed_tensor(DType::Q8_0, 40, 64, c.next_seed()));
    c.output(c.b.op(ir::OpKind::FusedLinear, {x, wg, wu, c.param("gamma", DType::F32, {64}, 0.5f, 1.5f)},
                    attrs(true, true, false, false, false)));
    c.tolerance(1e-2);  // x rounded to 8-bit activations for the packed product
    c.finish();
  }
  {  // three rows of f32 weights plus a residual
    CaseMaker c(cases, "fused_linear_residual_f32_rows");
    const ValueId x = c.input("x", DType::F32, {3, 40});
    c.output(c.b.op(ir::OpKind::FusedLinear, {x, c.param("w", DType::F32, {24, 40}), c.input("r", DType::F32, {3, 24})},
                    attrs(false, false, true, false, false)));
    c.finish();
  }
  {  // k of a decode step: norm, product (f16 weights), rope and the f16 cache rows
    CaseMaker c(cases, "fused_linear_norm_rope_cache_write_f16");
    const ValueId x = c.input("x", DType::F32, {2, 64});
    const ValueId cache = c.handle("cache", DType::F16, {6, 64});
    const ValueId written = c.b.op(
        ir::OpKind::FusedLinear,
        {x, c.param("w", DType::F16, {64, 64}), c.param("gamma", DType::F32, {64}, 0.5f, 1.5f),
         c.input("pos", tensor_of<int32_t>(DType::I32, {2}, {7, 8})),
         cache, c.input("start", tensor_of<int32_t>(DType::I32, {1}, {3}))},
        attrs(true, false, false, true, true));
    c.output(c.b.reduce(ir::ReduceKind::Sum, written, {0}));
    c.finish();
  }
  {  // q of a decode step over Q4_K weights: rope, no cache
    CaseMaker c(cases, "fused_linear_rope_q4_k");
    const ValueId x = c.input("x", grid_tensor({1, 256}, c.next_seed()));
    c.output(c.b.op(ir::OpKind::FusedLinear,
                    {x, c.param("w", packed_tensor(DType::Q4_K, 64, 256, c.next_seed())),
                     c.input("pos", tensor_of<int32_t>(DType::I32, {1}, {11}))},
                    attrs(false, false, false, true, false)));
    c.finish();
  }
}

}  // namespace rlx::backend_ops
