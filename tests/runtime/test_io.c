// Checks the demo-side helpers: .npy write/read round trips (0-d, 1-d, 3-d,
// empty), the header layout numpy expects, rejection of other dtypes, Fortran
// order, bad magic, truncated data and too many dims; PNG write + load round
// trip and load errors; box and text drawing (clipping, NaN, far-away
// coordinates); the palette. Temporary files go to argv[1] (the build dir),
// which the test makes its working directory.

#define _POSIX_C_SOURCE 200809L  // chdir

#include <unistd.h>

#include "carve_io.h"
#include "test_common.h"

static void write_bytes(const char* path, const void* data, size_t n) {
  FILE* f = fopen(path, "wb");
  CHECK(f != NULL);
  CHECK(fwrite(data, 1, n, f) == n);
  CHECK(fclose(f) == 0);
}

// A v1.0 .npy with the given header dict and data bytes.
static void write_npy_raw(const char* path, const char* dict, const void* data, size_t n) {
  char buf[256];
  const size_t dict_len = strlen(dict);
  size_t total = (10 + dict_len + 1 + 63) / 64 * 64;
  const size_t header_len = total - 10;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (char)(header_len & 0xFF);
  buf[9] = (char)(header_len >> 8);
  memcpy(buf + 10, dict, dict_len);
  memset(buf + 10 + dict_len, ' ', header_len - dict_len - 1);
  buf[total - 1] = '\n';
  FILE* f = fopen(path, "wb");
  CHECK(f != NULL);
  CHECK(fwrite(buf, 1, total, f) == total);
  CHECK(fwrite(data, 1, n, f) == n);
  CHECK(fclose(f) == 0);
}

