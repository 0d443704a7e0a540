// carve runtime: carve_q8_run_pool's instruction-set variants (see carve_q8_pool.h): the portable variant and the
// choice of a variant for the CPU. The instruction-set variants are in carve_q8_pool_avx512.c (AVX-512, with and
// without VBMI), carve_q8_pool_avx2.c (AVX2 + FMA) and carve_q8_pool_neon.c (aarch64 NEON), each declared in the
// header of its name (carve_q8_pool_isa.h gathers them); carve_q8_pool_impl.h has what they share.
//
// carve_q8.c checks the arguments, resolves the views and splits the op into tiles (carve_q8_run_pool_loops); a
// variant is the item loops for the ops it takes (carve_q8_isa.h). The AVX-512, AVX2 and NEON loops compute
// carve_q8.c's integers and floats operation for operation (the same formulas, exact in any order where they are
// integer sums), so every byte is carve_q8_run's: tests/runtime/q8_vs_arith.py compares each variant with arith.py
// bit for bit, and q8_pool_vs_run.py with carve_q8_run on 1 to 7 threads.

#include "carve_q8_pool.h"
#include "carve_q8_isa.h"
#include "carve_q8_pool_isa.h"

// ---- Portable ------------------------------------------------------------------------------------------------

carve_status carve_q8_pool__portable(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena,
                                     pthreadpool_t pool) {
  return carve_q8_run_pool(d, blob, arena, pool);
}

// ---- Selection ------------------------------------------------------------------------------------------------

carve_q8_pool_fn carve_q8_pool_select(carve_isa isa) {
#ifdef CARVE_HAVE_X86_SIMD
  if (isa == CARVE_ISA_AVX512 && carve_q8_pool_avx512_ready()) {
    return carve_q8_pool_vbmi_ready() ? carve_q8_pool__avx512vbmi : carve_q8_pool__avx512;
  }
  if ((isa == CARVE_ISA_AVX2 || isa == CARVE_ISA_AVX512) && carve_q8_pool_avx2_ready()) {
    return carve_q8_pool__avx2;
  }
#endif
#ifdef CARVE_HAVE_NEON
  if (isa == CARVE_ISA_NEON) {
    return carve_q8_pool__neon;
  }
#endif
  (void)isa;
  return carve_q8_pool__portable;
}

const char* carve_q8_pool_name(carve_q8_pool_fn fn) {
#ifdef CARVE_HAVE_X86_SIMD
  if (fn == carve_q8_pool__avx512vbmi) {
    return "avx512vbmi";
  }
  if (fn == carve_q8_pool__avx512) {
    return "avx512";
  }
  if (fn == carve_q8_pool__avx2) {
    return "avx2";
  }
#endif
#ifdef CARVE_HAVE_NEON
  if (fn == carve_q8_pool__neon) {
    return "neon";
  }
#endif
  return fn == carve_q8_pool__portable ? "portable" : "unknown";
}

carve_status carve_q8_pool(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, pthreadpool_t pool) {
  return carve_q8_pool_select(carve_isa_detect())(d, blob, arena, pool);
}
