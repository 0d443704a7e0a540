// Checks carve_dwconv3x3 (the depthwise 3x3 stride-1 convolution of runtime/carve_dwconv.c) against a direct
// depthwise convolution in double: sizes from 1x1 up (odd, narrower than the 4-pixel interior blocks, and
// 20x20 / 80x80 as in yolo26n's head), channel counts 1..257 (multiples of 16, of 8 only, and odd ones: the
// masked tails), pixel strides wider than the channels, act none and SiLU. Every instruction set the CPU has
// (AVX-512, AVX2 + FMA, portable) is run with no pool, 2 and 3 threads: all bit-identical, the floats past c of
// each output pixel untouched. The x86-64 paths must agree bit for bit before the activation (the same FMAs
// in the same order) and closely after it (their SiLU kernels differ by a few ulp); the portable path within
// float rounding. Bad arguments are refused with CARVE_ERR_INVALID_ARGUMENT and write nothing. The variants
// run by name (runtime/carve_dwconv_isa.h); the selector must pick each instruction set's.

#include "carve_dwconv_isa.h"
#include "simd_paths.h"
#include "test_common.h"

// The variants this build has, by carve_isa (NULL: none).
static const carve_dwconv3x3_fn k_variant[CARVE_TEST_ISAS] = CARVE_TEST_VARIANTS(carve_dwconv3x3);

static double silu_d(double v) { return v / (1.0 + exp(-v)); }

// The output (oy, ox, ch) in double, and the sum of |terms| (the scale of its rounding error).
static double ref_out(const float* x, size_t xs, size_t h, size_t w, size_t c, const float* wt, const float* b,
                      size_t oy, size_t ox, size_t ch, double* mag) {
  double s = b[ch];
  double m = fabs(s);
  for (size_t ky = 0; ky < 3; ky++) {
    const long iy = (long)oy - 1 + (long)ky;
    if (iy < 0 || iy >= (long)h) {
      continue;
    }
    for (size_t kx = 0; kx < 3; kx++) {
      const long ix = (long)ox - 1 + (long)kx;
      if (ix < 0 || ix >= (long)w) {
        continue;
      }
      const double t = (double)x[((size_t)iy * w + (size_t)ix) * xs + ch] * (double)wt[(ky * 3 + kx) * c + ch];
      s += t;
      m += fabs(t);
    }
  }
  *mag = m;
  return s;
}


typedef struct dw_case {
  size_t h, w, c, xs, ys;
  carve_act act;
} dw_case;

static void run_case(const dw_case* k, pthreadpool_t pool2, pthreadpool_t pool3, test_rng* rng) {
  const size_t nx = k->h * k->w * k->xs, ny = k->h * k->w * k->ys, nw = 9 * k->c;
  float* x = malloc(nx * sizeof(float));
  float* wt = malloc(nw * sizeof(float));
  float* b = malloc(k->c * sizeof(float));
  float* y[3][3];
  CHECK(x != NULL && wt != NULL && b != NULL);
  for (size_t i = 0; i < nx; i++) {
    x[i] = rng_normal(rng) * 2.0f;  // padding channels too (never read)
  }
  for (size_t i = 0; i < nw; i++) {
    wt[i] = rng_normal(rng) * 0.4f;
  }
  for (size_t i = 0; i < k->c; i++) {
    b[i] = rng_normal(rng) * 0.5f;
  }
  for (int simd = 0; simd < 3; simd++) {
    for (int t = 0; t < 3; t++) {
      y[simd][t] = NULL;
      if (!HAVE_VARIANT(k_variant, simd)) {
        continue;
      }
      y[simd][t] = malloc(ny * sizeof(float));
      CHECK(y[simd][t] != NULL);
      fill_canary(y[simd][t], ny);
      CHECK(k_variant[simd](x, k->xs, k->h, k->w, k->c, wt, b, y[simd][t], k->ys, k->act,
                            t == 0 ? NULL : t == 1 ? pool2 : pool3) == CARVE_OK);
    }
  }
  for (int simd = 0; simd < 3; simd++) {
    if (y[simd][0] == NULL) {
      continue;
    }
    // threads: bit-identical; padding: untouched
    for (int t = 1; t < 3; t++) {
      CHECK_MSG(memcmp(y[simd][0], y[simd][t], ny * sizeof(float)) == 0, "%s: %d threads differ from 1 (%zux%zux%zu)",
                carve_isa_name((carve_isa)simd), t + 1, k->h, k->w, k->c);
    }
    for (size_t p = 0; p < k->h * k->w; p++) {
      for (size_t c = k->c; c < k->ys; c++) {
        CHECK_MSG(is_canary(y[simd][0][p * k->ys + c]), "%s: padding of pixel %zu written", carve_isa_name((carve_isa)simd), p);
      }
    }
    // against double
    for (size_t oy = 0; oy < k->h; oy++) {
      for (size_t ox = 0; ox < k->w; ox++) {
        for (size_t ch = 0; ch < k->c; ch++) {
          double mag;
          const double pre = ref_out(x, k->xs, k->h, k->w, k->c, wt, b, oy, ox, ch, &mag);
          const double want = k->act == CARVE_ACT_SILU ? silu_d(pre) : pre;
          const float got = y[simd][0][(oy * k->w + ox) * k->ys + ch];
          const double tol = 4e-7 * mag + 1e-6 * fabs(want) + 1e-30;
          CHECK_MSG(fabs((double)got - want) <= tol,
                    "%s %zux%zu c %zu act %d: (%zu,%zu,%zu) = %.9g, want %.9g (tol %.3g)", carve_isa_name((carve_isa)simd), k->h,
                    k->w, k->c, (int)k->act, oy, ox, ch, got, want, tol);
        }
      }
    }
  }
  // the x86-64 paths: the same FMAs, so the same bits before the activation; after it, within a few ulp
  if (y[1][0] != NULL && y[2][0] != NULL) {
    for (size_t p = 0; p < k->h * k->w; p++) {
      for (size_t c = 0; c < k->c; c++) {
        const float a = y[1][0][p * k->ys + c], v = y[2][0][p * k->ys + c];
        if (k->act == CARVE_ACT_NONE) {
          CHECK_MSG(same_float(a, v), "AVX2 %.9g vs AVX-512 %.9g at pixel %zu channel %zu", a, v, p, c);
        } else {
          CHECK_MSG(fabsf(a - v) <= 1e-6f * fabsf(v) + 1e-37f, "AVX2 %.9g vs AVX-512 %.9g (SiLU)", a, v);
        }
      }
    }
  }
  for (int simd = 0; simd < 3; simd++) {
    for (int t = 0; t < 3; t++) {
      free(y[simd][t]);
    }
  }
  free(b);
  free(wt);
  free(x);
}

