// Helper for e2e_vs_ultralytics.py: runs carve_e2e_postprocess on head outputs
// stored as .npy files.
//
//   e2e_tool OUT.npy K BOX.npy CLS.npy STRIDE [BOX.npy CLS.npy STRIDE ...]
//
// BOX.npy is (h, w, 4) raw ltrb, CLS.npy (h, w, nc) logits, one triple per
// level in order P3, P4, P5. Writes the (k', 6) rows to OUT.npy.

#include <stdio.h>
#include <stdlib.h>

#include "carve_io.h"
#include "carve_post.h"

#define MAX_LEVELS 8

static float* load(const char* path, size_t shape[CARVE_NPY_MAX_DIMS], int want_ndim) {
  float* data = NULL;
  int ndim = 0;
  const carve_status s = carve_npy_read_f32(path, &data, shape, &ndim);
  if (s != CARVE_OK || ndim != want_ndim) {
    fprintf(stderr, "e2e_tool: %s: %s\n", path, s != CARVE_OK ? carve_status_str(s) : "bad ndim");
    exit(1);
  }
  return data;
}

int main(int argc, char** argv) {
  if (argc < 6 || (argc - 3) % 3 != 0 || (argc - 3) / 3 > MAX_LEVELS) {
    fprintf(stderr, "usage: %s OUT.npy K BOX.npy CLS.npy STRIDE [...]\n", argv[0]);
    return 2;
  }
  const size_t k = (size_t)strtoul(argv[2], NULL, 10);
  const size_t num_levels = (size_t)(argc - 3) / 3;
  carve_level levels[MAX_LEVELS];
  float* owned[2 * MAX_LEVELS];
  size_t anchors = 0, nc = 0;
  for (size_t l = 0; l < num_levels; l++) {
    size_t box_shape[CARVE_NPY_MAX_DIMS], cls_shape[CARVE_NPY_MAX_DIMS];
    float* box = load(argv[3 + 3 * l], box_shape, 3);
    float* cls = load(argv[4 + 3 * l], cls_shape, 3);
    if (box_shape[2] != 4 || cls_shape[0] != box_shape[0] || cls_shape[1] != box_shape[1] ||
        (l > 0 && cls_shape[2] != nc)) {
      fprintf(stderr, "e2e_tool: level %zu: inconsistent shapes\n", l);
      return 1;
    }
    nc = cls_shape[2];
    levels[l] = (carve_level){box, 4, cls, nc, NULL, 0, box_shape[0], box_shape[1],
                              strtof(argv[5 + 3 * l], NULL)};
    owned[2 * l] = box;
    owned[2 * l + 1] = cls;
    anchors += box_shape[0] * box_shape[1];
  }
  void* scratch = malloc(carve_e2e_scratch_bytes(anchors, nc, k));
  float* rows = malloc((k < anchors ? k : anchors) * 6 * sizeof(float) + 1);
  if (scratch == NULL || rows == NULL) {
    fprintf(stderr, "e2e_tool: out of memory\n");
    return 1;
  }
  size_t num_rows = 0;
  carve_e2e_postprocess(levels, num_levels, nc, 0, k, scratch, rows, &num_rows, NULL);
  const size_t shape[2] = {num_rows, 6};
  const carve_status s = carve_npy_write_f32(argv[1], rows, shape, 2);
  if (s != CARVE_OK) {
    fprintf(stderr, "e2e_tool: %s: %s\n", argv[1], carve_status_str(s));
    return 1;
  }
  for (size_t i = 0; i < 2 * num_levels; i++) {
    free(owned[i]);
  }
  free(scratch);
  free(rows);
  return 0;
}
