// Helper for draw_vs_ultralytics.py: the task drawing helpers on .npy inputs.
// Images are (h, w, 3) arrays of 0..255 values; each command writes the image.
//
//   draw_tool mask OUT.npy IMAGE.npy MASK.npy R G B ALPHA    carve_draw_mask ((h, w) mask)
//   draw_tool kpts OUT.npy IMAGE.npy KPTS.npy MIN_VIS        carve_draw_keypoints per (nk, 3) row
//                                                            of an (n, nk, 3) array
//   draw_tool rbox OUT.npy IMAGE.npy ROWS.npy R G B THICK    carve_draw_rotated_box per
//                                                            (cx, cy, w, h, angle) row

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carve_io.h"

static float* load(const char* path, size_t shape[CARVE_NPY_MAX_DIMS], int want_ndim) {
  float* data = NULL;
  int ndim = 0;
  const carve_status s = carve_npy_read_f32(path, &data, shape, &ndim);
  if (s != CARVE_OK || ndim != want_ndim) {
    fprintf(stderr, "draw_tool: %s: %s\n", path, s != CARVE_OK ? carve_status_str(s) : "bad ndim");
    exit(1);
  }
  return data;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: draw_tool mask|kpts|rbox OUT.npy IMAGE.npy ... (see draw_tool.c)\n");
    return 2;
  }
  size_t is[CARVE_NPY_MAX_DIMS];
  float* image = load(argv[3], is, 3);
  const int h = (int)is[0], w = (int)is[1];
  const size_t pixels = is[0] * is[1];
  uint8_t* rgb = malloc(pixels * 3 + 1);
  if (rgb == NULL) {
    return 1;
  }
  for (size_t i = 0; i < pixels * 3; i++) {
    rgb[i] = (uint8_t)image[i];
  }
  size_t ds[CARVE_NPY_MAX_DIMS];
  if (argc == 9 && strcmp(argv[1], "mask") == 0) {
    float* m = load(argv[4], ds, 2);
    uint8_t* mask = malloc(pixels + 1);
    if (mask == NULL) {
      return 1;
    }
    for (size_t p = 0; p < pixels; p++) {
      mask[p] = m[p] != 0.0f;
    }
    const uint8_t color[3] = {(uint8_t)atoi(argv[5]), (uint8_t)atoi(argv[6]),
                              (uint8_t)atoi(argv[7])};
    carve_draw_mask(rgb, w, h, mask, color, strtof(argv[8], NULL));
    free(m);
    free(mask);
  } else if (argc == 6 && strcmp(argv[1], "kpts") == 0) {
    float* k = load(argv[4], ds, 3);
    for (size_t i = 0; i < ds[0]; i++) {
      carve_draw_keypoints(rgb, w, h, k + i * ds[1] * 3, ds[1], strtof(argv[5], NULL));
    }
    free(k);
  } else if (argc == 9 && strcmp(argv[1], "rbox") == 0) {
    float* r = load(argv[4], ds, 2);
    const uint8_t color[3] = {(uint8_t)atoi(argv[5]), (uint8_t)atoi(argv[6]),
                              (uint8_t)atoi(argv[7])};
    for (size_t i = 0; i < ds[0]; i++) {
      const float* b = r + i * ds[1];
      carve_draw_rotated_box(rgb, w, h, b[0], b[1], b[2], b[3], b[4], color, atoi(argv[8]));
    }
    free(r);
  } else {
    fprintf(stderr, "draw_tool: bad command\n");
    return 2;
  }
  for (size_t i = 0; i < pixels * 3; i++) {
    image[i] = (float)rgb[i];
  }
  const carve_status s = carve_npy_write_f32(argv[2], image, is, 3);
  free(image);
  free(rgb);
  return s == CARVE_OK ? 0 : 1;
}
