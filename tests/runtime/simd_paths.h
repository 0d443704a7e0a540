// The instruction-set variants of the runtime kernels that the tests run one by one, indexed by carve_isa
// (runtime/carve_isa.h): a test keeps a table `k_variant[CARVE_TEST_ISAS]` of its kernel's variants from the
// family's internal header (NULL where this build has none) and runs each one this CPU has.
#ifndef CARVE_TEST_SIMD_PATHS_H
#define CARVE_TEST_SIMD_PATHS_H

#include "carve_isa.h"

#define CARVE_TEST_ISAS 4  // CARVE_ISA_PORTABLE .. CARVE_ISA_NEON

// Whether this CPU runs the variants of isa (given that this build has them): the portable one always; on
// x86-64 those up to what carve_isa_detect() found (a CPU with AVX-512 has AVX2 + FMA); NEON on aarch64.
static inline int have_isa(carve_isa isa) {
  const carve_isa cpu = carve_isa_detect();
  if (isa == CARVE_ISA_PORTABLE) {
    return 1;
  }
  if (isa == CARVE_ISA_NEON || cpu == CARVE_ISA_NEON) {
    return isa == cpu;
  }
  return isa <= cpu;
}

// The initializer of k_variant for kernel `fn`: fn__portable, and the x86-64 / NEON variants where this build
// has them (CARVE_TEST_NEON_VARIANT for a kernel with a NEON variant).
#ifdef CARVE_HAVE_X86_SIMD
#define CARVE_TEST_X86_VARIANTS(fn) [CARVE_ISA_AVX2] = fn##__avx2, [CARVE_ISA_AVX512] = fn##__avx512,
#else
#define CARVE_TEST_X86_VARIANTS(fn)
#endif
#ifdef CARVE_HAVE_NEON
#define CARVE_TEST_NEON_VARIANT(fn) [CARVE_ISA_NEON] = fn##__neon,
#else
#define CARVE_TEST_NEON_VARIANT(fn)
#endif
#define CARVE_TEST_VARIANTS(fn) {[CARVE_ISA_PORTABLE] = fn##__portable, CARVE_TEST_X86_VARIANTS(fn)}
#define CARVE_TEST_VARIANTS_NEON(fn) \
  {[CARVE_ISA_PORTABLE] = fn##__portable, CARVE_TEST_X86_VARIANTS(fn) CARVE_TEST_NEON_VARIANT(fn)}

// Whether this build (table: the test's k_variant) and this CPU have the variant of instruction set isa.
#define HAVE_VARIANT(table, isa) ((table)[(isa)] != NULL && have_isa((carve_isa)(isa)))

// Checks a kernel's selector against its table: for every instruction set, the variant of that set where the
// build has one, else the portable one; and the CPU's own.
#define CHECK_SELECT(select, k_variant)                                                                    \
  do {                                                                                                     \
    for (int isa_ = 0; isa_ < CARVE_TEST_ISAS; isa_++) {                                                   \
      CHECK_MSG((select)((carve_isa)isa_) ==                                                               \
                    ((k_variant)[isa_] != NULL ? (k_variant)[isa_] : (k_variant)[CARVE_ISA_PORTABLE]),     \
                "%s(%s) is not the expected variant", #select, carve_isa_name((carve_isa)isa_));           \
    }                                                                                                      \
  } while (0)

#endif
