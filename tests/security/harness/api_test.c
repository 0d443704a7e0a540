// Hostile arguments to every public entry point of a generated detect package. Built with
// AddressSanitizer + UndefinedBehaviorSanitizer (ctest security_asan_api): every call must return
// a status code (never crash, read out of bounds or hit undefined behaviour), and the bad ones the
// status docs/api.md names.
//
//   api_test            all checks; exit 0 when every one holds

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mut.h"

static float* tensor(uint64_t seed) {
  const size_t n = (size_t)3 * MUT_H * MUT_W;
  float* t = malloc(n * sizeof(float));
  CHECK(t != NULL);
  uint64_t s = seed | 1;
  for (size_t i = 0; i < n; i++) {
    t[i] = (float)(mut_rand(&s) >> 40) / (float)(1u << 24);
  }
  return t;
}

// ---- create / destroy ---------------------------------------------------------

static void check_create(void) {
  mut_model* m = (mut_model*)&m;  // not NULL: a failed create must reset it
  CHECK_STATUS(MUT(_create)(NULL, NULL), CARVE_ERR_INVALID_ARGUMENT);
  const int bad_threads[] = {-1, -1000, INT_MIN, 1025, INT_MAX};
  for (size_t i = 0; i < sizeof(bad_threads) / sizeof(bad_threads[0]); i++) {
    mut_options o = {.threads = bad_threads[i]};
    m = (mut_model*)&m;
    CHECK_STATUS(MUT(_create)(&o, &m), CARVE_ERR_INVALID_ARGUMENT);
    CHECK(m == NULL);
  }
  const int good_threads[] = {0, 1, 2, 3};
  for (size_t i = 0; i < sizeof(good_threads) / sizeof(good_threads[0]); i++) {
    mut_options o = {.threads = good_threads[i]};
    CHECK_STATUS(MUT(_create)(&o, &m), CARVE_OK);
    CHECK(m != NULL);
    MUT(_destroy)(m);
  }
  CHECK_STATUS(MUT(_create)(NULL, &m), CARVE_OK);  // NULL options: the defaults
  MUT(_destroy)(m);
  MUT(_destroy)(NULL);
  MUT(_default_options)(NULL);
}

// ---- accessors before a run, static tables -----------------------------------------

static void check_accessors(mut_model* m) {
  size_t rows = 7;
  CHECK(MUT(_rows)(m, &rows) == NULL && rows == 0);
  CHECK(MUT(_rows)(m, NULL) == NULL);
  rows = 7;
  CHECK(MUT(_rows)(NULL, &rows) == NULL && rows == 0);
  CHECK(MUT(_layer_ms)(m) == NULL);
  CHECK(MUT(_layer_ms)(NULL) == NULL);
  const int bad[] = {-1, INT_MIN, MUT_LAYERS, INT_MAX};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    CHECK(strcmp(MUT(_layer_type)(bad[i]), "?") == 0);
    CHECK(MUT(_layer_flops)(bad[i]) == 0);
  }
  CHECK(strcmp(MUT(_class_name)(-1), "?") == 0 && strcmp(MUT(_class_name)(MUT_CLASSES), "?") == 0);
  CHECK(strcmp(MUT(_class_name)(INT_MIN), "?") == 0 && strcmp(MUT(_class_name)(INT_MAX), "?") == 0);
  MUT(_set_layer_callback)(NULL, NULL, NULL);
  const int statuses[] = {-1, 0, 1, 7, 8, 1000, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++) {
    CHECK(carve_status_str((carve_status)statuses[i]) != NULL);
  }
}

// ---- bad arguments to the runs --------------------------------------------------

