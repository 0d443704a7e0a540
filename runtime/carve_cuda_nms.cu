// carve runtime, CUDA: the one-to-many head + non-maximum suppression (see carve_cuda_nms.h).
//
// The formulas are carve_nms.c's, written with __fmul_rn / __fadd_rn where a product
// meets a sum, so that nvcc contracts nothing into an FMA: on the same head outputs the
// decisions are the CPU's, and under the host emulation the rows are its bits.
//
// Steps (every launch checked; nothing allocated; nothing waits for the host):
//   scores kernel    s[a] = best class score of anchor a, NaN when not a candidate;
//   carve_cu_topk_numbers_batch  order = the candidates (s a number), at most max_nms, best first, and
//                    their count: one launch, a block per image;
//   suppress kernel  one block walks the order 256 candidates at a time: each thread decodes one
//                    (its class offset box, or its Gaussian for obb) and tests it against the
//                    kept boxes of earlier chunks (greedy) or every earlier candidate (obb: fast
//                    NMS) and, greedy, the chunk's better candidates (a bit each); thread 0 then
//                    walks the chunk's bits and appends the survivors' anchors to the kept list;
//                    *num_rows = kept;
//   rows kernel      row r = the r-th kept anchor decoded, for r < *num_rows (a gather).
// The walk is sequential by nature (a box's fate depends on every better one); what is
// parallel is the decoding and the comparisons. It visits the candidates only (scores > conf),
// and stops at max_det kept. A batch (carve_cu_nms_postprocess_batch) runs each step once for
// its images: image b's scores, order, boxes and kept anchors in its own slice of the scratch,
// the walk one block per image, so every image's rows are those it gets alone.

#include "carve_cuda_impl.h"
#include "carve_cuda_nms.h"

#define CARVE_CU_NMS_MAX_LEVELS 8
#define CARVE_CU_NMS_THREADS 256  // the suppress kernel's block

// The kernels are templates over the level type Lv: carve_level (float32 maps) or carve_cu_level_h (an
// fp16 package's half maps), every map value read through carve_cu_ld (widened to float32: the plain load
// for float), then the same float32 arithmetic: on halves, the result of float32 copies, bit for bit.

// The levels by value (kernel arguments): anchors of level l are [start[l], start[l + 1]).
template <typename Lv>
struct nms_levels {
  Lv lv[CARVE_CU_NMS_MAX_LEVELS];
  size_t start[CARVE_CU_NMS_MAX_LEVELS + 1];
  uint32_t num;
};

// Anchor a of image b: its level, its pixel in that level's grid (the anchor point), and *at, the pixel's index
// in the level's views (image b's maps follow image b - 1's: b h w pixels on).
template <typename Lv>
static __device__ __forceinline__ const Lv* nms_locate(const nms_levels<Lv>* L, size_t b, size_t a, size_t* pixel,
                                                       size_t* at) {
  uint32_t l = 0;
  while (l + 1 < L->num && a >= L->start[l + 1]) {
    l++;
  }
  const Lv* lv = &L->lv[l];
  *pixel = a - L->start[l];
  *at = b * lv->h * lv->w + *pixel;
  return lv;
}

// ---- Scores and classes (carve_nms.c: max_logit, best_class) ------------------------------------

// max over c of x[c], ignoring NaN; *any = 0 when every x[c] is NaN.
template <typename T>
static __device__ __forceinline__ float nms_max_logit(const T* x, size_t n, int* any) {
  float m = -INFINITY;
  int seen = 0;
  for (size_t c = 0; c < n; c++) {
    const float v = carve_cu_ld(x, c);
    if (v == v) {
      seen = 1;
      m = v > m ? v : m;
    }
  }
  *any = seen;
  return m;
}

// The first class whose sigmoid is `score` = sigmoid(m) (cls.max(1) of non_max_suppression).
template <typename T>
static __device__ __forceinline__ size_t nms_best_class(const T* cls, size_t nc, float m, float score) {
  size_t first = 0;
  while (first < nc && !(carve_cu_ld(cls, first) == m)) {
    first++;
  }
  for (size_t c = 0; c < first; c++) {
    if (carve_cu_sigmoid(carve_cu_ld(cls, c)) == score) {
      return c;
    }
  }
  return first;
}

