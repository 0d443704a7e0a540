// tests/cuda/test_f16.cu: the half-precision runtime (runtime/carve_cuda_f16.cu) and the
// emulation's __half (tests/cuda/cuda_emu_f16.h):
//   * __half2float of every one of the 65536 halves against the CPU runtime's carve_f16_to_f32
//     (an independent implementation); __float2half of 2^20 random floats and of every half's
//     neighbours and midpoints is the nearest half, ties to even (checked in double), overflow
//     to inf at 65520, NaN kept NaN;
//   * the input's cast (f32 -> f16, dense) exact;
//   * conv2d (1x1 GEMM, im2col + GEMM with chunks, depthwise, the direct kernel of the few-input-channel
//     convs (the stem; batches of 3, the cuBLAS and the fused impl alike: one launch, the same bits);
//     bias, SiLU, residual) against a double-precision loop on the same half inputs, within the roundings
//     the kernels make (the GEMM's result and the epilogue's store: 2^-11 each, relative, plus float
//     accumulation; depthwise and direct: the store only);
//   * maxpool, upsample, copy (moves of halves: exact), add (half(float(a) + float(b)): exact);
//   * attention against a double loop, within fp16's scores / probabilities / output roundings; a batch
//     (per image or per head) against each image alone, bit for bit under the emulation;
//   * strided outputs: the channels between views never written; argument errors;
//   * carve_cu_ctx_f16_math: the handle's math mode (tensor cores, float32 reductions).

#include "carve_cuda_direct.h"
#include "carve_cuda_f16.h"
#include "carve_weights.h"
#include "cuda_test.h"
#include "pool_chain_check.h"

static const unsigned short kCanaryBits = 0x7bffu;  // 65504: never a result here
static const double kU = 1.0 / 2048.0;               // fp16's unit roundoff 2^-11
// The float accumulation of a GEMM, relative to the sum of |products|: the emulation's host GEMM is float32
// (2^-22 covers its summation of these sizes); tensor cores accumulate in float32 with their own alignment
// of the products, looser (on a GPU).
#ifdef CARVE_CUDA_EMULATION
static const double kAcc = 0x1p-22;
#else
static const double kAcc = 0x1p-16;
#endif

static float h2f(__half h) { return __half2float(h); }
static __half f2h(float f) { return __float2half(f); }

static std::vector<__half> random_halves(TestRng& rng, size_t n, float scale) {
  std::vector<__half> v(n);
  for (auto& x : v) x = f2h(rng.normal() * scale);
  return v;
}

// ---- Conversions ---------------------------------------------------------------------------------

// Whether h is the binary16 nearest to f, ties to even (f finite, |f| < 65520).
static bool nearest_half(float f, unsigned short h) {
  const double x = f, got = h2f(__ushort_as_half(h));
  if (std::isinf(got)) return false;
  for (int d = -1; d <= 1; d += 2) {
    const unsigned short o = (unsigned short)(h + d);
    if (((h + d) & 0x7c00) == 0x7c00 || (h == 0 && d < 0) || (h == 0x8000 && d < 0)) continue;
    const double other = h2f(__ushort_as_half(o));
    const double eg = std::fabs(x - got), eo = std::fabs(x - other);
    if (eo < eg || (eo == eg && (h & 1) != 0)) return false;
  }
  return true;
}

static void test_conversions() {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); i++) all[i] = (uint16_t)i;
  std::vector<float> want(all.size());
  CHECK_OK(carve_f16_to_f32(all.data(), want.data(), all.size()));
  for (size_t i = 0; i < all.size(); i++) {
    CHECK_MSG(same_float(h2f(__ushort_as_half((unsigned short)i)), want[i]), "half 0x%04zx widened wrong", i);
  }
  // round trip of every finite half, and the midpoints / neighbours of each
  for (uint32_t i = 0; i < 65536; i++) {
    if ((i & 0x7c00u) == 0x7c00u) continue;
    const float v = want[i];
    CHECK_MSG(__half_as_ushort(f2h(v)) == i || (v == 0.0f && (i & 0x7fffu) == 0), "half 0x%04x no round trip", i);
    const float next = std::nextafter(v, v < 0 ? -INFINITY : INFINITY);
    for (float f : {next, std::nextafter(v, 0.0f), (float)((double)v * (1 + kU))}) {
      if (std::fabs(f) < 65520.0f) {
        CHECK_MSG(nearest_half(f, __half_as_ushort(f2h(f))), "float %.9g -> 0x%04x not nearest", f,
                  __half_as_ushort(f2h(f)));
      }
    }
  }
  TestRng rng(7);
  for (int i = 0; i < (1 << 20); i++) {
    uint32_t u = (uint32_t)rng.next();
    u = (u & 0x80000000u) | (0x30000000u + u % 0x17800000u);  // |f| from 2^-31 to ~2^16
    float f;
    std::memcpy(&f, &u, 4);
    const unsigned short h = __half_as_ushort(f2h(f));
    if (std::fabs(f) >= 65520.0f) {
      CHECK_MSG((h & 0x7fffu) == 0x7c00u, "float %.9g should overflow to inf", f);
    } else {
      CHECK_MSG(nearest_half(f, h), "float %.9g -> 0x%04x not nearest", f, h);
    }
  }
  CHECK(__half_as_ushort(f2h(65519.99f)) == 0x7bffu);
  CHECK(__half_as_ushort(f2h(65520.0f)) == 0x7c00u);
  CHECK(std::isnan(h2f(f2h(NAN))));
  CHECK(__half_as_ushort(f2h(-INFINITY)) == 0xfc00u);
}

