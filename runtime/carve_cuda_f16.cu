// carve runtime, CUDA: the half-precision kernels of the fp16 packages (see carve_cuda_f16.h).
//
// GEMMs as in carve_cuda_ops.cu (column-major cuBLAS on NHWC views: Y^T = W X^T), through
// cublasGemmEx with half operands and float32 accumulation. Element-wise kernels load halves,
// compute in float as their fp32 counterparts do, and round once when they store.

#include "carve_cuda_f16.h"
#include "carve_cuda_impl.h"

static __device__ __forceinline__ float ld(const __half* p, size_t i) { return __half2float(p[i]); }
static __device__ __forceinline__ void st(__half* p, size_t i, float v) { p[i] = __float2half_rn(v); }

static int h_ctx_ok(const carve_cu_ctx* ctx) { return ctx != NULL && ctx->blas != NULL; }

// ---- Context ----------------------------------------------------------------------------------

carve_status carve_cu_ctx_f16_math(carve_cu_ctx* ctx) {
  if (!h_ctx_ok(ctx)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const cublasMath_t mode = (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  CARVE_CU_CHECK_BLAS(cublasSetMathMode(ctx->blas, mode));
  return CARVE_OK;
}

// ---- Casts ----------------------------------------------------------------------------------

__global__ void carve_cu_h_from_f32_kernel(const float* __restrict__ x, __half* __restrict__ y, size_t n) {
  CARVE_CU_FOR(i, n) { st(y, i, x[i]); }
}

carve_status carve_cu_f32_to_f16(const carve_cu_ctx* ctx, const float* x, __half* y, size_t n) {
  if (ctx == NULL || (n > 0 && (x == NULL || y == NULL))) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (n == 0) {
    return CARVE_OK;
  }
  CARVE_LAUNCH(carve_cu_h_from_f32_kernel, carve_cu_blocks(n), CARVE_CU_THREADS, ctx->stream, x, y, n);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

__global__ void carve_cu_h_to_f32_view_kernel(size_t pixels, uint32_t c, const __half* __restrict__ x,
                                              size_t in_stride, float* __restrict__ y, size_t out_stride) {
  CARVE_CU_FOR(e, pixels * c) {
    const size_t p = e / c, ch = e % c;
    y[p * out_stride + ch] = ld(x, p * in_stride + ch);
  }
}

carve_status carve_cu_f16_to_f32_view(const carve_cu_ctx* ctx, size_t pixels, uint32_t c, const __half* x,
                                      size_t in_stride, float* y, size_t out_stride) {
  if (ctx == NULL || x == NULL || y == NULL || c == 0 || in_stride < c || out_stride < c) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (pixels == 0) {
    return CARVE_OK;
  }
  CARVE_LAUNCH(carve_cu_h_to_f32_view_kernel, carve_cu_blocks(pixels * c), CARVE_CU_THREADS, ctx->stream, pixels, c,
               x, in_stride, y, out_stride);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// ---- GEMM -----------------------------------------------------------------------------------

// Y^T (m, n) = alpha A^T (m, k) B (k, n), column-major halves, float32 accumulation, beta = 0.
static carve_status h_gemm_nt(const carve_cu_ctx* ctx, size_t m, size_t n, size_t k, const __half* a, size_t lda,
                              const __half* b, size_t ldb, __half* c, size_t ldc) {
  if (!carve_cu_fits_int(m) || !carve_cu_fits_int(n) || !carve_cu_fits_int(k) || !carve_cu_fits_int(lda) ||
      !carve_cu_fits_int(ldb) || !carve_cu_fits_int(ldc)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const float one = 1.0f, zero = 0.0f;
  CARVE_CU_CHECK_BLAS(cublasGemmEx(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n, (int)k, &one, a, CUDA_R_16F,
                                   (int)lda, b, CUDA_R_16F, (int)ldb, &zero, c, CUDA_R_16F, (int)ldc,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return CARVE_OK;
}

// ---- Convolution ----------------------------------------------------------------------------

static size_t h_conv_out(uint32_t in, uint32_t k, uint32_t stride, uint32_t pad) {
  return ((size_t)in + 2 * (size_t)pad - k) / stride + 1;
}

// The checks of carve_cuda_ops.cu's conv_valid.
static int h_conv_valid(const carve_cu_conv* c) {
  if (c == NULL || c->kh == 0 || c->kw == 0 || c->stride == 0 || c->cin == 0 || c->cout == 0 || c->h == 0 ||
      c->w == 0 || c->groups == 0) {
    return 0;
  }
  if ((size_t)c->h + 2 * (size_t)c->pad < c->kh || (size_t)c->w + 2 * (size_t)c->pad < c->kw) {
    return 0;
  }
  if (c->groups != 1 && !(c->groups == c->cin && c->groups == c->cout)) {
    return 0;
  }
  return c->in_stride >= c->cin && c->out_stride >= c->cout &&
         (c->act == CARVE_CU_ACT_NONE || c->act == CARVE_CU_ACT_SILU);
}

__global__ void carve_cu_h_im2col_kernel(const __half* __restrict__ x, size_t in_stride, uint32_t h, uint32_t w,
                                         uint32_t cin, uint32_t kh, uint32_t kw, uint32_t stride, uint32_t pad,
                                         size_t ow, size_t first, size_t count, __half* __restrict__ col) {
  const size_t k = (size_t)kh * kw * cin;
  CARVE_CU_FOR(e, count * k) {
    const size_t q = e / k, r = e % k;
    const size_t p = first + q;
    const size_t tap = r / cin, i = r % cin;
    const long long iy = (long long)(p / ow) * stride - pad + (long long)(tap / kw);
    const long long ix = (long long)(p % ow) * stride - pad + (long long)(tap % kw);
    __half v = __float2half_rn(0.0f);
    if (iy >= 0 && iy < (long long)h && ix >= 0 && ix < (long long)w) {
      v = x[((size_t)iy * w + (size_t)ix) * in_stride + i];
    }
    col[e] = v;
  }
}

__global__ void carve_cu_h_epilogue_kernel(__half* __restrict__ y, size_t y_stride, const __half* __restrict__ bias,
                                           const __half* __restrict__ residual, size_t r_stride, size_t pixels,
                                           uint32_t cout, int silu) {
  CARVE_CU_FOR(e, pixels * cout) {
    const size_t p = e / cout, o = e % cout;
    float v = ld(y, p * y_stride + o) + ld(bias, o);
    if (silu) {
      v = carve_cu_silu(v);
    }
    if (residual != NULL) {
      v += ld(residual, p * r_stride + o);
    }
    st(y, p * y_stride + o, v);
  }
}

__global__ void carve_cu_h_depthwise_kernel(const __half* __restrict__ x, size_t in_stride, uint32_t h, uint32_t w,
                                            uint32_t c, uint32_t kh, uint32_t kw, uint32_t stride, uint32_t pad,
                                            size_t oh, size_t ow, const __half* __restrict__ weight,
                                            const __half* __restrict__ bias, const __half* __restrict__ residual,
                                            size_t res_stride, int silu, __half* __restrict__ y, size_t out_stride) {
  CARVE_CU_FOR(e, oh * ow * c) {
    const size_t p = e / c, ch = e % c;
    const long long y0 = (long long)(p / ow) * stride - pad, x0 = (long long)(p % ow) * stride - pad;
    const __half* wc = weight + ch * kh * kw;
    float acc = 0.0f;
    for (uint32_t ky = 0; ky < kh; ky++) {
      const long long iy = y0 + ky;
      if (iy < 0 || iy >= (long long)h) {
        continue;
      }
      for (uint32_t kx = 0; kx < kw; kx++) {
        const long long ix = x0 + kx;
        if (ix >= 0 && ix < (long long)w) {
          acc += ld(x, ((size_t)iy * w + (size_t)ix) * in_stride + ch) * ld(wc, ky * kw + kx);
        }
      }
    }
    float v = acc + ld(bias, ch);
    if (silu) {
      v = carve_cu_silu(v);
    }
    if (residual != NULL) {
      v += ld(residual, p * res_stride + ch);
    }
    st(y, p * out_stride + ch, v);
  }
}

carve_status carve_cu_conv2d(const carve_cu_ctx* ctx, const carve_cu_conv* c, const __half* x, const __half* weight,
                             const __half* bias, const __half* residual, __half* y, float* scratch) {
  if (!h_ctx_ok(ctx) || !h_conv_valid(c) || x == NULL || weight == NULL || bias == NULL || y == NULL ||
      (residual != NULL && c->res_stride < c->cout)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t oh = h_conv_out(c->h, c->kh, c->stride, c->pad), ow = h_conv_out(c->w, c->kw, c->stride, c->pad);
  const size_t pixels = oh * ow;
  const int silu = c->act == CARVE_CU_ACT_SILU;
  if (c->groups != 1) {
    CARVE_LAUNCH(carve_cu_h_depthwise_kernel, carve_cu_blocks(pixels * c->cout), CARVE_CU_THREADS, ctx->stream, x,
                 c->in_stride, c->h, c->w, c->cout, c->kh, c->kw, c->stride, c->pad, oh, ow, weight, bias, residual,
                 c->res_stride, silu, y, c->out_stride);
    CARVE_CU_CHECK_LAUNCH();
    return CARVE_OK;
  }
  carve_status status;
  if (c->kh == 1 && c->kw == 1 && c->stride == 1 && c->pad == 0) {
    status = h_gemm_nt(ctx, c->cout, pixels, c->cin, weight, c->cin, x, c->in_stride, y, c->out_stride);
  } else {
    // the chunks of carve_cu_conv2d_scratch_floats (whole output pixels), as halves
    const size_t floats = carve_cu_conv2d_scratch_floats(c);
    const size_t k = (size_t)c->kh * c->kw * c->cin;
    if (scratch == NULL || floats < k) {
      return CARVE_ERR_INVALID_ARGUMENT;
    }
    __half* col = (__half*)scratch;
    const size_t chunk = floats / k;
    status = CARVE_OK;
    for (size_t first = 0; first < pixels && status == CARVE_OK; first += chunk) {
      const size_t count = pixels - first < chunk ? pixels - first : chunk;
      CARVE_LAUNCH(carve_cu_h_im2col_kernel, carve_cu_blocks(count * k), CARVE_CU_THREADS, ctx->stream, x,
                   c->in_stride, c->h, c->w, c->cin, c->kh, c->kw, c->stride, c->pad, ow, first, count, col);
      CARVE_CU_CHECK_LAUNCH();
      status = h_gemm_nt(ctx, c->cout, count, k, weight, k, col, k, y + first * c->out_stride, c->out_stride);
    }
  }
  if (status != CARVE_OK) {
    return status;
  }
  CARVE_LAUNCH(carve_cu_h_epilogue_kernel, carve_cu_blocks(pixels * c->cout), CARVE_CU_THREADS, ctx->stream, y,
               c->out_stride, bias, residual, c->res_stride, pixels, c->cout, silu);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// ---- Pooling, upsample, copy, add -------------------------------------------------------------

__global__ void carve_cu_h_maxpool_kernel(const __half* __restrict__ x, size_t in_stride, uint32_t h, uint32_t w,
                                          uint32_t c, uint32_t k, uint32_t stride, uint32_t pad, size_t oh, size_t ow,
                                          __half* __restrict__ y, size_t out_stride) {
  CARVE_CU_FOR(e, oh * ow * c) {
    const size_t p = e / c, ch = e % c;
    const long long y0 = (long long)(p / ow) * stride - pad, x0 = (long long)(p % ow) * stride - pad;
    float m = -INFINITY;
    for (uint32_t ky = 0; ky < k; ky++) {
      const long long iy = y0 + ky;
      if (iy < 0 || iy >= (long long)h) {
        continue;
      }
      for (uint32_t kx = 0; kx < k; kx++) {
        const long long ix = x0 + kx;
        if (ix >= 0 && ix < (long long)w) {
          const float v = ld(x, ((size_t)iy * w + (size_t)ix) * in_stride + ch);
          m = v > m ? v : m;
        }
      }
    }
    st(y, p * out_stride + ch, m);  // a half widened and stored again: exact
  }
}

carve_status carve_cu_maxpool2d(const carve_cu_ctx* ctx, uint32_t h, uint32_t w, uint32_t c, uint32_t k,
                                uint32_t stride, uint32_t pad, const __half* x, size_t in_stride, __half* y,
                                size_t out_stride) {
  if (ctx == NULL || x == NULL || y == NULL || h == 0 || w == 0 || c == 0 || k == 0 || stride == 0 ||
      in_stride < c || out_stride < c || (size_t)h + 2 * (size_t)pad < k || (size_t)w + 2 * (size_t)pad < k) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t oh = h_conv_out(h, k, stride, pad), ow = h_conv_out(w, k, stride, pad);
  CARVE_LAUNCH(carve_cu_h_maxpool_kernel, carve_cu_blocks(oh * ow * c), CARVE_CU_THREADS, ctx->stream, x, in_stride,
               h, w, c, k, stride, pad, oh, ow, y, out_stride);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

__global__ void carve_cu_h_upsample2x_kernel(const __half* __restrict__ x, size_t in_stride, uint32_t h, uint32_t w,
                                             uint32_t c, __half* __restrict__ y, size_t out_stride) {
  const size_t ow = (size_t)w * 2;
  CARVE_CU_FOR(e, (size_t)h * 2 * ow * c) {
    const size_t p = e / c, ch = e % c;
    const size_t oy = p / ow, ox = p % ow;
    y[p * out_stride + ch] = x[((oy / 2) * w + ox / 2) * in_stride + ch];
  }
}

carve_status carve_cu_upsample2x(const carve_cu_ctx* ctx, uint32_t h, uint32_t w, uint32_t c, const __half* x,
                                 size_t in_stride, __half* y, size_t out_stride) {
  if (ctx == NULL || x == NULL || y == NULL || h == 0 || w == 0 || c == 0 || in_stride < c || out_stride < c) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  CARVE_LAUNCH(carve_cu_h_upsample2x_kernel, carve_cu_blocks((size_t)h * w * 4 * c), CARVE_CU_THREADS, ctx->stream,
               x, in_stride, h, w, c, y, out_stride);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

__global__ void carve_cu_h_copy_kernel(size_t pixels, uint32_t c, const __half* __restrict__ x, size_t in_stride,
                                       __half* __restrict__ y, size_t out_stride) {
  CARVE_CU_FOR(e, pixels * c) {
    const size_t p = e / c, ch = e % c;
    y[p * out_stride + ch] = x[p * in_stride + ch];
  }
}

carve_status carve_cu_copy(const carve_cu_ctx* ctx, size_t pixels, uint32_t c, const __half* x, size_t in_stride,
                           __half* y, size_t out_stride) {
  if (ctx == NULL || x == NULL || y == NULL || c == 0 || in_stride < c || out_stride < c) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (pixels == 0) {
    return CARVE_OK;
  }
  CARVE_LAUNCH(carve_cu_h_copy_kernel, carve_cu_blocks(pixels * c), CARVE_CU_THREADS, ctx->stream, pixels, c, x,
               in_stride, y, out_stride);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

__global__ void carve_cu_h_add_kernel(size_t pixels, uint32_t c, const __half* a, size_t a_stride, const __half* b,
                                      size_t b_stride, __half* y, size_t y_stride) {
  CARVE_CU_FOR(e, pixels * c) {
    const size_t p = e / c, ch = e % c;
    st(y, p * y_stride + ch, ld(a, p * a_stride + ch) + ld(b, p * b_stride + ch));
  }
}

carve_status carve_cu_add(const carve_cu_ctx* ctx, size_t pixels, uint32_t c, const __half* a, size_t a_stride,
                          const __half* b, size_t b_stride, __half* y, size_t y_stride) {
  if (ctx == NULL || a == NULL || b == NULL || y == NULL || c == 0 || a_stride < c || b_stride < c || y_stride < c) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (pixels == 0) {
    return CARVE_OK;
  }
  CARVE_LAUNCH(carve_cu_h_add_kernel, carve_cu_blocks(pixels * c), CARVE_CU_THREADS, ctx->stream, pixels, c, a,
               a_stride, b, b_stride, y, y_stride);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// ---- Attention ------------------------------------------------------------------------------

#define CARVE_CU_H_SOFTMAX_THREADS 256

static __device__ __forceinline__ float h_max_nan(float a, float b) {
  return a != a ? a : (b != b ? b : (b > a ? b : a));
}

// carve_cuda_ops.cu's row softmax on half rows, in place: one block per row of n; max, exp and
// the double sum in float / double; each probability rounded to half once.
__global__ void carve_cu_h_softmax_rows_kernel(__half* s, size_t n) {
  __shared__ float red_f[CARVE_CU_H_SOFTMAX_THREADS];
  __shared__ double red_d[CARVE_CU_H_SOFTMAX_THREADS];
  const unsigned t = threadIdx.x;
  __half* row = s + (size_t)blockIdx.x * n;
  float m = -INFINITY;
  for (size_t j = t; j < n; j += CARVE_CU_H_SOFTMAX_THREADS) {
    m = h_max_nan(m, ld(row, j));
  }
  red_f[t] = m;
  __syncthreads();
  for (unsigned half = CARVE_CU_H_SOFTMAX_THREADS / 2; half > 0; half /= 2) {
    if (t < half) {
      red_f[t] = h_max_nan(red_f[t], red_f[t + half]);
    }
    __syncthreads();
  }
  m = red_f[0];
  double sum = 0.0;
  for (size_t j = t; j < n; j += CARVE_CU_H_SOFTMAX_THREADS) {
    sum += (double)expf(ld(row, j) - m);
  }
  red_d[t] = sum;
  __syncthreads();
  for (unsigned half = CARVE_CU_H_SOFTMAX_THREADS / 2; half > 0; half /= 2) {
    if (t < half) {
      red_d[t] += red_d[t + half];
    }
    __syncthreads();
  }
  const float inv = 1.0f / (float)red_d[0];
  for (size_t j = t; j < n; j += CARVE_CU_H_SOFTMAX_THREADS) {
    st(row, j, expf(ld(row, j) - m) * inv);  // each thread rewrites only the entries it read
  }
}

__global__ void carve_cu_h_gather_v_kernel(const __half* __restrict__ qkv, size_t qkv_stride, uint32_t n,
                                           uint32_t heads, uint32_t key_dim, uint32_t head_dim,
                                           __half* __restrict__ v_out, size_t v_stride) {
  const size_t c = (size_t)heads * head_dim;
  CARVE_CU_FOR(e, (size_t)n * c) {
    const size_t i = e / c, ch = e % c, h = ch / head_dim, d = ch % head_dim;
    v_out[i * v_stride + ch] = qkv[i * qkv_stride + h * (2 * (size_t)key_dim + head_dim) + 2 * (size_t)key_dim + d];
  }
}

carve_status carve_cu_attention(const carve_cu_ctx* ctx, const __half* qkv, size_t qkv_stride, uint32_t n,
                                uint32_t heads, uint32_t key_dim, uint32_t head_dim, float scale, __half* out,
                                size_t out_stride, __half* v_out, size_t v_stride, float* scratch) {
  const size_t per_head = 2 * (size_t)key_dim + head_dim;
  if (!h_ctx_ok(ctx) || qkv == NULL || out == NULL || scratch == NULL || n == 0 || heads == 0 || key_dim == 0 ||
      head_dim == 0 || qkv_stride < heads * per_head || out_stride < (size_t)heads * head_dim ||
      (v_out != NULL && v_stride < (size_t)heads * head_dim) || !carve_cu_fits_int(qkv_stride) ||
      !carve_cu_fits_int(out_stride) || !carve_cu_fits_int((size_t)n * n)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  __half* s = (__half*)scratch;
  const float zero = 0.0f, one = 1.0f;
  const long long nn = (long long)n * n;
  // the GEMMs of carve_cuda_ops.cu's carve_cu_attention, in half with float accumulation
  CARVE_CU_CHECK_BLAS(cublasGemmStridedBatchedEx(
      ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)n, (int)key_dim, &scale, qkv + key_dim, CUDA_R_16F,
      (int)qkv_stride, (long long)per_head, qkv, CUDA_R_16F, (int)qkv_stride, (long long)per_head, &zero, s,
      CUDA_R_16F, (int)n, nn, (int)heads, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  CARVE_LAUNCH(carve_cu_h_softmax_rows_kernel, (unsigned)((size_t)heads * n), CARVE_CU_H_SOFTMAX_THREADS, ctx->stream,
               s, (size_t)n);
  CARVE_CU_CHECK_LAUNCH();
  CARVE_CU_CHECK_BLAS(cublasGemmStridedBatchedEx(
      ctx->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)head_dim, (int)n, (int)n, &one, qkv + 2 * (size_t)key_dim, CUDA_R_16F,
      (int)qkv_stride, (long long)per_head, s, CUDA_R_16F, (int)n, nn, &zero, out, CUDA_R_16F, (int)out_stride,
      (long long)head_dim, (int)heads, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (v_out != NULL) {
    CARVE_LAUNCH(carve_cu_h_gather_v_kernel, carve_cu_blocks((size_t)n * heads * head_dim), CARVE_CU_THREADS,
                 ctx->stream, qkv, qkv_stride, n, heads, key_dim, head_dim, v_out, v_stride);
    CARVE_CU_CHECK_LAUNCH();
  }
  return CARVE_OK;
}
