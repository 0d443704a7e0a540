// carve runtime: image preprocessing (Ultralytics letterbox for detect / segment /
// pose / obb, resize + centre crop for classify) and the inverse mapping of
// boxes and keypoints back to the source image (ops.scale_boxes, scale_coords).

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

// The geometry alone (what carve_letterbox writes to info), for callers that
// letterbox elsewhere (carve_cu_letterbox of carve_cuda.h takes it as input).
// CARVE_ERR_INVALID_ARGUMENT for a NULL info or a non-positive output size,
// CARVE_ERR_BAD_IMAGE for a non-positive source size.
carve_status carve_letterbox_geometry(int src_w, int src_h, int out_w, int out_h,
                                      carve_letterbox_info* info);

// Bytes of scratch carve_letterbox needs for an (out_h, out_w) output; the
// scratch must be aligned to 8 bytes.
size_t carve_letterbox_scratch_bytes(int out_w, int out_h);

// carve_letterbox splits the output rows into this many bands, the tasks it hands
// the pool; each band keeps its own two horizontally resized source rows in the
// scratch. One band without threads (CARVE_RT_NO_THREADS), where more would only
// take memory (2 x 3 x out_w int32 each).
#ifndef CARVE_LETTERBOX_BANDS
#ifdef CARVE_RT_NO_THREADS
#define CARVE_LETTERBOX_BANDS 1
#else
#define CARVE_LETTERBOX_BANDS 8
#endif
#endif

// The same as a constant expression (out_w, out_h > 0), for buffers sized at compile time:
// the column plan (3 int32 per output column) and two rows of 3 int32 per column per band.
#define CARVE_LETTERBOX_SCRATCH_BYTES(out_w, out_h) ((size_t)(out_w) * (3u + 6u * CARVE_LETTERBOX_BANDS) * 4u)

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
// The output rows are split into CARVE_LETTERBOX_BANDS bands over `pool` (NULL:
// serial); every row is computed the same way whatever the band, so the result
// does not depend on the number of threads.
// Returns CARVE_ERR_INVALID_ARGUMENT for NULL pointers or a non-positive output
// size, CARVE_ERR_BAD_IMAGE for a non-positive source size or a stride shorter
// than a row.
carve_status carve_letterbox(const uint8_t* rgb, int src_w, int src_h, size_t src_stride_bytes,
                             int out_w, int out_h, float* out_nhwc, void* scratch,
                             carve_letterbox_info* info, pthreadpool_t pool);

// ---- int8 input ---------------------------------------------------------------

// The int8 input of an int8 package (--precision int8, docs/quantization.md#the-int8-input): the
// network input quantized at scale CARVE_PRE_Q8_SCALE (the float32 nearest 1/255) and zero point
// CARVE_PRE_Q8_ZERO. A pre-processed pixel is v / 255.0f for a byte v, and
// arith.quantize(v / 255.0f, 1/255, -128) = rint((v / 255.0f) / (1.0f / 255.0f)) - 128 is v - 128 for
// every v in 0..255 (the float32 quotient lies within 2^-16 of v): the _q8 pre-processors below write
// v - 128 with no float in between, the same bytes as the float pre-processor followed by
// CARVE_Q8_QUANTIZE at those QParams (tests/runtime/test_pre_q8.c checks both, byte for byte).
#define CARVE_PRE_Q8_SCALE (1.0f / 255.0f)
#define CARVE_PRE_Q8_ZERO (-128)

// carve_letterbox with an int8 output: out_nhwc (out_h, out_w, 3) int8, dense, holds v - 128 for the
// value v / 255.0f that carve_letterbox writes (the border: 114 - 128 = -14). The same scratch
// (carve_letterbox_scratch_bytes), geometry, threads and errors as carve_letterbox.
carve_status carve_letterbox_q8(const uint8_t* rgb, int src_w, int src_h, size_t src_stride_bytes,
                                int out_w, int out_h, int8_t* out_nhwc, void* scratch,
                                carve_letterbox_info* info, pthreadpool_t pool);

// The int8 input from a float32 tensor (an int8 package's run_tensor): x (1, c, h, w) NCHW, dense, to y
// (h, w, c) int8 NHWC, dense, each value arith.quantize(x, CARVE_PRE_Q8_SCALE, CARVE_PRE_Q8_ZERO) as
// CARVE_Q8_QUANTIZE computes it (x / scale in float32, NaN -> 0, rint half to even, clamped), so a
// tensor of pre-processed pixels v / 255.0f gives v - 128. CARVE_ERR_INVALID_ARGUMENT (nothing written)
// for NULL pointers or empty sizes.
carve_status carve_nchw_to_nhwc_q8(const float* x, size_t c, size_t h, size_t w, int8_t* y);

