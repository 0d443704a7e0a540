// carve runtime: demo-side helpers (not used by the model itself).
//
// .npy files, image files through stb_image / stb_image_write, COCO results
// files, the executable's folder, and drawing of boxes, labels, masks,
// keypoints and rotated boxes onto an RGB image. Unlike the rest of the
// runtime these functions may allocate.
//
// Files are written whole: carve_image_write, carve_image_write_png and the
// COCO writer write a temporary file beside the target (<path>.<pid>-<n>.tmp,
// created exclusively, mode 0666 less the umask) and rename it over the target
// once complete; on any failure the temporary file is removed and an existing
// target is left as it was.

#ifndef CARVE_IO_H
#define CARVE_IO_H

#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- NumPy files ------------------------------------------------------------

// Largest ndim carve_npy_read_f32 accepts (the size of its shape array).
#define CARVE_NPY_MAX_DIMS 8

// Writes a .npy v1.0 file with dtype '<f4' in C order; ndim in [0, 8].
// CARVE_ERR_INVALID_ARGUMENT for bad arguments, CARVE_ERR_IO if writing fails.
carve_status carve_npy_write_f32(const char* path, const float* data, const size_t* shape,
                                 int ndim);

// Reads a .npy (v1, v2 or v3) file of dtype '<f4' in C order. *data_out is
// malloc'd (free() it), shape[0 .. *ndim) receives the dimensions.
// CARVE_ERR_IO: cannot open, truncated or malformed header;
// CARVE_ERR_UNSUPPORTED: another dtype, Fortran order, or more than 8 dims.
carve_status carve_npy_read_f32(const char* path, float** data_out,
                                size_t shape[CARVE_NPY_MAX_DIMS], int* ndim);

// ---- Images -----------------------------------------------------------------

// Loads any format stb_image reads (JPEG, PNG, BMP, GIF, TGA, PSD, HDR, binary
// PNM) as (h, w, 3) RGB uint8, rows w*3 bytes apart. A JPEG is turned upright
// by its Exif Orientation tag (APP1, IFD0 tag 0x0112, values 2..8 mirror and
// rotate, 5..8 swap w and h), as cv2.imread and so Ultralytics do.
// Free with carve_image_free. CARVE_ERR_IO: cannot open or read;
// CARVE_ERR_UNSUPPORTED: a format stb_image does not read (WebP, TIFF, HEIC,
// AVIF, ... or none it recognises); CARVE_ERR_BAD_IMAGE: a format it reads,
// but the file is corrupt or truncated (or empty).
carve_status carve_image_load_rgb(const char* path, uint8_t** rgb, int* w, int* h);

// As carve_image_load_rgb, and writes why it failed into msg (msg_size bytes,
// NUL-terminated; "" on success; msg may be NULL), e.g.
// "unsupported format: WebP (readable: ...)", "corrupt or truncated PNG: ...",
// "cannot open: No such file or directory".
carve_status carve_image_load_rgb_msg(const char* path, uint8_t** rgb, int* w, int* h, char* msg,
                                      size_t msg_size);

// As carve_image_load_rgb_msg, from the file's bytes in memory.
carve_status carve_image_decode_rgb(const void* data, size_t size, uint8_t** rgb, int* w, int* h,
                                    char* msg, size_t msg_size);

// Exif orientation (1..8) of a JPEG file's bytes: the Orientation tag of the
// first APP1 "Exif" segment's IFD0, either byte order. 1 (as stored) when the
// bytes are not a JPEG, hold no Exif or no tag, or anything is out of bounds
// or out of range: every read is bounds-checked against size.
int carve_jpeg_exif_orientation(const void* data, size_t size);

// Frees an image from carve_image_load_rgb (NULL is fine).
void carve_image_free(uint8_t* rgb);

// Writes (h, w, 3) RGB uint8, rows w*3 bytes apart, as PNG (whatever the
// extension). CARVE_ERR_INVALID_ARGUMENT, CARVE_ERR_IO if writing fails.
carve_status carve_image_write_png(const char* path, const uint8_t* rgb, int w, int h);

// Output formats carve_image_write picks from a path's extension (any case).
typedef enum carve_image_format {
  CARVE_IMAGE_UNKNOWN = 0,
  CARVE_IMAGE_PNG = 1,   // .png
  CARVE_IMAGE_JPEG = 2,  // .jpg, .jpeg (quality CARVE_IMAGE_JPEG_QUALITY)
  CARVE_IMAGE_BMP = 3,   // .bmp
  CARVE_IMAGE_TGA = 4,   // .tga
} carve_image_format;