static void test_casts(TestCtx& t) {
  TestRng rng(11);
  const size_t pixels = 37, c = 5;
  std::vector<float> x(pixels * c);
  for (auto& v : x) v = rng.normal() * 100.0f;
  DevBuf<float> dx(x);
  DevBuf<__half> dh(pixels * c);
  CHECK_OK(carve_cu_f32_to_f16(&t.ctx, dx.p, dh.p, x.size()));
  t.sync();
  const std::vector<__half> h = dh.download();
  for (size_t i = 0; i < x.size(); i++) CHECK(__half_as_ushort(h[i]) == __half_as_ushort(f2h(x[i])));
  CHECK(carve_cu_f32_to_f16(&t.ctx, NULL, dh.p, 4) == CARVE_ERR_INVALID_ARGUMENT);
}

// ---- Convolution -------------------------------------------------------------------------------

struct Case {
  uint32_t k, stride, pad, groups, cin, cout, h, w;
  bool residual;
  carve_cu_act act;
  bool dense = false;  // strides = channels (multiples of 8 here): the 16-byte im2col / epilogue kernels
  uint32_t batch = 1;  // images one after another in each view
};

// Returns the output (batch oh ow out_stride halves) for the callers that compare two runs.
static std::vector<__half> test_conv_case(TestCtx& t, const Case& cs, uint64_t seed) {
  TestRng rng(seed);
  const size_t in_stride = cs.cin + (cs.dense ? 0 : 3), out_stride = cs.cout + (cs.dense ? 0 : 2),
               res_stride = cs.cout + (cs.dense ? 0 : 1);
  const size_t oh = (cs.h + 2 * cs.pad - cs.k) / cs.stride + 1, ow = (cs.w + 2 * cs.pad - cs.k) / cs.stride + 1;
  const size_t cin_g = cs.groups == 1 ? cs.cin : 1;
  const size_t kk = (size_t)cs.k * cs.k * cin_g;
  const size_t nb = cs.batch, ipix = (size_t)cs.h * cs.w, opix = oh * ow;
  const std::vector<__half> x = random_halves(rng, nb * ipix * in_stride, 1.0f);
  const std::vector<__half> wt = random_halves(rng, cs.cout * kk, 1.0f / std::sqrt((float)kk));
  const std::vector<__half> b = random_halves(rng, cs.cout, 0.5f);
  const std::vector<__half> r = random_halves(rng, nb * opix * res_stride, 1.0f);
  std::vector<__half> y0(nb * opix * out_stride, __ushort_as_half(kCanaryBits));
  DevBuf<__half> dx(x), dw(wt), db(b), dr(r), dy(y0);
  const carve_cu_conv c = {cs.k, cs.k, cs.stride, cs.pad, cs.groups, cs.cin, cs.cout, cs.h, cs.w,
                           in_stride, out_stride, res_stride, cs.act, cs.batch, 0};
  // The direct kernel (few input channels): float accumulation, one rounding at the store (no half GEMM
  // result), no scratch (NULL: a use would fault).
  const bool direct = carve_cu_conv_direct(&c) != 0;
  const size_t scratch_floats = carve_cu_conv2d_scratch_floats(&c);
  CHECK(!direct || scratch_floats == 0);
  DevBuf<float> scratch(scratch_floats + 1);
  CHECK_OK(carve_cu_conv2d(&t.ctx, &c, dx.p, dw.p, db.p, cs.residual ? dr.p : nullptr, dy.p,
                           scratch_floats ? scratch.p : nullptr));
  t.sync();
  const std::vector<__half> y = dy.download();
  for (size_t img = 0; img < nb; img++)
  for (size_t oy = 0; oy < oh; oy++) {
    for (size_t ox = 0; ox < ow; ox++) {
      const size_t p = img * opix + oy * ow + ox;
      const __half* const xb = x.data() + img * ipix * in_stride;
      for (size_t o = 0; o < out_stride; o++) {
        const unsigned short got_bits = __half_as_ushort(y[p * out_stride + o]);
        if (o >= cs.cout) {
          CHECK_MSG(got_bits == kCanaryBits, "conv: pixel %zu channel %zu (padding) overwritten", p, o);
          continue;
        }
        double s = 0.0, mag = 0.0;
        for (uint32_t ky = 0; ky < cs.k; ky++) {
          for (uint32_t kx = 0; kx < cs.k; kx++) {
            const long long iy = (long long)(oy * cs.stride + ky) - cs.pad;
            const long long ix = (long long)(ox * cs.stride + kx) - cs.pad;
            if (iy < 0 || ix < 0 || iy >= cs.h || ix >= cs.w) continue;
            for (size_t i = 0; i < cin_g; i++) {
              const size_t ci = cs.groups == 1 ? i : o;
              const double v = (double)h2f(xb[((size_t)iy * cs.w + (size_t)ix) * in_stride + ci]) *
                               h2f(wt[o * kk + ((size_t)ky * cs.k + kx) * cin_g + i]);
              s += v;
              mag += std::fabs(v);
            }
          }
        }
        double v = s + h2f(b[o]);
        if (cs.act == CARVE_CU_ACT_SILU) v = v / (1.0 + std::exp(-v));
        const double rr = cs.residual ? h2f(r[p * res_stride + o]) : 0.0;
        const double want = v + rr;
        // the GEMM's half result (1x1 / im2col: u |s|; depthwise: no rounding, allowed all the same; direct:
        // none, held to it), the float sums (kAcc mag), SiLU's slope <= 1.1, the epilogue's store (u |want|)
        const double gemm_round = direct ? 0.0 : kU * std::fabs(s);
        const double tol = 1.1 * (gemm_round + kAcc * mag) + kU * (std::fabs(want) + std::fabs(rr)) + 1e-7;
        const double got = h2f(__ushort_as_half(got_bits));
        CHECK_MSG(near_float(got, want, tol),
                  "conv k%u s%u g%u %ux%u batch %u%s: pixel %zu channel %zu: %.7g vs %.7g (tol %.3g)", cs.k, cs.stride,
                  cs.groups, cs.cin, cs.cout, cs.batch, t.ctx.conv_fused ? " fused" : "", p, o, got, want, tol);
      }
    }
  }
  return y;
}

