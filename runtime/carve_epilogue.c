// carve runtime: the epilogue, y = act(y) + residual (see carve_epilogue.h).
//
// The instruction-set variants sit side by side in this file: the portable
// loops, and the AVX-512 and AVX2 + FMA SiLU loops (intrinsics of carve_simd.h);
// one driver checks the arguments and splits the work for all of them.

#include "carve_epilogue.h"
#include "carve_epilogue_isa.h"
#include "carve_simd.h"

// Elements one epilogue task touches, so that small tensors stay on one thread.
#define CARVE_EPILOGUE_TASK_ELEMENTS 16384

// y[i] = silu(y[i]) (+ r[i]) for i < count (r may be NULL): an instruction set's SiLU loop.
typedef void (*silu_run_fn)(float* y, const float* r, size_t count);

typedef struct epilogue_ctx {
  float* y;                // (pixels, channels), row stride y_stride
  size_t y_stride;
  const float* residual;   // (pixels, channels), row stride r_stride, or NULL
  size_t r_stride;
  size_t channels;
  carve_act act;
  silu_run_fn silu_run;    // the variant's SiLU loop (NULL: the portable loop)
} epilogue_ctx;

// ---- AVX-512 and AVX2 + FMA (SiLU by silu16_avx512 / silu8_avx2 of carve_simd.h)

#ifdef CARVE_HAVE_X86_SIMD
// y[i] = silu(y[i]) (+ r[i]) for i < count; the tail under a mask.
__attribute__((target("avx512f"))) static void silu_avx512(float* y, const float* r, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512 v = silu16_avx512(_mm512_loadu_ps(y + i));
    if (r != NULL) {
      v = _mm512_add_ps(v, _mm512_loadu_ps(r + i));
    }
    _mm512_storeu_ps(y + i, v);
  }
  if (i < count) {
    const __mmask16 k = (__mmask16)((1u << (count - i)) - 1u);
    __m512 v = silu16_avx512(_mm512_maskz_loadu_ps(k, y + i));
    if (r != NULL) {
      v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, r + i));
    }
    _mm512_mask_storeu_ps(y + i, k, v);
  }
}

__attribute__((target("avx2,fma"))) static void silu_avx2(float* y, const float* r, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 v = silu8_avx2(_mm256_loadu_ps(y + i));
    if (r != NULL) {
      v = _mm256_add_ps(v, _mm256_loadu_ps(r + i));
    }
    _mm256_storeu_ps(y + i, v);
  }
  if (i < count) {
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(count - i)), lanes);
    __m256 v = silu8_avx2(_mm256_maskload_ps(y + i, k));
    if (r != NULL) {
      v = _mm256_add_ps(v, _mm256_maskload_ps(r + i, k));
    }
    _mm256_maskstore_ps(y + i, k, v);
  }
}

#endif

// ---- Driver

// y[i] = act(y[i]) + r[i] for i < count (r may be NULL).
// SiLU by silu_run where the variant has one, else the portable loops.
static inline void epilogue_run(float* y, const float* r, size_t count, int act, silu_run_fn silu_run) {
  if (act && silu_run != NULL) {
    silu_run(y, r, count);
    return;
  }
  if (act && r != NULL) {
    for (size_t i = 0; i < count; i++) {
      y[i] = silu(y[i]) + r[i];
    }
  } else if (act) {
    for (size_t i = 0; i < count; i++) {
      y[i] = silu(y[i]);
    }
  } else if (r != NULL) {
    for (size_t i = 0; i < count; i++) {
      y[i] += r[i];
    }
  }
}

// y[p][c] = act(y[p][c]) + r[p][c] for pixels [start, start + count). Where the
// rows are back to back (stride == channels, for y and the residual), the tile is
// one run of count * channels elements: the vector loop and its constants are set
// up once rather than once per pixel, which matters for 8 to 32 channels.
CARVE_SIMD_CLONES static void epilogue_task(void* context, size_t start, size_t count) {
  const epilogue_ctx* ctx = context;
  const size_t channels = ctx->channels;
  const int act = ctx->act == CARVE_ACT_SILU;
  const silu_run_fn silu_run = ctx->silu_run;
  const float* residual = ctx->residual;
  if (ctx->y_stride == channels && (residual == NULL || ctx->r_stride == channels)) {
    epilogue_run(ctx->y + start * channels, residual != NULL ? residual + start * channels : NULL,
                 count * channels, act, silu_run);
    return;
  }
  for (size_t p = start; p < start + count; p++) {
    epilogue_run(ctx->y + p * ctx->y_stride, residual != NULL ? residual + p * ctx->r_stride : NULL,
                 channels, act, silu_run);
  }
}

// The variants' shared entry: checks the arguments, splits the pixels over the pool.
static carve_status epilogue_drive(float* y, size_t y_stride, const float* residual, size_t r_stride,
                                   size_t pixels, size_t channels, carve_act act, silu_run_fn silu_run,
                                   pthreadpool_t pool) {
  if (y == NULL || pixels == 0 || channels == 0 || y_stride < channels ||
      (residual != NULL && r_stride < channels) || (act != CARVE_ACT_NONE && act != CARVE_ACT_SILU)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (act == CARVE_ACT_NONE && residual == NULL) {
    return CARVE_OK;
  }
  epilogue_ctx ctx = {y, y_stride, residual, r_stride, channels, act, silu_run};
  const size_t tile = channels >= CARVE_EPILOGUE_TASK_ELEMENTS
                          ? 1
                          : CARVE_EPILOGUE_TASK_ELEMENTS / channels;
  carve_parallelize_1d_tile(pool, epilogue_task, &ctx, pixels, tile);
  return CARVE_OK;
}

// ---- Variants and selection

carve_status carve_epilogue__portable(float* y, size_t y_stride, const float* residual, size_t r_stride,
                                      size_t pixels, size_t channels, carve_act act, pthreadpool_t pool) {
  return epilogue_drive(y, y_stride, residual, r_stride, pixels, channels, act, NULL, pool);
}

#ifdef CARVE_HAVE_X86_SIMD
carve_status carve_epilogue__avx2(float* y, size_t y_stride, const float* residual, size_t r_stride,
                                  size_t pixels, size_t channels, carve_act act, pthreadpool_t pool) {
  return epilogue_drive(y, y_stride, residual, r_stride, pixels, channels, act, silu_avx2, pool);
}

carve_status carve_epilogue__avx512(float* y, size_t y_stride, const float* residual, size_t r_stride,
                                    size_t pixels, size_t channels, carve_act act, pthreadpool_t pool) {
  return epilogue_drive(y, y_stride, residual, r_stride, pixels, channels, act, silu_avx512, pool);
}
#endif

carve_epilogue_fn carve_epilogue_select(carve_isa isa) {
#ifdef CARVE_HAVE_X86_SIMD
  if (isa == CARVE_ISA_AVX512) {
    return carve_epilogue__avx512;
  }
  if (isa == CARVE_ISA_AVX2) {
    return carve_epilogue__avx2;
  }
#endif
  (void)isa;
  return carve_epilogue__portable;
}

carve_status carve_epilogue(float* y, size_t y_stride, const float* residual, size_t r_stride,
                            size_t pixels, size_t channels, carve_act act, pthreadpool_t pool) {
  return carve_epilogue_select(carve_isa_detect())(y, y_stride, residual, r_stride, pixels, channels, act, pool);
}
