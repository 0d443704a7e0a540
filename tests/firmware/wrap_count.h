// Test-only allocator counters for programs linked with
//   -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign,--wrap=free
// (tests/firmware/no_malloc.c, tests/cuda/options_main.cu). Included by exactly one source file of the
// program; --wrap sees the calls of the statically linked objects (the package, carve's runtime), not
// those inside shared libraries (tests/security/harness/alloc_count.h interposes for that).

#ifndef CARVE_TEST_WRAP_COUNT_H
#define CARVE_TEST_WRAP_COUNT_H

#include <stddef.h>

static size_t g_allocs, g_frees;  // test-only counters; the packages have no global state

#ifdef __cplusplus
extern "C" {
#endif

void* __real_malloc(size_t size);
void* __real_calloc(size_t n, size_t size);
void* __real_realloc(void* p, size_t size);
void* __real_aligned_alloc(size_t align, size_t size);
int __real_posix_memalign(void** p, size_t align, size_t size);
void __real_free(void* p);

void* __wrap_malloc(size_t size) { g_allocs++; return __real_malloc(size); }
void* __wrap_calloc(size_t n, size_t size) { g_allocs++; return __real_calloc(n, size); }
void* __wrap_realloc(void* p, size_t size) { g_allocs++; return __real_realloc(p, size); }
void* __wrap_aligned_alloc(size_t align, size_t size) { g_allocs++; return __real_aligned_alloc(align, size); }
int __wrap_posix_memalign(void** p, size_t align, size_t size) { g_allocs++; return __real_posix_memalign(p, align, size); }
void __wrap_free(void* p) {
  if (p != NULL) {
    g_frees++;
  }
  __real_free(p);
}

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_TEST_WRAP_COUNT_H
