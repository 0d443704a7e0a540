// carve runtime: YOLO26 end-to-end post-processing (see carve_post.h).
//
// Both top-k steps rank candidates through one 64-bit key per candidate:
//   key = (order_bits(score) << 32) | (2^32 - 1 - index)
// where order_bits maps a float to an unsigned integer with the same order
// (NaN -> 0, below everything). Keys are distinct, a larger key ranks higher,
// and ties in score fall to the lower index, so the ranking is a total order
// and any correct selection gives the same answer. Selection is a k-element
// min-heap over the n keys (O(n log k), in place), then a heap sort of the k
// survivors: no full sort of A * nc scores.

#include "carve_post.h"
#include "carve_post_shared.h"

#include <math.h>
#include <string.h>

// ---- Selection (keys: carve_post_shared.h) ----------------------------------- --------------------------------------------------------------

// keys[0 .. k) = the k largest of the distinct keys[0 .. n), in descending order.
static void select_top_keys(uint64_t* keys, size_t n, size_t k) {
  if (k == 0) {
    return;
  }
  // Invariant: keys[0 .. k) is a min-heap of the k largest keys seen so far.
  for (size_t i = k / 2; i-- > 0;) {
    carve_key_sift_down(keys, k, i);
  }
  for (size_t i = k; i < n; i++) {
    if (keys[i] > keys[0]) {
      keys[0] = keys[i];
      carve_key_sift_down(keys, k, 0);
    }
  }
  // Heap sort: each step moves the smallest remaining key to the back.
  for (size_t end = k - 1; end > 0; end--) {
    const uint64_t smallest = keys[0];
    keys[0] = keys[end];
    keys[end] = smallest;
    carve_key_sift_down(keys, end, 0);
  }
}

// ---- Anchors ----------------------------------------------------------------

// ---- End-to-end top-k -------------------------------------------------------

// Keys first (8-byte aligned), then the k' anchor indices of step 1.
static size_t e2e_key_count(size_t anchors, size_t nc, size_t kk) {
  const size_t flat = kk * nc;
  return flat > anchors ? flat : anchors;
}

size_t carve_e2e_scratch_bytes(size_t anchors, size_t nc, size_t k) {
  const size_t kk = k < anchors ? k : anchors;
  if (nc != 0 && kk > SIZE_MAX / nc / sizeof(uint64_t)) {
    return SIZE_MAX;  // cannot be allocated
  }
  _Static_assert(sizeof(uint64_t) == 8 && sizeof(uint32_t) == 4, "CARVE_E2E_SCRATCH_BYTES: key and index sizes");
  return e2e_key_count(anchors, nc, kk) * sizeof(uint64_t) + kk * sizeof(uint32_t);  // = CARVE_E2E_SCRATCH_BYTES
}

// ---- Keys over the pool -------------------------------------------------------
//
// Each key depends on its own candidate only and lands in its own slot, so the
// keys (and so the selections and rows) are the same bits whatever the split
// and the number of threads. A task is a few hundred anchors, or a few thousand
// scores, so that the pool's dispatch stays small next to the work.

// Anchors per step-1 task: 512 x 80 classes is ~40k compares (about 10 us), 17
// tasks for the 8400 anchors of a 640 detect head.
#define CARVE_E2E_ANCHORS_PER_TASK 512
// Class scores (one expf each) per step-2 task: 25 ranks at nc = 80, 12 tasks for
// k' = 300. On 2 threads 256 to 2100 anchors and 2048 or 4096 scores per task time
// the same (bench/e2e_post.c); 8192 (3 tasks) is slower, and 12 tasks leave room
// for more threads.
#define CARVE_E2E_SCORES_PER_TASK 2048

typedef struct e2e_keys_ctx {
  const carve_level* levels;
  size_t num_levels, nc;
  uint64_t* keys;
  const uint32_t* ori;  // step 2: the k' anchors of step 1, best first
} e2e_keys_ctx;

// Step 1: keys[a] for anchors [start, start + count), walked level by level.
static void anchor_keys_task(void* context, size_t start, size_t count) {
  const e2e_keys_ctx* ctx = context;
  const size_t nc = ctx->nc;
  size_t p;
  const carve_level* L = carve_locate_anchor(ctx->levels, ctx->num_levels, start, &p);
  for (size_t a = start; a < start + count; a++, p++) {
    while (p == L->h * L->w) {  // past this level: on to the next non-empty one (a < A)
      L++;
      p = 0;
    }
    // sigmoid is monotonic, so max_c sigmoid(x[c]) = sigmoid(max_c x[c]).
    ctx->keys[a] = carve_make_key(carve_sigmoid(carve_max_ignoring_nan(L->cls + p * L->cls_stride, nc)), a);
  }
}

