// Several carve models in one program (tests/multi/multi_model.py): yolo26n_shapes (detect) and yolo26n_cls
// (classify) run on one image; every detection and the top-5 are printed with their float bits (%a), so builds of
// the same models in different ways compare bit for bit. Each model runs twice, interleaved with the other; the
// second run must equal the first (the contexts do not disturb each other).
//
//   app IMAGE
//
// Built with -DAPP_ONLY_SHAPES or -DAPP_ONLY_CLS, it runs that model alone (the reference of each package alone).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carve_io.h"
#ifndef APP_ONLY_CLS
#include "yolo26n_shapes.h"
#endif
#ifndef APP_ONLY_SHAPES
#include "yolo26n_cls.h"
#endif

static int failed(const char* what, carve_status s) {
  fprintf(stderr, "app: %s: %s\n", what, carve_status_str(s));
  return 1;
}

#ifndef APP_ONLY_CLS
static int run_shapes(yolo26n_shapes* m, const uint8_t* rgb, int w, int h, yolo26n_shapes_detection* dets,
                      size_t* n) {
  carve_status s = yolo26n_shapes_run_image(m, rgb, w, h, (size_t)w * 3, YOLO26N_SHAPES_DEFAULT_CONF, dets,
                                            YOLO26N_SHAPES_MAX_DETECTIONS, n);
  return s == CARVE_OK ? 0 : failed("yolo26n_shapes_run_image", s);
}
#endif

#ifndef APP_ONLY_SHAPES
static int run_cls(yolo26n_cls* m, const uint8_t* rgb, int w, int h, yolo26n_cls_class* top) {
  size_t bytes = yolo26n_cls_image_scratch_bytes(w, h);
  void* scratch = malloc(bytes);
  if (scratch == NULL) return failed("malloc", CARVE_ERR_OUT_OF_MEMORY);
  carve_status s = yolo26n_cls_run_image(m, rgb, w, h, (size_t)w * 3, top, YOLO26N_CLS_TOPK, scratch, bytes);
  free(scratch);
  return s == CARVE_OK ? 0 : failed("yolo26n_cls_run_image", s);
}
#endif

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
    return 2;
  }
  uint8_t* rgb = NULL;
  int w = 0, h = 0;
  carve_status s = carve_image_load_rgb(argv[1], &rgb, &w, &h);
  if (s != CARVE_OK) return failed(argv[1], s);
  int bad = 0;
#ifndef APP_ONLY_CLS
  yolo26n_shapes* det = NULL;
  static yolo26n_shapes_detection dets[2][YOLO26N_SHAPES_MAX_DETECTIONS];
  size_t ndet[2] = {0, 0};
  s = yolo26n_shapes_create(NULL, &det);
  if (s != CARVE_OK) return failed("yolo26n_shapes_create", s);
#endif
#ifndef APP_ONLY_SHAPES
  yolo26n_cls* cls = NULL;
  yolo26n_cls_class top[2][YOLO26N_CLS_TOPK];
  s = yolo26n_cls_create(NULL, &cls);
  if (s != CARVE_OK) return failed("yolo26n_cls_create", s);
#endif
  for (int r = 0; r < 2 && !bad; r++) {
#ifndef APP_ONLY_CLS
    bad |= run_shapes(det, rgb, w, h, dets[r], &ndet[r]);
#endif
#ifndef APP_ONLY_SHAPES
    bad |= run_cls(cls, rgb, w, h, top[r]);
#endif
  }
#ifndef APP_ONLY_CLS
  if (!bad && (ndet[0] != ndet[1] || memcmp(dets[0], dets[1], ndet[0] * sizeof dets[0][0]) != 0)) {
    fprintf(stderr, "app: yolo26n_shapes: the second run differs from the first\n");
    bad = 1;
  }
  for (size_t i = 0; i < ndet[0]; i++) {
    const yolo26n_shapes_detection* d = &dets[0][i];
    printf("yolo26n_shapes detection %d %a %a %a %a %a\n", d->class_id, d->score, d->x1, d->y1, d->x2, d->y2);
  }
  yolo26n_shapes_destroy(det);
#endif
#ifndef APP_ONLY_SHAPES
  if (!bad && memcmp(top[0], top[1], sizeof top[0]) != 0) {
    fprintf(stderr, "app: yolo26n_cls: the second run differs from the first\n");
    bad = 1;
  }
  for (int i = 0; i < YOLO26N_CLS_TOPK; i++) printf("yolo26n_cls top5 %d %a\n", top[0][i].class_id, top[0][i].prob);
  yolo26n_cls_destroy(cls);
#endif
  carve_image_free(rgb);
  return bad;
}
