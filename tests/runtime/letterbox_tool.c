// Helper for letterbox_vs_cv2.py: letterboxes PNG files with carve_letterbox
// and maps a set of boxes back with carve_scale_boxes_xyxy.
//
//   letterbox_tool OUT_W OUT_H BOXES.npy IN.png PREFIX [IN.png PREFIX ...]
//
// For each image writes PREFIX.img.npy (OUT_H, OUT_W, 3) in the file's RGB
// order, PREFIX.info.npy [gain, pad_x, pad_y, new_w, new_h, gain_x, gain_y]
// and PREFIX.boxes.npy: BOXES (n, 4) in letterbox pixels mapped to the image.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carve_io.h"
#include "carve_pre.h"

static int fail(const char* what, const char* path, carve_status s) {
  fprintf(stderr, "letterbox_tool: %s %s: %s\n", what, path, carve_status_str(s));
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 6 || (argc - 4) % 2 != 0) {
    fprintf(stderr, "usage: %s OUT_W OUT_H BOXES.npy IN.png PREFIX [IN.png PREFIX ...]\n", argv[0]);
    return 2;
  }
  const int out_w = atoi(argv[1]), out_h = atoi(argv[2]);
  float* boxes = NULL;
  size_t box_shape[CARVE_NPY_MAX_DIMS];
  int box_ndim = 0;
  carve_status s = carve_npy_read_f32(argv[3], &boxes, box_shape, &box_ndim);
  if (s != CARVE_OK) {
    return fail("reading", argv[3], s);
  }
  if (box_ndim != 2 || box_shape[1] != 4) {
    fprintf(stderr, "letterbox_tool: %s: expected (n, 4)\n", argv[3]);
    return 1;
  }
  const size_t n_boxes = box_shape[0];

  const size_t out_floats = (size_t)out_w * (size_t)out_h * 3;
  float* out = malloc(out_floats * sizeof(float));
  void* scratch = malloc(carve_letterbox_scratch_bytes(out_w, out_h) + 1);
  float* mapped = malloc((n_boxes * 4 + 1) * sizeof(float));
  if (out == NULL || scratch == NULL || mapped == NULL) {
    fprintf(stderr, "letterbox_tool: out of memory\n");
    return 1;
  }
  for (int i = 4; i + 1 < argc; i += 2) {
    uint8_t* rgb = NULL;
    int w = 0, h = 0;
    s = carve_image_load_rgb(argv[i], &rgb, &w, &h);
    if (s != CARVE_OK) {
      return fail("loading", argv[i], s);
    }
    carve_letterbox_info info;
    s = carve_letterbox(rgb, w, h, (size_t)w * 3, out_w, out_h, out, scratch, &info, NULL);
    carve_image_free(rgb);
    if (s != CARVE_OK) {
      return fail("letterboxing", argv[i], s);
    }
    memcpy(mapped, boxes, n_boxes * 4 * sizeof(float));
    carve_scale_boxes_xyxy(mapped, n_boxes, 4, &info);

    char path[4096];
    const size_t img_shape[3] = {(size_t)out_h, (size_t)out_w, 3};
    const float info_row[7] = {info.gain,         info.pad_x,  info.pad_y, (float)info.new_w,
                               (float)info.new_h, info.gain_x, info.gain_y};
    const size_t info_shape[1] = {7};
    const size_t mapped_shape[2] = {n_boxes, 4};
    snprintf(path, sizeof path, "%s.img.npy", argv[i + 1]);
    if ((s = carve_npy_write_f32(path, out, img_shape, 3)) != CARVE_OK) {
      return fail("writing", path, s);
    }
    snprintf(path, sizeof path, "%s.info.npy", argv[i + 1]);
    if ((s = carve_npy_write_f32(path, info_row, info_shape, 1)) != CARVE_OK) {
      return fail("writing", path, s);
    }
    snprintf(path, sizeof path, "%s.boxes.npy", argv[i + 1]);
    if ((s = carve_npy_write_f32(path, mapped, mapped_shape, 2)) != CARVE_OK) {
      return fail("writing", path, s);
    }
  }
  free(out);
  free(scratch);
  free(mapped);
  free(boxes);
  return 0;
}
