// carve runtime: YOLO26 one-to-many head + non-maximum suppression (see carve_nms.h).
//
// Every value the suppression compares is computed in float, one IEEE operation at
// a time in PyTorch's order (products stored through a volatile so that no compiler
// contracts them into an FMA, whatever its -ffp-contract), so that the decisions
// are Ultralytics' own wherever carve's head outputs equal PyTorch's.
//
// Ranking: one 64-bit key per candidate, (order_bits(score) << 32) | (2^32 - 1 -
// anchor), as carve_post.c: a larger key ranks higher, equal scores fall to the
// lower anchor. The keys of the candidates are heap-sorted in place (no allocation,
// no qsort, which may allocate).

#include "carve_nms.h"
#include "carve_post_shared.h"

#include <math.h>
#include <string.h>

// ---- Sorting (keys: carve_post_shared.h, the order of carve_post.c) ----------------

// keys[0 .. n) in descending order (heap sort: a min-heap, its root moved to the back).
static void sort_keys_descending(uint64_t* keys, size_t n) {
  if (n < 2) {
    return;
  }
  for (size_t i = n / 2; i-- > 0;) {
    carve_key_sift_down(keys, n, i);
  }
  for (size_t end = n - 1; end > 0; end--) {
    const uint64_t smallest = keys[0];
    keys[0] = keys[end];
    keys[end] = smallest;
    carve_key_sift_down(keys, end, 0);
  }
}

// ---- Anchors ------------------------------------------------------------------

// max over c of x[c], ignoring NaN (carve_max_ignoring_nan); -inf and *any = 0 when every
// x[c] is NaN.
static float max_logit(const float* x, size_t n, int* any) {
  const float m = carve_max_ignoring_nan(x, n);
  *any = m == m;
  return m == m ? m : -INFINITY;
}

// The class non_max_suppression gives an anchor: cls.max(1), the first class whose
// sigmoid is the largest sigmoid, `score` (= carve_sigmoid(max logit): sigmoid is
// monotonic, but saturates, so a smaller logit before the largest can tie with it).
static size_t best_class(const float* cls, size_t nc, float m, float score) {
  size_t first = 0;
  while (first < nc && !(cls[first] == m)) {
    first++;
  }
  for (size_t c = 0; c < first; c++) {
    if (carve_sigmoid(cls[c]) == score) {
      return c;
    }
  }
  return first;
}

// ---- Candidates over the pool ---------------------------------------------------

// Anchors per task: 512 x 80 classes is ~40k compares (carve_post.c's step-1 tile).
#define CARVE_NMS_ANCHORS_PER_TASK 512

typedef struct nms_keys_ctx {
  const carve_level* levels;
  size_t num_levels, nc;
  float conf;
  uint64_t* keys;
} nms_keys_ctx;

// keys[a] for anchors [start, start + count): carve_make_key(best score, a) for a
// candidate (best score > conf), else 0. Each key lands in its own slot: the same
// bits for any split.
static void candidate_keys_task(void* context, size_t start, size_t count) {
  const nms_keys_ctx* ctx = context;
  size_t p;
  const carve_level* L = carve_locate_anchor(ctx->levels, ctx->num_levels, start, &p);
  for (size_t a = start; a < start + count; a++, p++) {
    while (p == L->h * L->w) {  // past this level: on to the next non-empty one (a < A)
      L++;
      p = 0;
    }
    int any;
    const float m = max_logit(L->cls + p * L->cls_stride, ctx->nc, &any);
    const float score = carve_sigmoid(m);
    ctx->keys[a] = (any && score > ctx->conf) ? carve_make_key(score, a) : 0;
  }
}

// ---- Decoding (the head's _inference, on one anchor) ------------------------------

// dist2bbox(xywh=True) * stride, then xywh2xyxy, in PyTorch's order: x1y1 = anchor -
// lt, x2y2 = anchor + rb, c = (x1y1 + x2y2) / 2, wh = x2y2 - x1y1, both times the
// stride, then c -/+ wh / 2.
static void decode_xyxy(const float* ltrb, float ax, float ay, float s, float* out) {
  const float x1 = ax - ltrb[0], y1 = ay - ltrb[1];
  const float x2 = ax + ltrb[2], y2 = ay + ltrb[3];
  volatile float cx = (x1 + x2) / 2.0f * s, cy = (y1 + y2) / 2.0f * s;
  volatile float w = (x2 - x1) * s, h = (y2 - y1) * s;
  const float hw = w / 2.0f, hh = h / 2.0f;
  out[0] = cx - hw;
  out[1] = cy - hh;
  out[2] = cx + hw;
  out[3] = cy + hh;
}

// ---- Overlap ------------------------------------------------------------------------

