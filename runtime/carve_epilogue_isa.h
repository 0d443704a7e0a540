// carve runtime, internal: the instruction-set variants of carve_epilogue
// (carve_epilogue.h), each a full entry point with its signature, for the
// selector and the tests. A variant runs only on a CPU that has its instruction
// set (carve_isa_detect()); only the variants this build can compile are declared.

#ifndef CARVE_EPILOGUE_ISA_H
#define CARVE_EPILOGUE_ISA_H

#include "carve_epilogue.h"

#ifdef __cplusplus
extern "C" {
#endif

carve_status carve_epilogue__portable(float* y, size_t y_stride, const float* residual, size_t r_stride,
                                      size_t pixels, size_t channels, carve_act act, pthreadpool_t pool);
#ifdef CARVE_HAVE_X86_SIMD
carve_status carve_epilogue__avx2(float* y, size_t y_stride, const float* residual, size_t r_stride,
                                  size_t pixels, size_t channels, carve_act act, pthreadpool_t pool);
carve_status carve_epilogue__avx512(float* y, size_t y_stride, const float* residual, size_t r_stride,
                                    size_t pixels, size_t channels, carve_act act, pthreadpool_t pool);
#endif

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_EPILOGUE_ISA_H