// ---- Decoding (carve_nms.c: decode_xyxy, decode_rbox) -------------------------------------------

static __device__ __forceinline__ void nms_decode_xyxy(const float* ltrb, float ax, float ay, float s, float* out) {
  const float x1 = ax - ltrb[0], y1 = ay - ltrb[1];
  const float x2 = ax + ltrb[2], y2 = ay + ltrb[3];
  const float cx = __fmul_rn((x1 + x2) / 2.0f, s), cy = __fmul_rn((y1 + y2) / 2.0f, s);
  const float w = __fmul_rn(x2 - x1, s), h = __fmul_rn(y2 - y1, s);
  const float hw = w / 2.0f, hh = h / 2.0f;
  out[0] = cx - hw;
  out[1] = cy - hh;
  out[2] = cx + hw;
  out[3] = cy + hh;
}

static __device__ __forceinline__ void nms_decode_rbox(const float* ltrb, float theta, float ax, float ay, float s,
                                                       float* out) {
  const float xf = (ltrb[2] - ltrb[0]) / 2.0f;
  const float yf = (ltrb[3] - ltrb[1]) / 2.0f;
  const float c = cosf(theta), sn = sinf(theta);
  const float x = __fsub_rn(__fmul_rn(xf, c), __fmul_rn(yf, sn));
  const float y = __fadd_rn(__fmul_rn(xf, sn), __fmul_rn(yf, c));
  out[0] = __fmul_rn(x + ax, s);
  out[1] = __fmul_rn(y + ay, s);
  out[2] = __fmul_rn(ltrb[0] + ltrb[2], s);
  out[3] = __fmul_rn(ltrb[1] + ltrb[3], s);
}

// ---- Overlap (carve_nms.c: box_iou, probiou_prepare, probiou) -------------------------------------

// a, b: offset x1, y1, x2, y2, area; a the kept (better) box.
static __device__ __forceinline__ float nms_box_iou(const float* a, const float* b) {
  const float xx1 = a[0] < b[0] ? b[0] : a[0];
  const float yy1 = a[1] < b[1] ? b[1] : a[1];
  const float xx2 = b[2] < a[2] ? b[2] : a[2];
  const float yy2 = b[3] < a[3] ? b[3] : a[3];
  const float dw = xx2 - xx1, dh = yy2 - yy1;
  const float w = 0.0f < dw ? dw : 0.0f;
  const float h = 0.0f < dh ? dh : 0.0f;
  const float inter = __fmul_rn(w, h);
  return inter / (a[4] + b[4] - inter);
}

// x, y (class-offset centre), a, b, c: the covariance of the box's Gaussian.
static __device__ __forceinline__ void nms_probiou_prepare(float x, float y, float w, float h, float theta,
                                                           float* out) {
  const float a = __fmul_rn(w, w) / 12.0f + 0.0f, b = __fmul_rn(h, h) / 12.0f + 0.0f;
  const float cs = cosf(theta), sn = sinf(theta);
  const float cos2 = __fmul_rn(cs, cs), sin2 = __fmul_rn(sn, sn);
  out[0] = x;
  out[1] = y;
  out[2] = __fadd_rn(__fmul_rn(a, cos2), __fmul_rn(b, sin2));
  out[3] = __fadd_rn(__fmul_rn(a, sin2), __fmul_rn(b, cos2));
  out[4] = __fmul_rn(__fmul_rn(a - b, cs), sn);
}

