// The backend op cases of the spatial ops (conv, conv_transpose, group_norm, interpolate,
// SAM's windows and rel_pos_attention),
// run by backend_ops_test.cpp on every backend against the reference; their float64
// definitions are checked in spatial_ops_test.cpp.
#include <functional>

#include "backend_ops_cases.h"

namespace rlx::backend_ops {

void spatial_cases(std::vector<OpCase>& cases) {
  using Make = std::function<void(CaseMaker&, ValueId)>;
  auto add = [&](const char* name, std::vector<int64_t> x_dims, const Make& make) {
    CaseMaker c(cases, name);
    make(c, c.input("x", DType::F32, std::move(x_dims), -2, 3));
    c.finish();
  };
  add("conv2d_groups_stride_pad_dilation_bias", {2, 4, 11, 9}, [](CaseMaker& c, ValueId x) {
    c.output(c.b.conv(x, c.param("w", DType::F32, {6, 2, 3, 3}, -0.5f, 0.5f), c.param("b", DType::F32, {6}),
                      ir::ConvAttrs{{2, 1}, {1, 2}, {1, 2}, 2}));
  });
  add("conv1d_even_kernel_pad_and_1x1", {1, 8, 13}, [](CaseMaker& c, ValueId x) {
    c.output(c.b.conv(x, c.param("w", DType::F32, {8, 2, 4}, -0.5f, 0.5f), std::nullopt, ir::ConvAttrs{{}, {2}, {}, 4}));
    c.output(c.b.conv(x, c.param("w1", DType::F32, {3, 8, 1}), c.param("b1", DType::F32, {3}), ir::ConvAttrs{}));
  });
  add("conv_transpose2d_groups_stride_output_padding", {2, 4, 5, 3}, [](CaseMaker& c, ValueId x) {
    c.output(c.b.conv_transpose(x, c.param("w", DType::F32, {4, 3, 3, 2}, -0.5f, 0.5f), c.param("b", DType::F32, {6}),
                                ir::ConvTransposeAttrs{{2, 3}, {1, 0}, {1, 2}, {1, 0}, 2}));
  });
  add("group_norm_affine_and_per_channel", {2, 6, 5, 3}, [](CaseMaker& c, ValueId x) {
    c.output(c.b.group_norm(x, c.param("g", DType::F32, {6}), c.param("b", DType::F32, {6}), 3, 1e-5));
    c.output(c.b.group_norm(x, c.param("g6", DType::F32, {6}), std::nullopt, 6, 1e-6));
  });
  add("interpolate_every_mode", {1, 3, 4, 5}, [](CaseMaker& c, ValueId x) {
    for (auto [mode, align] : {std::pair{ir::InterpMode::Bicubic, false}, {ir::InterpMode::Bicubic, true},
                               {ir::InterpMode::Bilinear, false}, {ir::InterpMode::Bilinear, true},
                               {ir::InterpMode::Nearest, false}})
      c.output(c.b.interpolate(x, ir::InterpolateAttrs{mode, {7, 3}, align}));
  });
  add("sam_windows_and_rel_pos_attention", {2, 5, 7, 12}, [](CaseMaker& c, ValueId x) {
    const ValueId win = c.b.reshape(c.b.window_partition(x, 3), ir::Shape{12, 9, 12});  // 2 x 3 windows per image
    const ValueId q = c.b.narrow(win, 2, 0, ir::Dim(4)), k = c.b.narrow(win, 2, 4, ir::Dim(4));
    const ValueId v = c.b.narrow(win, 2, 8, ir::Dim(4));
    const ValueId o = c.b.rel_pos_attention(q, k, v, c.param("rh", DType::F32, {5, 2}), c.param("rw", DType::F32, {5, 2}),
                                            ir::RelPosAttentionAttrs{2, 2, 3, 3, 0.5});
    c.output(c.b.window_unpartition(c.b.reshape(o, ir::Shape{12, 3, 3, 4}), 3, 5, 7));
  });
}

}  // namespace rlx::backend_ops
