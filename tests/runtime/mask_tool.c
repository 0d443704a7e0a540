// Helper for mask_vs_ultralytics.py: the mask functions on .npy inputs.
//
//   mask_tool logits OUT.npy ROWS.npy COEF_OFFSET PROTOS.npy
//       carve_mask_logits: ROWS (n, m) rows, PROTOS (mh, mw, nm) NHWC -> (n, mh, mw).
//   mask_tool native OUT.npy LOGITS.npy BOXES.npy SRC_W SRC_H
//       carve_mask_native for each of the n (mh, mw) logits and (n, 4) boxes (in
//       source pixels), with the geometry of a (4 mw, 4 mh) letterbox of a SRC_W x
//       SRC_H image -> (n, SRC_H, SRC_W) masks as 0.0 / 1.0.
//   mask_tool rle OUT.npy MASK.npy
//       carve_rle_encode of an (h, w) mask (nonzero = 1) -> (count,) counts.
//   mask_tool rlestr OUT.txt MASK.npy
//       carve_rle_string of those counts (COCO's compressed RLE) -> OUT.txt.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carve_io.h"
#include "carve_mask.h"

static float* load(const char* path, size_t shape[CARVE_NPY_MAX_DIMS], int want_ndim) {
  float* data = NULL;
  int ndim = 0;
  const carve_status s = carve_npy_read_f32(path, &data, shape, &ndim);
  if (s != CARVE_OK || ndim != want_ndim) {
    fprintf(stderr, "mask_tool: %s: %s\n", path, s != CARVE_OK ? carve_status_str(s) : "bad ndim");
    exit(1);
  }
  return data;
}

static void save(const char* path, const float* data, const size_t* shape, int ndim) {
  const carve_status s = carve_npy_write_f32(path, data, shape, ndim);
  if (s != CARVE_OK) {
    fprintf(stderr, "mask_tool: %s: %s\n", path, carve_status_str(s));
    exit(1);
  }
}

static void* xmalloc(size_t n) {
  void* p = malloc(n == 0 ? 1 : n);
  if (p == NULL) {
    fprintf(stderr, "mask_tool: out of memory\n");
    exit(1);
  }
  return p;
}

static int run_logits(char** argv) {
  size_t rs[CARVE_NPY_MAX_DIMS], ps[CARVE_NPY_MAX_DIMS];
  float* rows = load(argv[3], rs, 2);
  const size_t offset = (size_t)strtoul(argv[4], NULL, 10);
  float* protos = load(argv[5], ps, 3);
  const carve_view view = {protos, ps[0], ps[1], ps[2], ps[2]};
  float* logits = xmalloc(rs[0] * ps[0] * ps[1] * sizeof(float));
  pthreadpool_t pool = pthreadpool_create(4);
  const carve_status s = carve_mask_logits(rows, rs[0], rs[1], offset, &view, logits, pool);
  pthreadpool_destroy(pool);
  if (s != CARVE_OK) {
    fprintf(stderr, "mask_tool: carve_mask_logits: %s\n", carve_status_str(s));
    return 1;
  }
  const size_t shape[3] = {rs[0], ps[0], ps[1]};
  save(argv[2], logits, shape, 3);
  free(rows);
  free(protos);
  free(logits);
  return 0;
}

