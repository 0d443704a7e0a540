// libFuzzer target for the per-task functions of segmentation and classification packages (clang
// -fsanitize=fuzzer,address,undefined; built with -DCARVE_MUT_SEGMENT or -DCARVE_MUT_CLASSIFY).
//
// segment:  _run_image on a fuzzed image (sizes 1..1023, up to 10000 on one side, padded strides),
//           then _mask / _mask_logits on detections whose row and box the input rewrites (any float
//           bits), with the scratch exact or short and the mask buffer exactly width * height bytes.
// classify: _run_image with a fuzzed size (incl. 0 and negative), stride (padded or short), k
//           (0 .. TOPK + 1), scratch exact, short or misaligned, and NULL top.
//
// Each call must return the status its arguments call for (a mismatch aborts) and never touch
// memory it does not own (the sanitizers). Short run: run_security.py fuzz-task (ctest
// security_fuzz_seg / security_fuzz_cls); long: make fuzz-task FUZZ_SECONDS=3600.

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mut.h"

static void fill(const reader* r, uint8_t* dst, size_t bytes) {
  for (size_t i = 0; i < bytes; i++) {
    dst[i] = r->n > 0 ? r->p[i % r->n] : (uint8_t)i;
  }
}

static mut_model* g_model;

static mut_model* model(void) {
  if (g_model == NULL && MUT(_create)(NULL, &g_model) != CARVE_OK) {
    abort();
  }
  return g_model;
}

// Width and height: 1..1023, or one side up to 10000 when the other is at most 4.
static void take_size(reader* r, int* w, int* h) {
  *w = 1 + (int)(take(r, 2) % 1023);
  *h = 1 + (int)(take(r, 2) % 1023);
  const uint32_t thin = take(r, 1);
  if (thin & 1) {
    *w = 1 + (int)(thin >> 1) % 4;
    *h = 5000 + (int)(take(r, 2) % 5001);
  } else if (thin & 2) {
    *h = 1 + (int)(thin >> 2) % 4;
    *w = 5000 + (int)(take(r, 2) % 5001);
  }
}

#ifdef CARVE_MUT_SEGMENT

static float take_float(reader* r) {
  const uint32_t bits = take(r, 4);
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  reader r = {data, size};
  mut_model* m = model();
  int w, h;
  take_size(&r, &w, &h);
  const size_t stride = (size_t)w * 3 + take(&r, 1);
  const size_t img_bytes = (size_t)(h - 1) * stride + (size_t)w * 3;
  uint8_t* img = malloc(img_bytes);
  if (img == NULL) abort();
  fill(&r, img, img_bytes);
  static mut_detection dets[MUT_MAX_DETS];
  size_t n = 0;
  if (MUT(_run_image)(m, img, w, h, stride, 0.0f, dets, MUT_MAX_DETS, &n) != CARVE_OK || n > MUT_MAX_DETS) {
    abort();
  }
  free(img);
  size_t rows = 0;
  if (MUT(_rows)(m, &rows) == NULL) abort();
  const size_t bytes = MUT(_mask_scratch_bytes)(m);
  if (bytes == 0) abort();
  uint8_t* mask = malloc((size_t)w * (size_t)h);
  float* logits = malloc(sizeof(float) * MUTC(_PROTO_H) * MUTC(_PROTO_W));
  if (mask == NULL || logits == NULL) abort();
  for (int t = 0; t < 3 && n > 0; t++) {
    mut_detection d = dets[take(&r, 1) % n];
    const uint32_t what = take(&r, 1);
    if (what & 1) d.row = (int)take(&r, 4);
    if (what & 2) {
      d.x1 = take_float(&r), d.y1 = take_float(&r), d.x2 = take_float(&r), d.y2 = take_float(&r);
    }
    const size_t short_by = (what & 4) ? 1 + take(&r, 1) % 64 : 0;
    const size_t have = short_by < bytes ? bytes - short_by : 0;
    void* scratch = malloc(have > 0 ? have : 1);
    if (scratch == NULL) abort();
    const int row_ok = d.row >= 0 && (size_t)d.row < rows;
    carve_status s = MUT(_mask_logits)(m, &d, logits);
    if (s != (row_ok ? CARVE_OK : CARVE_ERR_INVALID_ARGUMENT)) abort();
    s = MUT(_mask)(m, &d, mask, scratch, have);
    if (!row_ok || short_by > 0) {
      if (s != CARVE_ERR_INVALID_ARGUMENT) abort();
    } else if (s != CARVE_OK && s != CARVE_ERR_INVALID_ARGUMENT) {
      abort();  // a made-up box may be refused, nothing else
    }
    if (s == CARVE_OK) {
      for (size_t p = 0; p < (size_t)w * (size_t)h; p++) {
        if (mask[p] > 1) abort();
      }
    }
    free(scratch);
  }
  free(mask);
  free(logits);
  return 0;
}

#elif defined(CARVE_MUT_CLASSIFY)

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  reader r = {data, size};
  mut_model* m = model();
  const uint32_t flags = take(&r, 1);
  int w, h;
  take_size(&r, &w, &h);
  if (flags & 1) w = -(int)(take(&r, 1) % 3);  // 0, -1, -2
  if (flags & 2) h = -(int)(take(&r, 1) % 3);
  const uint32_t pad = take(&r, 1);
  size_t stride = w > 0 ? (size_t)w * 3 : 0;
  const int short_stride = (flags & 4) && stride > 0;
  stride = short_stride ? stride - 1 : stride + pad;
  const size_t k = take(&r, 1) % (MUT_TOPK + 2);
  const int bad_image = w <= 0 || h <= 0 || short_stride;
  const size_t img_bytes = bad_image ? 1 : (size_t)(h - 1) * stride + (size_t)w * 3;
  uint8_t* img = malloc(img_bytes);
  if (img == NULL) abort();
  fill(&r, img, img_bytes);
  const size_t need = MUT(_image_scratch_bytes)(w, h);
  const size_t short_by = (flags & 8) ? 1 + take(&r, 1) % 16 : 0;
  const size_t have = short_by < need ? need - short_by : 0;
  const int misaligned = (flags & 16) != 0;
  uint8_t* block = malloc(have + 8);
  if (block == NULL) abort();
  void* scratch = misaligned ? (void*)(block + 1) : (void*)block;
  static mut_class top[MUT_TOPK + 2];
  mut_class* tp = (flags & 32) ? NULL : top;

  // The order of the checks: arguments, then scratch alignment (carve_classify_preprocess), then the image.
  carve_status want = CARVE_OK;
  if ((tp == NULL && k > 0) || k > MUT_TOPK || (need > 0 && have < need) || misaligned) {
    want = CARVE_ERR_INVALID_ARGUMENT;
  } else if (bad_image) {
    want = CARVE_ERR_BAD_IMAGE;
  }
  const carve_status got = MUT(_run_image)(m, img, w, h, stride, tp, k, scratch, have);
  if (got != want) {
    fprintf(stderr, "cls run_image(%dx%d stride %zu k %zu scratch %zu/%zu%s): %d, expected %d\n", w, h, stride, k,
            have, need, misaligned ? " misaligned" : "", got, want);
    abort();
  }
  for (size_t i = 0; got == CARVE_OK && i < k; i++) {
    if (top[i].class_id < 0 || top[i].class_id >= MUT_CLASSES || !(top[i].prob >= 0.0f && top[i].prob <= 1.0f)) {
      abort();
    }
  }
  free(block);
  free(img);
  return 0;
}

#else
#error "build with -DCARVE_MUT_SEGMENT or -DCARVE_MUT_CLASSIFY"
#endif
