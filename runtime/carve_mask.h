// carve runtime: instance masks of the segmentation head (Segment26 + Proto26).
//
// The end2end rows of a segmentation model carry nm mask coefficients per
// detection (carve_e2e_postprocess_task, CARVE_E2E_SEGMENT); Proto26 gives nm
// prototype maps at a quarter of the input resolution. A detection's mask
// logits are the coefficient-weighted sum of the prototypes, its mask is where
// the logits are > 0 (sigmoid > 0.5) inside its box.
//
// carve_mask_logits gives the logits at prototype resolution (the cheap part,
// enough for callers who upsample themselves); carve_mask_native turns one
// detection's logits into its mask on the original image exactly as
// Ultralytics' retina_masks=True path (ops.process_mask_native) does;
// carve_rle_encode writes a mask as COCO run-length counts.

#ifndef CARVE_MASK_H
#define CARVE_MASK_H

#include "carve_pre.h"
#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- Mask logits ------------------------------------------------------------

// logits[i][y][x] = sum over c < nm of coef_i[c] * protos(y, x, c), nm = protos->c,
// with coef_i = rows + i * row_stride + coef_offset (the coefficients of row i:
// for SEGMENT rows, coef_offset = 6). logits is (n, protos->h, protos->w) dense
// f32. The sum is taken in double and rounded once (torch's float matmul, to
// whose result this is compared, differs by float rounding only).
// Parallel over pixels on pool (NULL: serial).
// CARVE_ERR_INVALID_ARGUMENT for NULL pointers (n > 0), nm == 0, a proto view
// whose stride is below its channels, or row_stride < coef_offset + nm (n > 1).
// n == 0 is a no-op.
carve_status carve_mask_logits(const float* rows, size_t n, size_t row_stride, size_t coef_offset,
                               const carve_view* protos, float* logits, pthreadpool_t pool);

// ---- Masks on the original image (retina_masks=True) ------------------------

// Bytes of scratch carve_mask_native needs for (mh, mw) logits and the source
// size in info; 0 for NULL info or non-positive sizes.
size_t carve_mask_native_scratch_bytes(size_t mh, size_t mw, const carve_letterbox_info* info);

// One detection's mask on the original image, as ops.process_mask_native on
// Ultralytics 8.4.190 computes it for a network input of (4 mh, 4 mw) (Proto26's
// output is a quarter of the input) and an original image of
// (h, w) = (info->src_h, info->src_w):
//   1. gain = min(4 mh / h, 4 mw / w); pad = (4 mh - max(round(h gain), 1)) |
//      (4 mw - max(round(w gain), 1)); f = 4 / gcd(4, pad | pad / 2) (1, 2 or 4);
//      the logits are upsampled f times with F.interpolate(bilinear,
//      align_corners=False, scale_factor=f) when f > 1, giving an (f mh, f mw) grid;
//   2. ops.scale_masks: unless the grid is already (h, w), its letterbox padding
//      is cropped away with g = min(f mh / h, f mw / w),
//      top = round((f mh - max(round(h g), 1)) / 2 - 0.1), the left likewise,
//      rows [top, top + max(round(h g), 1)), columns [left, left + max(round(w g), 1)),
//      (Python's round: half to even) and the crop is resized to (h, w) with
//      F.interpolate(bilinear, align_corners=False);
//   3. mask = logit > 0, then crop_mask: pixel (x, y) is kept when
//      x1 <= x < x2 and y1 <= y < y2 (float compares) with box = (x1, y1, x2, y2)
//      in original pixels (the box after carve_scale_boxes_xyxy).
// Both interpolations reproduce PyTorch's CPU kernel bit for bit (source index
// s = scale * (d + 0.5) - 0.5 in float, clamped at 0; weights (1 - l, l);
// each output fmaf(v0, w0, v1 * w1), first along x then along y), so the mask
// equals Ultralytics' one on an FMA-capable x86 CPU (tests/runtime/mask_vs_ultralytics.py).
// Only the pixels inside the box are computed; the rest of the mask is zeroed.
// logits: (mh, mw) dense f32 (one detection of carve_mask_logits); mask: (h, w)
// uint8 0/1, rows w bytes apart; scratch: carve_mask_native_scratch_bytes bytes,
// aligned to 4 bytes. Parallel over output rows on pool (NULL: serial).
// CARVE_ERR_INVALID_ARGUMENT for NULL pointers, misaligned scratch, zero mh / mw,
// or a non-positive source size.
carve_status carve_mask_native(const float* logits, size_t mh, size_t mw,
                               const carve_letterbox_info* info, const float box[4],
                               uint8_t* mask, void* scratch, pthreadpool_t pool);

// ---- Run-length encoding ----------------------------------------------------

// COCO's uncompressed RLE of an (h, w) mask (rows w bytes apart, any nonzero
// byte is foreground): pixels in column-major (Fortran) order, run lengths
// alternating background / foreground starting with background (so a mask whose
// first pixel is set starts with a 0 count), as pycocotools' rleEncode.
// Returns the number of counts (at most w * h + 1) and writes the first
// min(that, capacity) of them to counts, so a return value above capacity means
// "call again with a larger array" (counts may be NULL with capacity 0 to ask
// for the size). An empty mask (w or h 0) is the single count 0. Returns 0 for
// mask == NULL with w * h > 0, negative sizes, or w * h > UINT32_MAX.
size_t carve_rle_encode(const uint8_t* mask, int w, int h, uint32_t* counts, size_t capacity);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_MASK_H
