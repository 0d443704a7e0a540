// carve runtime: the model lifecycle every CPU package shares (xnnpack, portable).
//
// A generated <name>.c holds what is particular to its model: the plan (storage
// offsets, op table, layer types and FLOPs, class names), one function per
// layer, and a constant carve_model_desc naming its sizes, offsets, task and
// hooks. Everything else is here, the same for every model: create (the
// context, arena and scratch allocated, the weights bound: linked, read from a
// file or taken from the caller's buffer, checked, f16 widened), create_with
// (all of it in the caller's buffers, which are checked; nothing allocates),
// destroy, the image / tensor runs (pre-processing, the network, the
// detections or classes collected), the per-layer callback and timings, and the
// segmentation masks (carve_model_mask.c, in the packages that have masks).
//
//   generated <name>_create(options, &m)
//     -> carve_model_create(&k_model, <name>_weights, options, &m)
//          resolves the threads (desc->threads_for; xnnpack: carve_threads_for),
//          allocates desc->context_size bytes, the arena and the scratch,
//          binds the weights, calls desc->init (XNNPACK: the thread pool and
//          the operators), or on failure carve_model_destroy
//   generated <name>_run_image(m, rgb, ...)
//     -> carve_model_detect_image(m, rgb, ...)
//          letterbox -> desc->run_network -> carve_model_collect_detections
//                                             -> desc->store_detection per row
//
// The generated context struct starts with a carve_model (runtime/carve_model.h
// fields, named by CARVE_MODEL_FIELDS so that its layer functions can read
// m->arena, m->weights, ... directly); its backend's fields follow.
//
// Every function that does work returns carve_status and checks its arguments
// (CARVE_ERR_INVALID_ARGUMENT for NULL or out-of-range ones); size queries
// (carve_model_mask_scratch_bytes) return 0 for bad ones. No function allocates
// except carve_model_create (and the desc->init hook it calls), and
// carve_model_destroy frees only what create allocated.

#ifndef CARVE_MODEL_H
#define CARVE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "carve_pre.h"
#include "carve_rt.h"
#include "carve_weights.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- Options and the caller's buffers ------------------------------------------

// What <name>_options holds; the generated code copies its own struct into one.
typedef struct carve_model_options {
  // Threads a run uses, the caller included, 0..1024. 0 (the default) and above the CPU count are the
  // descriptor's to resolve (desc->threads_for); create_with: 0 or 1, and 1 it is.
  int threads;
  int allow_oversubscribe;   // nonzero: desc->threads_for keeps a threads above the CPU count
  const void* weights_data;  // --weights-format file: the file's bytes (64-byte aligned), or NULL
  size_t weights_size;
  const char* weights_path;  // --weights-format file, create only: a path create reads, or NULL
} carve_model_options;

// What <name>_buffers holds: each at least the size the descriptor names, 64-byte aligned.
typedef struct carve_model_buffers {
  void* context;  // desc->context_bytes
  size_t context_bytes;
  void* arena;    // desc->arena_bytes
  size_t arena_bytes;
  void* scratch;  // desc->scratch_bytes
  size_t scratch_bytes;
  void* weights;  // desc->wide_weight_bytes (f16 weights rebuilt as float32; NULL when 0)
  size_t weights_bytes;
  void* backend;  // the backend's own memory (xnnpack: XNNPACK's heap), desc->backend_buffer_min or more
  size_t backend_bytes;
} carve_model_buffers;

// ---- Descriptor -----------------------------------------------------------------

typedef enum carve_model_task {
  CARVE_TASK_DETECT = 0,
  CARVE_TASK_SEGMENT = 1,
  CARVE_TASK_POSE = 2,
  CARVE_TASK_OBB = 3,
  CARVE_TASK_CLASSIFY = 4,
} carve_model_task;

// The longest end-to-end row carve_model_collect_detections copies (6 + the task's extra values:
// 32 mask coefficients, 3 per keypoint, the angle); the generated code _Static_asserts its row fits.
#define CARVE_MODEL_MAX_ROW_LEN 256

