// tests/cuda/test_ops.cu: the op kernels of runtime/carve_cuda_ops.cu on odd shapes and
// strided (channel-slice) views, each against the CPU runtime or a plain loop:
//   conv2d (1x1 GEMM path, im2col + GEMM incl. a chunked im2col, depthwise, the direct kernel of the
//   few-input-channel convs (the stem) in every math and conv impl: float32 and one launch; bias, SiLU,
//   residual) and deconv2d against double-precision loops; maxpool, copy, add against
//   loops (exact); upsample2x against carve_upsample_nearest2x (exact); global average
//   pool and linear against double loops; softmax against carve_softmax; attention
//   against carve_attention, a batch (per image or per head) against each image alone, bit for bit
//   under the emulation, in min(3 batch, 2 heads + 1) + 1 launches; mask logits against
//   carve_mask_logits; what lies between the channels of a strided output is never written;
//   argument and launch errors.

#include "carve_mask.h"
#include "carve_attention.h"
#include "carve_layout.h"
#include "carve_weights.h"
#include "carve_cuda_direct.h"
#include "cuda_test.h"
#include "pool_chain_check.h"

static const float kCanary = -12345.5f;

// Softmax: the same expf under emulation (only the double sum's order differs: 1 ulp);
// CUDA's expf on a GPU (2 ulp).
#ifdef CARVE_CUDA_EMULATION
static const double kSoftmaxTol = 2e-7;
#else
static const double kSoftmaxTol = 1e-6;
#endif

static double silu_d(double v) { return v / (1.0 + std::exp(-v)); }

// Checks got (pixels, c) with stride against want (pixels, c) dense within tol[p * c + ch],
// and that the padding channels [c, stride) still hold the canary.
static void check_view(const std::vector<float>& got, size_t stride, const std::vector<double>& want,
                       const std::vector<double>& tol, size_t pixels, size_t c, const char* what) {
  for (size_t p = 0; p < pixels; p++) {
    for (size_t ch = 0; ch < stride; ch++) {
      const float g = got[p * stride + ch];
      if (ch >= c) {
        CHECK_MSG(g == kCanary, "%s: pixel %zu channel %zu (padding) overwritten", what, p, ch);
        continue;
      }
      const double w = want[p * c + ch];
      CHECK_MSG(near_float(g, w, tol[p * c + ch]), "%s: pixel %zu channel %zu: %.9g vs %.9g (tol %.3g)", what, p, ch,
                g, w, tol[p * c + ch]);
    }
  }
}

static std::vector<float> random_view(TestRng& rng, size_t pixels, size_t stride, float scale = 1.0f) {
  std::vector<float> v(pixels * stride);
  for (auto& x : v) x = rng.normal() * scale;
  return v;
}

// ---- Convolution --------------------------------------------------------------------------

struct ConvCase {
  uint32_t kh, stride, pad, groups, cin, cout, h, w;
  size_t in_pad, out_pad, res_pad;  // extra channels of each view's stride
  bool residual;
  carve_cu_act act;
};

// The value a TF32 tensor core multiplies: round to nearest (ties away from zero) at the 10-bit mantissa,
// written here independently of the emulator's carve_emu::to_tf32 (finite values only).
static double tf32_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x1000u) & 0xffffe000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// check_conv's reference under CARVE_CU_MATH_TF32: the GEMM paths (groups 1) multiply TF32-rounded
// inputs and weights; depthwise and the direct few-input-channel kernel (carve_cu_conv_direct) stay float32,
// held to the float32 bound. g_tf32_far counts outputs the strict bound would reject
// against the unrounded reference (so the TF32 path is really taken).
static bool g_tf32 = false;
static size_t g_tf32_far = 0;

// batch > 1: `batch` different images one after another in each view (carve_cu_conv.batch), each checked
// against its own reference (no mixing across the image boundary, which falls inside GEMM tiles and chunks).
static void check_conv(TestCtx& t, const ConvCase& cc, TestRng& rng, uint32_t batch = 1) {
  carve_cu_conv c;
  c.batch = batch;
  c.kh = c.kw = cc.kh;
  c.stride = cc.stride;
  c.pad = cc.pad;
  c.groups = cc.groups;
  c.cin = cc.cin;
  c.cout = cc.cout;
  c.h = cc.h;
  c.w = cc.w;
  c.in_stride = cc.cin + cc.in_pad;
  c.out_stride = cc.cout + cc.out_pad;
  c.res_stride = cc.cout + cc.res_pad;
  c.act = cc.act;
  const size_t oh = (cc.h + 2 * cc.pad - cc.kh) / cc.stride + 1, ow = (cc.w + 2 * cc.pad - cc.kh) / cc.stride + 1;
  const size_t cpg = cc.groups == 1 ? cc.cin : 1;  // input channels per output channel
  const size_t ipix = (size_t)cc.h * cc.w, opix = oh * ow;  // one image's input and output pixels
  const std::vector<float> x = random_view(rng, batch * ipix, c.in_stride);
  std::vector<float> wt((size_t)cc.cout * cc.kh * cc.kh * cpg), b(cc.cout);
  for (auto& v : wt) v = rng.normal() * 0.2f;
  for (auto& v : b) v = rng.normal();
  const std::vector<float> r = random_view(rng, batch * opix, c.res_stride);
  const bool direct = carve_cu_conv_direct(&c) != 0;  // the direct kernel: float32 in every math

  DevBuf<float> dx(x), dw(wt), db(b), dr(r), dy(batch * opix * c.out_stride);
  dy.upload(std::vector<float>(batch * opix * c.out_stride, kCanary));
  // No scratch where the function says none is needed (depthwise, 1x1, direct): NULL, so a use would fault.
  const size_t scratch_floats = carve_cu_conv2d_scratch_floats(&c);
  DevBuf<float> scratch(scratch_floats + 1);
  CHECK_OK(carve_cu_conv2d(&t.ctx, &c, dx.p, dw.p, db.p, cc.residual ? dr.p : nullptr, dy.p,
                           scratch_floats ? scratch.p : nullptr));
  t.sync();

  std::vector<double> want(batch * opix * cc.cout), tol(want.size()), tol_check(want.size()), exact;
  for (size_t img = 0; img < batch; img++)
  for (size_t oy = 0; oy < oh; oy++) {
    for (size_t ox = 0; ox < ow; ox++) {
      for (size_t o = 0; o < cc.cout; o++) {
        double s = b[o], mag = std::fabs(b[o]), s_exact = b[o];
        for (size_t ky = 0; ky < cc.kh; ky++) {
          for (size_t kx = 0; kx < cc.kh; kx++) {
            const long long iy = (long long)(oy * cc.stride + ky) - cc.pad, ix = (long long)(ox * cc.stride + kx) - cc.pad;
            if (iy < 0 || iy >= cc.h || ix < 0 || ix >= cc.w) continue;
            for (size_t i = 0; i < cpg; i++) {
              const size_t ch = cc.groups == 1 ? i : o;
              const float xv = x[(img * ipix + (size_t)iy * cc.w + (size_t)ix) * c.in_stride + ch];
              const float wv = wt[((o * cc.kh + ky) * cc.kh + kx) * cpg + i];
              const bool round = g_tf32 && cc.groups == 1 && !direct;
              const double v = round ? tf32_of(xv) * tf32_of(wv) : (double)xv * wv;
              s += v;
              s_exact += (double)xv * wv;
              mag += std::fabs(v);
            }
          }
        }
        if (cc.act == CARVE_CU_ACT_SILU) {
          s = silu_d(s);
          s_exact = silu_d(s_exact);
        }
        const size_t p = img * opix + oy * ow + ox;
        if (cc.residual) {
          s += r[p * c.res_stride + o];
          s_exact += r[p * c.res_stride + o];
        }
        want[p * cc.cout + o] = s;
        tol[p * cc.cout + o] = 2e-6 * (mag + 1.0) * std::sqrt((double)cpg * cc.kh * cc.kh + 1);
        // CUBLAS_COMPUTE_32F_FAST_TF32 allows TF32 but does not oblige cuBLAS to use it: for small GEMMs it may
        // pick a float32 kernel (an H100 did for the one-pixel 1x1 case). Nor does it say how its TF32 kernels
        // convert the operands (round or truncate: one TF32 unit, 2^-11, per operand more than this reference's
        // rounding, so 2^-10 of the magnitude sum; an H100 was 1.3e-5 of it off on the 3 -> 16 stem case at batch
        // 3, beyond the strict bound). The check accepts either; the count below (g_tf32_far, strict bound) still
        // requires the emulated GEMM to round.
        tol_check[p * cc.cout + o] =
            tol[p * cc.cout + o] + (g_tf32 && !direct ? std::fabs(s - s_exact) + std::ldexp(mag, -10) : 0.0);
        exact.push_back(s_exact);
      }
    }
  }
  char what[160];
  std::snprintf(what, sizeof what, "conv %ux%u s%u p%u g%u %u->%u on %ux%u%s%s batch %u%s", cc.kh, cc.kh, cc.stride,
                cc.pad, cc.groups, cc.cin, cc.cout, cc.h, cc.w, cc.act == CARVE_CU_ACT_SILU ? " silu" : "",
                cc.residual ? " +res" : "", batch, t.ctx.conv_fused ? " fused" : "");
  const std::vector<float> got = dy.download();
  check_view(got, c.out_stride, want, tol_check, batch * opix, cc.cout, what);
  for (size_t p = 0; p < batch * opix; p++) {
    for (size_t o = 0; o < cc.cout; o++) {
      g_tf32_far += g_tf32 && !near_float(got[p * c.out_stride + o], exact[p * cc.cout + o], tol[p * cc.cout + o]);
    }
  }
}

