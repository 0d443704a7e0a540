// carve runtime: XNNPACK operator wrappers (the xnnpack backend's glue).
//
// Generated packages describe every XNNPACK operator by a constant descriptor
// (shapes, strides, weight and arena offsets, all known at generation time).
// At create the wrappers create the operator (XNNPACK packs the weights then)
// and set it up once on its fixed arena addresses; a run only calls
// xnn_run_operator. Nothing here allocates during a run.

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

// y = W * x + b, NHWC, padding `pad` on all four sides, then no clamping.
// Weights are OHWI (o, kh, kw, i / groups) floats at weights + weight_off.
typedef struct carve_xnn_conv_desc {
  uint32_t kh, kw, stride, pad, groups;
  uint32_t cin, cout;            // total input / output channels
  uint32_t h, w;                 // input size
  size_t in_stride, out_stride;  // pixel strides (channels) of input and output views
  size_t weight_off, bias_off;   // in floats from the weight blob
  size_t in_off, out_off;        // in floats from the arena
} carve_xnn_conv_desc;

// y = max over a k x k window, stride s, padding p (as -inf).
typedef struct carve_xnn_maxpool_desc {
  uint32_t k, stride, pad;
  uint32_t h, w, channels;
  size_t in_stride, out_stride;
  size_t in_off, out_off;
} carve_xnn_maxpool_desc;

// y[p, 0:c] = x[p, 0:c] for every pixel p (a strided channel copy).
typedef struct carve_xnn_copy_desc {
  size_t pixels, channels;
  size_t in_stride, out_stride;
  size_t in_off, out_off;
} carve_xnn_copy_desc;

// ---- Lifecycle ------------------------------------------------------------

// xnn_initialize, mapped to a carve status (idempotent).
carve_status carve_xnn_init(void);

carve_status carve_xnn_create_conv(const carve_xnn_conv_desc* d, const float* weights, float* arena,
                                   pthreadpool_t pool, xnn_operator_t* op_out);
carve_status carve_xnn_create_maxpool(const carve_xnn_maxpool_desc* d, float* arena, pthreadpool_t pool,
                                      xnn_operator_t* op_out);
carve_status carve_xnn_create_copy(const carve_xnn_copy_desc* d, float* arena, pthreadpool_t pool,
                                   xnn_operator_t* op_out);

// Runs an operator that was set up at create.
carve_status carve_xnn_run(xnn_operator_t op, pthreadpool_t pool);

// Deletes every non-NULL operator of the array and clears it.
void carve_xnn_delete_all(xnn_operator_t* ops, size_t count);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_XNN_H
