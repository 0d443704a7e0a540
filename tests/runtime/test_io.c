// Checks the demo-side helpers: .npy write/read round trips (0-d, 1-d, 3-d,
// empty), the header layout numpy expects, rejection of other dtypes, Fortran
// order, bad magic, truncated data and too many dims; PNG write + load round
// trip and load errors; why a load fails (cannot open, unsupported format,
// corrupt); writing by extension (PNG, JPEG, BMP, TGA; others refused); Exif
// orientation 1..8 in both byte orders, the parser on truncated and mutated input; files written whole (a
// failed write leaves the target as it was and no temporary file); the COCO results writer (layout, argument
// checks, abort; tests/demo/coco.py loads its files with pycocotools); the executable's folder; box and text
// drawing (clipping, NaN, far-away coordinates); the palette. Temporary files go to argv[1] (the build dir),
// which the test makes its working directory.

#define _POSIX_C_SOURCE 200809L  // chdir, opendir, getcwd

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
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
  CHECK(carve_image_load_rgb("garbage.png", &back, &bw, &bh) == CARVE_ERR_UNSUPPORTED);
  CHECK(back == NULL);
  CHECK(carve_image_load_rgb(NULL, &back, &bw, &bh) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_image_write_png(path, NULL, w, h) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_image_write_png(path, img, 0, h) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_image_write_png("/nonexistent-dir/x.png", img, w, h) == CARVE_ERR_IO);
  free(img);
}

static uint8_t* read_all(const char* path, size_t* n) {
  FILE* f = fopen(path, "rb");
  CHECK(f != NULL);
  CHECK(fseek(f, 0, SEEK_END) == 0);
  const long size = ftell(f);
  CHECK(size > 0 && fseek(f, 0, SEEK_SET) == 0);
  uint8_t* data = malloc((size_t)size);
  CHECK(data && fread(data, 1, (size_t)size, f) == (size_t)size);
  fclose(f);
  *n = (size_t)size;
  return data;
}

// carve_image_load_rgb_msg: the status and the message say why (cannot open,
// unsupported format, corrupt), and nothing is returned on failure.
static void expect_load_error(const char* path, carve_status want, const char* want_in_msg) {
  uint8_t* back = (uint8_t*)1;
  int bw = -1, bh = -1;
  char msg[256];
  const carve_status s = carve_image_load_rgb_msg(path, &back, &bw, &bh, msg, sizeof msg);
  CHECK_MSG(s == want && strstr(msg, want_in_msg) != NULL, "%s: %s: '%s' (expected %s, '%s')", path,
            carve_status_str(s), msg, carve_status_str(want), want_in_msg);
  CHECK(back == NULL && bw == 0 && bh == 0);
}

