// carve runtime: the small C library that every generated package copies in.
//
// Status codes, the strided NHWC view and the thread-pool glue live here; the
// kernels are in one header per family (carve_epilogue.h, carve_stem.h,
// carve_dwconv.h, carve_winograd.h, carve_attention.h, carve_layout.h; their
// instruction sets in carve_isa.h), carve_pre.h (letterbox, classify
// preprocessing, mapping back to the source image), carve_post.h (end-to-end
// rows of the detect / segment / pose / obb heads, softmax and top-k),
// carve_mask.h (instance masks, RLE), carve_model.h (the create / run / destroy
// lifecycle the generated code of the CPU backends forwards to) and carve_io.h
// (demo-side file and drawing helpers).
//
// Conventions shared by every file of the runtime:
//   * activations are NHWC float32 with batch 1; pixel p, channel c of a tensor
//     with row stride `stride` (>= channels) is data[p * stride + c], so a tensor
//     can be a channel slice of a wider buffer (concat / split without copies);
//   * no global mutable state and no heap allocation in any run-time function:
//     callers pass scratch whose size a *_scratch_* function reports;
//   * index arithmetic is done in size_t;
//   * a NULL pthreadpool_t means "run serially on the calling thread".

#ifndef CARVE_RT_H
#define CARVE_RT_H

// ---- Compile-time options ---------------------------------------------------
//
// Define these before including any runtime header (or on the compiler command
// line) for every translation unit of the package.
//
//   CARVE_RT_NO_ERROR_STRINGS  carve_status_str() returns "" for every status
//                              instead of a sentence, saving the string table.
//   CARVE_RT_NO_THREADS        the runtime kernels ignore their pool argument and
//                              run serially; carve_pool.{h,c} (the thread pool) is
//                              then not needed (the portable and cuda packages).
//   CARVE_ATTN_ROWS_PER_TASK   query rows handled by one attention task (default
//                              64); it sets carve_attention_scratch_floats().
//   CARVE_RT_NO_FILE           no stdio: carve_weights_read_file() returns
//                              CARVE_ERR_UNSUPPORTED (bare metal; pass the bytes).
//   CARVE_RT_NO_HEAP           no allocator at all: <name>_create() returns
//                              CARVE_ERR_UNSUPPORTED and nothing references
//                              malloc / free; use <name>_create_with().
//
// Do not compile the runtime with -ffast-math: the letterbox and exp rely on
// IEEE rounding of each operation (see carve_pre.c and carve_simd.h).

// ABI version of this runtime. The check goes both ways, at compile time:
// generated code has
//   #if CARVE_RT_ABI != 12
//   #error "... regenerate the package ..."
//   #endif
// and a package's build defines CARVE_PACKAGE_ABI (the ABI it was generated
// for) for every translation unit, runtime included, which is checked below.
// 2: weights files and f16 weights (carve_weights.h), statuses 8..12.
// 3: carve's XNNPACK allocator and heap scopes (carve_xnn.h), for xnnpack create_with.
// 4: carve_conv3x3s2_small_cin (carve_stem.h), the xnnpack backend's stem convolution.
// 5: carve_letterbox takes a pool.
// 6: carve_e2e_postprocess and carve_e2e_postprocess_task take a pool.
// 7: one error contract: every entry point returns carve_status (carve_epilogue,
//    carve_attention, carve_upsample_nearest2x, the layout transposes,
//    carve_e2e_postprocess(_task), ... were void); the kernels by family, each with
//    its instruction-set variants and a selector (carve_isa.h).
//    carve_pool.h: carve's own thread pool (the pthreadpool_* functions), carve_cpu_count.
//    carve_model.h: the generated code's create / create_with / destroy / runs / masks.
// 8: f16 packages store the checkpoint's halves and rebuild the f32 package's weights
//    (carve_weights_piece, carve_weights_expand; carve_model_desc's weight_pieces).
// 9: int8 packages: carve_q8.h (carve_q8_run), carve_model_layer_done_q8 and the context's layer_f32
//    (carve_model_desc's layer_dequant_floats).
// 10: xnnpack int8 packages: carve_op_desc's int8 fields (scale_off, zero points, scales), carve_xnn's
//    QCONV / QADD / DEQUANTIZE kinds, carve_q8_lut.h.
// 11: carve_q8_run_pool (carve_q8.h): the carve_q8 kinds on the thread pool, carve_q8_run's bytes; xnnpack int8
//    packages run no XNNPACK int8 operator, so carve_xnn's QCONV / QADD / DEQUANTIZE kinds, carve_op_desc's int8
//    fields and carve_q8_lut.h (10) are gone.
// 12: carve_q8_pool.h: carve_q8_run_pool's instruction-set variants (AVX-512), chosen at create through the kernel
//    table (carve_q8_pool_select); xnnpack int8 packages call m->k.q8_pool instead of carve_q8_run_pool.
// 13: int8 input (carve_model_desc's input_q8): carve_letterbox_q8, carve_classify_preprocess_q8 and
//    carve_nchw_to_nhwc_q8 (carve_pre.h) write an int8 package's input straight to int8.
#define CARVE_RT_ABI 13

