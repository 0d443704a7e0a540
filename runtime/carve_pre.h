// carve runtime: image preprocessing (Ultralytics letterbox) and the inverse
// mapping of boxes back to the source image (ops.scale_boxes).

#ifndef CARVE_PRE_H
#define CARVE_PRE_H

#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- Letterbox --------------------------------------------------------------

// Geometry of one letterbox, in the terms ops.scale_boxes uses to undo it.
typedef struct carve_letterbox_info {
  float gain;            // r = min(out_h / src_h, out_w / src_w)
  float pad_x, pad_y;    // left / top padding: round((out - new) / 2 - 0.1), half to even
  int new_w, new_h;      // resized size: max(round(src * r), 1), half to even
  int src_w, src_h;      // source image size
  float gain_x, gain_y;  // new_w / src_w, new_h / src_h: the gains scale_boxes divides by
} carve_letterbox_info;

// Bytes of scratch carve_letterbox needs for an (out_h, out_w) output; the
// scratch must be aligned to 8 bytes.
size_t carve_letterbox_scratch_bytes(int out_w, int out_h);

// Ultralytics LetterBox(new_shape=(out_h, out_w), auto=False, scaleup=True,
// center=True) followed by /255:
//   r = min(out_h/src_h, out_w/src_w); new = max(round(src*r), 1);
//   the image is resized to (new_h, new_w) with cv2.resize(INTER_LINEAR) on
//   uint8, reproduced bit for bit (OpenCV's 11-bit fixed-point coefficients and
//   its SIMD vertical pass), when the size changes;
//   it is placed at (left, top) = (round(dw - 0.1), round(dh - 0.1)) with
//   dw, dh = (out - new) / 2, the border is 114, and out = value / 255.0f.
// rgb is (src_h, src_w, 3) uint8 with rows src_stride_bytes apart (any channel
// order: it is kept). out_nhwc is (out_h, out_w, 3) float32, dense.
// info (may be NULL) receives the geometry for carve_scale_boxes_xyxy.
// Returns CARVE_ERR_INVALID_ARGUMENT for NULL pointers or a non-positive output
// size, CARVE_ERR_BAD_IMAGE for a non-positive source size or a stride shorter
// than a row.
carve_status carve_letterbox(const uint8_t* rgb, int src_w, int src_h, size_t src_stride_bytes,
                             int out_w, int out_h, float* out_nhwc, void* scratch,
                             carve_letterbox_info* info);

// ---- Box scaling ------------------------------------------------------------

// ops.scale_boxes(padding=True) then clip_boxes, on the first four floats
// (x1, y1, x2, y2) of each of n rows:
//   x = clamp((x - pad_x) / gain_x, 0, src_w), y = clamp((y - pad_y) / gain_y, 0, src_h).
// NaN coordinates stay NaN.
void carve_scale_boxes_xyxy(float* rows, size_t n, size_t row_stride,
                            const carve_letterbox_info* info);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_PRE_H
