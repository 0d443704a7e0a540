// carve runtime: the instruction sets the CPU kernels have variants for, and
// the one detection of the CPU's for the process.
//
// Each kernel family (carve_epilogue.h, carve_stem.h, carve_dwconv.h,
// carve_winograd.h, carve_attention.h) has a variant per instruction set it is
// written for, named <kernel>__portable, __avx2, __avx512, __neon (declared in
// the family's internal carve_<family>_isa.h), and a selector
// <kernel>_select(isa) returning the best variant this build has for an
// instruction set. A package calls carve_isa_detect() once at create and keeps
// the selected function pointers; the plain <kernel>() functions select on
// every call (for tools, benches and simple users).

#ifndef CARVE_ISA_H
#define CARVE_ISA_H

// What this build can compile (not what the CPU runs, see carve_isa_detect):
//   CARVE_HAVE_X86_SIMD  the AVX2 + FMA and AVX-512 variants (GCC or clang on
//                        x86-64, each variant under a target attribute, so the
//                        package still runs on any x86-64);
//   CARVE_HAVE_NEON      the NEON variants (aarch64, where NEON is always there).
#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target)
#define CARVE_HAVE_X86_SIMD 1
#endif
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define CARVE_HAVE_NEON 1
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum carve_isa {
  CARVE_ISA_PORTABLE = 0,  // C only (what the compiler makes of it for the build's target)
  CARVE_ISA_AVX2 = 1,      // x86-64 AVX2 + FMA
  CARVE_ISA_AVX512 = 2,    // x86-64 AVX-512F (such CPUs also have AVX2 + FMA)
  CARVE_ISA_NEON = 3,      // aarch64 NEON
} carve_isa;

// The best instruction set that both this CPU and this build have: on x86-64
// CARVE_ISA_AVX512 or CARVE_ISA_AVX2 when the CPU has them
// (__builtin_cpu_supports, which reads what libgcc's constructor found: no
// system call, cheap enough to call per kernel), on aarch64 CARVE_ISA_NEON,
// otherwise CARVE_ISA_PORTABLE.
carve_isa carve_isa_detect(void);

// "portable", "AVX2+FMA", "AVX-512" or "NEON"; "unknown" outside the enum. Never NULL.
const char* carve_isa_name(carve_isa isa);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_ISA_H
