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
// *num_rows = k'. Invalid arguments (NULL pointers, nc == 0, or more than
// 2^32 - 1 candidates in a step) give *num_rows = 0.
void carve_e2e_postprocess(const carve_level* levels, size_t num_levels, size_t nc,
                           size_t extra_channels, size_t k, void* scratch, float* rows,
                           size_t* num_rows);

// ---- Confidence filter ------------------------------------------------------

// Keeps the rows whose score (float 4) is > conf, moving them to the front in
// order; returns how many were kept. NaN scores are dropped.
size_t carve_filter_conf(float* rows, size_t n, size_t row_stride, float conf);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_POST_H
