// Checks carve_letterbox without OpenCV (letterbox_vs_cv2.py compares with cv2):
// geometry of known shapes including Python's round-half-to-even cases, the
// 114 border, an unresized copy, constant images staying constant through the
// resize, edge sizes (1x1, 1x10000, 10000x1, 1x1 output) returning OK, and
// NULL / zero sizes / short strides rejected with a status, the same bits on
// 2 and 3 threads as serially (down / up-scaling, a copy, fewer output rows
// than bands). Then carve_scale_boxes_xyxy: inverse of the letterbox mapping,
// clipping, NaN.

#include "carve_pre.h"
#include "test_common.h"

typedef struct lb_result {
  carve_status status;
  carve_letterbox_info info;
  float* out;  // (out_h, out_w, 3), caller frees
} lb_result;

static lb_result letterbox_on(const uint8_t* rgb, int w, int h, size_t stride, int out_w, int out_h,
                              pthreadpool_t pool) {
  lb_result r = {CARVE_OK, {0}, NULL};
  const size_t bytes = carve_letterbox_scratch_bytes(out_w, out_h);
  void* scratch = malloc(bytes + 8);
  r.out = malloc((size_t)out_w * (size_t)out_h * 3 * sizeof(float) + 1);
  CHECK(scratch && r.out);
  r.status = carve_letterbox(rgb, w, h, stride, out_w, out_h, r.out, scratch, &r.info, pool);
  free(scratch);
  return r;
}

static lb_result letterbox(const uint8_t* rgb, int w, int h, size_t stride, int out_w, int out_h) {
  return letterbox_on(rgb, w, h, stride, out_w, out_h, NULL);
}

static uint8_t* random_image(test_rng* rng, int w, int h) {
  uint8_t* img = malloc((size_t)w * (size_t)h * 3);
  CHECK(img);
  for (size_t i = 0; i < (size_t)w * (size_t)h * 3; i++) {
    img[i] = (uint8_t)rng_below(rng, 256);
  }
  return img;
}

// Every output pixel outside the placed image is 114/255; inside, values are k/255.
static void check_border(const lb_result* r, int out_w, int out_h) {
  const float pad = 114.0f / 255.0f;
  const int left = (int)r->info.pad_x, top = (int)r->info.pad_y;
  for (int y = 0; y < out_h; y++) {
    for (int x = 0; x < out_w; x++) {
      const int inside = x >= left && x < left + r->info.new_w && y >= top &&
                         y < top + r->info.new_h;
      for (int c = 0; c < 3; c++) {
        const float v = r->out[((size_t)y * out_w + x) * 3 + c];
        if (!inside) {
          CHECK_MSG(v == pad, "(%d,%d,%d) = %g", x, y, c, (double)v);
        } else {
          const float k = roundf(v * 255.0f);
          CHECK(k >= 0.0f && k <= 255.0f && v == k / 255.0f);
        }
      }
    }
  }
}

static void expect_geometry(int w, int h, int out_w, int out_h, int new_w, int new_h, int pad_x,
                            int pad_y) {
  test_rng rng = {(uint64_t)(w * 31 + h)};
  uint8_t* img = random_image(&rng, w, h);
  lb_result r = letterbox(img, w, h, (size_t)w * 3, out_w, out_h);
  CHECK(r.status == CARVE_OK);
  CHECK_MSG(r.info.new_w == new_w && r.info.new_h == new_h, "%dx%d: new %dx%d", w, h,
            r.info.new_w, r.info.new_h);
  CHECK_MSG(r.info.pad_x == (float)pad_x && r.info.pad_y == (float)pad_y, "%dx%d: pad %g,%g", w,
            h, (double)r.info.pad_x, (double)r.info.pad_y);
  CHECK(r.info.src_w == w && r.info.src_h == h);
  CHECK(r.info.gain_x == (float)((double)new_w / w) && r.info.gain_y == (float)((double)new_h / h));
  check_border(&r, out_w, out_h);
  free(r.out);
  free(img);
}

