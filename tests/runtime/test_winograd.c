// Checks carve_conv3x3s1_winograd (the Winograd F(2x2, 3x3) convolution of
// runtime/carve_winograd.c) against a direct 3x3 convolution in double of the original
// (cout, cin, 3, 3) weights, + bias, act none / SiLU, + residual or not; the
// Winograd weights are transformed here (G g G^T in double). Sizes from 1x1 up,
// odd ones (partial tiles), cin 16 to 272 (two channel blocks, the second
// partial), cout 16 to 80 (the 16-channel AVX-512 kernel), and channel counts
// that are multiples of 8 but not of 16, alone and mixed with multiples of 16
// (cin 8 to 136, the last block 8 channels: the masked AVX-512 input transform,
// the 8-channel tails of the portable and NEON loops; cout 8 to 56: the 8-channel
// GEMMs and the masked AVX-512 output transform), pixel strides wider
// than the channels: NaN past cin in x and in the residual (must not be read),
// a canary past cout in y (must not be written), NaN in the scratch (its contents
// must not matter). Every instruction set the CPU has (AVX-512, AVX2 + FMA,
// portable; on aarch64 NEON and portable) is run serially with 1 slot, and with 2 and 3 slots, with no pool
// and with pools of 2 and 3 threads: all bit-identical to the serial run.
// Bad arguments are refused with CARVE_ERR_INVALID_ARGUMENT and write nothing.
//
// Tolerance: |y - ref| <= 1e-5 * max(1, max |ref| of the case). The data are
// uniform in [-1, 1] (x, residual), weights uniform scaled by 1 / sqrt(3 cin) so
// that the outputs are of unit scale; F(2, 3) multiplies by its transforms'
// small integer / half coefficients only, so its rounding is a few times a direct
// float convolution's (the experiment saw about 1e-6 absolute; measured here:
// printed per path, a few 1e-7 of the scale).
//
// The variants run by name (runtime/carve_winograd_isa.h); the selector must pick
// each instruction set's.

#include "carve_winograd_isa.h"
#include "simd_paths.h"
#include "test_common.h"

static double silu_d(double v) { return v / (1.0 + exp(-v)); }

// The variants this build has, by carve_isa (NULL: none).
static const carve_conv3x3s1_winograd_fn k_variant[CARVE_TEST_ISAS] =
    CARVE_TEST_VARIANTS_NEON(carve_conv3x3s1_winograd);

// (cout, cin, 3, 3) -> (16, cin, cout): G g G^T in double, rounded to float.
static void transform_weights(const float* oihw, size_t cin, size_t cout, float* wt) {
  static const double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  for (size_t o = 0; o < cout; o++) {
    for (size_t i = 0; i < cin; i++) {
      const float* g = oihw + (o * cin + i) * 9;
      double t[4][3];
      for (int a = 0; a < 4; a++) {
        for (int kx = 0; kx < 3; kx++) {
          t[a][kx] = G[a][0] * g[kx] + G[a][1] * g[3 + kx] + G[a][2] * g[6 + kx];
        }
      }
      for (int a = 0; a < 4; a++) {
        for (int b = 0; b < 4; b++) {
          wt[((size_t)(a * 4 + b) * cin + i) * cout + o] =
              (float)(t[a][0] * G[b][0] + t[a][1] * G[b][1] + t[a][2] * G[b][2]);
        }
      }
    }
  }
}

// conv + bias in double, (h, w, cout) dense.
static void direct_conv(const float* x, size_t xs, size_t h, size_t w, size_t cin, const float* oihw,
                        const float* b, size_t cout, double* out) {
  for (size_t oy = 0; oy < h; oy++) {
    for (size_t ox = 0; ox < w; ox++) {
      for (size_t o = 0; o < cout; o++) {
        double s = b[o];
        for (size_t ky = 0; ky < 3; ky++) {
          for (size_t kx = 0; kx < 3; kx++) {
            const long iy = (long)oy + (long)ky - 1, ix = (long)ox + (long)kx - 1;
            if (iy < 0 || ix < 0 || iy >= (long)h || ix >= (long)w) {
              continue;
            }
            const float* xp = x + ((size_t)iy * w + (size_t)ix) * xs;
            const float* wp = oihw + o * cin * 9 + ky * 3 + kx;
            for (size_t i = 0; i < cin; i++) {
              s += (double)xp[i] * (double)wp[i * 9];
            }
          }
        }
        out[(oy * w + ox) * cout + o] = s;
      }
    }
  }
}

