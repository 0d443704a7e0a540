// create_with never calls the allocator: a yolo26n package (--weights-format file --weights-dtype f16,
// so create_with gets the file bytes and a buffer for the widened weights) linked with
// -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign,--wrap=free,
// which routes every allocator call of the package's objects (generated code and carve runtime) and of
// this file through the counters below. XNNPACK is a shared library that --wrap does not reach: its
// allocations go through carve's allocator into the xnn_heap buffer given here, which
// tests/firmware/xnn_heap.c proves for the whole process (malloc interposed) on five task variants.
//
//   no_malloc WEIGHTS_FILE
//
// Checks, each printed: create allocates (the counters see it, so a zero below means something); the
// runs of a create context allocate nothing; create_with + runs + destroy allocate and free nothing and
// give bit-identical rows to create; every bad buffer set is refused with CARVE_ERR_INVALID_ARGUMENT,
// also without allocating.

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carve_weights.h"
#include "yolo26n.h"

// ---- Allocator counters (--wrap): g_allocs, g_frees ---------------------------

#include "wrap_count.h"

// ---- Checks ------------------------------------------------------------------

static int g_failed;

#define EXPECT(cond, what)                                             \
  do {                                                                 \
    const int ok_ = (cond);                                            \
    printf("%s  %s\n", ok_ ? "ok  " : "FAIL", what);                   \
    if (!ok_) {                                                        \
      g_failed = 1;                                                    \
    }                                                                  \
  } while (0)

static void reset(void) { g_allocs = g_frees = 0; }