static void test_conv(TestCtx& t) {
  TestRng rng(21);
  const ConvCase cases[] = {
      {1, 1, 0, 1, 37, 19, 9, 11, 3, 4, 2, true, CARVE_CU_ACT_SILU},    // 1x1: one GEMM on the view
      {1, 1, 0, 1, 8, 5, 1, 1, 0, 0, 0, false, CARVE_CU_ACT_NONE},      // 1x1 on one pixel
      {3, 1, 1, 1, 5, 8, 13, 7, 1, 0, 0, false, CARVE_CU_ACT_SILU},     // im2col
      {3, 2, 1, 1, 16, 32, 15, 17, 0, 8, 3, true, CARVE_CU_ACT_NONE},   // strided, residual
      {3, 2, 1, 1, 3, 16, 33, 31, 0, 0, 0, false, CARVE_CU_ACT_SILU},   // stem-like: 3 channels
      {1, 2, 0, 1, 12, 6, 9, 9, 2, 1, 0, false, CARVE_CU_ACT_SILU},     // 1x1 stride 2: im2col path
      {2, 2, 0, 1, 7, 5, 10, 11, 0, 0, 0, false, CARVE_CU_ACT_NONE},    // even kernel
      {3, 1, 1, 1, 128, 8, 65, 65, 0, 0, 0, false, CARVE_CU_ACT_SILU},  // im2col in two chunks
      {3, 1, 1, 24, 24, 24, 9, 10, 8, 8, 1, true, CARVE_CU_ACT_SILU},   // depthwise
      {7, 1, 3, 33, 33, 33, 12, 12, 0, 0, 0, false, CARVE_CU_ACT_NONE}, // depthwise 7x7
      {3, 2, 1, 16, 16, 16, 11, 9, 0, 3, 0, false, CARVE_CU_ACT_SILU},  // depthwise, stride 2
      {3, 1, 1, 16, 16, 16, 9, 8, 0, 4, 0, true, CARVE_CU_ACT_SILU},   // depthwise, 4-float vectors + residual
      {5, 2, 2, 8, 8, 8, 11, 10, 4, 0, 0, false, CARVE_CU_ACT_NONE},    // depthwise 5x5 / 2, vectors
      {3, 1, 1, 344, 344, 344, 5, 4, 0, 0, 0, true, CARVE_CU_ACT_SILU}, // depthwise, weights past the shared stage
      {5, 1, 2, 1, 4, 6, 6, 5, 0, 0, 0, false, CARVE_CU_ACT_SILU},      // kernel near the image size
  };
  for (const auto& cc : cases) check_conv(t, cc, rng);
  // CARVE_CU_MATH_TF32: the same cases against TF32-rounded GEMM inputs (depthwise unchanged); the
  // emulated GEMM must really round (outputs off the float32 result by more than its bound).
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_TF32));
  CHECK(t.ctx.conv_tf32 == 1);  // the emulated device is sm_90
  g_tf32 = true;
  for (const auto& cc : cases) check_conv(t, cc, rng);
  // Batches of 3 different images (TF32): the cuBLAS path (one GEMM / im2col over the batch's pixels, the
  // depthwise kernel) and the fused implicit-GEMM kernel, whose 64-pixel tiles straddle the images.
  for (const auto& cc : cases) check_conv(t, cc, rng, 3);
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_FUSED));
  CHECK(t.ctx.conv_fused == 1);
  for (const auto& cc : cases) check_conv(t, cc, rng, 3);
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
  g_tf32 = false;
  CHECK_MSG(g_tf32_far > 100, "TF32 convs: only %zu outputs differ from float32 beyond its bound", g_tf32_far);
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_STRICT));
  CHECK(t.ctx.conv_tf32 == 0);
  CHECK(carve_cu_ctx_set_conv_math(&t.ctx, (carve_cu_math)2) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_ctx_set_conv_math(nullptr, CARVE_CU_MATH_TF32) == CARVE_ERR_INVALID_ARGUMENT);
  std::printf("conv2d TF32: %zu cases ok (%zu outputs beyond the float32 bound)\n", sizeof cases / sizeof cases[0],
              g_tf32_far);
  // The chunked case really is chunked: more im2col floats than the scratch holds.
  carve_cu_conv big = {3, 3, 1, 1, 1, 128, 8, 65, 65, 128, 8, 8, CARVE_CU_ACT_SILU, 1, 0};
  CHECK(carve_cu_conv2d_scratch_floats(&big) < (size_t)65 * 65 * 9 * 128);
  carve_cu_conv one = {1, 1, 1, 0, 1, 37, 19, 9, 11, 40, 23, 21, CARVE_CU_ACT_NONE, 1, 0};
  CHECK(carve_cu_conv2d_scratch_floats(&one) == 0);
  std::printf("conv2d: %zu cases ok\n", sizeof cases / sizeof cases[0]);

  // Refusals: grouped but not depthwise, zero sizes, strides shorter than the channels, no scratch for an
  // im2col conv (5 input channels: not the direct kernel's).
  DevBuf<float> d(64);
  carve_cu_conv bad = {3, 3, 1, 1, 2, 5, 5, 5, 5, 5, 5, 5, CARVE_CU_ACT_NONE, 1, 0};
  CHECK(carve_cu_conv2d(&t.ctx, &bad, d.p, d.p, d.p, nullptr, d.p, d.p) == CARVE_ERR_INVALID_ARGUMENT);
  bad.groups = 1;
  bad.in_stride = 4;
  CHECK(carve_cu_conv2d(&t.ctx, &bad, d.p, d.p, d.p, nullptr, d.p, d.p) == CARVE_ERR_INVALID_ARGUMENT);
  bad.in_stride = 5;
  CHECK(!carve_cu_conv_direct(&bad) && carve_cu_conv2d_scratch_floats(&bad) > 0);
  CHECK(carve_cu_conv2d(&t.ctx, &bad, d.p, d.p, d.p, nullptr, d.p, nullptr) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_conv2d(&t.ctx, nullptr, d.p, d.p, d.p, nullptr, d.p, d.p) == CARVE_ERR_INVALID_ARGUMENT);
}

