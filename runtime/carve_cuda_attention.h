// carve runtime, CUDA: the PSA blocks' multi-head self-attention (carve_cu_attention, carve_cuda.h) over the storage
// type T of both precisions, two ways:
//
// * fused (where the context asks for it, carve_cu_ctx_set_attention_impl, and the shape fits,
//   carve_cu_attention_fusable): one launch for every (query rows, head, image), carve_cu_attention_fused_kernel.
//   A block of CARVE_CU_ATTN_THREADS threads takes CARVE_CU_ATTN_ROWS query rows of one head of one image: stages
//   those rows of Q in shared memory, computes their scores against every key (S = scale Q K^T, float32, kept in
//   shared memory: CARVE_CU_ATTN_ROWS x n floats, never written to the device), their row softmax (a warp per row,
//   the arithmetic of carve_cu_softmax_warp_rows_kernel), then O = P V in float32, each output rounded once; it also
//   copies those rows of V to v_out (the pe convolution's input). S and P never leave the SM and no scratch is used:
//   1 launch instead of the GEMM path's 3 and V's gather. The reduction orders are fixed per (image, head, row), so a
//   batch's results are its images' alone, bit for bit on a GPU too. With the PSA block's pe convolution after it
//   (carve_cu_attention_pe), the same launch adds the pe of its pixels to O and writes that instead of O and V: the
//   pe's launch and the O / V maps are gone.
// * the GEMM path (the default): S and O through the precision's strided-batched cuBLAS GEMMs with a row-softmax
//   launch between them (S and P in the scratch, as T), then V's gather. Every call of a context that does not ask
//   for the fused kernel: its scalar float32 FMAs lose to the GEMMs' tensor cores even at batch 1 (measured on an
//   H200 2026-11-28: fused 65 us per launch in Nsight Compute, the GEMM path 0.106 ms faster per forward of yolo26n
//   640 at fp16 batch 1); also batches above CARVE_CU_ATTN_MAX_BATCH (a batch of 32 is about 1e9 multiply-adds an
//   attention at yolo26's 640) and shapes that do not fit the fused kernel's shared memory.
//
// Not part of the API; C++ only; included by carve_cuda_elem.h after its loads, stores and the row softmax.

#ifndef CARVE_CUDA_ATTENTION_H
#define CARVE_CUDA_ATTENTION_H

#include "carve_cuda_impl.h"

#define CARVE_CU_ATTN_ROWS 8        // query rows per block of the fused kernel: one warp each in the softmax
#define CARVE_CU_ATTN_THREADS 256   // CARVE_CU_ATTN_ROWS warps
// The limits of the calls it takes, CARVE_CU_ATTN_MAX_N / _DIM / _BATCH: carve_cuda.h.
// Outputs of O a thread accumulates: the block's CARVE_CU_ATTN_ROWS x head_dim, spread over its threads.
#define CARVE_CU_ATTN_PAIRS (CARVE_CU_ATTN_ROWS * CARVE_CU_ATTN_MAX_DIM / CARVE_CU_ATTN_THREADS)

// Whether carve_cu_attention runs the fused kernel for this call: the context asks for it (attention_fused), and the
// shape fits (above; heads within a grid's y).
static inline int carve_cu_attention_fusable(const carve_cu_ctx* ctx, uint32_t batch, uint32_t n, uint32_t heads,
                                             uint32_t key_dim, uint32_t head_dim) {
  return ctx->attention_fused && batch <= CARVE_CU_ATTN_MAX_BATCH && n <= CARVE_CU_ATTN_MAX_N && heads <= 65535u &&
         key_dim <= CARVE_CU_ATTN_MAX_DIM && head_dim <= CARVE_CU_ATTN_MAX_DIM;
}

