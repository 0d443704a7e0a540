// The accuracy gate of issue 20 on a GPU (tools/gpu_carry/prepare_eval.sh): one create, then every image of a list
// through run_image, the detections of all of them as one COCO results file. What bench/cuda_f16_eval.py collects
// from the demo image by image (a process, a create and its timed tactics per image), in one process per
// configuration.
//
//   eval_main LIST OUT.json [--strict-fp32] [--no-tune] [--conf X]
//
// LIST: one "image_id path" per line. Built against a detect package whose name is MODEL and header MODEL_HEADER
// (-DMODEL=yolo26n_shapes -DMODEL_HEADER='"yolo26n_shapes.h"'); category_id is the class index + 1 (the demo
// model's rule, bench/eval.py). --strict-fp32: options.tf32 = 0; --no-tune: options.conv_tune = 0; --conf: the
// score floor (default 0.001, bench/eval.py's CONF).

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "carve_io.h"
#include MODEL_HEADER

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define M(x) CAT(MODEL, x)

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s LIST OUT.json [--strict-fp32] [--no-tune] [--conf X]\n", argv[0]);
    return 2;
  }
  M(_options) opt;
  M(_default_options)(&opt);
  float conf = 0.001f;
  for (int i = 3; i < argc; i++) {
    if (!std::strcmp(argv[i], "--strict-fp32")) {
      opt.tf32 = 0;
    } else if (!std::strcmp(argv[i], "--no-tune")) {
      opt.conv_tune = 0;
    } else if (!std::strcmp(argv[i], "--conf") && i + 1 < argc) {
      conf = (float)std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "eval_main: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  FILE* list = std::fopen(argv[1], "r");
  if (list == nullptr) {
    std::fprintf(stderr, "eval_main: %s: cannot read it\n", argv[1]);
    return 1;
  }
  MODEL* m = nullptr;
  carve_status s = M(_create)(&opt, &m);
  if (s != CARVE_OK) {
    std::fprintf(stderr, "eval_main: create: %s\n", carve_status_str(s));
    std::fclose(list);
    return 1;
  }
  carve_coco_writer* w = nullptr;
  s = carve_coco_open(argv[2], &w);
  std::vector<M(_detection)> dets(1024);  // at least the package's MAX_DETECTIONS (300 for YOLO26)
  long long image_id = 0;
  char path[4096];
  size_t images = 0, total = 0;
  while (s == CARVE_OK && std::fscanf(list, "%lld %4095s", &image_id, path) == 2) {
    uint8_t* rgb = nullptr;
    int width = 0, height = 0;
    char why[256];
    s = carve_image_load_rgb_msg(path, &rgb, &width, &height, why, sizeof why);
    if (s != CARVE_OK) {
      std::fprintf(stderr, "eval_main: %s: %s\n", path, why);
      break;
    }
    size_t n = 0;
    s = M(_run_image)(m, rgb, width, height, (size_t)width * 3, conf, dets.data(), dets.size(), &n);
    carve_image_free(rgb);
    for (size_t i = 0; i < n && s == CARVE_OK; i++) {
      carve_coco_result r;
      std::memset(&r, 0, sizeof(r));
      r.image_id = image_id;
      r.category_id = dets[i].class_id + 1;
      r.score = dets[i].score;
      const float bbox[4] = {dets[i].x1, dets[i].y1, dets[i].x2 - dets[i].x1, dets[i].y2 - dets[i].y1};
      r.bbox = bbox;
      s = carve_coco_add(w, &r);
    }
    images++;
    total += n;
  }
  std::fclose(list);
  M(_destroy)(m);
  if (s != CARVE_OK) {
    std::fprintf(stderr, "eval_main: %s after %zu images\n", carve_status_str(s), images);
    if (w != nullptr) carve_coco_abort(w);
    return 1;
  }
  s = carve_coco_close(w);
  if (s != CARVE_OK) {
    std::fprintf(stderr, "eval_main: %s: %s\n", argv[2], carve_status_str(s));
    return 1;
  }
  std::printf("{\"images\": %zu, \"detections\": %zu, \"tf32\": %d, \"conv_tune\": %d}\n", images, total, opt.tf32,
              opt.conv_tune);
  return 0;
}