static void test_conv(TestCtx& t) {
  const Case cases[] = {
      {1, 1, 0, 1, 19, 13, 7, 9, false, CARVE_CU_ACT_SILU},    // one GEMM on the view
      {1, 1, 0, 1, 8, 24, 5, 3, true, CARVE_CU_ACT_NONE},      // GEMM + residual
      {3, 1, 1, 1, 11, 10, 9, 8, true, CARVE_CU_ACT_SILU},     // im2col + GEMM
      {3, 2, 1, 1, 6, 7, 11, 10, false, CARVE_CU_ACT_SILU},    // strided im2col
      {3, 1, 1, 1, 1536, 4, 40, 40, false, CARVE_CU_ACT_NONE},  // im2col in several chunks
      {3, 1, 1, 9, 9, 9, 7, 6, true, CARVE_CU_ACT_SILU},       // depthwise
      {7, 2, 3, 5, 5, 5, 12, 9, false, CARVE_CU_ACT_NONE},     // depthwise 7x7 / 2
      {3, 1, 1, 1, 16, 16, 9, 8, true, CARVE_CU_ACT_SILU, true},  // 8-half vectors: im2col, epilogue + residual
      {3, 2, 1, 1, 8, 24, 11, 10, false, CARVE_CU_ACT_NONE, true},  // vectors, strided im2col
      {1, 1, 0, 1, 32, 40, 5, 7, false, CARVE_CU_ACT_SILU, true},  // vector epilogue after one GEMM
      {3, 1, 1, 16, 16, 16, 9, 8, true, CARVE_CU_ACT_SILU, true},  // depthwise, 8-half vectors + residual
      {5, 2, 2, 24, 24, 24, 11, 10, false, CARVE_CU_ACT_NONE, true},  // depthwise 5x5 / 2, vectors
      {3, 1, 1, 688, 688, 688, 5, 4, true, CARVE_CU_ACT_SILU, true},  // depthwise, weights past the shared stage
  };
  uint64_t seed = 100;
  for (const Case& cs : cases) test_conv_case(t, cs, seed++);
  // The direct kernel of the few-input-channel convs (runtime/carve_cuda_direct.h: the stem), batches of 1
  // and 3: 16-byte stores (cout a multiple of 8 halves, dense views), scalar ones (cout 24 strided, cout 13,
  // cout 20), 3 slices of 32 channels (80). With the fused impl requested it is the same kernel: one launch,
  // the same halves bit for bit.
  const Case direct[] = {
      {3, 2, 1, 1, 3, 16, 13, 11, false, CARVE_CU_ACT_SILU, true, 1},  // yolo26n's stem, odd size
      {3, 2, 1, 1, 3, 16, 13, 11, true, CARVE_CU_ACT_SILU, true, 3},   // + residual, batch 3
      {3, 2, 1, 1, 3, 24, 12, 9, true, CARVE_CU_ACT_NONE, false, 3},   // strided views: scalar stores
      {3, 2, 1, 1, 3, 80, 13, 11, false, CARVE_CU_ACT_SILU, true, 3},  // 3 slices, vectors
      {3, 2, 1, 1, 3, 13, 11, 13, true, CARVE_CU_ACT_SILU, true, 1},   // a partial group: scalar
      {3, 1, 1, 1, 4, 20, 9, 7, false, CARVE_CU_ACT_SILU, true, 3},    // cin 4, stride 1, cout 20: scalar
      {4, 2, 1, 1, 4, 32, 10, 9, false, CARVE_CU_ACT_NONE, true, 1},   // K 64
  };
  for (const Case& cs : direct) {
    const carve_cu_conv c = {cs.k, cs.k, cs.stride, cs.pad, 1, cs.cin, cs.cout, cs.h, cs.w, cs.cin, cs.cout,
                             cs.cout, cs.act, cs.batch, 0};
    CHECK(carve_cu_conv_direct(&c));
    const std::vector<__half> gemm = test_conv_case(t, cs, seed);
    CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_FUSED));
    CHECK(t.ctx.conv_fused == 1);
    const std::vector<__half> fused = test_conv_case(t, cs, seed++);
    CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
    CHECK(gemm.size() == fused.size());
    for (size_t i = 0; i < gemm.size(); i++) CHECK(__half_as_ushort(gemm[i]) == __half_as_ushort(fused[i]));
  }
}

// ---- Moves and add ---------------------------------------------------------------------------------

// Max pool 3x3 / 1 and the 2x upsample of a (5, 7, c) view: c = 6 (strides 9 / 8) takes the scalar kernels,
// c = 16 (strides 24 / 32) the 16-byte ones.
static void check_pool_upsample(TestCtx& t, TestRng& rng, uint32_t c, size_t in_stride, size_t out_stride) {
  const uint32_t h = 5, w = 7;
  const std::vector<__half> x = random_halves(rng, (size_t)h * w * in_stride, 3.0f);
  DevBuf<__half> dx(x);
  auto at = [&](const std::vector<__half>& v, size_t p, size_t ch) { return h2f(v[p * in_stride + ch]); };
  {  // maxpool 3x3 / 1, pad 1 (-inf padding)
    std::vector<__half> y0((size_t)h * w * out_stride, __ushort_as_half(kCanaryBits));
    DevBuf<__half> dy(y0);
    CHECK_OK(carve_cu_maxpool2d(&t.ctx, 1, h, w, c, 3, 1, 1, dx.p, in_stride, dy.p, out_stride));
    t.sync();
    const std::vector<__half> y = dy.download();
    for (uint32_t oy = 0; oy < h; oy++) {
      for (uint32_t ox = 0; ox < w; ox++) {
        for (uint32_t ch = 0; ch < c; ch++) {
          float m = -INFINITY;
          for (int dy_ = -1; dy_ <= 1; dy_++) {
            for (int dx_ = -1; dx_ <= 1; dx_++) {
              const int iy = (int)oy + dy_, ix = (int)ox + dx_;
              if (iy >= 0 && ix >= 0 && iy < (int)h && ix < (int)w) m = std::max(m, at(x, (size_t)iy * w + ix, ch));
            }
          }
          CHECK(same_float(h2f(y[((size_t)oy * w + ox) * out_stride + ch]), m));
        }
        CHECK(__half_as_ushort(y[((size_t)oy * w + ox) * out_stride + c]) == kCanaryBits);
      }
    }
  }
  {  // upsample 2x
    std::vector<__half> y0((size_t)4 * h * w * out_stride, __ushort_as_half(kCanaryBits));
    DevBuf<__half> dy(y0);
    CHECK_OK(carve_cu_upsample2x(&t.ctx, h, w, c, dx.p, in_stride, dy.p, out_stride));
    t.sync();
    const std::vector<__half> y = dy.download();
    for (size_t oy = 0; oy < 2 * h; oy++) {
      for (size_t ox = 0; ox < 2 * w; ox++) {
        for (uint32_t ch = 0; ch < c; ch++) {
          CHECK(same_float(h2f(y[(oy * 2 * w + ox) * out_stride + ch]), at(x, (oy / 2) * w + ox / 2, ch)));
        }
      }
    }
  }
}

