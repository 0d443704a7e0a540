// Checks carve_conv3x3s2_small_cin (the stem convolution of runtime/carve_stem.c)
// against a direct convolution in double: cin 1..4, cout 16/32/48/96, odd and
// even input sizes from 1x1 up (and 640x640, the network's, on a few rows),
// pixel strides wider than the channels, act none and SiLU. Every instruction
// set the CPU has (AVX-512, AVX2 + FMA, portable) is run with no pool and with
// 2 threads: the two must be bit-identical, the floats past cout of each output
// pixel untouched. The x86-64 paths must agree bit for bit before the
// activation (the same FMAs in the same order) and closely after it (their SiLU
// kernels differ by a few ulp); the portable path within float rounding.
// Bad arguments are refused with CARVE_ERR_INVALID_ARGUMENT and write nothing.
// The variants run by name (runtime/carve_stem_isa.h); the selector must pick
// each instruction set's.

#include "carve_stem_isa.h"
#include "simd_paths.h"
#include "test_common.h"

// The variants this build has, by carve_isa (NULL: none).
static const carve_conv3x3s2_small_cin_fn k_variant[CARVE_TEST_ISAS] =
    CARVE_TEST_VARIANTS(carve_conv3x3s2_small_cin);

static double silu_d(double v) { return v / (1.0 + exp(-v)); }

// The output (oy, ox, co) in double, and the sum of |terms| (the scale of its rounding error).
static double ref_out(const float* x, size_t xs, size_t h, size_t w, size_t cin, const float* wt,
                      const float* b, size_t cout, size_t oy, size_t ox, size_t co, double* mag) {
  double s = b[co];
  double m = fabs(s);
  for (size_t ky = 0; ky < 3; ky++) {
    const long iy = 2 * (long)oy - 1 + (long)ky;
    if (iy < 0 || iy >= (long)h) {
      continue;
    }
    for (size_t kx = 0; kx < 3; kx++) {
      const long ix = 2 * (long)ox - 1 + (long)kx;
      if (ix < 0 || ix >= (long)w) {
        continue;
      }
      for (size_t ci = 0; ci < cin; ci++) {
        const double t = (double)x[((size_t)iy * w + (size_t)ix) * xs + ci] *
                         (double)wt[((ky * 3 + kx) * cin + ci) * cout + co];
        s += t;
        m += fabs(t);
      }
    }
  }
  *mag = m;
  return s;
}


typedef struct stem_case {
  size_t h, w, cin, cout, xs, ys;
  carve_act act;
} stem_case;