// batch_probiou(obb1 = p, obb2 = q), term by term (eps = 1e-7).
static __device__ __forceinline__ float nms_probiou(const float* p, const float* q) {
  const float eps = 1e-7f;
  const float sa = p[2] + q[2], sb = p[3] + q[3], sc = p[4] + q[4];
  const float dy = p[1] - q[1], dx = p[0] - q[0];
  const float det = __fsub_rn(__fmul_rn(sa, sb), __fmul_rn(sc, sc));
  const float den = det + eps;
  const float t1 = __fmul_rn(__fadd_rn(__fmul_rn(sa, __fmul_rn(dy, dy)), __fmul_rn(sb, __fmul_rn(dx, dx))) / den, 0.25f);
  const float t2 = __fmul_rn(__fmul_rn(__fmul_rn(sc, q[0] - p[0]), p[1] - q[1]) / den, 0.5f);
  const float d1 = __fsub_rn(__fmul_rn(p[2], p[3]), __fmul_rn(p[4], p[4]));
  const float d2 = __fsub_rn(__fmul_rn(q[2], q[3]), __fmul_rn(q[4], q[4]));
  const float c1 = d1 > 0.0f ? d1 : (d1 == d1 ? 0.0f : d1), c2 = d2 > 0.0f ? d2 : (d2 == d2 ? 0.0f : d2);
  const float four = __fmul_rn(4.0f, sqrtf(__fmul_rn(c1, c2)));
  const float t3 = __fmul_rn(logf(det / (four + eps) + eps), 0.5f);
  float bd = __fadd_rn(__fadd_rn(t1, t2), t3);
  bd = bd < eps ? eps : (bd > 100.0f ? 100.0f : bd);
  const float hd = sqrtf(1.0f - expf(-bd) + eps);
  return 1.0f - hd;
}

// ---- Kernels ---------------------------------------------------------------------------------------

// s[b A + a] = sigmoid(max logit) of image b's anchor a if it is > *conf (and some logit is a number), else NaN.
template <typename Lv>
__global__ void carve_cu_nms_scores_kernel(nms_levels<Lv> L, size_t anchors, size_t batch, size_t nc,
                                           const float* __restrict__ conf, float* __restrict__ s) {
  CARVE_CU_KERNEL_ENTRY();
  const float thr = *conf;
  CARVE_CU_FOR(e, batch * anchors) {
    size_t pixel, at;
    const Lv* lv = nms_locate(&L, e / anchors, e % anchors, &pixel, &at);
    int any;
    const float score = carve_cu_sigmoid(nms_max_logit(lv->cls + at * lv->cls_stride, nc, &any));
    s[e] = (any && score > thr) ? score : NAN;
  }
}

// Candidate anchor a of image b: its box for the suppression, the offset xyxy + area (greedy), or the offset
// centre and covariance (obb); its box as the row has it into row4 when not NULL.
template <typename Lv>
static __device__ void nms_candidate(const nms_levels<Lv>* L, size_t b, size_t a, size_t nc, int task, int agnostic,
                                     float* cand, float* row4, float* score_out, size_t* class_out) {
  size_t pixel, at;
  const Lv* lv = nms_locate(L, b, a, &pixel, &at);
  const float ax = (float)(pixel % lv->w) + 0.5f;
  const float ay = (float)(pixel / lv->w) + 0.5f;
  const auto* raw = lv->box + at * lv->box_stride;
  const float ltrb[4] = {carve_cu_ld(raw, 0), carve_cu_ld(raw, 1), carve_cu_ld(raw, 2), carve_cu_ld(raw, 3)};
  const auto* cls = lv->cls + at * lv->cls_stride;
  int any;
  const float m = nms_max_logit(cls, nc, &any);
  const float score = carve_cu_sigmoid(m);
  const size_t c = nms_best_class(cls, nc, m, score);
  const float offset = agnostic ? 0.0f : __fmul_rn((float)c, (float)CARVE_NMS_MAX_WH);
  float box[4];
  if (task == CARVE_E2E_OBB) {
    const float theta = carve_cu_ld(lv->extra, at * lv->extra_stride);
    nms_decode_rbox(ltrb, theta, ax, ay, lv->stride, box);
    nms_probiou_prepare(box[0] + offset, box[1] + offset, box[2], box[3], theta, cand);
  } else {
    nms_decode_xyxy(ltrb, ax, ay, lv->stride, box);
    for (int k = 0; k < 4; k++) {
      cand[k] = box[k] + offset;
    }
    cand[4] = __fmul_rn(cand[2] - cand[0], cand[3] - cand[1]);
  }
  if (row4 != NULL) {
    for (int k = 0; k < 4; k++) {
      row4[k] = box[k];
    }
  }
  *score_out = score;
  *class_out = c;
}

