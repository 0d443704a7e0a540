// The int8 input of int8 packages (carve_pre.h: carve_letterbox_q8, carve_classify_preprocess_q8,
// carve_nchw_to_nhwc_q8) against what the package computed before them: the float32 pre-processing
// followed by carve_q8_run's CARVE_Q8_QUANTIZE at scale CARVE_PRE_Q8_SCALE, zero point CARVE_PRE_Q8_ZERO
// (the generator's images:quantize op), byte for byte:
//   * every byte value: QUANTIZE(v / 255.0f) == v - 128;
//   * the letterbox on random images of many sizes (odd, 1-pixel, down- and up-scaled, unresized, padded
//     rows), square and non-square outputs, serially and on 3 threads; the border -14 (114 - 128) where
//     there is one;
//   * the classify pre-processing likewise (both axes resized, one, none: a plain crop);
//   * run_tensor's quantization of a float32 NCHW tensor against carve_nchw_to_nhwc + QUANTIZE, on the
//     pixel values, halves between them, values outside [0, 1], +-inf and NaN;
//   * NULL pointers and bad sizes refused with nothing written.

#include "carve_pre.h"
#include "carve_layout.h"
#include "carve_q8.h"
#include "test_common.h"

// CARVE_Q8_QUANTIZE of n pixels of c float32 channels at the int8 input's QParams: the reference.
static void quantize_ref(const float* x, size_t pixels, size_t c, int8_t* y) {
  const size_t fbytes = (pixels * c * sizeof(float) + 63) / 64 * 64;
  uint8_t* arena = malloc(fbytes + pixels * c);
  CHECK(arena);
  memcpy(arena, x, pixels * c * sizeof(float));
  carve_q8_desc d = {0};
  d.kind = CARVE_Q8_QUANTIZE;
  d.h = 1;
  d.w = (uint32_t)pixels;
  d.cin = (uint32_t)c;
  d.in_stride = d.out_stride = c;
  d.in_off = 0;
  d.out_off = fbytes;
  d.out_zero = CARVE_PRE_Q8_ZERO;
  d.scale = CARVE_PRE_Q8_SCALE;
  CHECK(carve_q8_run(&d, NULL, arena) == CARVE_OK);
  memcpy(y, arena + fbytes, pixels * c);
  free(arena);
}

// ---- Every byte value ------------------------------------------------------------------------

static void test_values(void) {
  float x[256];
  int8_t q[256];
  for (int v = 0; v < 256; v++) {
    x[v] = (float)v / 255.0f;
  }
  quantize_ref(x, 256, 1, q);
  for (int v = 0; v < 256; v++) {
    CHECK_MSG(q[v] == v - 128, "QUANTIZE(%d / 255) = %d, not %d", v, q[v], v - 128);
  }
  CHECK(CARVE_PRE_Q8_SCALE == 1.0f / 255.0f && CARVE_PRE_Q8_ZERO == -128);
}

// ---- Letterbox ---------------------------------------------------------------------------------

static uint8_t* random_image(test_rng* rng, int h, size_t stride) {
  uint8_t* img = malloc(stride * (size_t)h);
  CHECK(img);
  for (size_t i = 0; i < stride * (size_t)h; i++) {
    img[i] = (uint8_t)rng_below(rng, 256);
  }
  return img;
}

static void check_letterbox(test_rng* rng, int w, int h, size_t pad_bytes, int ow, int oh, pthreadpool_t pool) {
  const size_t stride = (size_t)w * 3 + pad_bytes;
  uint8_t* img = random_image(rng, h, stride);
  const size_t n = (size_t)ow * (size_t)oh * 3;
  void* scratch = malloc(carve_letterbox_scratch_bytes(ow, oh) + 8);
  float* f = malloc(n * sizeof(float));
  int8_t* want = malloc(n);
  int8_t* got = malloc(n + 1);
  CHECK(scratch && f && want && got);
  memset(got, 0x55, n + 1);
  carve_letterbox_info fi, qi;
  CHECK(carve_letterbox(img, w, h, stride, ow, oh, f, scratch, &fi, NULL) == CARVE_OK);
  quantize_ref(f, (size_t)ow * (size_t)oh, 3, want);
  CHECK(carve_letterbox_q8(img, w, h, stride, ow, oh, got, scratch, &qi, pool) == CARVE_OK);
  CHECK(memcmp(&fi, &qi, sizeof(fi)) == 0);
  for (size_t i = 0; i < n; i++) {
    CHECK_MSG(got[i] == want[i], "%dx%d -> %dx%d%s: value %zu is %d, QUANTIZE(letterbox) %d", w, h, ow, oh,
              pool ? " (3 threads)" : "", i, got[i], want[i]);
  }
  CHECK(got[n] == 0x55);  // nothing past the output
  if (qi.pad_x >= 1.0f || qi.pad_y >= 1.0f) {
    CHECK(got[0] == 114 + CARVE_PRE_Q8_ZERO);  // the top-left is border: Ultralytics' 114, in int8
  }
  free(img);
  free(scratch);
  free(f);
  free(want);
  free(got);
}