static void test_image_errors(void) {
  expect_load_error("does-not-exist.jpg", CARVE_ERR_IO, "cannot open: No such file");
  expect_load_error(".", CARVE_ERR_IO, "cannot read");  // a folder: fopen works, fread fails
  write_bytes("empty.jpg", "", 0);
  expect_load_error("empty.jpg", CARVE_ERR_BAD_IMAGE, "empty file");
  write_bytes("image.webp", "RIFF\x10\0\0\0WEBPVP8 ", 16);
  expect_load_error("image.webp", CARVE_ERR_UNSUPPORTED, "unsupported format: WebP");
  write_bytes("image.tif", "II*\0\x08\0\0\0\0\0", 10);
  expect_load_error("image.tif", CARVE_ERR_UNSUPPORTED, "unsupported format: TIFF");
  write_bytes("image.heic", "\0\0\0\x18" "ftypheic\0\0\0\0", 16);
  expect_load_error("image.heic", CARVE_ERR_UNSUPPORTED, "unsupported format: HEIF");
  write_bytes("notes.txt", "hello, this is text", 19);
  expect_load_error("notes.txt", CARVE_ERR_UNSUPPORTED, "not an image stb_image reads");

  // A real PNG and JPEG cut short: recognised, then corrupt.
  uint8_t img[16 * 8 * 3];
  for (size_t i = 0; i < sizeof img; i++) img[i] = (uint8_t)(i * 7);
  const char* names[2] = {"whole.png", "whole.jpg"};
  const char* kinds[2] = {"corrupt or truncated PNG", "corrupt or truncated JPEG"};
  for (int k = 0; k < 2; k++) {
    CHECK(carve_image_write(names[k], img, 16, 8) == CARVE_OK);
    size_t n = 0;
    uint8_t* data = read_all(names[k], &n);
    write_bytes("cut.img", data, n / 3);
    expect_load_error("cut.img", CARVE_ERR_BAD_IMAGE, kinds[k]);
    free(data);
  }
  char msg[8];
  CHECK(carve_image_load_rgb_msg(NULL, NULL, NULL, NULL, msg, sizeof msg) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(strlen(msg) < sizeof msg);  // truncated, terminated
  CHECK(carve_image_decode_rgb(NULL, 0, NULL, NULL, NULL, NULL, 0) == CARVE_ERR_INVALID_ARGUMENT);
}

// carve_image_write: the extension picks PNG, JPEG, BMP or TGA; others are refused.
static void test_image_write_formats(void) {
  test_rng rng = {5};
  const int w = 13, h = 9;
  uint8_t img[13 * 9 * 3];
  for (size_t i = 0; i < sizeof img; i++) img[i] = (uint8_t)rng_below(&rng, 256);
  const char* lossless[] = {"out.png", "OUT.PNG", "out.bmp", "out.tga"};
  for (size_t k = 0; k < sizeof lossless / sizeof *lossless; k++) {
    CHECK(carve_image_write(lossless[k], img, w, h) == CARVE_OK);
    uint8_t* back = NULL;
    int bw = 0, bh = 0;
    CHECK(carve_image_load_rgb(lossless[k], &back, &bw, &bh) == CARVE_OK);
    CHECK_MSG(bw == w && bh == h && memcmp(back, img, sizeof img) == 0, "%s", lossless[k]);
    carve_image_free(back);
  }
  // JPEG: flat colour survives within a few units; the file starts with SOI.
  uint8_t flat[13 * 9 * 3];
  for (size_t i = 0; i < sizeof flat; i += 3) { flat[i] = 200; flat[i + 1] = 40; flat[i + 2] = 90; }
  const char* jpegs[] = {"out.jpg", "out.JPEG"};
  for (size_t k = 0; k < 2; k++) {
    CHECK(carve_image_write(jpegs[k], flat, w, h) == CARVE_OK);
    size_t n = 0;
    uint8_t* data = read_all(jpegs[k], &n);
    CHECK(n > 3 && data[0] == 0xFF && data[1] == 0xD8);
    free(data);
    uint8_t* back = NULL;
    int bw = 0, bh = 0;
    CHECK(carve_image_load_rgb(jpegs[k], &back, &bw, &bh) == CARVE_OK && bw == w && bh == h);
    for (size_t i = 0; i < sizeof flat; i++) CHECK(abs((int)back[i] - (int)flat[i]) <= 4);
    carve_image_free(back);
  }
  CHECK(carve_image_format_for_path("a.gif") == CARVE_IMAGE_UNKNOWN);
  CHECK(carve_image_format_for_path("png") == CARVE_IMAGE_UNKNOWN);
  CHECK(carve_image_format_for_path(NULL) == CARVE_IMAGE_UNKNOWN);
  CHECK(carve_image_write("out.gif", img, w, h) == CARVE_ERR_UNSUPPORTED);
  CHECK(carve_image_write("out", img, w, h) == CARVE_ERR_UNSUPPORTED);
  FILE* f = fopen("out.gif", "rb");
  CHECK(f == NULL);  // nothing written
  CHECK(carve_image_write("/nonexistent-dir/x.jpg", img, w, h) == CARVE_ERR_IO);
  CHECK(carve_image_write("x.png", NULL, w, h) == CARVE_ERR_INVALID_ARGUMENT);
}

// No "<prefix>.*.tmp" left in the working directory.
static int temp_files_left(const char* prefix) {
  DIR* d = opendir(".");
  CHECK(d != NULL);
  int left = 0;
  const size_t n = strlen(prefix);
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    const size_t m = strlen(e->d_name);
    if (m > n + 4 && strncmp(e->d_name, prefix, n) == 0 && e->d_name[n] == '.' && !strcmp(e->d_name + m - 4, ".tmp")) {
      left++;
    }
  }
  closedir(d);
  return left;
}

