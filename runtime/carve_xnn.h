// carve runtime: XNNPACK operator wrappers (the xnnpack backend's glue).
//
// Generated packages describe every XNNPACK operator by a constant descriptor
// (kind, shapes, strides, weight and arena offsets, all known at generation
// time). At create, carve_xnn_create() creates the operator (XNNPACK packs the
// weights then) and sets it up once on its fixed arena addresses; a run only
// calls xnn_run_operator. Nothing here allocates during a run.
//
// Memory: carve_xnn_init() installs carve's XNNPACK allocator. It behaves like
// malloc / realloc / free / aligned_alloc, except on a thread inside a heap
// scope (carve_xnn_heap_begin .. carve_xnn_heap_end), where every allocation is
// carved out of the caller's buffer and frees of blocks inside it are no-ops:
// <name>_create_with() creates (and <name>_destroy() deletes) its operators in
// such a scope, so XNNPACK's operators, packed weights, indirection and zero
// buffers live in the caller's memory. The one piece of state is a thread-local
// pointer to the active heap, set only inside create_with and destroy.

#ifndef CARVE_XNN_H
#define CARVE_XNN_H

#include <stddef.h>
#include <stdint.h>

#include <xnnpack.h>

#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- Descriptors ----------------------------------------------------------

typedef enum carve_xnn_kind {
  CARVE_XNN_CONV = 1,     // y = W * x + b; pad on all four sides; weights OHWI (o, kh, kw, i / groups)
  CARVE_XNN_DECONV = 2,   // transposed conv, stride = kernel, no padding; weights (o, kh, kw, i)
  CARVE_XNN_MAXPOOL = 3,  // y = max over a k x k window (kh), stride, padding as -inf
  CARVE_XNN_COPY = 4,     // y[p, 0:cin] = x[p, 0:cin] for `pixels` pixels (strided channel copy)
  CARVE_XNN_ADD = 5,      // y = x + x2, contiguous (pixels, cin) tensors
  CARVE_XNN_GAP = 6,      // y[c] = mean over the h*w pixels of x[., c]
  CARVE_XNN_FC = 7,       // y = W x + b, W (cout, cin) row-major
  CARVE_XNN_SOFTMAX = 8,  // y = softmax(x) over cin channels
} carve_xnn_kind;

// One operator: a carve_op_desc (carve_rt.h) whose kind is a carve_xnn_kind.
typedef carve_op_desc carve_xnn_desc;

// ---- Lifecycle ------------------------------------------------------------

// xnn_initialize with carve's allocator, mapped to a carve status (idempotent).
// XNNPACK keeps the allocator of the first xnn_initialize of the process: if
// other code initialized it first with its own allocator, heap scopes have no
// effect (create_with detects this and returns CARVE_ERR_UNSUPPORTED). The first
// call also initializes cpuinfo, which allocates its tables with malloc once per
// process; call it at start-up when later creates must not allocate at all.
carve_status carve_xnn_init(void);

// ---- Caller-owned memory (heap scopes) ----------------------------------------

// A caller's buffer that XNNPACK's allocations are bump-allocated from while it
// is the calling thread's active heap. Each block is aligned as asked (at least
// 16 bytes) and preceded by its size (so a reallocation can copy it); nothing is
// ever given back to the heap before the heap itself is dropped. An allocation
// that does not fit returns NULL, which XNNPACK reports as out of memory.
typedef struct carve_xnn_heap {
  unsigned char* base;  // the caller's buffer (NULL: no heap)
  size_t size;          // its bytes
  size_t used;          // bytes handed out so far, alignment and headers included
} carve_xnn_heap;

// Sets *heap to the empty heap over [base, base + size).
void carve_xnn_heap_init(carve_xnn_heap* heap, void* base, size_t size);

// Makes heap (NULL: none) the calling thread's active heap and returns the one
// that was active, for carve_xnn_heap_end.
carve_xnn_heap* carve_xnn_heap_begin(carve_xnn_heap* heap);

// Restores the calling thread's active heap returned by carve_xnn_heap_begin.
void carve_xnn_heap_end(carve_xnn_heap* previous);

// The allocator carve_xnn_init() gives XNNPACK (static, constant; for tests and for code
// that initializes XNNPACK itself and wants heap scopes to work).
const struct xnn_allocator* carve_xnn_allocator(void);

// Creates the operator a descriptor describes and sets it up on `arena`.
carve_status carve_xnn_create(const carve_xnn_desc* d, const float* weights, float* arena, pthreadpool_t pool,
                              xnn_operator_t* op_out);

// Runs an operator that was set up at create.
carve_status carve_xnn_run(xnn_operator_t op, pthreadpool_t pool);

// ---- Weight pages -----------------------------------------------------------
//
// XNNPACK packs its own copy of every tensor at create, so the float32 blob is
// not read again afterwards. When the blob lies in a read-only, file-backed
// mapping (the .rodata of the binary, on Linux), its pages can leave the resident
// set: they are clean and would be read back from the file if ever touched again.

// 1 when [weights, weights + bytes) is in one read-only file-backed mapping
// (Linux, /proc/self/maps), so that releasing its pages loses nothing; else 0.
int carve_xnn_weights_releasable(const void* weights, size_t bytes);

// Drops the whole pages of [weights, weights + bytes) from the resident set
// (madvise MADV_DONTNEED). Only for a range carve_xnn_weights_releasable accepted.
void carve_xnn_release_weights(const void* weights, size_t bytes);

// After creating the operator of d: releases the blob's pages below d's own
// tensors. The generator lays the blob out in operator order, so every tensor
// there is packed already; called after each create, this keeps the float32 blob
// out of the peak resident set too.
void carve_xnn_release_weights_before(const carve_xnn_desc* d, const float* weights);

// Deletes every non-NULL operator of the array and clears it. Operators created
// in a heap scope must be deleted in a scope of the same heap.
void carve_xnn_delete_all(xnn_operator_t* ops, size_t count);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_XNN_H
