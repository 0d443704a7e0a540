// xnnpack create_with in caller-owned memory, XNNPACK included: one generated package (any task), named by
// xnn_heap_model.h, which tests/firmware/xnn_heap.py writes:
//
//   #include "<name>.h"
//   #define M(x) <name>##x      // M(_create_with) -> <name>_create_with
//   #define MU(x) <NAME>##x     // MU(_XNN_HEAP_BYTES) -> <NAME>_XNN_HEAP_BYTES
//   #define M_CLASSIFY 0 or 1
//
// This program counts every allocation of the process, libXNNPACK's and libcpuinfo's included, with the
// interposed allocator of tests/security/harness/alloc_count.h (-Wl,--wrap would miss the shared libraries).
//
//   xnn_heap_test             the checks below, each printed; exit 0 when all pass
//   xnn_heap_test --foreign   XNNPACK initialized first by "other code" (xnn_initialize(NULL)): create_with
//                             must refuse with CARVE_ERR_UNSUPPORTED, create must still work
//
// Checks: carve_xnn_init (XNNPACK's and cpuinfo's one-time set-up, allocations counted and printed, not
// limited) runs first; create allocates (positive control: the counter sees XNNPACK's allocations);
// create_with + 2 runs + destroy make 0 allocator calls and 0 frees and give bit-identical outputs to
// create's; XNNPACK's use of the heap is <= <NAME>_XNN_HEAP_BYTES (ratio printed); a heap of exactly
// that use works (ending < 64 bytes before a PROT_NONE page: no access past its end), one byte less gives CARVE_ERR_OUT_OF_MEMORY with 0 allocator calls (so nothing can
// leak); two create_with contexts live at once give the same outputs and are destroyed in reverse order;
// a NULL / misaligned / empty xnn_heap is refused with CARVE_ERR_INVALID_ARGUMENT.

#define _DEFAULT_SOURCE  // mmap's MAP_ANONYMOUS

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../security/harness/alloc_count.h"
#include "carve_xnn.h"
#include "xnn_heap_model.h"

// ---- Allocator (interposed, counted while counting is on): g_allocs, g_frees, count_on, count_off

// ---- Checks ------------------------------------------------------------------------

static int g_failed;

#define EXPECT(cond, ...)                             \
  do {                                                \
    const int ok_ = (cond);                           \
    printf("%s  ", ok_ ? "ok  " : "FAIL");            \
    printf(__VA_ARGS__);                              \
    printf("\n");                                     \
    if (!ok_) {                                       \
      g_failed = 1;                                   \
    }                                                 \
  } while (0)

#if M_CLASSIFY
#define OUT_FLOATS MU(_NUM_CLASSES)
#else
#define OUT_FLOATS (MU(_MAX_DETECTIONS) * MU(_ROW_LEN))
#endif

static float g_input[3 * MU(_INPUT_H) * MU(_INPUT_W)];

// Two runs on the fixed input; the second run's output (probabilities, or rows padded with 0) to out.
static carve_status run_twice(M()* m, float* out) {
  for (int i = 0; i < 2; i++) {
#if M_CLASSIFY
    M(_class) top[1];
    const carve_status s = M(_run_tensor)(m, g_input, top, 1);
#else
    size_t n = 0;
    const carve_status s = M(_run_tensor)(m, g_input, 0.25f, NULL, 0, &n);
#endif
    if (s != CARVE_OK) {
      return s;
    }
  }
  memset(out, 0, sizeof(float) * OUT_FLOATS);
#if M_CLASSIFY
  memcpy(out, M(_probs)(m), sizeof(float) * OUT_FLOATS);
#else
  size_t rows = 0;
  const float* r = M(_rows)(m, &rows);
  memcpy(out, r, sizeof(float) * rows * MU(_ROW_LEN));
#endif
  return CARVE_OK;
}

typedef struct {
  void* mem[4];  // context, arena, scratch, widened weights
  size_t bytes[4];
} caller_memory;

static M(_buffers) buffers_of(const caller_memory* cm, void* heap, size_t heap_bytes) {
  M(_buffers) b = {
      .context = cm->mem[0], .context_bytes = cm->bytes[0], .arena = cm->mem[1], .arena_bytes = cm->bytes[1],
      .scratch = cm->mem[2], .scratch_bytes = cm->bytes[2], .weights = cm->mem[3], .weights_bytes = cm->bytes[3],
      .xnn_heap = heap, .xnn_heap_bytes = heap_bytes,
  };
  return b;
}

