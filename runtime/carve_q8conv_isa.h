// carve runtime, internal: the variants of the int8 convolution (carve_q8conv.h), each a full entry point with
// carve_q8conv_fn's signature, for the selector, the tests and the benches. A variant runs only where
// carve_q8conv_select would pick it or a better one (the AMX variant: after carve_q8conv_amx_ready() said 1);
// only the variants this build can compile are declared.

#ifndef CARVE_Q8CONV_ISA_H
#define CARVE_Q8CONV_ISA_H

#include "carve_q8conv.h"

#ifdef __cplusplus
extern "C" {
#endif

carve_status carve_q8conv__portable(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                    size_t slots, pthreadpool_t pool);
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

// 1 where this CPU and build can run the variant: AVX-512 F, BW, VL and VNNI (carve_q8conv_vnni_ready), AMX-INT8
// with those and the OS's permission for the tile data, which carve_q8conv_amx_ready asks for (once per process
// is enough; asking again is harmless).
int carve_q8conv_vnni_ready(void);
// Likewise AVX2 + FMA (carve_q8conv__avx2), and those with AVX-VNNI (carve_q8conv__avxvnni; 0 where this build
// lacks that variant).
int carve_q8conv_avx2_ready(void);
int carve_q8conv_avxvnni_ready(void);
int carve_q8conv_amx_ready(void);
// 1 where the neondot variant runs: this build has it and the CPU has the dot-product instructions (Linux:
// getauxval(AT_HWCAP) & HWCAP_ASIMDDP; elsewhere only a build for a target with them); 0 off aarch64.
int carve_q8conv_neondot_ready(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8CONV_ISA_H