// Images and COCO files are written whole: a failed write leaves an existing target alone.
static void test_whole_files(void) {
  uint8_t img[4 * 3 * 3] = {0};
  write_bytes("keep.png", "old", 3);
  CHECK(carve_image_write("keep.png", NULL, 4, 3) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_image_write("keep.gif", img, 4, 3) == CARVE_ERR_UNSUPPORTED);
  size_t n = 0;
  uint8_t* data = read_all("keep.png", &n);
  CHECK(n == 3 && memcmp(data, "old", 3) == 0);
  free(data);
  CHECK(carve_image_write("keep.png", img, 4, 3) == CARVE_OK);  // replaced by a whole PNG
  data = read_all("keep.png", &n);
  CHECK(n > 8 && memcmp(data, "\x89PNG", 4) == 0);
  free(data);
  CHECK(temp_files_left("keep.png") == 0);
  // The target is a folder: the temporary file is written, the rename fails, and it is removed.
  CHECK(mkdir("adir.png", 0755) == 0 || errno == EEXIST);
  CHECK(carve_image_write("adir.png", img, 4, 3) == CARVE_ERR_IO);
  CHECK(temp_files_left("adir.png") == 0);
  carve_coco_writer* w = NULL;
  CHECK(carve_coco_open("adir.png", &w) == CARVE_OK);
  CHECK(carve_coco_close(w) == CARVE_ERR_IO);
  CHECK(temp_files_left("adir.png") == 0);
}

static char* read_text(const char* path) {
  size_t n = 0;
  uint8_t* data = read_all(path, &n);
  char* text = (char*)realloc(data, n + 1);
  CHECK(text != NULL);
  text[n] = '\0';
  return text;
}

