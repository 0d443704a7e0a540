// carve runtime, internal: carve_q8conv's AVX2 and AVX-VNNI variants (carve_q8conv_avx2.c), each a full entry
// point with carve_q8conv_fn's signature; gathered by carve_q8conv_isa.h for the selector, the tests and the benches. Only
// the variants this build can compile are declared; the *_ready functions exist in every build (0 where the
// variant does not).

#ifndef CARVE_Q8CONV_AVX2_H
#define CARVE_Q8CONV_AVX2_H

#include "carve_q8conv.h"  // carve_isa.h: CARVE_HAVE_X86_SIMD, CARVE_HAVE_NEON

#ifdef __cplusplus
extern "C" {
#endif

#ifdef CARVE_HAVE_X86_SIMD
// AVX2 + FMA (VPMADDWD on sign-extended 16-bit operands), for CPUs without AVX-512 VNNI.
carve_status carve_q8conv__avx2(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                size_t slots, pthreadpool_t pool);
// AVX2 + FMA and AVX-VNNI (VEX-encoded VPDPBUSD on ymm: Intel since Alder Lake and Sapphire Rapids), where the
// compiler has it (GCC >= 11, clang >= 12: CARVE_Q8CONV_HAVE_AVXVNNI).
#if (defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11)
#define CARVE_Q8CONV_HAVE_AVXVNNI 1
carve_status carve_q8conv__avxvnni(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                   size_t slots, pthreadpool_t pool);
#endif
#endif

// 1 where this CPU and build can run the variant: AVX2 + FMA (carve_q8conv__avx2), and those with AVX-VNNI
// (carve_q8conv__avxvnni; 0 where this build
// lacks that variant).
int carve_q8conv_avx2_ready(void);
int carve_q8conv_avxvnni_ready(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8CONV_AVX2_H