static void test_letterbox(void) {
  test_rng rng = {19};
  pthreadpool_t pool = pthreadpool_create(3);
  CHECK(pool != NULL);
  static const int sizes[][2] = {{64, 48},  {48, 64},  {63, 47}, {1, 1},    {1, 37},  {41, 1},  {128, 128},
                                 {200, 90}, {17, 301}, {97, 97}, {640, 480}, {33, 65}, {5, 3},   {96, 64}};
  static const int outs[][2] = {{64, 64}, {96, 64}, {33, 17}, {32, 96}, {1, 1}};
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    for (size_t o = 0; o < sizeof(outs) / sizeof(outs[0]); o++) {
      const size_t pad = (s + o) % 3 == 0 ? 5 : 0;  // rows with padding bytes that must not leak in
      check_letterbox(&rng, sizes[s][0], sizes[s][1], pad, outs[o][0], outs[o][1], NULL);
      check_letterbox(&rng, sizes[s][0], sizes[s][1], pad, outs[o][0], outs[o][1], pool);
    }
  }
  check_letterbox(&rng, 64, 64, 0, 64, 64, pool);    // unresized, no border
  check_letterbox(&rng, 64, 40, 3, 64, 64, NULL);    // unresized, border top and bottom
  check_letterbox(&rng, 333, 251, 0, 320, 320, pool);
  pthreadpool_destroy(pool);
}

// ---- Classify ----------------------------------------------------------------------------------

static void check_classify(test_rng* rng, int w, int h, int size, pthreadpool_t pool) {
  const size_t stride = (size_t)w * 3 + 2;
  uint8_t* img = random_image(rng, h, stride);
  const size_t n = (size_t)size * (size_t)size * 3;
  void* scratch = malloc(carve_classify_scratch_bytes(w, h, size) + 8);
  float* f = malloc(n * sizeof(float));
  int8_t* want = malloc(n);
  int8_t* got = malloc(n + 1);
  CHECK(scratch && f && want && got);
  memset(got, 0x55, n + 1);
  CHECK(carve_classify_preprocess(img, w, h, stride, size, f, scratch, NULL) == CARVE_OK);
  quantize_ref(f, (size_t)size * (size_t)size, 3, want);
  CHECK(carve_classify_preprocess_q8(img, w, h, stride, size, got, scratch, pool) == CARVE_OK);
  for (size_t i = 0; i < n; i++) {
    CHECK_MSG(got[i] == want[i], "classify %dx%d -> %d: value %zu is %d, QUANTIZE %d", w, h, size, i, got[i],
              want[i]);
  }
  CHECK(got[n] == 0x55);
  free(img);
  free(scratch);
  free(f);
  free(want);
  free(got);
}

static void test_classify(void) {
  test_rng rng = {7};
  pthreadpool_t pool = pthreadpool_create(3);
  CHECK(pool != NULL);
  static const int cases[][3] = {{64, 48, 32}, {48, 64, 32}, {31, 97, 17}, {32, 32, 32}, {32, 50, 32},
                                 {50, 32, 32}, {7, 5, 16},   {1, 1, 3},    {300, 200, 64}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    check_classify(&rng, cases[i][0], cases[i][1], cases[i][2], NULL);
    check_classify(&rng, cases[i][0], cases[i][1], cases[i][2], pool);
  }
  pthreadpool_destroy(pool);
}

