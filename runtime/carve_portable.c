// carve runtime: the portable backend's compute kernels (see carve_portable.h).
//
// Every tensor is NHWC float32 with batch 1 and a pixel stride in floats (see
// carve_rt.h). Sums run in float in a fixed order (bias first, then kernel row,
// kernel column, input channel), so a run is deterministic; it differs from
// XNNPACK's order only by float rounding.

#include "carve_portable.h"

#include "carve_post.h"

#include <math.h>
#include <string.h>

#define OC CARVE_PT_OC
#define PX CARVE_PT_PX

// The register block's loops over its OC accumulators are unrolled in full
// (CARVE_PT_UNROLL), so that the accumulators live in registers and the
// superword vectoriser packs them (GCC's -O2 vectorises such a loop but keeps
// it rolled, its accumulators in memory). With them unrolled, GCC's -O3 loop
// vectoriser would instead vectorise the loop over input channels with
// shuffles, 3x slower: CARVE_PT_NO_LOOP_VECTORIZE turns that off for the one
// function. Other compilers get plain loops.
#if defined(__GNUC__) || defined(__clang__)
#define CARVE_PT_PRAGMA(x) _Pragma(#x)
#define CARVE_PT_UNROLL CARVE_PT_PRAGMA(GCC unroll 8)
#else
#define CARVE_PT_UNROLL
#endif
#if defined(__GNUC__) && !defined(__clang__)
#define CARVE_PT_NO_LOOP_VECTORIZE __attribute__((optimize("no-tree-loop-vectorize")))
#else
#define CARVE_PT_NO_LOOP_VECTORIZE
#endif

static size_t conv_out(size_t in, size_t k, size_t stride, size_t pad) { return (in + 2 * pad - k) / stride + 1; }

// ---- Register block -----------------------------------------------------------

// acc[p][o] += sum_{i < cin} x[p][i] * w[i * OC + o] for PX pixels and OC output
// channels: one (cin, OC) panel of weights against PX input rows. The inner
// loops have constant trip counts, so they vectorise and stay in registers.
_Static_assert(PX == 4, "block_gemm is written for 4 pixels");
_Static_assert(OC <= 8, "CARVE_PT_UNROLL unrolls 8 accumulators");

CARVE_PT_NO_LOOP_VECTORIZE static inline void block_gemm(const float* const x[PX], const float* restrict w, size_t cin,
                                                         float acc[PX][OC]) {
  float a0[OC], a1[OC], a2[OC], a3[OC];
  CARVE_PT_UNROLL
  for (size_t o = 0; o < OC; o++) {
    a0[o] = acc[0][o];
    a1[o] = acc[1][o];
    a2[o] = acc[2][o];
    a3[o] = acc[3][o];
  }
  const float* restrict x0 = x[0];
  const float* restrict x1 = x[1];
  const float* restrict x2 = x[2];
  const float* restrict x3 = x[3];
  for (size_t i = 0; i < cin; i++) {
    const float* restrict wi = w + i * OC;
    const float v0 = x0[i], v1 = x1[i], v2 = x2[i], v3 = x3[i];
    CARVE_PT_UNROLL
    for (size_t o = 0; o < OC; o++) {
      a0[o] += v0 * wi[o];
      a1[o] += v1 * wi[o];
      a2[o] += v2 * wi[o];
      a3[o] += v3 * wi[o];
    }
  }
  CARVE_PT_UNROLL
  for (size_t o = 0; o < OC; o++) {
    acc[0][o] = a0[o];
    acc[1][o] = a1[o];
    acc[2][o] = a2[o];
    acc[3][o] = a3[o];
  }
}

static void block_init(float acc[PX][OC], const float* bias, size_t nc) {
  for (size_t p = 0; p < PX; p++) {
    for (size_t o = 0; o < OC; o++) {
      acc[p][o] = o < nc ? bias[o] : 0.0f;
    }
  }
}

// ---- Convolution --------------------------------------------------------------

