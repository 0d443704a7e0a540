// create_with never calls the allocator. The package under test, named by no_malloc.py at build time:
//   -DNM=yolo26n -DNM_UPPER=YOLO26N -DNM_HEADER="yolo26n.h"   its C prefix (NM(_create) is yolo26n_create)
//   -DNM_XNN_HEAP      an xnnpack package: XNNPACK's heap is one of create_with's buffers, and threads > 1 are
//                      refused (a thread pool allocates)
//   -DNM_WEIGHTS_FILE  --weights-format file: create reads the file by path, create_with gets its bytes
// no_malloc.py builds it for yolo26n (xnnpack, --weights-format file --weights-dtype f16: create_with also gets a
// buffer for the widened weights) and for the int8 demo model (portable, --precision int8, weights linked), each
// linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign,--wrap=free,
// which routes every allocator call of the package's objects (generated code and carve runtime) and of this file
// through the counters below. XNNPACK is a shared library that --wrap does not reach: its allocations go through
// carve's allocator into the xnn_heap buffer given here, which tests/firmware/xnn_heap.c proves for the whole
// process (malloc interposed) on five task variants.
//
//   no_malloc [WEIGHTS_FILE]     (the file with NM_WEIGHTS_FILE only)
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
#include NM_HEADER

#define NM_CAT_(a, b) a##b
#define NM_CAT(a, b) NM_CAT_(a, b)
#define F(suffix) NM_CAT(NM, suffix)        // F(_create): <prefix>_create
#define C(suffix) NM_CAT(NM_UPPER, suffix)  // C(_ARENA_BYTES): <PREFIX>_ARENA_BYTES

typedef F(_options) nm_options;
typedef F(_buffers) nm_buffers;
typedef struct NM nm_model;

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

// Runs twice on a fixed input; copies the rows of the second run to rows (MAX_DETECTIONS * ROW_LEN floats).
static carve_status run_twice(nm_model* m, const float* x, float* rows, size_t* n) {
  size_t num = 0;
  for (int i = 0; i < 2; i++) {
    carve_status s = F(_run_tensor)(m, x, 0.25f, NULL, 0, &num);
    if (s != CARVE_OK) {
      return s;
    }
  }
  const float* r = F(_rows)(m, n);
  memcpy(rows, r, *n * C(_ROW_LEN) * sizeof(float));
  return CARVE_OK;
}

#ifdef NM_WEIGHTS_FILE
#define NM_CREATE_ALLOCS 5  // at least: context, arena, scratch, the file's bytes, the widened weights
#else
#define NM_CREATE_ALLOCS 3  // at least: context, arena, scratch
#endif

enum { NBUF = 5 };  // context, arena, scratch, widened weights, XNNPACK's heap (the last: xnnpack packages only)

static nm_buffers make_buffers(void* const* buf, const size_t* sizes) {
  nm_buffers b = {buf[0], sizes[0], buf[1], sizes[1], buf[2], sizes[2], buf[3], sizes[3],
#ifdef NM_XNN_HEAP
                  buf[4], sizes[4]
#endif
  };
  return b;
}