static void caller_memory_init(caller_memory* cm) {
  const size_t sizes[4] = {MU(_CONTEXT_BYTES), MU(_ARENA_BYTES), MU(_SCRATCH_BYTES), MU(_WIDE_WEIGHT_BYTES)};
  for (int i = 0; i < 4; i++) {
    cm->bytes[i] = sizes[i];
    cm->mem[i] = sizes[i] ? aligned_alloc(64, (sizes[i] + 63) / 64 * 64) : NULL;
  }
}

static void caller_memory_free(caller_memory* cm) {
  for (int i = 0; i < 4; i++) {
    free(cm->mem[i]);
  }
}

static int foreign(void) {
  // "Other code" initializes XNNPACK first, with XNNPACK's default allocator.
  EXPECT(xnn_initialize(NULL) == xnn_status_success, "xnn_initialize(NULL) before carve");
  caller_memory cm;
  caller_memory_init(&cm);
  void* heap = aligned_alloc(64, MU(_XNN_HEAP_BYTES));
  const M(_buffers) b = buffers_of(&cm, heap, MU(_XNN_HEAP_BYTES));
  M()* m = (M()*)&cm;
  M(_options) opt;
  M(_default_options)(&opt);
  carve_status s = M(_create_with)(&opt, &b, &m);
  EXPECT(s == CARVE_ERR_UNSUPPORTED && m == NULL, "create_with after a foreign xnn_initialize: %s",
         carve_status_str(s));
  s = M(_create)(&opt, &m);
  EXPECT(s == CARVE_OK, "create after a foreign xnn_initialize: %s", carve_status_str(s));
  M(_destroy)(m);
  free(heap);
  caller_memory_free(&cm);
  printf("xnn_heap (foreign): %s\n", g_failed ? "FAIL" : "PASS");
  return g_failed;
}