// Step 2: keys[r * nc + c] for the ranks r in [start, start + count) and every class c.
static void rank_keys_task(void* context, size_t start, size_t count) {
  const e2e_keys_ctx* ctx = context;
  const size_t nc = ctx->nc;
  for (size_t r = start; r < start + count; r++) {
    size_t pixel;
    const carve_level* L = carve_locate_anchor(ctx->levels, ctx->num_levels, ctx->ori[r], &pixel);
    const float* cls = L->cls + pixel * L->cls_stride;
    for (size_t c = 0; c < nc; c++) {
      ctx->keys[r * nc + c] = carve_make_key(carve_sigmoid(cls[c]), r * nc + c);
    }
  }
}

carve_status carve_e2e_postprocess_task(const carve_level* levels, size_t num_levels, size_t nc,
                                        size_t extra_channels, size_t k, carve_e2e_task task,
                                        void* scratch, float* rows, size_t* num_rows, pthreadpool_t pool) {
  if (num_rows == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  *num_rows = 0;
  if (levels == NULL || scratch == NULL || rows == NULL || nc == 0 ||
      (uintptr_t)scratch % _Alignof(uint64_t) != 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  switch (task) {
    case CARVE_E2E_DETECT:
    case CARVE_E2E_SEGMENT:
      break;
    case CARVE_E2E_POSE:
      if (extra_channels % 3 != 0) {
        return CARVE_ERR_INVALID_ARGUMENT;
      }
      break;
    case CARVE_E2E_OBB:
      if (extra_channels != 1) {
        return CARVE_ERR_INVALID_ARGUMENT;
      }
      break;
    default:
      return CARVE_ERR_INVALID_ARGUMENT;
  }
  size_t anchors = 0;
  for (size_t l = 0; l < num_levels; l++) {
    const carve_level* L = &levels[l];
    if (L->box == NULL || L->cls == NULL || (extra_channels != 0 && L->extra == NULL)) {
      return CARVE_ERR_INVALID_ARGUMENT;
    }
    anchors += L->h * L->w;
  }
  const size_t kk = k < anchors ? k : anchors;
  if (anchors > UINT32_MAX || kk > UINT32_MAX / nc) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (kk == 0) {
    return CARVE_OK;  // k == 0 or no anchors: no rows
  }

  uint64_t* keys = scratch;                                     // (max(A, k' * nc))
  uint32_t* ori = (uint32_t*)(keys + e2e_key_count(anchors, nc, kk));  // (k') anchor indices

  // Step 1: the k' anchors with the best class score. The keys are built over
  // the pool; the selections stay serial (about a third of the serial time at
  // 640, but most of it is the heap's replacements and final sort, which split
  // chunks would not share out: each chunk would need its own k' best).
  e2e_keys_ctx ctx = {levels, num_levels, nc, keys, ori};
  carve_parallelize_1d_tile(pool, anchor_keys_task, &ctx, anchors, CARVE_E2E_ANCHORS_PER_TASK);
  select_top_keys(keys, anchors, kk);
  for (size_t r = 0; r < kk; r++) {
    ori[r] = (uint32_t)carve_key_index(keys[r]);
  }

  // Step 2: the k' best of the k' x nc (anchor rank, class) scores, the keys
  // again built over the pool, whole ranks per task.
  const size_t ranks_per_task = nc >= CARVE_E2E_SCORES_PER_TASK ? 1 : CARVE_E2E_SCORES_PER_TASK / nc;
  carve_parallelize_1d_tile(pool, rank_keys_task, &ctx, kk, ranks_per_task);
  select_top_keys(keys, kk * nc, kk);

  // Rows: decoded box, score, class, decoded extras of the chosen anchor.
  const size_t row_width = 6 + extra_channels;
  for (size_t i = 0; i < kk; i++) {
    const size_t flat = carve_key_index(keys[i]);
    const size_t c = flat % nc;
    size_t pixel;
    const carve_level* L = carve_locate_anchor(levels, num_levels, ori[flat / nc], &pixel);
    const float ax = (float)(pixel % L->w) + 0.5f;
    const float ay = (float)(pixel / L->w) + 0.5f;
    const float* ltrb = L->box + pixel * L->box_stride;
    const float* extra = extra_channels != 0 ? L->extra + pixel * L->extra_stride : NULL;
    float* row = rows + i * row_width;
    if (task == CARVE_E2E_OBB) {
      carve_decode_rbox(ltrb, extra[0], ax, ay, L->stride, row);
    } else {
      row[0] = (ax - ltrb[0]) * L->stride;
      row[1] = (ay - ltrb[1]) * L->stride;
      row[2] = (ax + ltrb[2]) * L->stride;
      row[3] = (ay + ltrb[3]) * L->stride;
    }
    row[4] = carve_sigmoid(L->cls[pixel * L->cls_stride + c]);
    row[5] = (float)c;
    carve_decode_extras(task, extra, extra_channels, ax, ay, L->stride, row + 6);
  }
  *num_rows = kk;
  return CARVE_OK;
}

carve_status carve_e2e_postprocess(const carve_level* levels, size_t num_levels, size_t nc,
                                   size_t extra_channels, size_t k, void* scratch, float* rows,
                                   size_t* num_rows, pthreadpool_t pool) {
  return carve_e2e_postprocess_task(levels, num_levels, nc, extra_channels, k, CARVE_E2E_DETECT,
                                    scratch, rows, num_rows, pool);
}

// ---- Classification ---------------------------------------------------------

carve_status carve_softmax(const float* x, size_t n, float* y) {
  if (x == NULL || y == NULL || n == 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  // m = max(x); a NaN anywhere makes m NaN and so every output NaN, as in torch.
  float m = x[0];
  for (size_t i = 0; i < n; i++) {
    if (x[i] != x[i]) {
      m = x[i];
      break;
    }
    if (x[i] > m) {
      m = x[i];
    }
  }
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    const float e = expf(x[i] - m);
    y[i] = e;
    sum += (double)e;
  }
  const float inv = 1.0f / (float)sum;
  for (size_t i = 0; i < n; i++) {
    y[i] *= inv;
  }
  return CARVE_OK;
}

// Restores the min-heap order (by make_key of p[heap[.]]) of heap[0 .. n) below i.
static void sift_down_index(const float* p, int* heap, size_t n, size_t i) {
  const int v = heap[i];
  const uint64_t vk = carve_make_key(p[v], (size_t)v);
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= n) {
      break;
    }
    uint64_t ck = carve_make_key(p[heap[child]], (size_t)heap[child]);
    if (child + 1 < n) {
      const uint64_t rk = carve_make_key(p[heap[child + 1]], (size_t)heap[child + 1]);
      if (rk < ck) {
        child++;
        ck = rk;
      }
    }
    if (ck >= vk) {
      break;
    }
    heap[i] = heap[child];
    i = child;
  }
  heap[i] = v;
}