// The direct kernel of the few-input-channel convs (runtime/carve_cuda_direct.h: groups 1, cin <= 4,
// kh kw cin <= 64; the stem of every YOLO26 model): in both conv impls (cuBLAS default and fused) and both
// maths (strict and TF32) it is one launch without scratch and float32 (check_conv holds it to the float32
// bound against the unrounded double reference), at batch 1 and 3; 16-byte stores where cout and the strides
// allow (cout a multiple of 4 floats, dense or 4-aligned views), scalar ones otherwise; channel slices of 32
// (cout 80), 3 groups a pixel (cout 24), a partial group (13, 20), K from 3 to 64. The outputs spread.
static void test_conv_direct(TestCtx& t) {
  TestRng rng(25);
  const ConvCase cases[] = {
      {3, 2, 1, 1, 3, 16, 13, 11, 0, 0, 0, false, CARVE_CU_ACT_SILU},  // yolo26n's stem, odd size: 16-byte stores
      {3, 2, 1, 1, 3, 16, 13, 11, 0, 0, 0, true, CARVE_CU_ACT_NONE},   // + residual (16-byte loads of it)
      {3, 2, 1, 1, 3, 24, 12, 9, 0, 0, 0, true, CARVE_CU_ACT_SILU},    // 3 channel groups a pixel
      {3, 2, 1, 1, 3, 80, 13, 11, 1, 3, 2, true, CARVE_CU_ACT_SILU},   // 3 slices of 32; strided: scalar stores
      {3, 2, 1, 1, 3, 13, 11, 13, 0, 0, 0, false, CARVE_CU_ACT_NONE},  // a partial group: scalar stores
      {3, 1, 1, 1, 4, 20, 9, 7, 0, 4, 0, false, CARVE_CU_ACT_SILU},    // cin 4, stride 1; 20: half a group, vectors
      {4, 2, 1, 1, 4, 12, 10, 9, 0, 0, 0, false, CARVE_CU_ACT_SILU},   // K 64, the largest the rule takes
      {1, 1, 0, 1, 3, 16, 7, 5, 2, 0, 0, false, CARVE_CU_ACT_SILU},    // 1x1 on 3 channels (not the GEMM path)
      {3, 2, 1, 1, 1, 8, 13, 11, 0, 0, 0, true, CARVE_CU_ACT_SILU},    // cin 1
  };
  for (const auto& cc : cases) {
    carve_cu_conv c = {cc.kh, cc.kh, cc.stride, cc.pad, 1, cc.cin, cc.cout, cc.h, cc.w, cc.cin + cc.in_pad,
                       cc.cout + cc.out_pad, cc.cout + cc.res_pad, cc.act, 3, 0};
    CHECK(carve_cu_conv_direct(&c) && carve_cu_conv2d_scratch_floats(&c) == 0);
  }
  // The rule's edges: 5 input channels, K 75 (cin 3, 5x5), depthwise.
  carve_cu_conv edge = {5, 5, 2, 2, 1, 3, 16, 17, 15, 3, 16, 16, CARVE_CU_ACT_SILU, 1, 0};
  CHECK(!carve_cu_conv_direct(&edge) && carve_cu_conv2d_scratch_floats(&edge) > 0);
  edge = {3, 3, 2, 1, 1, 5, 16, 17, 15, 5, 16, 16, CARVE_CU_ACT_SILU, 1, 0};
  CHECK(!carve_cu_conv_direct(&edge));
  edge = {3, 3, 1, 1, 4, 4, 4, 17, 15, 4, 4, 4, CARVE_CU_ACT_SILU, 1, 0};
  CHECK(!carve_cu_conv_direct(&edge));
  for (int fused = 0; fused < 2; fused++) {
    CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, fused ? CARVE_CU_CONV_FUSED : CARVE_CU_CONV_GEMM));
    for (int tf32 = 0; tf32 < 2; tf32++) {
      CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, tf32 ? CARVE_CU_MATH_TF32 : CARVE_CU_MATH_STRICT));
      for (const auto& cc : cases) {
        for (uint32_t batch : {1u, 3u}) check_conv(t, cc, rng, batch);
      }
    }
    // One launch, and outputs that spread (yolo26n's stem, batch 3).
    const ConvCase& cc = cases[0];
    const uint32_t batch = 3;
    const size_t opix = (size_t)((cc.h + 1) / 2) * ((cc.w + 1) / 2);
    carve_cu_conv c = {3, 3, 2, 1, 1, 3, 16, cc.h, cc.w, 3, 16, 16, CARVE_CU_ACT_SILU, batch, 0};
    const std::vector<float> x = random_view(rng, (size_t)batch * cc.h * cc.w, 3);
    std::vector<float> wt(16 * 27), b(16);
    for (auto& v : wt) v = rng.normal() * 0.2f;
    for (auto& v : b) v = rng.normal();
    DevBuf<float> dx(x), dw(wt), db(b), dy(batch * opix * 16);
    const size_t nodes =
        captured_nodes(t, [&]() { return carve_cu_conv2d(&t.ctx, &c, dx.p, dw.p, db.p, nullptr, dy.p, nullptr); });
    CHECK_MSG(nodes == 1, "direct conv (%s): %zu launches, want 1", fused ? "fused" : "cuBLAS", nodes);
    CHECK_OK(carve_cu_conv2d(&t.ctx, &c, dx.p, dw.p, db.p, nullptr, dy.p, nullptr));
    t.sync();
    double sum = 0.0, sum2 = 0.0;
    for (float v : dy.download()) {
      sum += v;
      sum2 += (double)v * v;
    }
    const double n = (double)(batch * opix * 16), sd = std::sqrt(std::max(0.0, sum2 / n - (sum / n) * (sum / n)));
    CHECK_MSG(sd > 0.1, "direct conv: outputs flat (sd %.3g)", sd);
  }
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_STRICT));
  // More pixels than one grid's threads take in one step (CARVE_CU_MAX_BLOCKS blocks of 128 pixels for 16
  // channels): threads go round the grid-stride loop, across the images of a batch of 3.
  check_conv(t, {3, 2, 1, 1, 3, 16, 448, 447, 0, 0, 0, true, CARVE_CU_ACT_SILU}, rng, 3);
  std::printf("conv2d direct (few input channels): %zu cases ok, cuBLAS and fused, strict and TF32, batch 1 and 3\n",
              sizeof cases / sizeof cases[0]);
}

static void test_deconv(TestCtx& t) {
  TestRng rng(22);
  const uint32_t h = 5, w = 7, cin = 17, cout = 9, k = 2;
  const size_t in_stride = 20, out_stride = 11;
  const std::vector<float> x = random_view(rng, (size_t)h * w, in_stride);
  std::vector<float> wt((size_t)cout * k * k * cin), b(cout);
  for (auto& v : wt) v = rng.normal() * 0.3f;
  for (auto& v : b) v = rng.normal();
  const size_t oh = (size_t)h * k, ow = (size_t)w * k;
  for (int silu = 0; silu < 2; silu++) {
    DevBuf<float> dx(x), dw(wt), db(b), dy(oh * ow * out_stride), scratch(carve_cu_deconv2d_scratch_floats(h, w, k, cout));
    dy.upload(std::vector<float>(oh * ow * out_stride, kCanary));
    CHECK_OK(carve_cu_deconv2d(&t.ctx, h, w, cin, cout, k, dx.p, in_stride, dw.p, db.p,
                               silu ? CARVE_CU_ACT_SILU : CARVE_CU_ACT_NONE, dy.p, out_stride, scratch.p));
    t.sync();
    std::vector<double> want(oh * ow * cout), tol(want.size());
    for (size_t oy = 0; oy < oh; oy++)
      for (size_t ox = 0; ox < ow; ox++)
        for (size_t o = 0; o < cout; o++) {
          // ConvTranspose2d, stride = kernel, pad 0: each output reads input (oy / k, ox / k).
          double s = b[o], mag = std::fabs(b[o]);
          for (size_t i = 0; i < cin; i++) {
            const double v = (double)x[((oy / k) * w + ox / k) * in_stride + i] * wt[((o * k + oy % k) * k + ox % k) * cin + i];
            s += v;
            mag += std::fabs(v);
          }
          want[(oy * ow + ox) * cout + o] = silu ? silu_d(s) : s;
          tol[(oy * ow + ox) * cout + o] = 1e-5 * (mag + 1.0);
        }
    check_view(dy.download(), out_stride, want, tol, oh * ow, cout, silu ? "deconv silu" : "deconv");
  }
  std::printf("deconv2d: ok\n");
}

// ---- Pooling, upsample, copy, add, gap ------------------------------------------------------

