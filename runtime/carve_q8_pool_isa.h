// carve runtime, internal: the variants of carve_q8_pool (carve_q8_pool.h), each a full entry point with
// carve_q8_run_pool's signature, for the selector, the tests and the benches. A variant runs only where
// carve_q8_pool_avx512_ready() (and, for avx512vbmi, carve_q8_pool_vbmi_ready(); for avx2,
// carve_q8_pool_avx2_ready()) said 1 (neon: any aarch64 CPU); only the variants this
// build can compile are declared.

#ifndef CARVE_Q8_POOL_ISA_H
#define CARVE_Q8_POOL_ISA_H

#include "carve_q8_pool.h"
#include "carve_q8_pool_avx2.h"    // one header per variant file: the include closure of a package
#include "carve_q8_pool_avx512.h"  // (generator/carve/backends/emit_c.py, runtime_closure) brings each
#include "carve_q8_pool_neon.h"    // one's source, whatever the target

#ifdef __cplusplus
extern "C" {
#endif

carve_status carve_q8_pool__portable(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena,
                                     pthreadpool_t pool);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8_POOL_ISA_H
