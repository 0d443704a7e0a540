// carve runtime: YOLO26 end-to-end (NMS-free) post-processing.
//
// Reproduces Detect.postprocess / get_topk_index (class-aware path) of
// Ultralytics on the one2one head outputs, read straight from the per-level
// NHWC tensors so that no (A, 4 + nc) concat is ever built.
//
// Order (the rule every top-k here follows):
//   a candidate ranks above another when its score is larger, or when the scores
//   are equal and its index is lower. NaN scores rank below every number
//   (including -inf and 0), ties among NaNs again by lower index. -0 equals +0.
// PyTorch's topk ranks NaN above everything instead; on NaN-free input the two
// agree, and a NaN can never pass carve_filter_conf, so here it never displaces
// a real detection.

#ifndef CARVE_POST_H
#define CARVE_POST_H

#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- End-to-end top-k -------------------------------------------------------

// One detection level (P3, P4 or P5): NHWC views of the head outputs.
typedef struct carve_level {
  const float* box;    // (h, w, 4) raw l, t, r, b distances in grid units
  size_t box_stride;
  const float* cls;    // (h, w, nc) raw class logits
  size_t cls_stride;
  const float* extra;  // (h, w, extra_channels), copied to the rows as is; NULL if none
  size_t extra_stride;
  size_t h, w;
  float stride;        // pixels per grid cell: 8, 16, 32
} carve_level;

// Bytes of scratch carve_e2e_postprocess needs (aligned to 8 bytes) for
// `anchors` = sum of h*w over the levels.
size_t carve_e2e_scratch_bytes(size_t anchors, size_t nc, size_t k);

// The same as a constant expression (no overflow check), for buffers sized at
// compile time: max(anchors, k' * nc) 64-bit keys + k' 32-bit indices, k' = min(k, anchors).
#define CARVE_E2E_SCRATCH_BYTES(anchors, nc, k)                                                     \
  (((size_t)((k) < (anchors) ? (k) : (anchors)) * (size_t)(nc) > (size_t)(anchors)                 \
        ? (size_t)((k) < (anchors) ? (k) : (anchors)) * (size_t)(nc)                                \
        : (size_t)(anchors)) * 8u +                                                                 \
   (size_t)((k) < (anchors) ? (k) : (anchors)) * 4u)

// Ultralytics end2end rows. Anchors are numbered over the levels in order, each
// level row-major; anchor (x, y) of a level with stride s sits at
// (ax, ay) = (x + 0.5, y + 0.5) and decodes to
//   box = ((ax - l) * s, (ay - t) * s, (ax + r) * s, (ay + b) * s),
//   score[c] = sigmoid(logit[c]) = 1 / (1 + expf(-logit[c])).
// With k' = min(k, A):
//   1. take the k' best anchors by max_c score[c] (NaN logits ignored; all NaN
//      gives NaN);
//   2. take the k' best of their k' * nc (anchor rank * nc + class) scores;
// and write k' rows of (6 + extra_channels) floats, best first:
//   [x1, y1, x2, y2, score, class, extra[0 .. extra_channels) of that anchor].
// *num_rows = k' (0 when k or the number of anchors is 0: CARVE_OK). Invalid
// arguments (NULL pointers, nc == 0, a scratch not 8-byte aligned, or more than
// 2^32 - 1 candidates in a step) give CARVE_ERR_INVALID_ARGUMENT, no rows
// written and *num_rows = 0 (when num_rows is not NULL).
// Same as carve_e2e_postprocess_task(..., CARVE_E2E_DETECT, ..., pool).
carve_status carve_e2e_postprocess(const carve_level* levels, size_t num_levels, size_t nc,
                                   size_t extra_channels, size_t k, void* scratch, float* rows,
                                   size_t* num_rows, pthreadpool_t pool);

// ---- Task heads (Segment26, Pose26, OBB26) ----------------------------------