static void test_elementwise(TestCtx& t) {
  TestRng rng(21);
  check_pool_upsample(t, rng, 6, 9, 8);
  check_pool_upsample(t, rng, 16, 24, 32);
  check_pool_chains<__half>(t, [&](size_t n) { return random_halves(rng, n, 3.0f); }, __ushort_as_half(0x7e00u));
  const uint32_t h = 5, w = 7, c = 6;
  const size_t in_stride = 9, out_stride = 8;
  const std::vector<__half> x = random_halves(rng, (size_t)h * w * in_stride, 3.0f);
  const std::vector<__half> x2 = random_halves(rng, (size_t)h * w * in_stride, 3.0f);
  DevBuf<__half> dx(x), dx2(x2);
  auto at = [&](const std::vector<__half>& v, size_t p, size_t ch) { return h2f(v[p * in_stride + ch]); };
  {  // copy and add
    const size_t pixels = (size_t)h * w;
    std::vector<__half> y0(pixels * out_stride, __ushort_as_half(kCanaryBits));
    DevBuf<__half> dc(y0), da(y0);
    CHECK_OK(carve_cu_copy(&t.ctx, pixels, c, dx.p, in_stride, dc.p, out_stride));
    CHECK_OK(carve_cu_add(&t.ctx, pixels, c, dx.p, in_stride, dx2.p, in_stride, da.p, out_stride));
    t.sync();
    const std::vector<__half> yc = dc.download(), ya = da.download();
    for (size_t p = 0; p < pixels; p++) {
      for (size_t ch = 0; ch < out_stride; ch++) {
        if (ch >= c) {
          CHECK(__half_as_ushort(yc[p * out_stride + ch]) == kCanaryBits);
          CHECK(__half_as_ushort(ya[p * out_stride + ch]) == kCanaryBits);
          continue;
        }
        CHECK(same_float(h2f(yc[p * out_stride + ch]), at(x, p, ch)));
        CHECK(same_float(h2f(ya[p * out_stride + ch]), h2f(f2h(at(x, p, ch) + at(x2, p, ch)))));
      }
    }
  }
  CHECK(carve_cu_add(&t.ctx, 4, c, dx.p, c - 1, dx2.p, in_stride, dx.p, in_stride) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_maxpool2d(&t.ctx, 1, h, w, c, 3, 0, 1, dx.p, in_stride, dx.p, in_stride) == CARVE_ERR_INVALID_ARGUMENT);
}

// ---- Attention -----------------------------------------------------------------------------------------

static void test_attention(TestCtx& t) {
  TestRng rng(31);
  struct Shape {
    uint32_t n, heads, kd, hd;
  };
  int cases = 0;
  for (carve_cu_attention_impl impl : {CARVE_CU_ATTENTION_FUSED, CARVE_CU_ATTENTION_GEMM}) {
    CHECK_OK(carve_cu_ctx_set_attention_impl(&t.ctx, impl));
    for (const Shape sh : {Shape{20, 2, 8, 16}, Shape{100, 2, 32, 64}}) {  // odd; yolo26's heads
      const uint32_t n = sh.n, heads = sh.heads, kd = sh.kd, hd = sh.hd;
      const size_t per = 2 * kd + hd, qkv_stride = heads * per + 3, out_stride = heads * hd + 1, v_stride = heads * hd;
      const float scale = 1.0f / std::sqrt((float)kd);
      const std::vector<__half> qkv = random_halves(rng, n * qkv_stride, 1.0f);
      DevBuf<__half> dq(qkv), dout(n * out_stride), dv(n * v_stride);
      DevBuf<float> scratch(carve_cu_attention_scratch_floats(1, n, heads));
      const size_t nodes = captured_run(t, [&] {
        return carve_cu_attention(&t.ctx, 1, dq.p, qkv_stride, n, heads, kd, hd, scale, dout.p, out_stride, dv.p,
                                  v_stride, scratch.p);
      });
      CHECK_MSG(impl == CARVE_CU_ATTENTION_FUSED ? nodes == 1 : nodes > 2, "half attention (impl %d): %zu launches",
                (int)impl, nodes);
      const std::vector<__half> out = dout.download(), v = dv.download();
      auto q = [&](size_t i, size_t hh, size_t e) { return (double)h2f(qkv[i * qkv_stride + hh * per + e]); };
      double lo = INFINITY, hi = -INFINITY;
      for (size_t hh = 0; hh < heads; hh++) {
        for (size_t i = 0; i < n; i++) {
          std::vector<double> s(n);
          double m = -INFINITY, sum = 0.0;
          for (size_t j = 0; j < n; j++) {
            double d = 0.0;
            for (size_t e = 0; e < kd; e++) d += q(i, hh, e) * q(j, hh, kd + e);
            s[j] = scale * d;
            m = std::max(m, s[j]);
          }
          for (size_t j = 0; j < n; j++) sum += (s[j] = std::exp(s[j] - m));
          for (size_t e = 0; e < hd; e++) {
            double o = 0.0, mag = 0.0;
            for (size_t j = 0; j < n; j++) {
              o += s[j] / sum * q(j, hh, 2 * kd + e);
              mag += s[j] / sum * std::fabs(q(j, hh, 2 * kd + e));
            }
            // GEMM path: scores rounded to half (u |S| <= u 4 in the exponent), probabilities (u), the output
            // (u |o|); the fused kernel rounds only the output
            const double tol = (4.0 * kU * (1.0 + std::fabs(m)) + 2.0 * kU) * mag + kU * std::fabs(o) + 1e-6;
            const double got = h2f(out[i * out_stride + hh * hd + e]);
            CHECK_MSG(near_float(got, o, tol),
                      "attention (impl %d) n %u head %zu row %zu col %zu: %.6g vs %.6g "
                      "(tol %.3g)",
                      (int)impl, n, hh, i, e, got, o, tol);
            CHECK(same_float(h2f(v[i * v_stride + hh * hd + e]), (float)q(i, hh, 2 * kd + e)));
            lo = std::min(lo, o), hi = std::max(hi, o);
          }
        }
      }
      CHECK_MSG(hi - lo > 0.05, "half attention n %u: the outputs do not spread (%g .. %g)", n, lo, hi);
      CHECK(carve_cu_attention(&t.ctx, 1, dq.p, qkv_stride, n, heads, kd, hd, scale, dout.p, out_stride, dv.p, v_stride,
                               nullptr) == CARVE_ERR_INVALID_ARGUMENT);
      cases++;
    }
  }
  CHECK_OK(carve_cu_ctx_set_attention_impl(&t.ctx, CARVE_CU_ATTENTION_GEMM));  // the default again
  std::printf("half attention: %d cases (fused and the GEMM path) against a double loop\n", cases);
}

