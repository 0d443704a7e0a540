// carve runtime, internal: carve_q8_run_pool's AVX2 variant (carve_q8_pool_avx2.c), a full entry point with
// carve_q8_run_pool's signature; gathered by carve_q8_pool_isa.h for the selector, the tests and the benches.
// Declared only where this build can compile it; carve_q8_pool_avx2_ready exists in every build (0 where the
// variant does not).

#ifndef CARVE_Q8_POOL_AVX2_H
#define CARVE_Q8_POOL_AVX2_H

#include "carve_q8_pool.h"  // carve_isa.h: CARVE_HAVE_X86_SIMD, CARVE_HAVE_NEON

#ifdef __cplusplus
extern "C" {
#endif

#ifdef CARVE_HAVE_X86_SIMD
// AVX2 + FMA (CPUs without AVX-512).
carve_status carve_q8_pool__avx2(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, pthreadpool_t pool);
#endif

// 1 where this CPU and build run the avx2 variant (AVX2 + FMA).
int carve_q8_pool_avx2_ready(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8_POOL_AVX2_H
