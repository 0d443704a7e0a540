// carve runtime, CUDA: the device kernels and cuBLAS glue of the cuda backend.
//
// CONTRACT between the cuda backend's generator (generator/carve/backends/cuda.py,
// templates/cuda/) and this runtime (carve_cuda_*.cu). Every function:
//   * takes device pointers (arena, weights, scratch) unless a parameter says "host";
//   * enqueues its work on ctx->stream and returns without synchronising, so the
//     whole forward can be captured into a CUDA Graph; nothing here allocates
//     memory, copies to or from the host, or synchronises (except where said);
//   * returns CARVE_OK, CARVE_ERR_INVALID_ARGUMENT (NULL pointers, impossible
//     shapes) or CARVE_ERR_BACKEND (a launch or cuBLAS error).
// Activations are NHWC float32 with a pixel stride >= channels (the carve_view
// convention of carve_rt.h), so concat and split are strided views. A batch of
// images is more pixels: image b's pixel p is pixel b P + p of the view (P = h w,
// images one after another with the view's stride), so pixel-wise calls (1x1
// convolutions, copy, add, upsample: h rows of every image stacked) take the batch's
// pixels, and the calls whose windows or matrices must not mix images (kxk and
// depthwise convolutions, max pooling, attention) take the number of images.
// Numerics follow the CPU runtime (the kernel family headers, carve_pre.h, carve_post.h):
// the same formulas and order rules; float results agree to rounding (GEMM
// summation order differs), integer and index results exactly.
//
// The same source builds two ways:
//   nvcc (real GPU), and on the host with the emulation header
//   tests/cuda/cuda_emu.h (g++ -std=c++17 -x c++ -include cuda_emu.h
//   -DCARVE_CUDA_EMULATION ...), which runs grids, blocks and threads on the CPU
//   and replaces cuBLAS by a host GEMM (its first comment lists what it emulates).
// Kernels therefore launch only through CARVE_LAUNCH (below), use only static
// __shared__ arrays (no `extern __shared__`), and only the device functions the
// emulation header provides (__syncthreads, atomicAdd/atomicMax/atomicMin/
// atomicCAS on 32-bit ints and atomicAdd on float, __shfl_xor_sync /
// __shfl_down_sync on full warps, __ballot_sync, __popc, __float_as_uint /
// __uint_as_float, __fmul_rn/__fadd_rn/__dmul_rn/... , expf/fmaf/... from the
// C library).
//
// Files: carve_cuda.h (this contract), carve_cuda_impl.h (helpers shared by the
// .cu files), carve_cuda_elem.h (the kernels shared with the fp16 runtime, templates
// over the element type), carve_cuda_direct.h (which convolutions take the direct
// few-input-channel kernel), carve_cuda_ops.cu (context, convolutions, element-wise ops, pools,
// linear, softmax, attention, mask logits), carve_cuda_topk.cu (top-k, gather,
// e2e post-processing), carve_cuda_pre.cu (letterbox, classify); host pieces
// from carve_rt.c, carve_pre.c (carve_letterbox_geometry) and carve_post.c.
// Scratch passed to a function is private to that call (it may be shared between
// calls that run one after another on the stream); byte scratch must be 8-byte
// aligned (cudaMalloc gives 256).

#ifndef CARVE_CUDA_H
#define CARVE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifndef CARVE_CUDA_EMULATION
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

#define CARVE_RT_NO_THREADS 1  // the CPU runtime pieces a CUDA package uses run on the calling thread
#include "carve_post.h"
#include "carve_pre.h"
#include "carve_rt.h"

// ABI of the CUDA runtime, checked by generated code like CARVE_RT_ABI.
// 2: carve_cu_ctx_init_with (caller-owned cuBLAS workspace / handle), carve_cu_f16_to_f32.
// 3: carve_cu_ctx.conv_fused and carve_cu_ctx_set_conv_impl (the fused implicit-GEMM convolution).
// 4: carve_cu_ctx.sm_count (the fused convolution's tile choice).
// 5: batches: carve_cu_conv.batch, the batch argument of carve_cu_maxpool2d and carve_cu_attention.
// 6: carve_cu_attention_scratch_floats(batch, n, heads): a batch's attention may run per head; the
//    e2e and NMS heads read half maps (carve_cu_level_h overloads; carve_cu_f16_to_f32_view removed).
// 7: lanes: carve_cu_ctx.blas_workspace_bytes and .rebind, carve_cu_ctx_lane (contexts sharing one handle).
// 8: tactics: carve_cu_conv.slot, carve_cu_ctx.tactics, carve_cu_tactics and carve_cu_ctx_set_tactics (each
//    convolution's path chosen by timing both on the device).
// 9: carve_cu_ctx.split_counters / .split_lanes: the split-K tile's arrival counters at the end of the workspace
//    (CARVE_CU_SPLIT_BYTES; blas_workspace_bytes excludes them); CARVE_CU_PATHS 12 (the split-K tile and the
//    asynchronous 64x32 / 32x64 tiles).
// 10: CARVE_CU_PATHS 13 (the 32x32 tile with the reduction sliced over four warp groups).
// 11: carve_cu_nchw_to_nhwc_batch (a batch's device tensors in one launch), the half-output overloads of it and
//     of carve_cu_letterbox (an fp16 package's input without the float32 staging copy and its cast).
// 12: carve_cu_maxpool2d_chain (SPPF's chained max pools in one launch), carve_cu_conv2d_dwpw (a depthwise
//     convolution and the 1x1 after it, fused by tactic).
// 13: carve_cu_ctx.attention_gemm and carve_cu_ctx_set_attention_impl (the attention in one fused launch by default),
//     carve_cu_attention_pe (the attention and the pe convolution after it as one call).
// 14: the segment and classify heads in half: the __half overloads of carve_cu_deconv2d, carve_cu_global_avgpool,
//     carve_cu_linear, carve_cu_softmax (float32 probabilities) and carve_cu_classify_preprocess; the batch argument
//     of carve_cu_global_avgpool, carve_cu_linear (one GEMM for the batch) and carve_cu_softmax (a classify batch).
// 15: the NMS head of a batch: carve_cu_nms_postprocess_batch and carve_cu_nms_batch_scratch_bytes
//     (carve_cuda_nms.h), carve_cu_topk_numbers_batch (the NMS's order in one launch),
//     carve_cu_nms_set_conf.
// 16: carve_cu_graph_depth (a package's <name>_graph_depth: the launches of a forward in series).
// 17: the attention's default is now the GEMM path: carve_cu_ctx.attention_gemm renamed carve_cu_ctx.attention_fused
//     (1: the fused launch where it fits; 0, what init sets: the GEMM path), CARVE_CU_ATTENTION_GEMM = 0 and
//     CARVE_CU_ATTENTION_FUSED = 1 (measured on an H200 2026-11-28: fused 65 us per launch in Nsight Compute, the
//     GEMM path 0.106 ms faster per forward at fp16 batch 1).
#define CARVE_CUDA_ABI 17

