// carve runtime, CUDA: context, convolutions, element-wise ops, pooling, linear,
// softmax, attention and mask logits (see carve_cuda.h).
//
// GEMMs go through cuBLAS, which is column-major: an NHWC activation (P pixels, c
// channels, pixel stride s) is, read column-major, the (c, P) matrix X^T with leading
// dimension s; OHWI weights (cout, K) row-major are the (K, cout) column-major W^T with
// leading dimension K. So Y^T (cout, P) = W (cout, K) X^T (K, P) is
//   cublasSgemm(OP_T, OP_N, m = cout, n = P, k = K, A = W, lda = K, B = X, ldb = s,
//               C = Y, ldc = out_stride)
// and the result lands straight in the strided NHWC output.
//
// The kernels that the fp16 runtime shares (convolution, pooling, upsample, copy, add, softmax,
// attention) are written once over the element type in carve_cuda_elem.h; the functions here
// instantiate them for float with this file's float32 GEMMs.

#include "carve_cuda_elem.h"

// ---- Context --------------------------------------------------------------------------

extern "C" size_t carve_cu_blas_workspace_bytes(void) {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return 0;
  }
  return major >= 9 ? CARVE_CU_BLAS_WORKSPACE_BYTES_SM90 : CARVE_CU_BLAS_WORKSPACE_BYTES;
}

// Binds ctx->blas (created here when `blas` is NULL) to the stream, the math mode and the workspace.
static carve_status bind_blas(carve_cu_ctx* ctx, cublasHandle_t blas, size_t workspace) {
  if (blas == NULL) {
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
      return CARVE_ERR_BACKEND;
    }
    ctx->owns_blas = 1;
  }
  ctx->blas = blas;
  ctx->blas_workspace_bytes = workspace;
  // Plain float32 GEMMs: no TF32 tensor-op math (pedantic where the library has it);
  // the workspace set after the stream (cublasSetStream resets it to the default).
  if (cublasSetStream(ctx->blas, ctx->stream) != CUBLAS_STATUS_SUCCESS ||
      cublasSetMathMode(ctx->blas, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS ||
      cublasSetWorkspace(ctx->blas, ctx->blas_workspace, workspace) != CUBLAS_STATUS_SUCCESS) {
    return CARVE_ERR_BACKEND;
  }
  return CARVE_OK;
}

static void ctx_clear(carve_cu_ctx* ctx, cudaStream_t stream) {
  ctx->stream = stream;
  ctx->blas = NULL;
  ctx->blas_workspace = NULL;
  ctx->owns_blas = 0;
  ctx->owns_workspace = 0;
  ctx->conv_tf32 = 0;
  ctx->conv_fused = 0;
  ctx->sm_count = 1;
  ctx->blas_workspace_bytes = 0;
  ctx->rebind = 0;
  ctx->tactics = NULL;
  ctx->split_counters = NULL;
  ctx->split_lanes = 0;
  ctx->attention_fused = 0;  // the GEMM path (carve_cu_ctx_set_attention_impl)
}

// The split-K counters at the end of the `bytes` of workspace (carve_cuda.h, CARVE_CU_SPLIT_BYTES), zeroed on the
// stream; the cuBLAS share is what lies before them.
static carve_status split_counters_init(carve_cu_ctx* ctx, size_t bytes) {
  ctx->split_counters = (unsigned*)((unsigned char*)ctx->blas_workspace + bytes - CARVE_CU_SPLIT_BYTES);
  return cudaMemsetAsync(ctx->split_counters, 0, CARVE_CU_SPLIT_BYTES, ctx->stream) == cudaSuccess
             ? CARVE_OK
             : CARVE_ERR_BACKEND;
}

// The device's SM count into ctx->sm_count (the fused convolution's tile choice, carve_cuda_igemm_tile.h).
static carve_status read_sm_count(carve_cu_ctx* ctx) {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1) {
    return CARVE_ERR_BACKEND;
  }
  ctx->sm_count = sms;
  return CARVE_OK;
}

