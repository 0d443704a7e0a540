// carve runtime: the YOLO26 one-to-many head with non-maximum suppression, as
// Ultralytics' default predict runs it (YOLO("model.pt").predict(img), nms=None).
//
// Reproduces, on the one-to-many branch's per-level NHWC outputs (cv2, cv3 and
// cv4 / cv4_kpts, read in place, no (4 + nc + extra, A) tensor is built):
//   Detect/Segment26/Pose26/OBB26._inference with end2end False (the anchors'
//   boxes decoded to xywh, or rotated xywh + angle, sigmoid class scores,
//   keypoints decoded), then ultralytics.utils.nms.non_max_suppression with
//   multi_label False and classes None, as DetectionPredictor.postprocess calls it:
//     1. candidates: anchors whose best class score (first class of the largest
//        sigmoid) is > conf, the box in xyxy (rotated: xywh + angle);
//     2. more than CARVE_NMS_MAX_NMS candidates: the best CARVE_NMS_MAX_NMS;
//     3. class-aware (agnostic == 0): every box offset by class * CARVE_NMS_MAX_WH
//        (x and y; all four corners for xyxy) so that classes never overlap;
//     4. detect, segment, pose: torchvision.ops.nms (greedy: the best remaining
//        box is kept and removes the boxes whose IoU with it is > iou, the IoU
//        computed in float on the offset boxes, compared in double as torchvision
//        does); obb: TorchNMS.fast_nms with batch_probiou (a box is removed when
//        any better candidate, kept or not, has a probabilistic IoU > iou, both
//        in float);
//     5. the first max_det kept, best first.
// Rows, best first (the order of carve_post.h: larger score, then lower anchor
// index; torchvision sorts stably, TorchNMS.fast_nms's torch.argsort leaves the
// order of equal scores open):
//   detect, segment, pose: [x1, y1, x2, y2, score, class, extras], the box xyxy
//     as xywh2xyxy(dist2bbox(xywh) * stride), extras as in carve_post.h (raw mask
//     coefficients; keypoints (raw + anchor) * stride, sigmoid visibility);
//   obb: [cx, cy, w, h, score, class, angle] (dist2rbox * stride, raw angle).
//
// The suppression depends on conf only through the candidates: a box is removed
// by better boxes alone, so the rows at one conf are the rows at a lower conf
// that score above it (a later conf filter at or above this conf agrees with
// Ultralytics at that threshold).

#ifndef CARVE_NMS_H
#define CARVE_NMS_H

#include "carve_post.h"  // carve_level, carve_e2e_task
#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// non_max_suppression's max_nms: the most candidates that enter the suppression.
#define CARVE_NMS_MAX_NMS 30000
// non_max_suppression's max_wh: the class offset (pixels) of class-aware NMS.
#define CARVE_NMS_MAX_WH 7680

// What a run suppresses with: the predictor's conf, iou, agnostic_nms and max_det.
typedef struct carve_nms_params {
  float conf;       // candidates: best class score > conf (Ultralytics' default 0.25)
  double iou;       // suppression: IoU > iou (default 0.7), in [0, 1]
  int agnostic;     // nonzero: one class for the suppression (agnostic_nms)
  size_t max_det;   // the most rows (default 300)
} carve_nms_params;

// Bytes of scratch carve_nms_postprocess needs for `anchors` = sum of h*w over
// the levels (8-byte aligned): one 64-bit key and five floats per anchor.
#define CARVE_NMS_BYTES_PER_ANCHOR 28
#define CARVE_NMS_SCRATCH_BYTES(anchors) ((size_t)(anchors) * (size_t)CARVE_NMS_BYTES_PER_ANCHOR)
size_t carve_nms_scratch_bytes(size_t anchors);

// Anchors are numbered and decoded as in carve_post.h (level by level, each
// row-major; anchor (x, y) at (x + 0.5, y + 0.5) grid units, times the level's
// stride). Writes min(max_det, kept) rows of (6 + extra_channels) floats and
// their count to *num_rows (0 rows: CARVE_OK). CARVE_ERR_INVALID_ARGUMENT (no
// rows, *num_rows = 0 when num_rows is not NULL) for NULL pointers, nc == 0, a
// scratch not 8-byte aligned, iou outside [0, 1] or NaN, an unknown task, POSE
// with extra_channels not a multiple of 3, OBB with extra_channels != 1, or more
// than 2^32 - 1 anchors. rows must hold min(max_det, anchors) rows.
// The candidates' scores are computed over `pool` (NULL or CARVE_RT_NO_THREADS:
// serially); the sort and the suppression run on the calling thread. The rows are
// the same bits for any pool and thread count.
carve_status carve_nms_postprocess(const carve_level* levels, size_t num_levels, size_t nc,
                                   size_t extra_channels, carve_e2e_task task,
                                   const carve_nms_params* params, void* scratch, float* rows,
                                   size_t* num_rows, pthreadpool_t pool);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_NMS_H