// Launch a kernel. With nvcc: cudaLaunchKernelEx with programmatic dependent launch allowed
// (cudaLaunchAttributeProgrammaticStreamSerialization; kept by stream capture as a programmatic
// graph edge): on sm_90 and newer the GPU may start launching a kernel while the kernel before it
// on the stream still runs, and the kernel waits for that one's completion and memory at its first
// statement, CARVE_CU_KERNEL_ENTRY(), which every carve kernel begins with (tests/cuda/
// check_kernel_entry.py checks). What overlaps is the launch latency (a few microseconds per kernel,
// most of a small network's time on a large GPU), never the work. Older GPUs ignore the attribute.
// -DCARVE_CUDA_NO_PDL: plain kernel<<<grid, block, 0, stream>>>(args...) launches. The emulation
// header defines CARVE_LAUNCH itself (its launches run in order).
#ifndef CARVE_LAUNCH
#if defined(__CUDACC__) && !defined(CARVE_CUDA_NO_PDL)
template <typename... P, typename... A>
static inline void carve_cu_launch(void (*kernel)(P...), dim3 grid, dim3 block, cudaStream_t stream, A&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<A&&>(args)...);  // errors: cudaGetLastError, as <<< >>>
}
#define CARVE_LAUNCH(kernel, grid, block, stream, ...) carve_cu_launch(kernel, (grid), (block), (stream), __VA_ARGS__)
#else
#define CARVE_LAUNCH(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif
#endif

// The first statement of every carve kernel: on sm_90+, wait until the kernel before it on the
// stream has completed and its writes are visible (griddepcontrol.wait; immediate when it was not
// launched as a programmatic dependent), then let the next kernel start launching
// (griddepcontrol.launch_dependents). Nothing before it may read or write global memory.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(CARVE_CUDA_NO_PDL)
#define CARVE_CU_KERNEL_ENTRY() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define CARVE_CU_KERNEL_ENTRY() ((void)0)
#endif