// The walk over order[0 .. cands[b]) of image b = blockIdx.x (one block per image): keep[] the kept anchors,
// *num_rows their count. boxes: (n, 5) floats: the kept boxes (greedy, compact) or every visited candidate (obb).
// order, boxes, keep and num_rows point at image 0's; image b's follow at b n, b n 5, b max_det, b.
// The candidates go in chunks of CARVE_CU_NMS_THREADS, best first, each chunk in three phases:
//   1. thread t decodes the chunk's candidate t (its box, class and offset: nms_candidate) into shared memory;
//   2. thread t decides what it can alone: whether a box kept in an earlier chunk overlaps its candidate
//      (greedy), or any earlier candidate, kept or not (obb: fast NMS, whose fate of a box is known here), and
//      (greedy) which of the chunk's better candidates overlap it, a bit each;
//   3. thread 0 walks the chunk in order: candidate t is kept unless phase 2 suppressed it or (greedy) one of the
//      chunk's candidates kept before it overlaps it; it stops at max_det kept.
// So the block waits on one thread only for phase 3's bit tests, not for a decode per candidate (the class scores
// read twice) and three barriers, as a walk candidate by candidate would: the same decisions in the same order.
template <typename Lv>
__global__ void __launch_bounds__(CARVE_CU_NMS_THREADS)
carve_cu_nms_suppress_kernel(nms_levels<Lv> L, size_t nc, int task, int agnostic, double iou,
                             const int32_t* __restrict__ order, const uint32_t* __restrict__ cands, uint32_t n,
                             uint32_t max_det, float* __restrict__ boxes, int32_t* __restrict__ keep,
                             uint32_t* __restrict__ num_rows) {
  CARVE_CU_KERNEL_ENTRY();
  constexpr unsigned NT = CARVE_CU_NMS_THREADS, WORDS = NT / 32;
  const size_t b = blockIdx.x;
  order += b * n;
  boxes += b * n * 5;
  keep += b * max_det;
  num_rows += b;
  n = cands[b] < n ? cands[b] : n;  // the candidates, best first
  __shared__ float chunk[NT][5];          // the chunk's boxes (phase 1)
  __shared__ uint32_t over[NT][WORDS];    // greedy: bit u of over[t]: the chunk's candidate u < t overlaps t
  __shared__ int suppressed[NT];          // phase 2's verdict
  __shared__ uint32_t kept_shared;
  const unsigned t = threadIdx.x;
  const bool obb = task == CARVE_E2E_OBB;
  const float iou_f = (float)iou;  // fast_nms compares in float
  uint32_t kept = 0;               // the same in every thread (read from kept_shared after each chunk)
  for (uint32_t i0 = 0; i0 < n && kept < max_det; i0 += NT) {
    const uint32_t m = n - i0 < NT ? n - i0 : NT, i = i0 + t;
    if (t < m) {  // 1.
      float score;
      size_t c;
      nms_candidate(&L, b, (size_t)order[i], nc, task, agnostic, chunk[t], NULL, &score, &c);
      if (obb) {
        for (int k = 0; k < 5; k++) {
          boxes[(size_t)i * 5 + k] = chunk[t][k];  // read in the later chunks' phase 2
        }
      }
    }
    __syncthreads();
    if (t < m) {  // 2.
      int sup = 0;
      if (obb) {  // any better candidate, kept or not
        for (uint32_t j = 0; j < i0 && !sup; j++) {
          sup = nms_probiou(boxes + (size_t)j * 5, chunk[t]) > iou_f;
        }
        for (uint32_t u = 0; u < t && !sup; u++) {
          sup = nms_probiou(chunk[u], chunk[t]) > iou_f;
        }
      } else {  // any box kept in an earlier chunk; the chunk's better candidates as bits
        for (uint32_t j = 0; j < kept && !sup; j++) {
          sup = (double)nms_box_iou(boxes + (size_t)j * 5, chunk[t]) > iou;
        }
        for (unsigned w = 0; w < WORDS; w++) {
          uint32_t bits = 0;
          for (unsigned u = 32 * w; u < 32 * w + 32 && u < t && !sup; u++) {
            bits |= (uint32_t)((double)nms_box_iou(chunk[u], chunk[t]) > iou) << (u % 32);
          }
          over[t][w] = bits;
        }
      }
      suppressed[t] = sup;
    }
    __syncthreads();
    if (t == 0) {  // 3.
      uint32_t chunk_kept[WORDS] = {0};
      for (uint32_t u = 0; u < m && kept < max_det; u++) {
        int sup = suppressed[u];
        for (unsigned w = 0; !obb && !sup && w <= u / 32; w++) {
          sup = (over[u][w] & chunk_kept[w]) != 0;
        }
        if (!sup) {
          chunk_kept[u / 32] |= 1u << (u % 32);
          keep[kept] = order[i0 + u];
          if (!obb) {
            for (int k = 0; k < 5; k++) {
              boxes[(size_t)kept * 5 + k] = chunk[u][k];
            }
          }
          kept++;
        }
      }
      kept_shared = kept;
    }
    __syncthreads();  // phase 3's kept boxes and count; chunk[] free for the next chunk
    kept = kept_shared;
  }
  if (t == 0) {
    *num_rows = kept;
  }
}