// What the one2one extra channels hold, and so how a row is decoded.
typedef enum carve_e2e_task {
  CARVE_E2E_DETECT = 0,   // extras (if any) copied raw
  CARVE_E2E_SEGMENT = 1,  // extras = nm mask coefficients, copied raw
  CARVE_E2E_POSE = 2,     // extras = nk x (x, y, visibility) raw keypoint channels
  CARVE_E2E_OBB = 3,      // extras = 1 raw angle channel (radians)
} carve_e2e_task;

// The end2end rows of the task heads, equal to the eval-mode output y of
// Ultralytics' Segment26 / Pose26 / OBB26 heads: the same two top-k steps as
// carve_e2e_postprocess (the extras play no part in them), then each of the k'
// chosen rows is decoded (only those: the other anchors are never decoded):
//   DETECT, SEGMENT: [x1, y1, x2, y2, score, class, extra...], extras raw;
//   POSE (extra_channels = 3 * nk): [x1, y1, x2, y2, score, class,
//         kx, ky, kv (x nk)] as Pose26.kpts_decode (the non-export path):
//           kx = (raw_x + ax) * s, ky = (raw_y + ay) * s, kv = sigmoid(raw_v),
//         with the anchor (ax, ay) and stride s of the box's anchor;
//   OBB (extra_channels = 1): [cx, cy, w, h, score, class, angle] as dist2rbox:
//           xf = (r - l) / 2, yf = (b - t) / 2, theta = raw angle (no activation),
//           cx = (xf * cos(theta) - yf * sin(theta) + ax) * s,
//           cy = (xf * sin(theta) + yf * cos(theta) + ay) * s,
//           w = (l + r) * s, h = (t + b) * s, angle = theta.
// Scratch: carve_e2e_scratch_bytes(A, nc, k) bytes, 8-byte aligned; rows hold
// k' * (6 + extra_channels) floats. CARVE_ERR_INVALID_ARGUMENT (*num_rows = 0,
// no rows written) for the invalid arguments of carve_e2e_postprocess, an
// unknown task, POSE with extra_channels not a multiple of 3 (2-value keypoints
// are not supported), or OBB with extra_channels != 1.
// The scores of both steps (per anchor, then per rank and class) are computed
// over `pool` (NULL, or CARVE_RT_NO_THREADS: serially); the selections and the
// row decode run on the calling thread. The rows are the same bits for any
// pool and thread count.
carve_status carve_e2e_postprocess_task(const carve_level* levels, size_t num_levels, size_t nc,
                                        size_t extra_channels, size_t k, carve_e2e_task task,
                                        void* scratch, float* rows, size_t* num_rows, pthreadpool_t pool);

// ---- Classification ---------------------------------------------------------

// y = softmax(x) over n floats as torch.softmax in float32: m = max(x),
// e[i] = expf(x[i] - m), y[i] = e[i] * (1 / sum(e)) with the sum taken in double
// (within 2e-7 of torch, tests/runtime/classify_vs_ultralytics.py). As in torch,
// a NaN or +inf anywhere, or all entries -inf, gives NaN everywhere; -inf
// entries next to finite ones give 0. x and y may be the same array.
// CARVE_ERR_INVALID_ARGUMENT (nothing written) for NULL pointers or n == 0.
carve_status carve_softmax(const float* x, size_t n, float* y);

// The min(k, n) largest of p[0 .. n), best first: their indices into idx and
// (when val is not NULL) their values into val; returns min(k, n). Ties go to
// the lower index; NaN ranks below every number (the order of
// carve_e2e_postprocess). O(n log k), no scratch. Returns 0 (writing nothing)
// for p or idx NULL, or n > INT32_MAX.
size_t carve_topk_probs(const float* p, size_t n, size_t k, int* idx, float* val);

// ---- Confidence filter ------------------------------------------------------

// Keeps the rows whose score (float 4) is > conf, moving them to the front in
// order; returns how many were kept. NaN scores are dropped.
size_t carve_filter_conf(float* rows, size_t n, size_t row_stride, float conf);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_POST_H
