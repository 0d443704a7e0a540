// carve runtime, internal: the instruction-set variants of carve_conv3x3s1_winograd
// (carve_winograd.h), each a full entry point with its signature, for the selector and the
// tests. A variant runs only on a CPU that has its instruction set
// (carve_isa_detect()); only the variants this build can compile are declared.

#ifndef CARVE_WINOGRAD_ISA_H
#define CARVE_WINOGRAD_ISA_H

#include "carve_winograd.h"

#ifdef __cplusplus
extern "C" {
#endif

carve_status carve_conv3x3s1_winograd__portable(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
    const float* weights, const float* bias, size_t cout, float* y, size_t y_stride, const float* residual,
    size_t r_stride, carve_act act, void* scratch, size_t slots, pthreadpool_t pool);
#ifdef CARVE_HAVE_X86_SIMD
carve_status carve_conv3x3s1_winograd__avx2(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
    const float* weights, const float* bias, size_t cout, float* y, size_t y_stride, const float* residual,
    size_t r_stride, carve_act act, void* scratch, size_t slots, pthreadpool_t pool);
carve_status carve_conv3x3s1_winograd__avx512(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
    const float* weights, const float* bias, size_t cout, float* y, size_t y_stride, const float* residual,
    size_t r_stride, carve_act act, void* scratch, size_t slots, pthreadpool_t pool);
#endif
#ifdef CARVE_HAVE_NEON
carve_status carve_conv3x3s1_winograd__neon(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
    const float* weights, const float* bias, size_t cout, float* y, size_t y_stride, const float* residual,
    size_t r_stride, carve_act act, void* scratch, size_t slots, pthreadpool_t pool);
#endif

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_WINOGRAD_ISA_H
