// carve runtime: the arithmetic of the letterbox and classification pre-processing,
// shared by the CPU runtime (carve_pre.c, C11) and the device one (carve_cuda_pre.cu,
// nvcc or g++ with tests/cuda/cuda_emu.h), so that both compute it from one text and stay
// bit-identical. Not part of the API; a package copies it with carve_pre.c.
// carve_pre.c documents where each formula comes from (OpenCV's cv::resize INTER_LINEAR
// and Pillow's BILINEAR resize).
//
// Every helper is `static inline CARVE_HD`: __host__ __device__ under nvcc and the
// emulation header (C++), nothing in C. The double products and sums whose rounding
// matters go through CARVE_PRE_DMUL / CARVE_PRE_DADD / CARVE_PRE_DSUB (float products
// through CARVE_PRE_FMUL): the __d*_rn / __fmul_rn intrinsics on the device (nvcc may not
// contract them into FMAs), and in host code a product stored through a volatile, which
// no compiler may fuse with the following sum whatever its -ffp-contract (GNU C's default
// is `fast`, clang's `on`); sums and differences alone cannot be contracted.

#ifndef CARVE_PRE_MATH_H
#define CARVE_PRE_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "carve_rt.h"  // carve_status

// CARVE_CUDA_EMULATION counts only in C++ (the .cu files built with cuda_emu.h): an
// emulated package defines it for its C files too, which stay plain C.
#if defined(CARVE_CUDA_EMULATION) && defined(__cplusplus)
#define CARVE_PRE_EMULATED 1
#endif

#if defined(__CUDACC__) || defined(CARVE_PRE_EMULATED)
#define CARVE_HD __host__ __device__
#else
#define CARVE_HD
#endif

#if defined(__CUDA_ARCH__) || defined(CARVE_PRE_EMULATED)
#define CARVE_PRE_DMUL(a, b) __dmul_rn((a), (b))
#define CARVE_PRE_DADD(a, b) __dadd_rn((a), (b))
#define CARVE_PRE_DSUB(a, b) __dsub_rn((a), (b))
#define CARVE_PRE_FMUL(a, b) __fmul_rn((a), (b))
#else
static inline double carve_pre_dmul_(double a, double b) {
  volatile double t = a * b;  // rounded here: never fused with what uses it
  return t;
}
static inline float carve_pre_fmul_(float a, float b) {
  volatile float t = a * b;
  return t;
}
#define CARVE_PRE_DMUL(a, b) carve_pre_dmul_((a), (b))
#define CARVE_PRE_DADD(a, b) ((a) + (b))
#define CARVE_PRE_DSUB(a, b) ((a) - (b))
#define CARVE_PRE_FMUL(a, b) carve_pre_fmul_((a), (b))
#endif

#define CARVE_PRE_RESIZE_COEF_SCALE 2048.0f  // 1 << INTER_RESIZE_COEF_BITS
#define CARVE_PRE_LETTERBOX_PAD 114
#define CARVE_PRE_PIL_PRECISION_BITS 22

// ---- Rounding, clamps --------------------------------------------------------------------