// A batch of images in one call against each image alone, both ways: the fused kernel (one launch up to
// CARVE_CU_ATTN_MAX_BATCH images: the same halves on a GPU too) and the GEMM path (per head where that launches
// less: heads 2 from batch 2 on; the same halves under the emulation, the same GEMM per (image, head), the same
// softmax; on a GPU cuBLAS may pick another kernel for another GEMM batch count: within the output's rounding).
// A batch of 5 asked to fuse runs the GEMMs and its images alone the fused kernel: within the output's rounding.
static void test_attention_batch(TestCtx& t) {
  TestRng rng(33);
  const uint32_t n = 20, kd = 8, hd = 16;
  const size_t per = 2 * kd + hd;
  int cases = 0, per_head = 0, fused = 0;
  for (carve_cu_attention_impl impl : {CARVE_CU_ATTENTION_FUSED, CARVE_CU_ATTENTION_GEMM}) {
    CHECK_OK(carve_cu_ctx_set_attention_impl(&t.ctx, impl));
    for (uint32_t heads : {2u, 4u}) {
      const size_t qkv_stride = heads * per + 3, out_stride = heads * hd + 1, v_stride = heads * hd;
      const float scale = 1.0f / std::sqrt((float)kd);
      for (uint32_t batch : {2u, 3u, 5u}) {
        const std::vector<__half> qkv = random_halves(rng, batch * n * qkv_stride, 1.0f);
        DevBuf<__half> dq(qkv), dout(batch * n * out_stride), dv(batch * n * v_stride), one_out(n * out_stride),
            one_v(n * v_stride);
        DevBuf<float> scratch(carve_cu_attention_scratch_floats(batch, n, heads)),
            one_scratch(carve_cu_attention_scratch_floats(1, n, heads));
        const size_t nodes = captured_run(t, [&] {
          return carve_cu_attention(&t.ctx, batch, dq.p, qkv_stride, n, heads, kd, hd, scale, dout.p, out_stride, dv.p,
                                    v_stride, scratch.p);
        });
        const bool one = impl == CARVE_CU_ATTENTION_FUSED && batch <= CARVE_CU_ATTN_MAX_BATCH;
        const size_t want_nodes = one ? 1 : std::min<size_t>(3 * batch, 2 * heads + 1) + 1;
        const size_t gemms = one ? 0 : 2 * heads + 1 < 3 * batch ? 2 * heads : 2 * batch;  // over images or heads
        CHECK_MSG(launches_as_planned(nodes, want_nodes, gemms),
                  "half attention batch %u heads %u: %zu launches, want %zu", batch, heads, nodes, want_nodes);
        const std::vector<__half> out = dout.download(), v = dv.download();
        // a batch past CARVE_CU_ATTN_MAX_BATCH takes the GEMMs, its images alone the fused kernel: to rounding
        const bool alone_fused = !one && impl == CARVE_CU_ATTENTION_FUSED;
        for (size_t b = 0; b < batch; b++) {
          DevBuf<__half> dq1(std::vector<__half>(qkv.begin() + (long)(b * n * qkv_stride),
                                                 qkv.begin() + (long)((b + 1) * n * qkv_stride)));
          CHECK_OK(carve_cu_attention(&t.ctx, 1, dq1.p, qkv_stride, n, heads, kd, hd, scale, one_out.p, out_stride,
                                      one_v.p, v_stride, one_scratch.p));
          t.sync();
          const std::vector<__half> o1 = one_out.download(), v1 = one_v.download();
          for (size_t p = 0; p < n; p++) {
            for (size_t ch = 0; ch < heads * hd; ch++) {
              const float got = h2f(out[(b * n + p) * out_stride + ch]), alone = h2f(o1[p * out_stride + ch]);
#ifdef CARVE_CUDA_EMULATION
              const bool exact = !alone_fused;
#else
              const bool exact = one;
#endif
              // the GEMM path's scores (|S| <= 4: 4 u) and probabilities (u) rounded to half, |v| <= 1; each output u
              const double tol = alone_fused ? 5.0 * kU + 2.0 * kU * std::fabs(alone) : 2.0 * kU * std::fabs(alone);
              const bool same = exact ? same_float(got, alone) : near_float(got, alone, tol + 1e-6);
              CHECK_MSG(same, "half attention batch %u heads %u: image %zu pixel %zu ch %zu: %.6g, alone %.6g", batch,
                        heads, b, p, ch, got, alone);
              CHECK(same_float(h2f(v[(b * n + p) * v_stride + ch]), h2f(v1[p * v_stride + ch])));
            }
          }
        }
        per_head += !one && 2 * heads + 1 < 3 * batch;
        fused += one;
        cases++;
      }
    }
  }
  CHECK_OK(carve_cu_ctx_set_attention_impl(&t.ctx, CARVE_CU_ATTENTION_GEMM));  // the default again
  // both groupings ran (heads 4, batch 2 and 3: per image), and the fused kernel
  CHECK(per_head > 0 && per_head < cases - fused && fused > 0);
  std::printf("half attention batches: %d cases (%d fused, %d per head) equal to each image alone\n", cases, fused,
              per_head);
}

