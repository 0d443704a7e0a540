// carve runtime: carve_q8_run_pool's instruction-set variants (issue 19): the int8 ops of an xnnpack package that
// carve_q8conv does not run (depthwise convolutions with their SiLU table, residual adds, the image's and the
// float outputs' quantize, dequantize, max pool, copies, upsample), on the thread pool, bit for bit carve_q8_run
// and so generator/carve/quant/arith.py.
//
// Variants (carve_q8_pool_isa.h names them):
//   avx512vbmi  x86-64 with AVX-512 F, BW, VL and VBMI: the AVX-512 loops below, the SiLU table looked up with
//               VPERMI2B;
//   avx512      x86-64 with AVX-512 F, BW and VL (no VBMI: Skylake-SP, Cascade Lake): the same loops, the table
//               looked up a byte at a time;
//   avx2        x86-64 with AVX2 + FMA (no AVX-512 BW / VL): the same loops at half the width, the table a byte
//               at a time;
//   neon        aarch64 (NEON): the same ops, 16 channels or elements at a time, the table by TBL / TBX;
//   portable    carve_q8_run_pool itself (carve_q8.c, plain C11): every other CPU, and the reference.
// The AVX-512, AVX2 and NEON variants have loops for: CONV with groups == cin == cout (depthwise, any kernel of at most
// CARVE_Q8_POOL_MAX_TAPS taps, stride and padding, with or without the table), ADD in carve_q8.c's int32 form
// (shift 17..47, multipliers below 2^31 - 2^15: every add the quantization pass makes), QUANTIZE, DEQUANTIZE and
// MAXPOOL; any other op (dense and grouped convolutions, ADD's int64 form, COPY, UPSAMPLE2X, larger kernels) runs
// carve_q8.c's loops. Every variant takes the same descriptors with carve_q8_run_pool's argument checks, tiles
// and refusals, and writes the same bytes on any number of threads.

#ifndef CARVE_Q8_POOL_H
#define CARVE_Q8_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "carve_isa.h"
#include "carve_q8.h"
#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// The most taps (kh * kw) of a depthwise CONV the AVX-512, AVX2 and NEON loops take (7 x 7).
#define CARVE_Q8_POOL_MAX_TAPS 49

// carve_q8_run_pool's signature and contract (carve_q8.h).
typedef carve_status (*carve_q8_pool_fn)(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena,
                                         pthreadpool_t pool);

// The best variant for this CPU and build given isa (from carve_isa_detect()): for CARVE_ISA_AVX512 the
// avx512vbmi one where the CPU has VBMI, else the avx512 one (both need AVX-512 BW and VL too; without them, as
// for CARVE_ISA_AVX2); for CARVE_ISA_AVX2 the avx2 one where the CPU has AVX2 + FMA; for CARVE_ISA_NEON (aarch64
// builds) the neon one; the portable one (carve_q8_run_pool) for any other isa. Never NULL. A package calls it
// once, at create.
carve_q8_pool_fn carve_q8_pool_select(carve_isa isa);

// "avx512vbmi", "avx512", "avx2", "neon", "portable" for the variants carve_q8_pool_select returns; "unknown"
// otherwise.
const char* carve_q8_pool_name(carve_q8_pool_fn fn);

// carve_q8_pool_select(carve_isa_detect()) of the op, selecting on every call (tools, benches).
carve_status carve_q8_pool(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, pthreadpool_t pool);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8_POOL_H
