// carve runtime: XNNPACK operator wrappers. See carve_xnn.h.

#define _DEFAULT_SOURCE  // madvise

#include "carve_xnn.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

static carve_status from_xnn(enum xnn_status s) {
  switch (s) {
    case xnn_status_success:
      return CARVE_OK;
    case xnn_status_out_of_memory:
      return CARVE_ERR_OUT_OF_MEMORY;
    case xnn_status_invalid_parameter:
      return CARVE_ERR_INVALID_ARGUMENT;
    case xnn_status_unsupported_hardware:
    case xnn_status_unsupported_parameter:
      return CARVE_ERR_UNSUPPORTED;
    default:
      return CARVE_ERR_BACKEND;
  }
}

// ---- Allocator ---------------------------------------------------------------
//
// The XNNPACK allocator carve installs. Outside a heap scope it is the C
// library's allocator (with CARVE_RT_NO_HEAP: none, every allocation fails).
// Inside one, blocks are carved from the heap in order:
//
//   base                                                             base + size
//   | ... | pad | size (in the 16 bytes before the block) | block | ... free ... |
//                                                         ^ aligned      ^ used
//
// Frees of blocks inside the heap do nothing; a reallocation copies the block
// into a new one unless it is the last block, which grows in place. The only
// state is the thread's active heap: each thread creates its own contexts.

#define HEAP_HEADER 16  // bytes before each block: its size, keeping 16-byte alignment

static _Thread_local carve_xnn_heap* t_heap;  // the calling thread's active heap, or NULL

static int in_heap(const carve_xnn_heap* h, const void* p) {
  return h != NULL && p != NULL && (uintptr_t)p >= (uintptr_t)h->base && (uintptr_t)p < (uintptr_t)h->base + h->size;
}

static size_t block_size(const void* p) {
  size_t n;
  memcpy(&n, (const unsigned char*)p - sizeof(size_t), sizeof n);
  return n;
}

// size bytes aligned to align (a power of two) from the heap, or NULL when they do not fit.
static void* heap_alloc(carve_xnn_heap* h, size_t align, size_t size) {
  if (align < HEAP_HEADER) {
    align = HEAP_HEADER;
  }
  const uintptr_t base = (uintptr_t)h->base;
  const uintptr_t p = (base + h->used + HEAP_HEADER + (align - 1)) & ~(uintptr_t)(align - 1);
  const size_t start = (size_t)(p - base);
  if (start > h->size || size > h->size - start) {
    return NULL;
  }
  memcpy((unsigned char*)p - sizeof(size_t), &size, sizeof size);
  h->used = start + size;
  return (void*)p;
}

static void* xnn_alloc(void* context, size_t size) {
  (void)context;
  if (t_heap != NULL) {
    return heap_alloc(t_heap, HEAP_HEADER, size);
  }
#ifdef CARVE_RT_NO_HEAP
  return NULL;
#else
  return malloc(size);
#endif
}

static void* xnn_realloc(void* context, void* pointer, size_t size) {
  (void)context;
  carve_xnn_heap* h = t_heap;
  if (h != NULL) {
    if (pointer == NULL) {
      return heap_alloc(h, HEAP_HEADER, size);
    }
    if (!in_heap(h, pointer)) {
      return NULL;  // a block from outside the heap: its size is unknown, so it cannot move in
    }
    const size_t old = block_size(pointer);
    const size_t start = (size_t)((uintptr_t)pointer - (uintptr_t)h->base);
    if (start + old == h->used) {  // the last block: grow or shrink in place
      if (size > h->size - start) {
        return NULL;
      }
      memcpy((unsigned char*)pointer - sizeof(size_t), &size, sizeof size);
      h->used = start + size;
      return pointer;
    }
    void* q = heap_alloc(h, HEAP_HEADER, size);
    if (q != NULL) {
      memcpy(q, pointer, old < size ? old : size);
    }
    return q;
  }
#ifdef CARVE_RT_NO_HEAP
  return NULL;
#else
  return realloc(pointer, size);
#endif
}

static void xnn_free(void* context, void* pointer) {
  (void)context;
  if (pointer == NULL || in_heap(t_heap, pointer)) {
    return;  // heap blocks go with the heap
  }
#ifndef CARVE_RT_NO_HEAP
  free(pointer);
#endif
}

