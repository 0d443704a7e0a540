// carve runtime, CUDA: helpers shared by the carve_cuda_*.cu files (not part of the API;
// a cuda package copies it with them).

#ifndef CARVE_CUDA_IMPL_H
#define CARVE_CUDA_IMPL_H

#include <math.h>
#include <string.h>

#include "carve_cuda.h"

#ifndef CARVE_CUDA_EMULATION
#include <cuda_fp16.h>
#endif

// Threads per block of the element-wise kernels, and the most blocks of a grid-stride
// launch (about two waves of 2048 threads on the SMs of the largest GPUs here).
#define CARVE_CU_THREADS 256
#define CARVE_CU_MAX_BLOCKS 1024

// Blocks of a grid-stride launch over `n` items (at least 1).
static inline unsigned carve_cu_blocks(size_t n) {
  const size_t b = (n + CARVE_CU_THREADS - 1) / CARVE_CU_THREADS;
  return b == 0 ? 1u : (b > CARVE_CU_MAX_BLOCKS ? (unsigned)CARVE_CU_MAX_BLOCKS : (unsigned)b);
}

// Every launch is followed by this: a launch error (bad configuration, an earlier
// asynchronous fault) becomes CARVE_ERR_BACKEND.
#define CARVE_CU_CHECK_LAUNCH()              \
  do {                                       \
    if (cudaGetLastError() != cudaSuccess) { \
      return CARVE_ERR_BACKEND;              \
    }                                        \
  } while (0)

#define CARVE_CU_CHECK_BLAS(call)              \
  do {                                         \
    if ((call) != CUBLAS_STATUS_SUCCESS) {     \
      return CARVE_ERR_BACKEND;                \
    }                                          \
  } while (0)

// Before every cuBLAS call: a context whose handle is shared with other lanes (carve_cu_ctx_lane) binds it
// to its own stream and workspace (cublasSetStream resets the workspace: set it after); other contexts
// keep the binding init made.
static inline cublasStatus_t carve_cu_blas_bind(const carve_cu_ctx* ctx) {
  if (!ctx->rebind) {
    return CUBLAS_STATUS_SUCCESS;
  }
  const cublasStatus_t st = cublasSetStream(ctx->blas, ctx->stream);
  return st != CUBLAS_STATUS_SUCCESS ? st : cublasSetWorkspace(ctx->blas, ctx->blas_workspace, ctx->blas_workspace_bytes);
}

// Fully unrolls the loop that follows under nvcc (a per-thread array indexed by the loop variable
// stays in registers); the emulation's host compiler runs it as written.
#ifdef __CUDACC__
#define CARVE_CU_UNROLL _Pragma("unroll")
#else
#define CARVE_CU_UNROLL
#endif

// Unroll the loop that follows (nvcc; host compilers, the emulation, take it as written).
#ifdef __CUDACC__
#define CARVE_CU_UNROLL _Pragma("unroll")
#else
#define CARVE_CU_UNROLL
#endif

// Grid-stride loop over [0, n) with 64-bit indices.
#define CARVE_CU_FOR(i, n)                                                              \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)(n); \
       i += (size_t)gridDim.x * blockDim.x)

// Grid-stride loop over [0, n) with 32-bit indices, n <= CARVE_CU_FOR32_MAX: where a 64-bit index would cost a
// software division per element. The bound keeps i + the stride (at most CARVE_CU_MAX_BLOCKS x 1024 threads) from
// wrapping past 2^32 back under n.
#define CARVE_CU_FOR32_MAX ((size_t)1 << 31)
#define CARVE_CU_FOR32(i, n)                                                                   \
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (uint32_t)(n); i += gridDim.x * blockDim.x)

// Element loads and stores over the storage type (float, or __half in the fp16 packages): a load
// widens to float (exact), a store rounds once to nearest even for __half; for float both are
// the plain access.
static __device__ __forceinline__ float carve_cu_ld(const float* p, size_t i) { return p[i]; }
static __device__ __forceinline__ float carve_cu_ld(const __half* p, size_t i) { return __half2float(p[i]); }
static __device__ __forceinline__ void carve_cu_st(float* p, size_t i, float v) { p[i] = v; }
static __device__ __forceinline__ void carve_cu_st(__half* p, size_t i, float v) { p[i] = __float2half_rn(v); }

// cuBLAS takes int sizes and leading dimensions.
static inline int carve_cu_fits_int(size_t v) { return v <= (size_t)0x7FFFFFFF; }

// sigmoid(x) = 1 / (1 + exp(-x)) in float, as carve_post.c (and torch.sigmoid).
static __device__ __forceinline__ float carve_cu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// SiLU(x) = x / (1 + exp(-x)) in float, as carve_epilogue (whose exp is SLEEF's; this
// one the device's expf: the two agree to a few ulp).
static __device__ __forceinline__ float carve_cu_silu(float x) { return x / (1.0f + expf(-x)); }

#endif  // CARVE_CUDA_IMPL_H