static void roundtrip(const size_t* shape, int ndim) {
  size_t count = 1;
  for (int i = 0; i < ndim; i++) {
    count *= shape[i];
  }
  float* data = malloc((count + 1) * sizeof(float));
  CHECK(data);
  for (size_t i = 0; i < count; i++) {
    data[i] = (float)i * 0.5f - 3.0f;
  }
  const char* path = "roundtrip.npy";
  CHECK(carve_npy_write_f32(path, data, shape, ndim) == CARVE_OK);

  // Header: magic, v1.0, dict, padded to 64 bytes with a final '\n'.
  FILE* f = fopen(path, "rb");
  CHECK(f != NULL);
  uint8_t head[256];
  const size_t got = fread(head, 1, sizeof head, f);
  fclose(f);
  CHECK(got >= 10 && memcmp(head, "\x93NUMPY\x01\x00", 8) == 0);
  const size_t header_len = (size_t)head[8] | (size_t)head[9] << 8;
  CHECK((10 + header_len) % 64 == 0 && header_len + 10 <= got);
  CHECK(head[10 + header_len - 1] == '\n');
  CHECK(memcmp(head + 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (", 51) == 0);

  float* back = NULL;
  size_t back_shape[CARVE_NPY_MAX_DIMS];
  int back_ndim = -1;
  CHECK(carve_npy_read_f32(path, &back, back_shape, &back_ndim) == CARVE_OK);
  CHECK(back != NULL && back_ndim == ndim);
  for (int i = 0; i < ndim; i++) {
    CHECK(back_shape[i] == shape[i]);
  }
  CHECK(count == 0 || memcmp(back, data, count * sizeof(float)) == 0);
  free(back);
  free(data);
}

static void expect_read_status(const char* name, const char* dict, size_t data_bytes,
                               carve_status want) {
  const uint8_t zeros[64] = {0};
  const char* path = name;
  write_npy_raw(path, dict, zeros, data_bytes);
  float sentinel = 0.0f;
  float* data = &sentinel;  // must be set to NULL on failure
  size_t shape[CARVE_NPY_MAX_DIMS];
  int ndim;
  const carve_status s = carve_npy_read_f32(path, &data, shape, &ndim);
  CHECK_MSG(s == want, "%s: status %d (%s), want %d", name, (int)s, carve_status_str(s), (int)want);
  if (s == CARVE_OK) {
    free(data);
  } else {
    CHECK(data == NULL);
  }
}

static void test_npy(void) {
  const size_t s0[1] = {0};
  const size_t s1[1] = {5};
  const size_t s3[3] = {2, 3, 4};
  const size_t s_empty[2] = {0, 3};
  const size_t s8[8] = {1, 2, 1, 2, 1, 2, 1, 3};
  roundtrip(s0, 0);  // 0-d: one element, shape ()
  roundtrip(s1, 1);  // "(5,)"
  roundtrip(s3, 3);
  roundtrip(s_empty, 2);
  roundtrip(s8, 8);

  const char* ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  expect_read_status("ok.npy", ok, 16, CARVE_OK);
  expect_read_status("truncated.npy", ok, 12, CARVE_ERR_IO);
  expect_read_status("f8.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16,
                     CARVE_ERR_UNSUPPORTED);
  expect_read_status("be.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8,
                     CARVE_ERR_UNSUPPORTED);
  expect_read_status("fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
                     16, CARVE_ERR_UNSUPPORTED);
  expect_read_status("dims9.npy",
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }",
                     4, CARVE_ERR_UNSUPPORTED);
  expect_read_status("noshape.npy", "{'descr': '<f4', 'fortran_order': False, }", 4, CARVE_ERR_IO);
  expect_read_status("badshape.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,x), }",
                     8, CARVE_ERR_IO);

  write_bytes("magic.npy", "NOTNUMPYATALL", 13);
  float* data = NULL;
  size_t shape[CARVE_NPY_MAX_DIMS];
  int ndim;
  CHECK(carve_npy_read_f32("magic.npy", &data, shape, &ndim) == CARVE_ERR_IO);
  CHECK(carve_npy_read_f32("does-not-exist.npy", &data, shape, &ndim) == CARVE_ERR_IO);
  CHECK(carve_npy_read_f32(NULL, &data, shape, &ndim) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_npy_write_f32(NULL, NULL, NULL, 0) == CARVE_ERR_INVALID_ARGUMENT);
  const float five[5] = {1, 2, 3, 4, 5};
  CHECK(carve_npy_write_f32("x.npy", NULL, s1, 1) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_npy_write_f32("x.npy", five, s1, -1) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_npy_write_f32("x.npy", five, s8, 9) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_npy_write_f32("/nonexistent-dir/x.npy", five, s1, 1) == CARVE_ERR_IO);
}

static void test_png(void) {
  test_rng rng = {3};
  const int w = 37, h = 11;
  uint8_t* img = malloc((size_t)w * h * 3);
  CHECK(img);
  for (size_t i = 0; i < (size_t)w * h * 3; i++) {
    img[i] = (uint8_t)rng_below(&rng, 256);
  }
  const char* path = "roundtrip.png";
  CHECK(carve_image_write_png(path, img, w, h) == CARVE_OK);
  uint8_t* back = NULL;
  int bw = 0, bh = 0;
  CHECK(carve_image_load_rgb(path, &back, &bw, &bh) == CARVE_OK);
  CHECK(bw == w && bh == h && memcmp(back, img, (size_t)w * h * 3) == 0);
  carve_image_free(back);
  carve_image_free(NULL);

  CHECK(carve_image_load_rgb("does-not-exist.png", &back, &bw, &bh) == CARVE_ERR_IO);
  CHECK(back == NULL && bw == 0 && bh == 0);
  write_bytes("garbage.png", "this is not an image", 20);
  CHECK(carve_image_load_rgb("garbage.png", &back, &bw, &bh) == CARVE_ERR_BAD_IMAGE);
  CHECK(back == NULL);
  CHECK(carve_image_load_rgb(NULL, &back, &bw, &bh) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_image_write_png(path, NULL, w, h) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_image_write_png(path, img, 0, h) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_image_write_png("/nonexistent-dir/x.png", img, w, h) == CARVE_ERR_IO);
  free(img);
}

static const uint8_t* pixel(const uint8_t* img, int w, int x, int y) {
  return img + ((size_t)y * w + x) * 3;
}

static int is_color(const uint8_t* p, const uint8_t c[3]) {
  return p[0] == c[0] && p[1] == c[1] && p[2] == c[2];
}

static void test_drawing(void) {
  const int w = 20, h = 12;
  uint8_t img[20 * 12 * 3];
  const uint8_t red[3] = {255, 0, 0}, black[3] = {0, 0, 0}, white[3] = {255, 255, 255};
  memset(img, 0, sizeof img);

  // Box (2,2)-(8,6), 1 px: the outline only.
  carve_draw_box(img, w, h, 2.2f, 1.8f, 7.6f, 6.4f, red, 1);
  for (int y = 0; y < h; y++) {
    for (int x = 0; x < w; x++) {
      const int on_edge = (x == 2 || x == 8) && y >= 2 && y <= 6;
      const int on_top = (y == 2 || y == 6) && x >= 2 && x <= 8;
      CHECK(is_color(pixel(img, w, x, y), (on_edge || on_top) ? red : black));
    }
  }
  // Thickness grows inwards; swapped corners are fine.
  memset(img, 0, sizeof img);
  carve_draw_box(img, w, h, 10.0f, 9.0f, 2.0f, 1.0f, red, 2);
  CHECK(is_color(pixel(img, w, 2, 1), red) && is_color(pixel(img, w, 3, 2), red));
  CHECK(is_color(pixel(img, w, 4, 3), black) && is_color(pixel(img, w, 11, 9), black));
  // Partly and fully outside, non-finite, huge: clipped, no crash.
  memset(img, 0, sizeof img);
  carve_draw_box(img, w, h, -5.0f, -5.0f, 30.0f, 30.0f, red, 3);
  carve_draw_box(img, w, h, NAN, 1.0f, 5.0f, 5.0f, white, 1);
  carve_draw_box(img, w, h, 1.0f, 1.0f, INFINITY, 5.0f, white, 1);
  carve_draw_box(img, w, h, -3e9f, -3e9f, 3e9f, 3e9f, red, 1);
  carve_draw_box(img, w, h, 1e30f, 1e30f, 2e30f, 2e30f, white, 1000000);
  for (size_t i = 0; i < sizeof img; i += 3) {
    CHECK(!is_color(img + i, white));
  }
  carve_draw_box(NULL, w, h, 0, 0, 1, 1, red, 1);

  // Text: background rectangle plus glyph pixels, clipped at every edge.
  memset(img, 0, sizeof img);
  int tw = 0, th = 0;
  carve_text_size(w, h, "A", &tw, &th);
  CHECK(tw == CARVE_FONT_CELL_W + 1 && th == CARVE_FONT_CELL_H);
  carve_draw_text(img, w, h, 0, 0, "A", white, red);
  // 'A' row 0 is .###. : columns 2..4 of the glyph at x = 1.., y = 1.
  CHECK(is_color(pixel(img, w, 0, 0), red));
  CHECK(is_color(pixel(img, w, 1, 1), red) && is_color(pixel(img, w, 2, 1), white));
  CHECK(is_color(pixel(img, w, 4, 1), white) && is_color(pixel(img, w, 5, 1), red));
  CHECK(is_color(pixel(img, w, 1, 5), white));  // the bar: row 4 is #####
  CHECK(is_color(pixel(img, w, 7, 0), black));  // right of the label
  carve_draw_text(img, w, h, -3, -4, "person 0.93", white, red);
  carve_draw_text(img, w, h, 15, 8, "\x01\x7f\xff~", white, NULL);  // non-ASCII as '?'
  carve_draw_text(img, w, h, 1000000, 1000000, "x", white, red);
  carve_draw_text(img, w, h, -1000000, -1000000, "x", white, red);
  carve_draw_text(img, w, h, 0, 0, "", white, red);
  carve_draw_text(img, w, h, 0, 0, NULL, white, red);
  CHECK(carve_text_scale(640, 640) == 1 && carve_text_scale(1920, 1080) == 3);
}

static void test_palette(void) {
  uint8_t c[3];
  carve_palette_color(0, c);
  CHECK(c[0] == 0x04 && c[1] == 0x2A && c[2] == 0xFF);
  carve_palette_color(19, c);
  CHECK(c[0] == 0xA2 && c[1] == 0xFF && c[2] == 0x0B);
  carve_palette_color(21, c);
  CHECK(c[0] == 0x0B && c[1] == 0xDB && c[2] == 0xEB);
  carve_palette_color(-1, c);  // Python: -1 % 20 == 19
  CHECK(c[0] == 0xA2 && c[1] == 0xFF && c[2] == 0x0B);
  carve_palette_color(0, NULL);
}

int main(int argc, char** argv) {
  if (argc > 1) {
    CHECK(chdir(argv[1]) == 0);
  }
  test_npy();
  test_png();
  test_drawing();
  test_palette();
  printf("runtime_io: ok\n");
  return 0;
}
