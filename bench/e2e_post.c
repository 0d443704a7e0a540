// Experiment behind docs/performance.md's "end-to-end top-k on the thread pool": times
// carve_e2e_postprocess_task alone on a yolo26n-like 640 detect head (levels 80x80, 40x40, 20x20,
// nc = 80, k = 300: 8400 anchors, random logits around -7 as a trained head gives), serially and
// on a pool of each thread count named, and prints min / median of RUNS calls, a hash of the rows
// (the same for every thread count) and the median time of each phase (the two key loops and the
// two selections, run one by one through carve_post.c's static functions, which this file includes).
//
//   cc -std=c11 -O2 -Iruntime bench/e2e_post.c runtime/carve_rt.c -o /tmp/e2e_post -lpthreadpool -lm
//   /tmp/e2e_post RUNS THREADS...     # e.g. 500 1 2 3
//
// Not part of the package or the tests.
#define _POSIX_C_SOURCE 199309L
#include "../runtime/carve_post.c"  // the static phases, timed one by one below

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static uint64_t rng = 88172645463325252ull;
static float uniform(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) * 0x1.0p-53);
}
static float normal(void) {
  const float u = uniform() + 1e-7f, v = uniform();
  return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: e2e_post RUNS THREADS...\n");
    return 2;
  }
  const size_t runs = (size_t)atoi(argv[1]), nc = 80, k = 300, sizes[3] = {80, 40, 20};
  carve_level levels[3];
  size_t anchors = 0;
  for (size_t l = 0; l < 3; l++) {
    const size_t px = sizes[l] * sizes[l];
    float* box = malloc(px * 4 * sizeof(float));
    float* cls = malloc(px * nc * sizeof(float));
    if (box == NULL || cls == NULL) {
      return 1;
    }
    for (size_t i = 0; i < px * 4; i++) {
      box[i] = uniform() * 5.0f;
    }
    for (size_t i = 0; i < px * nc; i++) {
      cls[i] = normal() * 2.0f - 7.0f;
    }
    levels[l] = (carve_level){box, 4, cls, nc, NULL, 0, sizes[l], sizes[l], (float)(8u << l)};
    anchors += px;
  }
  uint64_t* scratch = malloc(carve_e2e_scratch_bytes(anchors, nc, k));
  float* rows = malloc(k * 6 * sizeof(float));
  double* t = malloc(runs * sizeof(double));
  if (scratch == NULL || rows == NULL || t == NULL || runs == 0) {
    return 1;
  }
  for (int a = 2; a < argc; a++) {
    const size_t threads = (size_t)atoi(argv[a]);
    pthreadpool_t pool = threads > 1 ? pthreadpool_create(threads) : NULL;
    size_t n = 0;
    for (size_t i = 0; i < 20; i++) {  // warm up caches and the pool
      carve_e2e_postprocess_task(levels, 3, nc, 0, k, CARVE_E2E_DETECT, scratch, rows, &n, pool);
    }
    for (size_t i = 0; i < runs; i++) {
      const double t0 = now_ms();
      carve_e2e_postprocess_task(levels, 3, nc, 0, k, CARVE_E2E_DETECT, scratch, rows, &n, pool);
      t[i] = now_ms() - t0;
    }
    qsort(t, runs, sizeof(double), cmp_double);
    uint32_t hash = 2166136261u;
    for (size_t i = 0; i < n * 6; i++) {
      uint32_t u;
      memcpy(&u, &rows[i], sizeof u);
      hash = (hash ^ u) * 16777619u;
    }
    printf("threads %zu: %zu rows, hash %08x, min %.4f ms, median %.4f ms of %zu calls\n", threads, n, hash,
           t[0], t[runs / 2], runs);
    // The phases, as the function runs them: median of `runs` each.
    e2e_keys_ctx ctx = {levels, 3, nc, scratch, (uint32_t*)(scratch + e2e_key_count(anchors, nc, k))};
    static const char* names[4] = {"anchor keys", "select", "rank keys", "select"};
    double* phase = malloc(4 * runs * sizeof(double));
    if (phase == NULL) {
      return 1;
    }
    for (size_t i = 0; i < runs; i++) {
      const double p0 = now_ms();
      carve_parallelize_1d_tile(pool, anchor_keys_task, &ctx, anchors, CARVE_E2E_ANCHORS_PER_TASK);
      const double p1 = now_ms();
      select_top_keys(scratch, anchors, k);
      for (size_t r = 0; r < k; r++) {
        ((uint32_t*)ctx.ori)[r] = (uint32_t)key_index(scratch[r]);
      }
      const double p2 = now_ms();
      carve_parallelize_1d_tile(pool, rank_keys_task, &ctx, k, CARVE_E2E_SCORES_PER_TASK / nc);
      const double p3 = now_ms();
      select_top_keys(scratch, k * nc, k);
      const double p4 = now_ms();
      phase[0 * runs + i] = p1 - p0;
      phase[1 * runs + i] = p2 - p1;
      phase[2 * runs + i] = p3 - p2;
      phase[3 * runs + i] = p4 - p3;
    }
    printf("  median phases:");
    for (size_t j = 0; j < 4; j++) {
      qsort(phase + j * runs, runs, sizeof(double), cmp_double);
      printf(" %s %.4f ms%s", names[j], phase[j * runs + runs / 2], j < 3 ? "," : "\n");
    }
    free(phase);
    if (pool != NULL) {
      pthreadpool_destroy(pool);
    }
  }
  return 0;
}