static void test_elementwise(TestCtx& t) {
  TestRng rng(23);
  // Max pool: SPPF's 5x5 s1 p2, a 3x3 s2 p1 and a 2x2 s2 p0, on odd sizes.
  // Each also as a batch of 2 different images (the windows stay inside their image).
  // c = 13 (strides 16 / 15) takes the scalar kernel, c = 16 (strides 20 / 24) the 16-byte one.
  const uint32_t pools[][7] = {{5, 1, 2, 1, 13, 16, 15}, {3, 2, 1, 1, 13, 16, 15}, {2, 2, 0, 1, 13, 16, 15},
                               {5, 1, 2, 2, 13, 16, 15}, {3, 2, 1, 2, 13, 16, 15}, {5, 1, 2, 1, 16, 20, 24},
                               {3, 2, 1, 2, 16, 20, 24}};
  for (const auto& pl : pools) {
    const uint32_t h = 11, w = 9, k = pl[0], s = pl[1], pad = pl[2], batch = pl[3], c = pl[4];
    const size_t in_stride = pl[5], out_stride = pl[6];
    const size_t oh = (h + 2 * pad - k) / s + 1, ow = (w + 2 * pad - k) / s + 1;
    const std::vector<float> x = random_view(rng, (size_t)batch * h * w, in_stride);
    DevBuf<float> dx(x), dy(batch * oh * ow * out_stride);
    dy.upload(std::vector<float>(batch * oh * ow * out_stride, kCanary));
    CHECK_OK(carve_cu_maxpool2d(&t.ctx, batch, h, w, c, k, s, pad, dx.p, in_stride, dy.p, out_stride));
    t.sync();
    std::vector<double> want(batch * oh * ow * c), tol(want.size(), 0.0);
    for (size_t img = 0; img < batch; img++)
    for (size_t oy = 0; oy < oh; oy++)
      for (size_t ox = 0; ox < ow; ox++)
        for (size_t ch = 0; ch < c; ch++) {
          float m = -INFINITY;
          for (size_t ky = 0; ky < k; ky++)
            for (size_t kx = 0; kx < k; kx++) {
              const long long iy = (long long)(oy * s + ky) - pad, ix = (long long)(ox * s + kx) - pad;
              if (iy >= 0 && iy < h && ix >= 0 && ix < w)
                m = std::max(m, x[(img * h * w + (size_t)iy * w + (size_t)ix) * in_stride + ch]);
            }
          want[((img * oh + oy) * ow + ox) * c + ch] = m;
        }
    check_view(dy.download(), out_stride, want, tol, batch * oh * ow, c, "maxpool");
  }
  check_pool_chains<float>(t, [&](size_t n) { return random_view(rng, n, 1); }, NAN);
  // Upsample against the CPU runtime: the scalar kernel (c = 9) and the 16-byte one (c = 8, strides 12 / 16).
  const uint32_t ups[][3] = {{9, 12, 10}, {8, 12, 16}};
  for (const auto& up : ups) {
    const uint32_t h = 7, w = 5, c = up[0];
    const size_t in_stride = up[1], out_stride = up[2];
    const std::vector<float> x = random_view(rng, (size_t)h * w, in_stride);
    std::vector<float> cpu(4 * (size_t)h * w * out_stride, kCanary);
    carve_upsample_nearest2x(x.data(), in_stride, h, w, c, cpu.data(), out_stride, nullptr);
    DevBuf<float> dx(x), dy(cpu.size());
    dy.upload(std::vector<float>(cpu.size(), kCanary));
    CHECK_OK(carve_cu_upsample2x(&t.ctx, h, w, c, dx.p, in_stride, dy.p, out_stride));
    t.sync();
    const std::vector<float> got = dy.download();
    for (size_t i = 0; i < cpu.size(); i++) CHECK(same_float(got[i], cpu[i]));
  }
  // Copy and add.
  {
    const size_t pixels = 37, c = 6, sa = 9, sb = 7, sy = 8;
    const std::vector<float> a = random_view(rng, pixels, sa), b = random_view(rng, pixels, sb);
    DevBuf<float> da(a), db(b), dy(pixels * sy), dc(pixels * sy);
    dy.upload(std::vector<float>(pixels * sy, kCanary));
    dc.upload(std::vector<float>(pixels * sy, kCanary));
    CHECK_OK(carve_cu_add(&t.ctx, pixels, (uint32_t)c, da.p, sa, db.p, sb, dy.p, sy));
    CHECK_OK(carve_cu_copy(&t.ctx, pixels, (uint32_t)c, da.p, sa, dc.p, sy));
    t.sync();
    std::vector<double> want_add(pixels * c), want_copy(pixels * c), zero(pixels * c, 0.0);
    for (size_t p = 0; p < pixels; p++)
      for (size_t ch = 0; ch < c; ch++) {
        want_add[p * c + ch] = (float)(a[p * sa + ch] + b[p * sb + ch]);
        want_copy[p * c + ch] = a[p * sa + ch];
      }
    check_view(dy.download(), sy, want_add, zero, pixels, c, "add");
    check_view(dc.download(), sy, want_copy, zero, pixels, c, "copy");
  }
  // Global average pool (sum in double), one image and a batch of 3 (image b's pixels after image b - 1's).
  for (uint32_t batch : {1u, 3u}) {
    const uint32_t h = 7, w = 3, c = 300;
    const size_t in_stride = 301;
    const std::vector<float> x = random_view(rng, (size_t)batch * h * w, in_stride);
    DevBuf<float> dx(x), dy((size_t)batch * c);
    CHECK_OK(carve_cu_global_avgpool(&t.ctx, batch, h, w, c, dx.p, in_stride, dy.p));
    t.sync();
    const std::vector<float> got = dy.download();
    for (size_t b = 0; b < batch; b++) {
      for (size_t ch = 0; ch < c; ch++) {
        double s = 0;
        for (size_t p = 0; p < (size_t)h * w; p++) s += x[(b * h * w + p) * in_stride + ch];
        CHECK_MSG(got[b * c + ch] == (float)(s / (h * w)), "global avgpool batch %u image %zu channel %zu", batch, b,
                  ch);
      }
    }
  }
  {
    DevBuf<float> d(16);
    CHECK(carve_cu_global_avgpool(&t.ctx, 0, 2, 2, 4, d.p, 4, d.p) == CARVE_ERR_INVALID_ARGUMENT);
    CHECK(carve_cu_global_avgpool(&t.ctx, 1, 2, 2, 4, d.p, 3, d.p) == CARVE_ERR_INVALID_ARGUMENT);
  }
  std::printf("maxpool, upsample2x, copy, add, global avgpool: ok\n");
}

// ---- Linear, softmax ---------------------------------------------------------------------

static void test_linear_softmax(TestCtx& t) {
  TestRng rng(24);
  // Linear layer, one image and a batch of 3 (one GEMM, every image a column): each against double sums; under the
  // emulation the batch's images are the single image's results bit for bit (on a GPU cuBLAS may pick another
  // kernel for another batch size: within the same bound).
  {
    const uint32_t cin = 1280, cout = 1000, batch = 3;
    std::vector<float> x((size_t)batch * cin), wt((size_t)cout * cin), b(cout);
    for (auto& v : x) v = rng.normal();
    for (auto& v : wt) v = rng.normal() * 0.03f;
    for (auto& v : b) v = rng.normal();
    DevBuf<float> dx(x), dw(wt), db(b), dy((size_t)batch * cout), d1(cout);
    CHECK_OK(carve_cu_linear(&t.ctx, batch, cin, cout, dx.p, dw.p, db.p, dy.p));
    CHECK_OK(carve_cu_linear(&t.ctx, 1, cin, cout, dx.p + cin, dw.p, db.p, d1.p));  // image 1 alone
    t.sync();
    const std::vector<float> got = dy.download(), alone = d1.download();
    for (size_t img = 0; img < batch; img++) {
      for (size_t o = 0; o < cout; o++) {
        double s = b[o], mag = std::fabs(b[o]);
        for (size_t i = 0; i < cin; i++) {
          s += (double)wt[o * cin + i] * x[img * cin + i];
          mag += std::fabs((double)wt[o * cin + i] * x[img * cin + i]);
        }
        const float g = got[img * cout + o];
        CHECK_MSG(near_float(g, s, 1e-6 * (mag + 1) * 40), "linear image %zu output %zu: %g vs %g", img, o, g, s);
#ifdef CARVE_CUDA_EMULATION
        if (img == 1) CHECK_MSG(same_float(g, alone[o]), "linear: image 1 of the batch %g, alone %g", g, alone[o]);
#endif
      }
    }
  }
  // Softmax against carve_softmax: random, one element, NaN, +inf, -inf entries.
  const size_t sizes[] = {1000, 1, 7, 2049};
  for (int kind = 0; kind < 5; kind++) {
    for (size_t n : sizes) {
      std::vector<float> x(n);
      for (auto& v : x) v = rng.normal() * 4.0f;
      if (kind == 1 && n > 3) x[n / 2] = NAN;
      if (kind == 2 && n > 3) x[n / 3] = INFINITY;
      if (kind == 3) for (size_t i = 0; i < n; i += 2) x[i] = -INFINITY;
      if (kind == 4) for (auto& v : x) v = -INFINITY;
      std::vector<float> cpu(n);
      carve_softmax(x.data(), n, cpu.data());
      DevBuf<float> dx(x), dy(n);
      CHECK_OK(carve_cu_softmax(&t.ctx, 1, (uint32_t)n, dx.p, dy.p));
      t.sync();
      const std::vector<float> got = dy.download();
      for (size_t i = 0; i < n; i++)
        CHECK_MSG(near_float(got[i], cpu[i], kSoftmaxTol * std::fabs(cpu[i]) + 1e-30), "softmax kind %d n %zu [%zu]: %g vs %g",
                  kind, n, i, got[i], cpu[i]);
      // a batch of 3 rows (this one in the middle: the same bits as alone), each row its own softmax
      std::vector<float> rows(3 * n);
      for (auto& v : rows) v = rng.normal() * 4.0f;
      std::copy(x.begin(), x.end(), rows.begin() + (long)n);
      DevBuf<float> drows(rows), dout(3 * n);
      CHECK_OK(carve_cu_softmax(&t.ctx, 3, (uint32_t)n, drows.p, dout.p));
      t.sync();
      const std::vector<float> three = dout.download();
      for (size_t i = 0; i < n; i++) CHECK(same_float(three[n + i], got[i]));
      std::vector<float> edge(n);  // rows 0 and 2 against carve_softmax of their own values
      for (size_t r : {(size_t)0, (size_t)2}) {
        carve_softmax(rows.data() + r * n, n, edge.data());
        for (size_t i = 0; i < n; i++) {
          CHECK_MSG(near_float(three[r * n + i], edge[i], kSoftmaxTol * std::fabs(edge[i]) + 1e-30),
                    "softmax batch row %zu [%zu]: %g vs %g", r, i, three[r * n + i], edge[i]);
        }
      }
    }
  }
  std::printf("linear, softmax: ok\n");
}

