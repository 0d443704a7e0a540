// carve runtime, CUDA: the fused implicit-GEMM convolution (groups 1) on tensor cores, one launch per
// convolution: y = act(conv(x, W) + b) + residual, the same contract as carve_cu_conv2d (carve_cuda.h),
// for T = float (TF32 tensor cores, sm_80 and newer) and T = __half (fp16 operands, sm_70 and newer),
// both accumulating in float32. Not part of the API; C++ only; included by carve_cuda_elem.h after its
// loads and stores (carve_cu_ld, carve_cu_store_act, which the epilogue uses). Chosen per context by
// carve_cu_ctx_set_conv_impl (CARVE_CU_CONV_FUSED); the default stays the cuBLAS path (im2col + GEMM +
// epilogue) until a GPU has timed both (docs/backends/cuda.md, "The fused convolution").
//
// The GEMM: rows are output pixels (M = batch oh ow), columns output channels (N = cout), the reduction runs
// over k = (ky kw + kx) cin + i (K = kh kw cin), the OHWI weights' order, so W is the (N, K) row-major
// matrix as stored and the input tile is gathered from the NHWC input directly (no im2col buffer):
//   A[p][k] = x[oy s - pad + ky][ox s - pad + kx][i]  (0 outside the input: padding),
//   B[k][o] = W[o][k].
// One block of CARVE_CU_IGEMM_THREADS (4 warps, 2 x 2) computes a BM x BN = 64 x 64 tile of Y; each warp
// a 32 x 32 quarter as 2 x 2 wmma accumulators of 16 x 16. Per step of BK = 32 along K, the threads copy
// A (64 x 32) and B (32 x 64, stored as W's rows: matrix_b col_major) into shared memory, zero-filling
// rows past the pixels, columns past cout and k past K and the padding taps, so that every fragment is
// whole; TF32 operands are rounded there once (wmma::__float_to_tf32: cvt.rna, as cuBLAS' TF32 kernels
// convert theirs). After the last step the accumulators go to a shared 64 x 64 float tile and the
// epilogue reads it: v = acc + b[o], SiLU, + residual, one store of T per output (one rounding for
// __half: the cuBLAS path rounds the GEMM's result to half before the epilogue, this one does not).
//
// Builds with nvcc for every architecture of tests/cuda/tests.cmake: the TF32 kernel's body needs
// sm_80 (wmma::precision::tf32) and is empty below (never launched there: carve_cu_ctx_set_conv_math
// leaves conv_tf32 at 0 before sm_80, and the float path is fused only with TF32); the half kernel
// needs sm_70. Under the emulation (tests/cuda/cuda_emu.h) wmma is the host model described there.

#ifndef CARVE_CUDA_IGEMM_H
#define CARVE_CUDA_IGEMM_H

#include "carve_cuda_impl.h"

#ifndef CARVE_CUDA_EMULATION
#include <cuda_fp16.h>
#include <mma.h>
#endif

#define CARVE_CU_IGEMM_BM 64       // output pixels per block
#define CARVE_CU_IGEMM_BN 64       // output channels per block
#define CARVE_CU_IGEMM_BK 32       // reduction step
#define CARVE_CU_IGEMM_THREADS 128  // 4 warps, 2 x 2 over the 64 x 64 tile
#define CARVE_CU_IGEMM_CLD (CARVE_CU_IGEMM_BN + 4)  // the float result tile's row pitch (16-byte multiple)

// Whether TF32 wmma operands exist for the architecture being compiled (always on the host pass and
// under emulation, where only the runtime checks decide). Half operands need sm_70, below every
// architecture carve compiles for (tests/cuda/tests.cmake: sm_75 and newer).
#if defined(CARVE_CUDA_EMULATION) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define CARVE_CU_IGEMM_HAS_TF32 1
#else
#define CARVE_CU_IGEMM_HAS_TF32 0
#endif
#if !defined(CARVE_CUDA_EMULATION) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700
#error "carve_cuda_igemm.h: the wmma convolution needs sm_70 or newer (carve compiles for sm_75 and newer)"
#endif

// The wmma shape and operand type of each storage type T: `ok` whether the kernel exists for the
// architecture compiled; kstep the wmma k; `pad` keeps a shared row a multiple of 16 bytes (wmma's
// ldm) and staggers rows across banks; to_op the operand as the tensor cores take it.
template <typename T>
struct carve_cu_igemm_traits;

