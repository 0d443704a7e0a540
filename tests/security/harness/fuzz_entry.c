// libFuzzer target for the entry points of a generated detect package (clang
// -fsanitize=fuzzer,address,undefined). Each input is decoded into one call:
//
//   byte 0 % 4 == 0, 1: _run_image on a fuzzed image: width / height in -2..2047 (one side up to
//                 10000 when the other is small), a stride of width * 3 plus 0..255 bytes or
//                 1..3 bytes short, fuzzed pixels, conf (any float bits: NaN, inf), max_dets,
//                 and NULL for model / rgb / dets / num_dets on request;
//   byte 0 % 4 == 2: _run_tensor on a fuzzed float tensor (any bits: NaN, inf, denormals);
//   byte 0 % 4 == 3: _create with a fuzzed thread count (INT_MIN .. INT_MAX; valid counts above 3
//                 are skipped to keep runs fast), then _destroy.
//
// Every call must return the status docs/api.md gives for its arguments (checked here: a mismatch
// aborts, which libFuzzer reports), and the results must be in range. Crashes, out-of-bounds reads
// and undefined behaviour are caught by the sanitizers. The image buffer is exactly
// (h - 1) * stride + 3 * w bytes, so any over-read is a finding.
//
// Short run (ctest security_fuzz_entry): fuzz_entry -max_total_time=20 CORPUS
// Long run (docs/security.md):           make fuzz FUZZ_SECONDS=3600
// Replay a finding:                       fuzz_entry crash-<sha1>

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mut.h"

// The rest of the input, repeated over dst (zeros when nothing is left).
static void fill(reader* r, uint8_t* dst, size_t bytes) {
  if (r->n == 0) {
    memset(dst, 0, bytes);
    return;
  }
  for (size_t i = 0; i < bytes; i++) {
    dst[i] = r->p[i % r->n];
  }
}

static mut_model* g_models[2];  // 1 and 2 worker threads, created once

static mut_model* model(int which) {
  if (g_models[which] == NULL) {
    mut_options o = {.threads = which + 1};
    if (MUT(_create)(&o, &g_models[which]) != CARVE_OK) {
      abort();
    }
  }
  return g_models[which];
}

static void check_dets(const mut_detection* dets, size_t n, size_t max_dets, float w, float h) {
  if (n > max_dets || n > MUT_MAX_DETS) {
    abort();
  }
  for (size_t i = 0; i < n; i++) {
    if (dets[i].class_id < 0 || dets[i].class_id >= MUT_CLASSES) {
      abort();
    }
    if (w > 0 && (dets[i].x1 < 0 || dets[i].x2 > w || dets[i].y1 < 0 || dets[i].y2 > h)) {
      abort();  // image boxes are clipped (NaN compares false and passes)
    }
  }
}

static void fuzz_image(reader* r, uint8_t flags) {
  mut_model* m = model(flags >> 7);
  int w = (int)(take(r, 2) % 2050) - 2;
  int h = (int)(take(r, 2) % 2050) - 2;
  if (flags & 0x40) {  // long thin images: 1 x 10000 and the like
    if (w > 0 && w <= 4) {
      h = 5000 + (int)(take(r, 2) % 5001);
    } else if (h > 0 && h <= 4) {
      w = 5000 + (int)(take(r, 2) % 5001);
    }
  }
  const uint32_t pad = take(r, 1);
  size_t stride = 0;
  if (w > 0) {
    stride = (size_t)w * 3;
    if (flags & 0x20) {  // 1..3 bytes too short
      const size_t short_by = 1 + pad % 3 < stride ? 1 + pad % 3 : stride;
      stride -= short_by;
    } else {
      stride += pad;
    }
  }
  uint32_t conf_bits = take(r, 4);
  float conf;
  memcpy(&conf, &conf_bits, sizeof(conf));
  const size_t max_dets = take(r, 1) % (MUT_MAX_DETS + 2);
  const uint32_t nulls = take(r, 1);

  uint8_t* img = NULL;
  size_t bytes = 0;
  if (w > 0 && h > 0 && stride >= (size_t)w * 3) {
    if ((size_t)w * (size_t)h > ((size_t)1 << 21)) {
      h = (int)(((size_t)1 << 21) / (size_t)w);  // keep one run fast
    }
    bytes = (size_t)(h - 1) * stride + (size_t)w * 3;
  }
  img = malloc(bytes > 0 ? bytes : 1);
  if (img == NULL) {
    abort();
  }
  fill(r, img, bytes > 0 ? bytes : 1);
  static mut_detection dets[MUT_MAX_DETS + 2];
  size_t n = 12345;

  mut_model* mm = (nulls & 1) ? NULL : m;
  const uint8_t* rgb = (nulls & 2) ? NULL : img;
  mut_detection* d = (nulls & 4) ? NULL : dets;
  size_t* np = (nulls & 8) ? NULL : &n;
  carve_status want = CARVE_OK;
  if (mm == NULL || rgb == NULL || np == NULL || (d == NULL && max_dets > 0)) {
    want = CARVE_ERR_INVALID_ARGUMENT;
  } else if (w <= 0 || h <= 0 || stride < (size_t)w * 3) {
    want = CARVE_ERR_BAD_IMAGE;
  }
  const carve_status got = MUT(_run_image)(mm, rgb, w, h, stride, conf, d, max_dets, np);
  if (got != want) {
    fprintf(stderr, "run_image(%dx%d, stride %zu, nulls %u): status %d, expected %d\n", w, h, stride, nulls, got, want);
    abort();
  }
  if (got == CARVE_OK) {
    check_dets(dets, n, max_dets, (float)w, (float)h);
  }
  free(img);
}

static void fuzz_tensor(reader* r, uint8_t flags) {
  mut_model* m = model(flags >> 7);
  const size_t floats = (size_t)3 * MUT_H * MUT_W;
  static float x[(size_t)3 * MUT_H * MUT_W];
  uint32_t conf_bits = take(r, 4);
  float conf;
  memcpy(&conf, &conf_bits, sizeof(conf));
  fill(r, (uint8_t*)x, floats * sizeof(float));
  static mut_detection dets[MUT_MAX_DETS];
  size_t n = 0;
  if (MUT(_run_tensor)(m, x, conf, dets, MUT_MAX_DETS, &n) != CARVE_OK) {
    abort();
  }
  check_dets(dets, n, MUT_MAX_DETS, 0.0f, 0.0f);
  size_t rows = 0;
  if (MUT(_rows)(m, &rows) == NULL || rows > MUT_MAX_DETS || n > rows) {
    abort();
  }
}

static void fuzz_create(reader* r) {
  const int threads = (int)take(r, 4);
  if (threads > 3 && threads <= 1024) {
    return;  // valid but slow to set up; 0..3 cover the valid paths
  }
  mut_options o = {.threads = threads};
  mut_model* m = (mut_model*)&o;
  const carve_status got = MUT(_create)(&o, &m);
  const carve_status want = (threads < 0 || threads > 1024) ? CARVE_ERR_INVALID_ARGUMENT : CARVE_OK;
  if (got != want || (got == CARVE_OK) != (m != NULL)) {
    abort();
  }
  MUT(_destroy)(m);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  reader r = {data, size};
  const uint8_t flags = (uint8_t)take(&r, 1);
  switch (flags & 3) {
    case 0:
    case 1:
      fuzz_image(&r, flags);
      break;
    case 2:
      fuzz_tensor(&r, flags);
      break;
    default:
      fuzz_create(&r);
      break;
  }
  return 0;
}