// carve_cu_attention_pe in half against the two calls (carve_cu_attention, carve_cu_conv2d of the pe) on the same
// halves: fused, O is added unrounded (the two calls round it to half first): within that rounding and the output's;
// with the GEMM path, the two calls exactly; o and v untouched when fused; one launch.
static void test_attention_pe(TestCtx& t) {
  TestRng rng(35);
  const uint32_t h = 4, w = 6, n = h * w, heads = 2, kd = 8, hd = 16, c = heads * hd, per = 2 * kd + hd;
  const size_t qkv_stride = heads * per + 3, o_stride = c + 2, v_stride = c, out_stride = c + 1;
  const float scale = 1.0f / std::sqrt((float)kd);
  const __half canary = __ushort_as_half(kCanaryBits);
  int cases = 0;
  for (carve_cu_attention_impl impl : {CARVE_CU_ATTENTION_FUSED, CARVE_CU_ATTENTION_GEMM}) {
    CHECK_OK(carve_cu_ctx_set_attention_impl(&t.ctx, impl));
    for (uint32_t batch : {1u, 2u}) {
      const carve_cu_conv pe = {3, 3, 1, 1, c, c, c, h, w, v_stride, out_stride, o_stride, CARVE_CU_ACT_NONE, batch, 0};
      DevBuf<__half> dq(random_halves(rng, batch * n * qkv_stride, 1.0f)), dw(random_halves(rng, c * 9, 0.3f)),
          db(random_halves(rng, c, 0.3f)), o(batch * n * o_stride), v(batch * n * v_stride),
          out(batch * n * out_stride), o2(batch * n * o_stride), v2(batch * n * v_stride),
          out2(batch * n * out_stride);
      DevBuf<float> scratch(carve_cu_attention_scratch_floats(batch, n, heads));
      for (DevBuf<__half>* d : {&o, &v, &out, &o2, &v2, &out2}) d->upload(std::vector<__half>(d->n, canary));
      const size_t nodes = attention_pe_and_two_calls<__half>(
          t, {dq.p, qkv_stride, heads, kd, hd, scale, &pe, dw.p, db.p, o.p, v.p, out.p, o2.p, v2.p, out2.p, scratch.p});
      const bool fused = impl == CARVE_CU_ATTENTION_FUSED;
      CHECK_MSG(fused ? nodes == 1 : nodes > 2, "half attention_pe batch %u (impl %d): %zu launches", batch,
                (int)impl, nodes);
      const std::vector<__half> got = out.download(), want = out2.download(), om = o2.download(), m1 = o.download(),
                                v1 = v.download();
      double lo = INFINITY, hi = -INFINITY;
      for (size_t i = 0; i < got.size(); i++) {
        const size_t p = i / out_stride, ch = i % out_stride;
        if (ch >= c) {
          CHECK(__half_as_ushort(got[i]) == kCanaryBits);
          continue;
        }
        const double g = h2f(got[i]), x = h2f(want[i]), oo = h2f(om[p * o_stride + ch]);
        // fused: O unrounded (half an ulp of |O| apart), then each result's rounding
        const double tol = kU * std::fabs(oo) + 2.0 * kU * std::fabs(x) + 1e-6;
        CHECK_MSG(fused ? near_float(g, x, tol) : __half_as_ushort(got[i]) == __half_as_ushort(want[i]),
                  "half attention_pe batch %u (impl %d) pixel %zu ch %zu: %.6g vs %.6g", batch, (int)impl, p, ch, g, x);
        lo = std::min(lo, x), hi = std::max(hi, x);
      }
      CHECK_MSG(hi - lo > 0.5, "half attention_pe: outputs flat (%g .. %g)", lo, hi);
      if (fused) {  // o and v untouched
        for (const __half& e : m1) CHECK(__half_as_ushort(e) == kCanaryBits);
        for (const __half& e : v1) CHECK(__half_as_ushort(e) == kCanaryBits);
      }
      cases++;
    }
  }
  CHECK_OK(carve_cu_ctx_set_attention_impl(&t.ctx, CARVE_CU_ATTENTION_GEMM));  // the default again
  std::printf("half attention + pe: %d cases, fused against the two calls, the GEMM path equal to them\n", cases);
}

// ---- The segment and classify heads -------------------------------------------------------------