static void test_geometry(void) {
  // 1080x810 (w x h) -> r = 640/1080, 640x480 at top 80.
  expect_geometry(1080, 810, 640, 640, 640, 480, 0, 80);
  expect_geometry(810, 1080, 640, 640, 480, 640, 80, 0);
  // r = 0.5: h * r = 2.5 -> 2 and 3.5 -> 4 (ties to even); pads 319 / 318.
  expect_geometry(1280, 5, 640, 640, 640, 2, 0, 319);
  expect_geometry(1280, 7, 640, 640, 640, 4, 0, 318);
  // dh = 0.5 -> round(0.4) = 0 on top (the extra row goes to the bottom).
  expect_geometry(640, 639, 640, 640, 640, 639, 0, 0);
  // Non-square output, upscaling.
  expect_geometry(100, 133, 640, 480, 361, 480, 139, 0);
  expect_geometry(1, 1, 640, 640, 640, 640, 0, 0);
  expect_geometry(1, 10000, 640, 640, 1, 640, 319, 0);   // max(round(0.064), 1) = 1
  expect_geometry(10000, 1, 640, 640, 640, 1, 0, 319);
  expect_geometry(3, 2, 1, 1, 1, 1, 0, 0);                // 1x1 output
}

static void test_copy_and_constant(void) {
  test_rng rng = {5};
  // Same size: a plain copy, v / 255.0f exactly, with a row stride wider than w*3.
  const int w = 37, h = 23;
  const size_t stride = (size_t)w * 3 + 5;
  uint8_t* img = malloc(stride * h);
  CHECK(img);
  for (size_t i = 0; i < stride * h; i++) {
    img[i] = (uint8_t)rng_below(&rng, 256);
  }
  lb_result r = letterbox(img, w, h, stride, w, h);
  CHECK(r.status == CARVE_OK && r.info.new_w == w && r.info.new_h == h);
  for (int y = 0; y < h; y++) {
    for (int i = 0; i < w * 3; i++) {
      CHECK(r.out[(size_t)y * w * 3 + i] == (float)img[(size_t)y * stride + i] / 255.0f);
    }
  }
  free(r.out);
  free(img);

  // A constant image stays constant through up- and down-scaling.
  const int sizes[][2] = {{13, 7}, {1000, 999}, {3, 500}, {641, 17}};
  for (size_t s = 0; s < 4; s++) {
    const int sw = sizes[s][0], sh = sizes[s][1];
    for (int v = 0; v < 256; v += 51) {
      uint8_t* flat = malloc((size_t)sw * sh * 3);
      CHECK(flat);
      memset(flat, v, (size_t)sw * sh * 3);
      lb_result c = letterbox(flat, sw, sh, (size_t)sw * 3, 320, 320);
      CHECK(c.status == CARVE_OK);
      const int left = (int)c.info.pad_x, top = (int)c.info.pad_y;
      for (int y = top; y < top + c.info.new_h; y++) {
        for (int x = left; x < left + c.info.new_w; x++) {
          for (int ch = 0; ch < 3; ch++) {
            CHECK(c.out[((size_t)y * 320 + x) * 3 + ch] == (float)v / 255.0f);
          }
        }
      }
      check_border(&c, 320, 320);
      free(c.out);
      free(flat);
    }
  }
}