// The most classes carve_model_top_classes reports (desc->topk, <NAME>_TOPK, is at most this).
#define CARVE_MODEL_MAX_TOPK 5

typedef struct carve_model carve_model;

// The per-layer callback: <name>_layer_fn has this type.
typedef void (*carve_model_layer_fn)(void* user, int layer, const char* type, const carve_view* output);

// One generated model: its sizes, offsets, task, tables and hooks, all constant.
typedef struct carve_model_desc {
  // Memory, in bytes.
  size_t context_size;         // sizeof the generated context (create allocates it)
  size_t context_bytes;        // <NAME>_CONTEXT_BYTES: what create_with asks of buffers->context (>= context_size)
  size_t layer_ms_offset;      // offsetof the context's double[num_layers] of per-layer timings
  size_t arena_bytes;          // <NAME>_ARENA_BYTES
  size_t scratch_bytes;        // <NAME>_SCRATCH_BYTES
  size_t winograd_slot_bytes;  // one Winograd task's scratch, or 0 (create: winograd_slots_per_thread per thread)
  size_t winograd_slots_per_thread;  // create with threads > 1 (xnnpack: CARVE_POOL_SLOTS_PER_THREAD); 0 means 1
  size_t backend_buffer_min;   // create_with's buffers->backend: 0 not used, else at least this many bytes

  // Weights: linked (carve_model_create's linked_weights) or a weights file (weights_file != NULL).
  carve_weights_dtype weights_dtype;          // as stored; f16 is rebuilt as float32 at create
  size_t weight_floats;                       // floats the layers read
  size_t wide_weight_bytes;                   // <NAME>_WIDE_WEIGHT_BYTES: f16 rebuilt as float32 (0 for f32)
  const carve_weights_expect* weights_file;   // what a weights file must hold, or NULL (linked)
  // f16: the bytes stored and the pieces that rebuild the float32 weights from them (carve_weights_expand)
  size_t weight_payload_bytes;
  const carve_weights_piece* weight_pieces;
  size_t num_weight_pieces;

  // Input and outputs, offsets in floats from the arena base.
  int input_h, input_w;        // the network input (1, input_h, input_w, 3) NHWC at input_off
  size_t input_off;
  // 0: the input is float32 (value / 255). 1: it is int8 at carve_pre.h's CARVE_PRE_Q8_SCALE and
  // CARVE_PRE_Q8_ZERO (an int8 package whose first layer reads int8: the pre-processing writes value - 128
  // with carve_letterbox_q8 / carve_classify_preprocess_q8, a tensor run quantizes the caller's float32
  // tensor with carve_nchw_to_nhwc_q8; no float32 input in the arena).
  int input_q8;
  carve_model_task task;
  size_t num_classes;
  size_t output0_off;          // end-to-end rows (row_len floats each) or the class probabilities
  size_t row_len;              // 0 for classify
  size_t topk;                 // classify: the most classes a run reports (<= CARVE_MODEL_MAX_TOPK); else 0
  size_t num_keypoints;        // pose: keypoints (x, y, visibility) at row[6..]; else 0
  size_t output1_off;          // segment: the mask prototypes (proto_h, proto_w, num_protos) NHWC
  size_t proto_h, proto_w, num_protos, proto_stride;

  // int8 packages (--precision int8): the largest int8 layer output in elements, which the layer callback
  // gets dequantized (carve_model_set_layer_callback allocates a float buffer of it); 0 for float packages.
  size_t layer_dequant_floats;

  // Tables.
  int num_layers;
  const char* const* layer_types;  // num_layers Ultralytics module names
  const char* const* class_names;  // num_classes

  // Hooks: the model's and its backend's code.
  // The threads a run uses for options.threads (0: the default) and allow_oversubscribe (xnnpack:
  // carve_threads_for, carve_pool.h: 0 -> the CPUs this process may run on, more clamped to those unless
  // allow_oversubscribe). NULL: the package runs on the calling thread, 1 whatever was asked. Not called
  // by create_with (1 thread).
  size_t (*threads_for)(size_t requested, int allow_oversubscribe);
  carve_status (*run_network)(carve_model* m);  // every layer in order, carve_model_layer_done after each
  // The model's kernel table: each runtime kernel's instruction-set variant, chosen once at create, before
  // the weights are bound and desc->init; NULL: the layers call no kernel with variants.
  void (*select_kernels)(carve_model* m);
  // The backend's part of create and create_with, once the arena, scratch and weights are in place
  // (buffers: create_with's, NULL for create); NULL: nothing to do.
  carve_status (*init)(carve_model* m, const carve_model_options* options, const carve_model_buffers* buffers);
  void (*destroy)(carve_model* m);  // undoes init, also a partial one; NULL: nothing to do
  // Detections: writes the caller's detection n from an end-to-end row (mapped to the caller's pixels).
  void (*store_detection)(void* dets, size_t n, const float* row, size_t row_index);
  // Classify: writes the caller's class j (of the top-k).
  void (*store_class)(void* top, size_t j, int class_id, float prob);
} carve_model_desc;