static void* scratch_alloc(size_t cout, size_t slots) {
  const size_t bytes = slots * CARVE_WINOGRAD_SLOT_BYTES(cout);
  float* s = aligned_alloc(64, bytes);
  CHECK(s != NULL);
  for (size_t i = 0; i < bytes / sizeof(float); i++) {
    s[i] = NAN;
  }
  return s;
}

static double g_worst[CARVE_TEST_ISAS];  // max |y - ref| / max(1, max |ref|) per path

typedef struct wino_case {
  size_t h, w, cin, cout;
} wino_case;

// One shape: 4 variants (act none / SiLU x residual or not, dense strides for two of them, wide for the
// other two) on every path; each variant also runs two of the six slot / thread splits, all six in turn.
static void run_case(const wino_case* k, pthreadpool_t pool2, pthreadpool_t pool3, test_rng* rng) {
  const size_t h = k->h, w = k->w, cin = k->cin, cout = k->cout, px = h * w;
  const size_t xs = cin + 3, nx = px * xs;
  float* x = malloc(nx * sizeof(float));
  float* oihw = malloc(cout * cin * 9 * sizeof(float));
  float* wt = malloc(16 * cin * cout * sizeof(float));
  float* b = malloc(cout * sizeof(float));
  const size_t rs = cout + 7;
  float* res = malloc(px * rs * sizeof(float));
  double* pre = malloc(px * cout * sizeof(double));
  CHECK(x != NULL && oihw != NULL && wt != NULL && b != NULL && res != NULL && pre != NULL);
  for (size_t p = 0; p < px; p++) {
    for (size_t c = 0; c < xs; c++) {
      x[p * xs + c] = c < cin ? rng_range(rng, -1.0f, 1.0f) : NAN;
    }
    for (size_t c = 0; c < rs; c++) {
      res[p * rs + c] = c < cout ? rng_range(rng, -1.0f, 1.0f) : NAN;
    }
  }
  const float ws = (float)(1.0 / sqrt(3.0 * (double)cin));
  for (size_t i = 0; i < cout * cin * 9; i++) {
    oihw[i] = rng_range(rng, -1.0f, 1.0f) * ws;
  }
  for (size_t i = 0; i < cout; i++) {
    b[i] = rng_range(rng, -0.5f, 0.5f);
  }
  transform_weights(oihw, cin, cout, wt);
  direct_conv(x, xs, h, w, cin, oihw, b, cout, pre);
  void* scratch = scratch_alloc(cout, 3);

  for (int variant = 0; variant < 4; variant++) {
    const carve_act act = (variant & 1) ? CARVE_ACT_SILU : CARVE_ACT_NONE;
    const int with_res = (variant >> 1) & 1, wide = (variant & 1) ^ with_res;
    const size_t xstride = wide ? xs : cin;  // dense x: a copy without the NaN columns
    const size_t ys = wide ? cout + 5 : cout, ny = px * ys;
    const size_t rstride = wide ? rs : cout;
    float* xd = x;
    float* rd = res;
    if (!wide) {
      xd = malloc(px * cin * sizeof(float));
      rd = malloc(px * cout * sizeof(float));
      CHECK(xd != NULL && rd != NULL);
      for (size_t p = 0; p < px; p++) {
        memcpy(xd + p * cin, x + p * xs, cin * sizeof(float));
        memcpy(rd + p * cout, res + p * rs, cout * sizeof(float));
      }
    }
    const float* r = with_res ? rd : NULL;
    // the reference and its scale
    double scale = 1.0;
    double* want = malloc(px * cout * sizeof(double));
    CHECK(want != NULL);
    for (size_t p = 0; p < px; p++) {
      for (size_t c = 0; c < cout; c++) {
        double v = pre[p * cout + c];
        v = act == CARVE_ACT_SILU ? silu_d(v) : v;
        v += r != NULL ? (double)r[p * rstride + c] : 0.0;
        want[p * cout + c] = v;
        scale = fmax(scale, fabs(v));
      }
    }
    float* y0 = malloc(ny * sizeof(float));
    float* y1 = malloc(ny * sizeof(float));
    CHECK(y0 != NULL && y1 != NULL);
    for (int simd = 0; simd < CARVE_TEST_ISAS; simd++) {
      if (!HAVE_VARIANT(k_variant, simd)) {
        continue;
      }
      fill_canary(y0, ny);
      CHECK(k_variant[simd](xd, xstride, h, w, cin, wt, b, cout, y0, ys, r, with_res ? rstride : 0, act, scratch,
                            1, NULL) == CARVE_OK);
      for (size_t p = 0; p < px; p++) {
        for (size_t c = 0; c < ys; c++) {
          const float got = y0[p * ys + c];
          if (c >= cout) {
            CHECK_MSG(is_canary(got), "%s: pixel %zu channel %zu (past cout) written", carve_isa_name((carve_isa)simd), p, c);
            continue;
          }
          const double err = fabs((double)got - want[p * cout + c]);
          CHECK_MSG(err <= 1e-5 * scale, "%s %zux%zu cin %zu cout %zu act %d res %d wide %d: (%zu, %zu) = %.9g, "
                    "want %.9g (scale %.3g)", carve_isa_name((carve_isa)simd), h, w, cin, cout, (int)act, with_res, wide, p, c,
                    got, want[p * cout + c], scale);
          g_worst[simd] = fmax(g_worst[simd], err / scale);
        }
      }
      // slots and threads: the same bits
      const struct {
        size_t slots;
        pthreadpool_t pool;
      } splits[] = {{2, NULL}, {3, NULL}, {2, pool2}, {3, pool2}, {2, pool3}, {3, pool3}};
      for (size_t j = 0; j < 2; j++) {
        const size_t si = (2 * (size_t)variant + j) % (sizeof splits / sizeof splits[0]);
        fill_canary(y1, ny);
        CHECK(k_variant[simd](xd, xstride, h, w, cin, wt, b, cout, y1, ys, r, with_res ? rstride : 0, act,
                              scratch, splits[si].slots, splits[si].pool) == CARVE_OK);
        CHECK_MSG(memcmp(y0, y1, ny * sizeof(float)) == 0, "%s %zux%zu cin %zu cout %zu: %zu slots on %s differ",
                  carve_isa_name((carve_isa)simd), h, w, cin, cout, splits[si].slots, splits[si].pool == NULL ? "no pool" : "a pool");
      }
    }
    free(y1);
    free(y0);
    free(want);
    if (!wide) {
      free(rd);
      free(xd);
    }
  }
  free(scratch);
  free(pre);
  free(res);
  free(b);
  free(wt);
  free(oihw);
  free(x);
}

