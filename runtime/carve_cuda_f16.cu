// carve runtime, CUDA: the half-precision kernels of the fp16 packages (see carve_cuda_f16.h).
//
// What is half-specific lives here: the math mode, the input's cast and the GEMMs
// (as in carve_cuda_ops.cu, column-major cuBLAS on NHWC views: Y^T = W X^T; here cublasGemmEx /
// cublasGemmStridedBatchedEx with CUDA_R_16F operands and float32 accumulation). The kernels and
// their host-side checks are carve_cuda_elem.h's, shared with the float32 runtime and instantiated
// here for __half: loads widened to float, float arithmetic, one rounding per store.

#include "carve_cuda_f16.h"
#include "carve_cuda_elem.h"

// ---- Context ----------------------------------------------------------------------------------

carve_status carve_cu_ctx_f16_math(carve_cu_ctx* ctx) {
  if (!carve_cu_ctx_ok(ctx)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const cublasMath_t mode = (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  CARVE_CU_CHECK_BLAS(cublasSetMathMode(ctx->blas, mode));
  return CARVE_OK;
}

// ---- Casts ----------------------------------------------------------------------------------

__global__ void carve_cu_h_from_f32_kernel(const float* __restrict__ x, __half* __restrict__ y, size_t n) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(i, n) { carve_cu_st(y, i, x[i]); }
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

// ---- GEMM -----------------------------------------------------------------------------------

// Y^T (m, n) = A^T (m, k) B (k, n), column-major halves, float32 accumulation, beta = 0
// (carve_cu_gemm_nt_fn: the convolutions).
static carve_status h_gemm_nt(const carve_cu_ctx* ctx, size_t m, size_t n, size_t k, const __half* a, size_t lda,
                              const __half* b, size_t ldb, __half* c, size_t ldc) {
  return carve_cu_gemm_nt_ex(ctx, m, n, k, a, lda, b, ldb, c, ldc, CUDA_R_16F, CUBLAS_COMPUTE_32F);
}

// The attention's batched GEMMs (carve_cu_gemm_batched_fn): halves, float32 accumulation, beta = 0.
static carve_status h_gemm_batched(const carve_cu_ctx* ctx, cublasOperation_t op_a, int m, int n, int k,
                                   float alpha, const __half* a, int lda, long long stride_a, const __half* b,
                                   int ldb, long long stride_b, __half* c, int ldc, long long stride_c, int batch) {
  const float zero = 0.0f;
  CARVE_CU_CHECK_BLAS(carve_cu_blas_bind(ctx));
  CARVE_CU_CHECK_BLAS(cublasGemmStridedBatchedEx(ctx->blas, op_a, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_16F, lda,
                                                 stride_a, b, CUDA_R_16F, ldb, stride_b, &zero, c, CUDA_R_16F, ldc,
                                                 stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return CARVE_OK;
}

// ---- Overloads of carve_cuda.h: the shared kernels of carve_cuda_elem.h on halves -------------

carve_status carve_cu_conv2d(const carve_cu_ctx* ctx, const carve_cu_conv* c, const __half* x, const __half* weight,
                             const __half* bias, const __half* residual, __half* y, float* scratch) {
  return carve_cu_conv2d_t(ctx, c, x, weight, bias, residual, y, scratch, h_gemm_nt);
}

carve_status carve_cu_conv2d_dwpw(const carve_cu_ctx* ctx, const carve_cu_conv* dw, const carve_cu_conv* pw,
                                  const __half* x, const __half* dw_weight, const __half* dw_bias, __half* mid,
                                  const __half* pw_weight, const __half* pw_bias, const __half* residual, __half* y,
                                  float* scratch) {
  return carve_cu_conv2d_dwpw_t(ctx, dw, pw, x, dw_weight, dw_bias, mid, pw_weight, pw_bias, residual, y, scratch,
                                h_gemm_nt);
}

carve_status carve_cu_maxpool2d(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w, uint32_t c,
                                uint32_t k, uint32_t stride, uint32_t pad, const __half* x, size_t in_stride,
                                __half* y, size_t out_stride) {
  return carve_cu_maxpool2d_t(ctx, batch, h, w, c, k, stride, pad, x, in_stride, y, out_stride);
}

carve_status carve_cu_maxpool2d_chain(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w, uint32_t c,
                                      uint32_t k, uint32_t n, const __half* x, size_t in_stride, __half* y,
                                      size_t out_stride, size_t y_step) {
  return carve_cu_maxpool2d_chain_t(ctx, batch, h, w, c, k, n, x, in_stride, y, out_stride, y_step);
}

carve_status carve_cu_upsample2x(const carve_cu_ctx* ctx, uint32_t h, uint32_t w, uint32_t c, const __half* x,
                                 size_t in_stride, __half* y, size_t out_stride) {
  return carve_cu_upsample2x_t(ctx, h, w, c, x, in_stride, y, out_stride);
}

carve_status carve_cu_copy(const carve_cu_ctx* ctx, size_t pixels, uint32_t c, const __half* x, size_t in_stride,
                           __half* y, size_t out_stride) {
  return carve_cu_copy_t(ctx, pixels, c, x, in_stride, y, out_stride);
}

carve_status carve_cu_add(const carve_cu_ctx* ctx, size_t pixels, uint32_t c, const __half* a, size_t a_stride,
                          const __half* b, size_t b_stride, __half* y, size_t y_stride) {
  return carve_cu_add_t(ctx, pixels, c, a, a_stride, b, b_stride, y, y_stride);
}

carve_status carve_cu_attention(const carve_cu_ctx* ctx, uint32_t batch, const __half* qkv, size_t qkv_stride,
                                uint32_t n, uint32_t heads, uint32_t key_dim, uint32_t head_dim, float scale,
                                __half* out, size_t out_stride, __half* v_out, size_t v_stride, float* scratch) {
  return carve_cu_attention_t(ctx, batch, qkv, qkv_stride, n, heads, key_dim, head_dim, scale, out, out_stride, v_out,
                              v_stride, scratch, h_gemm_batched);
}

carve_status carve_cu_attention_pe(const carve_cu_ctx* ctx, const __half* qkv, size_t qkv_stride, uint32_t heads,
                                   uint32_t key_dim, uint32_t head_dim, float scale, __half* o, __half* v,
                                   const carve_cu_conv* pe, const __half* pe_weight, const __half* pe_bias,
                                   __half* out, float* scratch) {
  return carve_cu_attention_pe_t(ctx, qkv, qkv_stride, heads, key_dim, head_dim, scale, o, v, pe, pe_weight, pe_bias,
                                 out, scratch, h_gemm_batched, h_gemm_nt);
}

carve_status carve_cu_deconv2d(const carve_cu_ctx* ctx, uint32_t h, uint32_t w, uint32_t cin, uint32_t cout,
                               uint32_t k, const __half* x, size_t in_stride, const __half* weight,
                               const __half* bias, carve_cu_act act, __half* y, size_t out_stride, float* scratch) {
  return carve_cu_deconv2d_t(ctx, h, w, cin, cout, k, x, in_stride, weight, bias, act, y, out_stride, scratch,
                             h_gemm_nt);
}

carve_status carve_cu_global_avgpool(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w, uint32_t c,
                                     const __half* x, size_t in_stride, __half* y) {
  return carve_cu_global_avgpool_t(ctx, batch, h, w, c, x, in_stride, y);
}

carve_status carve_cu_linear(const carve_cu_ctx* ctx, uint32_t batch, uint32_t cin, uint32_t cout, const __half* x,
                             const __half* weight, const __half* bias, __half* y) {
  return carve_cu_linear_t(ctx, batch, cin, cout, x, weight, bias, y, h_gemm_nt);
}

carve_status carve_cu_softmax(const carve_cu_ctx* ctx, uint32_t batch, uint32_t n, const __half* x, float* y) {
  return carve_cu_softmax_t(ctx, batch, n, x, y);
}