#ifdef __cplusplus
extern "C" {
#endif

// ---- Context ------------------------------------------------------------------

// What every call needs: the stream its work goes on and a cuBLAS handle bound to
// that stream (math mode CUBLAS_DEFAULT_MATH with CUBLAS_PEDANTIC_MATH where
// available: no TF32 on the handle, so its SGEMMs stay float32; the convolutions may
// opt in to TF32, carve_cu_ctx_set_conv_math). Owned by the generated code.
// (Added by the runtime, 2026-11-22: blas_workspace, the cuBLAS workspace allocated
// once at init, so that cuBLAS never allocates inside a run or a graph capture;
// generated code only calls init / destroy and reads `stream`.)
// (Added for caller-owned memory: `owns`, what carve_cu_ctx_destroy releases.)
typedef struct carve_cu_tactics carve_cu_tactics;

typedef struct carve_cu_ctx {
  cudaStream_t stream;
  cublasHandle_t blas;
  void* blas_workspace;  // device, CARVE_CU_BLAS_WORKSPACE_BYTES (32 MiB on sm_90+)
  int owns_blas;         // 1: blas was created here (cublasCreate): destroy calls cublasDestroy
  int owns_workspace;    // 1: blas_workspace was cudaMalloc'ed here: destroy frees it
  int conv_tf32;         // 1: the convolutions' GEMMs use TF32 tensor cores (carve_cu_ctx_set_conv_math)
  int conv_fused;        // 1: groups-1 convs run as carve's fused implicit-GEMM kernel (carve_cu_ctx_set_conv_impl)
  int sm_count;          // the device's SMs (init reads them): the fused convolution's tile choice
  size_t blas_workspace_bytes;  // the bytes of blas_workspace this context's GEMMs may use
  int rebind;            // 1: blas is shared with other contexts (carve_cu_ctx_lane): every cuBLAS call binds
                         // it to this context's stream and workspace first (cublasSetStream + SetWorkspace)
  carve_cu_tactics* tactics;  // NULL, or each convolution's path by its slot (carve_cu_ctx_set_tactics): the caller's
  unsigned* split_counters;   // device, CARVE_CU_SPLIT_COUNTERS zeroed counters of the split-K tile (NULL: no split)
  int split_lanes;            // the counter groups after main's that carve_cu_ctx_lane gave away
  int attention_fused;        // 1: carve_cu_attention runs its fused launch where the call fits; 0 (init): always
                              // the GEMM path (carve_cu_ctx_set_attention_impl)
} carve_cu_ctx;
// The split-K tile of the fused convolution (CARVE_CU_IGEMM_TILE_32X32_SPLIT, carve_cuda_igemm_tile.h) splits a
// layer's reduction over several blocks per output tile: each writes its partial tile to the context's workspace
// (the cuBLAS workspace: used in stream order, never by cuBLAS and a split kernel at once), then counts itself in
// the tile's arrival counter; the last one sums the partial tiles and resets the counter to 0. Counters must
// start at zero and persist between runs, so they live apart: the last CARVE_CU_SPLIT_BYTES of the workspace
// given to init / init_with, CARVE_CU_SPLIT_GROUPS groups of CARVE_CU_SPLIT_COUNTERS (group 0 the context's, the
// next ones its lanes', in the order carve_cu_ctx_lane makes them), zeroed at init (cudaMemsetAsync on the
// stream); blas_workspace_bytes is what is left before them, and lanes' workspaces must lie within it.
#define CARVE_CU_SPLIT_COUNTERS 1024u  // output tiles of a split launch, at most (32 x 32 each)
#define CARVE_CU_SPLIT_GROUPS 16u      // the context and up to 15 lanes
#define CARVE_CU_SPLIT_BYTES ((size_t)CARVE_CU_SPLIT_GROUPS * CARVE_CU_SPLIT_COUNTERS * sizeof(unsigned))

// cuBLAS workspace: NVIDIA's recommended sizes (cublasSetWorkspace): 4 MiB, Hopper 32 MiB.
#define CARVE_CU_BLAS_WORKSPACE_BYTES ((size_t)4 << 20)
#define CARVE_CU_BLAS_WORKSPACE_BYTES_SM90 ((size_t)32 << 20)

// cublasCreate + cublasSetStream + math mode + cudaMalloc and cublasSetWorkspace of
// the workspace (CARVE_ERR_OUT_OF_MEMORY when that fails); cublasDestroy + cudaFree
// (accepts NULL and a context whose init failed); the workspace's last CARVE_CU_SPLIT_BYTES are the split-K
// counters (above), zeroed here. Host functions; init allocates, nothing else in this file does.
carve_status carve_cu_ctx_init(carve_cu_ctx* ctx, cudaStream_t stream);
void carve_cu_ctx_destroy(carve_cu_ctx* ctx);

// The cuBLAS workspace bytes carve_cu_ctx_init allocates on the current device:
// CARVE_CU_BLAS_WORKSPACE_BYTES, or CARVE_CU_BLAS_WORKSPACE_BYTES_SM90 on sm_90 and
// newer; 0 when the device cannot be queried. Host function.
size_t carve_cu_blas_workspace_bytes(void);

// carve_cu_ctx_init in the caller's memory: calls no cudaMalloc. `workspace` is the
// caller's device buffer of workspace_bytes >= carve_cu_blas_workspace_bytes() (else
// CARVE_ERR_INVALID_ARGUMENT); `blas` the caller's cuBLAS handle, or NULL to create one
// (cublasCreate, which allocates inside cuBLAS). The handle is bound to `stream`, the
// pedantic math mode and `workspace` (cublasSetStream / SetMathMode / SetWorkspace), so
// a caller's handle is not to be used elsewhere while the context lives.
// carve_cu_ctx_destroy then frees nothing of the caller's (only a handle created here).
carve_status carve_cu_ctx_init_with(carve_cu_ctx* ctx, cudaStream_t stream, cublasHandle_t blas, void* workspace,
                                    size_t workspace_bytes);

// A lane: a context for work that may run concurrently with other lanes of the same `main` context, on
// `stream` (main's own stream or another), with `workspace_bytes` of cuBLAS workspace of its own at
// `workspace` (a part of main's that no concurrent lane uses) and main's cuBLAS handle, math and
// convolution settings (set them on main first). One handle serves every lane because all calls come
// from one host thread: each cuBLAS call of a lane, and of main from then on (main->rebind = 1),
// first binds the handle to its context's stream and workspace (cublasSetStream, cublasSetWorkspace:
// host-side settings, allowed while a stream captures, as PyTorch does per stream). The lane owns
// nothing: carve_cu_ctx_destroy on it frees nothing, and on main (destroy the lanes first) leaves a caller's
// handle bound to main's stream and workspace again. The lane's split-K counters: main's next group (no split-K
// for lanes past CARVE_CU_SPLIT_GROUPS - 1). Host function; CARVE_ERR_INVALID_ARGUMENT for
// NULL pointers, a main context without a handle, a NULL workspace or workspace_bytes 0.
carve_status carve_cu_ctx_lane(carve_cu_ctx* main, cudaStream_t stream, void* workspace, size_t workspace_bytes,
                               carve_cu_ctx* lane);

// The math of the convolutions' GEMMs (carve_cu_conv2d's 1x1 and im2col GEMMs, carve_cu_deconv2d's):
// CARVE_CU_MATH_STRICT (what init sets): float32 GEMMs (the pedantic math mode above);
// CARVE_CU_MATH_TF32: cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_TF32, TF32 tensor cores on sm_80 and
// newer: both GEMM inputs rounded to TF32 (8-bit exponent, 10-bit mantissa, round to nearest), products
// accumulated in float32, as PyTorch's default for convolutions (torch.backends.cudnn.allow_tf32).
// Older GPUs have no TF32: the request is accepted and the GEMMs stay float32 (conv_tf32 reads 0).
// Depthwise convolutions, the direct kernel of the few-input-channel convs (the stem), linear, attention and
// the mask logits always stay float32. Host function;
// CARVE_ERR_INVALID_ARGUMENT for a NULL context or another value; CARVE_ERR_BACKEND when the device
// cannot be queried.
typedef enum carve_cu_math { CARVE_CU_MATH_STRICT = 0, CARVE_CU_MATH_TF32 = 1 } carve_cu_math;
carve_status carve_cu_ctx_set_conv_math(carve_cu_ctx* ctx, carve_cu_math math);

// How carve_cu_conv2d runs a groups-1 convolution (both precisions):
// CARVE_CU_CONV_GEMM (what init sets, the default): cuBLAS, i.e. a GEMM straight on the NHWC view (1x1,
// stride 1) or im2col into scratch + GEMM, then an epilogue kernel (bias, SiLU, residual): 2-3 launches;
// CARVE_CU_CONV_FUSED: carve's implicit-GEMM kernel on tensor cores (runtime/carve_cuda_igemm.h): the
// input tiles gathered straight from the NHWC input, the epilogue in the same kernel: one launch, no
// scratch. It takes the convolution's math: half packages fp16 operands (sm_70+), float32 packages
// TF32 operands, so only while conv_tf32 is 1 (carve_cu_ctx_set_conv_math: sm_80+); strict float32 and
// GPUs without the tensor cores keep the cuBLAS path. Float results agree with the cuBLAS path's to the
// summation order (half: one rounding fewer, the GEMM's result is not stored as half before the bias).
// Not yet the default: no GPU has timed it (docs/backends/cuda.md, "The fused convolution"). Depthwise
// convolutions and the few-input-channel ones (the stem: carve_cuda_direct.h) keep their direct kernels
// either way. Host function; CARVE_ERR_INVALID_ARGUMENT for a
// NULL context or another value; CARVE_ERR_BACKEND when the device cannot be queried. On a GPU below
// sm_70 the request is accepted and conv_fused stays 0.
typedef enum carve_cu_conv_impl { CARVE_CU_CONV_GEMM = 0, CARVE_CU_CONV_FUSED = 1 } carve_cu_conv_impl;
carve_status carve_cu_ctx_set_conv_impl(carve_cu_ctx* ctx, carve_cu_conv_impl impl);

// How carve_cu_attention runs (both precisions): CARVE_CU_ATTENTION_GEMM (what init sets, the default): always the
// GEMM path (cuBLAS GEMMs on the tensor cores, a softmax launch between them, V's gather); CARVE_CU_ATTENTION_FUSED:
// one launch of carve's fused kernel (runtime/carve_cuda_attention.h: scores, softmax and P V per block of query rows
// in shared memory, float32 FMAs, V copied out in the same launch) where the call fits it (at most
// CARVE_CU_ATTN_MAX_BATCH images, n <= CARVE_CU_ATTN_MAX_N pixels, key_dim and head_dim <= CARVE_CU_ATTN_MAX_DIM),
// else the GEMM path. Fewer launches, but slower on an H200 (measured 2026-11-28: fused 65 us per launch in Nsight
// Compute, the GEMM path 0.106 ms faster per forward of yolo26n 640 at fp16 batch 1). Lanes made after the call
// inherit it. Host function; CARVE_ERR_INVALID_ARGUMENT for a NULL context or another value.
#define CARVE_CU_ATTN_MAX_N 1024    // pixels at most: the block's scores, 8 x 1024 floats, 32 KB of shared memory
#define CARVE_CU_ATTN_MAX_DIM 128   // key_dim and head_dim at most (yolo26: 32 and 64)
#define CARVE_CU_ATTN_MAX_BATCH 4   // images per call at most (larger batches take the GEMMs' tensor cores)
typedef enum carve_cu_attention_impl {
  CARVE_CU_ATTENTION_GEMM = 0,
  CARVE_CU_ATTENTION_FUSED = 1
} carve_cu_attention_impl;
carve_status carve_cu_ctx_set_attention_impl(carve_cu_ctx* ctx, carve_cu_attention_impl impl);

// Tactics: each convolution's path measured on the device, as TensorRT times its tactics at build. A groups-1
// convolution that both paths above can run (not the direct kernel's few-input-channel ones; fp16, or float32
// with TF32 on: the fused kernel needs tensor cores) and that names a slot (carve_cu_conv.slot, 1-based) takes
// path[slot - 1] when that is set: CARVE_CU_PATH_GEMM the cuBLAS path, CARVE_CU_PATH_FUSED the fused kernel with
// its tile rule's tile, CARVE_CU_PATH_FUSED_TILE + t the fused kernel with tile t (CARVE_CU_IGEMM_TILE_*,
// carve_cuda_igemm_tile.h: 64x64, 64x32, 32x64, 32x32 outputs per block, 32x32 with the reduction sliced over
// two warp groups, 32x32 with its operands copied asynchronously through 4 shared stages, that one with the
// reduction split across blocks, 64x32 / 32x64 with 3 asynchronous stages, and 32x32 sliced over four warp groups).
// While `tune` is 1, a call whose entry is still CARVE_CU_PATH_UNSET, on a stream
// that is not capturing, times its candidates first: the cuBLAS path and the fused kernel with each tile (the
// 64-wide ones only for cout > 32, the sliced ones only where K kh kw cin holds more than 128 bytes (two groups: half
// their step) or 256 bytes (four groups);
// the asynchronous ones only where the operands load as 16-byte chunks, carve_cu_igemm_vec; the split one only where
// carve_cu_igemm_splits gives it more than one block per tile: carve_cu_igemm_candidate). Each runs once eagerly (its kernels
// loaded), then CARVE_CU_TUNE_LAUNCHES back-to-back launches of it are captured into a CUDA Graph, replayed once
// and, unless that took CARVE_CU_TUNE_LONG_MS or more, CARVE_CU_TUNE_REPLAYS times more between two events (the
// same graph launches and programmatic edges as the model's own graph); the fastest goes into the entry (a tie: the first timed, the cuBLAS path), the cuBLAS
// path's time and the best fused one into `us`, and the call then runs it (its results are the call's). Calls
// with an unset entry outside tuning, in a capture, without a slot or a table, and a failed timing (nothing
// stored; its CUDA errors cleared) take the default rule above (conv_fused, else carve_cu_igemm_preferred).
// conv_fused 1 wins over the table. Tuning creates and destroys a graph and two events per timed candidate and
// synchronises the stream: generated packages tune in create (a run on a zeroed arena), never in a run. While
// tuning, a call runs several times: y must not alias x or the residual (generated code never does). Entries
// may be set by hand (reproducible paths). Lanes (carve_cu_ctx_lane) share main's table: set it before making
// them. Nothing here is allocated.
enum {
  CARVE_CU_PATH_UNSET = 0,
  CARVE_CU_PATH_GEMM = 1,
  CARVE_CU_PATH_FUSED = 2,
  CARVE_CU_PATH_FUSED_TILE = 3,  // + the tile: 3 .. 12
  CARVE_CU_PATHS = 13            // one past the last path
};
struct carve_cu_tactics {
  uint8_t* path;   // `slots` entries: CARVE_CU_PATH_*
  float* us;       // NULL, or 2 per slot: the microseconds per convolution measured for the cuBLAS path, then
                   // for the fastest tile of the fused kernel (0 where not measured)
  uint32_t slots;
  int tune;        // 1: unset entries are timed as their calls come (outside a capture)
};
#ifndef CARVE_CU_TUNE_DEFAULT
#define CARVE_CU_TUNE_DEFAULT 1  // generated packages' options.conv_tune (the emulation: 0, its times mean nothing)
#endif
#ifndef CARVE_CU_TUNE_LAUNCHES
#define CARVE_CU_TUNE_LAUNCHES 8  // launches of the convolution in the timed graph
#endif
#ifndef CARVE_CU_TUNE_REPLAYS
#define CARVE_CU_TUNE_REPLAYS 4   // timed replays of that graph (after the first)
#endif
#ifndef CARVE_CU_TUNE_LONG_MS
#define CARVE_CU_TUNE_LONG_MS 2.0f  // a first replay this long (ms) is the measurement: no more replays
#endif
// Sets ctx->tactics (NULL: none). Host function; CARVE_ERR_INVALID_ARGUMENT for a NULL context, or a table
// with slots > 0 and a NULL path.
carve_status carve_cu_ctx_set_tactics(carve_cu_ctx* ctx, carve_cu_tactics* tactics);

// ---- Graphs -----------------------------------------------------------------------

// The nodes on the longest dependency chain of `graph`: the launches a forward runs one after another however
// many branches run beside them (its latency in launches, where the graph's node count is its work in launches).
// A query, not for a run: it allocates host memory for the node and edge lists. 0 for NULL, an empty graph, a
// CUDA error or no memory.
size_t carve_cu_graph_depth(cudaGraph_t graph);

// ---- Weights ----------------------------------------------------------------------

// dst[i] = the IEEE binary16 value src[i] as float32, bit for bit what the CPU
// runtime's carve_f16_to_f32 (carve_weights.h) gives (exact: every half is a float;
// subnormals renormalised, infinities and NaN payloads kept). src: device, count
// little-endian 16-bit words; dst: device, count floats; they must not overlap.
// Needs only ctx->stream (not the cuBLAS handle).
carve_status carve_cu_f16_to_f32(const carve_cu_ctx* ctx, const uint16_t* src, float* dst, size_t count);

// ---- Convolution with fused epilogue --------------------------------------------

typedef enum carve_cu_act { CARVE_CU_ACT_NONE = 0, CARVE_CU_ACT_SILU = 1 } carve_cu_act;

// y = act(conv(x, W) + b) + residual  (residual optional, added after the activation,
// as carve_epilogue does). kxk convolution with `stride`, zero padding `pad` on all
// four sides, groups 1 or depthwise (groups == cin == cout).
//   input (h, w, cin) with pixel stride in_stride; output (oh, ow, cout) with
//   oh = (h + 2 pad - kh) / stride + 1 (likewise ow), pixel stride out_stride;
//   residual, when not NULL, (oh, ow, cout) with pixel stride res_stride.
// Weights OHWI: W[o][ky][kx][i] (cout, kh, kw, cin / groups), the xnnpack backend's
// blob layout; bias (cout).
// Lowering: groups-1 convs with few input channels (cin <= 4, kh kw cin <= 64: the stem;
// carve_cuda_direct.h) are one direct kernel with the epilogue, float32 arithmetic, whatever
// carve_cu_ctx_set_conv_math / _set_conv_impl say; other 1x1 stride-1 pad-0 convs are one
// cuBLAS GEMM straight on the NHWC view; other groups-1 convs are im2col (into scratch) +
// GEMM; depthwise convs a direct kernel; then one epilogue kernel (bias + act + residual)
// over the output.
// batch: the images of a batch (0 reads as 1): x, y and residual hold `batch` images one
// after another (image b's pixels after image b - 1's, the same strides), and every
// step above runs once for all of them (the GEMMs' M is batch oh ow).
typedef struct carve_cu_conv {
  uint32_t kh, kw, stride, pad, groups;
  uint32_t cin, cout, h, w;
  size_t in_stride, out_stride, res_stride;
  carve_cu_act act;
  uint32_t batch;
  uint32_t slot;  // 0: none; else the convolution's entry in ctx->tactics (1-based): carve_cu_ctx_set_tactics
} carve_cu_conv;

// Floats of scratch carve_cu_conv2d needs (the im2col matrix, at most CARVE_CU_IM2COL_FLOATS per image
// of the batch; 0 when none: depthwise, 1x1 stride-1, few input channels).
size_t carve_cu_conv2d_scratch_floats(const carve_cu_conv* c);

carve_status carve_cu_conv2d(const carve_cu_ctx* ctx, const carve_cu_conv* c, const float* x, const float* weight,
                             const float* bias, const float* residual, float* y, float* scratch);

// A depthwise convolution `dw` (groups == cin == cout, no residual) and the 1x1 convolution `pw` that alone reads its
// output (stride 1, pad 0, groups 1, pw->cin == dw->cout, pw's input the depthwise output: its size and
// pw->in_stride == dw->out_stride): y = pw(dw(x)) (+ residual on pw). Either carve_cu_conv2d(dw) into `mid` and
// carve_cu_conv2d(pw) from it, or one launch of the fused kernel computing the depthwise values on the fly (`mid`
// untouched): by dw's tactic slot (dw->slot; timed like a convolution's, after pw's own), the fused one where
// carve_cu_ctx_set_conv_impl asks for it, else the two launches. No scratch when fused; else the two calls'.
carve_status carve_cu_conv2d_dwpw(const carve_cu_ctx* ctx, const carve_cu_conv* dw, const carve_cu_conv* pw,
                                  const float* x, const float* dw_weight, const float* dw_bias, float* mid,
                                  const float* pw_weight, const float* pw_bias, const float* residual, float* y,
                                  float* scratch);

// Transposed conv with kernel == stride (k), pad 0, groups 1: input (h, w, cin),
// output (h k, w k, cout). Weights (cout, k, k, cin) (OHWI of the equivalent conv,
// as the xnnpack backend packs them), bias (cout), then act. One GEMM into scratch
// (h w, k k cout), then a gather kernel writes each output pixel (no scatter).
size_t carve_cu_deconv2d_scratch_floats(uint32_t h, uint32_t w, uint32_t k, uint32_t cout);
carve_status carve_cu_deconv2d(const carve_cu_ctx* ctx, uint32_t h, uint32_t w, uint32_t cin, uint32_t cout,
                               uint32_t k, const float* x, size_t in_stride, const float* weight, const float* bias,
                               carve_cu_act act, float* y, size_t out_stride, float* scratch);

// ---- Element-wise and data movement ----------------------------------------------

// y = max over a k x k window with stride and -inf padding `pad`; (h, w, c) in,
// ((h + 2 pad - k) / stride + 1, ...) out; `batch` (>= 1) images one after another.
carve_status carve_cu_maxpool2d(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w, uint32_t c,
                                uint32_t k, uint32_t stride, uint32_t pad, const float* x, size_t in_stride, float* y,
                                size_t out_stride);

// n chained k x k max pools with stride 1 and -inf padding k / 2 (k odd), as SPPF runs them: y_1 = pool(x),
// y_j = pool(y_{j-1}), output j (1 .. n) at y + (j - 1) y_step (y_step >= c: e.g. the next channel slot of one
// concat), each (batch, h, w, c) with pixel stride out_stride. The values of n carve_cu_maxpool2d calls, in one
// launch where n (k / 2) <= CARVE_CU_POOL_CHAIN_HALO (8) and the pointers, c and the strides allow 16-byte
// accesses (else n launches). x and the outputs must not overlap.
carve_status carve_cu_maxpool2d_chain(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w, uint32_t c,
                                      uint32_t k, uint32_t n, const float* x, size_t in_stride, float* y,
                                      size_t out_stride, size_t y_step);

// Nearest 2x upsample: y[2i + a][2j + b][c] = x[i][j][c].
carve_status carve_cu_upsample2x(const carve_cu_ctx* ctx, uint32_t h, uint32_t w, uint32_t c, const float* x,
                                 size_t in_stride, float* y, size_t out_stride);

// y[p][0:c] = x[p][0:c] for `pixels` pixels (a concat input that could not be a view).
carve_status carve_cu_copy(const carve_cu_ctx* ctx, size_t pixels, uint32_t c, const float* x, size_t in_stride,
                           float* y, size_t out_stride);

// y = a + b over (pixels, c), all strided.
carve_status carve_cu_add(const carve_cu_ctx* ctx, size_t pixels, uint32_t c, const float* a, size_t a_stride,
                          const float* b, size_t b_stride, float* y, size_t y_stride);

// y[b c + ch] = mean over the h*w pixels of image b's x[., ch] (sum in double, as XNNPACK's result to rounding), for
// `batch` images (image b's pixels after image b - 1's, in_stride apart; y dense).
carve_status carve_cu_global_avgpool(const carve_cu_ctx* ctx, uint32_t batch, uint32_t h, uint32_t w, uint32_t c,
                                     const float* x, size_t in_stride, float* y);

// y_b = W x_b + b for `batch` images (x: batch rows of cin, y: batch rows of cout, dense), W (cout, cin) row-major:
// one float32 cuBLAS GEMM (no TF32), then the bias.
carve_status carve_cu_linear(const carve_cu_ctx* ctx, uint32_t batch, uint32_t cin, uint32_t cout, const float* x,
                             const float* weight, const float* bias, float* y);

// y_b = softmax(x_b) over n floats for `batch` rows (dense), as carve_softmax (max subtracted, sum in double).
carve_status carve_cu_softmax(const carve_cu_ctx* ctx, uint32_t batch, uint32_t n, const float* x, float* y);

// ---- Attention ----------------------------------------------------------------------

// carve_attention of carve_attention.h on the device (same layout and meaning): per head,
// S = scale * Q K^T and O = softmax_rows(S) V; v_out (may be NULL) receives V for the pe conv.
// `batch` (>= 1) images of n pixels one after another. Fused (on request, carve_cu_ctx_set_attention_impl, where
// the call fits): one launch, S and P in shared memory and float32, the scratch unused (but still required); each
// (image, head, row) is computed in a fixed order, so a batch's results are its images' alone, bit for bit. The
// GEMM path (the default): S and O through strided-batched cuBLAS GEMMs, a row-softmax kernel between them (S and
// P as the precision's type, in the scratch), in whichever grouping takes fewer
// launches: per image (the heads are the GEMMs' batch: 3 launches an image, one image's S in
// the scratch, reused; batch 1 always) or per head (the images are the GEMMs' batch: 2 heads + 1
// launches for the whole batch, one softmax over every row; the scratch holds every image's
// S). Either way each (image, head) pair's GEMMs have the same shapes and operands and each
// row's softmax is the same kernel code, so a batch's results are its images' alone (bit for
// bit under the emulation; on a GPU cuBLAS may pick another kernel for another batch count:
// equal to rounding). V's gather once. The scratch (floats) depends on the batch.
size_t carve_cu_attention_scratch_floats(uint32_t batch, uint32_t n, uint32_t heads);
carve_status carve_cu_attention(const carve_cu_ctx* ctx, uint32_t batch, const float* qkv, size_t qkv_stride,
                                uint32_t n, uint32_t heads, uint32_t key_dim, uint32_t head_dim, float scale,
                                float* out, size_t out_stride, float* v_out, size_t v_stride, float* scratch);

// The attention and the PSA block's pe convolution after it (out = act(pe(v) + b) + o, pe a depthwise k x k
// convolution of the attention's v, stride 1, padding k / 2, its residual the attention's o) as one call: where the
// attention runs fused (carve_cu_ctx_set_attention_impl; the limits above), one launch that computes each output
// pixel's pe from V's neighbours in qkv and adds O unrounded: o and v are not written, out must not overlap qkv; else
// carve_cu_attention into o and v, then carve_cu_conv2d(pe). The attention's n and batch are pe's h w and batch, o's
// stride pe's res_stride, v's its in_stride; heads head_dim = pe's channels. CARVE_ERR_INVALID_ARGUMENT for another
// pe (not depthwise over those channels, an even or strided window, other padding) or what carve_cu_attention refuses.
carve_status carve_cu_attention_pe(const carve_cu_ctx* ctx, const float* qkv, size_t qkv_stride, uint32_t heads,
                                   uint32_t key_dim, uint32_t head_dim, float scale, float* o, float* v,
                                   const carve_cu_conv* pe, const float* pe_weight, const float* pe_bias, float* out,
                                   float* scratch);

// ---- Top-k and gather ----------------------------------------------------------------

// The min(k, n) largest of vals[0 .. n), best first, into idx (and val when not NULL)
// (k == 0 or n == 0: nothing to do, CARVE_OK):
// the order of carve_post.h (larger first, ties to the lower index, NaN below every
// number incl. -inf, ties among NaNs by index; -0 == +0). n and k up to 2^31 - 1.
// Partial selection: a radix-select pass over order-preserving 32-bit keys finds the
// k-th key, a compaction collects the candidates, a block sort orders them. Gather only.
size_t carve_cu_topk_scratch_bytes(size_t n, size_t k);
carve_status carve_cu_topk(const carve_cu_ctx* ctx, const float* vals, size_t n, size_t k, int32_t* idx,
                           float* val, void* scratch);

// The numbers' top-k of `batch` lists of n values one after another (NaN left out): list b's min(k, its
// numbers) largest, best first in carve_cu_topk's order, into idx + b min(k, n), their count into count[b]
// (device); idx past count[b] is not written. One launch for the batch, a block per list, whatever n and k: up to
// 2048 results sorted in shared memory, more in the scratch by a bitonic network inside the block (as many steps
// as the results' power of two needs: 105 for 8400). What the NMS needs: its non-candidates are NaN, and it walks
// only the candidates.
// Scratch: carve_cu_topk_numbers_scratch_bytes (0 when k <= 2048: shared memory; else each list's composites,
// padded to a power of two; SIZE_MAX for batch 0 or too large). n or k 0: every count 0.
size_t carve_cu_topk_numbers_scratch_bytes(size_t n, size_t k, size_t batch);
carve_status carve_cu_topk_numbers_batch(const carve_cu_ctx* ctx, const float* vals, size_t n, size_t k,
                                         size_t batch, int32_t* idx, uint32_t* count, void* scratch);

// rows[i][0:c] = src[idx[i]][0:c] for i < n (src pixel stride src_stride, rows dense).
carve_status carve_cu_gather_rows(const carve_cu_ctx* ctx, const float* src, size_t src_stride, uint32_t c,
                                  const int32_t* idx, size_t n, float* rows);

// ---- End-to-end post-processing ------------------------------------------------------

// carve_e2e_postprocess_task of carve_post.h on the device: the same two top-k steps
// and the same task decoding (DETECT, SEGMENT, POSE, OBB), writing min(k, A) rows of
// (6 + extra_channels) floats to `rows` (device). `levels` is a HOST array whose
// pointers are device pointers (copied by value into the kernels' arguments), at
// most 8 levels. The arguments the CPU function answers with 0 rows (nc == 0,
// k == 0, an unknown task, POSE extras not a multiple of 3, OBB extras != 1, more
// than 2^31 - 1 anchors or k' nc candidates) give CARVE_ERR_INVALID_ARGUMENT.
// Scores are sigmoid(expf): under emulation (glibc's expf) the rows are those of the
// CPU bit for bit; on a GPU expf differs by up to 2 ulp, so two scores equal on
// one side and not on the other can swap ranks.
size_t carve_cu_e2e_scratch_bytes(size_t anchors, size_t nc, size_t k);
// The same for `batch` images in one call: 2 launches for the batch while A <= 12288 and k' <= 1024 (the anchor
// scores, then the fused head: one block per image does both top-k steps and the rows), else 5 while A and
// k' nc are at most 65536 and k' at most 2048, else the two top-k steps image by image. Image b's maps follow image
// 0's in each view (level l's box, class and extra maps of image b start b h w box_stride, b h w
// cls_stride and b h w extra_stride floats after `levels`' pointers), its min(k, A) rows follow image
// b - 1's in `rows`. Scratch: carve_cu_e2e_batch_scratch_bytes. batch 0 is CARVE_ERR_INVALID_ARGUMENT.
size_t carve_cu_e2e_batch_scratch_bytes(size_t anchors, size_t nc, size_t k, size_t batch);
carve_status carve_cu_e2e_postprocess_batch(const carve_cu_ctx* ctx, const carve_level* levels, size_t num_levels,
                                            size_t nc, size_t extra_channels, size_t k, carve_e2e_task task,
                                            size_t batch, void* scratch, float* rows);
carve_status carve_cu_e2e_postprocess_task(const carve_cu_ctx* ctx, const carve_level* levels, size_t num_levels,
                                           size_t nc, size_t extra_channels, size_t k, carve_e2e_task task,
                                           void* scratch, float* rows);

// Mask logits of carve_mask_logits on the device, one GEMM: logits (n, ph, pw) =
// rows[:, coef_offset : coef_offset + nm] x protos^T, protos (ph, pw, nm) strided.
carve_status carve_cu_mask_logits(const carve_cu_ctx* ctx, const float* rows, size_t n, size_t row_stride,
                                  size_t coef_offset, const float* protos, uint32_t ph, uint32_t pw, uint32_t nm,
                                  size_t proto_stride, float* logits);

// ---- Pre-processing ------------------------------------------------------------------

// carve_letterbox on the device, bit-identical to the CPU one (the same fixed-point
// arithmetic): rgb (src_h, src_w, 3) uint8 on the device, rows src_stride_bytes apart;
// out (out_h, out_w, 3) float32 dense. The geometry (info, host) is computed on the
// host (carve_letterbox_geometry, added to carve_pre.c beside carve_letterbox) and passed in. scratch: carve_cu_letterbox_scratch_bytes.
size_t carve_cu_letterbox_scratch_bytes(int src_w, int src_h, int out_w, int out_h);
// carve_letterbox_geometry(src_w, src_h, out_w, out_h, &info) is declared in carve_pre.h
// (included above) and defined in carve_pre.c, which carve_letterbox also uses.
carve_status carve_cu_letterbox(const carve_cu_ctx* ctx, const uint8_t* rgb, int src_w, int src_h,
                                size_t src_stride_bytes, const carve_letterbox_info* info, int out_w, int out_h,
                                float* out, void* scratch);

// A float32 NCHW tensor (c, h, w) already on the device, as a dense NHWC (h, w, c) one: the network
// input of a run from a device tensor (carve_nchw_to_nhwc of carve_layout.h on the device, exact).
carve_status carve_cu_nchw_to_nhwc(const carve_cu_ctx* ctx, const float* x, uint32_t c, uint32_t h, uint32_t w,
                                   float* y);
// The same for `batch` tensors one after another (tensor b at x + b c h w, its NHWC copy at y + b h w c), in one
// launch. batch 0 is CARVE_ERR_INVALID_ARGUMENT.
carve_status carve_cu_nchw_to_nhwc_batch(const carve_cu_ctx* ctx, const float* x, uint32_t batch, uint32_t c,
                                         uint32_t h, uint32_t w, float* y);

// carve_classify_preprocess on the device, bit-identical to the CPU one.
size_t carve_cu_classify_scratch_bytes(int w, int h, int out);
carve_status carve_cu_classify_preprocess(const carve_cu_ctx* ctx, const uint8_t* rgb, int w, int h, size_t stride,
                                          int out, float* out_nhwc, void* scratch);

#ifdef __cplusplus
}  // extern "C"