static void check_bad_runs(mut_model* m) {
  uint8_t* img = mut_image(8, 8, 24, 1);
  float* x = tensor(2);
  mut_detection dets[4];
  size_t n = 99;
  CHECK_STATUS(MUT(_run_image)(NULL, img, 8, 8, 24, 0.25f, dets, 4, &n), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_image)(m, NULL, 8, 8, 24, 0.25f, dets, 4, &n), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_image)(m, img, 8, 8, 24, 0.25f, dets, 4, NULL), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_image)(m, img, 8, 8, 24, 0.25f, NULL, 4, &n), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_tensor)(NULL, x, 0.25f, dets, 4, &n), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_tensor)(m, NULL, 0.25f, dets, 4, &n), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_tensor)(m, x, 0.25f, dets, 4, NULL), CARVE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(MUT(_run_tensor)(m, x, 0.25f, NULL, 4, &n), CARVE_ERR_INVALID_ARGUMENT);
  // Sizes and strides that describe no image: the status says so, nothing is read.
  const struct { int w, h; size_t stride; } bad[] = {
      {0, 8, 24}, {8, 0, 24}, {0, 0, 0}, {-1, 8, 24}, {8, -1, 24}, {INT_MIN, 8, 24}, {8, INT_MIN, 24},
      {8, 8, 23}, {8, 8, 0}, {8, 8, 1}, {INT_MAX, 1, 24}, {INT_MAX, INT_MAX, 24},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    n = 99;
    CHECK_STATUS(MUT(_run_image)(m, img, bad[i].w, bad[i].h, bad[i].stride, 0.25f, dets, 4, &n), CARVE_ERR_BAD_IMAGE);
    CHECK(n == 0);
  }
  free(img);
  free(x);
}

// ---- odd images: every size and stride runs, and the stride is honoured ----------------------

static void rows_of(mut_model* m, float* out, size_t* rows) {
  const float* r = MUT(_rows)(m, rows);
  CHECK(r != NULL && *rows <= MUT_MAX_DETS);
  memcpy(out, r, *rows * MUT_ROW_LEN * sizeof(float));
}

static void check_odd_images(mut_model* m) {
  const struct { int w, h; } sizes[] = {
      {1, 1}, {1, 10000}, {10000, 1}, {2, 3}, {3, 2}, {MUT_W - 1, MUT_H + 1}, {MUT_W, MUT_H},
      {MUT_W + 1, MUT_H - 1}, {MUT_W * 2, MUT_H}, {127, 1}, {333, 17}, {17, 333}, {1000, 999},
  };
  const size_t pads[] = {0, 1, 7, 64};
  static float dense[MUT_MAX_DETS * MUT_ROW_LEN], padded[MUT_MAX_DETS * MUT_ROW_LEN];
  mut_detection dets[MUT_MAX_DETS];
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    const int w = sizes[i].w, h = sizes[i].h;
    size_t dense_rows = 0;
    for (size_t p = 0; p < sizeof(pads) / sizeof(pads[0]); p++) {
      const size_t stride = (size_t)w * 3 + pads[p];
      uint8_t* img = mut_image(w, h, stride, 42 + i);
      if (pads[p] != 0) {  // same pixels, different padding bytes: must not matter
        uint8_t* ref = mut_image(w, h, (size_t)w * 3, 42 + i);
        for (int y = 0; y < h; y++) {
          memcpy(img + (size_t)y * stride, ref + (size_t)y * w * 3, (size_t)w * 3);
        }
        free(ref);
      }
      size_t n = 99;
      CHECK_STATUS(MUT(_run_image)(m, img, w, h, stride, 0.0f, dets, MUT_MAX_DETS, &n), CARVE_OK);
      CHECK(n <= MUT_MAX_DETS);
      for (size_t k = 0; k < n; k++) {  // boxes are clipped to the caller's image
        CHECK(dets[k].x1 >= 0.0f && dets[k].x2 <= (float)w && dets[k].y1 >= 0.0f && dets[k].y2 <= (float)h);
        CHECK(dets[k].class_id >= 0 && dets[k].class_id < MUT_CLASSES);
      }
      size_t rows = 0;
      rows_of(m, p == 0 ? dense : padded, &rows);
      if (p == 0) {
        dense_rows = rows;
      } else {
        CHECK(rows == dense_rows);
        CHECK(memcmp(dense, padded, rows * MUT_ROW_LEN * sizeof(float)) == 0);
      }
      free(img);
    }
  }
}