#if defined(CARVE_PACKAGE_ABI) && CARVE_PACKAGE_ABI != CARVE_RT_ABI
#error "carve runtime ABI differs from the package's CARVE_PACKAGE_ABI: copy the runtime/ of the same carve"
#endif

#include <stddef.h>
#include <stdint.h>

#ifdef CARVE_RT_NO_THREADS
// Same declaration as carve_pool.h and <pthreadpool.h>; C11 allows the repeated typedef.
typedef struct pthreadpool* pthreadpool_t;
#else
#include "carve_pool.h"  // carve's thread pool: pthreadpool_t and the pthreadpool_* functions
#endif

#ifdef __cplusplus
extern "C" {
#endif

// ---- Status -----------------------------------------------------------------

typedef enum carve_status {
  CARVE_OK = 0,
  CARVE_ERR_INVALID_ARGUMENT = 1,
  CARVE_ERR_OUT_OF_MEMORY = 2,
  CARVE_ERR_BACKEND = 3,  // XNNPACK, CUDA or cuBLAS failed
  CARVE_ERR_IO = 4,
  CARVE_ERR_UNSUPPORTED = 5,
  CARVE_ERR_BAD_WEIGHTS = 6,
  CARVE_ERR_BAD_IMAGE = 7,
  CARVE_ERR_WEIGHTS_MAGIC = 8,     // weights file: not a carve weights file
  CARVE_ERR_WEIGHTS_VERSION = 9,   // weights file: another format version
  CARVE_ERR_WEIGHTS_SIZE = 10,     // weights file: truncated, padded or unexpected size
  CARVE_ERR_WEIGHTS_CHECKSUM = 11, // weights file: payload corrupted (CRC-32)
  CARVE_ERR_WEIGHTS_MODEL = 12,    // weights file: valid, but for another model or dtype
} carve_status;

// A short English sentence for a status ("" with CARVE_RT_NO_ERROR_STRINGS);
// never NULL, also for values outside the enum.
const char* carve_status_str(carve_status status);

// ---- Tensor view ------------------------------------------------------------

// A strided NHWC float32 view with batch 1: element (y, x, c) is
// data[(y * w + x) * stride + c], with stride >= c.
typedef struct carve_view {
  float* data;
  size_t h, w, c, stride;
} carve_view;

// ---- Activation -------------------------------------------------------------

// The activation a kernel applies before its store (carve_epilogue, the stem,
// depthwise and Winograd convolutions).
typedef enum carve_act {
  CARVE_ACT_NONE = 0,
  CARVE_ACT_SILU = 1,  // x / (1 + exp(-x))
} carve_act;

// ---- Op descriptor ------------------------------------------------------------

// One compute op of a generated package (a convolution, pool, copy, ...), all of
// it known at generation time: the packages keep a constant table of these.
// `kind` is a value of the backend's enum (carve_xnn_kind, carve_pt_kind).
// Offsets are in floats: weight_off / bias_off from the weight blob, in_off /
// in2_off / out_off from the arena. Fields a kind does not use are 0.
typedef struct carve_op_desc {
  int kind;
  uint32_t kh, kw, stride, pad, groups;
  uint32_t cin, cout;            // total input / output channels
  uint32_t h, w;                 // input size (pixels = h * w)
  size_t in_stride, out_stride;  // pixel strides (channels) of input and output views
  size_t weight_off, bias_off;
  size_t in_off, in2_off, out_off;
} carve_op_desc;

// ---- Parallel loops ---------------------------------------------------------

// One tile of a 1-D range: items [start, start + count).
typedef void (*carve_task_1d_tile_t)(void* context, size_t start, size_t count);

// Calls task(context, i, min(tile, range - i)) for i = 0, tile, 2*tile, ... <
// range, on the pool's threads (serially when pool is NULL or with
// CARVE_RT_NO_THREADS). Returns when every tile is done.
void carve_parallelize_1d_tile(pthreadpool_t pool, carve_task_1d_tile_t task, void* context,
                               size_t range, size_t tile);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_RT_H