// ---- Context --------------------------------------------------------------------

// The fields of carve_model, in a macro so that the generated context can name them too (an anonymous
// struct in a union with its carve_model member): its layer functions read m->arena, m->weights, ...
#define CARVE_MODEL_FIELDS                                                                           \
  const carve_model_desc* desc; /* the model's constants and hooks */                              \
  float* arena;                 /* desc->arena_bytes, 64-byte aligned: activations */              \
  void* scratch;                /* desc->scratch_bytes or more: runtime kernels' scratch */         \
  size_t scratch_slots;         /* Winograd slots: desc->winograd_slots_per_thread per thread, 1 (one thread) */ \
  int threads;                  /* threads a run uses, the caller included (the options resolved) */ \
  const float* weights;         /* the float32 weights the layers read */                          \
  pthreadpool_t pool;           /* the runtime kernels' (and XNNPACK's) pool; NULL: this thread */  \
  size_t num_rows;              /* end-to-end rows of the last run */                              \
  int owned;                    /* 1: create allocated context, arena and scratch; 0: the caller's */ \
  int has_run;                  /* a run completed: the outputs are valid */                       \
  void* weights_file;           /* create's copy of a weights file read from a path, or NULL */    \
  float* wide_weights;          /* f16 weights rebuilt (create: allocated; create_with: the caller's) */ \
  double* layer_ms;             /* desc->num_layers timings in the context (desc->layer_ms_offset) */ \
  carve_model_layer_fn layer_fn;                                                                   \
  void* layer_user;                                                                                \
  float* layer_f32;             /* int8 layers' outputs dequantized for layer_fn (set_layer_callback) */ \
  carve_letterbox_info letterbox; /* of the last image run */

struct carve_model {
  CARVE_MODEL_FIELDS
};

// ---- Lifecycle --------------------------------------------------------------------

// The options with defaults filled in (options NULL: all defaults) and threads resolved: one_thread
// (create_with) 1, else desc->threads_for(threads, allow_oversubscribe), or 1 where the descriptor has
// none. CARVE_ERR_INVALID_ARGUMENT when desc or out is NULL, threads is outside 0..1024, or one_thread
// and threads > 1.
carve_status carve_model_resolve_options(const carve_model_desc* desc, const carve_model_options* options,
                                         int one_thread, carve_model_options* out);

// Creates a context: desc->context_size bytes, the arena and the scratch (desc->winograd_slots_per_thread
// Winograd slots per thread where more than one thread), the weights bound (linked_weights: the linked blob, NULL for a weights file), then
// desc->init. On failure *out is NULL and everything is freed. CARVE_ERR_UNSUPPORTED with
// CARVE_RT_NO_HEAP.
carve_status carve_model_create(const carve_model_desc* desc, const void* linked_weights,
                                const carve_model_options* options, carve_model** out);

// The same in the caller's buffers (checked: each non-NULL, 64-byte aligned, at least the size the
// descriptor names; threads 0 or 1: one thread); nothing allocates (desc->init gets the buffers).
carve_status carve_model_create_with(const carve_model_desc* desc, const void* linked_weights,
                                     const carve_model_options* options, const carve_model_buffers* buffers,
                                     carve_model** out);

