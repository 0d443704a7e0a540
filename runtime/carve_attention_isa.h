// carve runtime, internal: the instruction-set variants of carve_attention
// (carve_attention.h), each a full entry point with its signature, for the selector and the
// tests. A variant runs only on a CPU that has its instruction set
// (carve_isa_detect()); only the variants this build can compile are declared.

#ifndef CARVE_ATTENTION_ISA_H
#define CARVE_ATTENTION_ISA_H

#include "carve_attention.h"

#ifdef __cplusplus
extern "C" {
#endif

carve_status carve_attention__portable(const float* qkv, size_t qkv_stride, size_t n, size_t heads, size_t key_dim,
    size_t head_dim, float scale, float* out, size_t out_stride, float* v_out, size_t v_stride, float* scratch,
    pthreadpool_t pool);
#ifdef CARVE_HAVE_X86_SIMD
carve_status carve_attention__avx2(const float* qkv, size_t qkv_stride, size_t n, size_t heads, size_t key_dim,
    size_t head_dim, float scale, float* out, size_t out_stride, float* v_out, size_t v_stride, float* scratch,
    pthreadpool_t pool);
carve_status carve_attention__avx512(const float* qkv, size_t qkv_stride, size_t n, size_t heads, size_t key_dim,
    size_t head_dim, float scale, float* out, size_t out_stride, float* v_out, size_t v_stride, float* scratch,
    pthreadpool_t pool);
#endif

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_ATTENTION_ISA_H