extern "C" carve_status carve_cu_ctx_init(carve_cu_ctx* ctx, cudaStream_t stream) {
  if (ctx == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  ctx_clear(ctx, stream);
  const size_t workspace = carve_cu_blas_workspace_bytes();
  if (workspace == 0 || read_sm_count(ctx) != CARVE_OK) {
    return CARVE_ERR_BACKEND;
  }
  if (cudaMalloc(&ctx->blas_workspace, workspace) != cudaSuccess) {
    ctx->blas_workspace = NULL;
    return CARVE_ERR_OUT_OF_MEMORY;
  }
  ctx->owns_workspace = 1;
  carve_status status = split_counters_init(ctx, workspace);
  if (status == CARVE_OK) {
    status = bind_blas(ctx, NULL, workspace - CARVE_CU_SPLIT_BYTES);
  }
  if (status != CARVE_OK) {
    carve_cu_ctx_destroy(ctx);
  }
  return status;
}

extern "C" carve_status carve_cu_ctx_init_with(carve_cu_ctx* ctx, cudaStream_t stream, cublasHandle_t blas,
                                               void* workspace, size_t workspace_bytes) {
  if (ctx == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  ctx_clear(ctx, stream);
  const size_t need = carve_cu_blas_workspace_bytes();
  if (need == 0 || read_sm_count(ctx) != CARVE_OK) {
    return CARVE_ERR_BACKEND;
  }
  if (workspace == NULL || workspace_bytes < need) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  ctx->blas_workspace = workspace;
  carve_status status = split_counters_init(ctx, need);
  if (status == CARVE_OK) {
    status = bind_blas(ctx, blas, need - CARVE_CU_SPLIT_BYTES);
  }
  if (status != CARVE_OK) {
    carve_cu_ctx_destroy(ctx);
  }
  return status;
}

extern "C" carve_status carve_cu_ctx_lane(carve_cu_ctx* main, cudaStream_t stream, void* workspace,
                                          size_t workspace_bytes, carve_cu_ctx* lane) {
  if (main == NULL || lane == NULL || main->blas == NULL || workspace == NULL || workspace_bytes == 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  *lane = *main;
  lane->stream = stream;
  lane->blas_workspace = workspace;
  lane->blas_workspace_bytes = workspace_bytes;
  lane->owns_blas = 0;
  lane->owns_workspace = 0;
  lane->rebind = 1;
  main->rebind = 1;
  lane->split_lanes = 0;
  if (main->split_counters != NULL && main->split_lanes + 1 < (int)CARVE_CU_SPLIT_GROUPS) {
    lane->split_counters = main->split_counters + (size_t)++main->split_lanes * CARVE_CU_SPLIT_COUNTERS;
  } else {
    lane->split_counters = NULL;
  }
  return CARVE_OK;
}

extern "C" void carve_cu_ctx_destroy(carve_cu_ctx* ctx) {
  if (ctx == NULL) {
    return;
  }
  if (ctx->blas != NULL && ctx->owns_blas) {
    cublasDestroy(ctx->blas);
  } else if (ctx->blas != NULL && ctx->rebind) {  // a caller's handle that lanes shared: bound as init left it
    (void)carve_cu_blas_bind(ctx);
  }
  if (ctx->blas_workspace != NULL && ctx->owns_workspace) {
    cudaFree(ctx->blas_workspace);
  }
  ctx->blas = NULL;
  ctx->blas_workspace = NULL;
  ctx->owns_blas = 0;
  ctx->owns_workspace = 0;
  ctx->split_counters = NULL;
}

extern "C" carve_status carve_cu_ctx_set_conv_math(carve_cu_ctx* ctx, carve_cu_math math) {
  if (ctx == NULL || (math != CARVE_CU_MATH_STRICT && math != CARVE_CU_MATH_TF32)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return CARVE_ERR_BACKEND;
  }
  ctx->conv_tf32 = math == CARVE_CU_MATH_TF32 && major >= 8;  // TF32 tensor cores: Ampere and newer
  return CARVE_OK;
}

extern "C" carve_status carve_cu_ctx_set_conv_impl(carve_cu_ctx* ctx, carve_cu_conv_impl impl) {
  if (ctx == NULL || (impl != CARVE_CU_CONV_GEMM && impl != CARVE_CU_CONV_FUSED)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return CARVE_ERR_BACKEND;
  }
  ctx->conv_fused = impl == CARVE_CU_CONV_FUSED && major >= 7;  // wmma: Volta and newer
  return CARVE_OK;
}

extern "C" carve_status carve_cu_ctx_set_attention_impl(carve_cu_ctx* ctx, carve_cu_attention_impl impl) {
  if (ctx == NULL || (impl != CARVE_CU_ATTENTION_FUSED && impl != CARVE_CU_ATTENTION_GEMM)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  ctx->attention_fused = impl == CARVE_CU_ATTENTION_FUSED;
  return CARVE_OK;
}

extern "C" carve_status carve_cu_ctx_set_tactics(carve_cu_ctx* ctx, carve_cu_tactics* tactics) {
  if (ctx == NULL || (tactics != NULL && tactics->slots > 0 && tactics->path == NULL)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  ctx->tactics = tactics;
  return CARVE_OK;
}

// ---- Weights ----------------------------------------------------------------------------

// binary16 -> binary32 by bit manipulation, carve_weights.c's half_to_float: sign, 5-bit
// exponent (bias 15), 10-bit mantissa; subnormals renormalised, inf / NaN kept.
static __device__ __forceinline__ uint32_t carve_cu_half_bits(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) {
    return sign | 0x7f800000u | man << 13;  // inf or NaN
  }
  if (exp != 0) {
    return sign | (exp + 112u) << 23 | man << 13;  // normal: rebias 15 -> 127
  }
  if (man == 0) {
    return sign;  // +-0
  }
  exp = 113u;  // subnormal: shift the mantissa up until its leading 1 is implicit
  while ((man & 0x400u) == 0) {
    man <<= 1;
    exp--;
  }
  return sign | exp << 23 | (man & 0x3ffu) << 13;
}

// ---- Graphs ----------------------------------------------------------------------------

// cudaGraphGetEdges with each edge's data where the runtime has it (CUDA 12.3's cudaGraphGetEdges_v2, CUDA 13's
// cudaGraphGetEdges): a captured forward's edges between carve's kernels are programmatic (programmatic dependent
// launch), and a query without their data fails (cudaErrorLossyQuery). The data itself is not used.
#if CUDART_VERSION >= 12030
typedef cudaGraphEdgeData carve_cu_edge_data;
#else
typedef struct {
  unsigned char unused;
} carve_cu_edge_data;
#endif
static cudaError_t carve_cu_graph_edges(cudaGraph_t graph, cudaGraphNode_t* from, cudaGraphNode_t* to,
                                        carve_cu_edge_data* data, size_t* n) {
#if CUDART_VERSION >= 13000
  return cudaGraphGetEdges(graph, from, to, data, n);
#elif CUDART_VERSION >= 12030
  return cudaGraphGetEdges_v2(graph, from, to, data, n);
#else
  (void)data;
  return cudaGraphGetEdges(graph, from, to, n);
#endif
}

// A node's handle and its index in cudaGraphGetNodes' list, sorted by handle for the lookups.
typedef struct {
  cudaGraphNode_t node;
  size_t index;
} graph_slot;

static int graph_slot_cmp(const void* a, const void* b) {
  const uintptr_t x = (uintptr_t)((const graph_slot*)a)->node, y = (uintptr_t)((const graph_slot*)b)->node;
  return x < y ? -1 : (x > y ? 1 : 0);
}

static size_t graph_index(const graph_slot* slots, size_t n, cudaGraphNode_t node) {
  const graph_slot key = {node, 0};
  const graph_slot* s = (const graph_slot*)bsearch(&key, slots, n, sizeof key, graph_slot_cmp);
  return s != NULL ? s->index : SIZE_MAX;
}

// Longest path by relaxation: depth[v] = 1 + the largest depth of v's dependencies, the edges swept until no depth
// grows (a graph has no cycle: at most n sweeps, one or two where the edges come in recording order).
extern "C" size_t carve_cu_graph_depth(cudaGraph_t graph) {
  size_t n = 0, e = 0, deepest = 0;
  if (graph == NULL) {
    return 0;
  }
  if (cudaGraphGetNodes(graph, NULL, &n) != cudaSuccess ||
      (n != 0 && carve_cu_graph_edges(graph, NULL, NULL, NULL, &e) != cudaSuccess)) {
    (void)cudaGetLastError();  // a failed query is no error of the runs after it
    return 0;
  }
  if (n == 0) {
    return 0;
  }
  cudaGraphNode_t* nodes = (cudaGraphNode_t*)malloc(n * sizeof *nodes);
  cudaGraphNode_t* from = (cudaGraphNode_t*)malloc((e + 1) * sizeof *from);
  cudaGraphNode_t* to = (cudaGraphNode_t*)malloc((e + 1) * sizeof *to);
  carve_cu_edge_data* data = (carve_cu_edge_data*)malloc((e + 1) * sizeof *data);
  graph_slot* slots = (graph_slot*)malloc(n * sizeof *slots);
  size_t* depth = (size_t*)malloc(n * sizeof *depth);
  size_t* ends = (size_t*)malloc((2 * e + 1) * sizeof *ends);  // edge k: node ends[2k] -> node ends[2k + 1]
  size_t got_n = n, got_e = e;
  const int mem = nodes != NULL && from != NULL && to != NULL && data != NULL && slots != NULL && depth != NULL &&
                  ends != NULL;
  // (no edge query for a graph without edges: CUDA refuses arrays for 0 edges; the H200 run of 2026-11-28 returned
  // 0 for a one-node graph)
  const int got = mem && cudaGraphGetNodes(graph, nodes, &got_n) == cudaSuccess &&
                  (e == 0 || carve_cu_graph_edges(graph, from, to, data, &got_e) == cudaSuccess);
  if (mem && !got) {
    (void)cudaGetLastError();  // (as above)
  }
  int ok = got && got_n == n && got_e == e;
  if (ok) {
    for (size_t i = 0; i < n; i++) {
      slots[i].node = nodes[i];
      slots[i].index = i;
      depth[i] = 1;
    }
    qsort(slots, n, sizeof *slots, graph_slot_cmp);
    for (size_t k = 0; ok && k < e; k++) {
      ends[2 * k] = graph_index(slots, n, from[k]);
      ends[2 * k + 1] = graph_index(slots, n, to[k]);
      ok = ends[2 * k] != SIZE_MAX && ends[2 * k + 1] != SIZE_MAX;
    }
  }
  for (size_t sweep = 0, grew = 1; ok && grew; sweep++) {
    ok = sweep <= n;  // more sweeps than nodes: a cycle
    grew = 0;
    for (size_t k = 0; ok && k < e; k++) {
      const size_t u = ends[2 * k], v = ends[2 * k + 1];
      if (depth[v] < depth[u] + 1) {
        depth[v] = depth[u] + 1;
        grew = 1;
      }
    }
  }
  for (size_t i = 0; ok && i < n; i++) {
    deepest = depth[i] > deepest ? depth[i] : deepest;
  }
  free(nodes);
  free(from);
  free(to);
  free(data);
  free(slots);
  free(depth);
  free(ends);
  return ok ? deepest : 0;
}

// dst[i] = half src[i] as float32.
__global__ void carve_cu_f16_to_f32_kernel(const uint16_t* __restrict__ src, float* __restrict__ dst, size_t count) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(i, count) { dst[i] = __uint_as_float(carve_cu_half_bits(src[i])); }
}

extern "C" carve_status carve_cu_f16_to_f32(const carve_cu_ctx* ctx, const uint16_t* src, float* dst, size_t count) {
  if (ctx == NULL || (count > 0 && (src == NULL || dst == NULL))) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (count == 0) {
    return CARVE_OK;
  }
  CARVE_LAUNCH(carve_cu_f16_to_f32_kernel, carve_cu_blocks(count), CARVE_CU_THREADS, ctx->stream, src, dst, count);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// Y^T (m, n) = A^T (m, k) B (k, n), all column-major, beta = 0: Y = X W^T in NHWC terms.
static carve_status gemm_nt(const carve_cu_ctx* ctx, size_t m, size_t n, size_t k, const float* a, size_t lda,
                            const float* b, size_t ldb, float* c, size_t ldc) {
  if (!carve_cu_gemm_fits_int(m, n, k, lda, ldb, ldc)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const float one = 1.0f, zero = 0.0f;
  CARVE_CU_CHECK_BLAS(carve_cu_blas_bind(ctx));
  CARVE_CU_CHECK_BLAS(cublasSgemm(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n, (int)k, &one, a, (int)lda, b,
                                  (int)ldb, &zero, c, (int)ldc));
  return CARVE_OK;
}

// gemm_nt for the convolutions: with ctx->conv_tf32, cublasGemmEx with TF32 tensor-op compute
// (carve_cu_ctx_set_conv_math), else the float32 SGEMM.
static carve_status gemm_conv(const carve_cu_ctx* ctx, size_t m, size_t n, size_t k, const float* a, size_t lda,
                              const float* b, size_t ldb, float* c, size_t ldc) {
  if (!ctx->conv_tf32) {
    return gemm_nt(ctx, m, n, k, a, lda, b, ldb, c, ldc);
  }
  return carve_cu_gemm_nt_ex(ctx, m, n, k, a, lda, b, ldb, c, ldc, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32);
}

// ---- Convolution ----------------------------------------------------------------------

// im2col is done in chunks of whole output pixels so that its scratch stays below this
// many floats per image of the batch (one GEMM per chunk: a batch takes as many chunks as one image).
#define CARVE_CU_IM2COL_FLOATS ((size_t)1 << 22)

static size_t im2col_chunk(const carve_cu_conv* c) {
  const size_t k = (size_t)c->kh * c->kw * c->cin;
  const size_t pixels = carve_cu_conv_out(c->h, c->kh, c->stride, c->pad) *
                        carve_cu_conv_out(c->w, c->kw, c->stride, c->pad) * carve_cu_batch(c);
  size_t chunk = CARVE_CU_IM2COL_FLOATS * carve_cu_batch(c) / k;
  if (chunk == 0) {
    chunk = 1;
  }
  return chunk < pixels ? chunk : pixels;
}

// 0 for the convolutions without im2col: depthwise, 1x1 stride-1 GEMMs and the direct kernel's few-input-channel
// convs (carve_cuda_direct.h; the generator's _conv_scratch_floats mirrors this, tests/cuda/cuda_options.py checks).
extern "C" size_t carve_cu_conv2d_scratch_floats(const carve_cu_conv* c) {
  if (!carve_cu_conv_valid(c) || c->groups != 1 || carve_cu_conv_is_gemm(c) || carve_cu_conv_direct(c)) {
    return 0;
  }
  return im2col_chunk(c) * (size_t)c->kh * c->kw * c->cin;
}

extern "C" carve_status carve_cu_conv2d(const carve_cu_ctx* ctx, const carve_cu_conv* c, const float* x,
                                        const float* weight, const float* bias, const float* residual, float* y,
                                        float* scratch) {
  return carve_cu_conv2d_t(ctx, c, x, weight, bias, residual, y, scratch, gemm_conv);
}

extern "C" carve_status carve_cu_conv2d_dwpw(const carve_cu_ctx* ctx, const carve_cu_conv* dw, const carve_cu_conv* pw,
                                             const float* x, const float* dw_weight, const float* dw_bias, float* mid,
                                             const float* pw_weight, const float* pw_bias, const float* residual,
                                             float* y, float* scratch) {
  return carve_cu_conv2d_dwpw_t(ctx, dw, pw, x, dw_weight, dw_bias, mid, pw_weight, pw_bias, residual, y, scratch,
                                gemm_conv);
}

// ---- Transposed convolution (kernel == stride) ------------------------------------------

extern "C" size_t carve_cu_deconv2d_scratch_floats(uint32_t h, uint32_t w, uint32_t k, uint32_t cout) {
  return (size_t)h * w * k * k * cout;
}

extern "C" carve_status carve_cu_deconv2d(const carve_cu_ctx* ctx, uint32_t h, uint32_t w, uint32_t cin,
                                          uint32_t cout, uint32_t k, const float* x, size_t in_stride,
                                          const float* weight, const float* bias, carve_cu_act act, float* y,
                                          size_t out_stride, float* scratch) {
  return carve_cu_deconv2d_t(ctx, h, w, cin, cout, k, x, in_stride, weight, bias, act, y, out_stride, scratch,
                             gemm_conv);
}

// ---- Pooling, upsample, copy, add -------------------------------------------------------

extern "C" carve_status carve_cu_maxpool2d(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w,
                                           uint32_t c, uint32_t k, uint32_t stride, uint32_t pad, const float* x,
                                           size_t in_stride, float* y, size_t out_stride) {
  return carve_cu_maxpool2d_t(ctx, batch, h, w, c, k, stride, pad, x, in_stride, y, out_stride);
}

extern "C" carve_status carve_cu_maxpool2d_chain(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w,
                                                 uint32_t c, uint32_t k, uint32_t n, const float* x,
                                                 size_t in_stride, float* y, size_t out_stride, size_t y_step) {
  return carve_cu_maxpool2d_chain_t(ctx, batch, h, w, c, k, n, x, in_stride, y, out_stride, y_step);
}

extern "C" carve_status carve_cu_upsample2x(const carve_cu_ctx* ctx, uint32_t h, uint32_t w, uint32_t c,
                                            const float* x, size_t in_stride, float* y, size_t out_stride) {
  return carve_cu_upsample2x_t(ctx, h, w, c, x, in_stride, y, out_stride);
}

extern "C" carve_status carve_cu_copy(const carve_cu_ctx* ctx, size_t pixels, uint32_t c, const float* x,
                                      size_t in_stride, float* y, size_t out_stride) {
  return carve_cu_copy_t(ctx, pixels, c, x, in_stride, y, out_stride);
}

extern "C" carve_status carve_cu_add(const carve_cu_ctx* ctx, size_t pixels, uint32_t c, const float* a,
                                     size_t a_stride, const float* b, size_t b_stride, float* y, size_t y_stride) {
  return carve_cu_add_t(ctx, pixels, c, a, a_stride, b, b_stride, y, y_stride);
}

extern "C" carve_status carve_cu_global_avgpool(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w,
                                                uint32_t c, const float* x, size_t in_stride, float* y) {
  return carve_cu_global_avgpool_t(ctx, batch, h, w, c, x, in_stride, y);
}

// ---- Linear and softmax -------------------------------------------------------------------

extern "C" carve_status carve_cu_linear(const carve_cu_ctx* ctx, uint32_t batch, uint32_t cin, uint32_t cout,
                                        const float* x, const float* weight, const float* bias, float* y) {
  return carve_cu_linear_t(ctx, batch, cin, cout, x, weight, bias, y, gemm_nt);  // float32 (no TF32)
}

extern "C" carve_status carve_cu_softmax(const carve_cu_ctx* ctx, uint32_t batch, uint32_t n, const float* x,
                                         float* y) {
  return carve_cu_softmax_t(ctx, batch, n, x, y);
}

// ---- Attention ----------------------------------------------------------------------------

extern "C" size_t carve_cu_attention_scratch_floats(uint32_t batch, uint32_t n, uint32_t heads) {
  // S of every (image, head) pair when the batch runs per head, else one image's (reused)
  return (carve_cu_attention_per_head(batch, heads) ? (size_t)batch : 1) * heads * n * n;
}

// The attention's batched GEMMs in float32 (carve_cu_gemm_batched_fn).
static carve_status gemm_batched(const carve_cu_ctx* ctx, cublasOperation_t op_a, int m, int n, int k, float alpha,
                                 const float* a, int lda, long long stride_a, const float* b, int ldb,
                                 long long stride_b, float* c, int ldc, long long stride_c, int batch) {
  const float zero = 0.0f;
  CARVE_CU_CHECK_BLAS(carve_cu_blas_bind(ctx));
  CARVE_CU_CHECK_BLAS(cublasSgemmStridedBatched(ctx->blas, op_a, CUBLAS_OP_N, m, n, k, &alpha, a, lda, stride_a, b,
                                                ldb, stride_b, &zero, c, ldc, stride_c, batch));
  return CARVE_OK;
}

extern "C" carve_status carve_cu_attention(const carve_cu_ctx* ctx, uint32_t batch, const float* qkv,
                                           size_t qkv_stride, uint32_t n, uint32_t heads, uint32_t key_dim,
                                           uint32_t head_dim, float scale, float* out, size_t out_stride,
                                           float* v_out, size_t v_stride, float* scratch) {
  return carve_cu_attention_t(ctx, batch, qkv, qkv_stride, n, heads, key_dim, head_dim, scale, out, out_stride, v_out,
                              v_stride, scratch, gemm_batched);
}

extern "C" carve_status carve_cu_attention_pe(const carve_cu_ctx* ctx, const float* qkv, size_t qkv_stride,
                                              uint32_t heads, uint32_t key_dim, uint32_t head_dim, float scale,
                                              float* o, float* v, const carve_cu_conv* pe, const float* pe_weight,
                                              const float* pe_bias, float* out, float* scratch) {
  return carve_cu_attention_pe_t(ctx, qkv, qkv_stride, heads, key_dim, head_dim, scale, o, v, pe, pe_weight, pe_bias,
                                 out, scratch, gemm_batched, gemm_conv);
}

// ---- Mask logits --------------------------------------------------------------------------

extern "C" carve_status carve_cu_mask_logits(const carve_cu_ctx* ctx, const float* rows, size_t n,
                                             size_t row_stride, size_t coef_offset, const float* protos, uint32_t ph,
                                             uint32_t pw, uint32_t nm, size_t proto_stride, float* logits) {
  if (n == 0) {
    return carve_cu_ctx_ok(ctx) ? CARVE_OK : CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t pixels = (size_t)ph * pw;
  if (!carve_cu_ctx_ok(ctx) || rows == NULL || protos == NULL || logits == NULL || nm == 0 || pixels == 0 ||
      proto_stride < nm || row_stride < coef_offset + nm) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  // logits (n, P) row-major = R (n, nm) Protos^T: column-major logits^T (P, n) =
  // Protos (P, nm) R^T (nm, n); Protos read column-major is (nm, P) ld proto_stride (transposed).
  return gemm_nt(ctx, pixels, n, nm, protos, proto_stride, rows + coef_offset, row_stride, logits, pixels);
}
