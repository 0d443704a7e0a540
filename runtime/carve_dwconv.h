// carve runtime: the depthwise 3x3 convolution with its bias and SiLU.
//
// Every tensor is NHWC float32 with batch 1 and a row stride in floats
// (stride >= channels), see carve_rt.h. No function allocates; the work is split
// over `pool` (NULL: serial) with bit-identical results for any number of threads.

#ifndef CARVE_DWCONV_H
#define CARVE_DWCONV_H

#include "carve_isa.h"
#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// y = act(dwconv3x3(x) + bias): a 3x3 depthwise convolution (groups = channels,
// one filter per channel), stride 1, padding 1, with the bias and activation
// applied in registers (no second pass over y). x is (h, w, c) with pixel stride
// x_stride >= c (the floats past c are not read); y is (h, w, c) with pixel stride
// y_stride >= c (the floats past c of each pixel are not written); weights are
// (3, 3, c): weights[(ky * 3 + kx) * c + ch] = the convolution's weight
// (ch, 0, ky, kx); bias (c). Any c >= 1. Each output is bias + its taps inside
// the image in (ky, kx) order, one multiply-add each (FMA on AVX-512 / AVX2 + FMA
// intrinsics, the variant carve_isa_detect() selects, like the SiLU kernels, channels in blocks of 16
// or 8 with a masked tail; elsewhere portable C), then SiLU as carve_epilogue
// computes it (act CARVE_ACT_SILU; CARVE_ACT_NONE: none). Rows are split over
// `pool`; the result does not depend on the number of threads. x and y must not
// overlap. CARVE_ERR_INVALID_ARGUMENT (nothing written) for NULL pointers, empty
// sizes, strides below c or an unknown act.
carve_status carve_dwconv3x3(const float* x, size_t x_stride, size_t h, size_t w, size_t c, const float* weights,
                             const float* bias, float* y, size_t y_stride, carve_act act, pthreadpool_t pool);


// carve_dwconv3x3 of one instruction set; carve_dwconv3x3_select(isa) returns the best variant
// this build has for isa (never NULL; isa from carve_isa_detect()).
typedef carve_status (*carve_dwconv3x3_fn)(const float* x, size_t x_stride, size_t h, size_t w, size_t c, const float* weights,
    const float* bias, float* y, size_t y_stride, carve_act act, pthreadpool_t pool);
carve_dwconv3x3_fn carve_dwconv3x3_select(carve_isa isa);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_DWCONV_H