// ---- Attention, mask logits ---------------------------------------------------------------

// carve_cu_attention against carve_attention (the CPU runtime), image by image, both ways: the fused kernel and the
// GEMM path (carve_cu_ctx_set_attention_impl). Shapes: odd ones, yolo26's heads (key_dim 32, head_dim 64: several
// outputs a thread), the fused kernel's limits (key_dim = head_dim = CARVE_CU_ATTN_MAX_DIM, n = CARVE_CU_ATTN_MAX_N)
// and one past (n = CARVE_CU_ATTN_MAX_N + 1 and a batch of CARVE_CU_ATTN_MAX_BATCH + 1: the GEMM path even when
// fused is asked); each call's launches counted (fused: 1, V's copy included). The scores spread (random q, k).
// First, a fresh context's default: the GEMM path (a shape the fused kernel takes, more than 2 launches).
static void test_attention(TestCtx& t) {
  {
    TestCtx fresh;
    const uint32_t n = 63, heads = 2, kd = 8, hd = 16, per = 2 * kd + hd;
    DevBuf<float> dq(std::vector<float>(n * heads * per, 0.25f)), dout(n * heads * hd), dv(n * heads * hd),
        scratch(carve_cu_attention_scratch_floats(1, n, heads));
    const size_t nodes = captured_nodes(fresh, [&] {
      return carve_cu_attention(&fresh.ctx, 1, dq.p, heads * per, n, heads, kd, hd, 0.5f, dout.p, heads * hd, dv.p,
                                heads * hd, scratch.p);
    });
    CHECK_MSG(!fresh.ctx.attention_fused && nodes > 2, "attention: a fresh context's default: %zu launches (fused %d),"
              " not the GEMM path", nodes, fresh.ctx.attention_fused);
  }
  TestRng rng(25);
  struct Shape {
    size_t n, heads, kd, hd, batch;
  };
  const Shape shapes[] = {{63, 2, 8, 16, 1},
                          {63, 2, 8, 16, 3},
                          {100, 2, 32, 64, 2},
                          {20, 1, CARVE_CU_ATTN_MAX_DIM, CARVE_CU_ATTN_MAX_DIM, 1},
                          {CARVE_CU_ATTN_MAX_N, 1, 2, 3, 1},
                          {CARVE_CU_ATTN_MAX_N + 1, 1, 2, 3, 1},
                          {9, 3, 4, 8, CARVE_CU_ATTN_MAX_BATCH + 1}};
  int fused = 0, cases = 0;
  for (carve_cu_attention_impl impl : {CARVE_CU_ATTENTION_FUSED, CARVE_CU_ATTENTION_GEMM}) {
    CHECK_OK(carve_cu_ctx_set_attention_impl(&t.ctx, impl));
    for (const Shape& sh : shapes) {
      const size_t n = sh.n, heads = sh.heads, kd = sh.kd, hd = sh.hd, batch = sh.batch, per = 2 * kd + hd;
      const size_t qkv_stride = heads * per + 3, out_stride = heads * hd + 2, v_stride = heads * hd + 1;
      const float scale = 1.0f / std::sqrt((float)kd);
      const std::vector<float> qkv = random_view(rng, batch * n, qkv_stride);
      std::vector<float> cpu_out(batch * n * out_stride, kCanary), cpu_v(batch * n * v_stride, kCanary);
      std::vector<float> cpu_scratch(carve_attention_scratch_floats(n, heads, kd));
      for (size_t b = 0; b < batch; b++)  // the CPU reference, image by image
        carve_attention(qkv.data() + b * n * qkv_stride, qkv_stride, n, heads, kd, hd, scale,
                        cpu_out.data() + b * n * out_stride, out_stride, cpu_v.data() + b * n * v_stride, v_stride,
                        cpu_scratch.data(), nullptr);
      DevBuf<float> dq(qkv), dout(batch * n * out_stride), dv(batch * n * v_stride),
          scratch(carve_cu_attention_scratch_floats((uint32_t)batch, n, heads));
      dout.upload(std::vector<float>(batch * n * out_stride, kCanary));
      dv.upload(std::vector<float>(batch * n * v_stride, kCanary));
      const size_t nodes = captured_run(t, [&] {
        return carve_cu_attention(&t.ctx, (uint32_t)batch, dq.p, qkv_stride, (uint32_t)n, (uint32_t)heads,
                                  (uint32_t)kd, (uint32_t)hd, scale, dout.p, out_stride, dv.p, v_stride, scratch.p);
      });
      const bool one = impl == CARVE_CU_ATTENTION_FUSED && n <= CARVE_CU_ATTN_MAX_N && batch <= CARVE_CU_ATTN_MAX_BATCH;
      CHECK_MSG(one ? nodes == 1 : nodes > 2, "attention n %zu batch %zu (impl %d): %zu launches", n, batch, (int)impl,
                nodes);
      const std::vector<float> out = dout.download(), v = dv.download();
      const double tol = 2e-6 * std::max(1.0, (double)n / 256);  // the sums' orders differ: P V over n keys
      double lo = INFINITY, hi = -INFINITY;
      for (size_t i = 0; i < batch * n * out_stride; i++) {
        CHECK_MSG(near_float(out[i], cpu_out[i], tol * (std::fabs(cpu_out[i]) + 1)),
                  "attention n %zu batch %zu (impl %d) [%zu]: %g vs %g", n, batch, (int)impl, i, out[i], cpu_out[i]);
        if (cpu_out[i] != kCanary) lo = std::min(lo, (double)cpu_out[i]), hi = std::max(hi, (double)cpu_out[i]);
      }
      CHECK_MSG(hi - lo > 0.05, "attention n %zu: the outputs do not spread (%g .. %g)", n, lo, hi);
      for (size_t i = 0; i < batch * n * v_stride; i++) CHECK(same_float(v[i], cpu_v[i]));
      fused += one;
      cases++;
    }
  }
  CHECK_OK(carve_cu_ctx_set_attention_impl(&t.ctx, CARVE_CU_ATTENTION_GEMM));  // the default again
  CHECK(carve_cu_ctx_set_attention_impl(&t.ctx, (carve_cu_attention_impl)2) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_ctx_set_attention_impl(nullptr, CARVE_CU_ATTENTION_GEMM) == CARVE_ERR_INVALID_ARGUMENT);
  std::printf("attention: %d cases against carve_attention, %d of them fused\n", cases, fused);
}

// A batch's result against the same image alone: the same bits from the fused kernel (`exact`), and under the
// emulation (the same GEMM per (image, head), the same softmax); on a GPU, cuBLAS may choose another kernel for
// another GEMM batch count.
static bool same_as_alone(float batch, float alone, bool exact) {
#ifdef CARVE_CUDA_EMULATION
  (void)exact;
  return same_float(batch, alone);
#else
  return exact ? same_float(batch, alone) : near_float(batch, alone, 2e-6 * (std::fabs(alone) + 1));
#endif
}

