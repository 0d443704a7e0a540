// Proof that a run allocates nothing: this program defines malloc, calloc, realloc, free,
// aligned_alloc, posix_memalign, memalign and valloc itself (forwarding to glibc's __libc_*
// entry points), so every allocation of the process goes through them, including those of
// libXNNPACK, libpthreadpool and the pool's worker threads (the executable's definitions interpose
// on the shared libraries'). Counting is switched on around the runs only.
//
// Positive control: the counter must see the allocations of _create (else the interposition is not
// in effect and the test fails), then count zero during _run_image / _run_tensor on 1 and 2
// threads, for several image sizes.
//
// Built without sanitizers (they replace malloc themselves): ctest security_noalloc.

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "mut.h"

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);
extern void __libc_free(void*);

static atomic_int counting;
static atomic_long allocations;

static void note(void) {
  if (atomic_load_explicit(&counting, memory_order_relaxed)) {
    atomic_fetch_add(&allocations, 1);
  }
}

void* malloc(size_t n) {
  note();
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t size) {
  note();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) {
  note();
  return __libc_realloc(p, n);
}
void free(void* p) { __libc_free(p); }
void* aligned_alloc(size_t align, size_t n) {
  note();
  return __libc_memalign(align, n);
}
void* memalign(size_t align, size_t n) {
  note();
  return __libc_memalign(align, n);
}
void* valloc(size_t n) {
  note();
  return __libc_memalign(4096, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  note();
  void* p = __libc_memalign(align, n);
  if (p == NULL) {
    return 12;  // ENOMEM
  }
  *out = p;
  return 0;
}

static void count_on(void) {
  atomic_store(&allocations, 0);
  atomic_store(&counting, 1);
}
static long count_off(void) {
  atomic_store(&counting, 0);
  return atomic_load(&allocations);
}

int main(void) {
  const struct { int w, h; } sizes[] = {{1, 1}, {MUT_W, MUT_H}, {333, 17}, {1, 1000}, {640, 480}};
  uint8_t* imgs[5];
  for (int i = 0; i < 5; i++) {
    imgs[i] = mut_image(sizes[i].w, sizes[i].h, (size_t)sizes[i].w * 3 + 5, 7 + i);
  }
  float* x = malloc(sizeof(float) * 3 * MUT_H * MUT_W);
  CHECK(x != NULL);
  for (size_t i = 0; i < (size_t)3 * MUT_H * MUT_W; i++) {
    x[i] = (float)(i % 255) / 255.0f;
  }
  mut_detection dets[MUT_MAX_DETS];
  for (int threads = 1; threads <= 2; threads++) {
    mut_options o = {.threads = threads};
    mut_model* m = NULL;
    count_on();
    CHECK_STATUS(MUT(_create)(&o, &m), CARVE_OK);
    const long at_create = count_off();
    printf("threads %d: _create made %ld allocations\n", threads, at_create);
    CHECK(at_create > 0);  // the counter works

    count_on();
    for (int rep = 0; rep < 3; rep++) {
      for (int i = 0; i < 5; i++) {
        size_t n = 0;
        const int w = sizes[i].w, h = sizes[i].h;
        CHECK_STATUS(MUT(_run_image)(m, imgs[i], w, h, (size_t)w * 3 + 5, 0.25f, dets, MUT_MAX_DETS, &n), CARVE_OK);
      }
      size_t n = 0, rows = 0;
      CHECK_STATUS(MUT(_run_tensor)(m, x, 0.25f, dets, MUT_MAX_DETS, &n), CARVE_OK);
      CHECK(MUT(_rows)(m, &rows) != NULL && MUT(_layer_ms)(m) != NULL);
    }
    const long in_runs = count_off();
    printf("threads %d: 18 runs made %ld allocations\n", threads, in_runs);
    CHECK(in_runs == 0);
    MUT(_destroy)(m);
  }
  for (int i = 0; i < 5; i++) {
    free(imgs[i]);
  }
  free(x);
  printf("noalloc_test: runs allocate nothing\n");
  return 0;
}
