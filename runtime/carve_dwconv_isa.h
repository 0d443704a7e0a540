// carve runtime, internal: the instruction-set variants of carve_dwconv3x3
// (carve_dwconv.h), each a full entry point with its signature, for the selector and the
// tests. A variant runs only on a CPU that has its instruction set
// (carve_isa_detect()); only the variants this build can compile are declared.

#ifndef CARVE_DWCONV_ISA_H
#define CARVE_DWCONV_ISA_H

#include "carve_dwconv.h"

#ifdef __cplusplus
extern "C" {
#endif

carve_status carve_dwconv3x3__portable(const float* x, size_t x_stride, size_t h, size_t w, size_t c, const float* weights,
    const float* bias, float* y, size_t y_stride, carve_act act, pthreadpool_t pool);
#ifdef CARVE_HAVE_X86_SIMD
carve_status carve_dwconv3x3__avx2(const float* x, size_t x_stride, size_t h, size_t w, size_t c, const float* weights,
    const float* bias, float* y, size_t y_stride, carve_act act, pthreadpool_t pool);
carve_status carve_dwconv3x3__avx512(const float* x, size_t x_stride, size_t h, size_t w, size_t c, const float* weights,
    const float* bias, float* y, size_t y_stride, carve_act act, pthreadpool_t pool);
#endif

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_DWCONV_ISA_H