// Depthwise: y[oy][ox][c] = b[c] + sum_{ky,kx} x[oy*s-p+ky][ox*s-p+kx][c] * w[ky][kx][c],
// out-of-image taps skipped. Accumulates in the output row, vectorised over c.
static void conv_depthwise(const carve_pt_desc* d, const float* restrict w, const float* restrict b,
                           const float* restrict x, float* restrict y) {
  const size_t h = d->h, wd = d->w, c = d->cin, k_h = d->kh, k_w = d->kw, s = d->stride, pad = d->pad;
  const size_t oh = conv_out(h, k_h, s, pad), ow = conv_out(wd, k_w, s, pad);
  for (size_t oy = 0; oy < oh; oy++) {
    for (size_t ox = 0; ox < ow; ox++) {
      float* restrict yp = y + (oy * ow + ox) * d->out_stride;
      for (size_t ch = 0; ch < c; ch++) {
        yp[ch] = b[ch];
      }
      for (size_t ky = 0; ky < k_h; ky++) {
        const size_t iy = oy * s + ky;  // + pad
        if (iy < pad || iy - pad >= h) {
          continue;
        }
        for (size_t kx = 0; kx < k_w; kx++) {
          const size_t ix = ox * s + kx;
          if (ix < pad || ix - pad >= wd) {
            continue;
          }
          const float* restrict xp = x + ((iy - pad) * wd + (ix - pad)) * d->in_stride;
          const float* restrict wp = w + (ky * k_w + kx) * c;
          for (size_t ch = 0; ch < c; ch++) {
            yp[ch] += xp[ch] * wp[ch];
          }
        }
      }
    }
  }
}

// Dense or grouped: per group g and block of OC output channels, a direct
// convolution over blocks of PX output pixels of one output row:
//   acc[p][o] = b[o] + sum_{ky,kx} sum_i x[iy][ix_p][g*cin_g + i] * W[g][blk][ky][kx][i][o]
// Taps outside the image read the `zeros` row instead, so no im2col copy is made.
static void conv_dense(const carve_pt_desc* d, const float* restrict w, const float* restrict b,
                       const float* restrict x, float* restrict y, const float* zeros) {
  const size_t h = d->h, wd = d->w, k_h = d->kh, k_w = d->kw, s = d->stride, pad = d->pad;
  const size_t groups = d->groups, cin_g = d->cin / groups, cout_g = d->cout / groups;
  const size_t blocks = (cout_g + OC - 1) / OC;
  const size_t panel = k_h * k_w * cin_g * OC;  // floats of one block's weights
  const size_t oh = conv_out(h, k_h, s, pad), ow = conv_out(wd, k_w, s, pad);
  for (size_t g = 0; g < groups; g++) {
    for (size_t blk = 0; blk < blocks; blk++) {
      const float* restrict wb = w + (g * blocks + blk) * panel;
      const size_t co = g * cout_g + blk * OC;  // first output channel of the block
      const size_t nc = cout_g - blk * OC < OC ? cout_g - blk * OC : OC;
      for (size_t oy = 0; oy < oh; oy++) {
        for (size_t ox0 = 0; ox0 < ow; ox0 += PX) {
          const size_t np = ow - ox0 < PX ? ow - ox0 : PX;
          float acc[PX][OC];
          block_init(acc, b + co, nc);
          for (size_t ky = 0; ky < k_h; ky++) {
            const size_t iy = oy * s + ky;  // + pad
            const int row_in = iy >= pad && iy - pad < h;
            for (size_t kx = 0; kx < k_w; kx++) {
              const float* xp[PX];
              for (size_t p = 0; p < PX; p++) {
                const size_t ix = (ox0 + p) * s + kx;
                xp[p] = (row_in && p < np && ix >= pad && ix - pad < wd)
                            ? x + ((iy - pad) * wd + (ix - pad)) * d->in_stride + g * cin_g
                            : zeros;
              }
              block_gemm(xp, wb + (ky * k_w + kx) * cin_g * OC, cin_g, acc);
            }
          }
          for (size_t p = 0; p < np; p++) {
            float* restrict yp = y + (oy * ow + ox0 + p) * d->out_stride + co;
            for (size_t o = 0; o < nc; o++) {
              yp[o] = acc[p][o];
            }
          }
        }
      }
    }
  }
}

