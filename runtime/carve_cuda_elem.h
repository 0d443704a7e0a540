// carve runtime, CUDA: the kernels of carve_cuda.h that both precisions share, written once over
// the storage type T of the activations and weights (float: carve_cuda_ops.cu; __half:
// carve_cuda_f16.cu, --precision fp16). Not part of the API; C++ only; a cuda package copies it
// with the .cu files that include it.
//
// A kernel reads its elements with carve_cu_ld (widened to float; carve_cuda_impl.h), computes in
// float exactly as the float32 kernel always has, and stores with carve_cu_st (rounded once to
// nearest even for __half). For T = float both are the plain load and store, so the float32 kernels' arithmetic
// and results are unchanged. Kernels that only move elements (im2col, upsample, copy, gather)
// copy T as is.
//
// The host functions (carve_cu_*_t) check their arguments and launch; those with GEMMs take the
// GEMM of their precision as a function (cublasSgemm* in float32, cublasGemm*Ex with CUDA_R_16F
// in half), so that each file keeps its own cuBLAS calls and the public functions stay one-line
// wrappers (extern "C" for float, C++ overloads for __half: carve_cuda_f16.h).

#ifndef CARVE_CUDA_ELEM_H
#define CARVE_CUDA_ELEM_H

#include "carve_cuda_direct.h"
#include "carve_cuda_impl.h"

#include <initializer_list>

// ---- Host helpers ---------------------------------------------------------------------------

static inline int carve_cu_ctx_ok(const carve_cu_ctx* ctx) { return ctx != NULL && ctx->blas != NULL; }

// Output extent of a window `k` at `stride` over `in` padded by `pad` on both sides.
static inline size_t carve_cu_conv_out(uint32_t in, uint32_t k, uint32_t stride, uint32_t pad) {
  return ((size_t)in + 2 * (size_t)pad - k) / stride + 1;
}

static inline int carve_cu_conv_valid(const carve_cu_conv* c) {
  if (c == NULL || c->kh == 0 || c->kw == 0 || c->stride == 0 || c->cin == 0 || c->cout == 0 || c->h == 0 ||
      c->w == 0 || c->groups == 0) {
    return 0;
  }
  if ((size_t)c->h + 2 * (size_t)c->pad < c->kh || (size_t)c->w + 2 * (size_t)c->pad < c->kw) {
    return 0;
  }
  if (c->groups != 1 && !(c->groups == c->cin && c->groups == c->cout)) {
    return 0;  // only groups 1 or depthwise
  }
  return c->in_stride >= c->cin && c->out_stride >= c->cout &&
         (c->act == CARVE_CU_ACT_NONE || c->act == CARVE_CU_ACT_SILU);
}

// Images of a convolution's batch (carve_cu_conv.batch: 0 reads as 1).
static inline uint32_t carve_cu_batch(const carve_cu_conv* c) { return c->batch > 1 ? c->batch : 1u; }

static inline int carve_cu_conv_is_gemm(const carve_cu_conv* c) {
  return c->groups == 1 && c->kh == 1 && c->kw == 1 && c->stride == 1 && c->pad == 0;
}

// cuBLAS takes int sizes: the sizes and leading dimensions of one gemm_nt.
static inline int carve_cu_gemm_fits_int(size_t m, size_t n, size_t k, size_t lda, size_t ldb, size_t ldc) {
  return carve_cu_fits_int(m) && carve_cu_fits_int(n) && carve_cu_fits_int(k) && carve_cu_fits_int(lda) &&
         carve_cu_fits_int(ldb) && carve_cu_fits_int(ldc);
}

// Y^T (m, n) = A^T (m, k) B (k, n) through cublasGemmEx, all column-major: operands and result of
// `type`, accumulated as `compute`, alpha 1, beta 0 (the fp16 GEMM, and the fp32 one with TF32).
static inline carve_status carve_cu_gemm_nt_ex(const carve_cu_ctx* ctx, size_t m, size_t n, size_t k, const void* a,
                                               size_t lda, const void* b, size_t ldb, void* c, size_t ldc,
                                               cudaDataType_t type, cublasComputeType_t compute) {
  if (!carve_cu_gemm_fits_int(m, n, k, lda, ldb, ldc)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const float one = 1.0f, zero = 0.0f;
  CARVE_CU_CHECK_BLAS(carve_cu_blas_bind(ctx));
  CARVE_CU_CHECK_BLAS(cublasGemmEx(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n, (int)k, &one, a, type,
                                   (int)lda, b, type, (int)ldb, &zero, c, type, (int)ldc, compute,
                                   CUBLAS_GEMM_DEFAULT));
  return CARVE_OK;
}

// The GEMMs of a precision. Y^T (m, n) = A^T (m, k) B (k, n), all column-major, beta = 0: Y = X W^T
// in NHWC terms (carve_cuda_ops.cu's header comment).
template <typename T>
using carve_cu_gemm_nt_fn = carve_status (*)(const carve_cu_ctx* ctx, size_t m, size_t n, size_t k, const T* a,
                                             size_t lda, const T* b, size_t ldb, T* c, size_t ldc);

// C_i (m, n) = alpha op_a(A_i) B_i for i < batch, column-major, beta = 0 (cublas<t>gemmStridedBatched's
// arguments with op_b = N).
template <typename T>
using carve_cu_gemm_batched_fn = carve_status (*)(const carve_cu_ctx* ctx, cublasOperation_t op_a, int m, int n,
                                                  int k, float alpha, const T* a, int lda, long long stride_a,
                                                  const T* b, int ldb, long long stride_b, T* c, int ldc,
                                                  long long stride_c, int batch);

// ---- Convolution ----------------------------------------------------------------------------

// f(tap, pixel) for each tap (ky kw + kx) of the kh x kw window at (y0, x0) that falls inside the
// h x w input, pixel = iy w + ix the input pixel under it: row by row, left to right.
template <typename F>
static __device__ __forceinline__ void carve_cu_for_window(long long y0, long long x0, uint32_t kh, uint32_t kw,
                                                           uint32_t h, uint32_t w, F&& f) {
  for (uint32_t ky = 0; ky < kh; ky++) {
    const long long iy = y0 + ky;
    if (iy < 0 || iy >= (long long)h) {
      continue;
    }
    for (uint32_t kx = 0; kx < kw; kx++) {
      const long long ix = x0 + kx;
      if (ix >= 0 && ix < (long long)w) {
        f((size_t)ky * kw + kx, (size_t)iy * w + (size_t)ix);
      }
    }
  }
}

// col[q][(ky kw + kx) cin + i] = x_b[oy stride - pad + ky][ox stride - pad + kx][i] (0 outside),
// for the `count` output pixels q = p - first, p = b opix + oy ow + ox in [first, first + count) of a
// batch: image b = p / opix (opix = oh ow) reads its own input x_b = x + b h w in_stride.
template <typename T>
__global__ void carve_cu_im2col_kernel(const T* __restrict__ x, size_t in_stride, uint32_t h, uint32_t w,
                                       uint32_t cin, uint32_t kh, uint32_t kw, uint32_t stride, uint32_t pad,
                                       size_t ow, size_t opix, size_t first, size_t count, T* __restrict__ col) {
  CARVE_CU_KERNEL_ENTRY();
  const size_t k = (size_t)kh * kw * cin;
  CARVE_CU_FOR(e, count * k) {
    const size_t q = e / k, r = e % k;
    const size_t img = (first + q) / opix, p = (first + q) % opix;
    const size_t tap = r / cin, i = r % cin;
    const long long iy = (long long)(p / ow) * stride - pad + (long long)(tap / kw);
    const long long ix = (long long)(p % ow) * stride - pad + (long long)(tap % kw);
    if (iy >= 0 && iy < (long long)h && ix >= 0 && ix < (long long)w) {
      col[e] = x[(img * h * w + (size_t)iy * w + (size_t)ix) * in_stride + i];
    } else {
      carve_cu_st(col, e, 0.0f);
    }
  }
}

// y[yi] = act(v) + residual[ri] (residual optional), in float, stored once: the end of a convolution.
template <typename T>
static __device__ __forceinline__ void carve_cu_store_act(T* y, size_t yi, float v, int silu, const T* residual,
                                                          size_t ri) {
  if (silu) {
    v = carve_cu_silu(v);
  }
  if (residual != NULL) {
    v += carve_cu_ld(residual, ri);
  }
  carve_cu_st(y, yi, v);
}

// ---- 16-byte vectors --------------------------------------------------------------------------
//
// The element-wise kernels' fast variants move CARVE_CU_VEC(T) consecutive channels (16 bytes: 4 floats
// or 8 halves) per thread with one load / store each, and index in 32 bits (64-bit division is a long
// software sequence on a GPU; the generic kernels divide size_t per element). Each element gets the
// same float arithmetic and the same one rounding as in the generic kernel, so the results are the
// same bits. carve_cu_vec_ok says whether a launch can take them: every pointer 16-byte aligned, every
// channel count and pixel stride a multiple of the vector, the index range within CARVE_CU_FOR32_MAX.
#define CARVE_CU_VEC(T) ((uint32_t)(16 / sizeof(T)))

struct alignas(16) carve_cu_v16 {
  uint32_t w[4];
};

static __device__ __forceinline__ carve_cu_v16 carve_cu_v16_zero() {
  carve_cu_v16 c;
  for (int i = 0; i < 4; i++) c.w[i] = 0u;  // +0.0 in both types
  return c;
}

// 16 bytes at p (16-byte aligned): a plain load (READ_ONLY false), a load through the read-only path (__ldg:
// memory the kernel never writes, such as the fused convolution's operands), and a store.
template <bool READ_ONLY>
static __device__ __forceinline__ carve_cu_v16 carve_cu_load16(const void* p) {
  carve_cu_v16 c;
#ifdef CARVE_CUDA_EMULATION
  memcpy(&c, p, 16);
#else
  const uint4* const q = static_cast<const uint4*>(p);
  uint4 u;
  if constexpr (READ_ONLY) {
    u = __ldg(q);
  } else {
    u = *q;
  }
  c.w[0] = u.x;
  c.w[1] = u.y;
  c.w[2] = u.z;
  c.w[3] = u.w;
#endif
  return c;
}

static __device__ __forceinline__ carve_cu_v16 carve_cu_ld16_bytes(const void* p) { return carve_cu_load16<false>(p); }
static __device__ __forceinline__ carve_cu_v16 carve_cu_ldg16_bytes(const void* p) { return carve_cu_load16<true>(p); }

static __device__ __forceinline__ void carve_cu_st16_bytes(void* p, const carve_cu_v16& c) {
#ifdef CARVE_CUDA_EMULATION
  memcpy(p, &c, 16);
#else
  *static_cast<uint4*>(p) = make_uint4(c.w[0], c.w[1], c.w[2], c.w[3]);
#endif
}

// The same 16 bytes as CARVE_CU_VEC(T) elements.
template <typename T>
struct carve_cu_pack {
  T e[16 / sizeof(T)];
};

template <typename T>
static __device__ __forceinline__ carve_cu_pack<T> carve_cu_ld16(const T* p) {
  const carve_cu_v16 v = carve_cu_ld16_bytes(p);
  carve_cu_pack<T> r;
  memcpy(&r, &v, sizeof r);
  return r;
}

template <typename T>
static __device__ __forceinline__ void carve_cu_st16(T* p, const carve_cu_pack<T>& r) {
  carve_cu_v16 v;
  memcpy(&v, &r, sizeof v);
  carve_cu_st16_bytes(p, v);
}

static inline int carve_cu_aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }  // (NULL is)