// ---- run_tensor's quantization -------------------------------------------------------------------

static void test_tensor(void) {
  test_rng rng = {3};
  const size_t c = 3, h = 7, w = 45, n = c * h * w;
  float* x = malloc(n * sizeof(float));
  float* nhwc = malloc(n * sizeof(float));
  int8_t* want = malloc(n);
  int8_t* got = malloc(n + 1);
  CHECK(x && nhwc && want && got);
  for (size_t i = 0; i < n; i++) {
    const size_t kind = i % 5;
    const float v = (float)rng_below(&rng, 256);
    x[i] = kind == 0 ? v / 255.0f                           // a pixel
           : kind == 1 ? (v + 0.5f) / 255.0f                // a tie between two pixels
           : kind == 2 ? rng_range(&rng, -2.0f, 3.0f)       // outside [0, 1]: clamped
           : kind == 3 ? rng_range(&rng, 0.0f, 1.0f)
                       : (float)(i % 3 == 0 ? INFINITY : i % 3 == 1 ? -INFINITY : NAN);
  }
  CHECK(carve_nchw_to_nhwc(x, c, h, w, nhwc, c) == CARVE_OK);
  quantize_ref(nhwc, h * w, c, want);
  memset(got, 0x55, n + 1);
  CHECK(carve_nchw_to_nhwc_q8(x, c, h, w, got) == CARVE_OK);
  for (size_t i = 0; i < n; i++) {
    CHECK_MSG(got[i] == want[i], "tensor value %zu: %d, QUANTIZE %d", i, got[i], want[i]);
  }
  CHECK(got[n] == 0x55);
  // pixels v / 255 give v - 128
  for (size_t p = 0; p < h * w; p++) {
    for (size_t ch = 0; ch < c; ch++) {
      const float v = x[ch * h * w + p];
      const float k = roundf(v * 255.0f);
      if (k >= 0.0f && k <= 255.0f && v == k / 255.0f) {
        CHECK(got[p * c + ch] == (int)k - 128);
      }
    }
  }
  free(x);
  free(nhwc);
  free(want);
  free(got);
}

// ---- Errors --------------------------------------------------------------------------------------

static void test_errors(void) {
  uint8_t img[12] = {0};
  int8_t out[16];
  uint64_t scratch[64];
  float x[12] = {0};
  memset(out, 0x55, sizeof(out));
  CHECK(carve_letterbox_q8(NULL, 2, 2, 6, 2, 2, out, scratch, NULL, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_letterbox_q8(img, 2, 2, 6, 2, 2, NULL, scratch, NULL, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_letterbox_q8(img, 2, 2, 6, 2, 2, out, NULL, NULL, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_letterbox_q8(img, 2, 2, 6, 0, 2, out, scratch, NULL, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_letterbox_q8(img, 0, 2, 6, 2, 2, out, scratch, NULL, NULL) == CARVE_ERR_BAD_IMAGE);
  CHECK(carve_letterbox_q8(img, 2, 2, 5, 2, 2, out, scratch, NULL, NULL) == CARVE_ERR_BAD_IMAGE);
  CHECK(carve_classify_preprocess_q8(NULL, 2, 2, 6, 1, out, scratch, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_classify_preprocess_q8(img, 2, 2, 6, 1, NULL, scratch, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_classify_preprocess_q8(img, 2, 2, 6, 1, out, NULL, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_classify_preprocess_q8(img, 2, 2, 6, 0, out, scratch, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_classify_preprocess_q8(img, 2, 0, 6, 1, out, scratch, NULL) == CARVE_ERR_BAD_IMAGE);
  CHECK(carve_nchw_to_nhwc_q8(NULL, 3, 2, 2, out) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_nchw_to_nhwc_q8(x, 3, 2, 2, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_nchw_to_nhwc_q8(x, 0, 2, 2, out) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_nchw_to_nhwc_q8(x, 3, 0, 2, out) == CARVE_ERR_INVALID_ARGUMENT);
  for (size_t i = 0; i < sizeof(out); i++) {
    CHECK(out[i] == 0x55);  // nothing written
  }
}

int main(void) {
  test_values();
  test_letterbox();
  test_classify();
  test_tensor();
  test_errors();
  printf("runtime_pre_q8: ok\n");
  return 0;
}
