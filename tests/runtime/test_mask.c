// Checks carve_mask.h without Python (mask_vs_ultralytics.py compares with
// Ultralytics itself): carve_mask_logits against a double loop over strided
// views, serial == pooled, argument errors; carve_mask_native on constant
// logits (the mask is exactly crop_mask's box, including fractional, outside,
// inverted and NaN boxes), on a linear ramp (the edge lands where the geometry
// puts it), the identity geometry, serial == pooled, the reported scratch size
// (a canary behind it), every mask byte written, argument errors; and
// carve_rle_encode on hand-made masks, capacity handling and errors.

#include "carve_mask.h"
#include "test_common.h"

// ---- Mask logits --------------------------------------------------------------

static void test_logits(void) {
  test_rng rng = {31};
  pthreadpool_t pool = make_pool2();
  // (n, mh, mw, nm): odd pixel counts (blocks of 16 and a remainder), nm above
  // the 64 channels of the blocked path.
  const size_t shapes[][4] = {{1, 1, 1, 1},    {3, 5, 7, 32},  {2, 40, 31, 32},
                              {7, 13, 17, 5},  {2, 5, 7, 70},  {300, 4, 4, 32}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const size_t n = shapes[s][0], mh = shapes[s][1], mw = shapes[s][2], nm = shapes[s][3];
    const size_t pstride = nm + 3, row_stride = 6 + nm + 2, offset = 6;
    float* protos = malloc(mh * mw * pstride * sizeof(float));
    float* rows = malloc(n * row_stride * sizeof(float));
    float* a = malloc((n * mh * mw + 4) * sizeof(float));
    float* b = malloc((n * mh * mw + 4) * sizeof(float));
    CHECK(protos && rows && a && b);
    for (size_t i = 0; i < mh * mw * pstride; i++) {
      protos[i] = rng_normal(&rng);
    }
    for (size_t i = 0; i < n * row_stride; i++) {
      rows[i] = rng_normal(&rng) * 2.0f;
    }
    const carve_view view = {protos, mh, mw, nm, pstride};
    fill_canary(a, n * mh * mw + 4);
    fill_canary(b, n * mh * mw + 4);
    CHECK(carve_mask_logits(rows, n, row_stride, offset, &view, a, NULL) == CARVE_OK);
    CHECK(carve_mask_logits(rows, n, row_stride, offset, &view, b, pool) == CARVE_OK);
    CHECK(memcmp(a, b, n * mh * mw * sizeof(float)) == 0);
    CHECK(is_canary(a[n * mh * mw]) && is_canary(b[n * mh * mw]));
    for (size_t i = 0; i < n; i++) {
      for (size_t p = 0; p < mh * mw; p++) {
        double want = 0.0;
        for (size_t c = 0; c < nm; c++) {
          want += (double)rows[i * row_stride + offset + c] * (double)protos[p * pstride + c];
        }
        CHECK(a[i * mh * mw + p] == (float)want);
      }
    }
    free(protos);
    free(rows);
    free(a);
    free(b);
  }
  // Errors and no-ops.
  float protos[8] = {1, 2, 3, 4, 5, 6, 7, 8}, rows[8] = {0}, out[8];
  carve_view view = {protos, 2, 2, 2, 2};
  CHECK(carve_mask_logits(rows, 0, 8, 0, &view, NULL, NULL) == CARVE_OK);  // n == 0
  CHECK(carve_mask_logits(NULL, 1, 8, 0, &view, out, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_mask_logits(rows, 1, 8, 0, NULL, out, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_mask_logits(rows, 1, 8, 0, &view, NULL, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_mask_logits(rows, 2, 1, 0, &view, out, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_mask_logits(rows, 1, 0, 3, &view, out, NULL) == CARVE_OK);  // one row: no stride
  view.stride = 1;
  CHECK(carve_mask_logits(rows, 1, 8, 0, &view, out, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  view.stride = 2;
  view.c = 0;
  CHECK(carve_mask_logits(rows, 1, 8, 0, &view, out, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  pthreadpool_destroy(pool);
}

// ---- Native masks -------------------------------------------------------------

// The letterbox geometry of a src_w x src_h image in a (4 mw, 4 mh) input.
static carve_letterbox_info geometry(int src_w, int src_h, size_t mh, size_t mw) {
  const int in_w = (int)(4 * mw), in_h = (int)(4 * mh);
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

typedef struct native_buffers {
  uint8_t* scratch;
  size_t scratch_bytes;
  uint8_t* mask;
} native_buffers;

static native_buffers alloc_native(size_t mh, size_t mw, const carve_letterbox_info* info) {
  native_buffers b;
  b.scratch_bytes = carve_mask_native_scratch_bytes(mh, mw, info);
  CHECK(b.scratch_bytes > 0);
  b.scratch = malloc(b.scratch_bytes + 64);
  b.mask = malloc((size_t)info->src_w * (size_t)info->src_h);
  CHECK(b.scratch && b.mask);
  memset(b.scratch + b.scratch_bytes, 0x5A, 64);
  return b;
}

static void free_native(native_buffers* b) {
  for (size_t i = 0; i < 64; i++) {
    CHECK(b->scratch[b->scratch_bytes + i] == 0x5A);  // stayed inside the reported scratch
  }
  free(b->scratch);
  free(b->mask);
}

// crop_mask's test for pixel index i: a <= (float)i < b.
static int in_box(int i, float a, float b) { return (float)i >= a && (float)i < b; }

static void test_native_constant(int src_w, int src_h, size_t mh, size_t mw) {
  const carve_letterbox_info info = geometry(src_w, src_h, mh, mw);
  native_buffers nb = alloc_native(mh, mw, &info);
  float* pos = malloc(mh * mw * sizeof(float));
  float* neg = malloc(mh * mw * sizeof(float));
  CHECK(pos && neg);
  for (size_t i = 0; i < mh * mw; i++) {
    pos[i] = 1.5f;
    neg[i] = -0.25f;
  }
  const float w = (float)src_w, h = (float)src_h;
  const float boxes[][4] = {
      {0, 0, w, h},
      {0.5f, 0.5f, w * 0.5f + 0.25f, h - 1.5f},
      {w * 0.3f, h * 0.6f, w * 0.31f, h * 0.61f},
      {-50, -50, 3 * w, 3 * h},
      {w, h, w + 10, h + 10},     // outside
      {w * 0.5f, 0, w * 0.4f, h},  // inverted: empty
      {NAN, 0, w, h},
      {0, 0, INFINITY, INFINITY},
  };
  for (size_t b = 0; b < sizeof boxes / sizeof boxes[0]; b++) {
    const float* box = boxes[b];
    memset(nb.mask, 0xAA, (size_t)src_w * (size_t)src_h);
    CHECK(carve_mask_native(pos, mh, mw, &info, box, nb.mask, nb.scratch, NULL) == CARVE_OK);
    for (int y = 0; y < src_h; y++) {
      for (int x = 0; x < src_w; x++) {
        const uint8_t want = in_box(x, box[0], box[2]) && in_box(y, box[1], box[3]);
        CHECK_MSG(nb.mask[(size_t)y * (size_t)src_w + (size_t)x] == want,
                  "%dx%d box %zu at (%d, %d)", src_w, src_h, b, x, y);
      }
    }
    memset(nb.mask, 0xAA, (size_t)src_w * (size_t)src_h);
    CHECK(carve_mask_native(neg, mh, mw, &info, box, nb.mask, nb.scratch, NULL) == CARVE_OK);
    for (size_t i = 0; i < (size_t)src_w * (size_t)src_h; i++) {
      CHECK(nb.mask[i] == 0);
    }
  }
  free(pos);
  free(neg);
  free_native(&nb);
}

// Logits rising along x: the mask edge sits where the upsampled ramp crosses 0.
// logit(x) = x - x0 at prototype column x. In continuous coordinates (pixel i
// spans [i, i + 1)) prototype column c is centred at input 4c + 2, and image
// pixel x at input (x + 0.5) gain_x + pad_x; bilinear resizing keeps a ramp a
// ramp away from the borders, so the edge is at image pixel
// (4 x0 + 2 - pad_x) / gain_x - 0.5, give or take the rounding of the crop.
static void test_native_ramp(int src_w, int src_h, size_t mh, size_t mw, float x0) {
  const carve_letterbox_info info = geometry(src_w, src_h, mh, mw);
  native_buffers nb = alloc_native(mh, mw, &info);
  float* logits = malloc(mh * mw * sizeof(float));
  CHECK(logits);
  for (size_t y = 0; y < mh; y++) {
    for (size_t x = 0; x < mw; x++) {
      logits[y * mw + x] = (float)x - x0;
    }
  }
  const float box[4] = {0, 0, (float)src_w, (float)src_h};
  CHECK(carve_mask_native(logits, mh, mw, &info, box, nb.mask, nb.scratch, NULL) == CARVE_OK);
  const double edge = (4.0 * x0 + 2.0 - info.pad_x) / info.gain_x - 0.5;
  for (int y = 0; y < src_h; y++) {
    for (int x = 0; x < src_w; x++) {
      const uint8_t v = nb.mask[(size_t)y * (size_t)src_w + (size_t)x];
      if (x < edge - 1.5) {
        CHECK_MSG(v == 0, "%dx%d: (%d, %d) set, edge %.2f", src_w, src_h, x, y, edge);
      } else if (x > edge + 1.5) {
        CHECK_MSG(v == 1, "%dx%d: (%d, %d) clear, edge %.2f", src_w, src_h, x, y, edge);
      }
    }
  }
  free(logits);
  free_native(&nb);
}

// The grid is the image already (prototypes as large as the source): the mask
// is logits > 0 inside the box, pixel for pixel.
static void test_native_identity(void) {
  test_rng rng = {77};
  const size_t mh = 9, mw = 13;
  const carve_letterbox_info info = geometry((int)mw, (int)mh, mh, mw);
  native_buffers nb = alloc_native(mh, mw, &info);
  float logits[9 * 13];
  for (size_t i = 0; i < mh * mw; i++) {
    logits[i] = rng_normal(&rng);
  }
  const float box[4] = {1.5f, 0.0f, 11.0f, 8.5f};
  CHECK(carve_mask_native(logits, mh, mw, &info, box, nb.mask, nb.scratch, NULL) == CARVE_OK);
  for (size_t y = 0; y < mh; y++) {
    for (size_t x = 0; x < mw; x++) {
      const int inside = in_box((int)x, box[0], box[2]) && in_box((int)y, box[1], box[3]);
      CHECK(nb.mask[y * mw + x] == (inside && logits[y * mw + x] > 0.0f));
    }
  }
  free_native(&nb);
}

// Pooled == serial on random logits, for geometries that upsample 1x, 2x and 4x.
static void test_native_pool(void) {
  test_rng rng = {78};
  pthreadpool_t pool = make_pool2();
  const int sizes[][2] = {{810, 1080}, {517, 333}, {1000, 17}, {1280, 720}};
  for (size_t s = 0; s < 4; s++) {
    const size_t mh = 160, mw = 160;
    const carve_letterbox_info info = geometry(sizes[s][0], sizes[s][1], mh, mw);
    native_buffers nb = alloc_native(mh, mw, &info);
    const size_t pixels = (size_t)info.src_w * (size_t)info.src_h;
    uint8_t* serial = malloc(pixels);
    float* logits = malloc(mh * mw * sizeof(float));
    CHECK(serial && logits);
    for (size_t i = 0; i < mh * mw; i++) {
      logits[i] = rng_normal(&rng);
    }
    const float box[4] = {3.25f, 1.0f, (float)info.src_w * 0.9f, (float)info.src_h - 0.5f};
    CHECK(carve_mask_native(logits, mh, mw, &info, box, serial, nb.scratch, NULL) == CARVE_OK);
    CHECK(carve_mask_native(logits, mh, mw, &info, box, nb.mask, nb.scratch, pool) == CARVE_OK);
    CHECK(memcmp(serial, nb.mask, pixels) == 0);
    size_t set = 0;
    for (size_t i = 0; i < pixels; i++) {
      set += nb.mask[i];
    }
    CHECK(set > pixels / 4 && set < pixels * 3 / 4);  // noise: about half
    free(serial);
    free(logits);
    free_native(&nb);
  }
  pthreadpool_destroy(pool);
}

static void test_native_errors(void) {
  const carve_letterbox_info info = geometry(64, 48, 16, 16);
  native_buffers nb = alloc_native(16, 16, &info);
  float logits[256] = {0};
  const float box[4] = {0, 0, 64, 48};
  CHECK(carve_mask_native(NULL, 16, 16, &info, box, nb.mask, nb.scratch, NULL) ==
        CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_mask_native(logits, 16, 16, NULL, box, nb.mask, nb.scratch, NULL) ==
        CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_mask_native(logits, 16, 16, &info, NULL, nb.mask, nb.scratch, NULL) ==
        CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_mask_native(logits, 16, 16, &info, box, NULL, nb.scratch, NULL) ==
        CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_mask_native(logits, 16, 16, &info, box, nb.mask, NULL, NULL) ==
        CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_mask_native(logits, 16, 16, &info, box, nb.mask, nb.scratch + 1, NULL) ==
        CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_mask_native(logits, 0, 16, &info, box, nb.mask, nb.scratch, NULL) ==
        CARVE_ERR_INVALID_ARGUMENT);
  carve_letterbox_info bad = info;
  bad.src_w = 0;
  CHECK(carve_mask_native(logits, 16, 16, &bad, box, nb.mask, nb.scratch, NULL) ==
        CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_mask_native_scratch_bytes(16, 16, &bad) == 0);
  CHECK(carve_mask_native_scratch_bytes(16, 16, NULL) == 0);
  CHECK(carve_mask_native_scratch_bytes(0, 16, &info) == 0);
  free_native(&nb);
}

// ---- RLE ------------------------------------------------------------------------

static void test_rle(void) {
  // (h, w) = (2, 3): rows 0 1 1 / 1 1 0 -> column-major 0 1 | 1 1 | 1 0 -> runs 1, 4, 1.
  const uint8_t m1[6] = {0, 1, 1, 1, 1, 0};
  uint32_t counts[8];
  CHECK(carve_rle_encode(m1, 3, 2, counts, 8) == 3);
  CHECK(counts[0] == 1 && counts[1] == 4 && counts[2] == 1);
  // Capacity too small: the size is still returned, only the first counts written.
  counts[2] = 777;
  CHECK(carve_rle_encode(m1, 3, 2, counts, 2) == 3);
  CHECK(counts[0] == 1 && counts[1] == 4 && counts[2] == 777);
  CHECK(carve_rle_encode(m1, 3, 2, NULL, 0) == 3);
  CHECK(carve_rle_encode(m1, 3, 2, NULL, 5) == 3);  // NULL counts: nothing written
  // Foreground first pixel: a leading 0 count; any nonzero byte counts as 1.
  const uint8_t m2[4] = {255, 0, 7, 1};  // (2, 2): columns (255, 7), (0, 1)
  CHECK(carve_rle_encode(m2, 2, 2, counts, 8) == 4);
  CHECK(counts[0] == 0 && counts[1] == 2 && counts[2] == 1 && counts[3] == 1);
  const uint8_t zeros[6] = {0}, ones[6] = {1, 1, 1, 1, 1, 1};
  CHECK(carve_rle_encode(zeros, 3, 2, counts, 8) == 1 && counts[0] == 6);
  CHECK(carve_rle_encode(ones, 3, 2, counts, 8) == 2 && counts[0] == 0 && counts[1] == 6);
  // Empty masks, errors.
  CHECK(carve_rle_encode(NULL, 0, 5, counts, 8) == 1 && counts[0] == 0);
  CHECK(carve_rle_encode(NULL, 3, 2, counts, 8) == 0);
  CHECK(carve_rle_encode(m1, -1, 2, counts, 8) == 0);
  CHECK(carve_rle_encode(m1, 3, -2, counts, 8) == 0);
  // Checkerboard: every pixel its own run.
  uint8_t board[35];
  for (int y = 0; y < 5; y++) {
    for (int x = 0; x < 7; x++) {
      board[y * 7 + x] = (uint8_t)((x + y) & 1);
    }
  }
  uint32_t many[40];
  CHECK(carve_rle_encode(board, 7, 5, many, 40) == 35);  // 35 runs of 1, background first
  for (size_t i = 0; i < 35; i++) {
    CHECK(many[i] == 1);
  }
}

int main(void) {
  test_logits();
  const int shapes[][2] = {{810, 1080}, {1080, 810}, {1280, 720}, {720, 1280}, {640, 640},
                           {333, 517},  {1000, 17},  {7, 1000},   {1, 1},      {99, 101}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    test_native_constant(shapes[s][0], shapes[s][1], 160, 160);
    test_native_constant(shapes[s][0], shapes[s][1], 120, 160);
  }
  test_native_ramp(810, 1080, 160, 160, 70.3f);
  test_native_ramp(1280, 720, 160, 160, 33.7f);
  test_native_ramp(517, 333, 160, 160, 101.5f);
  test_native_ramp(1000, 17, 160, 160, 80.0f);
  test_native_ramp(640, 480, 120, 160, 45.25f);
  test_native_identity();
  test_native_pool();
  test_native_errors();
  test_rle();
  printf("runtime_mask: logits, native masks (constant, ramp, identity, pool, errors), rle ok\n");
  return 0;
}
