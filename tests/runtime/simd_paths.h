// The x86-64 instruction-set paths of the runtime kernels that tests run one by one: level 2 AVX-512, 1 AVX2 +
// FMA, 0 portable (silu_simd_level() of runtime/carve_ops.c). Include after carve_ops.c, whose static functions
// the test calls with an explicit level. (test_winograd.c has its own: on aarch64 its level 1 is NEON.)
#ifndef CARVE_TEST_SIMD_PATHS_H
#define CARVE_TEST_SIMD_PATHS_H

static const char* const k_path[3] = {"portable", "AVX2+FMA", "AVX-512"};

// Whether this CPU (and this build) has the path of that level.
static int have_level(int simd) {
#ifdef CARVE_SILU_X86
  return simd <= silu_simd_level();
#else
  return simd == 0;
#endif
}

#endif