template <>
struct carve_cu_igemm_traits<float> {
#if CARVE_CU_IGEMM_HAS_TF32
  static constexpr bool ok = true;
  typedef nvcuda::wmma::precision::tf32 op;  // fragments of TF32 values stored as float
#else
  static constexpr bool ok = false;
  typedef float op;  // unused: no TF32 before sm_80
#endif
  static constexpr int kstep = 8;  // m16n16k8
  static constexpr int pad = 4;
  static __device__ __forceinline__ float zero() { return 0.0f; }
  static __device__ __forceinline__ float to_op(float v) {
#if CARVE_CU_IGEMM_HAS_TF32
    return nvcuda::wmma::__float_to_tf32(v);  // cvt.rna
#else
    return v;
#endif
  }
};

template <>
struct carve_cu_igemm_traits<__half> {
  static constexpr bool ok = true;
  typedef __half op;
  static constexpr int kstep = 16;  // m16n16k16
  static constexpr int pad = 8;
  static __device__ __forceinline__ __half zero() { return __float2half_rn(0.0f); }
  static __device__ __forceinline__ __half to_op(__half v) { return v; }
};

// The 64 x 64 tile of Y at (blockIdx.x BM, blockIdx.y BN), with its epilogue. (An empty kernel where
// traits<T>::ok is false: never launched, carve_cu_igemm_applies.)
template <typename T>
__global__ void __launch_bounds__(CARVE_CU_IGEMM_THREADS)
    carve_cu_igemm_kernel(const T* __restrict__ x, size_t in_stride, uint32_t h, uint32_t w, uint32_t cin,
                          uint32_t kh, uint32_t kw, uint32_t stride, uint32_t pad, uint32_t ow, uint32_t opix,
                          uint32_t pixels, uint32_t cout, const T* __restrict__ weight, const T* __restrict__ bias,
                          const T* __restrict__ residual, size_t res_stride, int silu, T* __restrict__ y,
                          size_t out_stride) {
  typedef carve_cu_igemm_traits<T> tr;
  if constexpr (tr::ok) {
    namespace wm = nvcuda::wmma;
    typedef typename tr::op op;
    constexpr int BM = CARVE_CU_IGEMM_BM, BN = CARVE_CU_IGEMM_BN, BK = CARVE_CU_IGEMM_BK;
    constexpr int LD = BK + tr::pad;  // row pitch of the operand tiles, in T
    constexpr int CLD = CARVE_CU_IGEMM_CLD;
    alignas(32) __shared__ T a_tile[BM * LD];  // A[p][k] of the step: row p, pitch LD
    alignas(32) __shared__ T b_tile[BN * LD];  // W[o][k] of the step: row o (matrix_b col_major)
    alignas(32) __shared__ float c_tile[BM * CLD];
    const unsigned t = threadIdx.x;
    const uint32_t m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const size_t k_total = (size_t)kh * kw * cin;
    const unsigned warp = t / 32, wm0 = (warp / 2) * 32, wn0 = (warp % 2) * 32;  // the warp's 32 x 32 quarter
    wm::fragment<wm::accumulator, 16, 16, tr::kstep, float> acc[2][2];
    for (int i = 0; i < 2; i++) {
      for (int j = 0; j < 2; j++) wm::fill_fragment(acc[i][j], 0.0f);
    }
    // The block's rows: the input position of tap (0, 0) of output pixel m0 + r (the divisions by ow once
    // per block, not per element and step); a row past the pixels reads as above the image. Batches: row p
    // is pixel p % opix of image p / opix, whose input starts row_img[r] elements into x.
    __shared__ long long row_y0[BM], row_x0[BM];
    __shared__ size_t row_img[BM];
    for (int r = (int)t; r < BM; r += CARVE_CU_IGEMM_THREADS) {
      const uint32_t p = (m0 + (uint32_t)r) % opix;
      row_img[r] = (size_t)((m0 + (uint32_t)r) / opix) * h * w * in_stride;
      row_y0[r] = m0 + (uint32_t)r < pixels ? (long long)(p / ow) * stride - pad : -(long long)kh - 1;
      row_x0[r] = m0 + (uint32_t)r < pixels ? (long long)(p % ow) * stride - pad : 0;
    }
    __syncthreads();
    static_assert(CARVE_CU_IGEMM_THREADS % BK == 0, "a thread fills one column of A every step");
    for (size_t k0 = 0; k0 < k_total; k0 += BK) {
      // A: thread t fills column t % BK of rows t / BK, + 4, ...: consecutive threads, consecutive k
      // (consecutive input channels of one tap: coalesced). Its k, so its tap and channel, is one per step.
      const int c = (int)(t % BK);
      const size_t k = k0 + (size_t)c;
      const uint32_t tap = k < k_total ? (uint32_t)(k / cin) : 0, i = k < k_total ? (uint32_t)(k % cin) : 0;
      const long long ky = tap / kw, kx = tap % kw;
      for (int r = (int)(t / BK); r < BM; r += CARVE_CU_IGEMM_THREADS / BK) {
        T v = tr::zero();
        const long long iy = row_y0[r] + ky, ix = row_x0[r] + kx;
        if (k < k_total && iy >= 0 && iy < (long long)h && ix >= 0 && ix < (long long)w) {
          v = tr::to_op(x[row_img[r] + ((size_t)iy * w + (size_t)ix) * in_stride + i]);
        }
        a_tile[r * LD + c] = v;
      }
      // B: W's rows n0 .. n0 + BN, columns k0 .. k0 + BK (consecutive threads, consecutive k).
      for (int e = (int)t; e < BN * BK; e += CARVE_CU_IGEMM_THREADS) {
        const int r = e / BK, c = e % BK;
        const size_t k = k0 + (size_t)c;
        const uint32_t o = n0 + (uint32_t)r;
        b_tile[r * LD + c] = o < cout && k < k_total ? tr::to_op(weight[(size_t)o * k_total + k]) : tr::zero();
      }
      __syncthreads();
      for (int kk = 0; kk < BK; kk += tr::kstep) {
        wm::fragment<wm::matrix_a, 16, 16, tr::kstep, op, wm::row_major> fa[2];
        wm::fragment<wm::matrix_b, 16, 16, tr::kstep, op, wm::col_major> fb[2];
        for (int i = 0; i < 2; i++) {
          wm::load_matrix_sync(fa[i], a_tile + (wm0 + 16 * i) * LD + kk, LD);
          wm::load_matrix_sync(fb[i], b_tile + (wn0 + 16 * i) * LD + kk, LD);
        }
        for (int i = 0; i < 2; i++) {
          for (int j = 0; j < 2; j++) wm::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
      }
      __syncthreads();  // the tiles are refilled next step
    }
    for (int i = 0; i < 2; i++) {
      for (int j = 0; j < 2; j++) {
        wm::store_matrix_sync(c_tile + (wm0 + 16 * i) * CLD + wn0 + 16 * j, acc[i][j], CLD, wm::mem_row_major);
      }
    }
    __syncthreads();
    // Epilogue: consecutive threads, consecutive output channels of a pixel.
    for (int e = (int)t; e < BM * BN; e += CARVE_CU_IGEMM_THREADS) {
      const int r = e / BN, c = e % BN;
      const uint32_t p = m0 + (uint32_t)r, o = n0 + (uint32_t)c;
      if (p < pixels && o < cout) {
        carve_cu_store_act(y, (size_t)p * out_stride + o, c_tile[r * CLD + c] + carve_cu_ld(bias, o), silu,
                           residual, (size_t)p * res_stride + o);
      }
    }
  }
}

// Whether carve_cu_conv2d_t takes the fused kernel for this convolution: groups 1, the context asks for
// it (carve_cu_ctx_set_conv_impl) and its math has tensor cores for T (float: TF32 on, sm_80+; half:
// the request alone, set only on sm_70+), the sizes fit the kernel's 32-bit pixel and channel indices.
template <typename T>
static inline int carve_cu_igemm_applies(const carve_cu_ctx* ctx, const carve_cu_conv* c, size_t pixels) {
  const int math = sizeof(T) == 2 ? 1 : ctx->conv_tf32;
  return ctx->conv_fused && math && c->groups == 1 && pixels <= 0x7FFFFFFFu && c->cout <= 0x7FFFFFFFu &&
         (pixels + CARVE_CU_IGEMM_BM - 1) / CARVE_CU_IGEMM_BM <= 0x7FFFFFFFu &&
         (c->cout + CARVE_CU_IGEMM_BN - 1) / CARVE_CU_IGEMM_BN <= 65535u;
}

// One launch: the whole convolution with its epilogue (arguments checked by the caller); `pixels` the
// output pixels of the batch, opix those of one image.
template <typename T>
static carve_status carve_cu_igemm_conv(const carve_cu_ctx* ctx, const carve_cu_conv* c, const T* x, const T* weight,
                                        const T* bias, const T* residual, T* y, size_t ow, size_t opix,
                                        size_t pixels) {
  const dim3 grid((unsigned)((pixels + CARVE_CU_IGEMM_BM - 1) / CARVE_CU_IGEMM_BM),
                  (unsigned)((c->cout + CARVE_CU_IGEMM_BN - 1) / CARVE_CU_IGEMM_BN));
  CARVE_LAUNCH(carve_cu_igemm_kernel<T>, grid, CARVE_CU_IGEMM_THREADS, ctx->stream, x, c->in_stride, c->h, c->w,
               c->cin, c->kh, c->kw, c->stride, c->pad, (uint32_t)ow, (uint32_t)opix, (uint32_t)pixels, c->cout,
               weight, bias, residual, c->res_stride, c->act == CARVE_CU_ACT_SILU, y, c->out_stride);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

#endif  // CARVE_CUDA_IGEMM_H
