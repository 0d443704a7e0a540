// carve runtime: the epilogue, y = act(y) + residual, over a strided NHWC
// tensor (the SiLU and residual pass after an XNNPACK operator).
//
// Every tensor is NHWC float32 with batch 1 and a row stride in floats
// (stride >= channels), see carve_rt.h. No function allocates; the work is split
// over `pool` (NULL: serial) with bit-identical results for any number of threads.

#ifndef CARVE_EPILOGUE_H
#define CARVE_EPILOGUE_H

#include "carve_isa.h"
#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// y = act(y) + residual, in place over (pixels, channels) of y.
// residual may be NULL (no addition) and may not alias y.
// SiLU is x / (1 + exp(-x)) in float, as PyTorch's CPU kernel evaluates it, with
// exp by SLEEF's expf_u10 algorithm like PyTorch's, within 1.8e-7 relative of the
// exact value. On x86-64 CPUs with AVX-512 or AVX2 + FMA it runs as intrinsics
// with FMA (as torch's vectorised SiLU does; bit-equal to it on AVX-512, within
// 4 ulp of the portable loop); elsewhere the portable loop vectorises (-O3).
// act CARVE_ACT_NONE without a residual does nothing. CARVE_ERR_INVALID_ARGUMENT
// (nothing written) for a NULL y, empty sizes, y_stride < channels, a residual
// with r_stride < channels or an unknown act.
carve_status carve_epilogue(float* y, size_t y_stride, const float* residual, size_t r_stride,
                            size_t pixels, size_t channels, carve_act act, pthreadpool_t pool);

// carve_epilogue of one instruction set; carve_epilogue_select(isa) returns the
// best variant this build has for isa (never NULL; isa from carve_isa_detect()).
typedef carve_status (*carve_epilogue_fn)(float* y, size_t y_stride, const float* residual, size_t r_stride,
                                          size_t pixels, size_t channels, carve_act act, pthreadpool_t pool);
carve_epilogue_fn carve_epilogue_select(carve_isa isa);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_EPILOGUE_H