// A batch in one call against the same function on each image alone, both ways: the fused kernel (one launch up to
// CARVE_CU_ATTN_MAX_BATCH images: the same bits on a GPU too) and the GEMM path, per image or per head (whichever
// launches less; min(3 batch, 2 heads + 1) + V's gather, the same bits under the emulation); every output channel
// and V; the launches of one call counted in a captured graph; the scratch is the batch's. (A batch of 5 asked to
// fuse runs the GEMMs and its images alone the fused kernel: equal to rounding.)
static void test_attention_batch(TestCtx& t) {
  TestRng rng(27);
  const size_t n = 21, kd = 8, hd = 16, per = 2 * kd + hd;
  int per_head = 0, cases = 0, fused = 0;
  for (carve_cu_attention_impl impl : {CARVE_CU_ATTENTION_FUSED, CARVE_CU_ATTENTION_GEMM}) {
    CHECK_OK(carve_cu_ctx_set_attention_impl(&t.ctx, impl));
    for (size_t heads : {1, 2, 4}) {
      const size_t qkv_stride = heads * per + 3, out_stride = heads * hd + 2, v_stride = heads * hd + 1;
      const float scale = 1.0f / std::sqrt((float)kd);
      for (size_t batch : {1, 2, 3, 4, 5}) {
        const std::vector<float> qkv = random_view(rng, batch * n, qkv_stride);
        DevBuf<float> dq(qkv), dout(batch * n * out_stride), dv(batch * n * v_stride), one_out(n * out_stride),
            one_v(n * v_stride);
        const size_t floats = carve_cu_attention_scratch_floats((uint32_t)batch, n, heads);
        const bool by_head = 2 * heads + 1 < 3 * batch;
        CHECK_MSG(floats == (by_head ? batch : 1) * heads * n * n, "attention scratch batch %zu heads %zu: %zu floats",
                  batch, heads, floats);
        DevBuf<float> scratch(floats), one_scratch(carve_cu_attention_scratch_floats(1, n, heads));
        dout.upload(std::vector<float>(batch * n * out_stride, kCanary));
        dv.upload(std::vector<float>(batch * n * v_stride, kCanary));
        const size_t nodes = captured_run(t, [&] {
          return carve_cu_attention(&t.ctx, (uint32_t)batch, dq.p, qkv_stride, (uint32_t)n, (uint32_t)heads,
                                    (uint32_t)kd, (uint32_t)hd, scale, dout.p, out_stride, dv.p, v_stride, scratch.p);
        });
        const bool one = impl == CARVE_CU_ATTENTION_FUSED && batch <= CARVE_CU_ATTN_MAX_BATCH;
        const size_t want_nodes = one ? 1 : std::min(3 * batch, 2 * heads + 1) + 1;
        const size_t gemms = one ? 0 : by_head ? 2 * heads : 2 * batch;  // strided-batched: over images, or over heads
        CHECK_MSG(launches_as_planned(nodes, want_nodes, gemms),
                  "attention batch %zu heads %zu: %zu launches, want %zu", batch, heads, nodes, want_nodes);
        const std::vector<float> out = dout.download(), v = dv.download();
        // a batch past CARVE_CU_ATTN_MAX_BATCH takes the GEMMs, its images alone the fused kernel: to rounding
        const bool alone_fused = !one && impl == CARVE_CU_ATTENTION_FUSED;
        for (size_t b = 0; b < batch; b++) {
          DevBuf<float> dq1(std::vector<float>(qkv.begin() + (long)(b * n * qkv_stride),
                                               qkv.begin() + (long)((b + 1) * n * qkv_stride)));
          one_out.upload(std::vector<float>(n * out_stride, kCanary));
          one_v.upload(std::vector<float>(n * v_stride, kCanary));
          CHECK_OK(carve_cu_attention(&t.ctx, 1, dq1.p, qkv_stride, (uint32_t)n, (uint32_t)heads, (uint32_t)kd,
                                      (uint32_t)hd, scale, one_out.p, out_stride, one_v.p, v_stride, one_scratch.p));
          t.sync();
          const std::vector<float> o1 = one_out.download(), v1 = one_v.download();
          for (size_t i = 0; i < o1.size(); i++)
            CHECK_MSG(alone_fused ? near_float(out[b * n * out_stride + i], o1[i], 2e-6 * (std::fabs(o1[i]) + 1))
                                  : same_as_alone(out[b * n * out_stride + i], o1[i], one),
                      "attention batch %zu heads %zu: image %zu [%zu]: %.9g, alone %.9g", batch, heads, b, i,
                      out[b * n * out_stride + i], o1[i]);
          CHECK_MSG(std::memcmp(v1.data(), v.data() + b * n * v_stride, v1.size() * sizeof(float)) == 0,
                    "attention batch %zu heads %zu: image %zu's V differs from the image alone", batch, heads, b);
        }
        if (batch > 1) {  // the images differ (a call reading image 0 for every image would fail)
          CHECK(std::memcmp(out.data(), out.data() + n * out_stride, n * out_stride * sizeof(float)) != 0);
        }
        per_head += !one && by_head;
        fused += one;
        cases++;
      }
    }
  }
  CHECK_OK(carve_cu_ctx_set_attention_impl(&t.ctx, CARVE_CU_ATTENTION_GEMM));  // the default again
  CHECK(per_head > 0 && per_head < cases - fused && fused > 0);  // both groupings ran, and the fused kernel
  std::printf("attention batches: %d cases (%d fused, %d per head) bit-identical to each image alone\n", cases, fused,
              per_head);
}

// carve_cu_attention_pe: the attention and the pe convolution after it (depthwise k x k of V, residual O) as one
// call, against the two calls (carve_cu_attention into o and v, carve_cu_conv2d of the pe) on the same inputs:
// fused (one launch, o and v left as they were) within float32's summation orders; with the GEMM path, the two
// calls exactly. 3x3 and 5x5 windows, SiLU or none, a batch of 3; the outputs spread; refusals.
static void test_attention_pe(TestCtx& t) {
  TestRng rng(28);
  const uint32_t h = 5, w = 7, n = h * w, heads = 2, kd = 8, hd = 16, c = heads * hd, per = 2 * kd + hd;
  const size_t qkv_stride = heads * per + 3, o_stride = c + 2, v_stride = c + 1, out_stride = c + 3;
  const float scale = 1.0f / std::sqrt((float)kd);
  int cases = 0;
  for (carve_cu_attention_impl impl : {CARVE_CU_ATTENTION_FUSED, CARVE_CU_ATTENTION_GEMM}) {
    CHECK_OK(carve_cu_ctx_set_attention_impl(&t.ctx, impl));
    for (uint32_t k : {3u, 5u}) {
      for (uint32_t batch : {1u, 3u}) {
        const carve_cu_act act = k == 5 ? CARVE_CU_ACT_SILU : CARVE_CU_ACT_NONE;
        const carve_cu_conv pe = {k, k, 1, k / 2, c, c, c, h, w, v_stride, out_stride, o_stride, act, batch, 0};
        const std::vector<float> qkv = random_view(rng, batch * n, qkv_stride);
        std::vector<float> wt(c * k * k), b(c);
        for (float& e : wt) e = rng.range(-0.5f, 0.5f);
        for (float& e : b) e = rng.range(-0.5f, 0.5f);
        DevBuf<float> dq(qkv), dw(wt), db(b), o(batch * n * o_stride), v(batch * n * v_stride),
            out(batch * n * out_stride), o2(batch * n * o_stride), v2(batch * n * v_stride),
            out2(batch * n * out_stride), scratch(carve_cu_attention_scratch_floats(batch, n, heads));
        for (DevBuf<float>* d : {&o, &v, &out, &o2, &v2, &out2}) d->upload(std::vector<float>(d->n, kCanary));
        const size_t nodes = attention_pe_and_two_calls<float>(t, {dq.p, qkv_stride, heads, kd, hd, scale, &pe, dw.p,
                                                                   db.p, o.p, v.p, out.p, o2.p, v2.p, out2.p,
                                                                   scratch.p});
        const bool fused = impl == CARVE_CU_ATTENTION_FUSED;
        CHECK_MSG(fused ? nodes == 1 : nodes > 2, "attention_pe k %u batch %u (impl %d): %zu launches", k, batch,
                  (int)impl, nodes);
        const std::vector<float> got = out.download(), want = out2.download(), om = o.download(), vm = v.download();
        double lo = INFINITY, hi = -INFINITY;
        for (size_t i = 0; i < got.size(); i++) {
          const bool pad = i % out_stride >= c;
          const bool ok = pad     ? got[i] == kCanary
                          : fused ? near_float(got[i], want[i], 1e-6 * (std::fabs(want[i]) + 1))
                                  : same_float(got[i], want[i]);
          CHECK_MSG(ok, "attention_pe k %u batch %u (impl %d) [%zu]: %.9g vs %.9g", k, batch, (int)impl, i, got[i],
                    want[i]);
          if (!pad) lo = std::min(lo, (double)want[i]), hi = std::max(hi, (double)want[i]);
        }
        CHECK_MSG(hi - lo > 0.5, "attention_pe: outputs flat (%g .. %g)", lo, hi);
        if (fused) {  // o and v untouched
          for (float e : om) CHECK(e == kCanary);
          for (float e : vm) CHECK(e == kCanary);
        }
        cases++;
      }
    }
  }
  CHECK_OK(carve_cu_ctx_set_attention_impl(&t.ctx, CARVE_CU_ATTENTION_FUSED));  // the refusals on the fused path
  DevBuf<float> dq(n * qkv_stride), dw(c * 9), db(c), o(n * o_stride), v(n * v_stride), out(n * out_stride),
      scratch(carve_cu_attention_scratch_floats(1, n, heads));
  auto refused = [&](carve_cu_conv pe) {
    return carve_cu_attention_pe(&t.ctx, dq.p, qkv_stride, heads, kd, hd, scale, o.p, v.p, &pe, dw.p, db.p, out.p,
                                 scratch.p) == CARVE_ERR_INVALID_ARGUMENT;
  };
  const carve_cu_conv good = {3, 3, 1, 1, c, c, c, h, w, v_stride, out_stride, o_stride, CARVE_CU_ACT_NONE, 1, 0};
  carve_cu_conv bad = good;
  bad.groups = 1;  // not depthwise
  CHECK(refused(bad));
  bad = good, bad.stride = 2;
  CHECK(refused(bad));
  bad = good, bad.pad = 0;
  CHECK(refused(bad));
  bad = good, bad.kh = bad.kw = 2;
  CHECK(refused(bad));
  bad = good, bad.cin = bad.cout = bad.groups = c / 2;  // not heads head_dim channels
  CHECK(refused(bad));
  bad = good, bad.res_stride = c - 1;  // o too narrow
  CHECK(refused(bad));
  CHECK(carve_cu_attention_pe(&t.ctx, dq.p, qkv_stride, heads, kd, hd, scale, o.p, v.p, nullptr, dw.p, db.p, out.p,
                              scratch.p) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK_OK(carve_cu_ctx_set_attention_impl(&t.ctx, CARVE_CU_ATTENTION_GEMM));  // the default again
  std::printf("attention + pe: %d cases, fused against the two calls, the GEMM path equal to them; refusals\n", cases);
}

static void test_mask_logits(TestCtx& t) {
  TestRng rng(26);
  const size_t n = 7, nm = 32, row_stride = 38, coef = 6, ph = 9, pw = 11, proto_stride = 35;
  const std::vector<float> rows = random_view(rng, n, row_stride), protos = random_view(rng, ph * pw, proto_stride);
  std::vector<float> cpu(n * ph * pw);
  carve_view pv = {const_cast<float*>(protos.data()), ph, pw, nm, proto_stride};
  CHECK_OK(carve_mask_logits(rows.data(), n, row_stride, coef, &pv, cpu.data(), nullptr));
  DevBuf<float> dr(rows), dp(protos), dl(n * ph * pw);
  CHECK_OK(carve_cu_mask_logits(&t.ctx, dr.p, n, row_stride, coef, dp.p, (uint32_t)ph, (uint32_t)pw, (uint32_t)nm,
                                proto_stride, dl.p));
  t.sync();
  const std::vector<float> got = dl.download();
  for (size_t i = 0; i < cpu.size(); i++)
    CHECK_MSG(near_float(got[i], cpu[i], 1e-5 * (std::fabs(cpu[i]) + 1)), "mask logits [%zu]: %g vs %g", i, got[i],
              cpu[i]);
  CHECK(carve_cu_mask_logits(&t.ctx, dr.p, n, coef + nm - 1, coef, dp.p, 9, 11, 32, proto_stride, dl.p) ==
        CARVE_ERR_INVALID_ARGUMENT);
  std::printf("mask logits: ok\n");
}

// ---- Weights and caller-owned contexts ---------------------------------------------------

// Every one of the 65536 half patterns widened on the device, bit for bit the CPU runtime's
// carve_f16_to_f32 (zeros, subnormals, normals, infinities, NaN payloads).
static void test_f16(TestCtx& t) {
  const size_t n = 65536;
  std::vector<uint16_t> halves(n);
  for (size_t i = 0; i < n; i++) halves[i] = (uint16_t)i;
  std::vector<float> cpu(n);
  carve_f16_to_f32(halves.data(), cpu.data(), n);  // little-endian host: the words as stored
  DevBuf<uint16_t> dh(halves);
  DevBuf<float> df(n);
  CHECK_OK(carve_cu_f16_to_f32(&t.ctx, dh.p, df.p, n));
  t.sync();
  const std::vector<float> got = df.download();
  for (size_t i = 0; i < n; i++) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &cpu[i], 4);
    CHECK_MSG(a == b, "half 0x%04zx: device 0x%08x, carve_f16_to_f32 0x%08x", i, a, b);
  }
  CHECK_OK(carve_cu_f16_to_f32(&t.ctx, nullptr, nullptr, 0));
  CHECK(carve_cu_f16_to_f32(&t.ctx, nullptr, df.p, 4) == CARVE_ERR_INVALID_ARGUMENT);
  std::printf("f16 widening: ok (65536 halves bit-exact)\n");
}

