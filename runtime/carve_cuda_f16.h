// carve runtime, CUDA, half precision: the kernels of the cuda backend's fp16 packages
// (`carve generate --backend cuda --precision fp16`, docs/backends/cuda.md#fp16).
//
// CONTRACT, in addition to carve_cuda.h (whose rules hold: device pointers, work enqueued on
// ctx->stream, nothing allocated or synchronised, carve_status results):
//   * Activations are NHWC IEEE binary16 (__half) with a pixel stride >= channels, weights and
//     biases binary16 in the blob's layouts (OHWI convolutions). Every kernel reads halves,
//     computes in float32 and rounds once to half when it stores (round to nearest even), except
//     where an output is float32 (below).
//   * GEMMs are cublasGemmEx / cublasGemmStridedBatchedEx with CUDA_R_16F operands and
//     CUBLAS_COMPUTE_32F (float32 accumulation: tensor cores on sm_75 and later).
//   * The functions are C++ overloads of carve_cuda.h's names, with __half pointers where those
//     take float ones, so that a generated package's calls read the same in both precisions.
//     The scratch of conv2d, deconv2d and attention is still passed as float* (the fp32 signature)
//     and used as halves: the fp32 scratch sizes are upper bounds of the fp16 needs.
//   * The edges of the network: the letterbox, the classify pre-processing and a device tensor's layout
//     change write the input as halves (carve_cuda.h's __half overloads of carve_cu_letterbox /
//     carve_cu_classify_preprocess / carve_cu_nchw_to_nhwc_batch), a host tensor is uploaded as float32
//     and cast (carve_cu_f32_to_f16); the head (top-k, NMS, box decoding) reads the half maps where the
//     network wrote them (carve_cu_level_h: the carve_cuda.h / carve_cuda_nms.h overloads of the
//     e2e and NMS functions, in carve_cuda_topk.cu / carve_cuda_nms.cu), widening each value to
//     float32 as it reads it, and computes and writes its rows in float32; the classify softmax
//     reads half logits and writes float32 probabilities; a segment package's prototypes are
//     widened to float32 by carve_cuda.h's carve_cu_f16_to_f32 (the blob's exact widening).
// C++ only (the .cu files of a package; the package header stays C).

#ifndef CARVE_CUDA_F16_H
#define CARVE_CUDA_F16_H

#include "carve_cuda.h"

#ifndef CARVE_CUDA_EMULATION
#include <cuda_fp16.h>
#endif

// ---- Context ------------------------------------------------------------------------------

// The cuBLAS math mode of an fp16 package, set once after carve_cu_ctx_init(_with) (which chooses
// the fp32 packages' mode): CUBLAS_DEFAULT_MATH (tensor cores for half operands; the pedantic mode
// would keep GemmEx off them) | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (a split-K reduction
// accumulates in float32, not in the half output type). Host function.
carve_status carve_cu_ctx_f16_math(carve_cu_ctx* ctx);

// ---- Casts --------------------------------------------------------------------------------

// y[i] = half(x[i]) for i < n (dense).
carve_status carve_cu_f32_to_f16(const carve_cu_ctx* ctx, const float* x, __half* y, size_t n);

// ---- Overloads of carve_cuda.h ------------------------------------------------------------

// carve_cu_conv2d in half: 1x1 convs one GemmEx on the NHWC view (half result), others im2col
// (halves, in scratch) + GemmEx, depthwise a direct kernel (float accumulation); then the
// epilogue y = half(act(y + b) + r) in float. The GEMM's result is rounded to half before the
// epilogue adds the bias (two roundings; depthwise: one).
carve_status carve_cu_conv2d(const carve_cu_ctx* ctx, const carve_cu_conv* c, const __half* x, const __half* weight,
                             const __half* bias, const __half* residual, __half* y, float* scratch);

carve_status carve_cu_conv2d_dwpw(const carve_cu_ctx* ctx, const carve_cu_conv* dw, const carve_cu_conv* pw,
                                  const __half* x, const __half* dw_weight, const __half* dw_bias, __half* mid,
                                  const __half* pw_weight, const __half* pw_bias, const __half* residual, __half* y,
                                  float* scratch);

carve_status carve_cu_maxpool2d(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w, uint32_t c,
                                uint32_t k, uint32_t stride, uint32_t pad, const __half* x, size_t in_stride,
                                __half* y, size_t out_stride);
carve_status carve_cu_maxpool2d_chain(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w, uint32_t c,
                                      uint32_t k, uint32_t n, const __half* x, size_t in_stride, __half* y,
                                      size_t out_stride, size_t y_step);
carve_status carve_cu_upsample2x(const carve_cu_ctx* ctx, uint32_t h, uint32_t w, uint32_t c, const __half* x,
                                 size_t in_stride, __half* y, size_t out_stride);
carve_status carve_cu_copy(const carve_cu_ctx* ctx, size_t pixels, uint32_t c, const __half* x, size_t in_stride,
                           __half* y, size_t out_stride);
carve_status carve_cu_add(const carve_cu_ctx* ctx, size_t pixels, uint32_t c, const __half* a, size_t a_stride,
                          const __half* b, size_t b_stride, __half* y, size_t y_stride);

// carve_cu_attention in half: S = scale Q K^T by GemmEx (half result, into scratch), the row
// softmax in float (sum in double, as the fp32 kernel) stored as half in place, O = P V by
// GemmEx, per image or per head as carve_cu_attention; scratch: carve_cu_attention_scratch_floats(batch,
// n, heads) floats (halves used).
carve_status carve_cu_attention(const carve_cu_ctx* ctx, uint32_t batch, const __half* qkv, size_t qkv_stride,
                                uint32_t n, uint32_t heads, uint32_t key_dim, uint32_t head_dim, float scale,
                                __half* out, size_t out_stride, __half* v_out, size_t v_stride, float* scratch);
// carve_cu_attention_pe in half: fused, the pe convolution's sum, bias and O in float, one rounding.
carve_status carve_cu_attention_pe(const carve_cu_ctx* ctx, const __half* qkv, size_t qkv_stride, uint32_t heads,
                                   uint32_t key_dim, uint32_t head_dim, float scale, __half* o, __half* v,
                                   const carve_cu_conv* pe, const __half* pe_weight, const __half* pe_bias,
                                   __half* out, float* scratch);

// The segment and classify heads in half. carve_cu_deconv2d: the GemmEx result (halves, in scratch: the fp32
// scratch size is an upper bound) rounded before the gather adds the bias (two roundings, as a convolution);
// carve_cu_global_avgpool: the sum in double, one rounding; carve_cu_linear: Y^T = W X^T by one GemmEx (half
// result), then the bias in float (two roundings); carve_cu_softmax: half logits, float32 probabilities
// (the classify output, which an fp16 package keeps in float32 as it keeps the detection rows).
carve_status carve_cu_deconv2d(const carve_cu_ctx* ctx, uint32_t h, uint32_t w, uint32_t cin, uint32_t cout,
                               uint32_t k, const __half* x, size_t in_stride, const __half* weight,
                               const __half* bias, carve_cu_act act, __half* y, size_t out_stride, float* scratch);
carve_status carve_cu_global_avgpool(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w, uint32_t c,
                                     const __half* x, size_t in_stride, __half* y);
carve_status carve_cu_linear(const carve_cu_ctx* ctx, uint32_t batch, uint32_t cin, uint32_t cout, const __half* x,
                             const __half* weight, const __half* bias, __half* y);
carve_status carve_cu_softmax(const carve_cu_ctx* ctx, uint32_t batch, uint32_t n, const __half* x, float* y);

#endif  // CARVE_CUDA_F16_H
