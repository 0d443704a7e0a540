// carve runtime, internal: carve_q8conv's AVX-512 VNNI and AMX variants (carve_q8conv_avx512.c), each a full entry
// point with carve_q8conv_fn's signature; gathered by carve_q8conv_isa.h for the selector, the tests and the benches. Only
// the variants this build can compile are declared; the *_ready functions exist in every build (0 where the
// variant does not).

#ifndef CARVE_Q8CONV_AVX512_H
#define CARVE_Q8CONV_AVX512_H

#include "carve_q8conv.h"  // carve_isa.h: CARVE_HAVE_X86_SIMD, CARVE_HAVE_NEON

#ifdef __cplusplus
extern "C" {
#endif

#ifdef CARVE_HAVE_X86_SIMD
carve_status carve_q8conv__avx512vnni(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                      size_t slots, pthreadpool_t pool);
carve_status carve_q8conv__amx(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                               size_t slots, pthreadpool_t pool);
// The two AVX-512 variants with the table looked up a byte at a time even on a CPU with VBMI (for the tests: the
// path of CPUs with VNNI but no VBMI, such as Cascade Lake).
carve_status carve_q8conv__avx512vnni_novbmi(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena,
                                             void* scratch, size_t slots, pthreadpool_t pool);
carve_status carve_q8conv__amx_novbmi(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                      size_t slots, pthreadpool_t pool);
// The AMX variant with its choice of A fixed (for the tests and the benches): amx_packed always packs A (im2col
// blocks of 64-byte K blocks), amx_implicit reads A in place (implicit GEMM) wherever the shapes allow it, not only
// where it is estimated to pay (carve_q8conv.c's amx_plan).
carve_status carve_q8conv__amx_packed(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                      size_t slots, pthreadpool_t pool);
carve_status carve_q8conv__amx_implicit(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                        size_t slots, pthreadpool_t pool);
#endif

// 1 where this CPU and build can run the variant: AVX-512 F, BW, VL and VNNI (carve_q8conv_vnni_ready), AMX-INT8
// with those and the OS's permission for the tile data, which carve_q8conv_amx_ready asks for (once per process
// is enough; asking again is harmless).
int carve_q8conv_vnni_ready(void);
// Likewise AVX2 + FMA (carve_q8conv__avx2), and those with AVX-VNNI (carve_q8conv__avxvnni; 0 where this build
// lacks that variant).
int carve_q8conv_amx_ready(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8CONV_AVX512_H