// Row r < num_rows[b] of image b from its r-th kept anchor: box, score, class, extras (carve_nms.c's rows);
// image b's cap kept anchors and rows follow image b - 1's.
template <typename Lv>
__global__ void carve_cu_nms_rows_kernel(nms_levels<Lv> L, size_t nc, size_t extra_channels, int task, int agnostic,
                                         const int32_t* __restrict__ keep, const uint32_t* __restrict__ num_rows,
                                         size_t cap, size_t batch, float* __restrict__ rows) {
  CARVE_CU_KERNEL_ENTRY();
  const size_t width = 6 + extra_channels;
  CARVE_CU_FOR(e, batch * cap) {
    const size_t b = e / cap, r = e % cap;
    if (r >= num_rows[b]) {
      continue;
    }
    const size_t a = (size_t)keep[e];
    float cand[5], score;
    size_t c;
    float* row = rows + e * width;
    nms_candidate(&L, b, a, nc, task, agnostic, cand, row, &score, &c);
    row[4] = score;
    row[5] = (float)c;
    size_t pixel, at;
    const Lv* lv = nms_locate(&L, b, a, &pixel, &at);
    const auto* extra = extra_channels != 0 ? lv->extra + at * lv->extra_stride : NULL;
    if (task == CARVE_E2E_POSE) {
      const float ax = (float)(pixel % lv->w) + 0.5f;
      const float ay = (float)(pixel / lv->w) + 0.5f;
      for (size_t j = 0; j + 3 <= extra_channels; j += 3) {
        row[6 + j] = __fmul_rn(carve_cu_ld(extra, j) + ax, lv->stride);
        row[6 + j + 1] = __fmul_rn(carve_cu_ld(extra, j + 1) + ay, lv->stride);
        row[6 + j + 2] = carve_cu_sigmoid(carve_cu_ld(extra, j + 2));
      }
    } else {
      for (size_t j = 0; j < extra_channels; j++) {
        row[6 + j] = carve_cu_ld(extra, j);
      }
    }
  }
}

// *conf = value.
__global__ void carve_cu_nms_set_conf_kernel(float* conf, float value) {
  CARVE_CU_KERNEL_ENTRY();
  *conf = value;
}

// ---- Host ------------------------------------------------------------------------------------------

