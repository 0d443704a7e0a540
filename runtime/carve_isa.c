// carve runtime: instruction-set detection (see carve_isa.h).

#include "carve_isa.h"

carve_isa carve_isa_detect(void) {
#if defined(CARVE_HAVE_X86_SIMD)
  if (__builtin_cpu_supports("avx512f")) {
    return CARVE_ISA_AVX512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return CARVE_ISA_AVX2;
  }
  return CARVE_ISA_PORTABLE;
#elif defined(CARVE_HAVE_NEON)
  return CARVE_ISA_NEON;
#else
  return CARVE_ISA_PORTABLE;
#endif
}

const char* carve_isa_name(carve_isa isa) {
  switch (isa) {
    case CARVE_ISA_PORTABLE:
      return "portable";
    case CARVE_ISA_AVX2:
      return "AVX2+FMA";
    case CARVE_ISA_AVX512:
      return "AVX-512";
    case CARVE_ISA_NEON:
      return "NEON";
  }
  return "unknown";
}