// ---- conf, max_dets and hostile tensor values ------------------------------------------

static void check_outputs(mut_model* m) {
  float* x = tensor(3);
  mut_detection dets[MUT_MAX_DETS];
  size_t n = 99, all = 0;
  CHECK_STATUS(MUT(_run_tensor)(m, x, -INFINITY, dets, MUT_MAX_DETS, &all), CARVE_OK);
  size_t rows = 0;
  CHECK(MUT(_rows)(m, &rows) != NULL);
  CHECK(all == rows);  // every row passes conf = -inf
  CHECK_STATUS(MUT(_run_tensor)(m, x, NAN, dets, MUT_MAX_DETS, &n), CARVE_OK);
  CHECK(n == 0);  // nothing is above NaN
  CHECK_STATUS(MUT(_run_tensor)(m, x, 2.0f, dets, MUT_MAX_DETS, &n), CARVE_OK);
  CHECK(n == 0);
  CHECK_STATUS(MUT(_run_tensor)(m, x, -INFINITY, NULL, 0, &n), CARVE_OK);
  CHECK(n == 0);
  CHECK_STATUS(MUT(_run_tensor)(m, x, -INFINITY, dets, 1, &n), CARVE_OK);
  CHECK(n == (all > 0 ? 1u : 0u));
  // Non-finite and huge inputs: garbage out is allowed, a crash or UB is not.
  const float specials[] = {NAN, INFINITY, -INFINITY, 3.4e38f, -3.4e38f, 1e-45f};
  for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); i++) {
    const size_t total = (size_t)3 * MUT_H * MUT_W;
    for (size_t j = 0; j < total; j++) {
      x[j] = (j % 3 == i % 3) ? specials[i] : 0.5f;
    }
    CHECK_STATUS(MUT(_run_tensor)(m, x, 0.0f, dets, MUT_MAX_DETS, &n), CARVE_OK);
    CHECK(n <= MUT_MAX_DETS);
    for (size_t k = 0; k < n; k++) {
      CHECK(dets[k].class_id >= 0 && dets[k].class_id < MUT_CLASSES);
    }
  }
  free(x);
}

static int calls;
static void count_layer(void* user, int layer, const char* type, const carve_view* v) {
  (void)user;
  CHECK(layer == calls && type != NULL && v != NULL && v->data != NULL && v->stride >= v->c);
  calls++;
}

static void check_callback(mut_model* m) {
  float* x = tensor(4);
  size_t n = 0;
  MUT(_set_layer_callback)(m, count_layer, NULL);
  CHECK_STATUS(MUT(_run_tensor)(m, x, 0.5f, NULL, 0, &n), CARVE_OK);
  CHECK(calls == MUT_LAYERS);
  MUT(_set_layer_callback)(m, NULL, NULL);
  CHECK_STATUS(MUT(_run_tensor)(m, x, 0.5f, NULL, 0, &n), CARVE_OK);
  CHECK(calls == MUT_LAYERS);
  CHECK(MUT(_layer_ms)(m) != NULL);
  free(x);
}

int main(void) {
  check_create();
  for (int threads = 1; threads <= 2; threads++) {
    mut_options o = {.threads = threads};
    mut_model* m = NULL;
    CHECK_STATUS(MUT(_create)(&o, &m), CARVE_OK);
    check_accessors(m);
    check_bad_runs(m);
    if (threads == 1) {  // the image paths are the same on 2 threads (concurrency_test compares them)
      check_odd_images(m);
    }
    check_outputs(m);
    calls = 0;
    check_callback(m);
    MUT(_destroy)(m);
  }
  printf("api_test: all checks passed\n");
  return 0;
}