// The PSA block's pe convolution after the attention (carve_cu_attention_pe): a depthwise k x k convolution of V
// (stride 1, padding k / 2) over the image's h x w pixels, its weights [c][ky][kx] and bias (c = head head_dim + d),
// optionally SiLU, plus the attention's output: out = act(pe(V) + b) + O.
template <typename T>
struct carve_cu_attn_pe {
  const T* weight;
  const T* bias;
  uint32_t h, w, k;
  int silu;
};

// Block (x, y, z): query rows [x CARVE_CU_ATTN_ROWS, + CARVE_CU_ATTN_ROWS) of head y of image z. Each image's n
// pixels follow the previous image's (qkv_stride apart); head h's channels of a pixel are q (key_dim), k (key_dim),
// v (head_dim) from h (2 key_dim + head_dim) on. Scores: sum over c of q[c] k[c] in c order (fmaf, float32), times
// scale. Softmax: the row's NaN-propagating maximum m, the sum of expf(s - m) in double (each lane its terms j = lane,
// lane + 32, ..., then the warp's shuffle tree), p = expf(s - m) / sum. O[d] = sum over j of p[j] v[j][d] in j order
// (fmaf, float32), stored with carve_cu_st (one rounding for __half); V copied as T. PE: instead of O and V, out =
// act(pe(V) + b) + O for the block's pixels and channels (the taps and their sum as carve_cu_depthwise_kernel's,
// carve_cu_for_window; O unrounded), one rounding.
template <typename T, bool PE = false>
__global__ void __launch_bounds__(CARVE_CU_ATTN_THREADS)
    carve_cu_attention_fused_kernel(const T* __restrict__ qkv, size_t qkv_stride, uint32_t n, uint32_t key_dim,
                                    uint32_t head_dim, float scale, T* __restrict__ out, size_t out_stride,
                                    T* __restrict__ v_out, size_t v_stride, carve_cu_attn_pe<T> pe) {
  CARVE_CU_KERNEL_ENTRY();
  __shared__ float q_s[CARVE_CU_ATTN_ROWS][CARVE_CU_ATTN_MAX_DIM];
  __shared__ float p_s[CARVE_CU_ATTN_ROWS][CARVE_CU_ATTN_MAX_N];
  const uint32_t i0 = blockIdx.x * CARVE_CU_ATTN_ROWS, head = blockIdx.y, image = blockIdx.z;
  const uint32_t rows = n - i0 < CARVE_CU_ATTN_ROWS ? n - i0 : CARVE_CU_ATTN_ROWS;
  const size_t first = (size_t)image * n;  // the image's first pixel
  const T* base = qkv + first * qkv_stride + (size_t)head * (2 * (size_t)key_dim + head_dim);
  for (uint32_t e = threadIdx.x; e < CARVE_CU_ATTN_ROWS * key_dim; e += CARVE_CU_ATTN_THREADS) {
    const uint32_t r = e / key_dim, c = e - r * key_dim;
    q_s[r][c] = r < rows ? carve_cu_ld(base + (size_t)(i0 + r) * qkv_stride, c) : 0.0f;
  }
  __syncthreads();
  for (uint32_t j = threadIdx.x; j < n; j += CARVE_CU_ATTN_THREADS) {  // S: a key per thread, the block's rows
    const T* kj = base + (size_t)j * qkv_stride + key_dim;
    float acc[CARVE_CU_ATTN_ROWS];
    CARVE_CU_UNROLL
    for (int r = 0; r < CARVE_CU_ATTN_ROWS; r++) acc[r] = 0.0f;
    for (uint32_t c = 0; c < key_dim; c++) {
      const float k = carve_cu_ld(kj, c);
      CARVE_CU_UNROLL
      for (int r = 0; r < CARVE_CU_ATTN_ROWS; r++) acc[r] = fmaf(q_s[r][c], k, acc[r]);
    }
    CARVE_CU_UNROLL
    for (int r = 0; r < CARVE_CU_ATTN_ROWS; r++) p_s[r][j] = scale * acc[r];
  }
  __syncthreads();
  const uint32_t lane = threadIdx.x % 32, row = threadIdx.x / 32;
  if (row < rows) {  // P: warp `row` its row's softmax, in place (whole warps: the shuffles have all 32 lanes)
    carve_cu_softmax_warp_row(p_s[row], n, p_s[row], lane);
  }
  __syncthreads();
  // O: output e = r head_dim + d of the block's rows x head_dim, thread t the e = t, t + CARVE_CU_ATTN_THREADS, ...
  uint32_t pr[CARVE_CU_ATTN_PAIRS], pd[CARVE_CU_ATTN_PAIRS];
  float acc[CARVE_CU_ATTN_PAIRS];
  const uint32_t outputs = rows * head_dim;
  CARVE_CU_UNROLL
  for (int k = 0; k < CARVE_CU_ATTN_PAIRS; k++) {
    const uint32_t e = threadIdx.x + (uint32_t)k * CARVE_CU_ATTN_THREADS;
    pr[k] = e / head_dim;
    pd[k] = e - pr[k] * head_dim;
    acc[k] = 0.0f;
  }
  const T* v = base + 2 * (size_t)key_dim;
  for (uint32_t j = 0; j < n; j++) {
    const T* vj = v + (size_t)j * qkv_stride;
    CARVE_CU_UNROLL
    for (int k = 0; k < CARVE_CU_ATTN_PAIRS; k++) {
      if (threadIdx.x + (uint32_t)k * CARVE_CU_ATTN_THREADS < outputs) {
        acc[k] = fmaf(p_s[pr[k]][j], carve_cu_ld(vj, pd[k]), acc[k]);
      }
    }
  }
  CARVE_CU_UNROLL
  for (int k = 0; k < CARVE_CU_ATTN_PAIRS; k++) {
    if (threadIdx.x + (uint32_t)k * CARVE_CU_ATTN_THREADS < outputs) {
      const uint32_t i = i0 + pr[k];
      const size_t pixel = first + i, c = (size_t)head * head_dim + pd[k];
      if constexpr (PE) {  // out = act(pe(V) + b) + O: the depthwise kernel's taps and sum, then O
        const uint32_t y = i / pe.w, x = i - y * pe.w;
        const long long r = pe.k / 2;
        const T* wc = pe.weight + c * pe.k * pe.k;
        float a = 0.0f;
        carve_cu_for_window(y - r, x - r, pe.k, pe.k, pe.h, pe.w, [&](size_t tap, size_t p) {
          a += carve_cu_ld(v, p * qkv_stride + pd[k]) * carve_cu_ld(wc, tap);
        });
        float y_out = a + carve_cu_ld(pe.bias, c);
        if (pe.silu) {
          y_out = carve_cu_silu(y_out);
        }
        carve_cu_st(out, pixel * out_stride + c, y_out + acc[k]);
      } else {
        carve_cu_st(out, pixel * out_stride + c, acc[k]);
        if (v_out != NULL) {
          v_out[pixel * v_stride + c] = v[(size_t)i * qkv_stride + pd[k]];
        }
      }
    }
  }
}

