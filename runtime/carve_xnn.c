// carve runtime: XNNPACK operator wrappers. See carve_xnn.h.

#include "carve_xnn.h"

#include <math.h>

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

// The common tail of every create: on failure delete the half-made operator, else hand it out.
static carve_status finish(xnn_operator_t op, enum xnn_status s, xnn_operator_t* op_out) {
  if (s != xnn_status_success) {
    xnn_delete_operator(op);
    return from_xnn(s);
  }
  *op_out = op;
  return CARVE_OK;
}

// ---- Convolution ------------------------------------------------------------

carve_status carve_xnn_create_conv(const carve_xnn_conv_desc* d, const float* weights, float* arena,
                                   pthreadpool_t pool, xnn_operator_t* op_out) {
  xnn_operator_t op = NULL;
  enum xnn_status s = xnn_create_convolution2d_nhwc_f32(
      d->pad, d->pad, d->pad, d->pad, d->kh, d->kw, d->stride, d->stride, 1, 1, d->groups,
      d->cin / d->groups, d->cout / d->groups, d->in_stride, d->out_stride, weights + d->weight_off,
      weights + d->bias_off, -INFINITY, INFINITY, 0, &op);
  if (s == xnn_status_success) {
    s = xnn_setup_convolution2d_nhwc_f32(op, 1, d->h, d->w, arena + d->in_off, arena + d->out_off, pool);
  }
  return finish(op, s, op_out);
}

// ---- Max pooling ------------------------------------------------------------

carve_status carve_xnn_create_maxpool(const carve_xnn_maxpool_desc* d, float* arena, pthreadpool_t pool,
                                      xnn_operator_t* op_out) {
  xnn_operator_t op = NULL;
  enum xnn_status s = xnn_create_max_pooling2d_nhwc_f32(d->pad, d->pad, d->pad, d->pad, d->k, d->k, d->stride,
                                                        d->stride, 1, 1, d->channels, d->in_stride, d->out_stride,
                                                        -INFINITY, INFINITY, 0, &op);
  if (s == xnn_status_success) {
    s = xnn_setup_max_pooling2d_nhwc_f32(op, 1, d->h, d->w, arena + d->in_off, arena + d->out_off, pool);
  }
  return finish(op, s, op_out);
}

// ---- Copy -------------------------------------------------------------------

carve_status carve_xnn_create_copy(const carve_xnn_copy_desc* d, float* arena, pthreadpool_t pool,
                                   xnn_operator_t* op_out) {
  xnn_operator_t op = NULL;
  enum xnn_status s = xnn_create_copy_nc_x32(d->channels, d->in_stride, d->out_stride, 0, &op);
  if (s == xnn_status_success) {
    s = xnn_setup_copy_nc_x32(op, d->pixels, arena + d->in_off, arena + d->out_off, pool);
  }
  return finish(op, s, op_out);
}

// ---- Run / delete -----------------------------------------------------------

carve_status carve_xnn_run(xnn_operator_t op, pthreadpool_t pool) { return from_xnn(xnn_run_operator(op, pool)); }

void carve_xnn_delete_all(xnn_operator_t* ops, size_t count) {
  for (size_t i = 0; i < count; i++) {
    if (ops[i] != NULL) {
      xnn_delete_operator(ops[i]);
      ops[i] = NULL;
    }
  }
}
