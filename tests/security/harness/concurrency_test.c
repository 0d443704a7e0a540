// Two contexts of the same model, run at the same time on two threads, give bit-identical rows to
// the same runs done serially on one context (docs/api.md: one context per thread, no global
// state). Each thread runs a different sequence of images, so the contexts are at different layers
// at any moment. Checked with 1 and 2 worker threads per context.
//
//   concurrency_test [ROUNDS]   exit 0 when every concurrent row equals its serial twin bit for bit
//                               (ROUNDS: passes over the images per thread, 1..3, default 3)

#include <pthread.h>
#include <string.h>

#include "mut.h"

#define IMAGES 6
#define MAX_ROUNDS 3
#define ROW_FLOATS (MUT_MAX_DETS * MUT_ROW_LEN)

static const struct { int w, h; } k_sizes[IMAGES] = {
    {MUT_W, MUT_H}, {1, 1}, {333, 17}, {17, 333}, {MUT_W * 3, MUT_H}, {100, 101},
};

typedef struct {
  float rows[ROW_FLOATS];
  size_t n;
} result;

static uint8_t* g_images[IMAGES];
static result g_serial[IMAGES];

static void run_one(mut_model* m, int i, result* out) {
  size_t n = 0;
  const int w = k_sizes[i].w, h = k_sizes[i].h;
  CHECK_STATUS(MUT(_run_image)(m, g_images[i], w, h, (size_t)w * 3, 0.25f, NULL, 0, &n), CARVE_OK);
  const float* r = MUT(_rows)(m, &out->n);
  CHECK(r != NULL && out->n <= MUT_MAX_DETS);
  memset(out->rows, 0, sizeof(out->rows));
  memcpy(out->rows, r, out->n * MUT_ROW_LEN * sizeof(float));
}

static int g_rounds = MAX_ROUNDS;

typedef struct {
  int threads;
  int order;  // 0: images 0..5, 1: 5..0
  result got[MAX_ROUNDS][IMAGES];
} worker;

static void* work(void* arg) {
  worker* wk = arg;
  mut_options o = {.threads = wk->threads};
  mut_model* m = NULL;
  CHECK_STATUS(MUT(_create)(&o, &m), CARVE_OK);
  for (int r = 0; r < g_rounds; r++) {
    for (int k = 0; k < IMAGES; k++) {
      const int i = wk->order ? IMAGES - 1 - k : k;
      run_one(m, i, &wk->got[r][i]);
    }
  }
  MUT(_destroy)(m);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1) {
    g_rounds = atoi(argv[1]);
    CHECK(g_rounds >= 1 && g_rounds <= MAX_ROUNDS);
  }
  for (int i = 0; i < IMAGES; i++) {
    g_images[i] = mut_image(k_sizes[i].w, k_sizes[i].h, (size_t)k_sizes[i].w * 3, 100 + i);
  }
  mut_model* m = NULL;
  CHECK_STATUS(MUT(_create)(NULL, &m), CARVE_OK);
  size_t total_rows = 0;
  for (int i = 0; i < IMAGES; i++) {
    run_one(m, i, &g_serial[i]);
    total_rows += g_serial[i].n;
  }
  MUT(_destroy)(m);
  CHECK(total_rows > 0);  // there is something to compare

  static worker workers[2];
  for (int threads = 1; threads <= 2; threads++) {
    pthread_t t[2];
    for (int k = 0; k < 2; k++) {
      workers[k].threads = threads;
      workers[k].order = k;
      CHECK(pthread_create(&t[k], NULL, work, &workers[k]) == 0);
    }
    for (int k = 0; k < 2; k++) {
      CHECK(pthread_join(t[k], NULL) == 0);
    }
    for (int k = 0; k < 2; k++) {
      for (int r = 0; r < g_rounds; r++) {
        for (int i = 0; i < IMAGES; i++) {
          const result* a = &workers[k].got[r][i];
          CHECK(a->n == g_serial[i].n);
          CHECK(memcmp(a->rows, g_serial[i].rows, sizeof(a->rows)) == 0);
        }
      }
    }
    printf("concurrency_test: 2 contexts x %d worker thread(s), %d runs each: bit-identical to serial (%zu rows)\n",
           threads, g_rounds * IMAGES, total_rows);
  }
  for (int i = 0; i < IMAGES; i++) {
    free(g_images[i]);
  }
  return 0;
}