// The deconv's gathered output channel o at output pixel (oy, ox) against a double loop on the same halves:
// the GEMM's half result and the store (as a convolution's: u |s| + u |want|), float sums (kAcc mag).
static void check_deconv(const std::vector<__half>& x, const std::vector<__half>& wt, const std::vector<__half>& b,
                         const std::vector<__half>& y, uint32_t h, uint32_t w, uint32_t cin, uint32_t cout,
                         uint32_t k, size_t in_stride, size_t out_stride, carve_cu_act act, double* lo, double* hi) {
  for (size_t oy = 0; oy < (size_t)h * k; oy++) {
    for (size_t ox = 0; ox < (size_t)w * k; ox++) {
      const size_t p = oy * w * k + ox, iy = oy / k, ky = oy % k, ix = ox / k, kx = ox % k;
      for (size_t o = 0; o < out_stride; o++) {
        const unsigned short bits = __half_as_ushort(y[p * out_stride + o]);
        if (o >= cout) {
          CHECK_MSG(bits == kCanaryBits, "deconv: pixel %zu channel %zu (padding) overwritten", p, o);
          continue;
        }
        double s = 0.0, mag = 0.0;
        for (size_t i = 0; i < cin; i++) {
          const double v = (double)h2f(x[(iy * w + ix) * in_stride + i]) * h2f(wt[((o * k + ky) * k + kx) * cin + i]);
          s += v;
          mag += std::fabs(v);
        }
        double want = s + h2f(b[o]);
        if (act == CARVE_CU_ACT_SILU) want = want / (1.0 + std::exp(-want));
        const double tol = 1.1 * (kU * std::fabs(s) + kAcc * mag) + kU * std::fabs(want) + 1e-7;
        const double got = h2f(__ushort_as_half(bits));
        CHECK_MSG(near_float(got, want, tol), "deconv act %d: pixel %zu channel %zu: %.7g vs %.7g (tol %.3g)",
                  (int)act, p, o, got, want, tol);
        *lo = std::min(*lo, want), *hi = std::max(*hi, want);
      }
    }
  }
}