// Python's round(x): nearest integer, ties to even (independent of fenv).
static inline CARVE_HD double carve_pre_round_half_even(double x) {
  const double f = floor(x);
  const double frac = x - f;  // exact
  if (frac > 0.5) {
    return f + 1.0;
  }
  if (frac < 0.5) {
    return f;
  }
  return fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

static inline CARVE_HD int carve_pre_clamp_int(int v, int lo, int hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// ---- Letterbox resize (cv::resize INTER_LINEAR, uint8) -----------------------------------

// OpenCV's saturate_cast<short>(v * 2048) for v in [0, 1]: round half to even.
static inline CARVE_HD int32_t carve_pre_resize_coef(float v) {
  return (int32_t)carve_pre_round_half_even((double)CARVE_PRE_FMUL(v, CARVE_PRE_RESIZE_COEF_SCALE));
}

// OpenCV's scale of an src -> dst axis: 1 / (dst / src), both as double.
static inline CARVE_HD double carve_pre_resize_scale(int src, int dst) {
  return 1.0 / ((double)dst / (double)src);
}

// OpenCV's source coordinate (float)((d + 0.5) * scale - 0.5), each operation rounded.
static inline CARVE_HD float carve_pre_resize_src_coord(int d, double scale) {
  const double t = CARVE_PRE_DMUL((double)d + 0.5, scale);
  return (float)CARVE_PRE_DSUB(t, 0.5);
}

// Column dx of an src_w -> new_w resize: leftmost source column *sx and coefficients
// (*a0, *a1); s < 0 or s >= src_w - 1 clamps to one tap (f = 0).
static inline CARVE_HD void carve_pre_resize_column(int dx, int src_w, double scale_x, int32_t* sx,
                                                    int32_t* a0, int32_t* a1) {
  float fx = carve_pre_resize_src_coord(dx, scale_x);
  int s = (int)floorf(fx);
  fx -= (float)s;
  if (s < 0) {
    fx = 0.0f;
    s = 0;
  }
  if (s >= src_w - 1) {
    fx = 0.0f;
    s = src_w - 1;
  }
  *sx = s;
  *a0 = carve_pre_resize_coef(1.0f - fx);
  *a1 = carve_pre_resize_coef(fx);
}

// Row dy of an src_h -> new_h resize: the source rows (*y0, *y1), clamped to
// [0, src_h - 1], and coefficients (*b0, *b1); f is NOT reset at the borders.
static inline CARVE_HD void carve_pre_resize_row(int dy, int src_h, double scale_y, int32_t* y0, int32_t* y1,
                                                 int32_t* b0, int32_t* b1) {
  float fy = carve_pre_resize_src_coord(dy, scale_y);
  const int sy = (int)floorf(fy);
  fy -= (float)sy;
  *y0 = carve_pre_clamp_int(sy, 0, src_h - 1);
  *y1 = carve_pre_clamp_int(sy + 1, 0, src_h - 1);
  *b0 = carve_pre_resize_coef(1.0f - fy);
  *b1 = carve_pre_resize_coef(fy);
}

// Vertical pass, OpenCV's SIMD arithmetic on the horizontal sums S0, S1:
// ((S0>>4)*b0>>16) + ((S1>>4)*b1>>16), then saturate_u8((v+2)>>2).
static inline CARVE_HD uint8_t carve_pre_resize_v(int32_t s0, int32_t s1, int32_t b0, int32_t b1) {
  const int32_t v = (((s0 >> 4) * b0) >> 16) + (((s1 >> 4) * b1) >> 16);
  const int32_t out = (v + 2) >> 2;
  return (uint8_t)(out < 0 ? 0 : (out > 255 ? 255 : out));
}

// ---- Classification (Pillow BILINEAR resize + centre crop) --------------------------------

// Pillow's scale of an in -> out axis (in goes through float, as Pillow's box does).
static inline CARVE_HD double carve_pre_pil_scale(int in, int out) { return (double)(float)in / (double)out; }

// Weights per output of an in -> out axis: ceil(support) * 2 + 1.
static inline CARVE_HD int carve_pre_pil_ksize(int in, int out) {
  const double scale = carve_pre_pil_scale(in, out);
  const double support = scale < 1.0 ? 1.0 : scale;
  return (int)ceil(support) * 2 + 1;
}

static inline CARVE_HD double carve_pre_pil_triangle(double x) {
  if (x < 0.0) {
    x = -x;
  }
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Pillow's precompute_coeffs for output xx of an in -> out axis: bounds[0] = xmin,
// bounds[1] = n, and the n fixed-point weights k[0..n) (k holds ksize slots).
static inline CARVE_HD void carve_pre_pil_coeffs(int in, int out, int xx, int32_t* bounds, int32_t* k) {
  const double scale = carve_pre_pil_scale(in, out);
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;
  const double ss = 1.0 / filterscale;
  const double center = CARVE_PRE_DADD(0.0, CARVE_PRE_DMUL(xx + 0.5, scale));
  int xmin = (int)CARVE_PRE_DADD(CARVE_PRE_DSUB(center, support), 0.5);
  if (xmin < 0) {
    xmin = 0;
  }
  int xmax = (int)CARVE_PRE_DADD(CARVE_PRE_DADD(center, support), 0.5);
  if (xmax > in) {
    xmax = in;
  }
  xmax -= xmin;
  double ww = 0.0;
  for (int x = 0; x < xmax; x++) {
    ww = CARVE_PRE_DADD(ww, carve_pre_pil_triangle(
                                CARVE_PRE_DMUL(CARVE_PRE_DADD(CARVE_PRE_DSUB((double)(x + xmin), center), 0.5), ss)));
  }
  for (int x = 0; x < xmax; x++) {
    double wgt =
        carve_pre_pil_triangle(CARVE_PRE_DMUL(CARVE_PRE_DADD(CARVE_PRE_DSUB((double)(x + xmin), center), 0.5), ss));
    if (ww != 0.0) {
      wgt /= ww;
    }
    k[x] = wgt < 0 ? (int32_t)CARVE_PRE_DADD(-0.5, CARVE_PRE_DMUL(wgt, (double)(1 << CARVE_PRE_PIL_PRECISION_BITS)))
                   : (int32_t)CARVE_PRE_DADD(0.5, CARVE_PRE_DMUL(wgt, (double)(1 << CARVE_PRE_PIL_PRECISION_BITS)));
  }
  bounds[0] = xmin;
  bounds[1] = xmax;
}

// Pillow's clip8: the fixed-point sum to a byte.
static inline CARVE_HD uint8_t carve_pre_pil_clip8(int32_t ss) {
  const int32_t v = ss >> CARVE_PRE_PIL_PRECISION_BITS;  // arithmetic shift, as Pillow's
  return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// Horizontal pass of one output pixel: o[ch] = clip8(2^21 + sum_i in[xmin + i][ch] k[i]).
static inline CARVE_HD void carve_pre_pil_hpixel(const uint8_t* in, int32_t xmin, int32_t n, const int32_t* k,
                                                 uint8_t* o) {
  int32_t s0 = 1 << (CARVE_PRE_PIL_PRECISION_BITS - 1), s1 = s0, s2 = s0;
  for (int32_t i = 0; i < n; i++) {
    const uint8_t* px = in + (size_t)(xmin + i) * 3;
    s0 += px[0] * k[i];
    s1 += px[1] * k[i];
    s2 += px[2] * k[i];
  }
  o[0] = carve_pre_pil_clip8(s0);
  o[1] = carve_pre_pil_clip8(s1);
  o[2] = carve_pre_pil_clip8(s2);
}

// Vertical pass of one output value: clip8(2^21 + sum_j col[j * stride] k[j]), col pointing
// at the value in the first source row.
static inline CARVE_HD uint8_t carve_pre_pil_vvalue(const uint8_t* col, size_t stride, int32_t n, const int32_t* k) {
  int32_t s = 1 << (CARVE_PRE_PIL_PRECISION_BITS - 1);
  for (int32_t j = 0; j < n; j++) {
    s += col[(size_t)j * stride] * k[j];
  }
  return carve_pre_pil_clip8(s);
}

typedef struct carve_pre_classify_plan {
  int new_w, new_h, top, left;
  int resize_x, resize_y;  // the axis is resampled
  int ksize_x, ksize_y;
} carve_pre_classify_plan;

// Resize(out) of a w x h image (torchvision's _compute_resized_output_size), the
// CenterCrop(out) offsets and the kernel sizes of the resampled axes.
static inline CARVE_HD void carve_pre_classify_plan_of(int w, int h, int out, carve_pre_classify_plan* p) {
  const int64_t shorter = w <= h ? w : h, longer = w <= h ? h : w;
  const int new_long = (int)((double)((int64_t)out * longer) / (double)shorter);
  p->new_w = w <= h ? out : new_long;
  p->new_h = w <= h ? new_long : out;
  p->top = (int)carve_pre_round_half_even((p->new_h - out) / 2.0);
  p->left = (int)carve_pre_round_half_even((p->new_w - out) / 2.0);
  p->resize_x = p->new_w != w;
  p->resize_y = p->new_h != h;
  p->ksize_x = p->resize_x ? carve_pre_pil_ksize(w, p->new_w) : 0;
  p->ksize_y = p->resize_y ? carve_pre_pil_ksize(h, p->new_h) : 0;
}

// Scratch of the classification pre-processing of a w x h source to out x out (0 for
// sizes <= 0): bounds and weights of both axes (int32), then h horizontally resampled rows
// of out pixels (uint8, indexed by source row) when x is resampled.
static inline CARVE_HD size_t carve_pre_classify_scratch_bytes(int w, int h, int out) {
  if (w <= 0 || h <= 0 || out <= 0) {
    return 0;
  }
  carve_pre_classify_plan p;
  carve_pre_classify_plan_of(w, h, out, &p);
  const size_t coeffs = (size_t)out * (size_t)(4 + p.ksize_x + p.ksize_y);
  const size_t rows = p.resize_x ? (size_t)h * (size_t)out * 3 : 0;
  return coeffs * sizeof(int32_t) + rows;
}

// The parts of that scratch.
typedef struct carve_pre_classify_scratch {
  int32_t* xb;    // (out, 2) column bounds (xmin, n)
  int32_t* xk;    // (out, ksize_x) column weights
  int32_t* yb;    // (out, 2) row bounds
  int32_t* yk;    // (out, ksize_y) row weights
  uint8_t* rows;  // horizontally resampled rows, (rows, out, 3)
} carve_pre_classify_scratch;

static inline CARVE_HD carve_pre_classify_scratch carve_pre_classify_layout(const carve_pre_classify_plan* p, int out,
                                                                            void* scratch) {
  carve_pre_classify_scratch s;
  s.xb = (int32_t*)scratch;
  s.xk = s.xb + 2 * (size_t)out;
  s.yb = s.xk + (size_t)out * (size_t)p->ksize_x;
  s.yk = s.yb + 2 * (size_t)out;
  s.rows = (uint8_t*)(s.yk + (size_t)out * (size_t)p->ksize_y);
  return s;
}

// The argument checks of carve_classify_preprocess / carve_cu_classify_preprocess (host),
// then the plan (*p) and the scratch's parts (*sc) when they pass.
static inline carve_status carve_pre_classify_prepare(const uint8_t* rgb, int w, int h, size_t stride, int out,
                                                      const void* out_nhwc, void* scratch, carve_pre_classify_plan* p,
                                                      carve_pre_classify_scratch* sc) {
  if (rgb == NULL || out_nhwc == NULL || scratch == NULL || out <= 0 || (uintptr_t)scratch % sizeof(int32_t) != 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (w <= 0 || h <= 0 || stride < (size_t)w * 3) {
    return CARVE_ERR_BAD_IMAGE;
  }
  carve_pre_classify_plan_of(w, h, out, p);
  *sc = carve_pre_classify_layout(p, out, scratch);
  return CARVE_OK;
}

#endif  // CARVE_PRE_MATH_H
