// Checks the classify preprocessing and the task coordinate mappings without
// Python (classify_vs_ultralytics.py and e2e_task_vs_ultralytics.py compare
// with Ultralytics): carve_classify_preprocess on images that need no resize
// (a plain centre crop of k / 255 values), constant images staying constant
// through the resize (down, up, one axis, odd sizes), row strides with padding
// bytes that must not leak in, the reported scratch size (a canary behind it),
// every output value written, NULL / zero sizes / short strides rejected, and
// the same bits on 2 and 3 threads as serially (both axes resized, one, none);
// carve_scale_coords and carve_scale_boxes_xywhr against the letterbox mapping
// written out (clipping for keypoints only, visibility and angle untouched, NaN).

#include "carve_pre.h"
#include "test_common.h"

// ---- Classify preprocessing ---------------------------------------------------

typedef struct cls_result {
  carve_status status;
  float* out;  // (size, size, 3), caller frees
} cls_result;

static cls_result classify_on(const uint8_t* rgb, int w, int h, size_t stride, int size, pthreadpool_t pool) {
  cls_result r = {CARVE_OK, NULL};
  const size_t bytes = carve_classify_scratch_bytes(w, h, size);
  uint8_t* scratch = malloc(bytes + 64);
  r.out = malloc(((size_t)size * (size_t)size * 3 + 4) * sizeof(float));
  CHECK(scratch && r.out);
  memset(scratch + bytes, 0x3C, 64);
  fill_canary(r.out, (size_t)size * (size_t)size * 3 + 4);
  r.status = carve_classify_preprocess(rgb, w, h, stride, size, r.out, scratch, pool);
  for (size_t i = 0; i < 64; i++) {
    CHECK(scratch[bytes + i] == 0x3C);  // stayed inside the reported scratch
  }
  if (r.status == CARVE_OK) {
    for (size_t i = 0; i < (size_t)size * (size_t)size * 3; i++) {
      const float k = roundf(r.out[i] * 255.0f);
      CHECK(!is_canary(r.out[i]) && k >= 0.0f && k <= 255.0f && r.out[i] == k / 255.0f);
    }
    CHECK(is_canary(r.out[(size_t)size * (size_t)size * 3]));
  }
  free(scratch);
  return r;
}

static cls_result classify(const uint8_t* rgb, int w, int h, size_t stride, int size) {
  return classify_on(rgb, w, h, stride, size, NULL);
}

// An image with `pad` junk bytes after every row.
static uint8_t* padded_image(test_rng* rng, int w, int h, size_t pad, int constant) {
  const size_t stride = (size_t)w * 3 + pad;
  uint8_t* img = malloc(stride * (size_t)h + 1);
  CHECK(img);
  for (int y = 0; y < h; y++) {
    for (size_t i = 0; i < stride; i++) {
      const int v = constant >= 0 ? constant : (int)rng_below(rng, 256);
      img[(size_t)y * stride + i] = i >= (size_t)w * 3 ? 0xFF : (uint8_t)v;
    }
  }
  return img;
}

// No resize when the short side already has the size: a centre crop, left at
// round((new_w - size) / 2) (half to even).
static void test_crop_only(int w, int h, int size, int left, int top) {
  test_rng rng = {(uint64_t)(w * 7 + h)};
  uint8_t* img = padded_image(&rng, w, h, 5, -1);
  const size_t stride = (size_t)w * 3 + 5;
  cls_result r = classify(img, w, h, stride, size);
  CHECK(r.status == CARVE_OK);
  for (int y = 0; y < size; y++) {
    for (int x = 0; x < size; x++) {
      for (int c = 0; c < 3; c++) {
        const uint8_t v = img[(size_t)(y + top) * stride + (size_t)(x + left) * 3 + (size_t)c];
        CHECK(r.out[((size_t)y * (size_t)size + (size_t)x) * 3 + (size_t)c] == (float)v / 255.0f);
      }
    }
  }
  free(r.out);
  free(img);
}