// v_out[i][h hd + e] = qkv[i][h (2 kd + hd) + 2 kd + e]. I: the element index type (uint32_t where n heads hd < 2^32,
// the launch's usual case: a 64-bit index costs a software division per element; else size_t).
template <typename T, typename I>
__global__ void carve_cu_gather_v_kernel(const T* __restrict__ qkv, size_t qkv_stride, uint32_t n, uint32_t heads,
                                         uint32_t key_dim, uint32_t head_dim, T* __restrict__ v_out,
                                         size_t v_stride) {
  CARVE_CU_KERNEL_ENTRY();
  const I c = (I)heads * head_dim, total = (I)n * c;
  for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (I)gridDim.x * blockDim.x) {
    const I i = e / c, ch = e - i * c, h = ch / head_dim, d = ch - h * head_dim;
    v_out[i * v_stride + ch] = qkv[i * qkv_stride + h * (2 * (size_t)key_dim + head_dim) + 2 * (size_t)key_dim + d];
  }
}

// How carve_cu_attention_t runs `batch` images of `heads` heads, whichever takes fewer launches (V's
// gather aside): per image (3 batch launches: S's GEMM over the heads, the softmax of the image's rows,
// O's GEMM over the heads), or per head (2 heads + 1: S's GEMM over the images for each head, ONE
// softmax of every row of the batch, O's GEMM over the images for each head). A tie (and batch 1)
// runs per image, whose scratch holds one image's S.
static inline int carve_cu_attention_per_head(uint32_t batch, uint32_t heads) {
  return 2 * (uint64_t)heads + 1 < 3 * (uint64_t)batch;
}