// carve_rle_string on hand-made counts (pycocotools' strings; tests/runtime/mask_vs_ultralytics.py compares it with
// pycocotools.mask.encode on many masks), the COCO writer's output and its argument checks.
static void test_coco(void) {
  // Counts 0..2 are written as they are, then less the count two before, as signed 5-bit groups (low first, +32
  // when more follow, +48). The strings are pycocotools' (frPyObjects of these uncompressed counts).
  char s[64];
  const uint32_t c1[] = {0, 6};
  CHECK(carve_rle_string(c1, 2, s, sizeof s) == 2 && !strcmp(s, "06"));
  const uint32_t c2[] = {5, 1, 3, 2, 40};  // ..., 2 - 1 = 1, 40 - 3 = 37 = 1 * 32 + 5: "U" (5 + 32 + 48), "1"
  CHECK(carve_rle_string(c2, 5, s, sizeof s) == 6 && !strcmp(s, "5131U1"));
  const uint32_t c3[] = {100, 1, 1, 1, 1};  // 100 = 3 * 32 + 4: "T", "3"; then 1, 1, 0, 0
  CHECK(carve_rle_string(c3, 5, s, sizeof s) == 6 && !strcmp(s, "T31100"));
  const uint32_t c4[] = {0, 0, 0, 20};  // 20 has its sign bit (16) set: a second group "0"
  CHECK(carve_rle_string(c4, 4, s, sizeof s) == 5 && !strcmp(s, "000d0"));
  const uint32_t c5[] = {0, 0, 30, 0, 2};  // 30: "n0"; 0 - 0; 2 - 30 = -28 = -1 * 32 + 4: "T", then -1: "O"
  CHECK(carve_rle_string(c5, 5, s, sizeof s) == 7 && !strcmp(s, "00n00TO"));
  CHECK(carve_rle_string(c5, 5, NULL, 0) == 7);
  char small[3] = {'x', 'x', 'x'};
  CHECK(carve_rle_string(c3, 5, small, sizeof small) == 6 && !strcmp(small, "T3"));  // truncated, terminated
  CHECK(carve_rle_string(NULL, 3, small, sizeof small) == 0 && small[0] == '\0');
  const uint32_t big[] = {0, UINT32_MAX, 0, 0};  // the longest group runs: 7 characters a count
  CHECK(carve_rle_string(big, 4, NULL, 0) <= 4 * 7);

  remove("results.json");
  carve_coco_writer* w = NULL;
  CHECK(carve_coco_open("results.json", &w) == CARVE_OK);
  FILE* f = fopen("results.json", "rb");
  CHECK(f == NULL);  // nothing at the target until closed
  const float bbox[4] = {10.5f, 20.25f, 30, 40};
  const uint32_t rle[] = {2, 3, 7};  // a 3 x 4 mask
  const uint32_t rle_bs[] = {44, 16};  // 44 = 1 * 32 + 12: "\\" (12 + 32 + 48), "1": escaped in JSON; 16 (its sign bit set): "`0"
  const float kpts[6] = {1, 2, 0.5f, 3, 4, 0.25f};
  const float rbox[5] = {50, 60, 20, 10, 0};
  carve_coco_result r = {0};
  r.image_id = 397133;
  r.category_id = 18;
  r.score = 0.875f;
  r.bbox = bbox;
  CHECK(carve_coco_add(w, &r) == CARVE_OK);
  r.rle = rle;
  r.rle_count = 3;
  r.mask_h = 3;
  r.mask_w = 4;
  CHECK(carve_coco_add(w, &r) == CARVE_OK);
  r.rle = rle_bs;
  r.rle_count = 2;
  r.mask_h = 6;
  r.mask_w = 10;
  CHECK(carve_coco_add(w, &r) == CARVE_OK);
  r.rle = NULL;
  r.keypoints = kpts;
  r.num_keypoints = 2;
  CHECK(carve_coco_add(w, &r) == CARVE_OK);
  carve_coco_result o = {0};
  o.image_id = 7;
  o.category_id = 1;
  o.score = 0.5f;
  o.rbox = rbox;
  CHECK(carve_coco_add(w, &o) == CARVE_OK);
  // refused, nothing appended
  carve_coco_result bad = r;
  bad.score = NAN;
  CHECK(carve_coco_add(w, &bad) == CARVE_ERR_INVALID_ARGUMENT);
  const float inf_box[4] = {0, 0, INFINITY, 1};
  bad = r;
  bad.bbox = inf_box;
  CHECK(carve_coco_add(w, &bad) == CARVE_ERR_INVALID_ARGUMENT);
  bad = r;
  bad.rle = rle;
  bad.rle_count = 3;
  bad.mask_h = 4;  // 12 counted, 16 pixels
  bad.mask_w = 4;
  CHECK(carve_coco_add(w, &bad) == CARVE_ERR_INVALID_ARGUMENT);
  bad.mask_h = 3;
  bad.rbox = rbox;  // a mask and a rotated box
  CHECK(carve_coco_add(w, &bad) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_coco_add(w, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_coco_add(NULL, &r) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_coco_close(w) == CARVE_OK);
  char* text = read_text("results.json");
  const char* want =
      "[\n"
      "{\"image_id\": 397133, \"category_id\": 18, \"bbox\": [10.500, 20.250, 30.000, 40.000], \"score\": 0.87500},\n"
      "{\"image_id\": 397133, \"category_id\": 18, \"bbox\": [10.500, 20.250, 30.000, 40.000], \"score\": 0.87500, "
      "\"segmentation\": {\"size\": [3, 4], \"counts\": \"237\"}},\n"
      "{\"image_id\": 397133, \"category_id\": 18, \"bbox\": [10.500, 20.250, 30.000, 40.000], \"score\": 0.87500, "
      "\"segmentation\": {\"size\": [6, 10], \"counts\": \"\\\\1`0\"}},\n"
      "{\"image_id\": 397133, \"category_id\": 18, \"bbox\": [10.500, 20.250, 30.000, 40.000], \"score\": 0.87500, "
      "\"keypoints\": [1.000, 2.000, 0.50000, 3.000, 4.000, 0.25000]},\n"
      "{\"image_id\": 7, \"category_id\": 1, \"bbox\": [40.000, 55.000, 20.000, 10.000], \"score\": 0.50000, "
      "\"rbox\": [50.000, 60.000, 20.000, 10.000, 0.000], \"poly\": [60.000, 65.000, 60.000, 55.000, 40.000, 55.000, "
      "40.000, 65.000], \"segmentation\": [[60.000, 65.000, 60.000, 55.000, 40.000, 55.000, 40.000, 65.000]]}\n"
      "]\n";
  CHECK_MSG(!strcmp(text, want), "got:\n%s\nwanted:\n%s", text, want);
  free(text);
  CHECK(temp_files_left("results.json") == 0);

  // An empty list; abort leaves the earlier file as it was.
  CHECK(carve_coco_open("empty.json", &w) == CARVE_OK && carve_coco_close(w) == CARVE_OK);
  text = read_text("empty.json");
  CHECK(!strcmp(text, "[]\n"));
  free(text);
  CHECK(carve_coco_open("results.json", &w) == CARVE_OK);
  CHECK(carve_coco_add(w, &r) == CARVE_OK);
  carve_coco_abort(w);
  carve_coco_abort(NULL);
  text = read_text("results.json");
  CHECK(!strcmp(text, want));
  free(text);
  CHECK(temp_files_left("results.json") == 0);
  CHECK(carve_coco_open("/nonexistent-dir/r.json", &w) == CARVE_ERR_IO && w == NULL);
  CHECK(carve_coco_open(NULL, &w) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_coco_open("x.json", NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_coco_close(NULL) == CARVE_ERR_INVALID_ARGUMENT);
}

static void test_exe_dir(const char* argv0) {
  char dir[4096], cwd[4096];
  CHECK(carve_exe_dir(argv0, dir, sizeof dir) == CARVE_OK);
  // This test runs from its build folder, so its executable's folder is a real folder that holds it.
  char self[4200];
  snprintf(self, sizeof self, "%s/%s", dir, strrchr(argv0, '/') != NULL ? strrchr(argv0, '/') + 1 : argv0);
  FILE* f = fopen(self, "rb");
  CHECK_MSG(f != NULL, "%s", self);
  fclose(f);
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  char small[2];
  CHECK(carve_exe_dir(argv0, small, sizeof small) == CARVE_ERR_IO && small[0] == '\0');
  CHECK(carve_exe_dir(argv0, NULL, 4) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_exe_dir(argv0, dir, 0) == CARVE_ERR_INVALID_ARGUMENT);
}

// An APP1 Exif segment with IFD0 = one Orientation entry (SHORT), in either byte order.
static size_t make_app1(uint8_t* seg, int little, unsigned orientation) {
  const uint8_t tiff_le[] = {'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0,
                             (uint8_t)orientation, 0, 0, 0, 0, 0, 0, 0};
  const uint8_t tiff_be[] = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1,
                             0, (uint8_t)orientation, 0, 0, 0, 0, 0, 0};
  const size_t payload = 6 + sizeof tiff_le;
  seg[0] = 0xFF;
  seg[1] = 0xE1;
  seg[2] = (uint8_t)((payload + 2) >> 8);
  seg[3] = (uint8_t)(payload + 2);
  memcpy(seg + 4, "Exif\0\0", 6);
  memcpy(seg + 10, little ? tiff_le : tiff_be, sizeof tiff_le);
  return 4 + payload;
}

// The upright image of stored pixels src (sw x sh) for an Exif orientation, built
// from quarter turns clockwise and a left-right mirror (another formulation than
// the loader's, which maps every output pixel to its source directly).
static uint8_t* upright(const uint8_t* src, int sw, int sh, int o, int* ow, int* oh) {
  static const int turns[9] = {0, 0, 0, 2, 2, 3, 1, 1, 3};     // clockwise quarter turns after the mirror
  static const int mirror[9] = {0, 0, 1, 0, 1, 1, 0, 1, 0};    // mirror left-right first
  uint8_t* a = malloc((size_t)sw * sh * 3);
  uint8_t* b = malloc((size_t)sw * sh * 3);
  CHECK(a && b);
  int w = sw, h = sh;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      memcpy(a + ((size_t)y * w + x) * 3, src + ((size_t)y * w + (mirror[o] ? w - 1 - x : x)) * 3, 3);
  for (int t = 0; t < turns[o]; t++) {  // rotate a clockwise into b: (x, y) -> (h - 1 - y, x)
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) memcpy(b + ((size_t)x * h + (h - 1 - y)) * 3, a + ((size_t)y * w + x) * 3, 3);
    uint8_t* t2 = a; a = b; b = t2;
    const int tw = w; w = h; h = tw;
  }
  free(b);
  *ow = w;
  *oh = h;
  return a;
}