// Runs one case on every path and thread count; rows_checked: every output row, or (0) a few.
static void run_case(const stem_case* k, pthreadpool_t pool, int all_rows, test_rng* rng) {
  const size_t oh = (k->h - 1) / 2 + 1, ow = (k->w - 1) / 2 + 1;
  const size_t nx = k->h * k->w * k->xs, ny = oh * ow * k->ys, nw = 9 * k->cin * k->cout;
  float* x = malloc(nx * sizeof(float));
  float* wt = malloc(nw * sizeof(float));
  float* b = malloc(k->cout * sizeof(float));
  float* y[3][2];
  CHECK(x != NULL && wt != NULL && b != NULL);
  for (size_t i = 0; i < nx; i++) {
    x[i] = rng_range(rng, 0.0f, 1.0f);  // the image, 0..1; padding channels too (never read)
  }
  for (size_t i = 0; i < nw; i++) {
    wt[i] = rng_normal(rng) * 0.5f;
  }
  for (size_t i = 0; i < k->cout; i++) {
    b[i] = rng_normal(rng);
  }
  for (int simd = 0; simd < 3; simd++) {
    for (int t = 0; t < 2; t++) {
      y[simd][t] = NULL;
      if (!HAVE_VARIANT(k_variant, simd)) {
        continue;
      }
      y[simd][t] = malloc(ny * sizeof(float));
      CHECK(y[simd][t] != NULL);
      fill_canary(y[simd][t], ny);
      CHECK(k_variant[simd](x, k->xs, k->h, k->w, k->cin, wt, b, k->cout, y[simd][t], k->ys, k->act,
                            t ? pool : NULL) == CARVE_OK);
    }
  }
  for (int simd = 0; simd < 3; simd++) {
    if (y[simd][0] == NULL) {
      continue;
    }
    // threads: bit-identical; padding: untouched
    CHECK_MSG(memcmp(y[simd][0], y[simd][1], ny * sizeof(float)) == 0, "%s: 2 threads differ from 1 (%zux%zu)",
              carve_isa_name((carve_isa)simd), k->h, k->w);
    for (size_t p = 0; p < oh * ow; p++) {
      for (size_t c = k->cout; c < k->ys; c++) {
        CHECK_MSG(is_canary(y[simd][0][p * k->ys + c]), "%s: padding of pixel %zu written", carve_isa_name((carve_isa)simd), p);
      }
    }
    // against double
    for (size_t oy = 0; oy < oh; oy++) {
      if (!all_rows && !(oy < 2 || oy + 2 >= oh || oy == oh / 2)) {
        continue;
      }
      for (size_t ox = 0; ox < ow; ox++) {
        for (size_t co = 0; co < k->cout; co++) {
          double mag;
          const double pre = ref_out(x, k->xs, k->h, k->w, k->cin, wt, b, k->cout, oy, ox, co, &mag);
          const double want = k->act == CARVE_ACT_SILU ? silu_d(pre) : pre;
          const float got = y[simd][0][(oy * ow + ox) * k->ys + co];
          const double tol = 4e-7 * mag + 1e-6 * fabs(want) + 1e-30;
          CHECK_MSG(fabs((double)got - want) <= tol,
                    "%s %zux%zu cin %zu cout %zu act %d: (%zu,%zu,%zu) = %.9g, want %.9g (tol %.3g)",
                    carve_isa_name((carve_isa)simd), k->h, k->w, k->cin, k->cout, (int)k->act, oy, ox, co, got, want, tol);
        }
      }
    }
  }
  // the x86-64 paths: the same FMAs, so the same bits before the activation; after it, within a few ulp
  if (y[1][0] != NULL && y[2][0] != NULL) {
    for (size_t p = 0; p < oh * ow; p++) {
      for (size_t c = 0; c < k->cout; c++) {
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
    free(y[simd][0]);
    free(y[simd][1]);
  }
  free(b);
  free(wt);
  free(x);
}

static void test_shapes(pthreadpool_t pool) {
  static const size_t sizes[][2] = {{1, 1}, {2, 3}, {3, 2}, {7, 5}, {5, 8}, {8, 29}, {33, 17}, {4, 40}, {9, 51}};
  static const size_t couts[] = {16, 32, 48, 96};
  test_rng rng = {12345};
  size_t n = 0;
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    for (size_t cin = 1; cin <= 4; cin++) {
      for (size_t ci = 0; ci < sizeof couts / sizeof couts[0]; ci++) {
        for (int act = 0; act < 2; act++) {
          for (int wide = 0; wide < 2; wide++) {
            const stem_case k = {sizes[si][0], sizes[si][1], cin, couts[ci], cin + (wide ? 3 : 0),
                                 couts[ci] + (wide ? 5 : 0), act ? CARVE_ACT_SILU : CARVE_ACT_NONE};
            run_case(&k, pool, 1, &rng);
            n++;
          }
        }
      }
    }
  }
  printf("runtime_stem_conv: %zu small cases\n", n);
}

static void test_full_size(pthreadpool_t pool) {
  test_rng rng = {777};
  const stem_case cases[] = {{640, 640, 3, 16, 3, 16, CARVE_ACT_SILU},
                             {640, 640, 3, 32, 4, 40, CARVE_ACT_SILU},
                             {641, 639, 3, 16, 3, 16, CARVE_ACT_NONE}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_case(&cases[i], pool, 0, &rng);
  }
  printf("runtime_stem_conv: 640x640 cases\n");
}

static void test_refusals(void) {
  float x[64] = {0}, wt[9 * 4 * 32] = {0}, b[32] = {0}, y[64];
  fill_canary(y, 64);
  const carve_status bad = CARVE_ERR_INVALID_ARGUMENT;
  CHECK(carve_conv3x3s2_small_cin(x, 3, 2, 2, 0, wt, b, 16, y, 16, CARVE_ACT_SILU, NULL) == bad);   // cin 0
  CHECK(carve_conv3x3s2_small_cin(x, 5, 2, 2, 5, wt, b, 16, y, 16, CARVE_ACT_SILU, NULL) == bad);   // cin 5
  CHECK(carve_conv3x3s2_small_cin(x, 3, 2, 2, 3, wt, b, 8, y, 8, CARVE_ACT_SILU, NULL) == bad);     // cout 8
  CHECK(carve_conv3x3s2_small_cin(x, 3, 2, 2, 3, wt, b, 24, y, 24, CARVE_ACT_SILU, NULL) == bad);   // cout 24
  CHECK(carve_conv3x3s2_small_cin(x, 2, 2, 2, 3, wt, b, 16, y, 16, CARVE_ACT_SILU, NULL) == bad);   // x stride
  CHECK(carve_conv3x3s2_small_cin(x, 3, 2, 2, 3, wt, b, 16, y, 15, CARVE_ACT_SILU, NULL) == bad);   // y stride
  CHECK(carve_conv3x3s2_small_cin(x, 3, 0, 2, 3, wt, b, 16, y, 16, CARVE_ACT_SILU, NULL) == bad);   // h 0
  CHECK(carve_conv3x3s2_small_cin(x, 3, 2, 2, 3, NULL, b, 16, y, 16, CARVE_ACT_SILU, NULL) == bad); // weights
  CHECK(carve_conv3x3s2_small_cin(x, 3, 2, 2, 3, wt, b, 16, y, 16, (carve_act)7, NULL) == bad);     // act
  for (size_t i = 0; i < 64; i++) {
    CHECK(is_canary(y[i]));
  }
  CHECK(carve_conv3x3s2_small_cin(x, 3, 2, 2, 3, wt, b, 32, y, 32, CARVE_ACT_SILU, NULL) == CARVE_OK);
  CHECK(y[0] == 0.0f && is_canary(y[32]));  // 1x1 output of 32 channels: silu(0)
}

int main(void) {
  for (int simd = 2; simd > 0; simd--) {
    if (!HAVE_VARIANT(k_variant, simd)) {
      printf("runtime_stem_conv: no %s on this CPU: that path skipped\n", carve_isa_name((carve_isa)simd));
    }
  }
  CHECK_SELECT(carve_conv3x3s2_small_cin_select, k_variant);
  pthreadpool_t pool = make_pool2();
  test_refusals();
  test_shapes(pool);
  test_full_size(pool);
  pthreadpool_destroy(pool);
  printf("runtime_stem_conv: ok\n");
  return 0;
}
