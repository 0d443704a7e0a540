// carve's XNNPACK allocator (runtime/carve_xnn.c), called directly: outside a heap scope it is the C
// library's allocator; inside one, blocks come from the heap in order, aligned as asked (at least 16),
// a reallocation copies the old block (or grows the last block in place), frees of heap blocks do nothing,
// and an allocation that does not fit returns NULL and leaves the heap as it was. Scopes nest and are per
// thread. Also: carve_xnn_weights_releasable accepts a read-only file-backed blob and refuses writable memory.

#include <pthread.h>

#include "carve_xnn.h"
#include "test_common.h"

static const float k_rodata_blob[1 << 18] = {1.0f};  // 1 MiB of .rodata (file-backed, read-only)

static int inside(const carve_xnn_heap* h, const void* p, size_t n) {
  return (uintptr_t)p >= (uintptr_t)h->base && (uintptr_t)p + n <= (uintptr_t)h->base + h->used;
}

typedef struct {
  const carve_xnn_heap* main_heap;
  int ok;
} other_thread_arg;

static void* other_thread(void* arg) {
  // The scope of the main thread does not reach this thread: this block comes from the C library.
  other_thread_arg* t = arg;
  const struct xnn_allocator* a = carve_xnn_allocator();
  const size_t before = t->main_heap->used;
  void* p = a->allocate(a->context, 32);
  t->ok = p != NULL && !inside(t->main_heap, p, 32) && t->main_heap->used == before &&
          carve_xnn_heap_begin(NULL) == NULL;  // this thread had no active heap
  a->deallocate(a->context, p);
  return NULL;
}

int main(void) {
  const struct xnn_allocator* a = carve_xnn_allocator();
  void* ctx = a->context;

  // Outside a scope: the C library (a block that free() accepts, aligned as asked).
  void* m = a->aligned_allocate(ctx, 64, 100);
  CHECK(m != NULL && (uintptr_t)m % 64 == 0);
  a->aligned_deallocate(ctx, m);
  m = a->reallocate(ctx, a->allocate(ctx, 8), 4096);
  CHECK(m != NULL);
  a->deallocate(ctx, m);

  // Inside: bump allocation with alignment, size headers, exhaustion.
  enum { HEAP = 4096 };
  unsigned char* buf = aligned_alloc(64, HEAP);
  CHECK(buf != NULL);
  carve_xnn_heap h;
  carve_xnn_heap_init(&h, buf, HEAP);
  CHECK(h.used == 0 && h.size == HEAP);
  carve_xnn_heap* prev = carve_xnn_heap_begin(&h);
  CHECK(prev == NULL);
  unsigned char* p1 = a->aligned_allocate(ctx, 64, 100);
  CHECK(p1 != NULL && (uintptr_t)p1 % 64 == 0 && inside(&h, p1, 100));
  CHECK(p1 - buf == 64);  // the 16-byte header rounds the first block up to the next 64
  memset(p1, 0xab, 100);
  unsigned char* p2 = a->allocate(ctx, 10);
  CHECK(p2 != NULL && (uintptr_t)p2 % 16 == 0 && p2 >= p1 + 100 + 16 && inside(&h, p2, 10));
  // The last block grows in place; an earlier one moves, with its bytes.
  CHECK(a->reallocate(ctx, p2, 40) == p2 && h.used == (size_t)(p2 - buf) + 40);
  unsigned char* p3 = a->reallocate(ctx, p1, 200);
  CHECK(p3 != NULL && p3 != p1 && inside(&h, p3, 200));
  for (int i = 0; i < 100; i++) {
    CHECK(p3[i] == 0xab);
  }
  // Frees inside the heap do nothing; the heap only grows.
  const size_t used = h.used;
  a->deallocate(ctx, p1);
  a->aligned_deallocate(ctx, p3);
  a->deallocate(ctx, NULL);
  CHECK(h.used == used);
  // Exhaustion: NULL, the heap unchanged; what still fits is given.
  CHECK(a->allocate(ctx, HEAP) == NULL && h.used == used);
  CHECK(a->aligned_allocate(ctx, 64, HEAP - used) == NULL && h.used == used);
  CHECK(a->reallocate(ctx, p3, HEAP) == NULL && h.used == used);
  unsigned char* last = a->allocate(ctx, HEAP - used - 32);
  CHECK(last != NULL && h.used <= HEAP);
  // A block from outside the heap cannot move in (its size is unknown).
  carve_xnn_heap_end(prev);
  void* outside = a->allocate(ctx, 16);
  prev = carve_xnn_heap_begin(&h);
  CHECK(a->reallocate(ctx, outside, 32) == NULL);
  // Scopes are per thread.
  other_thread_arg targ = {&h, 0};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, other_thread, &targ) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(targ.ok);
  // Nesting: an inner scope (or none) and back.
  carve_xnn_heap* outer = carve_xnn_heap_begin(NULL);
  CHECK(outer == &h);
  void* q = a->allocate(ctx, 16);
  CHECK(q != NULL && !inside(&h, q, 16));
  a->deallocate(ctx, q);
  carve_xnn_heap_end(outer);
  carve_xnn_heap_end(prev);
  a->deallocate(ctx, outside);
  free(buf);

  // Weight pages: .rodata of this executable is releasable, heap and writable memory are not.
  CHECK(carve_xnn_weights_releasable(k_rodata_blob, sizeof k_rodata_blob) == 1);
  float* heap_blob = malloc(sizeof k_rodata_blob);
  CHECK(heap_blob != NULL);
  CHECK(carve_xnn_weights_releasable(heap_blob, sizeof k_rodata_blob) == 0);
  free(heap_blob);
  CHECK(carve_xnn_weights_releasable(NULL, 16) == 0);

  printf("xnn_heap: allocator and weight pages ok\n");
  return 0;
}