// torchvision's nms kernel (CPU): the IoU of two xyxy boxes with their areas, in float:
// inter = max(0, min(x2) - max(x1)) * max(0, min(y2) - max(y1)),
// iou = inter / (area_a + area_b - inter). a is the kept (better) box.
static float box_iou(const float* a, const float* b) {
  const float xx1 = a[0] < b[0] ? b[0] : a[0];
  const float yy1 = a[1] < b[1] ? b[1] : a[1];
  const float xx2 = b[2] < a[2] ? b[2] : a[2];
  const float yy2 = b[3] < a[3] ? b[3] : a[3];
  const float dw = xx2 - xx1, dh = yy2 - yy1;
  const float w = 0.0f < dw ? dw : 0.0f;
  const float h = 0.0f < dh ? dh : 0.0f;
  volatile float inter = w * h;
  return inter / (a[4] + b[4] - inter);
}

// An OBB candidate for batch_probiou: its (class-offset) centre and the Gaussian's
// covariance [[a, c], [c, b]] (_get_covariance_matrix: a = w^2 / 12, b = h^2 / 12,
// rotated by the angle).
typedef struct probiou_box {
  float x, y, a, b, c;
} probiou_box;
_Static_assert(sizeof(probiou_box) == 5 * sizeof(float), "an OBB candidate takes the five floats of its scratch slot");

static probiou_box probiou_prepare(float x, float y, float w, float h, float theta) {
  volatile float ww = w * w, hh = h * h;
  const float a = ww / 12.0f + 0.0f, b = hh / 12.0f + 0.0f;
  const float cs = cosf(theta), sn = sinf(theta);
  volatile float cos2 = cs * cs, sin2 = sn * sn;
  volatile float acos2 = a * cos2, bsin2 = b * sin2, asin2 = a * sin2, bcos2 = b * cos2;
  volatile float amb_cos = (a - b) * cs;
  probiou_box r = {x, y, acos2 + bsin2, asin2 + bcos2, amb_cos * sn};
  return r;
}

// batch_probiou(obb1 = p, obb2 = q) in float, term by term as ultralytics.utils.metrics
// computes it (eps = 1e-7): 1 - sqrt(1 - exp(-clamp(t1 + t2 + t3, eps, 100)) + eps).
static float probiou(const probiou_box* p, const probiou_box* q) {
  const float eps = 1e-7f;
  const float sa = p->a + q->a, sb = p->b + q->b, sc = p->c + q->c;
  const float dy = p->y - q->y, dx = p->x - q->x;
  volatile float dy2 = dy * dy, dx2 = dx * dx, sc2 = sc * sc;
  volatile float sab = sa * sb, ady = sa * dy2, bdx = sb * dx2;
  const float det = sab - sc2;
  const float den = det + eps;
  const float t1 = (ady + bdx) / den * 0.25f;
  volatile float cdx = sc * (q->x - p->x);
  volatile float cdxdy = cdx * (p->y - q->y);
  const float t2 = cdxdy / den * 0.5f;
  volatile float pab = p->a * p->b, pcc = p->c * p->c, qab = q->a * q->b, qcc = q->c * q->c;
  const float d1 = pab - pcc, d2 = qab - qcc;
  volatile float dd = (d1 > 0.0f ? d1 : (d1 == d1 ? 0.0f : d1)) * (d2 > 0.0f ? d2 : (d2 == d2 ? 0.0f : d2));
  volatile float four = 4.0f * sqrtf(dd);
  const float t3 = logf(det / (four + eps) + eps) * 0.5f;
  float bd = t1 + t2 + t3;
  bd = bd < eps ? eps : (bd > 100.0f ? 100.0f : bd);  // clamp(eps, 100); NaN stays NaN
  const float hd = sqrtf(1.0f - expf(-bd) + eps);
  return 1.0f - hd;
}

// ---- Post-processing ----------------------------------------------------------------

size_t carve_nms_scratch_bytes(size_t anchors) {
  if (anchors > SIZE_MAX / CARVE_NMS_BYTES_PER_ANCHOR) {
    return SIZE_MAX;  // cannot be allocated
  }
  _Static_assert(sizeof(uint64_t) + 5 * sizeof(float) == CARVE_NMS_BYTES_PER_ANCHOR,
                 "CARVE_NMS_SCRATCH_BYTES: key + five floats");
  return CARVE_NMS_SCRATCH_BYTES(anchors);
}

static int task_ok(carve_e2e_task task, size_t extra_channels) {
  switch (task) {
    case CARVE_E2E_DETECT:
    case CARVE_E2E_SEGMENT:
      return 1;
    case CARVE_E2E_POSE:
      return extra_channels % 3 == 0;
    case CARVE_E2E_OBB:
      return extra_channels == 1;
    default:
      return 0;
  }
}

