// Hostile arguments to the per-task functions of segmentation and classification packages, under
// AddressSanitizer + UndefinedBehaviorSanitizer (ctest security_asan_seg_api, security_asan_cls_api).
// Built with -DCARVE_MUT_SEGMENT or -DCARVE_MUT_CLASSIFY (tests/security/harness/CMakeLists.txt).
//
// segment:  _mask_logits, _mask_scratch_bytes and _mask before a run, with NULLs, rows out of range,
//           scratch NULL / one byte short, boxes NaN / inverted / huge, after images of 1x1, 1x10000,
//           10000x1 and odd sizes; every mask is written into a buffer of exactly width * height
//           bytes and holds only 0 and 1.
// classify: _run_image with NULLs, k > TOPK, scratch NULL / short / misaligned, sizes 0, negative,
//           1x1, 1x10000, 10000x1, strides short and padded (padding must not change the
//           probabilities, bit for bit), _run_tensor with NaN / inf, _probs before a run.

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mut.h"

static const struct {
  int w, h;
} k_sizes[] = {{1, 1}, {1, 10000}, {10000, 1}, {2, 3}, {MUT_W - 1, MUT_H + 1}, {MUT_W, MUT_H}, {333, 17}, {17, 333}};
#define NUM_SIZES (sizeof(k_sizes) / sizeof(k_sizes[0]))

static void check_create(void) {
  mut_model* m = (mut_model*)&m;
  mut_options o = {.threads = -1};
  CHECK_STATUS(MUT(_create)(&o, &m), CARVE_ERR_INVALID_ARGUMENT);
  CHECK(m == NULL);
  CHECK_STATUS(MUT(_create)(NULL, NULL), CARVE_ERR_INVALID_ARGUMENT);
  MUT(_destroy)(NULL);
}

#ifdef CARVE_MUT_SEGMENT

static void check_masks(mut_model* m, int w, int h) {
  mut_detection dets[MUT_MAX_DETS];
  size_t n = 0;
  const size_t stride = (size_t)w * 3 + 5;
  uint8_t* img = mut_image(w, h, stride, (uint64_t)w * 7919u + (uint64_t)h);
  CHECK_STATUS(MUT(_run_image)(m, img, w, h, stride, 0.0f, dets, MUT_MAX_DETS, &n), CARVE_OK);
  free(img);
  CHECK(n > 0);  // conf 0: every row, so the mask paths below really run
  const size_t bytes = MUT(_mask_scratch_bytes)(m);
  CHECK(bytes > 0);
  void* scratch = malloc(bytes);
  uint8_t* mask = malloc((size_t)w * (size_t)h);
  float* logits = malloc(sizeof(float) * MUTC(_PROTO_H) * MUTC(_PROTO_W));
  CHECK(scratch != NULL && mask != NULL && logits != NULL);
  for (size_t i = 0; i < n && i < 6; i++) {
    CHECK_STATUS(MUT(_mask_logits)(m, &dets[i], logits), CARVE_OK);
    CHECK_STATUS(MUT(_mask)(m, &dets[i], mask, scratch, bytes), CARVE_OK);
    for (size_t p = 0; p < (size_t)w * (size_t)h; p++) {
      CHECK(mask[p] <= 1);
    }
  }
  mut_detection d = dets[0];
  CHECK_STATUS(MUT(_mask_logits)(NULL, &d, logits), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_mask_logits)(m, NULL, logits), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_mask_logits)(m, &d, NULL), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_mask)(NULL, &d, mask, scratch, bytes), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_mask)(m, NULL, mask, scratch, bytes), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_mask)(m, &d, NULL, scratch, bytes), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_mask)(m, &d, mask, NULL, bytes), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_mask)(m, &d, mask, scratch, bytes - 1), CARVE_ERR_INVALID_ARGUMENT);
  const int bad_rows[] = {-1, INT_MIN, (int)n > 0 ? MUT_MAX_DETS : 0, INT_MAX};
  for (size_t i = 0; i < sizeof(bad_rows) / sizeof(bad_rows[0]); i++) {
    d = dets[0];
    d.row = bad_rows[i];
    CHECK_STATUS(MUT(_mask_logits)(m, &d, logits), CARVE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(MUT(_mask)(m, &d, mask, scratch, bytes), CARVE_ERR_INVALID_ARGUMENT);
  }
  // Boxes the caller made up: any status, but no crash and no write outside the mask.
  const float boxes[][4] = {{NAN, NAN, NAN, NAN},   {INFINITY, -INFINITY, INFINITY, -INFINITY},
                            {10, 10, 2, 2},         {-1e30f, -1e30f, 1e30f, 1e30f},
                            {0, 0, 0, 0},           {(float)w, (float)h, (float)w + 5, (float)h + 5}};
  for (size_t i = 0; i < sizeof(boxes) / sizeof(boxes[0]); i++) {
    d = dets[0];
    d.x1 = boxes[i][0], d.y1 = boxes[i][1], d.x2 = boxes[i][2], d.y2 = boxes[i][3];
    const carve_status s = MUT(_mask)(m, &d, mask, scratch, bytes);
    CHECK(s == CARVE_OK || s == CARVE_ERR_INVALID_ARGUMENT);
  }
  free(scratch);
  free(mask);
  free(logits);
}