// carve_cu_ctx_init_with: the caller's workspace (too small: refused) and, optionally, handle;
// destroy releases only what it created.
static void test_ctx_init_with(TestCtx& t) {
  const size_t need = carve_cu_blas_workspace_bytes();
  CHECK(need == CARVE_CU_BLAS_WORKSPACE_BYTES || need == CARVE_CU_BLAS_WORKSPACE_BYTES_SM90);
  DevScratch ws(need);
  carve_cu_ctx c;
  CHECK(carve_cu_ctx_init_with(&c, t.stream, nullptr, ws.get(), need - 1) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_ctx_init_with(&c, t.stream, nullptr, nullptr, need) == CARVE_ERR_INVALID_ARGUMENT);
  cublasHandle_t mine = nullptr;
  CHECK(cublasCreate(&mine) == CUBLAS_STATUS_SUCCESS);
#ifdef CARVE_CUDA_EMULATION
  const carve_emu::Allocs before = carve_emu_allocs();
#endif
  CHECK_OK(carve_cu_ctx_init_with(&c, t.stream, mine, ws.get(), need));
#ifdef CARVE_CUDA_EMULATION
  CHECK(carve_emu_allocs().cuda_malloc == before.cuda_malloc && carve_emu_allocs().blas_create == before.blas_create);
#endif
  CHECK(c.blas == mine && c.blas_workspace == ws.get() && !c.owns_blas && !c.owns_workspace);
  // the split-K counters: the workspace's last CARVE_CU_SPLIT_BYTES, zeroed; cuBLAS gets the rest
  CHECK(c.blas_workspace_bytes == need - CARVE_CU_SPLIT_BYTES &&
        (unsigned char*)c.split_counters == (unsigned char*)ws.get() + need - CARVE_CU_SPLIT_BYTES);
  {
    std::vector<unsigned> counters(CARVE_CU_SPLIT_BYTES / sizeof(unsigned), 1u);
    CHECK_CUDA(cudaStreamSynchronize(t.stream));
    CHECK_CUDA(cudaMemcpy(counters.data(), c.split_counters, CARVE_CU_SPLIT_BYTES, cudaMemcpyDeviceToHost));
    for (unsigned v : counters) CHECK(v == 0);
  }
  // it computes like a context of its own: one linear layer against the one of t.ctx
  TestRng rng(7);
  std::vector<float> x(33), w(33 * 5), b(5);
  for (float& v : x) v = rng.normal();
  for (float& v : w) v = rng.normal();
  for (float& v : b) v = rng.normal();
  DevBuf<float> dx(x), dw(w), db(b), y1(5), y2(5);
  CHECK_OK(carve_cu_linear(&c, 1, 33, 5, dx.p, dw.p, db.p, y1.p));
  CHECK_OK(carve_cu_linear(&t.ctx, 1, 33, 5, dx.p, dw.p, db.p, y2.p));
  t.sync();
  const std::vector<float> a = y1.download(), e = y2.download();
  for (size_t i = 0; i < 5; i++) CHECK(same_float(a[i], e[i]));
  carve_cu_ctx_destroy(&c);
  cudaStream_t s = nullptr;
  CHECK(cublasGetStream(mine, &s) == CUBLAS_STATUS_SUCCESS && s == t.stream);  // still the caller's, alive
  CHECK(cublasDestroy(mine) == CUBLAS_STATUS_SUCCESS);
  // without a handle: created here, destroyed by destroy
  CHECK_OK(carve_cu_ctx_init_with(&c, t.stream, nullptr, ws.get(), need));
  CHECK(c.owns_blas && !c.owns_workspace);
  carve_cu_ctx_destroy(&c);
  CHECK(c.blas == nullptr && c.blas_workspace == nullptr);
  std::printf("ctx_init_with: ok\n");
}

// ---- Errors ------------------------------------------------------------------------------

__global__ void noop_kernel(int v) { (void)v; }

static void test_errors(TestCtx& t) {
  DevBuf<float> d(64);
  // A failed launch before a call is reported by the call's launch check.
  CARVE_LAUNCH(noop_kernel, 0, 32, t.stream, 1);
  CHECK(carve_cu_copy(&t.ctx, 4, 4, d.p, 4, d.p + 16, 4) == CARVE_ERR_BACKEND);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK_OK(carve_cu_copy(&t.ctx, 4, 4, d.p, 4, d.p + 16, 4));
  CHECK(carve_cu_add(&t.ctx, 4, 4, d.p, 3, d.p, 4, d.p, 4) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_upsample2x(&t.ctx, 2, 2, 4, nullptr, 4, d.p, 4) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_maxpool2d(&t.ctx, 1, 2, 2, 4, 5, 1, 1, d.p, 4, d.p, 4) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_maxpool2d(&t.ctx, 0, 2, 2, 4, 3, 1, 1, d.p, 4, d.p, 4) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_softmax(&t.ctx, 1, 0, d.p, d.p) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_softmax(&t.ctx, 0, 4, d.p, d.p) == CARVE_ERR_INVALID_ARGUMENT);
  carve_cu_ctx empty = {};  // no cuBLAS handle
  empty.stream = t.stream;
  CHECK(carve_cu_linear(&empty, 1, 4, 4, d.p, d.p, d.p, d.p) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_linear(&t.ctx, 0, 4, 4, d.p, d.p, d.p, d.p) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_ctx_init(nullptr, t.stream) == CARVE_ERR_INVALID_ARGUMENT);
  carve_cu_ctx_destroy(nullptr);
  std::printf("errors: ok\n");
}