carve_status carve_nms_postprocess(const carve_level* levels, size_t num_levels, size_t nc,
                                   size_t extra_channels, carve_e2e_task task,
                                   const carve_nms_params* params, void* scratch, float* rows,
                                   size_t* num_rows, pthreadpool_t pool) {
  if (num_rows == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  *num_rows = 0;
  if (levels == NULL || params == NULL || scratch == NULL || rows == NULL || nc == 0 ||
      (uintptr_t)scratch % _Alignof(uint64_t) != 0 || !(params->iou >= 0.0 && params->iou <= 1.0) ||
      !task_ok(task, extra_channels)) {
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
  if (anchors > UINT32_MAX) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (anchors == 0 || params->max_det == 0) {
    return CARVE_OK;
  }

  uint64_t* keys = scratch;                           // (A) candidate keys
  float* boxes = (float*)(void*)(keys + anchors);     // (A, 5): kept boxes (xyxy + area), or
  probiou_box* cands = (probiou_box*)(void*)boxes;    // (A): the OBB candidates

  // 1. Candidates: best class score > conf, keyed over the pool; then compacted and
  //    sorted, best first, and cut to max_nms.
  nms_keys_ctx ctx = {levels, num_levels, nc, params->conf, keys};
  carve_parallelize_1d_tile(pool, candidate_keys_task, &ctx, anchors, CARVE_NMS_ANCHORS_PER_TASK);
  size_t n = 0;
  for (size_t a = 0; a < anchors; a++) {
    if (keys[a] != 0) {
      keys[n++] = keys[a];
    }
  }
  sort_keys_descending(keys, n);
  if (n > CARVE_NMS_MAX_NMS) {
    n = CARVE_NMS_MAX_NMS;
  }

  // 2. Suppression, best first, until max_det rows are kept.
  const size_t row_width = 6 + extra_channels;
  const float iou_f = (float)params->iou;  // fast_nms compares in float (a float tensor against the scalar)
  size_t kept = 0;
  for (size_t i = 0; i < n && kept < params->max_det; i++) {
    const size_t a = carve_key_index(keys[i]);
    size_t pixel;
    const carve_level* L = carve_locate_anchor(levels, num_levels, a, &pixel);
    const float ax = (float)(pixel % L->w) + 0.5f;
    const float ay = (float)(pixel / L->w) + 0.5f;
    const float* ltrb = L->box + pixel * L->box_stride;
    const float* cls = L->cls + pixel * L->cls_stride;
    const float* extra = extra_channels != 0 ? L->extra + pixel * L->extra_stride : NULL;
    int any;
    const float m = max_logit(cls, nc, &any);
    const float score = carve_sigmoid(m);
    const size_t c = best_class(cls, nc, m, score);
    // c = x[:, 5:6] * max_wh: the class as a float times the offset (exact)
    const float offset = params->agnostic ? 0.0f : (float)c * (float)CARVE_NMS_MAX_WH;

    float box[4];
    int suppressed = 0;
    if (task == CARVE_E2E_OBB) {
      carve_decode_rbox(ltrb, extra[0], ax, ay, L->stride, box);
      cands[i] = probiou_prepare(box[0] + offset, box[1] + offset, box[2], box[3], extra[0]);
      // fast_nms: removed when any better candidate (kept or not) overlaps by more than iou
      for (size_t j = 0; j < i && !suppressed; j++) {
        suppressed = probiou(&cands[j], &cands[i]) > iou_f;
      }
    } else {
      decode_xyxy(ltrb, ax, ay, L->stride, box);
      float* mine = boxes + 5 * kept;
      mine[0] = box[0] + offset;
      mine[1] = box[1] + offset;
      mine[2] = box[2] + offset;
      mine[3] = box[3] + offset;
      volatile float area = (mine[2] - mine[0]) * (mine[3] - mine[1]);
      mine[4] = area;
      // torchvision: removed by a kept box whose IoU (float) is > iou (double)
      for (size_t j = 0; j < kept && !suppressed; j++) {
        suppressed = (double)box_iou(boxes + 5 * j, mine) > params->iou;
      }
    }
    if (suppressed) {
      continue;
    }
    float* row = rows + kept * row_width;
    memcpy(row, box, sizeof box);
    row[4] = score;
    row[5] = (float)c;
    if (task == CARVE_E2E_OBB) {
      row[6] = extra[0];
    } else {
      carve_decode_extras(task, extra, extra_channels, ax, ay, L->stride, row + 6);
    }
    kept++;
  }
  *num_rows = kept;
  return CARVE_OK;
}
