// Helper for exif_vs_cv2.py: decodes images with carve_image_load_rgb_msg.
//
//   exif_tool IN PREFIX [IN PREFIX ...]
//
// For each image writes PREFIX.npy: the (h, w, 3) RGB pixels as float32 (the
// Exif orientation applied), or prints "IN: <status>: <message>" and exits 1.

#include <stdio.h>
#include <stdlib.h>

#include "carve_io.h"

int main(int argc, char** argv) {
  if (argc < 3 || (argc - 1) % 2 != 0) {
    fprintf(stderr, "usage: %s IN PREFIX [IN PREFIX ...]\n", argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; i += 2) {
    uint8_t* rgb = NULL;
    int w = 0, h = 0;
    char msg[256];
    carve_status s = carve_image_load_rgb_msg(argv[i], &rgb, &w, &h, msg, sizeof msg);
    if (s != CARVE_OK) {
      printf("%s: %s: %s\n", argv[i], carve_status_str(s), msg);
      return 1;
    }
    const size_t n = (size_t)w * (size_t)h * 3;
    float* f = malloc(n * sizeof(float));
    if (f == NULL) {
      carve_image_free(rgb);
      return 1;
    }
    for (size_t k = 0; k < n; k++) {
      f[k] = (float)rgb[k];
    }
    char path[4096];
    snprintf(path, sizeof path, "%s.npy", argv[i + 1]);
    const size_t shape[3] = {(size_t)h, (size_t)w, 3};
    s = carve_npy_write_f32(path, f, shape, 3);
    free(f);
    carve_image_free(rgb);
    if (s != CARVE_OK) {
      fprintf(stderr, "exif_tool: cannot write %s: %s\n", path, carve_status_str(s));
      return 1;
    }
  }
  return 0;
}