// ---- Classification ---------------------------------------------------------

// Bytes of scratch carve_classify_preprocess needs for a w x h source and an
// out x out result (aligned to 4 bytes); 0 for non-positive sizes.
size_t carve_classify_scratch_bytes(int w, int h, int out);

// What Ultralytics' ClassificationPredictor feeds a classifier (8.4.190:
// classify_transforms(out) = torchvision Resize(out, BILINEAR) on a PIL image,
// CenterCrop(out), then /255 and Normalize(mean 0, std 1), a no-op):
//   1. the short side becomes out and the long one int(out * long / short)
//      (torchvision's _compute_resized_output_size), with Pillow's
//      Image.resize(BILINEAR): a triangle filter widened by the scale when
//      shrinking (antialiased), 22-bit fixed-point coefficients, a horizontal
//      pass rounded to uint8, then a vertical one (Pillow's Resample.c,
//      reproduced bit for bit); a side that keeps its size is not resampled;
//   2. the centre out x out is cropped at top = round((new_h - out) / 2),
//      left = round((new_w - out) / 2) (Python's round, half to even);
//   3. out = value / 255.0f.
// Only the pixels that survive the crop are computed. rgb is (h, w, 3) uint8
// with rows stride bytes apart (any channel order: it is kept; Ultralytics
// flips BGR to RGB after the resize, which is per channel). out_nhwc is (out,
// out, 3) float32, dense. scratch: carve_classify_scratch_bytes(w, h, out) bytes.
// Both passes are split by rows over `pool` (NULL: serial); every row is computed
// alone, so the result does not depend on the number of threads.
// CARVE_ERR_INVALID_ARGUMENT for NULL pointers, misaligned scratch or out <= 0;
// CARVE_ERR_BAD_IMAGE for a non-positive size or a stride shorter than a row.
carve_status carve_classify_preprocess(const uint8_t* rgb, int w, int h, size_t stride, int out,
                                       float* out_nhwc, void* scratch, pthreadpool_t pool);

// carve_classify_preprocess with an int8 output: out_nhwc (out, out, 3) int8, dense, holds v - 128 for
// the value v / 255.0f that carve_classify_preprocess writes (see CARVE_PRE_Q8_SCALE). The same scratch,
// threads and errors.
carve_status carve_classify_preprocess_q8(const uint8_t* rgb, int w, int h, size_t stride, int out,
                                          int8_t* out_nhwc, void* scratch, pthreadpool_t pool);

// ---- Box scaling ------------------------------------------------------------

// ops.scale_boxes(padding=True) then clip_boxes, on the first four floats
// (x1, y1, x2, y2) of each of n rows:
//   x = clamp((x - pad_x) / gain_x, 0, src_w), y = clamp((y - pad_y) / gain_y, 0, src_h).
// NaN coordinates stay NaN. CARVE_ERR_INVALID_ARGUMENT (nothing written) for
// NULL pointers or, with n > 0, row_stride < 4.
carve_status carve_scale_boxes_xyxy(float* rows, size_t n, size_t row_stride,
                                    const carve_letterbox_info* info);

// ops.scale_coords(padding=True) (clip_coords included) on n points, point i
// being (x, y) = coords[i * stride], coords[i * stride + 1]; the other values
// (a keypoint's visibility) are left as they are:
//   x = clamp((x - pad_x) / gain_x, 0, src_w), y = clamp((y - pad_y) / gain_y, 0, src_h).
// For the (nk, 3) keypoints of a pose row: coords = row + 6, n = nk, stride = 3.
// NaN coordinates stay NaN. CARVE_ERR_INVALID_ARGUMENT (nothing written) for
// NULL pointers or, with n > 0, stride < 2.
carve_status carve_scale_coords(float* coords, size_t n, size_t stride, const carve_letterbox_info* info);

// ops.scale_boxes(padding=True, xywh=True) on the first four floats
// (cx, cy, w, h) of each of n rows (OBB rows [cx, cy, w, h, score, class, angle]):
//   cx = (cx - pad_x) / gain_x, cy = (cy - pad_y) / gain_y, w = w / gain_x, h = h / gain_y,
// with no clipping; the angle and everything after the fourth float are left
// as they are. CARVE_ERR_INVALID_ARGUMENT (nothing written) for NULL pointers
// or, with n > 0, row_stride < 4.
carve_status carve_scale_boxes_xywhr(float* rows, size_t n, size_t row_stride,
                                     const carve_letterbox_info* info);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_PRE_H
