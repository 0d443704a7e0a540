// Checks the AVX-512 and AVX2 + FMA SiLU variants of carve_epilogue
// (carve_epilogue__avx512, __avx2 of runtime/carve_epilogue_isa.h) against its
// portable loop (the one every other CPU runs) and against SiLU in double:
// every 32nd float bit pattern in [-104, 100] plus every float in [-1, 1] that
// is a multiple of 2^-20, the specials (+-0, +-inf, NaN, the clamp edges, huge
// values, denormals) and every length 0..40 (the masked tails), with and without
// a residual. Each path must be within 4 ulp of the portable loop (measured:
// 99.96% bit-equal, 4 ulp at most, where exp(-x) is large and the portable loop's
// double rounding shows) and within the portable loop's error budget (2.5e-7
// relative) of the double value (measured: 1.4e-7).
//
// Each variant runs as carve_epilogue would call it on one pixel of `count`
// channels (one SiLU run). On a CPU without AVX-512 or AVX2 the paths it cannot
// run are reported as skipped; on other architectures the whole test exits 77
// (skipped), as those only have the portable loop.

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "carve_epilogue_isa.h"
#include "test_common.h"

#ifndef CARVE_HAVE_X86_SIMD
int main(void) {
  printf("runtime_silu_simd: no x86-64 SIMD SiLU on this architecture: skipped\n");
  return 77;
}
#else

typedef void (*silu_fn)(float* y, const float* r, size_t count);

// y = silu(y) (+ r) over count floats by one variant of carve_epilogue.
static void silu_by(carve_epilogue_fn variant, float* y, const float* r, size_t count) {
  if (count > 0) {
    CHECK(variant(y, count, r, count, 1, count, CARVE_ACT_SILU, NULL) == CARVE_OK);
  }
}

static void silu_portable(float* y, const float* r, size_t count) { silu_by(carve_epilogue__portable, y, r, count); }
static void silu_avx2(float* y, const float* r, size_t count) { silu_by(carve_epilogue__avx2, y, r, count); }
static void silu_avx512(float* y, const float* r, size_t count) { silu_by(carve_epilogue__avx512, y, r, count); }

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

// Distance in ulp between two finite floats of the same sign (or both zero).
static int64_t ulp_distance(float a, float b) {
  if (a == b) {
    return 0;
  }
  const int64_t ia = (int64_t)(int32_t)bits(a), ib = (int64_t)(int32_t)bits(b);
  if ((ia < 0) != (ib < 0)) {
    return INT64_MAX;
  }
  return ia > ib ? ia - ib : ib - ia;
}

typedef struct stats {
  int64_t max_ulp;
  double max_rel;
  size_t values, bit_equal;
} stats;

// Compares one block: x (inputs), r (residual or NULL).
static void compare(const char* name, silu_fn fn, const float* x, const float* r, size_t n, stats* st) {
  float* want = malloc(n * sizeof(float) + 1);
  float* got = malloc(n * sizeof(float) + 1);
  CHECK(want && got);
  memcpy(want, x, n * sizeof(float));
  memcpy(got, x, n * sizeof(float));
  silu_portable(want, r, n);
  fn(got, r, n);
  for (size_t i = 0; i < n; i++) {
    const float w = want[i], g = got[i];
    st->values++;
    if (w != w || g != g) {
      CHECK_MSG(w != w && g != g, "%s: x=%.9g: portable %.9g, simd %.9g", name, (double)x[i], (double)w,
                (double)g);
      st->bit_equal++;
      continue;
    }
    if (bits(w) == bits(g)) {
      st->bit_equal++;
      continue;
    }
    const int64_t u = ulp_distance(w, g);
    CHECK_MSG(u <= 4, "%s: x=%.9g r=%.9g: portable %.9g, simd %.9g (%lld ulp)", name, (double)x[i],
              r != NULL ? (double)r[i] : 0.0, (double)w, (double)g, (long long)u);
    if (u > st->max_ulp) {
      st->max_ulp = u;
    }
    if (r == NULL && isfinite(x[i])) {
      const double ref = (double)x[i] / (1.0 + exp(-(double)x[i]));
      if (fabs(ref) > 1e-37) {
        const double rel = fabs((double)g - ref) / fabs(ref);
        CHECK_MSG(rel <= 2.5e-7, "%s: x=%.9g: simd %.9g, double %.12g", name, (double)x[i], (double)g, ref);
        if (rel > st->max_rel) {
          st->max_rel = rel;
        }
      }
    }
  }
  free(want);
  free(got);
}

