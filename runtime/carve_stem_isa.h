// carve runtime, internal: the instruction-set variants of carve_conv3x3s2_small_cin
// (carve_stem.h), each a full entry point with its signature, for the selector and the
// tests. A variant runs only on a CPU that has its instruction set
// (carve_isa_detect()); only the variants this build can compile are declared.

#ifndef CARVE_STEM_ISA_H
#define CARVE_STEM_ISA_H

#include "carve_stem.h"

#ifdef __cplusplus
extern "C" {
#endif

carve_status carve_conv3x3s2_small_cin__portable(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
    const float* weights, const float* bias, size_t cout, float* y, size_t y_stride, carve_act act,
    pthreadpool_t pool);
#ifdef CARVE_HAVE_X86_SIMD
carve_status carve_conv3x3s2_small_cin__avx2(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
    const float* weights, const float* bias, size_t cout, float* y, size_t y_stride, carve_act act,
    pthreadpool_t pool);
carve_status carve_conv3x3s2_small_cin__avx512(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
    const float* weights, const float* bias, size_t cout, float* y, size_t y_stride, carve_act act,
    pthreadpool_t pool);
#endif

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_STEM_ISA_H
