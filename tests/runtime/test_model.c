// Checks runtime/carve_model.c, the lifecycle the generated packages forward to, on a model made up here (a
// descriptor and a "network" hook that writes known rows or probabilities): create / create_with / destroy
// (descriptor, options and buffers refused with CARVE_ERR_INVALID_ARGUMENT, the hooks called: the kernel table
// chosen once, before the backend's init; nothing of the caller's freed), the threads resolved (the
// descriptor's threads_for, 1 without one or for create_with, the Winograd slots per thread), linked f32 and
// f16 weights (rebuilt by their pieces; a bad table refused), the detections collected (score > conf, best first, max_dets, boxes mapped
// back through the letterbox as carve_scale_boxes_xyxy maps them), the top-k classes, the per-layer callback
// and timings.

#include "carve_model.h"
#include "carve_post.h"
#include "test_common.h"

#define IN 32                          // input 32 x 32
#define ROWS 4                         // rows the fake network writes
#define ROW_LEN 6
#define NCLS 7
#define INPUT_OFF 0
#define OUTPUT0_OFF (IN * IN * 3)
#define ARENA_BYTES (((OUTPUT0_OFF + ROWS * ROW_LEN) * 4 + 63) / 64 * 64)
#define SCRATCH_BYTES ((CARVE_LETTERBOX_SCRATCH_BYTES(IN, IN) + 63) / 64 * 64)

typedef struct fake {
  union {
    carve_model rt;
    struct {
      CARVE_MODEL_FIELDS
    };
  };
  int inits, destroys, selected;
  double timings[2];
} fake;

typedef struct det {
  float box[4];
  float score;
  int class_id;
  size_t row;
} det;

static const float k_rows[ROWS][ROW_LEN] = {
    {1, 2, 11, 12, 0.9f, 3}, {4, 4, 8, 8, 0.1f, 1}, {2, 3, 30, 31, 0.5f, 0}, {0, 0, 1, 1, 0.3f, 6},
};
static const float k_probs[NCLS] = {0.1f, 0.3f, 0.05f, 0.3f, 0.2f, 0.0f, 0.05f};
static _Alignas(64) const float k_weights[4] = {1.0f, -2.0f, 0.5f, 3.0f};
static _Alignas(64) const uint16_t k_halves[4] = {0x3c00, 0xc000, 0x3800, 0x4200};  // the same, as halves

static int g_layers;  // layer callbacks seen

static carve_status network(carve_model* m) {
  fake* f = (fake*)(void*)m;
  if (m->desc->task == CARVE_TASK_CLASSIFY) {
    memcpy(f->arena + OUTPUT0_OFF, k_probs, sizeof(k_probs));
  } else {
    memcpy(f->arena + OUTPUT0_OFF, k_rows, sizeof(k_rows));
    f->num_rows = ROWS;
  }
  CHECK(carve_model_layer_done(m, 0, INPUT_OFF, IN, IN, 3, 3, 1.5) == CARVE_OK);
  CHECK(carve_model_layer_done(m, 1, OUTPUT0_OFF, 1, ROWS, ROW_LEN, ROW_LEN, 2.5) == CARVE_OK);
  CHECK(carve_model_layer_done(m, 2, OUTPUT0_OFF, 1, 1, 1, 1, 0.0) == CARVE_ERR_INVALID_ARGUMENT);
  return CARVE_OK;
}

// The model's kernel table: chosen once per create, before the backend's init.
static int g_selects;
static void select_kernels(carve_model* m) {
  ((fake*)(void*)m)->selected = 1;
  g_selects++;
}

static carve_status init(carve_model* m, const carve_model_options* opt, const carve_model_buffers* b) {
  CHECK(m->weights != NULL && opt->threads >= 1 && ((fake*)(void*)m)->selected);
  ((fake*)(void*)m)->inits++;
  return b != NULL && b->backend_bytes == 13 ? CARVE_ERR_BACKEND : CARVE_OK;  // a backend's failure
}

static int g_destroys;
static void destroy(carve_model* m) {
  (void)m;
  g_destroys++;
}

static void store_detection(void* dets, size_t n, const float* r, size_t row) {
  det* d = (det*)dets + n;
  memcpy(d->box, r, sizeof(d->box));
  d->score = r[4];
  d->class_id = (int)r[5];
  d->row = row;
}

typedef struct cls {
  int class_id;
  float prob;
} cls;

