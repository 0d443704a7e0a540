// carve runtime: demo-side helpers (not used by the model itself).
//
// .npy files, image files through stb_image / stb_image_write, and drawing of
// boxes and labels onto an RGB image. Unlike the rest of the runtime these
// functions may allocate.

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

// Loads any format stb_image reads as (h, w, 3) RGB uint8, rows w*3 bytes apart.
// Free with carve_image_free. CARVE_ERR_IO: cannot open; CARVE_ERR_BAD_IMAGE:
// cannot decode.
carve_status carve_image_load_rgb(const char* path, uint8_t** rgb, int* w, int* h);

// Frees an image from carve_image_load_rgb (NULL is fine).
void carve_image_free(uint8_t* rgb);

// Writes (h, w, 3) RGB uint8, rows w*3 bytes apart, as PNG.
carve_status carve_image_write_png(const char* path, const uint8_t* rgb, int w, int h);

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

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_IO_H
