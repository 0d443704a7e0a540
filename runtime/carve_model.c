// carve runtime: the model lifecycle every CPU package shares (see carve_model.h).

#include "carve_model.h"

#include <stdlib.h>
#include <string.h>

#include "carve_layout.h"  // carve_nchw_to_nhwc
#include "carve_post.h"    // carve_topk_probs
#include "carve_pre.h"     // the pre-processing and the int8 input

#define TRY(expr)                  \
  do {                             \
    carve_status status_ = (expr); \
    if (status_ != CARVE_OK) {     \
      return status_;              \
    }                              \
  } while (0)

// A descriptor carve_model_create can work from: sizes, hooks and tables that the generated code always
// fills. (A NULL here is a bug of the caller, not of the generator's output.)
static int desc_ok(const carve_model_desc* d) {
  if (d == NULL || d->context_size < sizeof(carve_model) || d->context_bytes < d->context_size ||
      d->layer_ms_offset < sizeof(carve_model) || d->arena_bytes == 0 || d->scratch_bytes == 0 ||
      d->run_network == NULL || d->num_layers <= 0 || d->layer_types == NULL || d->class_names == NULL ||
      d->num_classes == 0 || d->input_h <= 0 || d->input_w <= 0) {
    return 0;
  }
  if (d->layer_ms_offset % sizeof(double) != 0 ||
      d->layer_ms_offset + (size_t)d->num_layers * sizeof(double) > d->context_size) {
    return 0;
  }
  if (d->weights_dtype != CARVE_WEIGHTS_F32 && d->weights_dtype != CARVE_WEIGHTS_F16) {
    return 0;
  }
  if (d->weights_dtype == CARVE_WEIGHTS_F16 && (d->wide_weight_bytes < d->weight_floats * sizeof(float) ||
                                                 (d->weight_pieces == NULL && d->num_weight_pieces > 0))) {
    return 0;
  }
  if (d->task == CARVE_TASK_CLASSIFY) {
    return d->store_class != NULL && d->topk <= CARVE_MODEL_MAX_TOPK;
  }
  return d->store_detection != NULL && d->row_len >= 6 && d->row_len <= CARVE_MODEL_MAX_ROW_LEN &&
         (d->task != CARVE_TASK_POSE || 6 + 3 * d->num_keypoints <= d->row_len);
}

// ---- Lifecycle ------------------------------------------------------------------