// `items` elements in all (fewer than 2^32 vectors), every channel count and pixel stride of `counts` a whole
// number of vectors below 2^32 (0 for an absent operand), every pointer of `ptrs` 16-byte aligned (NULL: absent).
template <typename T>
static inline int carve_cu_vec_ok(size_t items, std::initializer_list<size_t> counts,
                                  std::initializer_list<const void*> ptrs) {
  const size_t v = CARVE_CU_VEC(T), limit = CARVE_CU_FOR32_MAX;
  if (items / v > limit) {
    return 0;
  }
  for (const size_t n : counts) {
    if (n % v != 0 || n >= limit) {
      return 0;
    }
  }
  for (const void* q : ptrs) {
    if (!carve_cu_aligned16(q)) {
      return 0;
    }
  }
  return 1;
}

// y[p][o] = act(y[p][o] + bias[o]) + residual[p][o] (residual optional) over (pixels, cout) (a batch's
// pixels: every image's).
template <typename T>
__global__ void carve_cu_epilogue_kernel(T* __restrict__ y, size_t y_stride, const T* __restrict__ bias,
                                         const T* __restrict__ residual, size_t r_stride, size_t pixels,
                                         uint32_t cout, int silu) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(e, pixels * cout) {
    const size_t p = e / cout, o = e % cout;
    carve_cu_store_act(y, p * y_stride + o, carve_cu_ld(y, p * y_stride + o) + carve_cu_ld(bias, o), silu, residual,
                       p * r_stride + o);
  }
}

// The end of a convolution for CARVE_CU_VEC(T) channels: y = act(acc + bias) + residual per element in float
// (carve_cu_store_act's arithmetic), one rounding each; `residual` points at the pixel's channels or is NULL.
template <typename T>
static __device__ __forceinline__ void carve_cu_store_act16(T* y, const float* acc, const T* bias, int silu,
                                                            const T* residual) {
  constexpr uint32_t V = CARVE_CU_VEC(T);
  const carve_cu_pack<T> b = carve_cu_ld16(bias);
  carve_cu_pack<T> r = b;  // (unused without a residual)
  if (residual != NULL) {
    r = carve_cu_ld16(residual);
  }
  carve_cu_pack<T> out;
  for (uint32_t j = 0; j < V; j++) {
    float v = acc[j] + carve_cu_ld(b.e, j);
    if (silu) {
      v = carve_cu_silu(v);
    }
    if (residual != NULL) {
      v += carve_cu_ld(r.e, j);
    }
    carve_cu_st(out.e, j, v);
  }
  carve_cu_st16(y, out);
}

// carve_cu_epilogue_kernel, CARVE_CU_VEC(T) channels per thread (carve_cu_vec_ok: cout, the strides and
// the pointers in whole vectors); cv = cout / VEC, `items` = pixels cv.
template <typename T>
__global__ void carve_cu_epilogue_vec_kernel(T* __restrict__ y, uint32_t y_stride, const T* __restrict__ bias,
                                             const T* __restrict__ residual, uint32_t r_stride, uint32_t items,
                                             uint32_t cv, int silu) {
  CARVE_CU_KERNEL_ENTRY();
  constexpr uint32_t V = CARVE_CU_VEC(T);
  CARVE_CU_FOR32(e, items) {
    const uint32_t p = e / cv, o = (e - p * cv) * V;
    const carve_cu_pack<T> v = carve_cu_ld16(y + (size_t)p * y_stride + o);
    float acc[V];
    for (uint32_t j = 0; j < V; j++) {
      acc[j] = carve_cu_ld(v.e, j);
    }
    carve_cu_store_act16(y + (size_t)p * y_stride + o, acc, bias + o, silu,
                         residual != NULL ? residual + (size_t)p * r_stride + o : NULL);
  }
}

// carve_cu_im2col_kernel, CARVE_CU_VEC(T) input channels per thread (cin, in_stride and x in whole
// vectors); kv = kh kw cin / VEC per output pixel, `items` = count kv; batches as carve_cu_im2col_kernel.
template <typename T>
__global__ void carve_cu_im2col_vec_kernel(const T* __restrict__ x, uint32_t in_stride, uint32_t h, uint32_t w,
                                           uint32_t cin, uint32_t kw, uint32_t stride, uint32_t pad, uint32_t ow,
                                           uint32_t opix, uint32_t first, uint32_t items, uint32_t kv,
                                           T* __restrict__ col) {
  CARVE_CU_KERNEL_ENTRY();
  constexpr uint32_t V = CARVE_CU_VEC(T);
  const uint32_t civ = cin / V;
  CARVE_CU_FOR32(e, items) {
    const uint32_t q = e / kv, r = e - q * kv;
    const uint32_t tap = r / civ, i = (r - tap * civ) * V;
    const uint32_t img = (first + q) / opix, p = (first + q) - img * opix;
    const uint32_t oy = p / ow, ox = p - oy * ow, ky = tap / kw, kx = tap - ky * kw;
    const long long iy = (long long)oy * stride - pad + ky, ix = (long long)ox * stride - pad + kx;
    carve_cu_pack<T> v;
    if (iy >= 0 && iy < (long long)h && ix >= 0 && ix < (long long)w) {
      v = carve_cu_ld16(x + (size_t)img * h * w * in_stride + ((size_t)iy * w + (size_t)ix) * in_stride + i);
    } else {
      for (uint32_t j = 0; j < V; j++) {
        carve_cu_st(v.e, j, 0.0f);
      }
    }
    carve_cu_st16(col + (size_t)e * V, v);
  }
}

// Depthwise: y[oy][ox][c] = act(b[c] + sum_{ky,kx} x[oy s - pad + ky][ox s - pad + kx][c] W[c][ky][kx])
// + residual[oy][ox][c], taps outside the input being 0; accumulated in float, one rounding. Over the
// `batch` images of a batch: output pixel p of image p / (oh ow) reads that image's input.
template <typename T>
__global__ void carve_cu_depthwise_kernel(const T* __restrict__ x, size_t in_stride, uint32_t h, uint32_t w,
                                          uint32_t c, uint32_t kh, uint32_t kw, uint32_t stride, uint32_t pad,
                                          size_t oh, size_t ow, uint32_t batch, const T* __restrict__ weight,
                                          const T* __restrict__ bias, const T* __restrict__ residual,
                                          size_t res_stride, int silu, T* __restrict__ y, size_t out_stride) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(e, (size_t)batch * oh * ow * c) {
    const size_t p = e / c, ch = e % c;
    const size_t img = p / (oh * ow), q = p % (oh * ow);
    const long long y0 = (long long)(q / ow) * stride - pad, x0 = (long long)(q % ow) * stride - pad;
    const T* xb = x + img * h * w * in_stride;
    const T* wc = weight + ch * kh * kw;
    float acc = 0.0f;
    carve_cu_for_window(y0, x0, kh, kw, h, w, [&](size_t tap, size_t pixel) {
      acc += carve_cu_ld(xb, pixel * in_stride + ch) * carve_cu_ld(wc, tap);
    });
    carve_cu_store_act(y, p * out_stride + ch, acc + carve_cu_ld(bias, ch), silu, residual, p * res_stride + ch);
  }
}

// Item e of a 16-byte window kernel (cv vectors of v channels a pixel, opix = oh ow output pixels an image): its
// output pixel p of the batch, first channel ch, image img and window origin (y0, x0) in that image.
struct carve_cu_vec_item {
  uint32_t p, ch, img;
  long long y0, x0;
};
static __device__ __forceinline__ carve_cu_vec_item carve_cu_vec_window(uint32_t e, uint32_t cv, uint32_t v,
                                                                        uint32_t opix, uint32_t ow, uint32_t stride,
                                                                        uint32_t pad) {
  carve_cu_vec_item it;
  it.p = e / cv;
  it.ch = (e - it.p * cv) * v;
  it.img = it.p / opix;
  const uint32_t q = it.p - it.img * opix, oy = q / ow, ox = q - oy * ow;
  it.y0 = (long long)oy * stride - pad;
  it.x0 = (long long)ox * stride - pad;
  return it;
}