static void test_shapes(pthreadpool_t pool2, pthreadpool_t pool3) {
  static const size_t sizes[][2] = {{1, 1}, {1, 5}, {5, 1}, {2, 2}, {7, 3}, {5, 9}, {20, 20}};
  static const size_t cins[] = {16, 32, 144, 272};
  static const size_t couts[] = {16, 32, 48, 80};
  test_rng rng = {2026};
  size_t n = 0;
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    for (size_t ci = 0; ci < sizeof cins / sizeof cins[0]; ci++) {
      for (size_t co = 0; co < sizeof couts / sizeof couts[0]; co++) {
        const wino_case k = {sizes[si][0], sizes[si][1], cins[ci], couts[co]};
        run_case(&k, pool2, pool3, &rng);
        n++;
      }
    }
  }
  // multiples of 8 that are not multiples of 16 (cin or cout or both): 8 (one 8-channel block), 24 (16 + 8),
  // 40 (32 + 8), 56 (32 + 16 + 8), 136 (a 128-channel block, then 8)
  static const size_t pairs[][2] = {{8, 8},   {8, 16},  {16, 8},  {24, 40}, {40, 24},  {8, 24},
                                    {24, 8},  {40, 40}, {8, 56},  {32, 24}, {136, 8},  {48, 40}};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++) {
      const wino_case k = {sizes[si][0], sizes[si][1], pairs[pi][0], pairs[pi][1]};
      run_case(&k, pool2, pool3, &rng);
      n++;
    }
  }
  // more groups than threads and slots, odd both ways
  const wino_case big[] = {{33, 47, 48, 64}, {40, 40, 64, 96}, {33, 47, 8, 16}, {41, 29, 16, 8}, {19, 37, 24, 40}};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
    run_case(&big[i], pool2, pool3, &rng);
    n++;
  }
  printf("runtime_winograd: %zu shapes x 4 variants\n", n);
  for (int simd = 0; simd < CARVE_TEST_ISAS; simd++) {
    if (HAVE_VARIANT(k_variant, simd)) {
      printf("runtime_winograd: %s: max |y - ref| / max(1, max |ref|) = %.3g\n", carve_isa_name((carve_isa)simd), g_worst[simd]);
    }
  }
}

