// carve runtime: what the files of carve_q8_pool (carve_q8_run_pool's instruction-set variants, carve_q8_pool.h)
// share; not part of the API. carve_q8.c checks the arguments, resolves the views and splits the op into tiles
// (carve_q8_run_pool_loops); a variant is the item loops for the ops it takes (carve_q8_isa.h: `takes` below, the
// same for every variant) and its `items`. One file per instruction-set family: carve_q8_pool.c (portable C, the
// selection), carve_q8_pool_avx512.c (AVX-512, with and without VBMI), carve_q8_pool_avx2.c (AVX2 + FMA),
// carve_q8_pool_neon.c (aarch64 NEON); each declares its entry points in the header of its name, which
// carve_q8_pool_isa.h gathers. Every variant computes carve_q8.c's bytes (tests/runtime/q8_vs_arith.py,
// q8_pool_vs_run.py).

#ifndef CARVE_Q8_POOL_IMPL_H
#define CARVE_Q8_POOL_IMPL_H

#include "carve_q8_pool.h"
#include "carve_q8_isa.h"

#include <string.h>

#define Q8P_INLINE __attribute__((always_inline)) static inline

#define Q8P_MAX_PAIRS ((CARVE_Q8_POOL_MAX_TAPS + 1) / 2)  // tap pairs of the largest kernel (AVX-512, AVX2)

static inline size_t out_size(size_t in, size_t k, size_t stride, size_t pad) {
  return (in + 2 * pad - k) / stride + 1;
}

// carve_q8.c's tap_range: the kernel taps [lo, hi) of output o whose input lies inside [0, in).
static inline void tap_range(size_t o, size_t s, size_t pad, size_t k, size_t in, size_t* lo, size_t* hi) {
  const size_t first = o * s;
  *lo = first < pad ? pad - first : 0;
  const size_t end = in + pad > first ? in + pad - first : 0;
  *hi = end < k ? end : k;
}

// ---- Items ----------------------------------------------------------------------------------------------------

static inline int takes(const carve_q8_desc* d) {
  switch (d->kind) {
    case CARVE_Q8_CONV:
      return d->groups == d->cin && d->cin == d->cout && (size_t)d->kh * d->kw <= CARVE_Q8_POOL_MAX_TAPS;
    case CARVE_Q8_ADD:
      return carve_q8_add_i32_ok(d);
    case CARVE_Q8_QUANTIZE:
    case CARVE_Q8_DEQUANTIZE:
    case CARVE_Q8_MAXPOOL:
      return 1;
    default:
      return 0;
  }
}

// The pixels [px0, px1) of the views as runs (carve_q8.c's runs_of): one run when every view is packed.
static inline size_t runs_of(size_t c, int packed, size_t px0, size_t px1, size_t* run) {
  *run = packed ? (px1 - px0) * c : c;
  return packed ? 1 : px1 - px0;
}

// The element-wise kinds over pixels [px0, px1), with one variant's run functions: inlined into each variant's
// `pixels`, so that the calls below are direct calls of that variant's code.
typedef void (*q8p_add_fn)(const carve_q8_desc* d, const int8_t* a, const int8_t* b, int8_t* y, size_t n);
typedef void (*q8p_quantize_fn)(const float* x, int8_t* y, size_t n, float scale, int32_t zp);
typedef void (*q8p_dequantize_fn)(const int8_t* x, float* y, size_t n, float scale, int32_t zp);

Q8P_INLINE void pixels_with(const carve_q8_task* t, size_t px0, size_t px1, q8p_add_fn add,
                            q8p_quantize_fn quantize, q8p_dequantize_fn dequantize) {
  const carve_q8_desc* d = t->d;
  const size_t c = d->cin, xs = d->in_stride, ys = d->out_stride;
  size_t run;
  switch (d->kind) {
    case CARVE_Q8_ADD: {
      const size_t x2s = d->in2_stride, runs = runs_of(c, xs == c && x2s == c && ys == c, px0, px1, &run);
      const int8_t* a = (const int8_t*)(const void*)t->x + px0 * xs;
      const int8_t* b = (const int8_t*)(const void*)t->x2 + px0 * x2s;
      int8_t* y = (int8_t*)(void*)t->y + px0 * ys;
      for (size_t r = 0; r < runs; r++) {
        add(d, a + r * xs, b + r * x2s, y + r * ys, run);
      }
      break;
    }
    case CARVE_Q8_QUANTIZE: {
      const size_t runs = runs_of(c, xs == c && ys == c, px0, px1, &run);
      const float* x = (const float*)(const void*)t->x + px0 * xs;
      int8_t* y = (int8_t*)(void*)t->y + px0 * ys;
      for (size_t r = 0; r < runs; r++) {
        quantize(x + r * xs, y + r * ys, run, d->scale, d->out_zero);
      }
      break;
    }
    case CARVE_Q8_DEQUANTIZE: {
      const size_t runs = runs_of(c, xs == c && ys == c, px0, px1, &run);
      const int8_t* x = (const int8_t*)(const void*)t->x + px0 * xs;
      float* y = (float*)(void*)t->y + px0 * ys;
      for (size_t r = 0; r < runs; r++) {
        dequantize(x + r * xs, y + r * ys, run, d->scale, d->in_zero);
      }
      break;
    }
  }
}

#endif  // CARVE_Q8_POOL_IMPL_H