// The fused kernel over the call (PE: with the pe convolution, `pe`; else V to v_out, which may be NULL).
template <typename T, bool PE>
static void carve_cu_attention_fused_launch(const carve_cu_ctx* ctx, uint32_t batch, const T* qkv, size_t qkv_stride,
                                            uint32_t n, uint32_t heads, uint32_t key_dim, uint32_t head_dim,
                                            float scale, T* out, size_t out_stride, T* v_out, size_t v_stride,
                                            carve_cu_attn_pe<T> pe) {
  const dim3 grid((n + CARVE_CU_ATTN_ROWS - 1) / CARVE_CU_ATTN_ROWS, heads, batch);
  void (*const kernel)(const T*, size_t, uint32_t, uint32_t, uint32_t, float, T*, size_t, T*, size_t,
                       carve_cu_attn_pe<T>) = carve_cu_attention_fused_kernel<T, PE>;
  CARVE_LAUNCH(kernel, grid, CARVE_CU_ATTN_THREADS, ctx->stream, qkv, qkv_stride, n, key_dim, head_dim, scale, out,
               out_stride, v_out, v_stride, pe);
}

// carve_cu_attention's arguments: the views hold what they must, and the GEMM path's sizes fit cuBLAS' ints.
template <typename T>
static inline int carve_cu_attention_args_ok(const carve_cu_ctx* ctx, uint32_t batch, const T* qkv, size_t qkv_stride,
                                             uint32_t n, uint32_t heads, uint32_t key_dim, uint32_t head_dim,
                                             const T* out, size_t out_stride, const T* v_out, size_t v_stride,
                                             const float* scratch) {
  const size_t per_head = 2 * (size_t)key_dim + head_dim;
  return carve_cu_ctx_ok(ctx) && qkv != NULL && out != NULL && scratch != NULL && batch != 0 && n != 0 &&
         heads != 0 && key_dim != 0 && head_dim != 0 && qkv_stride >= heads * per_head &&
         out_stride >= (size_t)heads * head_dim && (v_out == NULL || v_stride >= (size_t)heads * head_dim) &&
         carve_cu_fits_int(qkv_stride) && carve_cu_fits_int(out_stride) && carve_cu_fits_int((size_t)n * n) &&
         carve_cu_fits_int(batch) && carve_cu_fits_int(heads) && carve_cu_fits_int((size_t)batch * heads * n);
}