// ---- Half-precision head maps (C++: the fp16 packages) ---------------------------------

struct __half;  // IEEE binary16: cuda_fp16.h's (the fp16 runtime's carve_cuda_f16.h includes it)

// carve_level with binary16 maps: an fp16 package's head inputs, read where the network wrote
// them (its arena), with carve_level's fields and meaning (strides in halves).
typedef struct carve_cu_level_h {
  const __half* box;
  size_t box_stride;
  const __half* cls;
  size_t cls_stride;
  const __half* extra;  // NULL if none
  size_t extra_stride;
  size_t h, w;
  float stride;
} carve_cu_level_h;

// carve_cu_e2e_postprocess_batch / _task on half maps (C++ overloads; the same checks, scratch,
// launches and float32 rows): each value is widened to float32 as a kernel reads it (exact: every
// half is a float), so the rows are bit for bit those of the float32 functions on float32 copies of
// the maps, without the copies.
carve_status carve_cu_e2e_postprocess_batch(const carve_cu_ctx* ctx, const carve_cu_level_h* levels, size_t num_levels,
                                            size_t nc, size_t extra_channels, size_t k, carve_e2e_task task,
                                            size_t batch, void* scratch, float* rows);
carve_status carve_cu_e2e_postprocess_task(const carve_cu_ctx* ctx, const carve_cu_level_h* levels, size_t num_levels,
                                           size_t nc, size_t extra_channels, size_t k, carve_e2e_task task,
                                           void* scratch, float* rows);

// ---- Half-precision network inputs (C++: the fp16 packages) -------------------------------

// carve_cu_letterbox / carve_cu_nchw_to_nhwc_batch writing an fp16 package's input as halves: each value the
// float32 function's, rounded once to nearest even (as carve_cu_f32_to_f16 rounds it), so the same halves as the
// float32 function followed by the cast, in one launch fewer and without the float32 staging copy.
carve_status carve_cu_letterbox(const carve_cu_ctx* ctx, const uint8_t* rgb, int src_w, int src_h,
                                size_t src_stride_bytes, const carve_letterbox_info* info, int out_w, int out_h,
                                __half* out, void* scratch);
carve_status carve_cu_nchw_to_nhwc_batch(const carve_cu_ctx* ctx, const float* x, uint32_t batch, uint32_t c,
                                         uint32_t h, uint32_t w, __half* y);
// carve_cu_classify_preprocess writing an fp16 classify package's input as halves (the same rounding).
carve_status carve_cu_classify_preprocess(const carve_cu_ctx* ctx, const uint8_t* rgb, int w, int h, size_t stride,
                                          int out, __half* out_nhwc, void* scratch);
#endif  // __cplusplus

#endif  // CARVE_CUDA_H
