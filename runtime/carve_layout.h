// carve runtime: data movement without arithmetic: nearest-neighbour 2x upsampling
// and the NCHW <-> NHWC transposes at a package's edges.
//
// Every tensor is NHWC float32 with batch 1 and a row stride in floats
// (stride >= channels), see carve_rt.h. No function allocates; the work is split
// over `pool` (NULL: serial) with bit-identical results for any number of threads.

#ifndef CARVE_LAYOUT_H
#define CARVE_LAYOUT_H

#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// y[2i + a][2j + b][c] = x[i][j][c] for a, b in {0, 1}: nearest-neighbour 2x.
// x is (h, w, c), y is (2h, 2w, c); they must not overlap.
// CARVE_ERR_INVALID_ARGUMENT (nothing written) for NULL pointers, empty sizes or
// strides below c.
carve_status carve_upsample_nearest2x(const float* x, size_t x_stride, size_t h, size_t w, size_t c, float* y,
                                      size_t y_stride, pthreadpool_t pool);

// y[(p * y_stride) + ch] = x[ch * h * w + p]: NCHW (batch 1, dense) to strided NHWC.
// CARVE_ERR_INVALID_ARGUMENT (nothing written) for NULL pointers, empty sizes or
// y_stride < c.
carve_status carve_nchw_to_nhwc(const float* x, size_t c, size_t h, size_t w, float* y, size_t y_stride);

// y[ch * h * w + p] = x[p * x_stride + ch]: strided NHWC to dense NCHW (batch 1).
// CARVE_ERR_INVALID_ARGUMENT (nothing written) for NULL pointers, empty sizes or
// x_stride < c.
carve_status carve_nhwc_to_nchw(const float* x, size_t x_stride, size_t h, size_t w, size_t c, float* y);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_LAYOUT_H
