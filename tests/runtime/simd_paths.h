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