size_t carve_topk_probs(const float* p, size_t n, size_t k, int* idx, float* val) {
  if (p == NULL || idx == NULL || n > (size_t)INT32_MAX) {
    return 0;
  }
  const size_t kk = k < n ? k : n;
  if (kk == 0) {
    return 0;
  }
  // idx[0 .. kk) is a min-heap of the kk best indices seen so far, then heap
  // sorted (as select_top_keys, on indices instead of keys).
  for (size_t i = 0; i < kk; i++) {
    idx[i] = (int)i;
  }
  for (size_t i = kk / 2; i-- > 0;) {
    sift_down_index(p, idx, kk, i);
  }
  for (size_t i = kk; i < n; i++) {
    if (carve_make_key(p[i], i) > carve_make_key(p[idx[0]], (size_t)idx[0])) {
      idx[0] = (int)i;
      sift_down_index(p, idx, kk, 0);
    }
  }
  for (size_t end = kk - 1; end > 0; end--) {
    const int smallest = idx[0];
    idx[0] = idx[end];
    idx[end] = smallest;
    sift_down_index(p, idx, end, 0);
  }
  if (val != NULL) {
    for (size_t i = 0; i < kk; i++) {
      val[i] = p[idx[i]];
    }
  }
  return kk;
}

// ---- Confidence filter ------------------------------------------------------

size_t carve_filter_conf(float* rows, size_t n, size_t row_stride, float conf) {
  if (rows == NULL) {
    return 0;
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    const float* row = rows + i * row_stride;
    if (row[4] > conf) {
      if (kept != i) {
        memmove(rows + kept * row_stride, row, row_stride * sizeof(float));
      }
      kept++;
    }
  }
  return kept;
}