// desc->destroy, then frees what create allocated. NULL is fine.
void carve_model_destroy(carve_model* m);

// ---- Runs -------------------------------------------------------------------------

// After layer `layer` of a run: records its time and calls the layer callback, if any, with its output
// (h, w, c, stride at off floats into the arena).
carve_status carve_model_layer_done(carve_model* m, int layer, size_t off, size_t h, size_t w, size_t c,
                                    size_t stride, double ms);

// The same for an int8 layer output (int8 packages): `off` in bytes, real = scale * (q - zero). The callback
// gets it dequantized to float32, contiguous (stride c), in m->layer_f32.
carve_status carve_model_layer_done_q8(carve_model* m, int layer, size_t off, size_t h, size_t w, size_t c,
                                       size_t stride, float scale, int zero, double ms);

// Sets (fn non-NULL) or clears the per-layer callback. In an int8 package (desc->layer_dequant_floats > 0) the
// first callback set allocates the float buffer the int8 layers' outputs are dequantized into (freed by
// destroy): CARVE_ERR_UNSUPPORTED for a model of create_with or a CARVE_RT_NO_HEAP build, which allocate
// nothing, CARVE_ERR_OUT_OF_MEMORY if it fails (the callback then stays unset).
carve_status carve_model_set_layer_callback(carve_model* m, carve_model_layer_fn fn, void* user);

// The threads a run uses, the caller included (the options resolved at create); 0 for NULL.
int carve_model_threads(const carve_model* m);

// Detect, segment, pose, obb. Letterboxes an 8-bit RGB image (rows stride_bytes apart) into the input,
// runs the network and writes up to max_dets rows with score > conf to dets (desc->store_detection),
// boxes in the image's pixels; *num_dets their count (0 on failure).
carve_status carve_model_detect_image(carve_model* m, const uint8_t* rgb, int width, int height, size_t stride_bytes,
                                      float conf, void* dets, size_t max_dets, size_t* num_dets);

// The same from a float32 NCHW input tensor (1, 3, input_h, input_w); boxes in input pixels.
carve_status carve_model_detect_tensor(carve_model* m, const float* input_nchw, float conf, void* dets,
                                       size_t max_dets, size_t* num_dets);

// The last run's rows with score > conf, best first, up to max_dets, mapped through info (NULL: input
// pixels), each passed to desc->store_detection; *num_dets their count.
carve_status carve_model_collect_detections(const carve_model* m, float conf, const carve_letterbox_info* info,
                                            void* dets, size_t max_dets, size_t* num_dets);

// Classify. Ultralytics' classification pre-processing of an 8-bit RGB image (scratch:
// carve_classify_scratch_bytes(width, height, input_w) bytes), the network, and the k
// (<= desc->topk) most probable classes to top (desc->store_class).
carve_status carve_model_classify_image(carve_model* m, const uint8_t* rgb, int width, int height,
                                        size_t stride_bytes, void* top, size_t k, void* scratch,
                                        size_t scratch_bytes);

// The same from a float32 NCHW input tensor.
carve_status carve_model_classify_tensor(carve_model* m, const float* input_nchw, void* top, size_t k);

// The k most probable classes of the last run, best first (ties: lower class id first), to top.
carve_status carve_model_top_classes(const carve_model* m, void* top, size_t k);

// ---- Masks (carve_model_mask.c: packages of segmentation models) ------------------------

// The mask logits at prototype resolution (proto_h, proto_w) of the last run's row `row`.
carve_status carve_model_mask_logits(const carve_model* m, int row, float* logits);

// Scratch bytes carve_model_mask needs for the image of the last image run (0: none yet, or m NULL).
size_t carve_model_mask_scratch_bytes(const carve_model* m);

// Row `row`'s mask in the last image run's pixels (height x width bytes, 0/1), cropped to box
// (x1, y1, x2, y2 in image pixels). scratch: carve_model_mask_scratch_bytes(m) bytes.
carve_status carve_model_mask(carve_model* m, int row, const float box[4], uint8_t* mask, void* scratch,
                              size_t scratch_bytes);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_MODEL_H
