// carve side of the benchmark: one generated package behind the same line protocol as bench/peer.py.
//
//   carve_runner IMAGE THREADS [oversubscribe]   (built by bench/bench.py against a package's lib<name>.a and
//                                                 libcarve_runtime.a: -DCARVE_MODEL=yolo26n -DCARVE_HEADER='"yolo26n.h"')
// THREADS as options.threads (0: the CPUs this process may run on; more is clamped to those unless
// `oversubscribe` is given: options.allow_oversubscribe).
//
// Decodes IMAGE once (not timed), then creates the model (timed: init). Reads commands on stdin:
//   run K   runs K times; prints {"e2e_ms": [...], "net_ms": [...]}: run_image (letterbox + network + rows above
//           conf 0.25 mapped to image pixels) and the network alone (the sum of the per-layer times of that run)
//   quit    prints {"maxrss_kb": ...} (this process's peak resident set size, VmHWM: bench/peak_rss.h) and exits
// At start it prints {"init_ms": ..., "baseline_rss_kb": ..., "threads": T (those the model uses), "detections": N,
// "rows": [[x1,y1,x2,y2,score,cls],...]}
// (the first 5 detections of one run, for the agreement check between systems).

#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "carve_io.h"
#include "peak_rss.h"
#include CARVE_HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define F(suffix) CAT(CARVE_MODEL, suffix)

#define MAX_DETS 300

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "oversubscribe") != 0)) {
    fprintf(stderr, "usage: %s IMAGE THREADS [oversubscribe]\n", argv[0]);
    return 2;
  }
  const int threads = atoi(argv[2]);
  uint8_t* rgb = NULL;
  int width = 0, height = 0;
  if (carve_image_load_rgb(argv[1], &rgb, &width, &height) != CARVE_OK) {
    fprintf(stderr, "carve_runner: %s: cannot read the image\n", argv[1]);
    return 1;
  }
  static F(_detection) dets[MAX_DETS];
  const long baseline = peak_rss_kb();
  if (baseline < 0) {
    fprintf(stderr, "carve_runner: cannot read VmHWM from /proc/self/status (the peak RSS)\n");
    return 1;
  }

  const double t0 = now_ms();
  F(_options) opt;
  F(_default_options)(&opt);
  opt.threads = threads;
  opt.allow_oversubscribe = argc == 4;
  F()* model = NULL;
  carve_status s = F(_create)(&opt, &model);
  const double init_ms = now_ms() - t0;
  if (s != CARVE_OK) {
    fprintf(stderr, "carve_runner: create: %s\n", carve_status_str(s));
    return 1;
  }

  size_t n = 0;
  s = F(_run_image)(model, rgb, width, height, (size_t)width * 3, 0.25f, dets, MAX_DETS, &n);
  if (s != CARVE_OK) {
    fprintf(stderr, "carve_runner: run: %s\n", carve_status_str(s));
    return 1;
  }
  printf("{\"init_ms\": %.3f, \"baseline_rss_kb\": %ld, \"threads\": %d, \"detections\": %zu, \"rows\": [", init_ms,
         baseline, F(_threads)(model), n);
  for (size_t i = 0; i < n && i < 5; i++) {
    printf("%s[%.3f, %.3f, %.3f, %.3f, %.5f, %d]", i ? ", " : "", dets[i].x1, dets[i].y1, dets[i].x2, dets[i].y2,
           dets[i].score, dets[i].class_id);
  }
  printf("]}\n");
  fflush(stdout);

  // Timing buffers, sized before the loop: nothing is allocated while timing.
  enum { MAX_RUNS = 100000 };
  static double e2e[MAX_RUNS], net[MAX_RUNS];
  char line[64];
  while (fgets(line, sizeof line, stdin) != NULL) {
    int k = 0;
    if (sscanf(line, "run %d", &k) == 1 && k > 0 && k <= MAX_RUNS) {
      for (int r = 0; r < k && s == CARVE_OK; r++) {
        const double a = now_ms();
        s = F(_run_image)(model, rgb, width, height, (size_t)width * 3, 0.25f, dets, MAX_DETS, &n);
        e2e[r] = now_ms() - a;
        const double* layer_ms = F(_layer_ms)(model);
        net[r] = 0.0;
        for (int l = 0; l < CAT(CARVE_NAME, _NUM_LAYERS); l++) net[r] += layer_ms[l];
      }
      if (s != CARVE_OK) {
        fprintf(stderr, "carve_runner: run: %s\n", carve_status_str(s));
        return 1;
      }
      printf("{\"e2e_ms\": [");
      for (int r = 0; r < k; r++) printf("%s%.4f", r ? ", " : "", e2e[r]);
      printf("], \"net_ms\": [");
      for (int r = 0; r < k; r++) printf("%s%.4f", r ? ", " : "", net[r]);
      printf("]}\n");
      fflush(stdout);
    } else if (!strncmp(line, "quit", 4)) {
      break;
    } else {
      fprintf(stderr, "carve_runner: unknown command: %s", line);
      return 2;
    }
  }
  printf("{\"maxrss_kb\": %ld}\n", peak_rss_kb());
  F(_destroy)(model);
  carve_image_free(rgb);
  return 0;
}
