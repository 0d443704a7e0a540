// carve runtime, internal: the variants of the int8 convolution (carve_q8conv.h), each a full entry point with
// carve_q8conv_fn's signature, for the selector, the tests and the benches. A variant runs only where
// carve_q8conv_select would pick it or a better one (the AMX variant: after carve_q8conv_amx_ready() said 1);
// only the variants this build can compile are declared.

#ifndef CARVE_Q8CONV_ISA_H
#define CARVE_Q8CONV_ISA_H

#include "carve_q8conv.h"
#include "carve_q8conv_avx2.h"    // one header per variant file: the include closure of a package
#include "carve_q8conv_avx512.h"  // (generator/carve/backends/emit_c.py, runtime_closure) brings each
#include "carve_q8conv_neon.h"    // one's source, whatever the target

#ifdef __cplusplus
extern "C" {
#endif

carve_status carve_q8conv__portable(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                    size_t slots, pthreadpool_t pool);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8CONV_ISA_H