static void test_errors(void) {
  uint8_t px[12] = {0};
  float out[3 * 4];
  uint64_t scratch_storage[64];
  void* scratch = scratch_storage;
  CHECK(carve_letterbox_scratch_bytes(2, 2) <= sizeof scratch_storage);
  CHECK(carve_letterbox(NULL, 2, 2, 6, 2, 2, out, scratch, NULL, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_letterbox(px, 2, 2, 6, 2, 2, NULL, scratch, NULL, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_letterbox(px, 2, 2, 6, 2, 2, out, NULL, NULL, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_letterbox(px, 2, 2, 6, 0, 2, out, scratch, NULL, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_letterbox(px, 2, 2, 6, 2, -1, out, scratch, NULL, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_letterbox(px, 0, 2, 6, 2, 2, out, scratch, NULL, NULL) == CARVE_ERR_BAD_IMAGE);
  CHECK(carve_letterbox(px, 2, 0, 6, 2, 2, out, scratch, NULL, NULL) == CARVE_ERR_BAD_IMAGE);
  CHECK(carve_letterbox(px, -3, 2, 6, 2, 2, out, scratch, NULL, NULL) == CARVE_ERR_BAD_IMAGE);
  CHECK(carve_letterbox(px, 2, 2, 5, 2, 2, out, scratch, NULL, NULL) == CARVE_ERR_BAD_IMAGE);
  CHECK(carve_letterbox(px, 2, 2, 6, 2, 2, out, scratch, NULL, NULL) == CARVE_OK);  // info optional
  CHECK(carve_letterbox_scratch_bytes(0, 640) == 0);
}

// The bands split over a pool give the serial result bit for bit.
static void test_threads(void) {
  static const int sizes[][4] = {
      {1080, 810, 640, 640},  // downscale, top / bottom border
      {37, 101, 64, 48},      // upscale, left / right border
      {64, 48, 64, 64},       // no resize: a copy
      {5, 3, 7, 3},           // fewer output rows than CARVE_LETTERBOX_BANDS
      {1, 1, 1, 1},
  };
  test_rng rng = {11};
  for (size_t t = 2; t <= 3; t++) {
    pthreadpool_t pool = pthreadpool_create(t);
    CHECK(pool != NULL);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      const int w = sizes[i][0], h = sizes[i][1], ow = sizes[i][2], oh = sizes[i][3];
      uint8_t* img = random_image(&rng, w, h);
      lb_result a = letterbox(img, w, h, (size_t)w * 3, ow, oh);
      lb_result b = letterbox_on(img, w, h, (size_t)w * 3, ow, oh, pool);
      CHECK(a.status == CARVE_OK && b.status == CARVE_OK);
      CHECK(memcmp(a.out, b.out, (size_t)ow * (size_t)oh * 3 * sizeof(float)) == 0);
      CHECK(memcmp(&a.info, &b.info, sizeof a.info) == 0);
      free(a.out);
      free(b.out);
      free(img);
    }
    pthreadpool_destroy(pool);
  }
}

static void test_scale_boxes(void) {
  test_rng rng = {8};
  uint8_t* img = random_image(&rng, 1080, 810);
  lb_result r = letterbox(img, 1080, 810, 1080 * 3, 640, 640);
  CHECK(r.status == CARVE_OK);
  const carve_letterbox_info info = r.info;
  free(r.out);
  free(img);

  // Rows of 7 floats; only the first four change.
  float rows[4][7] = {
      {100.0f, 200.0f, 300.0f, 400.0f, 0.9f, 1.0f, 42.0f},  // inside
      {-50.0f, 20.0f, 700.0f, 620.0f, 0.5f, 2.0f, 42.0f},   // clipped on all sides
      {NAN, 100.0f, INFINITY, -INFINITY, 0.5f, 3.0f, 42.0f},
      {0.0f, 80.0f, 640.0f, 560.0f, 0.1f, 0.0f, 42.0f},      // the image corners
  };
  CHECK(carve_scale_boxes_xyxy(&rows[0][0], 4, 7, &info) == CARVE_OK);
  const float gx = info.gain_x, gy = info.gain_y;
  CHECK(rows[0][0] == (100.0f - 0.0f) / gx && rows[0][1] == (200.0f - 80.0f) / gy);
  CHECK(rows[0][2] == (300.0f - 0.0f) / gx && rows[0][3] == (400.0f - 80.0f) / gy);
  CHECK(rows[1][0] == 0.0f && rows[1][1] == 0.0f && rows[1][2] == 1080.0f && rows[1][3] == 810.0f);
  CHECK(rows[2][0] != rows[2][0] && rows[2][2] == 1080.0f && rows[2][3] == 0.0f);
  CHECK(rows[3][0] == 0.0f && rows[3][1] == 0.0f && rows[3][2] == 1080.0f && rows[3][3] == 810.0f);
  for (int i = 0; i < 4; i++) {
    CHECK(rows[i][6] == 42.0f);
  }
  CHECK(carve_scale_boxes_xyxy(NULL, 4, 7, &info) == CARVE_ERR_INVALID_ARGUMENT);  // no crash
  CHECK(carve_scale_boxes_xyxy(&rows[0][0], 4, 7, NULL) == CARVE_ERR_INVALID_ARGUMENT);
}

int main(void) {
  test_geometry();
  test_copy_and_constant();
  test_errors();
  test_threads();
  test_scale_boxes();
  printf("runtime_letterbox: ok\n");
  return 0;
}