// carve_cu_depthwise_kernel, CARVE_CU_VEC(T) channels per thread (c, the strides and x, y, residual in
// whole vectors): each channel's taps in the same order and arithmetic, so the same bits. cv = c / VEC,
// `items` = batch oh ow cv, opix = oh ow. Each block first stages the weights in shared memory transposed to
// ws[tap][c] when they fit CARVE_CU_DW_STAGE_BYTES (yolo26's depthwise layers: 256 channels x 9 taps at most
// in the n model, 4.5 KB in fp16), so that a tap's VEC weights are one 16-byte shared load where they were VEC
// scalar global loads; larger layers read them per channel from global memory. A 3x3 window loads its nine input
// vectors before the first multiply: the window loop issued each tap's load after the previous tap's sums (behind a
// bounds test), so a thread waited for nine loads one after another; on the H200 (2026-11-28, Nsight Compute) the
// kernel took 7.3 us a launch at 80 x 80 x 64 in fp16, about ten times its traffic's time.
#define CARVE_CU_DW_STAGE_BYTES 12288
template <typename T>
__global__ void carve_cu_depthwise_vec_kernel(const T* __restrict__ x, uint32_t in_stride, uint32_t h, uint32_t w,
                                              uint32_t cv, uint32_t kh, uint32_t kw, uint32_t stride, uint32_t pad,
                                              uint32_t opix, uint32_t ow, uint32_t items,
                                              const T* __restrict__ weight, const T* __restrict__ bias,
                                              const T* __restrict__ residual, uint32_t res_stride, int silu,
                                              T* __restrict__ y, uint32_t out_stride) {
  CARVE_CU_KERNEL_ENTRY();
  constexpr uint32_t V = CARVE_CU_VEC(T);
  __shared__ carve_cu_v16 ws16[CARVE_CU_DW_STAGE_BYTES / 16];
  T* const ws = reinterpret_cast<T*>(ws16);
  const uint32_t c = cv * V, taps = kh * kw;
  const bool staged = (size_t)c * taps * sizeof(T) <= CARVE_CU_DW_STAGE_BYTES;  // the same for every block
  if (staged) {
    for (uint32_t i = threadIdx.x; i < c * taps; i += blockDim.x) {  // weight[ch][tap], read in order
      const uint32_t ch = i / taps;
      ws[(i - ch * taps) * c + ch] = weight[i];
    }
    __syncthreads();
  }
  CARVE_CU_FOR32(e, items) {
    const carve_cu_vec_item it = carve_cu_vec_window(e, cv, V, opix, ow, stride, pad);
    const uint32_t p = it.p, ch = it.ch;
    const long long y0 = it.y0, x0 = it.x0;
    const T* xb = x + (size_t)it.img * h * w * in_stride + ch;
    float acc[V];
    for (uint32_t j = 0; j < V; j++) {
      acc[j] = 0.0f;
    }
    const auto add_tap = [&](size_t tap, const carve_cu_pack<T>& xv) {
      if (staged) {
        const carve_cu_pack<T> wv = carve_cu_ld16(ws + tap * c + ch);
        for (uint32_t j = 0; j < V; j++) {
          acc[j] += carve_cu_ld(xv.e, j) * carve_cu_ld(wv.e, j);
        }
      } else {
        for (uint32_t j = 0; j < V; j++) {
          acc[j] += carve_cu_ld(xv.e, j) * carve_cu_ld(weight, (size_t)(ch + j) * kh * kw + tap);
        }
      }
    };
    if (kh == 3 && kw == 3) {  // (uniform) YOLO26's depthwise layers: the nine taps' loads first, all in flight
      carve_cu_pack<T> xv[9] = {};
      bool in[9];
      CARVE_CU_UNROLL
      for (int t = 0; t < 9; t++) {
        const long long iy = y0 + t / 3, ix = x0 + t % 3;
        in[t] = iy >= 0 && iy < (long long)h && ix >= 0 && ix < (long long)w;
        if (in[t]) {
          xv[t] = carve_cu_ld16(xb + ((size_t)iy * w + (size_t)ix) * in_stride);
        }
      }
      CARVE_CU_UNROLL
      for (int t = 0; t < 9; t++) {  // carve_cu_for_window's order (rows, then columns; taps outside skipped)
        if (in[t]) {
          add_tap((size_t)t, xv[t]);
        }
      }
    } else {
      carve_cu_for_window(y0, x0, kh, kw, h, w, [&](size_t tap, size_t pixel) {
        add_tap(tap, carve_cu_ld16(xb + pixel * in_stride));
      });
    }
    carve_cu_store_act16(y + (size_t)p * out_stride + ch, acc, bias + ch, silu,
                         residual != NULL ? residual + (size_t)p * res_stride + ch : NULL);
  }
}

// Direct convolution for few input channels (groups 1; carve_cuda_direct.h says which convs and why):
//   y[p][o] = act(b[o] + sum_{ky,kx,i} x_b[oy s - pad + ky][ox s - pad + kx][i] W[o][ky][kx][i]) + residual[p][o],
// taps outside the input skipped (zero padding), accumulated in float32 in the order of the OHWI weights (ky,
// then kx, then i: carve_cu_for_window's rows, left to right), the bias added after the sum, one rounding at the
// store, as the depthwise kernel. Float32 multiply-adds on the CUDA cores in both precisions, whatever the
// context's convolution math: at least as accurate as TF32, so a float package agrees with the CPU to rounding
// in TF32 mode too.
// Block (blockIdx.x, blockIdx.y): output channels n0 = blockIdx.y SLICE .. n0 + nc - 1 (nc <= SLICE), whose
// weights it stages as float in shared memory, transposed to ws[k][c] (k = (ky kw + kx) cin + i), so that a
// thread's GROUP channels of one k are consecutive floats (16-byte shared loads) and the threads of a warp read
// at most SLICE / GROUP distinct addresses (broadcasts, no bank conflicts). Then gs = ceil(nc / GROUP) threads
// per output pixel, consecutive threads the channel groups of one pixel, then the next pixel (a warp's stores
// are consecutive bytes when out_stride == cout); a grid-stride loop over the batch's pixels (p < 2^31: image
// p / opix of the batch, as the other kernels). Each thread reads its pixel's taps once (cin values per tap) and
// multiplies each into its GROUP accumulators. VEC: the output, bias and residual in 16-byte vectors
// (carve_cu_store_act16; cout a whole number of them, so a vector is all in or all past cout), else scalar.
template <typename T, bool VEC>
__global__ void __launch_bounds__(CARVE_CU_DIRECT_THREADS)
    carve_cu_direct_conv_kernel(const T* __restrict__ x, size_t in_stride, uint32_t h, uint32_t w, uint32_t cin,
                                uint32_t kh, uint32_t kw, uint32_t stride, uint32_t pad, uint32_t ow, uint32_t opix,
                                uint32_t pixels, uint32_t cout, const T* __restrict__ weight,
                                const T* __restrict__ bias, const T* __restrict__ residual, size_t res_stride,
                                int silu, T* __restrict__ y, size_t out_stride) {
  CARVE_CU_KERNEL_ENTRY();
  constexpr uint32_t G = CARVE_CU_DIRECT_GROUP, S = CARVE_CU_DIRECT_SLICE, NT = CARVE_CU_DIRECT_THREADS;
  static_assert(S % G == 0 && NT >= S / G && G % CARVE_CU_VEC(T) == 0, "direct conv: slice, group, vector");
  alignas(16) __shared__ float ws[CARVE_CU_DIRECT_MAX_K * S];
  const uint32_t k_total = kh * kw * cin;  // <= CARVE_CU_DIRECT_MAX_K (carve_cu_conv_direct)
  const uint32_t n0 = blockIdx.y * S, nc = cout - n0 < S ? cout - n0 : S;
  // ws[k][c] = W[n0 + c][k], zeros past the slice's channels (consecutive threads: consecutive shared words).
  for (uint32_t e = threadIdx.x; e < k_total * S; e += NT) {
    const uint32_t k = e / S, c = e - k * S;
    ws[e] = c < nc ? carve_cu_ld(weight, (size_t)(n0 + c) * k_total + k) : 0.0f;
  }
  __syncthreads();
  const uint32_t gs = (nc + G - 1) / G, ppb = NT / gs;  // threads per pixel, pixels per block and step
  const uint32_t t = threadIdx.x, pl = t / gs, o0 = n0 + (t - pl * gs) * G;  // the thread's pixel and channels
  if (pl >= ppb) {
    return;  // (gs 3: the block's last thread; no barrier follows)
  }
  const float* const wg = ws + (o0 - n0);
  for (uint32_t p = blockIdx.x * ppb + pl; p < pixels; p += gridDim.x * ppb) {  // p + step < 2^32: p < 2^31
    const uint32_t img = p / opix, q = p - img * opix, oy = q / ow, ox = q - oy * ow;
    const T* const xb = x + (size_t)img * h * w * in_stride;
    float acc[G];
    for (uint32_t j = 0; j < G; j++) {
      acc[j] = 0.0f;
    }
    carve_cu_for_window((long long)oy * stride - pad, (long long)ox * stride - pad, kh, kw, h, w,
                        [&](size_t tap, size_t pixel) {
                          const T* const xp = xb + pixel * in_stride;
                          const float* const wk = wg + (uint32_t)tap * cin * S;
                          for (uint32_t i = 0; i < cin; i++) {
                            const float xv = carve_cu_ld(xp, i);
                            for (uint32_t j = 0; j < G; j++) {
                              acc[j] += xv * wk[i * S + j];
                            }
                          }
                        });
    const size_t yi = (size_t)p * out_stride + o0, ri = (size_t)p * res_stride + o0;
    if constexpr (VEC) {
      constexpr uint32_t V = CARVE_CU_VEC(T);
      for (uint32_t j = 0; j < G; j += V) {
        if (o0 + j < cout) {
          carve_cu_store_act16(y + yi + j, acc + j, bias + o0 + j, silu, residual != NULL ? residual + ri + j : NULL);
        }
      }
    } else {
      for (uint32_t j = 0; j < G; j++) {
        if (o0 + j < cout) {
          carve_cu_store_act(y, yi + j, acc[j] + carve_cu_ld(bias, o0 + j), silu, residual, ri + j);
        }
      }
    }
  }
}

