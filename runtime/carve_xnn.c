// carve runtime: XNNPACK operator wrappers. See carve_xnn.h.

#define _DEFAULT_SOURCE  // madvise

#include "carve_xnn.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#if defined(__linux__)
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

carve_status carve_xnn_init(void) { return from_xnn(xnn_initialize(NULL)); }

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

int carve_xnn_weights_releasable(const void* weights, size_t bytes) {
#if defined(__linux__)
  if (weights == NULL || bytes == 0) {
    return 0;
  }
  const uintptr_t lo = (uintptr_t)weights, hi = lo + bytes;
  FILE* maps = fopen("/proc/self/maps", "r");
  if (maps == NULL) {
    return 0;
  }
  // Lines: "start-end perms offset major:minor inode path". The blob may span
  // consecutive mappings of the same file (all read-only, inode != 0).
  int ok = 0;
  uintptr_t covered = lo;
  char line[512];
  while (fgets(line, sizeof line, maps) != NULL) {
    unsigned long start = 0, end = 0, inode = 0;
    char perms[8] = {0};
    if (sscanf(line, "%lx-%lx %7s %*x %*x:%*x %lu", &start, &end, perms, &inode) != 4) {
      continue;
    }
    if (start <= covered && covered < end) {
      if (inode == 0 || perms[1] != '-') {
        break;  // anonymous or writable: releasing could lose data
      }
      covered = end;
      if (covered >= hi) {
        ok = 1;
        break;
      }
    }
  }
  fclose(maps);
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