// carve_cu_attention over T: the fused kernel where carve_cu_attention_fusable (one launch, the scratch unused),
// else the GEMM path with the precision's batched GEMM; scratch:
// carve_cu_attention_scratch_floats(batch, n, heads) floats, used as that many T (S, then P in
// place). The images of a batch one after another (each image's n pixels follow the previous
// image's: a uniform n qkv_stride elements apart). S of image b, head h is the n x n block
// (b heads + h) of the scratch when run per head (block h, reused by every image, per image); the
// GEMM of each (image, head) pair and the softmax of each row are the same either way, only
// grouped differently into launches. V of every image at once.
template <typename T>
static carve_status carve_cu_attention_t(const carve_cu_ctx* ctx, uint32_t batch, const T* qkv, size_t qkv_stride,
                                         uint32_t n, uint32_t heads, uint32_t key_dim, uint32_t head_dim,
                                         float scale, T* out, size_t out_stride, T* v_out, size_t v_stride,
                                         float* scratch, carve_cu_gemm_batched_fn<T> gemm) {
  if (!carve_cu_attention_args_ok(ctx, batch, qkv, qkv_stride, n, heads, key_dim, head_dim, out, out_stride, v_out,
                                  v_stride, scratch)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t per_head = 2 * (size_t)key_dim + head_dim;
  if (carve_cu_attention_fusable(ctx, batch, n, heads, key_dim, head_dim)) {
    carve_cu_attention_fused_launch<T, false>(ctx, batch, qkv, qkv_stride, n, heads, key_dim, head_dim, scale, out,
                                              out_stride, v_out, v_stride, carve_cu_attn_pe<T>{NULL, NULL, 0u, 0u, 0u, 0});
    CARVE_CU_CHECK_LAUNCH();
    return CARVE_OK;
  }
  T* s = (T*)scratch;
  const long long nn = (long long)n * n;
  if (carve_cu_attention_per_head(batch, heads)) {
    const long long in_img = (long long)n * (long long)qkv_stride;   // image b + 1's pixels after image b's
    const long long out_img = (long long)n * (long long)out_stride;
    const long long s_img = (long long)heads * nn;                   // image b + 1's S blocks after image b's
    for (uint32_t h = 0; h < heads; h++) {  // S of head h of every image (the GEMM of the per-image path)
      const T* q = qkv + h * per_head;
      const carve_status st = gemm(ctx, CUBLAS_OP_T, (int)n, (int)n, (int)key_dim, scale, q + key_dim,
                                   (int)qkv_stride, in_img, q, (int)qkv_stride, in_img, s + h * nn, (int)n, s_img,
                                   (int)batch);
      if (st != CARVE_OK) {
        return st;
      }
    }
    // P = softmax over each row of S: batch * heads * n rows of n, in place, one launch.
    carve_cu_softmax_rows(ctx, s, n, (size_t)batch * heads * n);
    CARVE_CU_CHECK_LAUNCH();
    for (uint32_t h = 0; h < heads; h++) {  // O of head h of every image, at column h hd of out
      const carve_status st = gemm(ctx, CUBLAS_OP_N, (int)head_dim, (int)n, (int)n, 1.0f,
                                   qkv + h * per_head + 2 * (size_t)key_dim, (int)qkv_stride, in_img, s + h * nn,
                                   (int)n, s_img, out + (size_t)h * head_dim, (int)out_stride, out_img, (int)batch);
      if (st != CARVE_OK) {
        return st;
      }
    }
  } else {
    for (uint32_t b = 0; b < batch; b++) {
      const T* q = qkv + (size_t)b * n * qkv_stride;  // image b's n pixels
      T* o = out + (size_t)b * n * out_stride;
      // Per head h: S_h (n, n) row-major = scale Q_h K_h^T, i.e. column-major S^T = scale K Q^T:
      // A = K_h (column-major (kd, n), ld qkv_stride) transposed, B = Q_h (kd, n).
      carve_status st = gemm(ctx, CUBLAS_OP_T, (int)n, (int)n, (int)key_dim, scale, q + key_dim, (int)qkv_stride,
                             (long long)per_head, q, (int)qkv_stride, (long long)per_head, s, (int)n, nn, (int)heads);
      if (st != CARVE_OK) {
        return st;
      }
      // P = softmax over each row of S (heads * n rows of n), in place.
      carve_cu_softmax_rows(ctx, s, n, (size_t)heads * n);
      CARVE_CU_CHECK_LAUNCH();
      // O_h (n, hd) = P_h V_h, i.e. column-major O^T (hd, n) = V^T (hd, n) P^T (n, n), written
      // at column h hd of out.
      st = gemm(ctx, CUBLAS_OP_N, (int)head_dim, (int)n, (int)n, 1.0f, q + 2 * (size_t)key_dim, (int)qkv_stride,
                (long long)per_head, s, (int)n, nn, o, (int)out_stride, (long long)head_dim, (int)heads);
      if (st != CARVE_OK) {
        return st;
      }
    }
  }
  if (v_out != NULL) {  // a pixel-wise gather: the batch's pixels at once
    const size_t total = (size_t)batch * n * heads * head_dim;
    void (*const gather)(const T*, size_t, uint32_t, uint32_t, uint32_t, uint32_t, T*, size_t) =
        total <= CARVE_CU_FOR32_MAX ? carve_cu_gather_v_kernel<T, uint32_t> : carve_cu_gather_v_kernel<T, size_t>;
    CARVE_LAUNCH(gather, carve_cu_blocks(total), CARVE_CU_THREADS, ctx->stream, qkv, qkv_stride, batch * n, heads,
                 key_dim, head_dim, v_out, v_stride);
    CARVE_CU_CHECK_LAUNCH();
  }
  return CARVE_OK;
}

// carve_cu_attention_pe over T: the attention and the pe convolution after it as one fused launch (o and v not
// written) where carve_cu_attention_fusable, else carve_cu_attention_t into o and v, then the pe convolution
// (carve_cu_conv2d_t) with o as its residual. pe: depthwise over heads head_dim channels, k x k (k odd), stride 1,
// padding k / 2, its in_stride v's, res_stride o's, out_stride out's, h w the attention's pixels, batch its images.
template <typename T>
static carve_status carve_cu_attention_pe_t(const carve_cu_ctx* ctx, const T* qkv, size_t qkv_stride, uint32_t heads,
                                            uint32_t key_dim, uint32_t head_dim, float scale, T* o, T* v,
                                            const carve_cu_conv* pe, const T* pe_weight, const T* pe_bias, T* out,
                                            float* scratch, carve_cu_gemm_batched_fn<T> gemm,
                                            carve_cu_gemm_nt_fn<T> gemm_nt) {
  // (the attention's own arguments, o's included: carve_cu_attention_args_ok below)
  if (pe == NULL || !carve_cu_conv_valid(pe) || pe_weight == NULL || pe_bias == NULL || out == NULL || v == NULL ||
      pe->cin != (uint64_t)heads * head_dim || pe->groups != pe->cin || pe->kh != pe->kw || pe->kh % 2 != 1 ||
      pe->stride != 1 || pe->pad != pe->kh / 2 || (uint64_t)pe->h * pe->w > 0xFFFFFFFFu) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const uint32_t batch = carve_cu_batch(pe), n = pe->h * pe->w;
  if (!carve_cu_attention_args_ok(ctx, batch, qkv, qkv_stride, n, heads, key_dim, head_dim, (const T*)o,
                                  pe->res_stride, (const T*)v, pe->in_stride, scratch)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (carve_cu_attention_fusable(ctx, batch, n, heads, key_dim, head_dim)) {
    carve_cu_attention_fused_launch<T, true>(
        ctx, batch, qkv, qkv_stride, n, heads, key_dim, head_dim, scale, out, pe->out_stride, (T*)NULL, 0,
        carve_cu_attn_pe<T>{pe_weight, pe_bias, pe->h, pe->w, pe->kh, pe->act == CARVE_CU_ACT_SILU});
    CARVE_CU_CHECK_LAUNCH();
    return CARVE_OK;
  }
  const carve_status st = carve_cu_attention_t(ctx, batch, qkv, qkv_stride, n, heads, key_dim, head_dim, scale, o,
                                               pe->res_stride, v, pe->in_stride, scratch, gemm);
  return st != CARVE_OK ? st : carve_cu_conv2d_t(ctx, pe, (const T*)v, pe_weight, pe_bias, (const T*)o, out, scratch,
                                                 gemm_nt);
}

#endif  // CARVE_CUDA_ATTENTION_H