static int run_native(char** argv) {
  size_t ls[CARVE_NPY_MAX_DIMS], bs[CARVE_NPY_MAX_DIMS];
  float* logits = load(argv[3], ls, 3);
  float* boxes = load(argv[4], bs, 2);
  const int src_w = atoi(argv[5]), src_h = atoi(argv[6]);
  const size_t n = ls[0], mh = ls[1], mw = ls[2];
  if (bs[0] != n || bs[1] != 4) {
    fprintf(stderr, "mask_tool: boxes must be (%zu, 4)\n", n);
    return 1;
  }
  // The geometry of the letterbox the logits belong to: (4 mw, 4 mh).
  const int in_w = (int)(4 * mw), in_h = (int)(4 * mh);
  uint8_t* img = calloc((size_t)src_w * (size_t)src_h * 3, 1);
  float* lb = xmalloc((size_t)in_w * (size_t)in_h * 3 * sizeof(float));
  void* lb_scratch = xmalloc(carve_letterbox_scratch_bytes(in_w, in_h));
  carve_letterbox_info info;
  if (img == NULL ||
      carve_letterbox(img, src_w, src_h, (size_t)src_w * 3, in_w, in_h, lb, lb_scratch, &info, NULL) !=
          CARVE_OK) {
    fprintf(stderr, "mask_tool: letterbox failed\n");
    return 1;
  }
  const size_t scratch_bytes = carve_mask_native_scratch_bytes(mh, mw, &info);
  void* scratch = xmalloc(scratch_bytes);
  const size_t pixels = (size_t)src_w * (size_t)src_h;
  uint8_t* mask = xmalloc(pixels);
  float* out = xmalloc(n * pixels * sizeof(float));
  pthreadpool_t pool = pthreadpool_create(4);
  for (size_t i = 0; i < n; i++) {
    const carve_status s =
        carve_mask_native(logits + i * mh * mw, mh, mw, &info, boxes + 4 * i, mask, scratch, pool);
    if (s != CARVE_OK) {
      fprintf(stderr, "mask_tool: carve_mask_native: %s\n", carve_status_str(s));
      return 1;
    }
    for (size_t p = 0; p < pixels; p++) {
      out[i * pixels + p] = (float)mask[p];
    }
  }
  pthreadpool_destroy(pool);
  const size_t shape[3] = {n, (size_t)src_h, (size_t)src_w};
  save(argv[2], out, shape, 3);
  free(logits);
  free(boxes);
  free(img);
  free(lb);
  free(lb_scratch);
  free(scratch);
  free(mask);
  free(out);
  return 0;
}

static int run_rle(char** argv) {
  size_t ms[CARVE_NPY_MAX_DIMS];
  float* m = load(argv[3], ms, 2);
  const size_t pixels = ms[0] * ms[1];
  uint8_t* mask = xmalloc(pixels);
  for (size_t p = 0; p < pixels; p++) {
    mask[p] = m[p] != 0.0f;
  }
  const int w = (int)ms[1], h = (int)ms[0];
  const size_t need = carve_rle_encode(mask, w, h, NULL, 0);
  uint32_t* counts = xmalloc(need * sizeof(uint32_t));
  if (carve_rle_encode(mask, w, h, counts, need) != need) {
    fprintf(stderr, "mask_tool: rle size changed\n");
    return 1;
  }
  float* out = xmalloc(need * sizeof(float));
  for (size_t i = 0; i < need; i++) {
    out[i] = (float)counts[i];
  }
  save(argv[2], out, &need, 1);
  free(m);
  free(mask);
  free(counts);
  free(out);
  return 0;
}

static int run_rle_string(char** argv) {
  size_t ms[CARVE_NPY_MAX_DIMS];
  float* m = load(argv[3], ms, 2);
  const size_t pixels = ms[0] * ms[1];
  uint8_t* mask = xmalloc(pixels);
  for (size_t p = 0; p < pixels; p++) {
    mask[p] = m[p] != 0.0f;
  }
  const int w = (int)ms[1], h = (int)ms[0];
  const size_t need = carve_rle_encode(mask, w, h, NULL, 0);
  uint32_t* counts = xmalloc(need * sizeof(uint32_t));
  carve_rle_encode(mask, w, h, counts, need);
  const size_t len = carve_rle_string(counts, need, NULL, 0);
  char* text = xmalloc(len + 1);
  FILE* f = fopen(argv[2], "wb");
  if (carve_rle_string(counts, need, text, len + 1) != len || strlen(text) != len || f == NULL ||
      fwrite(text, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "mask_tool: cannot write %s\n", argv[2]);
    return 1;
  }
  free(m);
  free(mask);
  free(counts);
  free(text);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 6 && strcmp(argv[1], "logits") == 0) {
    return run_logits(argv);
  }
  if (argc == 7 && strcmp(argv[1], "native") == 0) {
    return run_native(argv);
  }
  if (argc == 4 && strcmp(argv[1], "rle") == 0) {
    return run_rle(argv);
  }
  if (argc == 4 && strcmp(argv[1], "rlestr") == 0) {
    return run_rle_string(argv);
  }
  fprintf(stderr, "usage: mask_tool logits|native|rle|rlestr ... (see mask_tool.c)\n");
  return 2;
}