// One launch of carve_cu_direct_conv_kernel for the whole batch (carve_cu_conv_direct(c) holds; arguments
// checked by the caller): grid.y the slices of CARVE_CU_DIRECT_SLICE channels, grid.x enough blocks for the
// pixels at the first slice's pixels per block (at most CARVE_CU_MAX_BLOCKS: a grid-stride loop does the rest).
template <typename T>
static carve_status carve_cu_direct_conv(const carve_cu_ctx* ctx, const carve_cu_conv* c, const T* x,
                                         const T* weight, const T* bias, const T* residual, T* y, size_t ow,
                                         size_t opix, size_t pixels) {
  const uint32_t s = CARVE_CU_DIRECT_SLICE, g = CARVE_CU_DIRECT_GROUP;
  const uint32_t gs0 = ((c->cout < s ? c->cout : s) + g - 1) / g, ppb0 = CARVE_CU_DIRECT_THREADS / gs0;
  size_t bx = (pixels + ppb0 - 1) / ppb0;
  bx = bx > CARVE_CU_MAX_BLOCKS ? CARVE_CU_MAX_BLOCKS : bx;
  const dim3 grid((unsigned)bx, (c->cout + s - 1) / s);
  void (*const kernel)(const T*, size_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t,
                       uint32_t, uint32_t, uint32_t, uint32_t, const T*, const T*, const T*, size_t, int, T*, size_t) =
      carve_cu_vec_ok<T>(pixels * c->cout, {c->cout, c->out_stride, residual ? c->res_stride : 0}, {y, bias, residual})
          ? carve_cu_direct_conv_kernel<T, true>
          : carve_cu_direct_conv_kernel<T, false>;
  CARVE_LAUNCH(kernel, grid, CARVE_CU_DIRECT_THREADS, ctx->stream, x, c->in_stride, c->h, c->w, c->cin, c->kh, c->kw,
               c->stride, c->pad, (uint32_t)ow, (uint32_t)opix, (uint32_t)pixels, c->cout, weight, bias, residual,
               c->res_stride, c->act == CARVE_CU_ACT_SILU, y, c->out_stride);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// The fused implicit-GEMM convolution on tensor cores (carve_cu_ctx_set_conv_impl).
#include "carve_cuda_igemm.h"

// The cuBLAS path of a groups-1 convolution (arguments checked by the caller): 1x1 stride-1 convs one GEMM on the
// NHWC view; others im2col into scratch (carve_cu_conv2d_scratch_floats(c) floats, used as that many T: chunks of
// whole output pixels) + one GEMM per chunk; then the epilogue kernel.
template <typename T>
static carve_status carve_cu_conv_gemm_path(const carve_cu_ctx* ctx, const carve_cu_conv* c, const T* x,
                                            const T* weight, const T* bias, const T* residual, T* y, float* scratch,
                                            carve_cu_gemm_nt_fn<T> gemm, size_t ow, size_t opix, size_t pixels) {
  const int silu = c->act == CARVE_CU_ACT_SILU;
  carve_status st;
  if (carve_cu_conv_is_gemm(c)) {
    st = gemm(ctx, c->cout, pixels, c->cin, weight, c->cin, x, c->in_stride, y, c->out_stride);
  } else {
    const size_t k = (size_t)c->kh * c->kw * c->cin;
    const size_t chunk = carve_cu_conv2d_scratch_floats(c) / k;  // output pixels per im2col chunk
    if (scratch == NULL || chunk == 0) {
      return CARVE_ERR_INVALID_ARGUMENT;
    }
    T* col = (T*)scratch;
    st = CARVE_OK;
    for (size_t first = 0; first < pixels && st == CARVE_OK; first += chunk) {
      const size_t count = pixels - first < chunk ? pixels - first : chunk;
      if (carve_cu_vec_ok<T>(count * k, {c->cin, c->in_stride}, {x, col}) && first + count <= CARVE_CU_FOR32_MAX) {
        const size_t items = count * k / CARVE_CU_VEC(T);
        CARVE_LAUNCH(carve_cu_im2col_vec_kernel<T>, carve_cu_blocks(items), CARVE_CU_THREADS, ctx->stream, x,
                     (uint32_t)c->in_stride, c->h, c->w, c->cin, c->kw, c->stride, c->pad, (uint32_t)ow,
                     (uint32_t)opix, (uint32_t)first, (uint32_t)items, (uint32_t)(k / CARVE_CU_VEC(T)), col);
      } else {
        CARVE_LAUNCH(carve_cu_im2col_kernel<T>, carve_cu_blocks(count * k), CARVE_CU_THREADS, ctx->stream, x,
                     c->in_stride, c->h, c->w, c->cin, c->kh, c->kw, c->stride, c->pad, ow, opix, first, count, col);
      }
      CARVE_CU_CHECK_LAUNCH();
      st = gemm(ctx, c->cout, count, k, weight, k, col, k, y + first * c->out_stride, c->out_stride);
    }
  }
  if (st != CARVE_OK) {
    return st;
  }
  if (carve_cu_vec_ok<T>(pixels * c->cout, {c->cout, c->out_stride, residual ? c->res_stride : 0},
                         {y, bias, residual})) {
    const size_t items = pixels * c->cout / CARVE_CU_VEC(T);
    CARVE_LAUNCH(carve_cu_epilogue_vec_kernel<T>, carve_cu_blocks(items), CARVE_CU_THREADS, ctx->stream, y,
                 (uint32_t)c->out_stride, bias, residual, (uint32_t)c->res_stride, (uint32_t)items,
                 c->cout / CARVE_CU_VEC(T), silu);
  } else {
    CARVE_LAUNCH(carve_cu_epilogue_kernel<T>, carve_cu_blocks(pixels * c->cout), CARVE_CU_THREADS, ctx->stream, y,
                 c->out_stride, bias, residual, c->res_stride, pixels, c->cout, silu);
  }
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// Microseconds per call of run() on ctx->stream, in a CUDA Graph as the model's own (carve_cu_ctx_set_tactics): one
// eager call (its kernels loaded, cuBLAS' heuristics cached), then CARVE_CU_TUNE_LAUNCHES calls captured into a graph,
// replayed once, timed (the graph's upload with it), and where that replay took less than CARVE_CU_TUNE_LONG_MS,
// CARVE_CU_TUNE_REPLAYS times more, timed, as the measurement (long calls: the first replay is it, an upload's few
// microseconds against milliseconds). -1 when anything fails (the stream capturing, a capture or a call refused):
// the CUDA errors that leaves are cleared.
template <typename Run>
static float carve_cu_time_path(const carve_cu_ctx* ctx, Run run) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(ctx->stream, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone ||
      run() != CARVE_OK || cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1.0f;
  }
  carve_status st = CARVE_OK;
  for (int i = 0; i < CARVE_CU_TUNE_LAUNCHES && st == CARVE_OK; i++) {
    st = run();
  }
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  cudaEvent_t ev[2] = {NULL, NULL};
  float ms = -1.0f;
  int replays = 1;
  bool ok = cudaStreamEndCapture(ctx->stream, &graph) == cudaSuccess && st == CARVE_OK && graph != NULL &&
            cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess && cudaEventCreate(&ev[0]) == cudaSuccess &&
            cudaEventCreate(&ev[1]) == cudaSuccess;
  for (int pass = 0; ok && pass < 2; pass++) {
    ok = cudaEventRecord(ev[0], ctx->stream) == cudaSuccess;
    for (int r = 0; ok && r < replays; r++) {
      ok = cudaGraphLaunch(exec, ctx->stream) == cudaSuccess;
    }
    ok = ok && cudaEventRecord(ev[1], ctx->stream) == cudaSuccess && cudaEventSynchronize(ev[1]) == cudaSuccess &&
         cudaEventElapsedTime(&ms, ev[0], ev[1]) == cudaSuccess;
    if (ok && pass == 0 && ms >= CARVE_CU_TUNE_LONG_MS) {
      break;  // the first replay is the measurement
    }
    replays = CARVE_CU_TUNE_REPLAYS;
  }
  for (int i = 0; i < 2; i++) {
    if (ev[i] != NULL) {
      cudaEventDestroy(ev[i]);
    }
  }
  if (exec != NULL) {
    cudaGraphExecDestroy(exec);
  }
  if (graph != NULL) {
    cudaGraphDestroy(graph);
  }
  (void)cudaGetLastError();
  return ok && ms >= 0.0f ? ms * 1000.0f / (float)(CARVE_CU_TUNE_LAUNCHES * replays) : -1.0f;
}

// The path of a convolution both paths can run, from its tactic (carve_cu_ctx_set_tactics): the entry of its
// slot, its candidates timed first while tuning; CARVE_CU_PATH_UNSET where the default rule decides.
// fused_path(tile): the fused kernel with that tile (-1: the tile rule's); candidate(tile): whether to time it
// (carve_cu_igemm_candidate), asked only while timing.
template <typename T, typename Gemm, typename Fused, typename Candidate>
static int carve_cu_conv_tactic(const carve_cu_ctx* ctx, const carve_cu_conv* c, Gemm gemm_path, Fused fused_path,
                                Candidate candidate) {
  carve_cu_tactics* const t = ctx->tactics;
  if (t == NULL || c->slot == 0 || c->slot > t->slots) {
    return CARVE_CU_PATH_UNSET;
  }
  uint8_t* const path = &t->path[c->slot - 1];
  if (*path != CARVE_CU_PATH_UNSET || !t->tune) {
    return *path < CARVE_CU_PATHS ? (int)*path : (int)CARVE_CU_PATH_UNSET;
  }
  const float gemm_us = carve_cu_time_path(ctx, gemm_path);
  float best_us = gemm_us, fused_us = -1.0f;
  int best = CARVE_CU_PATH_GEMM;
  for (int tile = 0; tile < CARVE_CU_IGEMM_TILES && gemm_us >= 0.0f; tile++) {
    if (!candidate(tile)) {
      continue;
    }
    const float us = carve_cu_time_path(ctx, [&]() { return fused_path(tile); });
    if (us < 0.0f) {
      return CARVE_CU_PATH_UNSET;
    }
    fused_us = fused_us < 0.0f || us < fused_us ? us : fused_us;
    if (us < best_us) {
      best_us = us;
      best = CARVE_CU_PATH_FUSED_TILE + tile;
    }
  }
  if (fused_us < 0.0f) {
    return CARVE_CU_PATH_UNSET;
  }
  *path = (uint8_t)best;
  if (t->us != NULL) {
    t->us[2 * (c->slot - 1)] = gemm_us;
    t->us[2 * (c->slot - 1) + 1] = fused_us;
  }
  return best;
}

// carve_cu_conv2d over T with the precision's GEMM: depthwise a direct kernel; groups-1 convs with few input
// channels (carve_cu_conv_direct: the stem) the direct kernel above, whichever path the context asks for (one
// launch, no scratch); other groups-1 convs either the fused implicit-GEMM kernel (one launch, no scratch) or the
// cuBLAS path (carve_cu_conv_gemm_path): the fused one where it can run (carve_cu_igemm_fits) and the context asks
// for it (conv_fused), else where the convolution's tactic says so (carve_cu_conv_tactic), else where the default
// rule prefers it (carve_cu_igemm_preferred).
template <typename T>
static carve_status carve_cu_conv2d_t(const carve_cu_ctx* ctx, const carve_cu_conv* c, const T* x, const T* weight,
                                      const T* bias, const T* residual, T* y, float* scratch,
                                      carve_cu_gemm_nt_fn<T> gemm) {
  if (!carve_cu_ctx_ok(ctx) || !carve_cu_conv_valid(c) || x == NULL || weight == NULL || bias == NULL || y == NULL ||
      (residual != NULL && c->res_stride < c->cout)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t oh = carve_cu_conv_out(c->h, c->kh, c->stride, c->pad);
  const size_t ow = carve_cu_conv_out(c->w, c->kw, c->stride, c->pad);
  const size_t opix = oh * ow;                     // output pixels of one image
  const size_t pixels = opix * carve_cu_batch(c);  // of the batch: every image's, image after image
  const int silu = c->act == CARVE_CU_ACT_SILU;
  if (c->groups != 1) {
    if (carve_cu_vec_ok<T>(pixels * c->cout, {c->cout, c->in_stride, c->out_stride, residual ? c->res_stride : 0},
                           {x, y, bias, residual})) {  // (so opix < 2^32 too: pixels <= items / VEC)
      const size_t items = pixels * c->cout / CARVE_CU_VEC(T);
      CARVE_LAUNCH(carve_cu_depthwise_vec_kernel<T>, carve_cu_blocks(items), CARVE_CU_THREADS, ctx->stream, x,
                   (uint32_t)c->in_stride, c->h, c->w, c->cout / CARVE_CU_VEC(T), c->kh, c->kw, c->stride, c->pad,
                   (uint32_t)opix, (uint32_t)ow, (uint32_t)items, weight, bias, residual, (uint32_t)c->res_stride,
                   silu, y, (uint32_t)c->out_stride);
    } else {
      CARVE_LAUNCH(carve_cu_depthwise_kernel<T>, carve_cu_blocks(pixels * c->cout), CARVE_CU_THREADS, ctx->stream,
                   x, c->in_stride, c->h, c->w, c->cout, c->kh, c->kw, c->stride, c->pad, oh, ow, carve_cu_batch(c),
                   weight, bias, residual, c->res_stride, silu, y, c->out_stride);
    }
    CARVE_CU_CHECK_LAUNCH();
    return CARVE_OK;
  }
  if (carve_cu_conv_direct(c)) {
    return carve_cu_direct_conv(ctx, c, x, weight, bias, residual, y, ow, opix, pixels);
  }
  auto gemm_path = [&]() {
    return carve_cu_conv_gemm_path(ctx, c, x, weight, bias, residual, y, scratch, gemm, ow, opix, pixels);
  };
  auto fused_path = [&](int tile) {
    return carve_cu_igemm_conv(ctx, c, x, weight, bias, residual, y, ow, opix, pixels, tile);
  };
  int path = CARVE_CU_PATH_GEMM;
  if (carve_cu_igemm_fits<T>(ctx, c, pixels)) {
    auto candidate = [&](int tile) {
      return carve_cu_igemm_candidate<T>(ctx, c, carve_cu_igemm_vec(c, x, weight), pixels, tile);
    };
    path = ctx->conv_fused ? CARVE_CU_PATH_FUSED : carve_cu_conv_tactic<T>(ctx, c, gemm_path, fused_path, candidate);
    if (path == CARVE_CU_PATH_UNSET) {
      path = carve_cu_igemm_preferred(c->kh, c->stride, c->cout, pixels) ? CARVE_CU_PATH_FUSED : CARVE_CU_PATH_GEMM;
    }
  }
  return path == CARVE_CU_PATH_GEMM ? gemm_path() : fused_path(path - CARVE_CU_PATH_FUSED_TILE);
}

// ---- A depthwise convolution and the 1x1 convolution after it ------------------------------------
//
// YOLO26's head runs DWConv -> 1x1 Conv twice in each class branch (cv3): a depthwise launch writing a map that only
// the next launch reads. The fused kernel can compute that map on the fly instead: in DW mode
// (carve_cu_igemm_kernel's DW) each A chunk is the depthwise convolution of its pixel and channels, so the pair is
// one launch and the map is never written. Where both can run, the pair's tactic (the depthwise descriptor's slot)
// times the two launches against the fused pair with each 32 x 32 tile that is a candidate for the 1x1 convolution;
// without a tactic the two launches run (the behaviour before the pair existed).

// Whether the pair can run fused: the 1x1 convolution fits the fused kernel (carve_cu_igemm_fits), its K chunks are
// 16-byte loads of the depthwise input (channels and input stride whole chunks, x, the bias and W aligned), the
// depthwise weights fit the stage and its geometry the kernel's 32-bit indices.
template <typename T>
static int carve_cu_dwpw_fusable(const carve_cu_ctx* ctx, const carve_cu_conv* dw, const carve_cu_conv* pw, const T* x,
                                 const T* dw_bias, const T* pw_weight, size_t pixels) {
  const size_t v = 16 / sizeof(T);
  return carve_cu_igemm_fits<T>(ctx, pw, pixels) && pw->cin % v == 0 && dw->in_stride % v == 0 &&
         carve_cu_aligned16(x) && carve_cu_aligned16(dw_bias) && carve_cu_aligned16(pw_weight) &&
         (size_t)dw->kh * dw->kw * dw->cout * sizeof(T) <= CARVE_CU_IGEMM_DW_STAGE_BYTES && dw->h < 0x20000000u &&
         dw->w < 0x20000000u && dw->pad < 0x10000000u && dw->kh < 0x10000000u && dw->kw < 0x10000000u;
}

// The fused pair, one launch with a 32 x 32 tile (CARVE_CU_IGEMM_TILE_32X32, _K2 or _K4; others take the first).
template <typename T, int KS>
static void carve_cu_dwpw_launch(const carve_cu_ctx* ctx, const carve_cu_conv* dw, const carve_cu_conv* pw, const T* x,
                                 const T* dw_weight, const T* dw_bias, const T* pw_weight, const T* pw_bias,
                                 const T* residual, T* y, size_t pixels) {
  constexpr int BK = 256 / (int)sizeof(T);  // the 32 x 32 tiles' step: 256 bytes a row
  const dim3 grid((unsigned)((pixels + 31) / 32), (unsigned)((pw->cout + 31) / 32), 1u);
  carve_cu_igemm_kernel_fn<T> const kernel = carve_cu_igemm_kernel<T, 32, 32, BK, true, KS, 0, false, true>;
  const uint32_t ow = pw->w, opix = pw->h * pw->w;
  CARVE_LAUNCH(kernel, grid, CARVE_CU_IGEMM_THREADS * KS, ctx->stream, x, dw->in_stride, dw->h, dw->w, pw->cin, 1u,
               1u, dw->stride, dw->pad, ow, opix, (uint32_t)pixels, pw->cout, pw_weight, pw_bias, residual,
               pw->res_stride, pw->act == CARVE_CU_ACT_SILU, y, pw->out_stride, (float*)NULL, (unsigned*)NULL,
               carve_cu_igemm_divs{carve_cu_fastdiv_make(pw->cin), carve_cu_fastdiv_make(1u),
                                   carve_cu_fastdiv_make(ow), carve_cu_fastdiv_make(opix)},
               carve_cu_igemm_dw<T>{dw_weight, dw_bias, dw->kh, dw->kw, dw->act == CARVE_CU_ACT_SILU});
}

// y = pw(dw(x)) (+ residual on pw), the depthwise output in `mid` where the two launches run (untouched when fused).
template <typename T>
static carve_status carve_cu_conv2d_dwpw_t(const carve_cu_ctx* ctx, const carve_cu_conv* dw, const carve_cu_conv* pw,
                                           const T* x, const T* dw_weight, const T* dw_bias, T* mid,
                                           const T* pw_weight, const T* pw_bias, const T* residual, T* y,
                                           float* scratch, carve_cu_gemm_nt_fn<T> gemm) {
  if (!carve_cu_ctx_ok(ctx) || dw == NULL || pw == NULL || !carve_cu_conv_valid(dw) || !carve_cu_conv_valid(pw) ||
      x == NULL || dw_weight == NULL || dw_bias == NULL || mid == NULL || pw_weight == NULL || pw_bias == NULL ||
      y == NULL || dw->groups != dw->cin || dw->cout != dw->cin || pw->kh != 1 || pw->kw != 1 || pw->stride != 1 ||
      pw->pad != 0 || pw->groups != 1 || pw->cin != dw->cout || carve_cu_batch(pw) != carve_cu_batch(dw) ||
      pw->h != carve_cu_conv_out(dw->h, dw->kh, dw->stride, dw->pad) ||
      pw->w != carve_cu_conv_out(dw->w, dw->kw, dw->stride, dw->pad) || pw->in_stride != dw->out_stride) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  auto unfused = [&]() {
    const carve_status st = carve_cu_conv2d_t(ctx, dw, x, dw_weight, dw_bias, (const T*)NULL, mid, scratch, gemm);
    return st != CARVE_OK ? st : carve_cu_conv2d_t(ctx, pw, mid, pw_weight, pw_bias, residual, y, scratch, gemm);
  };
  const size_t pixels = (size_t)pw->h * pw->w * carve_cu_batch(pw);
  if (!carve_cu_dwpw_fusable(ctx, dw, pw, x, dw_bias, pw_weight, pixels)) {
    return unfused();
  }
  auto fused = [&](int tile) {
    if (tile == CARVE_CU_IGEMM_TILE_32X32_K4) {
      carve_cu_dwpw_launch<T, 4>(ctx, dw, pw, x, dw_weight, dw_bias, pw_weight, pw_bias, residual, y, pixels);
    } else if (tile == CARVE_CU_IGEMM_TILE_32X32_K2) {
      carve_cu_dwpw_launch<T, 2>(ctx, dw, pw, x, dw_weight, dw_bias, pw_weight, pw_bias, residual, y, pixels);
    } else {
      carve_cu_dwpw_launch<T, 1>(ctx, dw, pw, x, dw_weight, dw_bias, pw_weight, pw_bias, residual, y, pixels);
    }
    CARVE_CU_CHECK_LAUNCH();
    return CARVE_OK;
  };
  auto candidate = [&](int tile) {
    return (tile == CARVE_CU_IGEMM_TILE_32X32 || tile == CARVE_CU_IGEMM_TILE_32X32_K2 ||
            tile == CARVE_CU_IGEMM_TILE_32X32_K4) &&
           carve_cu_igemm_candidate<T>(ctx, pw, true, pixels, tile);
  };
  if (ctx->conv_fused) {
    return fused(CARVE_CU_IGEMM_TILE_32X32);
  }
  const carve_cu_tactics* const t = ctx->tactics;
  if (t != NULL && t->tune && dw->slot != 0 && dw->slot <= t->slots && t->path[dw->slot - 1] == CARVE_CU_PATH_UNSET) {
    // The 1x1 convolution's own path first (timed here if its entry is unset): the timing below runs the two
    // launches as they will run, and a tactic cannot be timed inside another's timing.
    const carve_status st = unfused();
    if (st != CARVE_OK) {
      return st;
    }
  }
  const int path = carve_cu_conv_tactic<T>(ctx, dw, unfused, fused, candidate);
  return path >= CARVE_CU_PATH_FUSED_TILE ? fused(path - CARVE_CU_PATH_FUSED_TILE)
         : path == CARVE_CU_PATH_FUSED   ? fused(CARVE_CU_IGEMM_TILE_32X32)
                                         : unfused();
}

// ---- Pooling, upsample, copy, add -----------------------------------------------------------

// y[oy][ox][c] = max over the k x k window at (oy stride - pad, ox stride - pad) of x,
// positions outside the input being -inf (the maximum is one of the inputs: stored exactly); output
// pixel p of image p / (oh ow) of the batch reads that image's input.
template <typename T>
__global__ void carve_cu_maxpool_kernel(const T* __restrict__ x, size_t in_stride, uint32_t h, uint32_t w,
                                        uint32_t c, uint32_t k, uint32_t stride, uint32_t pad, size_t oh, size_t ow,
                                        uint32_t batch, T* __restrict__ y, size_t out_stride) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(e, (size_t)batch * oh * ow * c) {
    const size_t p = e / c, ch = e % c;
    const size_t img = p / (oh * ow), q = p % (oh * ow);
    const long long y0 = (long long)(q / ow) * stride - pad, x0 = (long long)(q % ow) * stride - pad;
    const T* xb = x + img * h * w * in_stride;
    float m = -INFINITY;
    carve_cu_for_window(y0, x0, k, k, h, w, [&](size_t, size_t pixel) {
      const float v = carve_cu_ld(xb, pixel * in_stride + ch);
      m = v > m ? v : m;
    });
    carve_cu_st(y, p * out_stride + ch, m);
  }
}

// carve_cu_maxpool_kernel, CARVE_CU_VEC(T) channels per thread in 32-bit indices (c, the strides and x, y in whole
// vectors, as the depthwise vector kernel): each channel's window in the same order, so the same bits. cv = c / VEC,
// `items` = batch oh ow cv, opix = oh ow.
template <typename T>
__global__ void carve_cu_maxpool_vec_kernel(const T* __restrict__ x, uint32_t in_stride, uint32_t h, uint32_t w,
                                            uint32_t cv, uint32_t k, uint32_t stride, uint32_t pad, uint32_t opix,
                                            uint32_t ow, uint32_t items, T* __restrict__ y, uint32_t out_stride) {
  CARVE_CU_KERNEL_ENTRY();
  constexpr uint32_t V = CARVE_CU_VEC(T);
  CARVE_CU_FOR32(e, items) {
    const carve_cu_vec_item it = carve_cu_vec_window(e, cv, V, opix, ow, stride, pad);
    const T* xb = x + (size_t)it.img * h * w * in_stride + it.ch;
    float m[V];
    for (uint32_t j = 0; j < V; j++) {
      m[j] = -INFINITY;
    }
    carve_cu_for_window(it.y0, it.x0, k, k, h, w, [&](size_t, size_t pixel) {
      const carve_cu_pack<T> xv = carve_cu_ld16(xb + pixel * in_stride);
      for (uint32_t j = 0; j < V; j++) {
        const float v = carve_cu_ld(xv.e, j);
        m[j] = v > m[j] ? v : m[j];
      }
    });
    carve_cu_pack<T> out;
    for (uint32_t j = 0; j < V; j++) {
      carve_cu_st(out.e, j, m[j]);
    }
    carve_cu_st16(y + (size_t)it.p * out_stride + it.ch, out);
  }
}

template <typename T>
static carve_status carve_cu_maxpool2d_t(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w, uint32_t c,
                                         uint32_t k, uint32_t stride, uint32_t pad, const T* x, size_t in_stride, T* y,
                                         size_t out_stride) {
  if (ctx == NULL || x == NULL || y == NULL || batch == 0 || h == 0 || w == 0 || c == 0 || k == 0 || stride == 0 ||
      in_stride < c || out_stride < c || (size_t)h + 2 * (size_t)pad < k || (size_t)w + 2 * (size_t)pad < k) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t oh = carve_cu_conv_out(h, k, stride, pad), ow = carve_cu_conv_out(w, k, stride, pad);
  const size_t n = (size_t)batch * oh * ow * c;
  if (carve_cu_vec_ok<T>(n, {c, in_stride, out_stride}, {x, y})) {  // (so batch oh ow < 2^32)
    const uint32_t items = (uint32_t)(n / CARVE_CU_VEC(T));
    CARVE_LAUNCH(carve_cu_maxpool_vec_kernel<T>, carve_cu_blocks(items), CARVE_CU_THREADS, ctx->stream, x,
                 (uint32_t)in_stride, h, w, c / CARVE_CU_VEC(T), k, stride, pad, (uint32_t)(oh * ow), (uint32_t)ow,
                 items, y, (uint32_t)out_stride);
  } else {
    CARVE_LAUNCH(carve_cu_maxpool_kernel<T>, carve_cu_blocks(n), CARVE_CU_THREADS, ctx->stream, x, in_stride, h, w, c, k,
                 stride, pad, oh, ow, batch, y, out_stride);
  }
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// ---- Chained max pools (SPPF) in one launch ---------------------------------------------------
//
// SPPF pools its input n times in a row with the same k x k window, stride 1 and -inf padding p = k / 2 (k odd):
// y_j = pool(y_{j-1}), y_0 = x. y_j is also the maximum over the (2 j p + 1)^2 window of x around each pixel (a
// window of windows; every input position within j p of the pixel lies in one of them, the positions outside the
// image being -inf), so one block computes every y_j of its tile from one staged region of x: a
// CARVE_CU_POOL_CHAIN_TILE^2 tile of output pixels and one 16-byte vector of channels, the region R = n p around
// the tile (R <= CARVE_CU_POOL_CHAIN_HALO) in shared memory (-inf outside the image). Then per j, the row maxima
// over |dx| <= j p (the previous j's maxima and the p new columns on each side) into a second shared array, and
// each output the column maximum of those over |dy| <= j p. Every maximum ignores NaN as carve_cu_maxpool_kernel's
// (v > m), so each y_j holds the values of the j-th of n carve_cu_maxpool2d calls (a maximum is one of its
// inputs; of a +0 and a -0 in one window either may be kept). One launch where the three pools of SPPF were three,
// each reading its 25 taps from global memory: one 16-byte load per pixel of the region here.
#define CARVE_CU_POOL_CHAIN_TILE 16  // output pixels per tile side: 256 threads, one per pixel
#define CARVE_CU_POOL_CHAIN_HALO 8   // the largest n p of the one-launch kernel (SPPF: 3 x 2)

// m[e] = max(m[e], element e of the 16 bytes v), ignoring NaN (v > m).
template <typename T>
static __device__ __forceinline__ void carve_cu_max_pack(float (&m)[CARVE_CU_VEC(T)], const carve_cu_v16& v) {
  carve_cu_pack<T> pk;
  memcpy(&pk, &v, sizeof pk);
  for (uint32_t e = 0; e < CARVE_CU_VEC(T); e++) {
    const float f = carve_cu_ld(pk.e, e);
    m[e] = f > m[e] ? f : m[e];
  }
}

template <typename T>
static __device__ __forceinline__ carve_cu_v16 carve_cu_pack_of(const float (&m)[CARVE_CU_VEC(T)]) {
  carve_cu_pack<T> pk;
  for (uint32_t e = 0; e < CARVE_CU_VEC(T); e++) {
    carve_cu_st(pk.e, e, m[e]);  // (a value of T: exact)
  }
  carve_cu_v16 v;
  memcpy(&v, &pk, sizeof v);
  return v;
}

// Grid (tiles_x tiles_y, c / VEC, batch): block (tile, channel vector, image). Output j (1 .. n) at y + (j - 1)
// y_step. x's channels start at x, the outputs' at y (16-byte aligned, strides whole vectors; carve_cu_vec_ok).
template <typename T>
__global__ void __launch_bounds__(CARVE_CU_POOL_CHAIN_TILE* CARVE_CU_POOL_CHAIN_TILE)
    carve_cu_maxpool_chain_kernel(const T* __restrict__ x, uint32_t in_stride, uint32_t h, uint32_t w, uint32_t p,
                                  uint32_t n, uint32_t tiles_x, T* __restrict__ y, uint32_t out_stride,
                                  uint32_t y_step) {
  CARVE_CU_KERNEL_ENTRY();
  constexpr int TS = CARVE_CU_POOL_CHAIN_TILE, RS = TS + 2 * CARVE_CU_POOL_CHAIN_HALO, NT = TS * TS;
  constexpr uint32_t V = CARVE_CU_VEC(T);
  __shared__ carve_cu_v16 region[RS * RS];  // x around the tile, row pitch RS
  __shared__ carve_cu_v16 rows[RS * TS];    // the row maxima of radius j p: region row, tile column
  const int t = (int)threadIdx.x, R = (int)(n * p), RH = TS + 2 * R;  // the region's rows and columns
  const int ty0 = (int)(blockIdx.x / tiles_x) * TS, tx0 = (int)(blockIdx.x % tiles_x) * TS;
  const uint32_t ch = blockIdx.y * V, img = blockIdx.z;
  const T* const xb = x + (size_t)img * h * w * in_stride + ch;
  float ninf[V];
  for (uint32_t e = 0; e < V; e++) ninf[e] = -INFINITY;
  for (int e = t; e < RH * RH; e += NT) {
    const int iy = ty0 - R + e / RH, ix = tx0 - R + e % RH;
    region[e / RH * RS + e % RH] = iy >= 0 && iy < (int)h && ix >= 0 && ix < (int)w
                                       ? carve_cu_ld16_bytes(xb + ((size_t)iy * w + (size_t)ix) * in_stride)
                                       : carve_cu_pack_of<T>(ninf);
  }
  __syncthreads();
  // The thread's row maxima: entries e = t + q NT < RH TS (region row e / TS, tile column e % TS), kept across j.
  constexpr int Q = (RS * TS + NT - 1) / NT;
  float hm[Q][V];
  const int oy = ty0 + t / TS, ox = tx0 + t % TS;
  for (uint32_t j = 1; j <= n; j++) {
    const int r = (int)(j * p), r0 = (int)((j - 1) * p);
    for (int q = 0; q < Q; q++) {
      const int e = t + q * NT;
      if (e < RH * TS) {
        const carve_cu_v16* const centre = region + e / TS * RS + e % TS + R;
        if (j == 1) {
          for (uint32_t c = 0; c < V; c++) hm[q][c] = -INFINITY;
          carve_cu_max_pack<T>(hm[q], centre[0]);
        }
        for (int d = r0 + 1; d <= r; d++) {
          carve_cu_max_pack<T>(hm[q], centre[-d]);
          carve_cu_max_pack<T>(hm[q], centre[d]);
        }
        rows[e] = carve_cu_pack_of<T>(hm[q]);
      }
    }
    __syncthreads();
    if (oy < (int)h && ox < (int)w) {
      float m[V];
      for (uint32_t c = 0; c < V; c++) m[c] = -INFINITY;
      for (int dy = -r; dy <= r; dy++) carve_cu_max_pack<T>(m, rows[(t / TS + R + dy) * TS + t % TS]);
      T* const yj = y + (size_t)(j - 1) * y_step + ch;
      carve_cu_st16_bytes(yj + (((size_t)img * h + (size_t)oy) * w + (size_t)ox) * out_stride, carve_cu_pack_of<T>(m));
    }
    __syncthreads();  // rows is rewritten for j + 1
  }
}

// n chained k x k max pools (stride 1, pad k / 2, k odd): one launch of carve_cu_maxpool_chain_kernel where it
// takes the shapes, else n launches of carve_cu_maxpool2d_t (the same values).
template <typename T>
static carve_status carve_cu_maxpool2d_chain_t(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w,
                                               uint32_t c, uint32_t k, uint32_t n, const T* x, size_t in_stride, T* y,
                                               size_t out_stride, size_t y_step) {
  if (ctx == NULL || x == NULL || y == NULL || batch == 0 || h == 0 || w == 0 || c == 0 || k % 2 == 0 || n == 0 ||
      in_stride < c || out_stride < c || (n > 1 && y_step < c)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const uint32_t p = k / 2;
  const size_t tiles_x = ((size_t)w + CARVE_CU_POOL_CHAIN_TILE - 1) / CARVE_CU_POOL_CHAIN_TILE;
  const size_t tiles = tiles_x * (((size_t)h + CARVE_CU_POOL_CHAIN_TILE - 1) / CARVE_CU_POOL_CHAIN_TILE);
  if ((size_t)n * p <= CARVE_CU_POOL_CHAIN_HALO && h < 0x40000000u && w < 0x40000000u && tiles < 0x80000000u &&
      batch <= 65535u && c / CARVE_CU_VEC(T) <= 65535u &&
      carve_cu_vec_ok<T>((size_t)batch * h * w * c, {c, in_stride, out_stride, y_step}, {x, y})) {
    const dim3 grid((unsigned)tiles, c / CARVE_CU_VEC(T), batch);
    CARVE_LAUNCH(carve_cu_maxpool_chain_kernel<T>, grid, CARVE_CU_POOL_CHAIN_TILE * CARVE_CU_POOL_CHAIN_TILE,
                 ctx->stream, x, (uint32_t)in_stride, h, w, p, n, (uint32_t)tiles_x, y, (uint32_t)out_stride,
                 (uint32_t)y_step);
    CARVE_CU_CHECK_LAUNCH();
    return CARVE_OK;
  }
  for (uint32_t j = 0; j < n; j++) {
    const carve_status st = carve_cu_maxpool2d_t(ctx, batch, h, w, c, k, 1, p, j == 0 ? x : y + (j - 1) * y_step,
                                                 j == 0 ? in_stride : out_stride, y + j * y_step, out_stride);
    if (st != CARVE_OK) {
      return st;
    }
  }
  return CARVE_OK;
}

// y[oy][ox][c] = x[oy / 2][ox / 2][c] over the (2h, 2w, c) output.
template <typename T>
__global__ void carve_cu_upsample2x_kernel(const T* __restrict__ x, size_t in_stride, uint32_t h, uint32_t w,
                                           uint32_t c, T* __restrict__ y, size_t out_stride) {
  CARVE_CU_KERNEL_ENTRY();
  const size_t ow = (size_t)w * 2;
  CARVE_CU_FOR(e, (size_t)h * 2 * ow * c) {
    const size_t p = e / c, ch = e % c;
    const size_t oy = p / ow, ox = p % ow;
    y[p * out_stride + ch] = x[((oy / 2) * w + ox / 2) * in_stride + ch];
  }
}

// carve_cu_upsample2x_kernel moving CARVE_CU_VEC(T) channels per thread in 32-bit indices (the same bits: a move).
// cv = c / VEC, `items` = 4 h w cv.
template <typename T>
__global__ void carve_cu_upsample2x_vec_kernel(const T* __restrict__ x, uint32_t in_stride, uint32_t w, uint32_t cv,
                                               uint32_t items, T* __restrict__ y, uint32_t out_stride) {
  CARVE_CU_KERNEL_ENTRY();
  constexpr uint32_t V = CARVE_CU_VEC(T);
  const uint32_t ow = 2 * w;
  CARVE_CU_FOR32(e, items) {
    const uint32_t p = e / cv, ch = (e - p * cv) * V;
    const uint32_t oy = p / ow, ox = p - oy * ow;
    carve_cu_st16(y + (size_t)p * out_stride + ch, carve_cu_ld16(x + ((size_t)(oy / 2) * w + ox / 2) * in_stride + ch));
  }
}

template <typename T>
static carve_status carve_cu_upsample2x_t(const carve_cu_ctx* ctx, uint32_t h, uint32_t w, uint32_t c, const T* x,
                                          size_t in_stride, T* y, size_t out_stride) {
  if (ctx == NULL || x == NULL || y == NULL || h == 0 || w == 0 || c == 0 || in_stride < c || out_stride < c) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t n = (size_t)h * w * 4 * c;
  if (carve_cu_vec_ok<T>(n, {c, in_stride, out_stride}, {x, y})) {
    const uint32_t items = (uint32_t)(n / CARVE_CU_VEC(T));
    CARVE_LAUNCH(carve_cu_upsample2x_vec_kernel<T>, carve_cu_blocks(items), CARVE_CU_THREADS, ctx->stream, x,
                 (uint32_t)in_stride, w, c / CARVE_CU_VEC(T), items, y, (uint32_t)out_stride);
  } else {
    CARVE_LAUNCH(carve_cu_upsample2x_kernel<T>, carve_cu_blocks(n), CARVE_CU_THREADS, ctx->stream, x, in_stride, h, w, c,
                 y, out_stride);
  }
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// y[p][ch] = x[p][ch].
template <typename T>
__global__ void carve_cu_copy_kernel(size_t pixels, uint32_t c, const T* __restrict__ x, size_t in_stride,
                                     T* __restrict__ y, size_t out_stride) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(e, pixels * c) {
    const size_t p = e / c, ch = e % c;
    y[p * out_stride + ch] = x[p * in_stride + ch];
  }
}

template <typename T>
static carve_status carve_cu_copy_t(const carve_cu_ctx* ctx, size_t pixels, uint32_t c, const T* x, size_t in_stride,
                                    T* y, size_t out_stride) {
  if (ctx == NULL || x == NULL || y == NULL || c == 0 || in_stride < c || out_stride < c) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (pixels == 0) {
    return CARVE_OK;
  }
  CARVE_LAUNCH(carve_cu_copy_kernel<T>, carve_cu_blocks(pixels * c), CARVE_CU_THREADS, ctx->stream, pixels, c, x,
               in_stride, y, out_stride);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// y[p][ch] = a[p][ch] + b[p][ch] (in float, one rounding).
template <typename T>
__global__ void carve_cu_add_kernel(size_t pixels, uint32_t c, const T* a, size_t a_stride, const T* b,
                                    size_t b_stride, T* y, size_t y_stride) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(e, pixels * c) {
    const size_t p = e / c, ch = e % c;
    carve_cu_st(y, p * y_stride + ch, carve_cu_ld(a, p * a_stride + ch) + carve_cu_ld(b, p * b_stride + ch));
  }
}

template <typename T>
static carve_status carve_cu_add_t(const carve_cu_ctx* ctx, size_t pixels, uint32_t c, const T* a, size_t a_stride,
                                   const T* b, size_t b_stride, T* y, size_t y_stride) {
  if (ctx == NULL || a == NULL || b == NULL || y == NULL || c == 0 || a_stride < c || b_stride < c || y_stride < c) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (pixels == 0) {
    return CARVE_OK;
  }
  CARVE_LAUNCH(carve_cu_add_kernel<T>, carve_cu_blocks(pixels * c), CARVE_CU_THREADS, ctx->stream, pixels, c, a,
               a_stride, b, b_stride, y, y_stride);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// ---- The segment and classify heads: transposed convolution, global average pool, linear layer -------

// y[iy k + ky][ix k + kx][o] = act(t[iy w + ix][(o k + ky) k + kx] + b[o]), t the GEMM result
// (h w, cout k k): each output reads its one input pixel (a gather, no scatter).
template <typename T>
__global__ void carve_cu_deconv_gather_kernel(const T* __restrict__ t, uint32_t h, uint32_t w, uint32_t k,
                                              uint32_t cout, const T* __restrict__ bias, int silu,
                                              T* __restrict__ y, size_t out_stride) {
  CARVE_CU_KERNEL_ENTRY();
  const size_t ow = (size_t)w * k;
  const size_t row = (size_t)cout * k * k;
  CARVE_CU_FOR(e, (size_t)h * k * ow * cout) {
    const size_t p = e / cout, o = e % cout;
    const size_t oy = p / ow, ox = p % ow;
    const size_t iy = oy / k, ky = oy % k, ix = ox / k, kx = ox % k;
    float v = carve_cu_ld(t, (iy * w + ix) * row + (o * k + ky) * k + kx) + carve_cu_ld(bias, o);
    if (silu) {
      v = carve_cu_silu(v);
    }
    carve_cu_st(y, p * out_stride + o, v);
  }
}

// carve_cu_deconv2d (carve_cuda.h): one GEMM of the precision into scratch (h w, cout k k; T elements), then
// the gather (the GEMM's result is T: for __half rounded before the bias, as a convolution's).
template <typename T>
static carve_status carve_cu_deconv2d_t(const carve_cu_ctx* ctx, uint32_t h, uint32_t w, uint32_t cin, uint32_t cout,
                                        uint32_t k, const T* x, size_t in_stride, const T* weight, const T* bias,
                                        carve_cu_act act, T* y, size_t out_stride, float* scratch,
                                        carve_cu_gemm_nt_fn<T> gemm) {
  if (!carve_cu_ctx_ok(ctx) || h == 0 || w == 0 || cin == 0 || cout == 0 || k == 0 || x == NULL || weight == NULL ||
      bias == NULL || y == NULL || scratch == NULL || in_stride < cin || out_stride < cout ||
      (act != CARVE_CU_ACT_NONE && act != CARVE_CU_ACT_SILU)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  // t^T (cout k k, h w) = W (cout k k, cin) X^T (cin, h w).
  const size_t rows = (size_t)cout * k * k;
  T* t = (T*)scratch;
  const carve_status st = gemm(ctx, rows, (size_t)h * w, cin, weight, cin, x, in_stride, t, rows);
  if (st != CARVE_OK) {
    return st;
  }
  CARVE_LAUNCH(carve_cu_deconv_gather_kernel<T>, carve_cu_blocks((size_t)h * w * rows), CARVE_CU_THREADS,
               ctx->stream, (const T*)t, h, w, k, cout, bias, act == CARVE_CU_ACT_SILU, y, out_stride);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// y[b c + ch] = (sum_p x_b[p][ch]) / (h w) for each of `batch` images (x_b = x + b h w in_stride), the sum in
// double, stored once: one thread per (image, channel), consecutive threads reading consecutive channels of a pixel.
template <typename T>
__global__ void carve_cu_gap_kernel(const T* __restrict__ x, size_t in_stride, size_t pixels, uint32_t c,
                                    size_t items, T* __restrict__ y) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(e, items) {
    const size_t b = e / c, ch = e % c;
    const T* xb = x + b * pixels * in_stride;
    double s = 0.0;
    for (size_t p = 0; p < pixels; p++) {
      s += (double)carve_cu_ld(xb, p * in_stride + ch);
    }
    carve_cu_st(y, e, (float)(s / (double)pixels));
  }
}

template <typename T>
static carve_status carve_cu_global_avgpool_t(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w,
                                              uint32_t c, const T* x, size_t in_stride, T* y) {
  if (ctx == NULL || x == NULL || y == NULL || batch == 0 || h == 0 || w == 0 || c == 0 || in_stride < c) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t items = (size_t)batch * c;
  CARVE_LAUNCH(carve_cu_gap_kernel<T>, carve_cu_blocks(items), CARVE_CU_THREADS, ctx->stream, x, in_stride,
               (size_t)h * w, c, items, y);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// y[i] = y[i] + b[i % n] for i < items (every image's n outputs), in float, stored once: the linear layer's bias.
template <typename T>
__global__ void carve_cu_bias_kernel(T* __restrict__ y, const T* __restrict__ b, uint32_t n, size_t items) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(i, items) { carve_cu_st(y, i, carve_cu_ld(y, i) + carve_cu_ld(b, i % n)); }
}

// carve_cu_linear (carve_cuda.h): Y^T (cout, batch) = W (cout, cin) X^T by one GEMM of the precision (W row-major
// is the column-major (cin, cout) matrix A: Y^T = A^T X^T, every image a column), then the bias.
template <typename T>
static carve_status carve_cu_linear_t(const carve_cu_ctx* ctx, uint32_t batch, uint32_t cin, uint32_t cout,
                                      const T* x, const T* weight, const T* bias, T* y, carve_cu_gemm_nt_fn<T> gemm) {
  if (!carve_cu_ctx_ok(ctx) || x == NULL || weight == NULL || bias == NULL || y == NULL || batch == 0 || cin == 0 ||
      cout == 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const carve_status st = gemm(ctx, cout, batch, cin, weight, cin, x, cin, y, cout);
  if (st != CARVE_OK) {
    return st;
  }
  const size_t items = (size_t)batch * cout;
  CARVE_LAUNCH(carve_cu_bias_kernel<T>, carve_cu_blocks(items), CARVE_CU_THREADS, ctx->stream, y, bias, cout, items);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// ---- Softmax and attention ------------------------------------------------------------------

#define CARVE_CU_SOFTMAX_THREADS 256

// max that propagates NaN (a NaN anywhere makes the row's maximum NaN, as carve_softmax).
static __device__ __forceinline__ float carve_cu_max_nan(float a, float b) {
  return a != a ? a : (b != b ? b : (b > a ? b : a));
}

// One block per row of n elements (rows `row_stride` apart; y may be x: each thread rewrites only
// the entries it read, after the block's reductions):
//   m = max_j x[j] (NaN-propagating), e[j] = expf(x[j] - m), y[j] = e[j] * (1 / (float)sum_j e[j]),
// the sum in double, reduced over the block's threads in a fixed order; e[j] is computed again in
// the last pass (the same float), so that nothing but the result is stored (one rounding for half).
template <typename X, typename Y = X>
__global__ void carve_cu_softmax_rows_kernel(const X* x, size_t n, size_t row_stride, Y* y) {
  CARVE_CU_KERNEL_ENTRY();
  __shared__ float red_f[CARVE_CU_SOFTMAX_THREADS];
  __shared__ double red_d[CARVE_CU_SOFTMAX_THREADS];
  const unsigned t = threadIdx.x;
  const X* xr = x + (size_t)blockIdx.x * row_stride;
  Y* yr = y + (size_t)blockIdx.x * row_stride;
  float m = -INFINITY;
  for (size_t j = t; j < n; j += CARVE_CU_SOFTMAX_THREADS) {
    m = carve_cu_max_nan(m, carve_cu_ld(xr, j));
  }
  red_f[t] = m;
  __syncthreads();
  for (unsigned half = CARVE_CU_SOFTMAX_THREADS / 2; half > 0; half /= 2) {
    if (t < half) {
      red_f[t] = carve_cu_max_nan(red_f[t], red_f[t + half]);
    }
    __syncthreads();
  }
  m = red_f[0];
  double s = 0.0;
  for (size_t j = t; j < n; j += CARVE_CU_SOFTMAX_THREADS) {
    s += (double)expf(carve_cu_ld(xr, j) - m);
  }
  red_d[t] = s;
  __syncthreads();
  for (unsigned half = CARVE_CU_SOFTMAX_THREADS / 2; half > 0; half /= 2) {
    if (t < half) {
      red_d[t] += red_d[t + half];
    }
    __syncthreads();
  }
  const float inv = 1.0f / (float)red_d[0];
  for (size_t j = t; j < n; j += CARVE_CU_SOFTMAX_THREADS) {
    carve_cu_st(yr, j, expf(carve_cu_ld(xr, j) - m) * inv);
  }
}

// carve_cu_softmax (carve_cuda.h): one block per image over its n values, read as X, the probabilities stored as Y
// (an fp16 classify package: half logits, float32 probabilities).
template <typename X, typename Y>
static carve_status carve_cu_softmax_t(const carve_cu_ctx* ctx, uint32_t batch, uint32_t n, const X* x, Y* y) {
  if (ctx == NULL || x == NULL || y == NULL || batch == 0 || n == 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  void (*const kernel)(const X*, size_t, size_t, Y*) = carve_cu_softmax_rows_kernel<X, Y>;
  CARVE_LAUNCH(kernel, batch, CARVE_CU_SOFTMAX_THREADS, ctx->stream, x, (size_t)n, (size_t)n, y);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// The attention's rows (batch heads n rows of n, n = h w: 400 at yolo26n's 20 x 20) one warp each,
// CARVE_CU_SOFTMAX_WARP_ROWS rows a block: a block per row spent these short rows in its two 8-step reductions
// over shared memory and their barriers (Nsight Compute, H100: 6.2 µs for the 800 rows of each of yolo26n's two
// attention layers at batch 1, with 1.3 MB to move). The same three
// passes and arithmetic as carve_cu_softmax_rows_kernel: m NaN-propagating, each lane's terms of the double sum in
// order, the lanes' maxima and sums combined by a butterfly (a fixed order: the same result on every run; lane 0's
// values broadcast so that the warp agrees even on the sign of a zero maximum or a NaN's payload), each result one
// rounding. y may be x (each lane rewrites only the entries it read).
#define CARVE_CU_SOFTMAX_WARP_ROWS 8

// One row's softmax by the 32 lanes of a warp (all of them, converged): x and y float or T (carve_cu_ld /
// carve_cu_st), y may be x.
template <typename X, typename Y>
static __device__ __forceinline__ void carve_cu_softmax_warp_row(const X* xr, uint32_t n, Y* yr, uint32_t lane) {
  float m = -INFINITY;
  for (uint32_t j = lane; j < n; j += 32) {
    m = carve_cu_max_nan(m, carve_cu_ld(xr, j));
  }
  for (int o = 16; o > 0; o /= 2) {
    m = carve_cu_max_nan(m, __shfl_xor_sync(0xffffffffu, m, o));
  }
  m = __shfl_sync(0xffffffffu, m, 0);
  double s = 0.0;
  for (uint32_t j = lane; j < n; j += 32) {
    s += (double)expf(carve_cu_ld(xr, j) - m);
  }
  for (int o = 16; o > 0; o /= 2) {
    s += __shfl_xor_sync(0xffffffffu, s, o);
  }
  const float inv = 1.0f / (float)__shfl_sync(0xffffffffu, s, 0);
  for (uint32_t j = lane; j < n; j += 32) {
    carve_cu_st(yr, j, expf(carve_cu_ld(xr, j) - m) * inv);
  }
}

template <typename T>
__global__ void carve_cu_softmax_warp_rows_kernel(const T* x, uint32_t n, uint32_t rows, size_t row_stride, T* y) {
  CARVE_CU_KERNEL_ENTRY();
  const uint32_t lane = threadIdx.x % 32, row = blockIdx.x * CARVE_CU_SOFTMAX_WARP_ROWS + threadIdx.x / 32;
  if (row >= rows) {
    return;  // (whole warps: the shuffles have all 32 lanes)
  }
  carve_cu_softmax_warp_row(x + (size_t)row * row_stride, n, y + (size_t)row * row_stride, lane);
}

// P = softmax over each of `rows` rows of n at s, in place (carve_cu_softmax_warp_rows_kernel).
template <typename T>
static void carve_cu_softmax_rows(const carve_cu_ctx* ctx, T* s, uint32_t n, size_t rows) {
  const unsigned blocks = (unsigned)((rows + CARVE_CU_SOFTMAX_WARP_ROWS - 1) / CARVE_CU_SOFTMAX_WARP_ROWS);
  CARVE_LAUNCH(carve_cu_softmax_warp_rows_kernel<T>, blocks, 32 * CARVE_CU_SOFTMAX_WARP_ROWS, ctx->stream, s, n,
               (uint32_t)rows, (size_t)n, s);
}

#include "carve_cuda_attention.h"

#endif  // CARVE_CUDA_ELEM_H
