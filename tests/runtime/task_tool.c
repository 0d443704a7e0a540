// Helper for e2e_task_vs_ultralytics.py: runs the task-head post-processing
// and the coordinate mapping on .npy inputs.
//
//   task_tool e2e OUT.npy K TASK EXTRA_CHANNELS BOX.npy CLS.npy EXTRA.npy STRIDE [...]
//       carve_e2e_postprocess_task; TASK is detect, segment, pose or obb; one
//       (h, w, 4) BOX, (h, w, nc) CLS, (h, w, EXTRA_CHANNELS) EXTRA and stride per
//       level (EXTRA is '-' when EXTRA_CHANNELS is 0). Writes the (k', 6 + extra) rows.
//   task_tool scale OUT.npy IN.npy KIND SRC_W SRC_H IN_W IN_H
//       maps the (n, m) rows of IN.npy from an IN_W x IN_H letterbox of a
//       SRC_W x SRC_H image back to the image: KIND xyxy (carve_scale_boxes_xyxy),
//       xywhr (carve_scale_boxes_xywhr) or kpts (carve_scale_coords on the m / 3
//       (x, y, v) triples of each row). Writes the mapped rows.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carve_io.h"
#include "carve_post.h"
#include "carve_pre.h"

#define MAX_LEVELS 8

static float* load(const char* path, size_t shape[CARVE_NPY_MAX_DIMS], int want_ndim) {
  float* data = NULL;
  int ndim = 0;
  const carve_status s = carve_npy_read_f32(path, &data, shape, &ndim);
  if (s != CARVE_OK || ndim != want_ndim) {
    fprintf(stderr, "task_tool: %s: %s\n", path, s != CARVE_OK ? carve_status_str(s) : "bad ndim");
    exit(1);
  }
  return data;
}

static void save(const char* path, const float* data, size_t rows, size_t cols) {
  const size_t shape[2] = {rows, cols};
  const carve_status s = carve_npy_write_f32(path, data, shape, 2);
  if (s != CARVE_OK) {
    fprintf(stderr, "task_tool: %s: %s\n", path, carve_status_str(s));
    exit(1);
  }
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

static int run_e2e(int argc, char** argv) {
  // argv: e2e OUT K TASK EXTRA (BOX CLS EXTRA STRIDE)...
  carve_e2e_task task;
  if (argc < 10 || (argc - 6) % 4 != 0 || (argc - 6) / 4 > MAX_LEVELS ||
      !parse_task(argv[4], &task)) {
    fprintf(stderr, "usage: task_tool e2e OUT.npy K TASK EXTRA BOX CLS EXTRA STRIDE [...]\n");
    return 2;
  }
  const size_t k = (size_t)strtoul(argv[3], NULL, 10);
  const size_t extra = (size_t)strtoul(argv[5], NULL, 10);
  const size_t num_levels = (size_t)(argc - 6) / 4;
  carve_level levels[MAX_LEVELS];
  float* owned[3 * MAX_LEVELS] = {0};
  size_t anchors = 0, nc = 0;
  for (size_t l = 0; l < num_levels; l++) {
    char** a = argv + 6 + 4 * l;
    size_t box_shape[CARVE_NPY_MAX_DIMS], cls_shape[CARVE_NPY_MAX_DIMS];
    size_t ext_shape[CARVE_NPY_MAX_DIMS] = {0};
    float* box = load(a[0], box_shape, 3);
    float* cls = load(a[1], cls_shape, 3);
    float* ext = NULL;
    if (extra != 0) {
      ext = load(a[2], ext_shape, 3);
      if (ext_shape[0] != box_shape[0] || ext_shape[1] != box_shape[1] || ext_shape[2] != extra) {
        fprintf(stderr, "task_tool: level %zu: bad extra shape\n", l);
        return 1;
      }
    }
    if (box_shape[2] != 4 || cls_shape[0] != box_shape[0] || cls_shape[1] != box_shape[1] ||
        (l > 0 && cls_shape[2] != nc)) {
      fprintf(stderr, "task_tool: level %zu: inconsistent shapes\n", l);
      return 1;
    }
    nc = cls_shape[2];
    levels[l] = (carve_level){box, 4, cls, nc, ext, extra, box_shape[0], box_shape[1],
                              strtof(a[3], NULL)};
    owned[3 * l] = box;
    owned[3 * l + 1] = cls;
    owned[3 * l + 2] = ext;
    anchors += box_shape[0] * box_shape[1];
  }
  const size_t kk = k < anchors ? k : anchors;
  void* scratch = malloc(carve_e2e_scratch_bytes(anchors, nc, k));
  float* rows = malloc(kk * (6 + extra) * sizeof(float) + 1);
  if (scratch == NULL || rows == NULL) {
    fprintf(stderr, "task_tool: out of memory\n");
    return 1;
  }
  size_t num_rows = 0;
  carve_e2e_postprocess_task(levels, num_levels, nc, extra, k, task, scratch, rows, &num_rows, NULL);
  save(argv[2], rows, num_rows, 6 + extra);
  for (size_t i = 0; i < 3 * num_levels; i++) {
    free(owned[i]);
  }
  free(scratch);
  free(rows);
  return 0;
}

static int run_scale(int argc, char** argv) {
  if (argc != 9) {
    fprintf(stderr, "usage: task_tool scale OUT.npy IN.npy KIND SRC_W SRC_H IN_W IN_H\n");
    return 2;
  }
  size_t shape[CARVE_NPY_MAX_DIMS];
  float* rows = load(argv[3], shape, 2);
  const int src_w = atoi(argv[5]), src_h = atoi(argv[6]);
  const int in_w = atoi(argv[7]), in_h = atoi(argv[8]);

  // The geometry comes from a real letterbox of a blank image of that size.
  uint8_t* img = calloc((size_t)src_w * (size_t)src_h * 3, 1);
  float* out = malloc((size_t)in_w * (size_t)in_h * 3 * sizeof(float));
  void* scratch = malloc(carve_letterbox_scratch_bytes(in_w, in_h));
  carve_letterbox_info info;
  if (img == NULL || out == NULL || scratch == NULL ||
      carve_letterbox(img, src_w, src_h, (size_t)src_w * 3, in_w, in_h, out, scratch, &info, NULL) !=
          CARVE_OK) {
    fprintf(stderr, "task_tool: letterbox failed\n");
    return 1;
  }
  const size_t n = shape[0], m = shape[1];
  if (strcmp(argv[4], "xyxy") == 0) {
    carve_scale_boxes_xyxy(rows, n, m, &info);
  } else if (strcmp(argv[4], "xywhr") == 0) {
    carve_scale_boxes_xywhr(rows, n, m, &info);
  } else if (strcmp(argv[4], "kpts") == 0) {
    for (size_t i = 0; i < n; i++) {
      carve_scale_coords(rows + i * m, m / 3, 3, &info);
    }
  } else {
    fprintf(stderr, "task_tool: unknown kind %s\n", argv[4]);
    return 2;
  }
  save(argv[2], rows, n, m);
  free(img);
  free(out);
  free(scratch);
  free(rows);
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "e2e") == 0) {
    return run_e2e(argc, argv);
  }
  if (argc >= 2 && strcmp(argv[1], "scale") == 0) {
    return run_scale(argc, argv);
  }
  fprintf(stderr, "usage: task_tool e2e|scale ...\n");
  return 2;
}