static void test_shapes(pthreadpool_t pool2, pthreadpool_t pool3) {
  static const size_t sizes[][2] = {{1, 1}, {2, 3}, {3, 2}, {1, 9}, {7, 5}, {5, 6}, {6, 7}, {9, 11}, {20, 20}};
  static const size_t chans[] = {1, 3, 8, 16, 24, 80, 128, 129};
  test_rng rng = {4242};
  size_t n = 0;
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    for (size_t ci = 0; ci < sizeof chans / sizeof chans[0]; ci++) {
      for (int act = 0; act < 2; act++) {
        for (int wide = 0; wide < 2; wide++) {
          const size_t c = chans[ci];
          const dw_case k = {sizes[si][0], sizes[si][1], c, c + (wide ? 2 * c + 3 : 0), c + (wide ? c + 5 : 0),
                             act ? CARVE_ACT_SILU : CARVE_ACT_NONE};
          run_case(&k, pool2, pool3, &rng);
          n++;
        }
      }
    }
  }
  const dw_case big[] = {{80, 80, 64, 64, 64, CARVE_ACT_SILU}, {40, 40, 257, 300, 260, CARVE_ACT_NONE}};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
    run_case(&big[i], pool2, pool3, &rng);
    n++;
  }
  printf("runtime_dwconv: %zu cases\n", n);
}

static void test_refusals(void) {
  float x[64] = {0}, wt[9 * 16] = {0}, b[16] = {0}, y[64];
  fill_canary(y, 64);
  const carve_status bad = CARVE_ERR_INVALID_ARGUMENT;
  CHECK(carve_dwconv3x3(x, 16, 2, 2, 0, wt, b, y, 16, CARVE_ACT_SILU, NULL) == bad);       // c 0
  CHECK(carve_dwconv3x3(x, 15, 2, 2, 16, wt, b, y, 16, CARVE_ACT_SILU, NULL) == bad);      // x stride
  CHECK(carve_dwconv3x3(x, 16, 2, 2, 16, wt, b, y, 15, CARVE_ACT_SILU, NULL) == bad);      // y stride
  CHECK(carve_dwconv3x3(x, 16, 0, 2, 16, wt, b, y, 16, CARVE_ACT_SILU, NULL) == bad);      // h 0
  CHECK(carve_dwconv3x3(x, 16, 2, 0, 16, wt, b, y, 16, CARVE_ACT_SILU, NULL) == bad);      // w 0
  CHECK(carve_dwconv3x3(x, 16, 2, 2, 16, NULL, b, y, 16, CARVE_ACT_SILU, NULL) == bad);    // weights
  CHECK(carve_dwconv3x3(x, 16, 2, 2, 16, wt, NULL, y, 16, CARVE_ACT_SILU, NULL) == bad);   // bias
  CHECK(carve_dwconv3x3(NULL, 16, 2, 2, 16, wt, b, y, 16, CARVE_ACT_SILU, NULL) == bad);   // x
  CHECK(carve_dwconv3x3(x, 16, 2, 2, 16, wt, b, NULL, 16, CARVE_ACT_SILU, NULL) == bad);   // y
  CHECK(carve_dwconv3x3(x, 16, 2, 2, 16, wt, b, y, 16, (carve_act)7, NULL) == bad);        // act
  for (size_t i = 0; i < 64; i++) {
    CHECK(is_canary(y[i]));
  }
  CHECK(carve_dwconv3x3(x, 16, 1, 1, 16, wt, b, y, 16, CARVE_ACT_SILU, NULL) == CARVE_OK);
  CHECK(y[0] == 0.0f && y[15] == 0.0f && is_canary(y[16]));  // 1x1 of 16 channels: silu(0)
}

int main(void) {
  for (int simd = 2; simd > 0; simd--) {
    if (!HAVE_VARIANT(k_variant, simd)) {
      printf("runtime_dwconv: no %s on this CPU: that path skipped\n", carve_isa_name((carve_isa)simd));
    }
  }
  CHECK_SELECT(carve_dwconv3x3_select, k_variant);
  pthreadpool_t pool2 = make_pool2();
  pthreadpool_t pool3 = pthreadpool_create(3);
  CHECK(pool3 != NULL);
  test_refusals();
  test_shapes(pool2, pool3);
  pthreadpool_destroy(pool3);
  pthreadpool_destroy(pool2);
  printf("runtime_dwconv: ok\n");
  return 0;
}