#define CARVE_IMAGE_JPEG_QUALITY 95

// The format carve_image_write uses for path; CARVE_IMAGE_UNKNOWN for another
// extension (or none) and NULL.
carve_image_format carve_image_format_for_path(const char* path);

// Writes (h, w, 3) RGB uint8 in the format the path's extension names (see
// carve_image_format). CARVE_ERR_UNSUPPORTED for another extension (nothing
// written), CARVE_ERR_INVALID_ARGUMENT, CARVE_ERR_IO if writing fails.
carve_status carve_image_write(const char* path, const uint8_t* rgb, int w, int h);

// ---- COCO results files -----------------------------------------------------
//
// A JSON list in COCO's results format, as pycocotools' COCO.loadRes reads it
// and as Ultralytics' validator writes it (save_json): one object per result,
//   {"image_id": 397133, "category_id": 18, "bbox": [x, y, w, h], "score": s,
//    "segmentation": {"size": [h, w], "counts": "<compressed RLE>"},
//    "keypoints": [x1, y1, v1, ...], "rbox": [cx, cy, w, h, angle],
//    "poly": [x1, y1, ..., x4, y4]}
// with only the parts a result has. Coordinates are printed with 3 decimals,
// scores and keypoint confidences with 5 (as Ultralytics rounds them); the
// RLE string's backslashes are escaped as JSON wants.

// COCO's compressed RLE string of counts[0 .. n) (pycocotools' rleToString,
// the 'counts' of mask.encode): each count, less the count two before it from
// the fourth on, as signed 5-bit groups, least significant first, each a
// character 48 + group (+ 32 when more groups follow). Returns the string's
// length (at most 7 n) and writes its first min(length, capacity - 1)
// characters and a NUL to out (nothing when capacity is 0: out may then be
// NULL, to ask for the length). Returns 0 (out "" if it has room) for
// counts == NULL with n > 0.
size_t carve_rle_string(const uint32_t* counts, size_t n, char* out, size_t capacity);

// One result. Pointers left NULL are parts the result does not have.
typedef struct carve_coco_result {
  int64_t image_id;
  int category_id;
  float score;
  const float* bbox;       // x, y, width, height (top-left corner) in image pixels
  const uint32_t* rle;     // "segmentation": a mask's COCO counts (carve_rle_encode, column-major),
  size_t rle_count;        //   rle_count of them, summing to mask_h * mask_w
  int mask_h, mask_w;
  const float* keypoints;  // "keypoints": num_keypoints (x, y, confidence) triples in image pixels
  size_t num_keypoints;
  const float* rbox;       // a rotated box: cx, cy, w, h in pixels, angle in radians; written as "rbox",
                           //   its corners (Ultralytics' xywhr2xyxyxyxy order) as "poly" and as a
                           //   polygon "segmentation", and, when bbox is NULL, their bounding box as "bbox"
} carve_coco_result;

typedef struct carve_coco_writer carve_coco_writer;

// Starts a results file at path (written whole, see the top of this file).
// CARVE_ERR_INVALID_ARGUMENT for NULL arguments, CARVE_ERR_IO when the
// temporary file cannot be created (a missing folder, no permission),
// CARVE_ERR_OUT_OF_MEMORY.
carve_status carve_coco_open(const char* path, carve_coco_writer** out);

// Appends one result. CARVE_ERR_INVALID_ARGUMENT (nothing appended, the
// writer stays usable) for NULL pointers, a non-finite number, a negative
// keypoint count, rle with rle_count 0, counts that do not sum to
// mask_h * mask_w, or both rle and rbox; CARVE_ERR_IO (the writer has failed:
// close reports it) if writing fails.
carve_status carve_coco_add(carve_coco_writer* w, const carve_coco_result* r);

// Ends the list and renames the temporary file over path. Frees w whatever
// the outcome (NULL: CARVE_ERR_INVALID_ARGUMENT). CARVE_ERR_IO (temporary
// file removed, path untouched) if writing or renaming failed, or an earlier
// carve_coco_add did.
carve_status carve_coco_close(carve_coco_writer* w);

// Removes the temporary file and frees w (NULL is fine); path is untouched.
void carve_coco_abort(carve_coco_writer* w);

// ---- The running executable -------------------------------------------------