// carve_cu_ctx_lane: a context on another stream with a part of main's workspace and main's handle, which every
// cuBLAS call binds to its caller's stream and workspace: the lane's and main's GEMMs give the same results on
// their own streams, the handle is bound to the stream of the last call, destroy frees nothing of a lane's and
// binds a caller's handle back to main's stream; argument errors.
static void test_lanes(TestCtx& t) {
  carve_cu_ctx main_ctx;
  cublasHandle_t handle;
  CHECK(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  DevBuf<unsigned char> ws(carve_cu_blas_workspace_bytes());
  CHECK_OK(carve_cu_ctx_init_with(&main_ctx, t.stream, handle, ws.p, ws.n));
  cudaStream_t s2;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  const size_t half = main_ctx.blas_workspace_bytes / 2 / 256 * 256;  // lanes within the cuBLAS share
  carve_cu_ctx lane;
  CHECK(carve_cu_ctx_lane(nullptr, s2, ws.p + half, half, &lane) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_ctx_lane(&main_ctx, s2, nullptr, half, &lane) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_ctx_lane(&main_ctx, s2, ws.p + half, 0, &lane) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_ctx_lane(&main_ctx, s2, ws.p + half, half, nullptr) == CARVE_ERR_INVALID_ARGUMENT);
  carve_cu_ctx no_handle = {};
  CHECK(carve_cu_ctx_lane(&no_handle, s2, ws.p + half, half, &lane) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(!main_ctx.rebind);
  CHECK_OK(carve_cu_ctx_lane(&main_ctx, s2, ws.p + half, half, &lane));
  CHECK(lane.rebind && main_ctx.rebind && lane.blas == handle && lane.stream == s2 && !lane.owns_blas &&
        !lane.owns_workspace && lane.blas_workspace == ws.p + half && lane.blas_workspace_bytes == half);
  // the lane's split-K counters: main's next group; past the last group, none
  CHECK(lane.split_counters == main_ctx.split_counters + CARVE_CU_SPLIT_COUNTERS && main_ctx.split_lanes == 1);
  {
    carve_cu_ctx more;
    for (unsigned g = 2; g < CARVE_CU_SPLIT_GROUPS; g++) {
      CHECK_OK(carve_cu_ctx_lane(&main_ctx, s2, ws.p + half, half, &more));
      CHECK(more.split_counters == main_ctx.split_counters + (size_t)g * CARVE_CU_SPLIT_COUNTERS);
    }
    CHECK_OK(carve_cu_ctx_lane(&main_ctx, s2, ws.p + half, half, &more));
    CHECK(more.split_counters == nullptr);
  }

  const uint32_t cin = 37, cout = 11;
  TestRng rng(77);
  std::vector<float> hw(cin * cout), hx(cin), hb(cout);
  for (float& v : hw) v = rng.range(-1.0f, 1.0f);
  for (float& v : hx) v = rng.range(-1.0f, 1.0f);
  for (float& v : hb) v = rng.range(-1.0f, 1.0f);
  DevBuf<float> w(hw), x(hx), b(hb), y_lane(cout), y_main(cout);
  cudaStream_t bound = nullptr;
  CHECK_OK(carve_cu_linear(&lane, 1, cin, cout, x.p, w.p, b.p, y_lane.p));
  CHECK(cublasGetStream(handle, &bound) == CUBLAS_STATUS_SUCCESS && bound == s2);
  CHECK_CUDA(cudaStreamSynchronize(s2));
  CHECK_OK(carve_cu_linear(&main_ctx, 1, cin, cout, x.p, w.p, b.p, y_main.p));
  CHECK(cublasGetStream(handle, &bound) == CUBLAS_STATUS_SUCCESS && bound == t.stream);
  CHECK_CUDA(cudaStreamSynchronize(t.stream));
  const std::vector<float> a = y_lane.download(), m = y_main.download();
  double spread = 0.0;
  for (uint32_t o = 0; o < cout; o++) {
    CHECK_MSG(a[o] == m[o], "lane vs main: output %u %.9g vs %.9g", o, a[o], m[o]);
    spread = std::max(spread, std::fabs((double)a[o] - a[0]));
  }
  CHECK(spread > 0.1);
  CHECK_OK(carve_cu_linear(&lane, 1, cin, cout, x.p, w.p, b.p, y_lane.p));  // the handle on s2 again
  CHECK_CUDA(cudaStreamSynchronize(s2));
  carve_cu_ctx_destroy(&lane);  // owns nothing
  carve_cu_ctx_destroy(&main_ctx);  // the caller's handle: bound to main's stream again, not destroyed
  CHECK(cublasGetStream(handle, &bound) == CUBLAS_STATUS_SUCCESS && bound == t.stream);
  CHECK(cublasDestroy(handle) == CUBLAS_STATUS_SUCCESS);
  CHECK_CUDA(cudaStreamDestroy(s2));
  std::printf("lanes: ok\n");
}

// carve_cu_graph_depth: the longest dependency chain of a captured graph, against graphs whose chains are known: a
// fork after copy 1 (copies 2, 3, 4 on a second stream beside copy 5), joined before copy 6: 6 nodes, 5 in series
// (1, 2, 3, 4, 6); the same copies on one stream: 6 in series; one node; NULL.
static void test_graph_depth(TestCtx& t) {
  cudaStream_t s2;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  carve_cu_ctx side;
  CHECK_OK(carve_cu_ctx_init(&side, s2));
  cudaEvent_t fork, join;
  CHECK_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  DevBuf<float> x(std::vector<float>(64, 1.0f)), y(6 * 64);
  const auto copy = [&](const carve_cu_ctx* ctx, int i) { return carve_cu_copy(ctx, 16, 4, x.p, 4, y.p + i * 64, 4); };
  const auto check_depth = [&](bool forked, size_t want_nodes, size_t want_depth, const char* what) {
    cudaGraph_t graph = captured_graph(t, [&]() {
      carve_status st = copy(&t.ctx, 0);
      if (forked) {
        CHECK_CUDA(cudaEventRecord(fork, t.stream));
        CHECK_CUDA(cudaStreamWaitEvent(s2, fork, 0));
      }
      for (int i = 1; i <= 3; i++) st = st == CARVE_OK ? copy(forked ? &side : &t.ctx, i) : st;
      st = st == CARVE_OK ? copy(&t.ctx, 4) : st;
      if (forked) {
        CHECK_CUDA(cudaEventRecord(join, s2));
        CHECK_CUDA(cudaStreamWaitEvent(t.stream, join, 0));
      }
      return st == CARVE_OK ? copy(&t.ctx, 5) : st;
    });
    const size_t nodes = graph_nodes(graph), depth = carve_cu_graph_depth(graph);
    CHECK_MSG(nodes == want_nodes && depth == want_depth, "graph depth, %s: %zu nodes, %zu in series; want %zu, %zu",
              what, nodes, depth, want_nodes, want_depth);
    CHECK_CUDA(cudaGraphDestroy(graph));
  };
  check_depth(true, 6, 5, "a fork of 3 beside 1");
  check_depth(false, 6, 6, "one stream");
  cudaGraph_t one = captured_graph(t, [&]() { return copy(&t.ctx, 0); });
  CHECK(carve_cu_graph_depth(one) == 1);
  CHECK_CUDA(cudaGraphDestroy(one));
  CHECK(carve_cu_graph_depth(nullptr) == 0);
  CHECK(cudaPeekAtLastError() == cudaSuccess);  // the queries leave no error behind (the edges are programmatic)
  CHECK_CUDA(cudaEventDestroy(fork));
  CHECK_CUDA(cudaEventDestroy(join));
  carve_cu_ctx_destroy(&side);
  CHECK_CUDA(cudaStreamDestroy(s2));
  std::printf("graph depth: ok (a fork: 6 nodes, 5 in series; one stream: 6)\n");
}

int main() {
  TestCtx t;
  test_conv(t);
  test_conv_direct(t);
  test_deconv(t);
  test_elementwise(t);
  test_linear_softmax(t);
  test_attention(t);
  test_attention_batch(t);
  test_attention_pe(t);
  test_mask_logits(t);
  test_f16(t);
  test_ctx_init_with(t);
  test_errors(t);
  test_lanes(t);
  test_graph_depth(t);
  std::printf("test_ops: all ok\n");
  return 0;
}
