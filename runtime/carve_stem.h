// carve runtime: the stem convolution (the network's first layer, a 3x3 stride-2
// convolution of the image's few channels, with its bias and SiLU).
//
// Every tensor is NHWC float32 with batch 1 and a row stride in floats
// (stride >= channels), see carve_rt.h. No function allocates; the work is split
// over `pool` (NULL: serial) with bit-identical results for any number of threads.

#ifndef CARVE_STEM_H
#define CARVE_STEM_H

#include "carve_isa.h"
#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// What carve_conv3x3s2_small_cin accepts: cin in 1..4, cout a multiple of 16.
#define CARVE_STEM_MAX_CIN 4
#define CARVE_STEM_COUT_MULTIPLE 16

// y = act(conv(x, weights) + bias): a 3x3 convolution, stride 2, padding 1, groups
// 1, of a few input channels (the network's first layer, on the image) with the
// bias and activation applied in registers (no second pass over y).
// x is (h, w, cin) with pixel stride x_stride >= cin; y is (oh, ow, cout),
// oh = (h - 1) / 2 + 1, ow = (w - 1) / 2 + 1, pixel stride y_stride >= cout (the
// floats past cout of each pixel are not written); weights are (3, 3, cin, cout)
// (ky, kx, ci, co), bias (cout). Each output is bias + the sum over the taps inside
// the image in (ky, kx, ci) order, one multiply-add each (FMA on AVX-512 / AVX2 +
// FMA intrinsics, the variant carve_isa_detect() selects, like the SiLU kernels; elsewhere portable
// C), then SiLU as carve_epilogue computes it. Rows are split over `pool`; the
// result does not depend on the number of threads. x and y must not overlap.
// CARVE_ERR_INVALID_ARGUMENT (nothing written) for NULL pointers, empty sizes,
// cin or cout out of range, strides below the channels or an unknown act.
carve_status carve_conv3x3s2_small_cin(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                                       const float* weights, const float* bias, size_t cout, float* y,
                                       size_t y_stride, carve_act act, pthreadpool_t pool);


// carve_conv3x3s2_small_cin of one instruction set; carve_conv3x3s2_small_cin_select(isa) returns the best variant
// this build has for isa (never NULL; isa from carve_isa_detect()).
typedef carve_status (*carve_conv3x3s2_small_cin_fn)(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
    const float* weights, const float* bias, size_t cout, float* y, size_t y_stride, carve_act act,
    pthreadpool_t pool);
carve_conv3x3s2_small_cin_fn carve_conv3x3s2_small_cin_select(carve_isa isa);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_STEM_H