// The folder holding the running executable, without a trailing '/': the
// folder of /proc/self/exe's target where that link exists (Linux), else the
// folder part of argv0 when it has a '/' (argv0 may be NULL). NUL-terminated
// in out (size bytes). CARVE_ERR_INVALID_ARGUMENT for out NULL or size 0,
// CARVE_ERR_UNSUPPORTED when neither tells (a bare name found on PATH, on a
// system without /proc), CARVE_ERR_IO when the folder does not fit in size.
carve_status carve_exe_dir(const char* argv0, char* out, size_t size);

// ---- Drawing ----------------------------------------------------------------
//
// All drawing is clipped to the image; coordinates may lie outside it.

// Built-in font: 5x7 glyphs for ASCII 32..126 in cells of 6x9 pixels (times the
// scale); other bytes draw as '?'.
#define CARVE_FONT_CELL_W 6
#define CARVE_FONT_CELL_H 9

// Outline of the box with corners (x1, y1), (x2, y2) rounded to pixels, drawn
// `thickness` pixels wide inwards. Non-finite coordinates draw nothing.
void carve_draw_box(uint8_t* rgb, int w, int h, float x1, float y1, float x2, float y2,
                    const uint8_t color[3], int thickness);

// Glyph scale carve_draw_text uses on a w x h image: max(1, (w + h) / 1000).
int carve_text_scale(int w, int h);

// Size in pixels of the label carve_draw_text draws for `text` on a w x h image.
void carve_text_size(int w, int h, const char* text, int* text_w, int* text_h);

// Draws a one-line label with its top-left corner at (x, y): a bg rectangle
// (skipped if bg is NULL) with the text in fg, at carve_text_scale(w, h).
void carve_draw_text(uint8_t* rgb, int w, int h, int x, int y, const char* text,
                     const uint8_t fg[3], const uint8_t bg[3]);

// Ultralytics' 20-colour palette (utils.plotting.Colors), RGB: colour
// class_id mod 20 (Python modulo, so negative ids work too).
void carve_palette_color(int class_id, uint8_t out[3]);

// Tints the pixels where mask (h, w, rows w bytes apart) is nonzero towards
// color, as Annotator.masks (Results.plot, alpha 0.5 there) blends one mask:
//   v = (uint8)((p / 255 * (1 - alpha) + color / 255 * alpha) * 255)
// in float32, rounded as PyTorch rounds each step and truncated, so the result
// is bit-identical to Ultralytics' (pixels outside the mask are left alone, as
// its float round trip p / 255 * 255 leaves them).
// alpha is clamped to [0, 1]; NaN alpha or NULL pointers draw nothing.
void carve_draw_mask(uint8_t* rgb, int w, int h, const uint8_t* mask, const uint8_t color[3],
                     float alpha);

// Draws one person's keypoints as Results.plot does (Annotator.kpts with
// radius 5): kpts holds nk (x, y, visibility) triples in image pixels; a point
// with visibility < min_visibility (Ultralytics uses 0.25), or a non-finite
// coordinate, is skipped. Each kept point is a filled disc of radius 5 around
// (int(x), int(y)) (truncated towards zero); for nk == 17 (COCO) the skeleton's
// 19 limbs are then drawn between kept points (none with a negative pixel
// coordinate), as cv2 lines of thickness ceil(lw / 2) (see
// carve_draw_rotated_box) with lw = max(round((w + h + 3) / 2 * 0.003), 2),
// in Ultralytics' pose palette colours (kpt_color / limb_color,
// which Ultralytics draws on its BGR image and so shows channel-reversed; here
// in RGB as shown). Other nk draw discs only, in colours(i) as shown.
// The discs and lines are not anti-aliased.
void carve_draw_keypoints(uint8_t* rgb, int w, int h, const float* kpts, size_t nk,
                          float min_visibility);

// Outline of a rotated box (an OBB row's cx, cy, w, h in pixels and angle in
// radians), as Annotator.box_label draws obb rows: corners
//   (cx, cy) +- (bw / 2) (cos a, sin a) +- (bh / 2) (-sin a, cos a)
// (ops.xywhr2xyxyxyxy order) truncated to integers, joined by lines as
// cv2.polylines draws them `thickness` wide (1 pixel for 1, else
// 2 * ceil(thickness / 2) + 1 pixels across an axis-aligned edge; round caps;
// not anti-aliased). Non-finite values draw nothing.
void carve_draw_rotated_box(uint8_t* rgb, int w, int h, float cx, float cy, float bw, float bh,
                            float angle, const uint8_t color[3], int thickness);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_IO_H
