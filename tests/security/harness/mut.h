// The model under test: a generated detect package, named at build time by
// tests/security/harness/CMakeLists.txt:
//   -DCARVE_MUT=yolo26n_shapes -DCARVE_MUT_UPPER=YOLO26N_SHAPES -DCARVE_MUT_HEADER="yolo26n_shapes.h"
// MUT(_create) is then yolo26n_shapes_create and MUTC(_INPUT_H) is YOLO26N_SHAPES_INPUT_H, so one
// harness source serves any detect package.

#ifndef CARVE_SECURITY_MUT_H
#define CARVE_SECURITY_MUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include CARVE_MUT_HEADER

#define MUT_CAT_(a, b) a##b
#define MUT_CAT(a, b) MUT_CAT_(a, b)
#define MUT(suffix) MUT_CAT(CARVE_MUT, suffix)
#define MUTC(suffix) MUT_CAT(CARVE_MUT_UPPER, suffix)

typedef MUT(_options) mut_options;

// The fuzzers' input as a stream: take(r, n) reads n bytes big-endian, zeros once the input is used up.
typedef struct {
  const uint8_t* p;
  size_t n;
} reader;

static inline uint32_t take(reader* r, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes; i++) {
    v = (v << 8) | (r->n > 0 ? *r->p : 0);
    if (r->n > 0) {
      r->p++;
      r->n--;
    }
  }
  return v;
}


typedef struct CARVE_MUT mut_model;

#define MUT_H MUTC(_INPUT_H)
#define MUT_W MUTC(_INPUT_W)
#define MUT_LAYERS MUTC(_NUM_LAYERS)
#define MUT_CLASSES MUTC(_NUM_CLASSES)
#ifdef CARVE_MUT_CLASSIFY  // classify packages: top-k classes instead of detections
typedef MUT(_class) mut_class;
#define MUT_TOPK MUTC(_TOPK)
#else
typedef MUT(_detection) mut_detection;
#define MUT_MAX_DETS MUTC(_MAX_DETECTIONS)
#define MUT_ROW_LEN MUTC(_ROW_LEN)
#endif

// CHECK stays on in every build type: a failed check names the line and exits 1.
#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

#define CHECK_STATUS(expr, want)                                                          \
  do {                                                                                    \
    const carve_status got_ = (expr);                                                     \
    if (got_ != (want)) {                                                                 \
      fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d\n", __FILE__, __LINE__,    \
              #expr, (int)got_, carve_status_str(got_), (int)(want));                     \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

// xorshift64*: deterministic pseudo-random bytes for test images.
static inline uint64_t mut_rand(uint64_t* s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

// A w x h RGB image with rows stride bytes apart, in a buffer of exactly (h - 1) * stride + 3 * w
// bytes (the last row has no padding), so a sanitizer sees any read past it. Padding bytes are
// random too: a run must not read them.
static inline uint8_t* mut_image(int w, int h, size_t stride, uint64_t seed) {
  const size_t bytes = (size_t)(h - 1) * stride + (size_t)w * 3;
  uint8_t* p = malloc(bytes);
  CHECK(p != NULL);
  uint64_t s = seed | 1;
  for (size_t i = 0; i < bytes; i++) {
    p[i] = (uint8_t)(mut_rand(&s) >> 56);
  }
  // Smooth shapes over the noise so that the model sees something like its training data.
  for (int y = 0; y < h; y++) {
    for (int x = 0; x < w; x++) {
      uint8_t* px = p + (size_t)y * stride + (size_t)x * 3;
      if ((x / 7 + y / 5) % 3 == 0) {
        px[0] = 230, px[1] = 40, px[2] = 40;
      }
    }
  }
  return p;
}

#endif  // CARVE_SECURITY_MUT_H
