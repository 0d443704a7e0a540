// carve runtime, internal: carve_q8_run_pool's aarch64 NEON variant (carve_q8_pool_neon.c), a full entry point with
// carve_q8_run_pool's signature; gathered by carve_q8_pool_isa.h for the selector, the tests and the benches.
// Declared only in aarch64 builds; it has no *_ready function: every aarch64 CPU has NEON.

#ifndef CARVE_Q8_POOL_NEON_H
#define CARVE_Q8_POOL_NEON_H

#include "carve_q8_pool.h"  // carve_isa.h: CARVE_HAVE_X86_SIMD, CARVE_HAVE_NEON

#ifdef __cplusplus
extern "C" {
#endif

#ifdef CARVE_HAVE_NEON
// aarch64 NEON (every aarch64 CPU).
carve_status carve_q8_pool__neon(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, pthreadpool_t pool);
#endif

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8_POOL_NEON_H