int main(int argc, char** argv) {
  for (size_t i = 0; i < sizeof g_input / sizeof g_input[0]; i++) {
    g_input[i] = (float)((i * 2654435761u) % 1000u) / 1000.0f;  // a fixed, busy pattern in [0, 1)
  }
  if (argc == 2 && strcmp(argv[1], "--foreign") == 0) {
    return foreign();
  }
  static float ref[OUT_FLOATS], out[OUT_FLOATS], out2[OUT_FLOATS];
  caller_memory cm, cm2;
  caller_memory_init(&cm);
  caller_memory_init(&cm2);
  const size_t bound = MU(_XNN_HEAP_BYTES);
  unsigned char* heap = aligned_alloc(64, bound + 64);
  unsigned char* heap2 = aligned_alloc(64, bound);
  M(_options) opt;
  M(_default_options)(&opt);

  // 0. XNNPACK's one-time set-up (xnn_initialize, cpuinfo), before anything is counted.
  count_on();
  carve_status s = carve_xnn_init();
  count_off();
  EXPECT(s == CARVE_OK, "carve_xnn_init: %s; %ld allocator calls (XNNPACK + cpuinfo, once per process, not limited)",
         carve_status_str(s), (long)g_allocs);

  // 1. create (owned memory): XNNPACK allocates through carve's allocator, which the counter sees.
  M()* m = NULL;
  count_on();
  s = M(_create)(&opt, &m);
  count_off();
  const long create_allocs = g_allocs;
  EXPECT(s == CARVE_OK && create_allocs > 2, "create: %s, %ld allocator calls (positive control)",
         carve_status_str(s), create_allocs);
  if (s != CARVE_OK) {
    return 1;
  }
  s = run_twice(m, ref);
  EXPECT(s == CARVE_OK && M(_xnn_heap_used)(m) == 0, "create's runs: %s; xnn_heap_used %zu", carve_status_str(s),
         M(_xnn_heap_used)(m));
  M(_destroy)(m);

  // 2. create_with: nothing allocated or freed from create to destroy, the same outputs, the heap within the bound.
  M(_buffers) b = buffers_of(&cm, heap, bound);
  m = NULL;
  count_on();
  s = M(_create_with)(&opt, &b, &m);
  size_t used = 0;
  if (s == CARVE_OK) {
    used = M(_xnn_heap_used)(m);
    s = run_twice(m, out);
  }
  M(_destroy)(m);
  count_off();
  EXPECT(s == CARVE_OK && g_allocs == 0 && g_frees == 0,
         "create_with + 2 runs + destroy: %s, %ld allocator calls, %ld frees", carve_status_str(s), (long)g_allocs,
         (long)g_frees);
  EXPECT(s == CARVE_OK && memcmp(ref, out, sizeof ref) == 0, "create_with's outputs equal create's (bit for bit)");
  EXPECT(used > 0 && used <= bound, "XNNPACK used %zu bytes of the heap; bound %s_XNN_HEAP_BYTES %zu; ratio %.4f",
         used, M_NAME, bound, (double)used / (double)bound);

  // 3. A heap of exactly that use works, placed against an inaccessible page so that a read or write past
  // its end by XNNPACK (at create or in a run) would crash; one byte less runs out, cleanly.
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t tight = (used + 63) / 64 * 64;  // the base stays 64-byte aligned: < 64 bytes of slack at the end
  const size_t mapped = (tight + page - 1) / page * page + page;
  unsigned char* region = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (region == MAP_FAILED || mprotect(region + mapped - page, page, PROT_NONE) != 0) {
    printf("FAIL  mmap / mprotect for the guarded heap\n");
    return 1;
  }
  unsigned char* guarded = region + mapped - page - tight;
  b = buffers_of(&cm, guarded, used);
  m = NULL;
  count_on();
  s = M(_create_with)(&opt, &b, &m);
  if (s == CARVE_OK) {
    s = run_twice(m, out);
  }
  M(_destroy)(m);
  count_off();
  EXPECT(s == CARVE_OK && g_allocs == 0 && memcmp(ref, out, sizeof ref) == 0,
         "heap of exactly %zu bytes, %zu before an inaccessible page: %s, %ld allocator calls, same outputs", used,
         tight, carve_status_str(s), (long)g_allocs);
  munmap(region, mapped);
  const size_t short_sizes[2] = {used - 1, used / 2};
  for (int i = 0; i < 2; i++) {
    b = buffers_of(&cm, heap, short_sizes[i]);
    m = (M()*)&cm;
    count_on();
    s = M(_create_with)(&opt, &b, &m);
    count_off();
    EXPECT(s == CARVE_ERR_OUT_OF_MEMORY && m == NULL && g_allocs == 0 && g_frees == 0,
           "heap of %zu bytes: %s, %ld allocator calls, %ld frees (nothing to leak)", short_sizes[i],
           carve_status_str(s), (long)g_allocs, (long)g_frees);
  }

  // 4. Two contexts at once, each in its own memory; destroyed in reverse order of creation.
  M()* a = NULL;
  M()* c = NULL;
  const M(_buffers) ba = buffers_of(&cm, heap, bound);
  const M(_buffers) bc = buffers_of(&cm2, heap2, bound);
  count_on();
  s = M(_create_with)(&opt, &ba, &a);
  const carve_status s2 = s == CARVE_OK ? M(_create_with)(&opt, &bc, &c) : s;
  carve_status r1 = CARVE_ERR_INVALID_ARGUMENT, r2 = CARVE_ERR_INVALID_ARGUMENT;
  if (s2 == CARVE_OK) {
    r2 = run_twice(c, out2);
    r1 = run_twice(a, out);
  }
  M(_destroy)(c);
  M(_destroy)(a);
  count_off();
  EXPECT(s == CARVE_OK && s2 == CARVE_OK && r1 == CARVE_OK && r2 == CARVE_OK && g_allocs == 0 && g_frees == 0,
         "two create_with contexts, runs interleaved, destroyed in reverse order: %s / %s, %ld allocator calls, "
         "%ld frees",
         carve_status_str(s), carve_status_str(s2), (long)g_allocs, (long)g_frees);
  EXPECT(memcmp(ref, out, sizeof ref) == 0 && memcmp(ref, out2, sizeof ref) == 0,
         "both contexts' outputs equal create's");

  // 5. Bad heaps: refused before anything is created.
  struct {
    const char* what;
    void* heap;
    size_t bytes;
  } bad[] = {{"NULL xnn_heap", NULL, bound}, {"misaligned xnn_heap", heap + 16, bound}, {"empty xnn_heap", heap, 0}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    b = buffers_of(&cm, bad[i].heap, bad[i].bytes);
    m = (M()*)&cm;
    count_on();
    s = M(_create_with)(&opt, &b, &m);
    count_off();
    EXPECT(s == CARVE_ERR_INVALID_ARGUMENT && m == NULL && g_allocs == 0, "%s: %s, %ld allocator calls",
           bad[i].what, carve_status_str(s), (long)g_allocs);
  }

  free(heap);
  free(heap2);
  caller_memory_free(&cm);
  caller_memory_free(&cm2);
  printf("xnn_heap: %s\n", g_failed ? "FAIL" : "PASS");
  return g_failed;
}