// Exif orientation: every value in both byte orders against quarter turns and a
// mirror of the decoded stored pixels; then the parser on truncated and mutated
// segments (every read bounds-checked: run it under ASan/UBSan to be sure).
static void test_exif(void) {
  const int w = 11, h = 6;
  uint8_t img[11 * 6 * 3];
  test_rng rng = {9};
  for (size_t i = 0; i < sizeof img; i++) img[i] = (uint8_t)rng_below(&rng, 256);
  CHECK(carve_image_write("stored.jpg", img, w, h) == CARVE_OK);
  size_t n = 0;
  uint8_t* jpg = read_all("stored.jpg", &n);
  CHECK(carve_jpeg_exif_orientation(jpg, n) == 1);
  uint8_t* stored = NULL;
  int sw = 0, sh = 0;
  CHECK(carve_image_decode_rgb(jpg, n, &stored, &sw, &sh, NULL, 0) == CARVE_OK && sw == w && sh == h);

  uint8_t* file = malloc(n + 64);
  CHECK(file);
  for (int little = 0; little <= 1; little++) {
    for (unsigned o = 0; o <= 9; o++) {
      uint8_t seg[64];
      const size_t sl = make_app1(seg, little, o);
      memcpy(file, jpg, 2);
      memcpy(file + 2, seg, sl);
      memcpy(file + 2 + sl, jpg + 2, n - 2);
      const int want = o >= 1 && o <= 8 ? (int)o : 1;  // 0 and 9: out of range, as stored
      CHECK_MSG(carve_jpeg_exif_orientation(file, n + sl) == want, "little %d o %u", little, o);
      uint8_t* got = NULL;
      int gw = 0, gh = 0;
      CHECK(carve_image_decode_rgb(file, n + sl, &got, &gw, &gh, NULL, 0) == CARVE_OK);
      int ew = 0, eh = 0;
      uint8_t* expect = upright(stored, sw, sh, want, &ew, &eh);
      CHECK_MSG(gw == ew && gh == eh && memcmp(got, expect, (size_t)ew * eh * 3) == 0, "little %d o %u", little, o);
      free(expect);
      carve_image_free(got);
      // Truncated anywhere: never out of bounds, always 1..8 (exact-size copies, for ASan).
      for (size_t cut = 0; cut <= 2 + sl + 4; cut++) {
        uint8_t* part = malloc(cut ? cut : 1);
        CHECK(part);
        memcpy(part, file, cut);
        const int v = carve_jpeg_exif_orientation(part, cut);
        CHECK(v >= 1 && v <= 8);
        free(part);
      }
    }
  }
  // Random mutations of the segment's bytes (lengths, offsets, counts, types).
  uint8_t seg[64];
  const size_t sl = make_app1(seg, 1, 6);
  for (int iter = 0; iter < 200000; iter++) {
    uint8_t buf[2 + 64];
    buf[0] = 0xFF;
    buf[1] = 0xD8;
    memcpy(buf + 2, seg, sl);
    const int flips = 1 + (int)rng_below(&rng, 4);
    for (int k = 0; k < flips; k++) buf[2 + rng_below(&rng, (uint32_t)sl)] = (uint8_t)rng_below(&rng, 256);
    const size_t len = 2 + (size_t)rng_below(&rng, (uint32_t)sl + 1);
    uint8_t* part = malloc(len);
    CHECK(part);
    memcpy(part, buf, len);
    const int v = carve_jpeg_exif_orientation(part, len);
    CHECK(v >= 1 && v <= 8);
    free(part);
  }
  CHECK(carve_jpeg_exif_orientation(NULL, 10) == 1);
  CHECK(carve_jpeg_exif_orientation("\xFF\xD8", 2) == 1);
  free(file);
  free(jpg);
  carve_image_free(stored);
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
  test_image_errors();
  test_image_write_formats();
  test_whole_files();
  test_coco();
  test_exe_dir(argv[0]);
  test_exif();
  test_drawing();
  test_palette();
  printf("runtime_io: ok\n");
  return 0;
}