carve_status carve_model_resolve_options(const carve_model_desc* desc, const carve_model_options* options,
                                         int one_thread, carve_model_options* out) {
  if (desc == NULL || out == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  memset(out, 0, sizeof(*out));  // every field 0 / NULL: threads 0, the descriptor's default
  if (options != NULL) {
    *out = *options;
  }
  if (out->threads < 0 || out->threads > 1024 || (one_thread && out->threads > 1)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (one_thread || desc->threads_for == NULL) {
    out->threads = 1;  // create_with, or a package that runs on the calling thread whatever was asked
    return CARVE_OK;
  }
  const size_t threads = desc->threads_for((size_t)out->threads, out->allow_oversubscribe);
  out->threads = threads < 1 ? 1 : threads > 1024 ? 1024 : (int)threads;
  return CARVE_OK;
}

// m->weights: the float32 weights the layers read. linked: the linked blob (NULL: a weights file, from
// opt->weights_data or, when may_allocate (create), read from opt->weights_path). f16 weights are rebuilt
// (carve_weights_expand: widened, BatchNorm folded, Winograd transformed) into m->wide_weights, which create
// allocates (may_allocate) and create_with takes from the caller.
static carve_status bind_weights(carve_model* m, const void* linked, const carve_model_options* opt,
                                 int may_allocate) {
  const carve_model_desc* d = m->desc;
  const void* stored = linked;
  if (d->weights_file != NULL) {
    const void* data = opt->weights_data;
    size_t bytes = opt->weights_size;
    if (data == NULL) {
      if (opt->weights_path == NULL || !may_allocate) {
        return CARVE_ERR_INVALID_ARGUMENT;
      }
      TRY(carve_weights_read_file(opt->weights_path, &m->weights_file, &bytes));
      data = m->weights_file;
    }
    TRY(carve_weights_check(data, bytes, d->weights_file, &stored));
    if (d->weights_dtype == CARVE_WEIGHTS_F32 && (uintptr_t)stored % sizeof(float) != 0) {
      return CARVE_ERR_INVALID_ARGUMENT;  // the caller's bytes must be (64-byte) aligned
    }
  } else if (linked == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (d->weights_dtype == CARVE_WEIGHTS_F32) {
    m->weights = stored;
    return CARVE_OK;
  }
  if (m->wide_weights == NULL) {
    if (!may_allocate) {
      return CARVE_ERR_INVALID_ARGUMENT;
    }
#ifdef CARVE_RT_NO_HEAP
    return CARVE_ERR_UNSUPPORTED;
#else
    m->wide_weights = aligned_alloc(64, d->wide_weight_bytes);
    if (m->wide_weights == NULL) {
      return CARVE_ERR_OUT_OF_MEMORY;
    }
#endif
  }
  TRY(carve_weights_expand(stored, d->weight_payload_bytes, d->weight_pieces, d->num_weight_pieces,
                           d->weight_floats, 0, m->wide_weights, d->weight_floats));
  m->weights = m->wide_weights;
  return CARVE_OK;
}

// What both create functions do once the context, arena and scratch exist: the arena zeroed, the weights
// bound, then the backend's own setup.
static carve_status init(carve_model* m, const void* linked, const carve_model_options* opt,
                         const carve_model_buffers* buffers) {
  memset(m->arena, 0, m->desc->arena_bytes);
  m->threads = opt->threads;
  if (m->desc->select_kernels != NULL) {
    m->desc->select_kernels(m);
  }
  TRY(bind_weights(m, linked, opt, buffers == NULL));
  if (m->desc->init != NULL) {
    TRY(m->desc->init(m, opt, buffers));
  }
  return CARVE_OK;
}

// What both create functions check first (*out = NULL): out, the descriptor, then the options (opt: with
// the defaults filled in and the threads resolved; one_thread: create_with).
static carve_status begin_create(const carve_model_desc* desc, const carve_model_options* options, int one_thread,
                                 carve_model_options* opt, carve_model** out) {
  if (out == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  *out = NULL;
  if (!desc_ok(desc)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  return carve_model_resolve_options(desc, options, one_thread, opt);
}

carve_status carve_model_create(const carve_model_desc* desc, const void* linked_weights,
                                const carve_model_options* options, carve_model** out) {
  carve_model_options opt;
  carve_status status = begin_create(desc, options, 0, &opt, out);
  if (status != CARVE_OK) {
    return status;
  }
#ifdef CARVE_RT_NO_HEAP
  (void)linked_weights;
  return CARVE_ERR_UNSUPPORTED;  // built without a heap: use <name>_create_with
#else
  carve_model* m = calloc(1, desc->context_size);
  if (m == NULL) {
    return CARVE_ERR_OUT_OF_MEMORY;
  }
  m->desc = desc;
  m->owned = 1;
  m->layer_ms = (double*)((char*)m + desc->layer_ms_offset);
  status = CARVE_ERR_OUT_OF_MEMORY;
  m->arena = aligned_alloc(64, desc->arena_bytes);
  // The Winograd convolutions split their work into one task per scratch slot: a few per thread, so that a
  // thread the OS preempts holds a small share (the result does not depend on the number of slots).
  const size_t per_thread = desc->winograd_slots_per_thread > 0 ? desc->winograd_slots_per_thread : 1;
  m->scratch_slots = opt.threads > 1 ? (size_t)opt.threads * per_thread : 1;
  const size_t slots_bytes = m->scratch_slots * desc->winograd_slot_bytes;
  m->scratch = aligned_alloc(64, slots_bytes > desc->scratch_bytes ? slots_bytes : desc->scratch_bytes);
  if (m->arena == NULL || m->scratch == NULL) {
    goto error;
  }
  status = init(m, linked_weights, &opt, NULL);
  if (status != CARVE_OK) {
    goto error;
  }
  *out = m;
  return CARVE_OK;

error:
  carve_model_destroy(m);
  return status;
#endif
}

static int fits(const void* p, size_t bytes, size_t need) { return p != NULL && bytes >= need && (uintptr_t)p % 64 == 0; }

carve_status carve_model_create_with(const carve_model_desc* desc, const void* linked_weights,
                                     const carve_model_options* options, const carve_model_buffers* buffers,
                                     carve_model** out) {
  carve_model_options opt;
  carve_status status = begin_create(desc, options, 1, &opt, out);
  if (status != CARVE_OK) {
    return status;
  }
  if (buffers == NULL || !fits(buffers->context, buffers->context_bytes, desc->context_bytes) ||
      !fits(buffers->arena, buffers->arena_bytes, desc->arena_bytes) ||
      !fits(buffers->scratch, buffers->scratch_bytes, desc->scratch_bytes) ||
      (desc->wide_weight_bytes > 0 && !fits(buffers->weights, buffers->weights_bytes, desc->wide_weight_bytes)) ||
      (desc->backend_buffer_min > 0 && !fits(buffers->backend, buffers->backend_bytes, desc->backend_buffer_min))) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  carve_model* m = buffers->context;
  memset(m, 0, desc->context_size);
  m->desc = desc;
  m->layer_ms = (double*)((char*)m + desc->layer_ms_offset);
  m->arena = buffers->arena;
  m->scratch = buffers->scratch;
  m->scratch_slots = 1;  // one thread
  if (desc->wide_weight_bytes > 0) {
    m->wide_weights = buffers->weights;
  }
  status = init(m, linked_weights, &opt, buffers);
  if (status != CARVE_OK) {
    carve_model_destroy(m);
    return status;
  }
  *out = m;
  return CARVE_OK;
}

void carve_model_destroy(carve_model* m) {
  if (m == NULL) {
    return;
  }
  if (m->desc != NULL && m->desc->destroy != NULL) {
    m->desc->destroy(m);
  }
#ifndef CARVE_RT_NO_HEAP
  free(m->weights_file);  // NULL unless create read a weights file
  free(m->layer_f32);     // NULL unless an int8 package's layer callback was set
  if (m->owned) {
    if (m->desc != NULL && m->desc->wide_weight_bytes > 0) {
      free(m->wide_weights);
    }
    free(m->scratch);
    free(m->arena);
    free(m);
  }
#endif
}

// ---- Runs -----------------------------------------------------------------------

carve_status carve_model_layer_done(carve_model* m, int layer, size_t off, size_t h, size_t w, size_t c,
                                    size_t stride, double ms) {
  if (m == NULL || layer < 0 || layer >= m->desc->num_layers) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  m->layer_ms[layer] = ms;
  if (m->layer_fn != NULL) {
    const carve_view view = {m->arena + off, h, w, c, stride};
    m->layer_fn(m->layer_user, layer, m->desc->layer_types[layer], &view);
  }
  return CARVE_OK;
}

carve_status carve_model_layer_done_q8(carve_model* m, int layer, size_t off, size_t h, size_t w, size_t c,
                                       size_t stride, float scale, int zero, double ms) {
  if (m == NULL || layer < 0 || layer >= m->desc->num_layers || h * w * c > m->desc->layer_dequant_floats) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  m->layer_ms[layer] = ms;
  if (m->layer_fn != NULL && m->layer_f32 != NULL) {
    const int8_t* q = (const int8_t*)m->arena + off;
    for (size_t p = 0; p < h * w; p++) {
      for (size_t k = 0; k < c; k++) {
        m->layer_f32[p * c + k] = (float)((int)q[p * stride + k] - zero) * scale;
      }
    }
    const carve_view view = {m->layer_f32, h, w, c, c};
    m->layer_fn(m->layer_user, layer, m->desc->layer_types[layer], &view);
  }
  return CARVE_OK;
}

carve_status carve_model_set_layer_callback(carve_model* m, carve_model_layer_fn fn, void* user) {
  if (m == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (fn != NULL && m->desc->layer_dequant_floats > 0 && m->layer_f32 == NULL) {
#ifdef CARVE_RT_NO_HEAP
    return CARVE_ERR_UNSUPPORTED;
#else
    if (!m->owned) {
      return CARVE_ERR_UNSUPPORTED;  // create_with allocates nothing
    }
    m->layer_f32 = (float*)malloc(m->desc->layer_dequant_floats * sizeof(float));
    if (m->layer_f32 == NULL) {
      return CARVE_ERR_OUT_OF_MEMORY;
    }
#endif
  }
  m->layer_fn = fn;
  m->layer_user = user;
  return CARVE_OK;
}

int carve_model_threads(const carve_model* m) { return m != NULL ? m->threads : 0; }

static carve_status run_network(carve_model* m) {
  TRY(m->desc->run_network(m));
  m->has_run = 1;
  return CARVE_OK;
}

static int is_detector(const carve_model* m) { return m->desc->task != CARVE_TASK_CLASSIFY; }

// The network input in the arena: float32 (desc->input_q8 0) or int8 (1).
static float* input_f32(carve_model* m) { return m->arena + m->desc->input_off; }
static int8_t* input_q8(carve_model* m) { return (int8_t*)(void*)(m->arena + m->desc->input_off); }

// The caller's float32 NCHW tensor as the network input: transposed to NHWC, and quantized for an int8 input.
static carve_status tensor_input(carve_model* m, const float* input_nchw) {
  const carve_model_desc* d = m->desc;
  if (d->input_q8) {
    return carve_nchw_to_nhwc_q8(input_nchw, 3, (size_t)d->input_h, (size_t)d->input_w, input_q8(m));
  }
  return carve_nchw_to_nhwc(input_nchw, 3, (size_t)d->input_h, (size_t)d->input_w, input_f32(m), 3);
}

carve_status carve_model_collect_detections(const carve_model* m, float conf, const carve_letterbox_info* info,
                                            void* dets, size_t max_dets, size_t* num_dets) {
  if (num_dets != NULL) {
    *num_dets = 0;
  }
  if (m == NULL || num_dets == NULL || (dets == NULL && max_dets > 0) || !is_detector(m)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const carve_model_desc* d = m->desc;
  const float* rows = m->arena + d->output0_off;
  size_t n = 0;
  for (size_t i = 0; i < m->num_rows && n < max_dets; i++) {
    float r[CARVE_MODEL_MAX_ROW_LEN];
    memcpy(r, rows + i * d->row_len, d->row_len * sizeof(float));
    if (!(r[4] > conf)) {
      continue;
    }
    if (info != NULL) {
      if (d->task == CARVE_TASK_OBB) {
        TRY(carve_scale_boxes_xywhr(r, 1, d->row_len, info));
      } else {
        TRY(carve_scale_boxes_xyxy(r, 1, d->row_len, info));
        if (d->task == CARVE_TASK_POSE) {
          TRY(carve_scale_coords(r + 6, d->num_keypoints, 3, info));
        }
      }
    }
    d->store_detection(dets, n, r, i);
    n++;
  }
  *num_dets = n;
  return CARVE_OK;
}

carve_status carve_model_detect_image(carve_model* m, const uint8_t* rgb, int width, int height, size_t stride_bytes,
                                      float conf, void* dets, size_t max_dets, size_t* num_dets) {
  if (m == NULL || rgb == NULL || num_dets == NULL || (dets == NULL && max_dets > 0) || !is_detector(m)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  *num_dets = 0;
  const carve_model_desc* d = m->desc;
  if (d->input_q8) {
    TRY(carve_letterbox_q8(rgb, width, height, stride_bytes, d->input_w, d->input_h, input_q8(m), m->scratch,
                           &m->letterbox, m->pool));
  } else {
    TRY(carve_letterbox(rgb, width, height, stride_bytes, d->input_w, d->input_h, input_f32(m), m->scratch,
                        &m->letterbox, m->pool));
  }
  TRY(run_network(m));
  return carve_model_collect_detections(m, conf, &m->letterbox, dets, max_dets, num_dets);
}

carve_status carve_model_detect_tensor(carve_model* m, const float* input_nchw, float conf, void* dets,
                                       size_t max_dets, size_t* num_dets) {
  if (m == NULL || input_nchw == NULL || num_dets == NULL || (dets == NULL && max_dets > 0) || !is_detector(m)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  *num_dets = 0;
  TRY(tensor_input(m, input_nchw));
  TRY(run_network(m));
  return carve_model_collect_detections(m, conf, NULL, dets, max_dets, num_dets);
}

carve_status carve_model_top_classes(const carve_model* m, void* top, size_t k) {
  if (m == NULL || (top == NULL && k > 0) || k > m->desc->topk || is_detector(m)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  int idx[CARVE_MODEL_MAX_TOPK];
  float val[CARVE_MODEL_MAX_TOPK];
  const size_t n = carve_topk_probs(m->arena + m->desc->output0_off, m->desc->num_classes, k, idx, val);
  for (size_t j = 0; j < n; j++) {
    m->desc->store_class(top, j, idx[j], val[j]);
  }
  return CARVE_OK;
}

carve_status carve_model_classify_image(carve_model* m, const uint8_t* rgb, int width, int height,
                                        size_t stride_bytes, void* top, size_t k, void* scratch,
                                        size_t scratch_bytes) {
  if (m == NULL || rgb == NULL || (top == NULL && k > 0) || k > m->desc->topk || scratch == NULL ||
      is_detector(m) || scratch_bytes < carve_classify_scratch_bytes(width, height, m->desc->input_w)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const carve_model_desc* d = m->desc;
  if (d->input_q8) {
    TRY(carve_classify_preprocess_q8(rgb, width, height, stride_bytes, d->input_w, input_q8(m), scratch, m->pool));
  } else {
    TRY(carve_classify_preprocess(rgb, width, height, stride_bytes, d->input_w, input_f32(m), scratch, m->pool));
  }
  TRY(run_network(m));
  return carve_model_top_classes(m, top, k);
}

carve_status carve_model_classify_tensor(carve_model* m, const float* input_nchw, void* top, size_t k) {
  if (m == NULL || input_nchw == NULL || (top == NULL && k > 0) || k > m->desc->topk || is_detector(m)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  TRY(tensor_input(m, input_nchw));
  TRY(run_network(m));
  return carve_model_top_classes(m, top, k);
}