static void check_task(void) {
  mut_model* m = NULL;
  CHECK_STATUS(MUT(_create)(NULL, &m), CARVE_OK);
  mut_detection d = {0};
  float logits[1];
  uint8_t mask[1];
  char scratch[64];
  CHECK(MUT(_mask_scratch_bytes)(NULL) == 0);
  CHECK(MUT(_mask_scratch_bytes)(m) == 0);  // before any image run
  CHECK(MUT(_protos)(m) == NULL && MUT(_protos)(NULL) == NULL);
  CHECK_STATUS(MUT(_mask_logits)(m, &d, logits), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_mask)(m, &d, mask, scratch, sizeof(scratch)), CARVE_ERR_INVALID_ARGUMENT);
  for (size_t i = 0; i < NUM_SIZES; i++) {
    check_masks(m, k_sizes[i].w, k_sizes[i].h);
  }
  CHECK(MUT(_protos)(m) != NULL);
  MUT(_destroy)(m);
}

#elif defined(CARVE_MUT_CLASSIFY)

static void probs_of(mut_model* m, float* out) {
  const float* p = MUT(_probs)(m);
  CHECK(p != NULL);
  memcpy(out, p, sizeof(float) * MUT_CLASSES);
}

static void check_top(const mut_class* top, size_t k) {
  for (size_t i = 0; i < k; i++) {
    CHECK(top[i].class_id >= 0 && top[i].class_id < MUT_CLASSES);
    CHECK(top[i].prob >= 0.0f && top[i].prob <= 1.0f);
    CHECK(i == 0 || top[i].prob <= top[i - 1].prob);
  }
}

