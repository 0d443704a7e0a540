// Helper for classify_vs_ultralytics.py: the classification helpers on .npy inputs.
//
//   classify_tool pre OUT.npy IMAGE.npy SIZE
//       carve_classify_preprocess of an (h, w, 3) image of 0..255 values (read
//       with a row stride of w * 3 + 5 bytes) -> (SIZE, SIZE, 3).
//   classify_tool softmax OUT.npy X.npy       carve_softmax of a (n,) vector.
//   classify_tool topk OUT.npy P.npy K        carve_topk_probs -> (k', 2) rows (index, value).

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carve_io.h"
#include "carve_post.h"
#include "carve_pre.h"

static float* load(const char* path, size_t shape[CARVE_NPY_MAX_DIMS], int want_ndim) {
  float* data = NULL;
  int ndim = 0;
  const carve_status s = carve_npy_read_f32(path, &data, shape, &ndim);
  if (s != CARVE_OK || ndim != want_ndim) {
    fprintf(stderr, "classify_tool: %s: %s\n", path,
            s != CARVE_OK ? carve_status_str(s) : "bad ndim");
    exit(1);
  }
  return data;
}

static void save(const char* path, const float* data, const size_t* shape, int ndim) {
  const carve_status s = carve_npy_write_f32(path, data, shape, ndim);
  if (s != CARVE_OK) {
    fprintf(stderr, "classify_tool: %s: %s\n", path, carve_status_str(s));
    exit(1);
  }
}

static void* xmalloc(size_t n) {
  void* p = malloc(n == 0 ? 1 : n);
  if (p == NULL) {
    fprintf(stderr, "classify_tool: out of memory\n");
    exit(1);
  }
  return p;
}

static int run_pre(char** argv) {
  size_t is[CARVE_NPY_MAX_DIMS];
  float* image = load(argv[3], is, 3);
  const int h = (int)is[0], w = (int)is[1], size = atoi(argv[4]);
  const size_t stride = (size_t)w * 3 + 5;  // rows with padding: the stride is honoured
  uint8_t* rgb = xmalloc(stride * (size_t)h);
  memset(rgb, 0xEE, stride * (size_t)h);
  for (int y = 0; y < h; y++) {
    for (size_t i = 0; i < (size_t)w * 3; i++) {
      rgb[(size_t)y * stride + i] = (uint8_t)image[(size_t)y * (size_t)w * 3 + i];
    }
  }
  void* scratch = xmalloc(carve_classify_scratch_bytes(w, h, size));
  float* out = xmalloc((size_t)size * (size_t)size * 3 * sizeof(float));
  const carve_status s = carve_classify_preprocess(rgb, w, h, stride, size, out, scratch, NULL);
  if (s != CARVE_OK) {
    fprintf(stderr, "classify_tool: %s\n", carve_status_str(s));
    return 1;
  }
  const size_t shape[3] = {(size_t)size, (size_t)size, 3};
  save(argv[2], out, shape, 3);
  free(image);
  free(rgb);
  free(scratch);
  free(out);
  return 0;
}

static int run_softmax(char** argv) {
  size_t xs[CARVE_NPY_MAX_DIMS];
  float* x = load(argv[3], xs, 1);
  float* y = xmalloc(xs[0] * sizeof(float));
  carve_softmax(x, xs[0], y);
  save(argv[2], y, xs, 1);
  free(x);
  free(y);
  return 0;
}

static int run_topk(char** argv) {
  size_t ps[CARVE_NPY_MAX_DIMS];
  float* p = load(argv[3], ps, 1);
  const size_t k = (size_t)strtoul(argv[4], NULL, 10);
  int* idx = xmalloc(k * sizeof(int));
  float* val = xmalloc(k * sizeof(float));
  const size_t kk = carve_topk_probs(p, ps[0], k, idx, val);
  float* rows = xmalloc(kk * 2 * sizeof(float));
  for (size_t i = 0; i < kk; i++) {
    rows[2 * i] = (float)idx[i];
    rows[2 * i + 1] = val[i];
  }
  const size_t shape[2] = {kk, 2};
  save(argv[2], rows, shape, 2);
  free(p);
  free(idx);
  free(val);
  free(rows);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && strcmp(argv[1], "pre") == 0) {
    return run_pre(argv);
  }
  if (argc == 4 && strcmp(argv[1], "softmax") == 0) {
    return run_softmax(argv);
  }
  if (argc == 5 && strcmp(argv[1], "topk") == 0) {
    return run_topk(argv);
  }
  fprintf(stderr, "usage: classify_tool pre|softmax|topk ... (see classify_tool.c)\n");
  return 2;
}