// Runs twice on a fixed input; copies the rows of the second run to rows (YOLO26N_MAX_DETECTIONS * ROW_LEN floats).
static carve_status run_twice(yolo26n* m, const float* x, float* rows, size_t* n) {
  size_t num = 0;
  for (int i = 0; i < 2; i++) {
    carve_status s = yolo26n_run_tensor(m, x, 0.25f, NULL, 0, &num);
    if (s != CARVE_OK) {
      return s;
    }
  }
  const float* r = yolo26n_rows(m, n);
  memcpy(rows, r, *n * YOLO26N_ROW_LEN * sizeof(float));
  return CARVE_OK;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: no_malloc WEIGHTS_FILE\n");
    return 2;
  }
  // Setup (allocations not counted): the input, the weights file's bytes, the caller's buffers.
  const size_t n_in = (size_t)3 * YOLO26N_INPUT_H * YOLO26N_INPUT_W;
  float* x = malloc(n_in * sizeof(float));
  for (size_t i = 0; i < n_in; i++) {
    x[i] = (float)((i * 2654435761u) % 1000u) / 1000.0f;  // a fixed, busy pattern in [0, 1)
  }
  void* file = NULL;
  size_t file_bytes = 0;
  if (carve_weights_read_file(argv[1], &file, &file_bytes) != CARVE_OK) {
    fprintf(stderr, "no_malloc: cannot read %s\n", argv[1]);
    return 2;
  }
  const size_t sizes[5] = {YOLO26N_CONTEXT_BYTES, YOLO26N_ARENA_BYTES, YOLO26N_SCRATCH_BYTES, YOLO26N_WIDE_WEIGHT_BYTES,
                           YOLO26N_XNN_HEAP_BYTES};
  void* buf[5];
  for (int i = 0; i < 5; i++) {
    buf[i] = aligned_alloc(64, (sizes[i] + 127) / 64 * 64);  // 64 more, for the misaligned case
  }
  float* rows_a = malloc(sizeof(float) * YOLO26N_MAX_DETECTIONS * YOLO26N_ROW_LEN);
  float* rows_b = malloc(sizeof(float) * YOLO26N_MAX_DETECTIONS * YOLO26N_ROW_LEN);
  size_t na = 0, nb = 0;
  char what[160];

  // 1. create allocates (and the counter sees it); its runs do not.
  yolo26n_options opt;
  yolo26n_default_options(&opt);
  opt.weights_path = argv[1];
  yolo26n* m = NULL;
  reset();
  carve_status s = yolo26n_create(&opt, &m);
  snprintf(what, sizeof what, "create: %s, %zu allocator calls by carve (context, arena, scratch, file, widened, XNNPACK's)",
           carve_status_str(s), g_allocs);
  EXPECT(s == CARVE_OK && g_allocs >= 5, what);
  reset();
  s = m != NULL ? run_twice(m, x, rows_a, &na) : CARVE_ERR_INVALID_ARGUMENT;
  snprintf(what, sizeof what, "create's runs: %s, %zu rows, %zu allocator calls", carve_status_str(s), na, g_allocs);
  EXPECT(s == CARVE_OK && na > 0 && g_allocs == 0, what);
  yolo26n_destroy(m);

  // 2. create_with: nothing allocated or freed from create to destroy; the same rows.
  opt.weights_path = NULL;
  opt.weights_data = file;
  opt.weights_size = file_bytes;
  yolo26n_buffers b = {buf[0], sizes[0], buf[1], sizes[1], buf[2], sizes[2], buf[3], sizes[3], buf[4], sizes[4]};
  reset();
  m = NULL;
  s = yolo26n_create_with(&opt, &b, &m);
  if (s == CARVE_OK) {
    s = run_twice(m, x, rows_b, &nb);
  }
  yolo26n_destroy(m);
  snprintf(what, sizeof what, "create_with + 2 runs + destroy: %s, %zu allocator calls, %zu frees", carve_status_str(s),
           g_allocs, g_frees);
  EXPECT(s == CARVE_OK && g_allocs == 0 && g_frees == 0, what);
  snprintf(what, sizeof what, "create_with's rows equal create's (%zu rows, bit for bit)", nb);
  EXPECT(na == nb && memcmp(rows_a, rows_b, na * YOLO26N_ROW_LEN * sizeof(float)) == 0, what);

  // 3. bad buffers: refused, nothing allocated.
  struct {
    const char* what;
    yolo26n_buffers b;
    int threads;
    int by_path;
  } bad[] = {
      {"NULL arena", {buf[0], sizes[0], NULL, sizes[1], buf[2], sizes[2], buf[3], sizes[3], buf[4], sizes[4]}, 1, 0},
      {"misaligned arena", {buf[0], sizes[0], (char*)buf[1] + 16, sizes[1], buf[2], sizes[2], buf[3], sizes[3], buf[4], sizes[4]}, 1, 0},
      {"arena 64 bytes short", {buf[0], sizes[0], buf[1], sizes[1] - 64, buf[2], sizes[2], buf[3], sizes[3], buf[4], sizes[4]}, 1, 0},
      {"scratch 64 bytes short", {buf[0], sizes[0], buf[1], sizes[1], buf[2], sizes[2] - 64, buf[3], sizes[3], buf[4], sizes[4]}, 1, 0},
      {"context too small", {buf[0], 16, buf[1], sizes[1], buf[2], sizes[2], buf[3], sizes[3], buf[4], sizes[4]}, 1, 0},
      {"no buffer for the widened weights", {buf[0], sizes[0], buf[1], sizes[1], buf[2], sizes[2], NULL, 0, buf[4], sizes[4]}, 1, 0},
      {"no xnn_heap", {buf[0], sizes[0], buf[1], sizes[1], buf[2], sizes[2], buf[3], sizes[3], NULL, 0}, 1, 0},
      {"threads 2 (a pool allocates)", {buf[0], sizes[0], buf[1], sizes[1], buf[2], sizes[2], buf[3], sizes[3], buf[4], sizes[4]}, 2, 0},
      {"weights by path (reading allocates)", {buf[0], sizes[0], buf[1], sizes[1], buf[2], sizes[2], buf[3], sizes[3], buf[4], sizes[4]}, 1, 1},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    yolo26n_options o = opt;
    o.threads = bad[i].threads;
    if (bad[i].by_path) {
      o.weights_data = NULL;
      o.weights_size = 0;
      o.weights_path = argv[1];
    }
    reset();
    m = (yolo26n*)1;
    s = yolo26n_create_with(&o, &bad[i].b, &m);
    snprintf(what, sizeof what, "%s: %s, %zu allocator calls", bad[i].what, carve_status_str(s), g_allocs);
    EXPECT(s == CARVE_ERR_INVALID_ARGUMENT && m == NULL && g_allocs == 0, what);
  }

  for (int i = 0; i < 5; i++) {
    free(buf[i]);
  }
  free(file);
  free(rows_a);
  free(rows_b);
  free(x);
  printf("no_malloc: %s\n", g_failed ? "FAIL" : "PASS");
  return g_failed;
}