int main(int argc, char** argv) {
#ifdef NM_WEIGHTS_FILE
  if (argc != 2) {
    fprintf(stderr, "usage: no_malloc WEIGHTS_FILE\n");
    return 2;
  }
#else
  (void)argv;
  if (argc != 1) {
    fprintf(stderr, "usage: no_malloc (the weights are linked)\n");
    return 2;
  }
#endif
  // Setup (allocations not counted): the input, the weights file's bytes, the caller's buffers.
  const size_t n_in = (size_t)3 * C(_INPUT_H) * C(_INPUT_W);
  float* x = malloc(n_in * sizeof(float));
  for (size_t i = 0; i < n_in; i++) {
    x[i] = (float)((i * 2654435761u) % 1000u) / 1000.0f;  // a fixed, busy pattern in [0, 1)
  }
#ifdef NM_WEIGHTS_FILE
  void* file = NULL;
  size_t file_bytes = 0;
  if (carve_weights_read_file(argv[1], &file, &file_bytes) != CARVE_OK) {
    fprintf(stderr, "no_malloc: cannot read %s\n", argv[1]);
    return 2;
  }
#endif
  const size_t sizes[NBUF] = {C(_CONTEXT_BYTES), C(_ARENA_BYTES), C(_SCRATCH_BYTES), C(_WIDE_WEIGHT_BYTES),
#ifdef NM_XNN_HEAP
                              C(_XNN_HEAP_BYTES)
#else
                              0
#endif
  };
  void* buf[NBUF];
  for (int i = 0; i < NBUF; i++) {
    buf[i] = sizes[i] ? aligned_alloc(64, (sizes[i] + 127) / 64 * 64) : NULL;  // 64 more, for the misaligned case
  }
  float* rows_a = malloc(sizeof(float) * C(_MAX_DETECTIONS) * C(_ROW_LEN));
  float* rows_b = malloc(sizeof(float) * C(_MAX_DETECTIONS) * C(_ROW_LEN));
  size_t na = 0, nb = 0;
  char what[200];

  // 1. create allocates (and the counter sees it); its runs do not.
  nm_options opt;
  F(_default_options)(&opt);
#ifdef NM_WEIGHTS_FILE
  opt.weights_path = argv[1];
#endif
  nm_model* m = NULL;
  reset();
  carve_status s = F(_create)(&opt, &m);
  snprintf(what, sizeof what, "create: %s, %zu allocator calls by carve (context, arena, scratch%s)",
           carve_status_str(s), g_allocs,
#ifdef NM_WEIGHTS_FILE
           ", file, widened, XNNPACK's"
#else
           ""
#endif
  );
  EXPECT(s == CARVE_OK && g_allocs >= NM_CREATE_ALLOCS, what);
  reset();
  s = m != NULL ? run_twice(m, x, rows_a, &na) : CARVE_ERR_INVALID_ARGUMENT;
  snprintf(what, sizeof what, "create's runs: %s, %zu rows, %zu allocator calls", carve_status_str(s), na, g_allocs);
  EXPECT(s == CARVE_OK && na > 0 && g_allocs == 0, what);
  F(_destroy)(m);

  // 2. create_with: nothing allocated or freed from create to destroy; the same rows.
#ifdef NM_WEIGHTS_FILE
  opt.weights_path = NULL;
  opt.weights_data = file;
  opt.weights_size = file_bytes;
#endif
  const nm_buffers good = make_buffers(buf, sizes);
  reset();
  m = NULL;
  s = F(_create_with)(&opt, &good, &m);
  if (s == CARVE_OK) {
    s = run_twice(m, x, rows_b, &nb);
  }
  F(_destroy)(m);
  snprintf(what, sizeof what, "create_with + 2 runs + destroy: %s, %zu allocator calls, %zu frees", carve_status_str(s),
           g_allocs, g_frees);
  EXPECT(s == CARVE_OK && g_allocs == 0 && g_frees == 0, what);
  snprintf(what, sizeof what, "create_with's rows equal create's (%zu rows, bit for bit)", nb);
  EXPECT(na == nb && memcmp(rows_a, rows_b, na * C(_ROW_LEN) * sizeof(float)) == 0, what);

  // 3. bad buffers: refused, nothing allocated.
  enum { NULL_ARENA, MISALIGNED_ARENA, SHORT_ARENA, SHORT_SCRATCH, SMALL_CONTEXT, NO_WIDE, NO_HEAP, THREADS_2,
         BY_PATH, NCASES };
  static const char* const names[NCASES] = {
      "NULL arena", "misaligned arena", "arena 64 bytes short", "scratch 64 bytes short", "context too small",
      "no buffer for the widened weights", "no xnn_heap", "threads 2 (a pool allocates)",
      "weights by path (reading allocates)"};
  for (int i = 0; i < NCASES; i++) {
    nm_buffers b = good;
    nm_options o = opt;
    o.threads = 1;
    switch (i) {
      case NULL_ARENA: b.arena = NULL; break;
      case MISALIGNED_ARENA: b.arena = (char*)buf[1] + 16; break;
      case SHORT_ARENA: b.arena_bytes -= 64; break;
      case SHORT_SCRATCH: b.scratch_bytes -= 64; break;
      case SMALL_CONTEXT: b.context_bytes = 16; break;
      case NO_WIDE:
        if (C(_WIDE_WEIGHT_BYTES) == 0) {
          continue;  // no widened weights (f32 or int8 weights): NULL is fine
        }
        b.weights = NULL;
        b.weights_bytes = 0;
        break;
      case NO_HEAP:
#ifdef NM_XNN_HEAP
        b.xnn_heap = NULL;
        b.xnn_heap_bytes = 0;
        break;
#else
        continue;  // no XNNPACK
#endif
      case THREADS_2:
#ifdef NM_XNN_HEAP
        o.threads = 2;
        break;
#else
        continue;  // the portable package runs on the calling thread whatever threads says
#endif
      case BY_PATH:
#ifdef NM_WEIGHTS_FILE
        o.weights_data = NULL;
        o.weights_size = 0;
        o.weights_path = argv[1];
        break;
#else
        continue;  // linked weights
#endif
      default: break;
    }
    reset();
    m = (nm_model*)1;
    s = F(_create_with)(&o, &b, &m);
    snprintf(what, sizeof what, "%s: %s, %zu allocator calls", names[i], carve_status_str(s), g_allocs);
    EXPECT(s == CARVE_ERR_INVALID_ARGUMENT && m == NULL && g_allocs == 0, what);
  }

  for (int i = 0; i < NBUF; i++) {
    free(buf[i]);
  }
#ifdef NM_WEIGHTS_FILE
  free(file);
#endif
  free(rows_a);
  free(rows_b);
  free(x);
  printf("no_malloc: %s\n", g_failed ? "FAIL" : "PASS");
  return g_failed;
}
