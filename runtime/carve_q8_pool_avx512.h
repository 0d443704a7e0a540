// carve runtime, internal: carve_q8_run_pool's AVX-512 variants (carve_q8_pool_avx512.c), each a full entry point
// with carve_q8_run_pool's signature; gathered by carve_q8_pool_isa.h for the selector, the tests and the benches.
// Only the variants this build can compile are declared; the *_ready functions exist in every build (0 where the
// variant does not).

#ifndef CARVE_Q8_POOL_AVX512_H
#define CARVE_Q8_POOL_AVX512_H

#include "carve_q8_pool.h"  // carve_isa.h: CARVE_HAVE_X86_SIMD, CARVE_HAVE_NEON

#ifdef __cplusplus
extern "C" {
#endif

#ifdef CARVE_HAVE_X86_SIMD
// AVX-512 F, BW and VL, the table a byte at a time (no VBMI: Skylake-SP, Cascade Lake).
carve_status carve_q8_pool__avx512(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, pthreadpool_t pool);
// The same with the table looked up by VPERMI2B (AVX-512 VBMI).
carve_status carve_q8_pool__avx512vbmi(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena,
                                       pthreadpool_t pool);
#endif

// 1 where this CPU and build run the avx512 variant (AVX-512 F, BW and VL), and the avx512vbmi one (those and
// VBMI).
int carve_q8_pool_avx512_ready(void);
int carve_q8_pool_vbmi_ready(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8_POOL_AVX512_H
