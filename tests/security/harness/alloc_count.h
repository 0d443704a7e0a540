// Test-only allocation counter, included by exactly one source file of a test program
// (harness/noalloc_test.c, tests/firmware/xnn_heap.c).
//
// The program defines malloc, calloc, realloc, free, aligned_alloc, posix_memalign, memalign and valloc
// itself (forwarding to glibc's __libc_* entry points), so every allocation of the process goes through
// them: the package's, carve's XNNPACK allocator's, and those that libXNNPACK, libcpuinfo, libpthreadpool
// and the pool's worker threads make themselves (the executable's definitions interpose on the shared
// libraries'; -Wl,--wrap would miss those). Counting is on between count_on() and count_off() only.
// Not for sanitizer builds (the sanitizers replace malloc themselves).

#ifndef CARVE_TEST_ALLOC_COUNT_H
#define CARVE_TEST_ALLOC_COUNT_H

#include <stdatomic.h>
#include <stddef.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);
extern void __libc_free(void*);

static atomic_int g_counting;
static atomic_long g_allocs, g_frees;  // test-only counters; the packages have no global state

static void note(void) {
  if (atomic_load_explicit(&g_counting, memory_order_relaxed)) {
    atomic_fetch_add(&g_allocs, 1);
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
void free(void* p) {
  if (p != NULL && atomic_load_explicit(&g_counting, memory_order_relaxed)) {
    atomic_fetch_add(&g_frees, 1);
  }
  __libc_free(p);
}
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

// Resets both counters and starts counting.
static void count_on(void) {
  atomic_store(&g_allocs, 0);
  atomic_store(&g_frees, 0);
  atomic_store(&g_counting, 1);
}

// Stops counting; returns the allocator calls (frees not included) since count_on().
static long count_off(void) {
  atomic_store(&g_counting, 0);
  return atomic_load(&g_allocs);
}

#endif  // CARVE_TEST_ALLOC_COUNT_H