static void check_task(void) {
  mut_model* m = NULL;
  CHECK_STATUS(MUT(_create)(NULL, &m), CARVE_OK);
  CHECK(MUT(_probs)(m) == NULL && MUT(_probs)(NULL) == NULL);
  CHECK(MUT(_image_scratch_bytes)(0, 5) == 0 && MUT(_image_scratch_bytes)(5, 0) == 0);
  CHECK(MUT(_image_scratch_bytes)(-1, 5) == 0 && MUT(_image_scratch_bytes)(INT_MIN, INT_MIN) == 0);
  (void)MUT(_image_scratch_bytes)(INT_MAX, INT_MAX);  // must not overflow into UB

  mut_class top[MUT_TOPK + 1];
  uint8_t* img = mut_image(8, 8, 24, 3);
  size_t bytes = MUT(_image_scratch_bytes)(8, 8);
  uint8_t* scratch = malloc(bytes + 1);
  CHECK(scratch != NULL);
  CHECK_STATUS(MUT(_run_image)(NULL, img, 8, 8, 24, top, MUT_TOPK, scratch, bytes), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_image)(m, NULL, 8, 8, 24, top, MUT_TOPK, scratch, bytes), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_image)(m, img, 8, 8, 24, NULL, MUT_TOPK, scratch, bytes), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_image)(m, img, 8, 8, 24, top, MUT_TOPK + 1, scratch, bytes), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_image)(m, img, 8, 8, 24, top, MUT_TOPK, NULL, bytes), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_image)(m, img, 8, 8, 24, top, MUT_TOPK, scratch, bytes - 1), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_image)(m, img, 8, 8, 24, top, MUT_TOPK, scratch + 1, bytes), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_image)(m, img, 8, 8, 23, top, MUT_TOPK, scratch, bytes), CARVE_ERR_BAD_IMAGE);
  CHECK_STATUS(MUT(_run_image)(m, img, 0, 8, 24, top, MUT_TOPK, scratch, bytes), CARVE_ERR_BAD_IMAGE);
  CHECK_STATUS(MUT(_run_image)(m, img, 8, -3, 24, top, MUT_TOPK, scratch, bytes), CARVE_ERR_BAD_IMAGE);
  CHECK_STATUS(MUT(_run_image)(m, img, 8, 8, 24, NULL, 0, scratch, bytes), CARVE_OK);
  CHECK_STATUS(MUT(_run_image)(m, img, 8, 8, 24, top, 1, scratch, bytes), CARVE_OK);
  check_top(top, 1);
  free(img);
  free(scratch);

  static float dense[MUT_CLASSES], padded[MUT_CLASSES];
  for (size_t i = 0; i < NUM_SIZES; i++) {
    const int w = k_sizes[i].w, h = k_sizes[i].h;
    bytes = MUT(_image_scratch_bytes)(w, h);
    scratch = malloc(bytes);
    CHECK(scratch != NULL && bytes > 0);
    const size_t pads[] = {0, 3, 64};
    for (size_t p = 0; p < 3; p++) {
      const size_t stride = (size_t)w * 3 + pads[p];
      uint8_t* im = mut_image(w, h, stride, 11 + i);
      if (pads[p] != 0) {
        uint8_t* ref = mut_image(w, h, (size_t)w * 3, 11 + i);
        for (int y = 0; y < h; y++) {
          memcpy(im + (size_t)y * stride, ref + (size_t)y * w * 3, (size_t)w * 3);
        }
        free(ref);
      }
      CHECK_STATUS(MUT(_run_image)(m, im, w, h, stride, top, MUT_TOPK, scratch, bytes), CARVE_OK);
      check_top(top, MUT_TOPK);
      probs_of(m, p == 0 ? dense : padded);
      if (p != 0) {
        CHECK(memcmp(dense, padded, sizeof(dense)) == 0);
      }
      free(im);
    }
    free(scratch);
  }

  float* x = malloc(sizeof(float) * 3 * MUT_H * MUT_W);
  CHECK(x != NULL);
  const float specials[] = {NAN, INFINITY, -INFINITY, 3.4e38f};
  for (size_t s = 0; s < 4; s++) {
    for (size_t j = 0; j < (size_t)3 * MUT_H * MUT_W; j++) {
      x[j] = (j % 5 == s) ? specials[s] : 0.25f;
    }
    CHECK_STATUS(MUT(_run_tensor)(m, x, top, MUT_TOPK), CARVE_OK);
    for (size_t k = 0; k < MUT_TOPK; k++) {
      CHECK(top[k].class_id >= 0 && top[k].class_id < MUT_CLASSES);
    }
  }
  CHECK_STATUS(MUT(_run_tensor)(NULL, x, top, 1), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_tensor)(m, NULL, top, 1), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_tensor)(m, x, NULL, 1), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_tensor)(m, x, top, MUT_TOPK + 1), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_tensor)(m, x, NULL, 0), CARVE_OK);
  free(x);
  MUT(_destroy)(m);
}

#else
#error "build with -DCARVE_MUT_SEGMENT or -DCARVE_MUT_CLASSIFY"
#endif

int main(void) {
  check_create();
  check_task();
  printf("task_api_test: all checks passed\n");
  return 0;
}
