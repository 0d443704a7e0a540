// Helpers shared by the runtime tests: checks that print what failed, a seeded
// random generator, NaN-aware float comparison and a 2-thread pool.

#ifndef CARVE_TEST_COMMON_H
#define CARVE_TEST_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthreadpool.h>

// CHECK(cond): aborts with the file, line and condition when cond is false.
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      abort();                                                                 \
    }                                                                          \
  } while (0)

// CHECK_MSG(cond, fmt, ...): as CHECK, with a printf-style explanation.
#define CHECK_MSG(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);  \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      abort();                                                                 \
    }                                                                          \
  } while (0)

// ---- Random numbers (splitmix64, fixed seeds) -------------------------------

typedef struct test_rng {
  uint64_t state;
} test_rng;

static inline uint64_t rng_u64(test_rng* r) {
  uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1).
static inline double rng_uniform(test_rng* r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }

// Uniform in [lo, hi).
static inline float rng_range(test_rng* r, float lo, float hi) {
  return (float)(lo + (hi - lo) * rng_uniform(r));
}

// Standard normal (Box-Muller).
static inline float rng_normal(test_rng* r) {
  const double u1 = 1.0 - rng_uniform(r), u2 = rng_uniform(r);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// Uniform integer in [0, n).
static inline size_t rng_below(test_rng* r, size_t n) { return (size_t)(rng_u64(r) % n); }

// ---- Comparison -------------------------------------------------------------

// Same float, NaN equal to NaN, -0 equal to +0.
static inline int same_float(float a, float b) { return (a != a && b != b) || a == b; }

// Fills n floats with a value the code under test must not write.
static inline void fill_canary(float* p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    p[i] = -12345.5f;
  }
}

static inline int is_canary(float v) { return v == -12345.5f; }

// A pool with two worker threads (the calling thread plus one).
static inline pthreadpool_t make_pool2(void) {
  pthreadpool_t pool = pthreadpool_create(2);
  CHECK(pool != NULL);
  CHECK(pthreadpool_get_threads_count(pool) == 2);
  return pool;
}

#endif  // CARVE_TEST_COMMON_H