static void conv2d(const carve_pt_desc* d, const float* w, const float* b, const float* x, float* y,
                   const float* zeros) {
  if (d->groups == d->cin && d->cin == d->cout) {
    conv_depthwise(d, w, b, x, y);
  } else {
    conv_dense(d, w, b, x, y, zeros);
  }
}

// Transposed convolution with stride = kernel = k and no padding: every input
// pixel owns a k x k patch of output pixels,
//   y[iy*k+ky][ix*k+kx][o] = b[o] + sum_i x[iy][ix][i] * W[blk][ky][kx][i][o],
// so each kernel tap is a 1x1 convolution over the input written to a strided
// subset of the output.
static void deconv2d(const carve_pt_desc* d, const float* restrict w, const float* restrict b,
                     const float* restrict x, float* restrict y, const float* zeros) {
  const size_t h = d->h, wd = d->w, k = d->kh, cin = d->cin, cout = d->cout;
  const size_t blocks = (cout + OC - 1) / OC;
  const size_t ow = wd * k;
  for (size_t blk = 0; blk < blocks; blk++) {
    const size_t co = blk * OC;
    const size_t nc = cout - co < OC ? cout - co : OC;
    for (size_t ky = 0; ky < k; ky++) {
      for (size_t kx = 0; kx < k; kx++) {
        const float* restrict wt = w + ((blk * k + ky) * k + kx) * cin * OC;
        for (size_t iy = 0; iy < h; iy++) {
          for (size_t ix0 = 0; ix0 < wd; ix0 += PX) {
            const size_t np = wd - ix0 < PX ? wd - ix0 : PX;
            const float* xp[PX];
            for (size_t p = 0; p < PX; p++) {
              xp[p] = p < np ? x + (iy * wd + ix0 + p) * d->in_stride : zeros;
            }
            float acc[PX][OC];
            block_init(acc, b + co, nc);
            block_gemm(xp, wt, cin, acc);
            for (size_t p = 0; p < np; p++) {
              float* restrict yp = y + ((iy * k + ky) * ow + (ix0 + p) * k + kx) * d->out_stride + co;
              for (size_t o = 0; o < nc; o++) {
                yp[o] = acc[p][o];
              }
            }
          }
        }
      }
    }
  }
}

// ---- Pooling ------------------------------------------------------------------

// y[oy][ox][c] = max over the in-image taps of the k x k window at (oy*s-p, ox*s-p)
// (padding acts as -inf, as in PyTorch's max_pool2d).
static void maxpool2d(const carve_pt_desc* d, const float* restrict x, float* restrict y) {
  const size_t h = d->h, wd = d->w, c = d->cin, k = d->kh, s = d->stride, pad = d->pad;
  const size_t oh = conv_out(h, k, s, pad), ow = conv_out(wd, k, s, pad);
  for (size_t oy = 0; oy < oh; oy++) {
    for (size_t ox = 0; ox < ow; ox++) {
      float* restrict yp = y + (oy * ow + ox) * d->out_stride;
      for (size_t ch = 0; ch < c; ch++) {
        yp[ch] = -INFINITY;
      }
      for (size_t ky = 0; ky < k; ky++) {
        const size_t iy = oy * s + ky;
        if (iy < pad || iy - pad >= h) {
          continue;
        }
        for (size_t kx = 0; kx < k; kx++) {
          const size_t ix = ox * s + kx;
          if (ix < pad || ix - pad >= wd) {
            continue;
          }
          const float* restrict xp = x + ((iy - pad) * wd + (ix - pad)) * d->in_stride;
          for (size_t ch = 0; ch < c; ch++) {
            yp[ch] = xp[ch] > yp[ch] ? xp[ch] : yp[ch];
          }
        }
      }
    }
  }
}