static void store_class(void* top, size_t j, int class_id, float prob) {
  ((cls*)top)[j] = (cls){class_id, prob};
}

static void on_layer(void* user, int layer, const char* type, const carve_view* v) {
  CHECK(user == &g_layers && v != NULL && v->data != NULL);
  CHECK(strcmp(type, layer == 0 ? "Conv" : "Detect") == 0);
  g_layers++;
}

// int8 layers (ABI 9): carve_model_layer_done_q8 dequantizes an int8 output (strided view, bytes into the arena)
// into the buffer set_layer_callback allocated, contiguous.
static int g_q8_layers;
static void on_q8_layer(void* user, int layer, const char* type, const carve_view* v) {
  (void)type;
  CHECK(user == &g_q8_layers && layer == 0 && v->h == 2 && v->w == 1 && v->c == 3 && v->stride == 3);
  // q = {-128, 0, 127} and {5, -5, 1} (stride 4 in the arena), zero point 2, scale 0.5
  static const float want[6] = {-65.0f, -1.0f, 62.5f, 1.5f, -3.5f, -0.5f};
  for (int i = 0; i < 6; i++) {
    CHECK(v->data[i] == want[i]);
  }
  g_q8_layers++;
}

static carve_status q8_network(carve_model* m) {
  int8_t* q = (int8_t*)m->arena + 64;
  const int8_t vals[8] = {-128, 0, 127, 99, 5, -5, 1, 99};
  memcpy(q, vals, sizeof(vals));
  CHECK(carve_model_layer_done_q8(m, 0, 64, 2, 1, 3, 4, 0.5f, 2, 1.0) == CARVE_OK);
  CHECK(carve_model_layer_done_q8(m, 0, 64, 3, 1, 3, 4, 0.5f, 2, 1.0) == CARVE_ERR_INVALID_ARGUMENT);  // > buffer
  CHECK(carve_model_layer_done_q8(NULL, 0, 64, 2, 1, 3, 4, 0.5f, 2, 1.0) == CARVE_ERR_INVALID_ARGUMENT);
  m->num_rows = 0;
  return CARVE_OK;
}

// A descriptor's threads_for as carve_threads_for is on a 2-CPU machine: 0 -> 2, more clamped unless allowed.
static int g_threads_for_calls;
static size_t threads_for_2cpus(size_t requested, int allow_oversubscribe) {
  g_threads_for_calls++;
  return requested == 0 ? 2 : (requested > 2 && !allow_oversubscribe) ? 2 : requested;
}

static const char* const k_types[2] = {"Conv", "Detect"};
static const char* const k_names[NCLS] = {"a", "b", "c", "d", "e", "f", "g"};

static carve_model_desc detect_desc(void) {
  return (carve_model_desc){
      .context_size = sizeof(fake), .context_bytes = (sizeof(fake) + 63) / 64 * 64,
      .layer_ms_offset = offsetof(fake, timings), .arena_bytes = ARENA_BYTES, .scratch_bytes = SCRATCH_BYTES,
      .weights_dtype = CARVE_WEIGHTS_F32, .weight_floats = 4, .input_h = IN, .input_w = IN, .input_off = INPUT_OFF,
      .task = CARVE_TASK_DETECT, .num_classes = NCLS, .output0_off = OUTPUT0_OFF, .row_len = ROW_LEN,
      .num_layers = 2, .layer_types = k_types, .class_names = k_names, .run_network = network,
      .select_kernels = select_kernels, .init = init,
      .destroy = destroy, .store_detection = store_detection};
}

