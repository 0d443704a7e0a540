// carve runtime, internal: carve_q8conv's NEON (aarch64) variants (carve_q8conv_neon.c), each a full entry
// point with carve_q8conv_fn's signature; gathered by carve_q8conv_isa.h for the selector, the tests and the benches. Only
// the variants this build can compile are declared; the *_ready functions exist in every build (0 where the
// variant does not).

#ifndef CARVE_Q8CONV_NEON_H
#define CARVE_Q8CONV_NEON_H

#include "carve_q8conv.h"  // carve_isa.h: CARVE_HAVE_X86_SIMD, CARVE_HAVE_NEON

#ifdef __cplusplus
extern "C" {
#endif

#ifdef CARVE_HAVE_NEON
// aarch64 NEON (ARMv8.0: SMULL + SADALP on int8, exact), for every aarch64 CPU.
carve_status carve_q8conv__neon(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                size_t slots, pthreadpool_t pool);
// ARMv8.2 dot product (SDOT), where the compiler has it (CARVE_Q8CONV_HAVE_NEONDOT): a build for a target with it
// (__ARM_FEATURE_DOTPROD, e.g. -mcpu=cortex-a76 or -march=armv8.2-a+dotprod), or GCC >= 10 for any aarch64
// target (a function-level target attribute; the CPU is asked at run time: carve_q8conv_neondot_ready). Clang
// (14, tested) declares the intrinsics only for such a target: without one its build has no neondot variant.
#if defined(__ARM_FEATURE_DOTPROD) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10)
#define CARVE_Q8CONV_HAVE_NEONDOT 1
carve_status carve_q8conv__neondot(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                   size_t slots, pthreadpool_t pool);
#endif
#endif

// 1 where the neondot variant runs: this build has it and the CPU has the dot-product instructions (Linux:
// getauxval(AT_HWCAP) & HWCAP_ASIMDDP; elsewhere only a build for a target with them); 0 off aarch64.
int carve_q8conv_neondot_ready(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8CONV_NEON_H
