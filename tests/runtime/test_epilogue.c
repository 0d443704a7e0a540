// Checks carve_epilogue (y = act(y) + residual) against a double-precision loop
// at odd sizes, strides wider than the channels, with and without residual,
// special values (+-inf, NaN, huge), and identical results with 0 or 2 threads;
// the selector carve_epilogue_select.

#include "carve_epilogue_isa.h"
#include "carve_epilogue.h"
#include "simd_paths.h"
#include "test_common.h"

// SiLU in double, the exact value the float kernel should round to.
static double silu_ref(double x) { return x / (1.0 + exp(-x)); }

static double max_rel_err = 0.0;

static void run_case(test_rng* rng, pthreadpool_t pool2, size_t pixels, size_t channels,
                     size_t y_pad, size_t r_pad, int with_residual, carve_act act) {
  const size_t y_stride = channels + y_pad, r_stride = channels + r_pad;
  const size_t y_len = pixels * y_stride, r_len = pixels * r_stride;
  float* x = malloc(y_len * sizeof(float));
  float* y0 = malloc(y_len * sizeof(float));
  float* y2 = malloc(y_len * sizeof(float));
  float* r = malloc(r_len * sizeof(float));
  CHECK(x && y0 && y2 && r);
  static const float specials[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 100.0f,
                                   -100.0f, -104.0f, -110.0f, 3.0e38f, -3.0e38f};
  for (size_t i = 0; i < y_len; i++) {
    const size_t c = i % y_stride;
    if (c >= channels) {
      x[i] = -12345.5f;  // padding column: must stay untouched
    } else if (rng_below(rng, 16) == 0) {
      x[i] = specials[rng_below(rng, sizeof specials / sizeof specials[0])];
    } else {
      x[i] = rng_normal(rng) * 6.0f;
    }
  }
  for (size_t i = 0; i < r_len; i++) {
    r[i] = rng_normal(rng) * 3.0f;
  }
  memcpy(y0, x, y_len * sizeof(float));
  memcpy(y2, x, y_len * sizeof(float));
  const float* res = with_residual ? r : NULL;
  CHECK(carve_epilogue(y0, y_stride, res, r_stride, pixels, channels, act, NULL) == CARVE_OK);
  CHECK(carve_epilogue(y2, y_stride, res, r_stride, pixels, channels, act, pool2) == CARVE_OK);
  CHECK(memcmp(y0, y2, y_len * sizeof(float)) == 0);

  for (size_t p = 0; p < pixels; p++) {
    for (size_t c = 0; c < y_stride; c++) {
      const float got = y0[p * y_stride + c];
      const float in = x[p * y_stride + c];
      if (c >= channels) {
        CHECK(is_canary(got));
        continue;
      }
      // The float kernel rounds twice (SiLU, then the add): compare each stage.
      const double a = act == CARVE_ACT_SILU ? silu_ref((double)in) : (double)in;
      const double rr = with_residual ? (double)r[p * r_stride + c] : 0.0;
      const double ref = a + rr;
      if (ref != ref) {
        // SiLU(-inf) = -inf / inf = NaN, as in PyTorch.
        CHECK_MSG(got != got, "x=%g: expected NaN, got %g", (double)in, (double)got);
        continue;
      }
      if (isinf(ref)) {
        CHECK(got == (float)ref);
        continue;
      }
      // Error budget: ~1.5 ulp of SiLU plus 0.5 ulp of the sum, relative to the
      // magnitudes involved.
      const double tol = 2.5e-7 * fabs(a) + 6.0e-8 * (fabs(ref) + fabs(rr)) + 1e-37;
      const double err = fabs((double)got - ref);
      CHECK_MSG(err <= tol, "p=%zu c=%zu x=%.9g r=%.9g got=%.9g ref=%.9g", p, c, (double)in, rr,
                (double)got, ref);
      if (!with_residual && fabs(a) >= 1e-30) {  // below, float underflows to 0 as in torch
        const double rel = err / fabs(a);
        if (rel > max_rel_err) {
          max_rel_err = rel;
        }
      }
    }
  }
  free(x);
  free(y0);
  free(y2);
  free(r);
}

int main(void) {
  // carve_epilogue_select picks each instruction set's variant (the portable one where the build has none).
  static const carve_epilogue_fn k_variant[CARVE_TEST_ISAS] = CARVE_TEST_VARIANTS(carve_epilogue);
  CHECK_SELECT(carve_epilogue_select, k_variant);
  test_rng rng = {12345};
  pthreadpool_t pool2 = make_pool2();
  const size_t pixel_counts[] = {1, 35, 1000, 6400};
  const size_t channel_counts[] = {1, 3, 17, 64};
  size_t cases = 0;
  for (size_t a = 0; a < 4; a++) {
    for (size_t b = 0; b < 4; b++) {
      for (int residual = 0; residual < 2; residual++) {
        for (int act = 0; act < 2; act++) {
          const size_t pad = (a + b) % 3 == 0 ? 0 : 5;
          run_case(&rng, pool2, pixel_counts[a], channel_counts[b], pad, 2 * pad + 1, residual,
                   act ? CARVE_ACT_SILU : CARVE_ACT_NONE);
          cases++;
        }
      }
    }
  }
  // A dense sweep of SiLU alone over [-30, 30].
  {
    const size_t n = 200001;
    float* y = malloc(n * sizeof(float));
    CHECK(y);
    for (size_t i = 0; i < n; i++) {
      y[i] = -30.0f + 60.0f * (float)i / (float)(n - 1);
    }
    float* x = malloc(n * sizeof(float));
    CHECK(x);
    memcpy(x, y, n * sizeof(float));
    CHECK(carve_epilogue(y, 1, NULL, 0, n, 1, CARVE_ACT_SILU, pool2) == CARVE_OK);
    for (size_t i = 0; i < n; i++) {
      const double ref = silu_ref((double)x[i]);
      if (ref != 0.0) {
        const double rel = fabs((double)y[i] - ref) / fabs(ref);
        CHECK_MSG(rel <= 2.5e-7, "x=%.9g got=%.9g ref=%.12g", (double)x[i], (double)y[i], ref);
        if (rel > max_rel_err) {
          max_rel_err = rel;
        }
      }
    }
    free(x);
    free(y);
  }
  // Bad arguments: refused (no crash, no write).
  CHECK(carve_epilogue(NULL, 1, NULL, 1, 10, 1, CARVE_ACT_SILU, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  pthreadpool_destroy(pool2);
  printf("runtime_epilogue: %zu cases ok, max SiLU relative error vs double %.3g\n", cases,
         max_rel_err);
  return 0;
}