static void check_detections(carve_model* m) {
  det d[ROWS];
  size_t n = 99;
  float x[3 * IN * IN] = {0};
  CHECK(carve_model_detect_tensor(m, x, 0.25f, d, ROWS, &n) == CARVE_OK);
  CHECK(n == 3);  // 0.9, 0.5, 0.3 > 0.25, in row order (the rows are best first)
  CHECK(d[0].row == 0 && d[1].row == 2 && d[2].row == 3 && d[1].class_id == 0 && d[1].score == 0.5f);
  CHECK(memcmp(d[1].box, k_rows[2], sizeof(d[1].box)) == 0);  // run_tensor: input pixels, as the row
  CHECK(carve_model_detect_tensor(m, x, 0.25f, d, 2, &n) == CARVE_OK && n == 2);  // max_dets
  CHECK(carve_model_detect_tensor(m, x, 0.95f, NULL, 0, &n) == CARVE_OK && n == 0);
  CHECK(m->layer_ms[0] == 1.5 && m->layer_ms[1] == 2.5 && m->has_run);
  // An image twice as wide: boxes mapped back as carve_scale_boxes_xyxy does with the letterbox's geometry.
  uint8_t* img = calloc(2 * IN * IN * 3, 1);
  CHECK(img != NULL);
  CHECK(carve_model_detect_image(m, img, 2 * IN, IN, 2 * IN * 3, 0.25f, d, ROWS, &n) == CARVE_OK && n == 3);
  float want[ROW_LEN];
  memcpy(want, k_rows[2], sizeof(want));
  carve_letterbox_info info;
  CHECK(carve_letterbox_geometry(2 * IN, IN, IN, IN, &info) == CARVE_OK);
  carve_scale_boxes_xyxy(want, 1, ROW_LEN, &info);
  CHECK(memcmp(d[1].box, want, sizeof(d[1].box)) == 0 && want[2] != k_rows[2][2]);
  // Bad arguments: the status, and *num_dets 0.
  n = 99;
  CHECK(carve_model_detect_image(m, NULL, 2 * IN, IN, 2 * IN * 3, 0.25f, d, ROWS, &n) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_model_detect_image(m, img, 0, IN, 2 * IN * 3, 0.25f, d, ROWS, &n) == CARVE_ERR_BAD_IMAGE && n == 0);
  CHECK(carve_model_detect_tensor(NULL, x, 0.25f, d, ROWS, &n) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_model_detect_tensor(m, x, 0.25f, NULL, 1, &n) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_model_detect_tensor(m, x, 0.25f, d, ROWS, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_model_collect_detections(NULL, 0.25f, NULL, d, ROWS, &n) == CARVE_ERR_INVALID_ARGUMENT && n == 0);
  CHECK(carve_model_top_classes(m, NULL, 0) == CARVE_ERR_INVALID_ARGUMENT);  // not a classifier
  CHECK(carve_model_mask_logits(m, 0, want) == CARVE_ERR_INVALID_ARGUMENT);   // no masks
  CHECK(carve_model_mask_scratch_bytes(m) == 0);
  free(img);
}

int main(void) {
  carve_model_desc d = detect_desc();
  carve_model* m = (carve_model*)&d;  // not NULL: a failed create must reset it

  // create: the descriptor and options are checked; linked weights are bound as they are.
  CHECK(carve_model_create(NULL, k_weights, NULL, &m) == CARVE_ERR_INVALID_ARGUMENT && m == NULL);
  CHECK(carve_model_create(&d, k_weights, NULL, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_model_create(&d, NULL, NULL, &m) == CARVE_ERR_INVALID_ARGUMENT && m == NULL);  // no weights
  carve_model_desc bad = d;
  bad.run_network = NULL;
  CHECK(carve_model_create(&bad, k_weights, NULL, &m) == CARVE_ERR_INVALID_ARGUMENT);
  bad = d;
  bad.layer_ms_offset = sizeof(fake);  // the timings would not fit the context
  CHECK(carve_model_create(&bad, k_weights, NULL, &m) == CARVE_ERR_INVALID_ARGUMENT);
  bad = d;
  bad.row_len = CARVE_MODEL_MAX_ROW_LEN + 1;
  CHECK(carve_model_create(&bad, k_weights, NULL, &m) == CARVE_ERR_INVALID_ARGUMENT);
  const carve_model_options threads_bad = {.threads = 1025}, threads3 = {.threads = 3};
  CHECK(carve_model_create(&d, k_weights, &threads_bad, &m) == CARVE_ERR_INVALID_ARGUMENT && m == NULL);
  g_selects = 0;
  CHECK(carve_model_create(&d, k_weights, &threads3, &m) == CARVE_OK && m != NULL && g_selects == 1);
  // No threads_for: the package runs on the calling thread, whatever was asked.
  CHECK(m->owned && m->weights == k_weights && m->threads == 1 && carve_model_threads(m) == 1);
  CHECK(m->scratch_slots == 1 && ((fake*)(void*)m)->inits == 1);
  CHECK(carve_model_set_layer_callback(m, on_layer, &g_layers) == CARVE_OK);
  CHECK(carve_model_set_layer_callback(NULL, on_layer, NULL) == CARVE_ERR_INVALID_ARGUMENT);
  check_detections(m);
  CHECK(g_layers == 2 * 4);  // two layers, four runs that reached the network
  g_destroys = 0;
  carve_model_destroy(m);
  carve_model_destroy(NULL);
  CHECK(g_destroys == 1);
  CHECK(carve_model_threads(NULL) == 0);

  // threads_for resolves create's threads (0: its default; clamped unless allow_oversubscribe); the scratch
  // holds winograd_slots_per_thread Winograd slots per thread.
  carve_model_desc t = d;
  t.threads_for = threads_for_2cpus;
  t.winograd_slot_bytes = 64;
  t.winograd_slots_per_thread = 4;
  const struct {
    carve_model_options opt;
    int threads;
  } cases[] = {{{.threads = 0}, 2}, {{.threads = 1}, 1}, {{.threads = 3}, 2},
               {{.threads = 3, .allow_oversubscribe = 1}, 3}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    CHECK(carve_model_create(&t, k_weights, &cases[i].opt, &m) == CARVE_OK);
    CHECK(carve_model_threads(m) == cases[i].threads);
    CHECK(m->scratch_slots == (cases[i].threads > 1 ? 4 * (size_t)cases[i].threads : 1));
    carve_model_destroy(m);
  }
  CHECK(carve_model_create(&t, k_weights, NULL, &m) == CARVE_OK && carve_model_threads(m) == 2);
  carve_model_destroy(m);
  carve_model_options resolved;
  CHECK(carve_model_resolve_options(NULL, NULL, 0, &resolved) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_model_resolve_options(&t, &threads3, 1, &resolved) == CARVE_ERR_INVALID_ARGUMENT);  // create_with
  g_threads_for_calls = 0;
  CHECK(carve_model_resolve_options(&t, NULL, 1, &resolved) == CARVE_OK && resolved.threads == 1);
  CHECK(g_threads_for_calls == 0);  // one thread: not asked

  // create_with: every buffer checked; the same results; destroy frees nothing of the caller's.
  _Alignas(64) static unsigned char ctx[(sizeof(fake) + 63) / 64 * 64 + 64];
  _Alignas(64) static unsigned char arena[ARENA_BYTES + 64], scratch[SCRATCH_BYTES + 64], wide[64], heap[64];
  carve_model_buffers b = {ctx, sizeof(ctx), arena, ARENA_BYTES, scratch, SCRATCH_BYTES, NULL, 0, NULL, 0};
  const carve_model_buffers good = b;
  CHECK(carve_model_create_with(&d, k_weights, NULL, NULL, &m) == CARVE_ERR_INVALID_ARGUMENT && m == NULL);
  CHECK(carve_model_create_with(&d, k_weights, &threads3, &b, &m) == CARVE_ERR_INVALID_ARGUMENT);
  b.arena_bytes = ARENA_BYTES - 1;
  CHECK(carve_model_create_with(&d, k_weights, NULL, &b, &m) == CARVE_ERR_INVALID_ARGUMENT);
  b = good;
  b.scratch = scratch + 1;  // not 64-byte aligned
  CHECK(carve_model_create_with(&d, k_weights, NULL, &b, &m) == CARVE_ERR_INVALID_ARGUMENT);
  b = good;
  b.context_bytes = sizeof(fake) - 1;
  CHECK(carve_model_create_with(&d, k_weights, NULL, &b, &m) == CARVE_ERR_INVALID_ARGUMENT);
  bad = d;
  bad.backend_buffer_min = 1;  // a backend that takes memory of its own (xnnpack: the xnn_heap)
  b = good;
  CHECK(carve_model_create_with(&bad, k_weights, NULL, &b, &m) == CARVE_ERR_INVALID_ARGUMENT);
  b.backend = heap;
  b.backend_bytes = 13;  // init() fails: create_with returns its status, destroy undoes it
  g_destroys = 0;
  CHECK(carve_model_create_with(&bad, k_weights, NULL, &b, &m) == CARVE_ERR_BACKEND && m == NULL && g_destroys == 1);
  b = good;
  g_selects = 0;
  CHECK(carve_model_create_with(&d, k_weights, NULL, &b, &m) == CARVE_OK && m == (carve_model*)(void*)ctx);
  CHECK(g_selects == 1);
  CHECK(!m->owned && m->arena == (float*)(void*)arena && m->scratch_slots == 1 && carve_model_threads(m) == 1);
  g_layers = 0;
  check_detections(m);
  // An int8 model's callback needs the dequantization buffer, which create_with's models cannot allocate.
  carve_model_desc q8 = d;
  q8.layer_dequant_floats = 6;
  CHECK(carve_model_set_layer_callback(m, on_q8_layer, &g_q8_layers) == CARVE_OK);  // a float model: no buffer
  m->desc = &q8;
  CHECK(carve_model_set_layer_callback(m, on_q8_layer, &g_q8_layers) == CARVE_ERR_UNSUPPORTED);
  CHECK(carve_model_set_layer_callback(m, NULL, NULL) == CARVE_OK);
  m->desc = &d;
  carve_model_destroy(m);  // the buffers are static: freeing any of them would crash

  q8.run_network = q8_network;
  CHECK(carve_model_create(&q8, k_weights, NULL, &m) == CARVE_OK);
  CHECK(q8_network(m) == CARVE_OK && g_q8_layers == 0);  // no callback: nothing dequantized
  CHECK(carve_model_set_layer_callback(m, on_q8_layer, &g_q8_layers) == CARVE_OK && m->layer_f32 != NULL);
  CHECK(q8_network(m) == CARVE_OK && g_q8_layers == 1);
  carve_model_destroy(m);  // frees the buffer (ASan/valgrind runs of this test see a leak otherwise)

  // f16 weights: rebuilt (here one piece of halves, widened exactly) into create's allocation or create_with's
  // buffer (which is required); a table that reads past the payload fails create with its status.
  static const carve_weights_piece halves_piece = {CARVE_WEIGHTS_PIECE_HALVES, 0, 0, 4, 0, 0, 0, 0, 0, 0.0f, 0,
                                                   {0}, {0}};
  static const carve_weights_piece past_piece = {CARVE_WEIGHTS_PIECE_HALVES, 0, 0, 4, 1, 0, 0, 0, 0, 0.0f, 0,
                                                 {0}, {0}};
  carve_model_desc h = d;
  h.weights_dtype = CARVE_WEIGHTS_F16;
  h.wide_weight_bytes = 64;
  h.weight_payload_bytes = sizeof(k_halves);
  h.num_weight_pieces = 1;
  CHECK(carve_model_create(&h, k_halves, NULL, &m) == CARVE_ERR_INVALID_ARGUMENT && m == NULL);  // no table
  h.weight_pieces = &past_piece;
  CHECK(carve_model_create(&h, k_halves, NULL, &m) == CARVE_ERR_INVALID_ARGUMENT && m == NULL);
  h.weight_pieces = &halves_piece;
  CHECK(carve_model_create(&h, k_halves, NULL, &m) == CARVE_OK);
  CHECK(m->weights == m->wide_weights && memcmp(m->weights, k_weights, sizeof(k_weights)) == 0);
  carve_model_destroy(m);
  CHECK(carve_model_create_with(&h, k_halves, NULL, &b, &m) == CARVE_ERR_INVALID_ARGUMENT);  // no weights buffer
  b.weights = wide;
  b.weights_bytes = sizeof(wide);
  CHECK(carve_model_create_with(&h, k_halves, NULL, &b, &m) == CARVE_OK);
  CHECK(m->weights == (const float*)(void*)wide && memcmp(wide, k_weights, sizeof(k_weights)) == 0);
  carve_model_destroy(m);

  // classify: the k most probable classes, ties to the lower class id, k up to desc->topk.
  carve_model_desc c = d;
  c.task = CARVE_TASK_CLASSIFY;
  c.row_len = 0;
  c.topk = 5;
  c.store_detection = NULL;
  c.store_class = store_class;
  CHECK(carve_model_create(&c, k_weights, NULL, &m) == CARVE_OK);
  float x[3 * IN * IN] = {0};
  cls top[6];
  CHECK(carve_model_classify_tensor(m, x, top, 6) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_model_classify_tensor(m, x, top, 5) == CARVE_OK);
  int idx[5];
  CHECK(carve_topk_probs(k_probs, NCLS, 5, idx, NULL) == 5);
  for (int j = 0; j < 5; j++) {
    CHECK(top[j].class_id == idx[j] && top[j].prob == k_probs[idx[j]]);
  }
  CHECK(top[0].class_id == 1 && top[1].class_id == 3);  // the tie of 0.3: lower id first
  size_t n;
  CHECK(carve_model_detect_tensor(m, x, 0.25f, NULL, 0, &n) == CARVE_ERR_INVALID_ARGUMENT);  // not a detector
  carve_model_destroy(m);

  printf("runtime_model: create, create_with, f16 weights, detections, top-k, callbacks ok\n");
  return 0;
}
