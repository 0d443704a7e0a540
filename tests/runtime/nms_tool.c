// Helper for nms_vs_ultralytics.py: runs carve_nms_postprocess on one-to-many head
// outputs stored as .npy files.
//
//   nms_tool OUT.npy TASK EXTRA_CHANNELS CONF IOU AGNOSTIC MAX_DET BOX.npy CLS.npy EXTRA.npy STRIDE [...]
//
// TASK is detect, segment, pose or obb; one (h, w, 4) BOX (raw ltrb), (h, w, nc)
// CLS (logits), (h, w, EXTRA_CHANNELS) EXTRA ('-' when EXTRA_CHANNELS is 0) and
// stride per level, in order P3, P4, P5. Writes the (rows, 6 + extra) rows.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carve_io.h"
#include "carve_nms.h"

#define MAX_LEVELS 8

static float* load(const char* path, size_t shape[CARVE_NPY_MAX_DIMS], int want_ndim) {
  float* data = NULL;
  int ndim = 0;
  const carve_status s = carve_npy_read_f32(path, &data, shape, &ndim);
  if (s != CARVE_OK || ndim != want_ndim) {
    fprintf(stderr, "nms_tool: %s: %s\n", path, s != CARVE_OK ? carve_status_str(s) : "bad ndim");
    exit(1);
  }
  return data;
}

static int parse_task(const char* name, carve_e2e_task* task) {
  static const struct {
    const char* name;
    carve_e2e_task task;
  } names[] = {{"detect", CARVE_E2E_DETECT},
               {"segment", CARVE_E2E_SEGMENT},
               {"pose", CARVE_E2E_POSE},
               {"obb", CARVE_E2E_OBB}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (strcmp(name, names[i].name) == 0) {
      *task = names[i].task;
      return 1;
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  carve_e2e_task task;
  if (argc < 12 || (argc - 8) % 4 != 0 || (argc - 8) / 4 > MAX_LEVELS || !parse_task(argv[2], &task)) {
    fprintf(stderr, "usage: nms_tool OUT.npy TASK EXTRA CONF IOU AGNOSTIC MAX_DET BOX CLS EXTRA STRIDE [...]\n");
    return 2;
  }
  const size_t extra = (size_t)strtoul(argv[3], NULL, 10);
  const carve_nms_params params = {strtof(argv[4], NULL), strtod(argv[5], NULL), atoi(argv[6]),
                                   (size_t)strtoul(argv[7], NULL, 10)};
  const size_t num_levels = (size_t)(argc - 8) / 4;
  carve_level levels[MAX_LEVELS];
  float* owned[3 * MAX_LEVELS] = {0};
  size_t anchors = 0, nc = 0;
  for (size_t l = 0; l < num_levels; l++) {
    char** a = argv + 8 + 4 * l;
    size_t box_shape[CARVE_NPY_MAX_DIMS], cls_shape[CARVE_NPY_MAX_DIMS];
    size_t ext_shape[CARVE_NPY_MAX_DIMS] = {0};
    float* box = load(a[0], box_shape, 3);
    float* cls = load(a[1], cls_shape, 3);
    float* ext = NULL;
    if (extra != 0) {
      ext = load(a[2], ext_shape, 3);
      if (ext_shape[0] != box_shape[0] || ext_shape[1] != box_shape[1] || ext_shape[2] != extra) {
        fprintf(stderr, "nms_tool: level %zu: bad extra shape\n", l);
        return 1;
      }
    }
    if (box_shape[2] != 4 || cls_shape[0] != box_shape[0] || cls_shape[1] != box_shape[1] ||
        (l > 0 && cls_shape[2] != nc)) {
      fprintf(stderr, "nms_tool: level %zu: inconsistent shapes\n", l);
      return 1;
    }
    nc = cls_shape[2];
    levels[l] = (carve_level){box, 4, cls, nc, ext, extra, box_shape[0], box_shape[1], strtof(a[3], NULL)};
    owned[3 * l] = box;
    owned[3 * l + 1] = cls;
    owned[3 * l + 2] = ext;
    anchors += box_shape[0] * box_shape[1];
  }
  const size_t cap = params.max_det < anchors ? params.max_det : anchors;
  void* scratch = malloc(carve_nms_scratch_bytes(anchors) + 8);
  float* rows = malloc(cap * (6 + extra) * sizeof(float) + 1);
  if (scratch == NULL || rows == NULL) {
    fprintf(stderr, "nms_tool: out of memory\n");
    return 1;
  }
  size_t num_rows = 0;
  const carve_status s = carve_nms_postprocess(levels, num_levels, nc, extra, task, &params, scratch, rows,
                                               &num_rows, NULL);
  if (s != CARVE_OK) {
    fprintf(stderr, "nms_tool: carve_nms_postprocess: %s\n", carve_status_str(s));
    return 1;
  }
  const size_t shape[2] = {num_rows, 6 + extra};
  if (carve_npy_write_f32(argv[1], rows, shape, 2) != CARVE_OK) {
    fprintf(stderr, "nms_tool: cannot write %s\n", argv[1]);
    return 1;
  }
  for (size_t i = 0; i < 3 * num_levels; i++) {
    free(owned[i]);
  }
  free(scratch);
  free(rows);
  return 0;
}
