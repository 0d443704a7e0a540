// carve runtime, internal: the variants of carve_q8_pool (carve_q8_pool.h), each a full entry point with
// carve_q8_run_pool's signature, for the selector, the tests and the benches. A variant runs only where
// carve_q8_pool_avx512_ready() (and, for avx512vbmi, carve_q8_pool_vbmi_ready(); for avx2,
// carve_q8_pool_avx2_ready()) said 1 (neon: any aarch64 CPU); only the variants this
// build can compile are declared.

#ifndef CARVE_Q8_POOL_ISA_H
#define CARVE_Q8_POOL_ISA_H

#include "carve_q8_pool.h"

#ifdef __cplusplus
extern "C" {
#endif

carve_status carve_q8_pool__portable(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena,
                                     pthreadpool_t pool);
#ifdef CARVE_HAVE_X86_SIMD
carve_status carve_q8_pool__avx512(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, pthreadpool_t pool);
carve_status carve_q8_pool__avx512vbmi(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena,
                                       pthreadpool_t pool);
// AVX2 + FMA (CPUs without AVX-512).
carve_status carve_q8_pool__avx2(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, pthreadpool_t pool);
#endif
#ifdef CARVE_HAVE_NEON
// aarch64 NEON (every aarch64 CPU).
carve_status carve_q8_pool__neon(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, pthreadpool_t pool);
#endif

// 1 where this CPU and build run the avx512 variant (AVX-512 F, BW and VL), and the avx512vbmi one (those and
// VBMI).
int carve_q8_pool_avx512_ready(void);
int carve_q8_pool_vbmi_ready(void);
// 1 where this CPU and build run the avx2 variant (AVX2 + FMA).
int carve_q8_pool_avx2_ready(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8_POOL_ISA_H