extern "C" carve_status carve_cu_nms_set_conf(const carve_cu_ctx* ctx, float* conf, float value) {
  if (ctx == NULL || conf == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  CARVE_LAUNCH(carve_cu_nms_set_conf_kernel, 1, 1, ctx->stream, conf, value);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

static size_t nms_align8(size_t v) { return (v + 7) & ~(size_t)7; }

// Scratch: every image's anchor scores (batch, A), order (batch, k'), boxes (batch, k', 5), kept anchors
// (batch, min(max_det, k')), candidate counts (batch), then carve_cu_topk_numbers_batch's scratch;
// k' = min(A, CARVE_NMS_MAX_NMS).
extern "C" size_t carve_cu_nms_batch_scratch_bytes(size_t anchors, size_t max_det, size_t batch) {
  if (batch == 0 || anchors > (size_t)INT32_MAX) {
    return SIZE_MAX;
  }
  if (anchors == 0) {
    return 0;
  }
  const size_t kk = anchors < CARVE_NMS_MAX_NMS ? anchors : CARVE_NMS_MAX_NMS;
  const size_t kept = max_det < kk ? max_det : kk;
  const size_t per_image = anchors * sizeof(float) + kk * sizeof(int32_t) + kk * 5 * sizeof(float) +
                           kept * sizeof(int32_t) + sizeof(uint32_t);
  const size_t topk = carve_cu_topk_numbers_scratch_bytes(anchors, kk, batch);
  if (batch > (SIZE_MAX / 4) / per_image || topk == SIZE_MAX) {
    return SIZE_MAX;
  }
  return nms_align8(batch * anchors * sizeof(float)) + nms_align8(batch * kk * sizeof(int32_t)) +
         nms_align8(batch * kk * 5 * sizeof(float)) + nms_align8(batch * kept * sizeof(int32_t)) +
         nms_align8(batch * sizeof(uint32_t)) + topk;
}

extern "C" size_t carve_cu_nms_scratch_bytes(size_t anchors, size_t max_det) {
  return carve_cu_nms_batch_scratch_bytes(anchors, max_det, 1);
}

static int nms_task_ok(carve_e2e_task task, size_t extra_channels) {
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

// carve_cu_nms_postprocess_batch over either level type (the checks, scratch and launches of all four).
template <typename Lv>
static carve_status nms_run(const carve_cu_ctx* ctx, const Lv* levels, size_t num_levels, size_t nc,
                            size_t extra_channels, carve_e2e_task task, const float* conf, double iou, int agnostic,
                            size_t max_det, size_t batch, void* scratch, float* rows, uint32_t* num_rows) {
  if (ctx == NULL || levels == NULL || conf == NULL || scratch == NULL || rows == NULL || num_rows == NULL ||
      nc == 0 || num_levels == 0 || num_levels > CARVE_CU_NMS_MAX_LEVELS || batch == 0 ||
      (uintptr_t)scratch % sizeof(uint64_t) != 0 || !(iou >= 0.0 && iou <= 1.0) ||
      !nms_task_ok(task, extra_channels)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  nms_levels<Lv> L;
  memset(&L, 0, sizeof L);
  L.num = (uint32_t)num_levels;
  size_t anchors = 0;
  for (size_t l = 0; l < num_levels; l++) {
    const Lv* lv = &levels[l];
    if (lv->box == NULL || lv->cls == NULL || (extra_channels != 0 && lv->extra == NULL) || lv->box_stride < 4 ||
        lv->cls_stride < nc || (extra_channels != 0 && lv->extra_stride < extra_channels)) {
      return CARVE_ERR_INVALID_ARGUMENT;
    }
    L.lv[l] = *lv;
    L.start[l] = anchors;
    anchors += lv->h * lv->w;
  }
  L.start[num_levels] = anchors;
  if (carve_cu_nms_batch_scratch_bytes(anchors, max_det, batch) == SIZE_MAX || batch > 0x7FFFFFFFu) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (anchors == 0 || max_det == 0) {
    if (cudaMemsetAsync(num_rows, 0, batch * sizeof(uint32_t), ctx->stream) != cudaSuccess) {
      return CARVE_ERR_BACKEND;
    }
    return CARVE_OK;
  }
  const size_t kk = anchors < CARVE_NMS_MAX_NMS ? anchors : CARVE_NMS_MAX_NMS;
  const size_t cap = max_det < kk ? max_det : kk;  // rows, and kept anchors, per image

  unsigned char* base = (unsigned char*)scratch;
  float* s = (float*)base;                                                             // (batch, A) candidate scores
  int32_t* order = (int32_t*)(base + nms_align8(batch * anchors * sizeof(float)));     // (batch, k') best first
  float* boxes = (float*)((unsigned char*)order + nms_align8(batch * kk * sizeof(int32_t)));  // (batch, k', 5)
  int32_t* keep = (int32_t*)((unsigned char*)boxes + nms_align8(batch * kk * 5 * sizeof(float)));  // (batch, cap)
  uint32_t* cands = (uint32_t*)((unsigned char*)keep + nms_align8(batch * cap * sizeof(int32_t)));  // (batch)
  void* tk = (unsigned char*)cands + nms_align8(batch * sizeof(uint32_t));             // top-k scratch

  CARVE_LAUNCH(carve_cu_nms_scores_kernel<Lv>, carve_cu_blocks(batch * anchors), CARVE_CU_THREADS, ctx->stream, L,
               anchors, batch, nc, conf, s);
  CARVE_CU_CHECK_LAUNCH();
  const carve_status st = carve_cu_topk_numbers_batch(ctx, s, anchors, kk, batch, order, cands, tk);
  if (st != CARVE_OK) {
    return st;
  }
  CARVE_LAUNCH(carve_cu_nms_suppress_kernel<Lv>, (unsigned)batch, CARVE_CU_NMS_THREADS, ctx->stream, L, nc, (int)task,
               agnostic, iou, (const int32_t*)order, (const uint32_t*)cands, (uint32_t)kk, (uint32_t)cap, boxes, keep,
               num_rows);
  CARVE_CU_CHECK_LAUNCH();
  CARVE_LAUNCH(carve_cu_nms_rows_kernel<Lv>, carve_cu_blocks(batch * cap), CARVE_CU_THREADS, ctx->stream, L, nc,
               extra_channels, (int)task, agnostic, (const int32_t*)keep, (const uint32_t*)num_rows, cap, batch, rows);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

extern "C" carve_status carve_cu_nms_postprocess(const carve_cu_ctx* ctx, const carve_level* levels,
                                                 size_t num_levels, size_t nc, size_t extra_channels,
                                                 carve_e2e_task task, const float* conf, double iou, int agnostic,
                                                 size_t max_det, void* scratch, float* rows, uint32_t* num_rows) {
  return nms_run(ctx, levels, num_levels, nc, extra_channels, task, conf, iou, agnostic, max_det, 1, scratch, rows,
                 num_rows);
}

// The half-map overload (carve_cuda_nms.h, C++).
carve_status carve_cu_nms_postprocess(const carve_cu_ctx* ctx, const carve_cu_level_h* levels, size_t num_levels,
                                      size_t nc, size_t extra_channels, carve_e2e_task task, const float* conf,
                                      double iou, int agnostic, size_t max_det, void* scratch, float* rows,
                                      uint32_t* num_rows) {
  return nms_run(ctx, levels, num_levels, nc, extra_channels, task, conf, iou, agnostic, max_det, 1, scratch, rows,
                 num_rows);
}

extern "C" carve_status carve_cu_nms_postprocess_batch(const carve_cu_ctx* ctx, const carve_level* levels,
                                                       size_t num_levels, size_t nc, size_t extra_channels,
                                                       carve_e2e_task task, const float* conf, double iou,
                                                       int agnostic, size_t max_det, size_t batch, void* scratch,
                                                       float* rows, uint32_t* num_rows) {
  return nms_run(ctx, levels, num_levels, nc, extra_channels, task, conf, iou, agnostic, max_det, batch, scratch, rows,
                 num_rows);
}

carve_status carve_cu_nms_postprocess_batch(const carve_cu_ctx* ctx, const carve_cu_level_h* levels,
                                            size_t num_levels, size_t nc, size_t extra_channels, carve_e2e_task task,
                                            const float* conf, double iou, int agnostic, size_t max_det, size_t batch,
                                            void* scratch, float* rows, uint32_t* num_rows) {
  return nms_run(ctx, levels, num_levels, nc, extra_channels, task, conf, iou, agnostic, max_det, batch, scratch, rows,
                 num_rows);
}