static void test_refusals(void) {
  float x[4 * 32] = {0}, wt[16 * 32 * 32] = {0}, b[32] = {0}, y[4 * 32], r[4 * 32] = {0};
  void* s = scratch_alloc(32, 2);
  void* mis = (char*)s + 4;
  fill_canary(y, 4 * 32);
  const carve_status bad = CARVE_ERR_INVALID_ARGUMENT;
  const carve_act silu = CARVE_ACT_SILU;
  CHECK(carve_conv3x3s1_winograd(NULL, 16, 2, 2, 16, wt, b, 16, y, 16, NULL, 0, silu, s, 1, NULL) == bad);
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 16, NULL, b, 16, y, 16, NULL, 0, silu, s, 1, NULL) == bad);
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 16, wt, NULL, 16, y, 16, NULL, 0, silu, s, 1, NULL) == bad);
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 16, wt, b, 16, NULL, 16, NULL, 0, silu, s, 1, NULL) == bad);
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 16, wt, b, 16, y, 16, NULL, 0, silu, NULL, 1, NULL) == bad);
  CHECK(carve_conv3x3s1_winograd(x, 16, 0, 2, 16, wt, b, 16, y, 16, NULL, 0, silu, s, 1, NULL) == bad);  // h
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 0, 16, wt, b, 16, y, 16, NULL, 0, silu, s, 1, NULL) == bad);  // w
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 0, wt, b, 16, y, 16, NULL, 0, silu, s, 1, NULL) == bad);   // cin
  CHECK(carve_conv3x3s1_winograd(x, 12, 2, 2, 12, wt, b, 16, y, 16, NULL, 0, silu, s, 1, NULL) == bad);  // cin
  CHECK(carve_conv3x3s1_winograd(x, 20, 2, 2, 20, wt, b, 16, y, 16, NULL, 0, silu, s, 1, NULL) == bad);  // cin
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 16, wt, b, 0, y, 16, NULL, 0, silu, s, 1, NULL) == bad);   // cout
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 16, wt, b, 4, y, 16, NULL, 0, silu, s, 1, NULL) == bad);   // cout
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 16, wt, b, 12, y, 16, NULL, 0, silu, s, 1, NULL) == bad);  // cout
  CHECK(carve_conv3x3s1_winograd(x, 15, 2, 2, 16, wt, b, 16, y, 16, NULL, 0, silu, s, 1, NULL) == bad);  // x_stride
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 16, wt, b, 16, y, 15, NULL, 0, silu, s, 1, NULL) == bad);  // y_stride
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 16, wt, b, 16, y, 16, r, 15, silu, s, 1, NULL) == bad);    // r_stride
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 16, wt, b, 16, y, 16, NULL, 0, silu, s, 0, NULL) == bad);  // slots
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 16, wt, b, 16, y, 16, NULL, 0, silu, mis, 1, NULL) == bad);
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 16, wt, b, 16, y, 16, NULL, 0, (carve_act)7, s, 1, NULL) == bad);
  for (size_t i = 0; i < 4 * 32; i++) {
    CHECK(is_canary(y[i]));
  }
  // accepted: zeros in, silu(0) = 0 out; r_stride ignored without a residual; more slots than groups
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 16, wt, b, 32, y, 32, NULL, 0, silu, s, 2, NULL) == CARVE_OK);
  CHECK(y[0] == 0.0f && y[31] == 0.0f && y[3 * 32 + 31] == 0.0f);
  // multiples of 8 (CARVE_WINOGRAD_CHANNEL_MULTIPLE) are taken: 8 -> 8 writes 8 channels of each pixel
  _Static_assert(CARVE_WINOGRAD_CHANNEL_MULTIPLE == 8, "the kernel takes multiples of 8 channels");
  fill_canary(y, 4 * 32);
  CHECK(carve_conv3x3s1_winograd(x, 16, 2, 2, 8, wt, b, 8, y, 16, NULL, 0, silu, s, 1, NULL) == CARVE_OK);
  for (size_t i = 0; i < 4 * 16; i++) {
    CHECK(i % 16 < 8 ? y[i] == 0.0f : is_canary(y[i]));
  }
  free(s);
}

int main(void) {
  for (int simd = 1; simd < CARVE_TEST_ISAS; simd++) {
    if (k_variant[simd] != NULL && !HAVE_VARIANT(k_variant, simd)) {
      printf("runtime_winograd: no %s on this CPU: that path skipped\n", carve_isa_name((carve_isa)simd));
    }
  }
  CHECK_SELECT(carve_conv3x3s1_winograd_select, k_variant);
  pthreadpool_t pool2 = make_pool2();
  pthreadpool_t pool3 = pthreadpool_create(3);
  CHECK(pool3 != NULL);
  test_refusals();
  test_shapes(pool2, pool3);
  pthreadpool_destroy(pool3);
  pthreadpool_destroy(pool2);
  printf("runtime_winograd: ok\n");
  return 0;
}