static void* xnn_aligned_alloc(void* context, size_t alignment, size_t size) {
  (void)context;
  if (t_heap != NULL) {
    return heap_alloc(t_heap, alignment, size);
  }
#ifdef CARVE_RT_NO_HEAP
  return NULL;
#else
  if (alignment < sizeof(void*)) {
    alignment = sizeof(void*);
  }
  const size_t rounded = (size + alignment - 1) / alignment * alignment;  // C11: a multiple of the alignment
  return rounded >= size ? aligned_alloc(alignment, rounded) : NULL;
#endif
}

static const struct xnn_allocator k_allocator = {
    .context = NULL,
    .allocate = xnn_alloc,
    .reallocate = xnn_realloc,
    .deallocate = xnn_free,
    .aligned_allocate = xnn_aligned_alloc,
    .aligned_deallocate = xnn_free,
};

carve_status carve_xnn_init(void) { return from_xnn(xnn_initialize(&k_allocator)); }

const struct xnn_allocator* carve_xnn_allocator(void) { return &k_allocator; }

void carve_xnn_heap_init(carve_xnn_heap* heap, void* base, size_t size) {
  heap->base = base;
  heap->size = base != NULL ? size : 0;
  heap->used = 0;
}

carve_xnn_heap* carve_xnn_heap_begin(carve_xnn_heap* heap) {
  carve_xnn_heap* previous = t_heap;
  t_heap = heap;
  return previous;
}

void carve_xnn_heap_end(carve_xnn_heap* previous) { t_heap = previous; }

// ---- Create ---------------------------------------------------------------

carve_status carve_xnn_create(const carve_xnn_desc* d, const float* weights, float* arena, pthreadpool_t pool,
                              xnn_operator_t* op_out) {
  if (d == NULL || arena == NULL || op_out == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const float* x = arena + d->in_off;
  float* y = arena + d->out_off;
  const float* w = weights != NULL ? weights + d->weight_off : NULL;
  const float* b = weights != NULL ? weights + d->bias_off : NULL;
  const size_t pixels = (size_t)d->h * d->w;
  xnn_operator_t op = NULL;
  enum xnn_status s = xnn_status_invalid_parameter;
  switch (d->kind) {
    case CARVE_XNN_CONV:
      s = xnn_create_convolution2d_nhwc_f32(d->pad, d->pad, d->pad, d->pad, d->kh, d->kw, d->stride, d->stride, 1, 1,
                                            d->groups, d->cin / d->groups, d->cout / d->groups, d->in_stride,
                                            d->out_stride, w, b, -INFINITY, INFINITY, 0, &op);
      if (s == xnn_status_success) s = xnn_setup_convolution2d_nhwc_f32(op, 1, d->h, d->w, x, y, pool);
      break;
    case CARVE_XNN_DECONV:
      s = xnn_create_deconvolution2d_nhwc_f32(0, 0, 0, 0, d->kh, d->kw, d->stride, d->stride, 1, 1, 1, d->cin,
                                              d->cout, d->in_stride, d->out_stride, w, b, -INFINITY, INFINITY, 0,
                                              &op);
      if (s == xnn_status_success) s = xnn_setup_deconvolution2d_nhwc_f32(op, 1, d->h, d->w, 0, 0, x, y, pool);
      break;
    case CARVE_XNN_MAXPOOL:
      s = xnn_create_max_pooling2d_nhwc_f32(d->pad, d->pad, d->pad, d->pad, d->kh, d->kh, d->stride, d->stride, 1, 1,
                                            d->cin, d->in_stride, d->out_stride, -INFINITY, INFINITY, 0, &op);
      if (s == xnn_status_success) s = xnn_setup_max_pooling2d_nhwc_f32(op, 1, d->h, d->w, x, y, pool);
      break;
    case CARVE_XNN_COPY:
      s = xnn_create_copy_nc_x32(d->cin, d->in_stride, d->out_stride, 0, &op);
      if (s == xnn_status_success) s = xnn_setup_copy_nc_x32(op, pixels, x, y, pool);
      break;
    case CARVE_XNN_ADD: {
      const size_t shape[2] = {pixels, d->cin};
      s = xnn_create_add_nd_f32(-INFINITY, INFINITY, 0, &op);
      if (s == xnn_status_success) s = xnn_setup_add_nd_f32(op, 2, shape, 2, shape, x, arena + d->in2_off, y, pool);
      break;
    }
    case CARVE_XNN_GAP:
      s = xnn_create_global_average_pooling_nwc_f32(d->cin, d->in_stride, d->out_stride, -INFINITY, INFINITY, 0, &op);
      if (s == xnn_status_success) s = xnn_setup_global_average_pooling_nwc_f32(op, 1, pixels, x, y, pool);
      break;
    case CARVE_XNN_FC:
      s = xnn_create_fully_connected_nc_f32(d->cin, d->cout, d->in_stride, d->out_stride, w, b, -INFINITY, INFINITY,
                                            0, &op);
      if (s == xnn_status_success) s = xnn_setup_fully_connected_nc_f32(op, 1, x, y, pool);
      break;
    case CARVE_XNN_SOFTMAX:
      s = xnn_create_softmax_nc_f32(d->cin, d->in_stride, d->out_stride, 0, &op);
      if (s == xnn_status_success) s = xnn_setup_softmax_nc_f32(op, 1, x, y, pool);
      break;
  }
  if (s != xnn_status_success) {
    if (op != NULL) xnn_delete_operator(op);
    return from_xnn(s);
  }
  *op_out = op;
  return CARVE_OK;
}

// ---- Run / delete ---------------------------------------------------------

carve_status carve_xnn_run(xnn_operator_t op, pthreadpool_t pool) { return from_xnn(xnn_run_operator(op, pool)); }

// ---- Weight pages ---------------------------------------------------------

// One line of /proc/self/maps, "start-end perms offset major:minor inode path": folds it into the walk
// over [*covered, hi). Returns 1 when the walk is decided (*ok set), else 0.
static int maps_line(const char* line, uintptr_t* covered, uintptr_t hi, int* ok) {
  unsigned long start = 0, end = 0, inode = 0;
  char perms[8] = {0};
  if (sscanf(line, "%lx-%lx %7s %*x %*x:%*x %lu", &start, &end, perms, &inode) != 4) {
    return 0;
  }
  if (start <= *covered && *covered < end) {
    if (inode == 0 || perms[1] != '-') {
      return 1;  // anonymous or writable: releasing could lose data
    }
    *covered = end;
    if (*covered >= hi) {
      *ok = 1;
      return 1;
    }
  }
  return 0;
}

int carve_xnn_weights_releasable(const void* weights, size_t bytes) {
#if defined(__linux__)
  if (weights == NULL || bytes == 0) {
    return 0;
  }
  // Read with open/read and a stack buffer, not stdio: create_with must not allocate. The blob may span
  // consecutive mappings of the same file (all read-only, inode != 0).
  const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return 0;
  }
  const uintptr_t hi = (uintptr_t)weights + bytes;
  uintptr_t covered = (uintptr_t)weights;
  int ok = 0, done = 0;
  char buf[4096];
  size_t have = 0;
  while (!done) {
    const ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
    if (n <= 0) {
      break;
    }
    have += (size_t)n;
    buf[have] = '\0';
    char* line = buf;
    char* nl;
    while (!done && (nl = strchr(line, '\n')) != NULL) {
      *nl = '\0';
      done = maps_line(line, &covered, hi, &ok);
      line = nl + 1;
    }
    have -= (size_t)(line - buf);
    memmove(buf, line, have);
    if (have == sizeof buf - 1) {
      have = 0;  // a line longer than the buffer (a very long path) is dropped: at worst nothing is released
    }
  }
  close(fd);
  return ok;
#else
  (void)weights;
  (void)bytes;
  return 0;
#endif
}