// carve_cu_deconv2d (kernel = stride 2: the prototypes' upsample), carve_cu_global_avgpool, carve_cu_linear and
// carve_cu_softmax (half logits, float32 probabilities) in half against double loops on the same halves, within the
// roundings each makes; carve_cu_f16_to_f32 on __half (the prototypes' widening) exact; the classify pre-processing's halves the float32 one's rounded
// once; strided outputs' padding untouched; argument errors.
static void test_heads(TestCtx& t) {
  TestRng rng(41);
  const __half canary = __ushort_as_half(kCanaryBits);
  {
    const uint32_t h = 5, w = 6, cin = 12, cout = 7, k = 2;
    const size_t in_stride = cin + 3, out_stride = cout + 2;
    double lo = INFINITY, hi = -INFINITY;
    for (carve_cu_act act : {CARVE_CU_ACT_SILU, CARVE_CU_ACT_NONE}) {
      const std::vector<__half> x = random_halves(rng, (size_t)h * w * in_stride, 1.0f),
                                wt = random_halves(rng, (size_t)cout * k * k * cin, 1.0f / std::sqrt((float)cin)),
                                b = random_halves(rng, cout, 0.5f);
      DevBuf<__half> dx(x), dw(wt), db(b), dy(std::vector<__half>((size_t)h * w * k * k * out_stride, canary));
      DevBuf<float> scratch(carve_cu_deconv2d_scratch_floats(h, w, k, cout));
      CHECK_OK(carve_cu_deconv2d(&t.ctx, h, w, cin, cout, k, dx.p, in_stride, dw.p, db.p, act, dy.p, out_stride,
                                 scratch.p));
      t.sync();
      check_deconv(x, wt, b, dy.download(), h, w, cin, cout, k, in_stride, out_stride, act, &lo, &hi);
      CHECK(carve_cu_deconv2d(&t.ctx, h, w, cin, cout, k, dx.p, cin - 1, dw.p, db.p, act, dy.p, out_stride,
                              scratch.p) == CARVE_ERR_INVALID_ARGUMENT);
      CHECK(carve_cu_deconv2d(&t.ctx, h, w, cin, cout, k, dx.p, in_stride, dw.p, db.p, act, dy.p, out_stride,
                              nullptr) == CARVE_ERR_INVALID_ARGUMENT);
    }
    CHECK_MSG(hi - lo > 1.0, "half deconv: outputs flat (%g .. %g)", lo, hi);
  }
  {  // global average pool of a strided (7, 5, 37) view into 37 + 1 halves
    const uint32_t h = 7, w = 5, c = 37;
    const size_t in_stride = c + 3;
    const std::vector<__half> x = random_halves(rng, (size_t)h * w * in_stride, 2.0f);
    DevBuf<__half> dx(x), dy(std::vector<__half>(c + 1, canary));
    CHECK_OK(carve_cu_global_avgpool(&t.ctx, 1, h, w, c, dx.p, in_stride, dy.p));
    t.sync();
    const std::vector<__half> y = dy.download();
    for (uint32_t ch = 0; ch < c; ch++) {
      double s = 0.0;
      for (size_t p = 0; p < (size_t)h * w; p++) s += h2f(x[p * in_stride + ch]);
      const double want = s / (h * w), got = h2f(y[ch]);
      CHECK_MSG(near_float(got, want, kU * std::fabs(want) + 1e-7), "half gap channel %u: %.7g vs %.7g", ch, got, want);
    }
    CHECK(__half_as_ushort(y[c]) == kCanaryBits);
    CHECK(carve_cu_global_avgpool(&t.ctx, 1, h, w, c, dx.p, c - 1, dy.p) == CARVE_ERR_INVALID_ARGUMENT);
  }
  std::vector<__half> logits;
  {  // linear 300 -> 45: one GemmEx column (half result), then the bias in float
    const uint32_t cin = 300, cout = 45;
    const std::vector<__half> x = random_halves(rng, cin, 1.0f), wt = random_halves(rng, (size_t)cout * cin, 0.2f),
                              b = random_halves(rng, cout, 1.0f);
    DevBuf<__half> dx(x), dw(wt), db(b), dy(std::vector<__half>(cout + 1, canary));
    CHECK_OK(carve_cu_linear(&t.ctx, 1, cin, cout, dx.p, dw.p, db.p, dy.p));
    t.sync();
    logits = dy.download(cout);
    for (uint32_t o = 0; o < cout; o++) {
      double s = 0.0, mag = 0.0;
      for (uint32_t i = 0; i < cin; i++) {
        const double v = (double)h2f(wt[(size_t)o * cin + i]) * h2f(x[i]);
        s += v;
        mag += std::fabs(v);
      }
      const double want = s + h2f(b[o]), got = h2f(logits[o]);
      const double tol = kU * std::fabs(s) + kAcc * mag + kU * std::fabs(want) + 1e-7;
      CHECK_MSG(near_float(got, want, tol), "half linear output %u: %.7g vs %.7g (tol %.3g)", o, got, want, tol);
    }
    CHECK(__half_as_ushort(dy.download()[cout]) == kCanaryBits);
    CHECK(carve_cu_linear(&t.ctx, 1, cin, cout, dx.p, dw.p, nullptr, dy.p) == CARVE_ERR_INVALID_ARGUMENT);
  }
  {  // softmax of those 45 half logits into float32 probabilities (and of 1000 wider ones)
    for (size_t n : {(size_t)45, (size_t)1000}) {
      const std::vector<__half> x = n == logits.size() ? logits : random_halves(rng, n, 3.0f);
      DevBuf<__half> dx(x);
      DevBuf<float> dy(std::vector<float>(n + 1, -1.0f));
      CHECK_OK(carve_cu_softmax(&t.ctx, 1, (uint32_t)n, dx.p, dy.p));
      t.sync();
      const std::vector<float> y = dy.download();
      double m = -INFINITY, sum = 0.0;
      for (const __half& v : x) m = std::max(m, (double)h2f(v));
      for (const __half& v : x) sum += std::exp(h2f(v) - m);
      double lo = INFINITY, hi = 0.0;
      for (size_t i = 0; i < n; i++) {
        const double want = std::exp(h2f(x[i]) - m) / sum;
        // a few ulp: CUDA's expf (2 ulp from the host's) and the sum's order (the H200, 2026-11-28: 4.6e-7 at n 1000)
        CHECK_MSG(near_float(y[i], want, 2e-6 * want + 1e-12), "half softmax n %zu: %zu: %.9g vs %.9g", n, i, y[i],
                  want);
        lo = std::min(lo, want), hi = std::max(hi, want);
      }
      CHECK(y[n] == -1.0f);
      CHECK_MSG(hi > 10.0 * lo, "half softmax n %zu: probabilities flat (%g .. %g)", n, lo, hi);
    }
    DevBuf<float> dy(4);
    DevBuf<__half> dx(4);
    CHECK(carve_cu_softmax(&t.ctx, 1, 0, dx.p, dy.p) == CARVE_ERR_INVALID_ARGUMENT);
    CHECK(carve_cu_softmax(&t.ctx, 0, 4, dx.p, dy.p) == CARVE_ERR_INVALID_ARGUMENT);
  }
  {  // the prototypes' widening: every half (NaNs as NaN), exact
    std::vector<__half> all(65536);
    for (size_t i = 0; i < all.size(); i++) all[i] = __ushort_as_half((unsigned short)i);
    DevBuf<__half> dx(all);
    DevBuf<float> dy(all.size() + 1);
    dy.upload(std::vector<float>(all.size() + 1, 7.0f));
    CHECK_OK(carve_cu_f16_to_f32(&t.ctx, (const uint16_t*)dx.p, dy.p, all.size()));
    t.sync();
    const std::vector<float> y = dy.download();
    for (size_t i = 0; i < all.size(); i++) CHECK_MSG(same_float(y[i], h2f(all[i])), "half 0x%04zx widened wrong", i);
    CHECK(y[all.size()] == 7.0f);
  }
  {  // the classify pre-processing (resize + centre crop of a 37 x 29 image to 16): halves = the floats rounded
    const int iw = 37, ih = 29, out = 16;
    const size_t stride = (size_t)iw * 3 + 5;
    std::vector<uint8_t> rgb(stride * ih);
    for (auto& v : rgb) v = (uint8_t)(rng.next() & 0xff);
    DevBuf<uint8_t> drgb(rgb);
    DevScratch scratch(carve_cu_classify_scratch_bytes(iw, ih, out));
    DevBuf<float> df((size_t)out * out * 3);
    DevBuf<__half> dh((size_t)out * out * 3);
    CHECK_OK(carve_cu_classify_preprocess(&t.ctx, drgb.p, iw, ih, stride, out, df.p, scratch.get()));
    CHECK_OK(carve_cu_classify_preprocess(&t.ctx, drgb.p, iw, ih, stride, out, dh.p, scratch.get()));
    t.sync();
    const std::vector<float> f = df.download();
    const std::vector<__half> hh = dh.download();
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < f.size(); i++) {
      CHECK_MSG(__half_as_ushort(hh[i]) == __half_as_ushort(f2h(f[i])), "classify input %zu: 0x%04x, want %.7g", i,
                __half_as_ushort(hh[i]), f[i]);
      lo = std::min(lo, f[i]), hi = std::max(hi, f[i]);
    }
    CHECK(hi - lo > 0.5f);
    CHECK(carve_cu_classify_preprocess(&t.ctx, drgb.p, iw, ih, stride, out, static_cast<__half*>(nullptr),
                                       scratch.get()) == CARVE_ERR_INVALID_ARGUMENT);
  }
  std::printf("half heads: deconv, global average pool, linear, softmax, prototypes' widening, classify input\n");
}

int main() {
  test_conversions();
  TestCtx t;
  CHECK_OK(carve_cu_ctx_f16_math(&t.ctx));
  cublasMath_t mode;
  CHECK(cublasGetMathMode(t.ctx.blas, &mode) == CUBLAS_STATUS_SUCCESS);
  CHECK(mode == (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  CHECK(carve_cu_ctx_f16_math(nullptr) == CARVE_ERR_INVALID_ARGUMENT);
  test_casts(t);
  test_conv(t);
  test_elementwise(t);
  test_attention(t);
  test_attention_batch(t);
  test_attention_pe(t);
  test_heads(t);
  std::printf("test_f16: all ok\n");
  return 0;
}