static void check_path(const char* name, silu_fn fn) {
  stats st = {0, 0.0, 0, 0};
  enum { BLOCK = 1 << 16 };
  float* x = malloc(BLOCK * sizeof(float));
  float* r = malloc(BLOCK * sizeof(float));
  CHECK(x && r);
  // Every 32nd bit pattern in [-104, 100], in blocks.
  size_t n = 0;
  for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 32) {
    float f;
    const uint32_t b = (uint32_t)u;
    memcpy(&f, &b, sizeof f);
    if (!(f >= -104.0f && f <= 100.0f)) {
      continue;
    }
    x[n++] = f;
    if (n == BLOCK) {
      compare(name, fn, x, NULL, n, &st);
      n = 0;
    }
  }
  // Every multiple of 2^-20 in [-1, 1] (where most activations are).
  for (int32_t k = -(1 << 20); k <= (1 << 20); k++) {
    x[n++] = (float)k * 0x1p-20f;
    if (n == BLOCK) {
      compare(name, fn, x, NULL, n, &st);
      n = 0;
    }
  }
  compare(name, fn, x, NULL, n, &st);
  // Specials, with and without a residual, at every length 0..40 (the masked tails).
  static const float specials[] = {0.0f, -0.0f, 1e-40f, -1e-40f, 1e-30f, -1e-30f, 87.0f, -87.0f, 88.8f,
                                   -88.8f, 100.0f, -100.0f, 103.9f, -103.9f, 104.0f, -104.0f, 110.0f,
                                   -110.0f, 3.0e38f, -3.0e38f, INFINITY, -INFINITY, NAN, -NAN, 0.5f,
                                   -0.5f, 7.25f, -7.25f, 20.0f, -20.0f};
  const size_t ns = sizeof specials / sizeof specials[0];
  test_rng rng = {2026};
  for (size_t len = 0; len <= 40; len++) {
    for (size_t i = 0; i < len; i++) {
      x[i] = rng_below(&rng, 3) == 0 ? specials[rng_below(&rng, ns)] : rng_normal(&rng) * 8.0f;
      r[i] = rng_normal(&rng) * 3.0f;
    }
    compare(name, fn, x, NULL, len, &st);
    compare(name, fn, x, r, len, &st);
    // A tail must not write past its end.
    float* y = malloc((len + 16) * sizeof(float));
    CHECK(y);
    memcpy(y, x, len * sizeof(float));
    for (size_t i = len; i < len + 16; i++) {
      y[i] = -12345.5f;
    }
    fn(y, NULL, len);
    for (size_t i = len; i < len + 16; i++) {
      CHECK(y[i] == -12345.5f);
    }
    free(y);
  }
  printf("  %s: %zu values, %.2f%% bit-equal to the portable loop, max %lld ulp; max relative error vs double %.3g\n",
         name, st.values, 100.0 * (double)st.bit_equal / (double)st.values, (long long)st.max_ulp, st.max_rel);
  free(x);
  free(r);
}

int main(void) {
  int ran = 0;
  if (__builtin_cpu_supports("avx512f")) {
    check_path("avx512", silu_avx512);
    ran++;
  } else {
    printf("  avx512: this CPU has no AVX-512F: skipped\n");
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    check_path("avx2", silu_avx2);
    ran++;
  } else {
    printf("  avx2: this CPU has no AVX2 + FMA: skipped\n");
  }
  // The detection agrees with what the CPU has (test_epilogue checks the selector on every architecture).
  CHECK(carve_isa_detect() == (__builtin_cpu_supports("avx512f") ? CARVE_ISA_AVX512
                               : ran > 0                         ? CARVE_ISA_AVX2
                                                                 : CARVE_ISA_PORTABLE));
  printf("runtime_silu_simd: %d SIMD path(s) checked\n", ran);
  return ran > 0 ? 0 : 77;
}
#endif