void carve_xnn_release_weights(const void* weights, size_t bytes) {
#if defined(__linux__)
  const long page = sysconf(_SC_PAGESIZE);
  if (weights == NULL || page <= 0) {
    return;
  }
  // Only the whole pages inside the blob: the first and last may hold other data.
  const uintptr_t p = (uintptr_t)page;
  const uintptr_t start = ((uintptr_t)weights + p - 1) / p * p;
  const uintptr_t end = ((uintptr_t)weights + bytes) / p * p;
  if (end > start) {
    (void)madvise((void*)start, end - start, MADV_DONTNEED);  // advice only: failure changes nothing
  }
#else
  (void)weights;
  (void)bytes;
#endif
}

void carve_xnn_release_weights_before(const carve_xnn_desc* d, const float* weights) {
  if (d == NULL || weights == NULL || d->weight_off == 0) {
    return;  // no weights (pools, copies), or the first tensor of the blob
  }
  const size_t first = d->bias_off != 0 && d->bias_off < d->weight_off ? d->bias_off : d->weight_off;
  carve_xnn_release_weights(weights, first * sizeof(float));
}

void carve_xnn_delete_all(xnn_operator_t* ops, size_t count) {
  for (size_t i = 0; i < count; i++) {
    if (ops[i] != NULL) {
      xnn_delete_operator(ops[i]);
      ops[i] = NULL;
    }
  }
}
