// CUDA steps of the ops over spatial dims. Conv: per image, im2col into scratch
// (kernels_spatial.cu) then one strided-batched cuBLASLt GEMM over the groups,
// W_g[O/groups, K] . col_g[K, positions], written straight into the NCHW output, then
// the bias per channel; a 1x1 stride-1 unpadded conv multiplies the input itself.
// ConvTranspose: per image one GEMM over the groups, cols = W_g^T . x_g (cuBLASLt
// transposes the stored weight), then a gather kernel (col2im) with the bias.
// GroupNorm and Interpolate are one kernel each (interpolation taps resolved at compile
// and uploaded once), and so are SAM's window copies and rel_pos_attention
// (kernels_window.cu). f32 only, as on the CPU.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <limits>

#include "backends/cuda/cuda_steps_shared.h"
#include "backends/cuda/spatial_kernels.h"
#include "rlx/base/env.h"

namespace rlx::cuda_backend {

using ir::DType;

namespace {

Status require_f32(const BuildCtx& ctx) {
  if (ctx.node().dtype != DType::F32) return step_error(ctx, "computes in f32 only, got {}", ir::dtype_name(ctx.node().dtype));
  for (size_t i = 0; i < ctx.node().inputs.size(); ++i)
    if (ctx.input(i).dtype != DType::F32) return step_error(ctx, "input {} must be f32, got {}", i, ctx.input(i).type().to_string());
  return {};
}

// The spatial ops never run on a restricted extent.
void no_extent(const BuildCtx& ctx, Step& step) {
  bool bucketed = ctx.bucket(ctx.id) != -1;
  for (ir::ValueId v : ctx.node().inputs) bucketed = bucketed || ctx.bucket(v) != -1;
  step.extent_ok = !bucketed;
}

// ---- conv -----------------------------------------------------------------------------

struct ConvStepParams {
  GemmDesc g;            // batch = groups: A = W_g, B = col_g (or x_g), C = y_g
  Im2colParams im;       // pointers filled per run
  int64_t images = 1, c = 1, h = 1, w = 1, o = 1, positions = 1;
  bool direct = false;   // no unfolding: B is the image itself
  bool has_bias = false;
  int64_t col_off = 0;
};

Status conv_fn(const Step& s, const RunCtx& ctx) {
  const ConvStepParams& p = s.p<ConvStepParams>();
  const auto* x = reinterpret_cast<const float*>(s.in_ptr[0]);
  float* y = reinterpret_cast<float*>(s.out_ptr);
  float* col = reinterpret_cast<float*>(ctx.scratch + p.col_off);
  for (int64_t n = 0; n < p.images; ++n) {
    const float* xn = x + n * p.c * p.h * p.w;
    const float* b = xn;
    if (!p.direct) {
      Im2colParams im = p.im;
      im.x = xn;
      im.col = col;
      launch_im2col(im, ctx.stream);
      b = col;
    }
    TRY(run_gemm(s, ctx, 0, p.g, s.in_ptr[1], b, y + n * p.o * p.positions, nullptr));
  }
  if (p.has_bias) {
    ChannelBiasParams k;
    k.y = y;
    k.bias = reinterpret_cast<const float*>(s.in_ptr[2]);
    k.images = p.images;
    k.channels = p.o;
    k.positions = p.positions;
    launch_channel_bias(k, ctx.stream);
  }
  return {};
}

// ---- conv transpose -------------------------------------------------------------------

struct ConvTStepParams {
  GemmDesc g;     // batch = groups: op(A) = W_g^T [og*kh*kw, cg], B = x_g [cg, positions]
  Col2imParams k;  // pointers filled per run
  int64_t images = 1, c = 1, in_pos = 1, o = 1, out_pos = 1;
  int64_t cols_off = 0;
};

Status conv_transpose_fn(const Step& s, const RunCtx& ctx) {
  const ConvTStepParams& p = s.p<ConvTStepParams>();
  const auto* x = reinterpret_cast<const float*>(s.in_ptr[0]);
  float* y = reinterpret_cast<float*>(s.out_ptr);
  float* cols = reinterpret_cast<float*>(ctx.scratch + p.cols_off);
  for (int64_t n = 0; n < p.images; ++n) {
    TRY(run_gemm(s, ctx, 0, p.g, s.in_ptr[1], x + n * p.c * p.in_pos, cols, nullptr));
    Col2imParams k = p.k;
    k.cols = cols;
    k.bias = s.in_ptr.size() > 2 ? reinterpret_cast<const float*>(s.in_ptr[2]) : nullptr;
    k.y = y + n * p.o * p.out_pos;
    launch_col2im(k, ctx.stream);
  }
  return {};
}

// ---- group norm -----------------------------------------------------------------------

Status group_norm_fn(const Step& s, const RunCtx& ctx) {
  GroupNormKParams k = s.p<GroupNormKParams>();
  k.x = reinterpret_cast<const float*>(s.in_ptr[0]);
  k.gamma = reinterpret_cast<const float*>(s.in_ptr[1]);
  k.beta = s.in_ptr.size() > 2 ? reinterpret_cast<const float*>(s.in_ptr[2]) : nullptr;
  k.y = reinterpret_cast<float*>(s.out_ptr);
  launch_group_norm(k, ctx.stream);
  return {};
}

Status window_fn(const Step& s, const RunCtx& ctx) {
  WindowKParams k = s.p<WindowKParams>();
  k.x = reinterpret_cast<const float*>(s.in_ptr[0]);
  k.y = reinterpret_cast<float*>(s.out_ptr);
  launch_window(k, ctx.stream);
  return {};
}

// rel_pos_attention: the flash kernel (small grids), or per chunk of items the head split,
// scores = q kᵀ as one batched cuBLASLt product over (item, head), the bias terms q . table
// as two more (the tables broadcast over the batch), the biased softmax in place, p v as a
// second product, and the merge back into rows.
struct RelPosStepParams {
  RelPosAttnKParams k;
  bool gemm = false;
  GemmDesc scores, values, bias_h, bias_w;  // plans 0 to 3
  int64_t chunk = 1;                        // items per pass (divides the items)
  int64_t qh_off = 0, kh_off = 0, vh_off = 0, s_off = 0, oh_off = 0, bh_off = 0, bw_off = 0;
};

Status rel_pos_attention_fn(const Step& s, const RunCtx& ctx) {
  const RelPosStepParams& p = s.p<RelPosStepParams>();
  RelPosAttnKParams k = p.k;
  k.q = reinterpret_cast<const float*>(s.in_ptr[0]);
  k.k = reinterpret_cast<const float*>(s.in_ptr[1]);
  k.v = reinterpret_cast<const float*>(s.in_ptr[2]);
  k.rel_h = reinterpret_cast<const float*>(s.in_ptr[3]);
  k.rel_w = reinterpret_cast<const float*>(s.in_ptr[4]);
  k.o = reinterpret_cast<float*>(s.out_ptr);
  if (!p.gemm) {
    launch_rel_pos_attention(k, ctx.stream);
    return {};
  }
  const int64_t rows = k.grid_h * k.grid_w * k.n_heads * k.head_dim;  // floats per item
  RelPosGemmKParams g;
  auto* bias_h = reinterpret_cast<float*>(ctx.scratch + p.bh_off);
  auto* bias_w = reinterpret_cast<float*>(ctx.scratch + p.bw_off);
  g.bias_h = bias_h;
  g.bias_w = bias_w;
  g.qh = reinterpret_cast<float*>(ctx.scratch + p.qh_off);
  g.kh = reinterpret_cast<float*>(ctx.scratch + p.kh_off);
  g.vh = reinterpret_cast<float*>(ctx.scratch + p.vh_off);
  g.scores = reinterpret_cast<float*>(ctx.scratch + p.s_off);
  g.oh = reinterpret_cast<float*>(ctx.scratch + p.oh_off);
  g.items = p.chunk;
  g.n_heads = k.n_heads;
  g.head_dim = k.head_dim;
  g.grid_h = k.grid_h;
  g.grid_w = k.grid_w;
  g.scale = k.scale;
  for (int64_t n0 = 0; n0 < k.items; n0 += p.chunk) {
    g.q = k.q + n0 * rows;
    g.k = k.k + n0 * rows;
    g.v = k.v + n0 * rows;
    g.o = k.o + n0 * rows;
    launch_rel_pos_split(g, ctx.stream);
    TRY(run_gemm(s, ctx, 0, p.scores, g.qh, g.kh, g.scores, nullptr));
    TRY(run_gemm(s, ctx, 2, p.bias_h, g.qh, k.rel_h, bias_h, nullptr));
    TRY(run_gemm(s, ctx, 3, p.bias_w, g.qh, k.rel_w, bias_w, nullptr));
    launch_rel_pos_softmax(g, ctx.stream);
    TRY(run_gemm(s, ctx, 1, p.values, g.scores, g.vh, g.oh, nullptr));
    launch_rel_pos_merge(g, ctx.stream);
  }
  return {};
}

// ---- interpolate ----------------------------------------------------------------------

struct InterpStepParams {
  InterpolateKParams k;
  std::shared_ptr<DeviceBuffer> taps;  // ty_index, tx_index (int64), ty_weight, tx_weight (f32)
};

Status interpolate_fn(const Step& s, const RunCtx& ctx) {
  InterpolateKParams k = s.p<InterpStepParams>().k;
  k.x = reinterpret_cast<const float*>(s.in_ptr[0]);
  k.y = reinterpret_cast<float*>(s.out_ptr);
  launch_interpolate(k, ctx.stream);
  return {};
}

// Keys' cubic convolution weight (a = -0.75) of distance t.
float cubic_weight(double t) {
  constexpr double a = -0.75;
  t = std::fabs(t);
  if (t <= 1) return static_cast<float>(((a + 2) * t - (a + 3)) * t * t + 1);
  if (t < 2) return static_cast<float>(((a * t - 5 * a) * t + 8 * a) * t - 4 * a);
  return 0.0f;
}

// Taps of every output index along one dim (InterpolateAttrs' definition).
void axis_taps(ir::InterpMode mode, int64_t in, int64_t out, bool align, int n, std::vector<int64_t>& index,
               std::vector<float>& weight) {
  index.assign(static_cast<size_t>(out * n), 0);
  weight.assign(static_cast<size_t>(out * n), 0.0f);
  auto clamp = [&](int64_t j) { return std::clamp<int64_t>(j, 0, in - 1); };
  for (int64_t i = 0; i < out; ++i) {
    const auto at = static_cast<size_t>(i * n);
    if (mode == ir::InterpMode::Nearest) {
      index[at] = std::min(static_cast<int64_t>(std::floor(static_cast<double>(i) * static_cast<double>(in) / static_cast<double>(out))), in - 1);
      weight[at] = 1.0f;
      continue;
    }
    double src = align ? (out > 1 ? static_cast<double>(i) * static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0)
                       : (static_cast<double>(i) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5;
    if (mode == ir::InterpMode::Bilinear && !align && src < 0) src = 0;
    const auto j = static_cast<int64_t>(std::floor(src));
    const double f = src - static_cast<double>(j);
    if (mode == ir::InterpMode::Bilinear) {
      index[at] = clamp(j);
      index[at + 1] = clamp(j + 1);
      weight[at] = static_cast<float>(1 - f);
      weight[at + 1] = static_cast<float>(f);
    } else {
      for (int t = 0; t < 4; ++t) {
        index[at + static_cast<size_t>(t)] = clamp(j + t - 1);
        weight[at + static_cast<size_t>(t)] = cubic_weight(f - (t - 1));
      }
    }
  }
}

}  // namespace

Status build_conv(BuildCtx& ctx, Step& step) {
  TRY(require_f32(ctx));
  const ir::Node& n = ctx.node();
  const auto& a = n.attr<ir::ConvAttrs>();
  const auto xd = ctx.input(0).shape.static_dims(), wd = ctx.input(1).shape.static_dims(), yd = n.shape.static_dims();
  const bool two_d = xd.size() == 4;
  auto pick = [&](const std::vector<int64_t>& v, bool h_dim, int64_t fallback) {
    if (v.empty() || (h_dim && !two_d)) return fallback;
    return h_dim ? v[0] : v.back();
  };
  auto p = std::make_shared<ConvStepParams>();
  Im2colParams& im = p->im;
  p->images = xd[0];
  p->c = xd[1];
  p->h = two_d ? xd[2] : 1;
  p->w = xd.back();
  p->o = wd[0];
  im.groups = a.groups;
  im.cg = wd[1];
  im.h = p->h;
  im.w = p->w;
  im.kh = two_d ? wd[2] : 1;
  im.kw = wd.back();
  im.oh = two_d ? yd[2] : 1;
  im.ow = yd.back();
  im.sh = pick(a.stride, true, 1);
  im.sw = pick(a.stride, false, 1);
  im.ph = pick(a.padding, true, 0);
  im.pw = pick(a.padding, false, 0);
  im.dh = pick(a.dilation, true, 1);
  im.dw = pick(a.dilation, false, 1);
  p->positions = im.oh * im.ow;
  const int64_t kdim = im.cg * im.kh * im.kw, og = p->o / a.groups;
  p->direct = im.kh == 1 && im.kw == 1 && im.sh == 1 && im.sw == 1 && im.ph == 0 && im.pw == 0;
  p->has_bias = n.inputs.size() == 3;
  if (!p->direct) p->col_off = ctx.scratch(a.groups * kdim * p->positions * static_cast<int64_t>(sizeof(float)));
  GemmDesc& g = p->g;
  g.M = og;
  g.N = p->positions;
  g.K = kdim;
  g.ab_dt = DT::F32;
  g.c_dt = DT::F32;
  g.tf32 = ctx.allow_tf32;
  g.batch = a.groups;
  g.strided = true;
  g.a_bstride = og * kdim;
  g.b_bstride = kdim * p->positions;  // the unfolded groups, or the image's channel groups (1x1)
  step.gemms.push_back(&p->g);
  step.fn = &conv_fn;
  step.params = p;
  no_extent(ctx, step);
  return {};
}

Status build_conv_transpose(BuildCtx& ctx, Step& step) {
  TRY(require_f32(ctx));
  const ir::Node& n = ctx.node();
  const auto& a = n.attr<ir::ConvTransposeAttrs>();
  const auto xd = ctx.input(0).shape.static_dims(), wd = ctx.input(1).shape.static_dims(), yd = n.shape.static_dims();
  const bool two_d = xd.size() == 4;
  auto pick = [&](const std::vector<int64_t>& v, bool h_dim, int64_t fallback) {
    if (v.empty() || (h_dim && !two_d)) return fallback;
    return h_dim ? v[0] : v.back();
  };
  auto p = std::make_shared<ConvTStepParams>();
  Col2imParams& k = p->k;
  p->images = xd[0];
  p->c = xd[1];
  k.groups = a.groups;
  k.og = wd[1];
  k.h = two_d ? xd[2] : 1;
  k.w = xd.back();
  k.kh = two_d ? wd[2] : 1;
  k.kw = wd.back();
  k.oh = two_d ? yd[2] : 1;
  k.ow = yd.back();
  k.sh = pick(a.stride, true, 1);
  k.sw = pick(a.stride, false, 1);
  k.ph = pick(a.padding, true, 0);
  k.pw = pick(a.padding, false, 0);
  k.dh = pick(a.dilation, true, 1);
  k.dw = pick(a.dilation, false, 1);
  p->in_pos = k.h * k.w;
  p->out_pos = k.oh * k.ow;
  p->o = k.og * a.groups;
  const int64_t cg = p->c / a.groups, rows = k.og * k.kh * k.kw;
  p->cols_off = ctx.scratch(a.groups * rows * p->in_pos * static_cast<int64_t>(sizeof(float)));
  GemmDesc& g = p->g;
  g.M = rows;
  g.N = p->in_pos;
  g.K = cg;
  g.ta = true;  // W_g is stored [cg, rows]
  g.ab_dt = DT::F32;
  g.c_dt = DT::F32;
  g.tf32 = ctx.allow_tf32;
  g.batch = a.groups;
  g.strided = true;
  g.a_bstride = cg * rows;
  g.b_bstride = cg * p->in_pos;
  step.gemms.push_back(&p->g);
  step.fn = &conv_transpose_fn;
  step.params = p;
  no_extent(ctx, step);
  return {};
}

Status build_group_norm(BuildCtx& ctx, Step& step) {
  TRY(require_f32(ctx));
  const ir::Node& n = ctx.node();
  const auto d = ctx.input(0).shape.static_dims();
  auto k = std::make_shared<GroupNormKParams>();
  k->n = d[0];
  k->c = d[1];
  k->spatial = 1;
  for (size_t i = 2; i < d.size(); ++i) k->spatial *= d[i];
  k->groups = n.attr<ir::GroupNormAttrs>().groups;
  k->eps = static_cast<float>(n.attr<ir::GroupNormAttrs>().eps);
  if (k->n * k->groups > std::numeric_limits<int32_t>::max()) return step_error(ctx, "too many (image, group) pairs");
  step.fn = &group_norm_fn;
  step.params = k;
  no_extent(ctx, step);
  return {};
}

Status build_interpolate(BuildCtx& ctx, Step& step) {
  TRY(require_f32(ctx));
  const ir::Node& n = ctx.node();
  const auto& a = n.attr<ir::InterpolateAttrs>();
  const auto d = ctx.input(0).shape.static_dims();
  auto p = std::make_shared<InterpStepParams>();
  InterpolateKParams& k = p->k;
  k.planes = d[0] * d[1];
  k.ih = d[2];
  k.iw = d[3];
  k.oh = a.size[0];
  k.ow = a.size[1];
  const int taps = a.mode == ir::InterpMode::Nearest ? 1 : a.mode == ir::InterpMode::Bilinear ? 2 : 4;
  k.ty_n = k.tx_n = taps;
  std::vector<int64_t> yi, xi;
  std::vector<float> yw, xw;
  axis_taps(a.mode, k.ih, k.oh, a.align_corners, taps, yi, yw);
  axis_taps(a.mode, k.iw, k.ow, a.align_corners, taps, xi, xw);
  const size_t idx_bytes = (yi.size() + xi.size()) * sizeof(int64_t), w_bytes = (yw.size() + xw.size()) * sizeof(float);
  ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::create(static_cast<int64_t>(idx_bytes + w_bytes), ctx.graph->describe(ctx.id)));
  std::vector<uint8_t> host(idx_bytes + w_bytes);
  std::memcpy(host.data(), yi.data(), yi.size() * sizeof(int64_t));
  std::memcpy(host.data() + yi.size() * sizeof(int64_t), xi.data(), xi.size() * sizeof(int64_t));
  std::memcpy(host.data() + idx_bytes, yw.data(), yw.size() * sizeof(float));
  std::memcpy(host.data() + idx_bytes + yw.size() * sizeof(float), xw.data(), xw.size() * sizeof(float));
  RLX_CUDA_TRY(cudaMemcpy(buf.data(), host.data(), host.size(), cudaMemcpyHostToDevice), ctx.graph->describe(ctx.id));
  k.ty_index = reinterpret_cast<const int64_t*>(buf.data());
  k.tx_index = k.ty_index + yi.size();
  k.ty_weight = reinterpret_cast<const float*>(buf.data() + idx_bytes);
  k.tx_weight = k.ty_weight + yw.size();
  p->taps = std::make_shared<DeviceBuffer>(std::move(buf));
  step.fn = &interpolate_fn;
  step.params = p;
  no_extent(ctx, step);
  return {};
}

Status build_window(BuildCtx& ctx, Step& step) {
  TRY(require_f32(ctx));
  const auto& a = ctx.node().attr<ir::WindowAttrs>();
  const bool partition = ctx.node().op == ir::OpKind::WindowPartition;
  const auto d = (partition ? ctx.input(0).shape : ctx.node().shape).static_dims();  // the image side
  auto k = std::make_shared<WindowKParams>();
  k->images = d[0];
  k->height = d[1];
  k->width = d[2];
  k->chan = d[3];
  k->win = a.window;
  k->nh = (d[1] + a.window - 1) / a.window;
  k->nw = (d[2] + a.window - 1) / a.window;
  k->partition = partition;
  step.fn = &window_fn;
  step.params = k;
  no_extent(ctx, step);
  return {};
}

Status build_rel_pos_attention(BuildCtx& ctx, Step& step) {
  TRY(require_f32(ctx));
  const auto& a = ctx.node().attr<ir::RelPosAttentionAttrs>();
  auto p = std::make_shared<RelPosStepParams>();
  RelPosAttnKParams& k = p->k;
  k.items = ctx.input(0).shape.static_dims()[0];
  k.n_heads = a.n_heads;
  k.head_dim = a.head_dim;
  k.grid_h = a.grid_h;
  k.grid_w = a.grid_w;
  k.scale = static_cast<float>(a.scale > 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  const int64_t T = a.grid_h * a.grid_w, H = a.n_heads, D = a.head_dim;
  // Grids of 64 tokens and more take the GEMM form (the scores of a pass in scratch, at
  // most about 1 GiB; on the H200 it is faster for SAM's windows of 196 and its global
  // grid of 4,096);
  // RLX_CUDA_REL_POS=flash|gemm picks one for comparisons.
  const std::string_view forced = env_config().cuda_rel_pos;
  p->gemm = k.items > 0 && T <= kRelPosSoftmaxMaxKeys &&
            (forced == "gemm" || (forced != "flash" && T >= kRelPosGemmMinKeys));
  if (!p->gemm) {
    if (D > kRelPosMaxHeadDim) return step_error(ctx, "head_dim {} is over the kernel's {}", D, kRelPosMaxHeadDim);
    if (H > 65535) return step_error(ctx, "{} heads are over the kernel's 65535", H);
    const int64_t smem = rel_pos_attention_smem(D, a.grid_h, a.grid_w);
    if (!prepare_rel_pos_attention(smem))
      return step_error(ctx, "a {} x {} grid with head_dim {} needs {} bytes of shared memory per block, more than the "
                             "device allows", a.grid_h, a.grid_w, D, smem);
  } else {
    const int64_t per_item = H * T * (4 * D + T + 2 * (a.grid_h + a.grid_w)) * static_cast<int64_t>(sizeof(float));
    int64_t chunk = std::clamp<int64_t>((int64_t{1} << 30) / per_item, 1, k.items);
    while (k.items % chunk != 0) --chunk;
    p->chunk = chunk;
    const int64_t heads = chunk * H * T * D * static_cast<int64_t>(sizeof(float));
    p->qh_off = ctx.scratch(heads);
    p->kh_off = ctx.scratch(heads);
    p->vh_off = ctx.scratch(heads);
    p->oh_off = ctx.scratch(heads);
    p->s_off = ctx.scratch(chunk * H * T * T * static_cast<int64_t>(sizeof(float)));
    p->bh_off = ctx.scratch(chunk * H * T * (2 * a.grid_h - 1) * static_cast<int64_t>(sizeof(float)));
    p->bw_off = ctx.scratch(chunk * H * T * (2 * a.grid_w - 1) * static_cast<int64_t>(sizeof(float)));
    for (GemmDesc* g : {&p->scores, &p->values, &p->bias_h, &p->bias_w}) {
      g->ab_dt = g->c_dt = DT::F32;
      g->tf32 = ctx.allow_tf32;
      g->batch = chunk * H;
      g->strided = true;
    }
    p->scores.M = p->scores.N = T;  // q_h [T, D] . k_hᵀ
    p->scores.K = D;
    p->scores.tb = true;
    p->scores.a_bstride = p->scores.b_bstride = T * D;
    p->values.M = T;  // p_h [T, T] . v_h [T, D]
    p->values.N = D;
    p->values.K = T;
    p->values.a_bstride = T * T;
    p->values.b_bstride = T * D;
    // q_h [T, D] . tableᵀ [D, 2g - 1], the table shared by every (item, head).
    p->bias_h.M = p->bias_w.M = T;
    p->bias_h.K = p->bias_w.K = D;
    p->bias_h.N = 2 * a.grid_h - 1;
    p->bias_w.N = 2 * a.grid_w - 1;
    p->bias_h.tb = p->bias_w.tb = true;
    p->bias_h.a_bstride = p->bias_w.a_bstride = T * D;
    p->bias_h.b_bstride = p->bias_w.b_bstride = 0;
    step.gemms.push_back(&p->scores);
    step.gemms.push_back(&p->values);
    step.gemms.push_back(&p->bias_h);
    step.gemms.push_back(&p->bias_w);
  }
  step.fn = &rel_pos_attention_fn;
  step.params = p;
  no_extent(ctx, step);
  return {};
}

}  // namespace rlx::cuda_backend