// A constant image stays constant: the weights of every output sum to 1 within
// 2^-22, far below the rounding of a byte.
static void test_constant(int w, int h, int size) {
  test_rng rng = {1};
  const int value = 173;
  uint8_t* img = padded_image(&rng, w, h, 3, value);
  cls_result r = classify(img, w, h, (size_t)w * 3 + 3, size);
  CHECK(r.status == CARVE_OK);
  for (size_t i = 0; i < (size_t)size * (size_t)size * 3; i++) {
    CHECK_MSG(r.out[i] == (float)value / 255.0f, "%dx%d -> %d: value %zu is %g", w, h, size, i,
              (double)r.out[i] * 255.0);
  }
  free(r.out);
  free(img);
}

static void test_classify_errors(void) {
  uint8_t img[12] = {0};
  float out[3];
  uint8_t scratch[4096];
  CHECK(carve_classify_preprocess(NULL, 2, 2, 6, 1, out, scratch, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_classify_preprocess(img, 2, 2, 6, 1, NULL, scratch, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_classify_preprocess(img, 2, 2, 6, 1, out, NULL, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_classify_preprocess(img, 2, 2, 6, 0, out, scratch, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_classify_preprocess(img, 2, 2, 6, 1, out, scratch + 1, NULL) ==
        CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_classify_preprocess(img, 0, 2, 6, 1, out, scratch, NULL) == CARVE_ERR_BAD_IMAGE);
  CHECK(carve_classify_preprocess(img, 2, -1, 6, 1, out, scratch, NULL) == CARVE_ERR_BAD_IMAGE);
  CHECK(carve_classify_preprocess(img, 2, 2, 5, 1, out, scratch, NULL) == CARVE_ERR_BAD_IMAGE);
  CHECK(carve_classify_scratch_bytes(0, 2, 1) == 0);
  CHECK(carve_classify_scratch_bytes(2, 2, 0) == 0);
  CHECK(carve_classify_scratch_bytes(2, 2, 1) <= sizeof scratch);
  CHECK(carve_classify_preprocess(img, 2, 2, 6, 1, out, scratch, NULL) == CARVE_OK);  // 2x2 -> 1x1
}

// ---- Coordinate mappings --------------------------------------------------------

static carve_letterbox_info geometry(int src_w, int src_h, int in_w, int in_h) {
  uint8_t* img = calloc((size_t)src_w * (size_t)src_h * 3, 1);
  float* out = malloc((size_t)in_w * (size_t)in_h * 3 * sizeof(float));
  void* scratch = malloc(carve_letterbox_scratch_bytes(in_w, in_h));
  CHECK(img && out && scratch);
  carve_letterbox_info info;
  CHECK(carve_letterbox(img, src_w, src_h, (size_t)src_w * 3, in_w, in_h, out, scratch, &info, NULL) ==
        CARVE_OK);
  free(img);
  free(out);
  free(scratch);
  return info;
}

static float clampf(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }

static void test_scale_coords(void) {
  const carve_letterbox_info info = geometry(810, 1080, 640, 640);  // pad_x 80, gain 0.5926
  CHECK(info.pad_x == 80.0f && info.pad_y == 0.0f);
  // Two pose rows of (x, y, v) triples with a gap float between the rows.
  float kp[2][7] = {{100.0f, 200.0f, 0.9f, 50.0f, 700.0f, 0.1f, -1.0f},
                    {600.0f, -3.0f, 0.5f, NAN, 320.0f, 0.7f, -1.0f}};
  float want[2][7];
  memcpy(want, kp, sizeof kp);
  for (int r = 0; r < 2; r++) {
    for (int j = 0; j < 2; j++) {
      float* p = want[r] + 3 * j;
      p[0] = clampf((p[0] - info.pad_x) / info.gain_x, 0.0f, 810.0f);
      p[1] = clampf((p[1] - info.pad_y) / info.gain_y, 0.0f, 1080.0f);
    }
  }
  for (int r = 0; r < 2; r++) {
    carve_scale_coords(kp[r], 2, 3, &info);
  }
  for (int r = 0; r < 2; r++) {
    for (int i = 0; i < 7; i++) {
      CHECK(same_float(kp[r][i], want[r][i]));
    }
  }
  CHECK(kp[0][0] == (100.0f - 80.0f) / info.gain_x);
  CHECK(kp[1][1] == 0.0f && kp[1][0] == 810.0f);  // clipped
  CHECK(kp[1][3] != kp[1][3]);                    // NaN stays NaN
  CHECK(kp[0][2] == 0.9f && kp[0][5] == 0.1f && kp[0][6] == -1.0f);  // visibility, gap untouched
  CHECK(carve_scale_coords(NULL, 2, 3, &info) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_scale_coords(kp[0], 2, 3, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_scale_coords(kp[0], 0, 3, &info) == CARVE_OK);  // no points
}

static void test_scale_xywhr(void) {
  const carve_letterbox_info info = geometry(1280, 720, 1024, 1024);  // pad_y 224, gain 0.8
  CHECK(info.pad_x == 0.0f && info.pad_y == 224.0f);
  float rows[2][7] = {{512.0f, 300.0f, 100.0f, 40.0f, 0.8f, 3.0f, 0.5f},
                      {-20.0f, 1000.0f, 2000.0f, 7.0f, 0.3f, 1.0f, -1.2f}};
  float want[2][7];
  memcpy(want, rows, sizeof rows);
  for (int r = 0; r < 2; r++) {
    want[r][0] = (want[r][0] - info.pad_x) / info.gain_x;
    want[r][1] = (want[r][1] - info.pad_y) / info.gain_y;
    want[r][2] = want[r][2] / info.gain_x;
    want[r][3] = want[r][3] / info.gain_y;
  }
  CHECK(carve_scale_boxes_xywhr(&rows[0][0], 2, 7, &info) == CARVE_OK);
  CHECK(memcmp(rows, want, sizeof rows) == 0);
  CHECK(rows[1][0] < 0.0f && rows[1][2] > 1280.0f);  // no clipping
  CHECK(rows[0][6] == 0.5f && rows[1][6] == -1.2f);   // angle untouched
  CHECK(carve_scale_boxes_xywhr(NULL, 2, 7, &info) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_scale_boxes_xywhr(&rows[0][0], 2, 7, NULL) == CARVE_ERR_INVALID_ARGUMENT);
}

// Rows split over a pool give the serial result bit for bit.
static void test_classify_threads(void) {
  static const int shapes[][3] = {{1080, 810, 224}, {333, 517, 225}, {224, 300, 160}, {300, 224, 224}, {5, 9, 5},
                                  {7, 13, 224}};
  test_rng rng = {17};
  for (size_t t = 2; t <= 3; t++) {
    pthreadpool_t pool = pthreadpool_create(t);
    CHECK(pool != NULL);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
      const int w = shapes[i][0], h = shapes[i][1], size = shapes[i][2];
      uint8_t* img = padded_image(&rng, w, h, 5, -1);
      cls_result a = classify(img, w, h, (size_t)w * 3 + 5, size);
      cls_result b = classify_on(img, w, h, (size_t)w * 3 + 5, size, pool);
      CHECK(a.status == CARVE_OK && b.status == CARVE_OK);
      CHECK(memcmp(a.out, b.out, (size_t)size * (size_t)size * 3 * sizeof(float)) == 0);
      free(a.out);
      free(b.out);
      free(img);
    }
    pthreadpool_destroy(pool);
  }
}

int main(void) {
  test_crop_only(300, 224, 224, 38, 0);   // (300 - 224) / 2 = 38
  test_crop_only(224, 301, 224, 0, 38);   // 38.5 -> 38 (half to even)
  test_crop_only(224, 303, 224, 0, 40);   // 39.5 -> 40
  test_crop_only(224, 224, 224, 0, 0);    // nothing to do
  test_crop_only(5, 9, 5, 0, 2);
  const int shapes[][3] = {{640, 480, 224}, {480, 640, 224}, {1080, 810, 224}, {7, 13, 224},
                           {1, 1, 224},     {1, 1000, 224},  {1000, 1, 224},   {333, 517, 225},
                           {224, 300, 160}, {3000, 2000, 96}, {225, 224, 224}, {224, 225, 224}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    test_constant(shapes[i][0], shapes[i][1], shapes[i][2]);
  }
  test_classify_errors();
  test_classify_threads();
  test_scale_coords();
  test_scale_xywhr();
  printf("runtime_pre_task: classify preprocess (crop, constant, errors, threads), scale_coords, "
         "scale_boxes_xywhr ok\n");
  return 0;
}