// y[c] = (sum over pixels p of x[p][c]) / (h * w), summed in pixel order.
static void global_avgpool(const carve_pt_desc* d, const float* restrict x, float* restrict y) {
  const size_t pixels = (size_t)d->h * d->w, c = d->cin;
  for (size_t ch = 0; ch < c; ch++) {
    y[ch] = 0.0f;
  }
  for (size_t p = 0; p < pixels; p++) {
    const float* restrict xp = x + p * d->in_stride;
    for (size_t ch = 0; ch < c; ch++) {
      y[ch] += xp[ch];
    }
  }
  const float n = (float)pixels;
  for (size_t ch = 0; ch < c; ch++) {
    y[ch] /= n;
  }
}

// ---- Fully connected --------------------------------------------------------------

// y[o] = b[o] + sum_i x[i] * W[i][o] (W stored (cin, cout)), vectorised over o.
static void fully_connected(const carve_pt_desc* d, const float* restrict w, const float* restrict b,
                            const float* restrict x, float* restrict y) {
  const size_t cin = d->cin, cout = d->cout;
  for (size_t o = 0; o < cout; o++) {
    y[o] = b[o];
  }
  for (size_t i = 0; i < cin; i++) {
    const float xi = x[i];
    const float* restrict wi = w + i * cout;
    for (size_t o = 0; o < cout; o++) {
      y[o] += xi * wi[o];
    }
  }
}

// ---- Element-wise ---------------------------------------------------------------

// y = a + b over n contiguous floats.
static void add(const float* restrict a, const float* restrict b, float* restrict y, size_t n) {
  for (size_t i = 0; i < n; i++) {
    y[i] = a[i] + b[i];
  }
}

// y[p][0:c] = x[p][0:c] for every pixel (a channel slice into its slot of a concat).
static void copy_channels(const carve_pt_desc* d, const float* restrict x, float* restrict y) {
  const size_t pixels = (size_t)d->h * d->w;
  for (size_t p = 0; p < pixels; p++) {
    memcpy(y + p * d->out_stride, x + p * d->in_stride, (size_t)d->cin * sizeof(float));
  }
}

// ---- Dispatch -------------------------------------------------------------------

carve_status carve_pt_run(const carve_pt_desc* d, const float* weights, float* arena, const float* zeros) {
  if (d == NULL || arena == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const int weighted = d->kind == CARVE_PT_CONV || d->kind == CARVE_PT_DECONV || d->kind == CARVE_PT_FC;
  const int padded = d->kind == CARVE_PT_CONV || d->kind == CARVE_PT_DECONV;
  if ((weighted && weights == NULL) || (padded && zeros == NULL)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const float* x = arena + d->in_off;
  float* y = arena + d->out_off;
  const float* w = weighted ? weights + d->weight_off : NULL;
  const float* b = weighted ? weights + d->bias_off : NULL;
  switch (d->kind) {
    case CARVE_PT_CONV:
      conv2d(d, w, b, x, y, zeros);
      return CARVE_OK;
    case CARVE_PT_DECONV:
      deconv2d(d, w, b, x, y, zeros);
      return CARVE_OK;
    case CARVE_PT_MAXPOOL:
      maxpool2d(d, x, y);
      return CARVE_OK;
    case CARVE_PT_COPY:
      copy_channels(d, x, y);
      return CARVE_OK;
    case CARVE_PT_ADD:
      add(x, arena + d->in2_off, y, (size_t)d->h * d->w * d->cin);
      return CARVE_OK;
    case CARVE_PT_GAP:
      global_avgpool(d, x, y);
      return CARVE_OK;
    case CARVE_PT_FC:
      fully_connected(d, w, b, x, y);
      return CARVE_OK;
    case CARVE_PT_SOFTMAX:
      return carve_softmax(x, d->cin, y);  // carve_post.c: as torch.softmax in float32
  }
  return CARVE_ERR_INVALID_ARGUMENT;  // an unknown kind
}
