// carve runtime: instance masks (see carve_mask.h).
//
// carve_mask_native reproduces two F.interpolate(mode="bilinear",
// align_corners=False) calls of PyTorch's CPU kernel (UpSampleKernel.cpp,
// HelperInterpLinear) bit for bit, in float:
//   * scale = 1 / f when a scale factor is given, in_size / out_size otherwise;
//   * source index s = scale * (d + 0.5) - 0.5, clamped below at 0; i0 =
//     min(floor(s), in - 1), i1 = i0 + 1 unless i0 is the last index (then i0);
//     l = clamp(s - i0, 0, 1); weights (1 - l, l);
//   * along x then along y, each step rounded as PyTorch's x86 build rounds it
//     (its AVX2 / AVX-512 kernels contract the first product into an FMA):
//       t0 = fmaf(g[y0][x0], wx0, g[y0][x1] * wx1), t1 likewise for row y1,
//       out = fmaf(t0, wy0, t1 * wy1).
// The products that must stay separate are held in volatile floats so that no
// compiler contracts them (-ffp-contract=fast, the GNU C default); fmaf is the
// exactly rounded fused multiply-add of C99 wherever the CPU lacks one.

#include "carve_mask.h"

#include <math.h>
#include <string.h>

// ---- Mask logits ------------------------------------------------------------

typedef struct logits_ctx {
  const float* rows;
  size_t n, row_stride, coef_offset, nm;
  const carve_view* protos;
  float* logits;
} logits_ctx;

#define CARVE_LOGITS_TILE 16       // pixels per inner block
#define CARVE_LOGITS_MAX_FAST 64   // channels the blocked path holds on the stack

// Every product coef * proto of two floats is exact in double, so the sum of
// them taken in channel order is the same number whether the compiler fuses
// the multiply into the add or not, and whichever loop computes it.

// One row's logit at one pixel: the plain loop.
static float logit_at(const float* coef, const float* proto, size_t nm) {
  double acc = 0.0;
  for (size_t c = 0; c < nm; c++) {
    acc += (double)coef[c] * (double)proto[c];
  }
  return (float)acc;
}

// Pixels [start, start + count): every row's logit at each of them. Blocks of
// CARVE_LOGITS_TILE pixels are transposed to (channel, pixel) on the stack so
// that the inner loop runs over pixels (vectorisable, no reduction).
static void logits_tile(void* context, size_t start, size_t count) {
  const logits_ctx* ctx = context;
  const size_t pixels = ctx->protos->h * ctx->protos->w;
  const size_t nm = ctx->nm, pstride = ctx->protos->stride;
  const float* protos = ctx->protos->data;
  size_t p = start;
  if (nm <= CARVE_LOGITS_MAX_FAST) {
    float block[CARVE_LOGITS_MAX_FAST][CARVE_LOGITS_TILE];  // (nm, tile) prototypes
    for (; p + CARVE_LOGITS_TILE <= start + count; p += CARVE_LOGITS_TILE) {
      for (size_t j = 0; j < CARVE_LOGITS_TILE; j++) {
        for (size_t c = 0; c < nm; c++) {
          block[c][j] = protos[(p + j) * pstride + c];
        }
      }
      for (size_t i = 0; i < ctx->n; i++) {
        const float* coef = ctx->rows + i * ctx->row_stride + ctx->coef_offset;  // (nm)
        double acc[CARVE_LOGITS_TILE] = {0.0};
        for (size_t c = 0; c < nm; c++) {
          const double k = coef[c];
          for (size_t j = 0; j < CARVE_LOGITS_TILE; j++) {
            acc[j] += k * (double)block[c][j];
          }
        }
        float* out = ctx->logits + i * pixels + p;
        for (size_t j = 0; j < CARVE_LOGITS_TILE; j++) {
          out[j] = (float)acc[j];
        }
      }
    }
  }
  for (; p < start + count; p++) {
    for (size_t i = 0; i < ctx->n; i++) {
      ctx->logits[i * pixels + p] = logit_at(ctx->rows + i * ctx->row_stride + ctx->coef_offset,
                                             protos + p * pstride, nm);
    }
  }
}

carve_status carve_mask_logits(const float* rows, size_t n, size_t row_stride, size_t coef_offset,
                               const carve_view* protos, float* logits, pthreadpool_t pool) {
  if (n == 0) {
    return CARVE_OK;
  }
  if (rows == NULL || protos == NULL || protos->data == NULL || logits == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t nm = protos->c;
  if (nm == 0 || protos->stride < nm || (n > 1 && row_stride < coef_offset + nm)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  logits_ctx ctx = {rows, n, row_stride, coef_offset, nm, protos, logits};
  carve_parallelize_1d_tile(pool, logits_tile, &ctx, protos->h * protos->w,
                            16 * CARVE_LOGITS_TILE);
  return CARVE_OK;
}

// ---- Rounding and geometry --------------------------------------------------

// Python's round(x) for a double: nearest integer, ties to even.
static double round_half_even(double x) {
  const double f = floor(x);
  const double frac = x - f;
  if (frac > 0.5) {
    return f + 1.0;
  }
  if (frac < 0.5) {
    return f;
  }
  return fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

// max(round(size * gain), 1): the size LetterBox gives a side of the image.
static int64_t resized_side(int64_t size, double gain) {
  const double r = round_half_even((double)size * gain);
  return r < 1.0 ? 1 : (int64_t)r;
}

static int64_t gcd64(int64_t a, int64_t b) {
  a = a < 0 ? -a : a;
  b = b < 0 ? -b : b;
  while (b != 0) {
    const int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// Python's a // 2 (floor division) for any sign.
static int64_t floor_half(int64_t a) { return a >= 0 ? a / 2 : -((-a + 1) / 2); }

// Where process_mask_native / scale_masks take the logits, see carve_mask.h.
typedef struct native_geometry {
  int64_t f;         // upsample factor 1, 2 or 4
  int64_t gh, gw;    // (f mh, f mw) grid
  int identity;      // the grid is already (h, w): scale_masks returns it as is
  int64_t top, left; // the crop of the grid that is resized to (h, w)
  int64_t ch, cw;
} native_geometry;

static int native_geometry_of(size_t mh, size_t mw, int src_w, int src_h, native_geometry* g) {
  if (mh == 0 || mw == 0 || src_w <= 0 || src_h <= 0 || mh > (1u << 24) || mw > (1u << 24)) {
    return 0;
  }
  const int64_t h = src_h, w = src_w;
  const int64_t in_h = 4 * (int64_t)mh, in_w = 4 * (int64_t)mw;
  const double gain = fmin((double)in_h / (double)h, (double)in_w / (double)w);
  const int64_t pad = (in_h - resized_side(h, gain)) | (in_w - resized_side(w, gain));
  g->f = 4 / gcd64(4, pad | floor_half(pad));
  g->gh = g->f * (int64_t)mh;
  g->gw = g->f * (int64_t)mw;
  g->identity = g->gh == h && g->gw == w;
  if (g->identity) {
    g->top = g->left = 0;
    g->ch = h;
    g->cw = w;
    return 1;
  }
  const double g2 = fmin((double)g->gh / (double)h, (double)g->gw / (double)w);
  const int64_t new_h = resized_side(h, g2), new_w = resized_side(w, g2);
  const double pad_h = (double)(g->gh - new_h) / 2.0, pad_w = (double)(g->gw - new_w) / 2.0;
  int64_t top = (int64_t)round_half_even(pad_h - 0.1);
  int64_t left = (int64_t)round_half_even(pad_w - 0.1);
  int64_t bottom = top + new_h, right = left + new_w;
  // masks[..., top:bottom, left:right]; the bounds are inside the grid for any
  // real letterbox, clamped here as a slice would clamp them.
  top = top < 0 ? 0 : (top > g->gh ? g->gh : top);
  left = left < 0 ? 0 : (left > g->gw ? g->gw : left);
  bottom = bottom > g->gh ? g->gh : (bottom < top ? top : bottom);
  right = right > g->gw ? g->gw : (right < left ? left : right);
  g->top = top;
  g->left = left;
  g->ch = bottom - top;
  g->cw = right - left;
  return g->ch > 0 && g->cw > 0;
}

// ---- Bilinear taps (PyTorch, align_corners=False) ---------------------------

typedef struct lin_tap {
  int32_t i0, i1;  // source indices
  float w0, w1;    // their weights, 1 - l and l
} lin_tap;

static lin_tap linear_tap(float scale, int64_t d, int64_t in_size) {
  volatile float scaled = scale * ((float)d + 0.5f);  // rounded before the subtraction
  float s = scaled - 0.5f;
  if (s < 0.0f) {
    s = 0.0f;
  }
  int64_t i0 = (int64_t)floorf(s);
  if (i0 > in_size - 1) {
    i0 = in_size - 1;
  }
  float l = s - (float)i0;
  l = l < 0.0f ? 0.0f : (l > 1.0f ? 1.0f : l);
  lin_tap t;
  t.i0 = (int32_t)i0;
  t.i1 = (int32_t)(i0 < in_size - 1 ? i0 + 1 : i0);
  t.w0 = 1.0f - l;
  t.w1 = l;
  return t;
}

// fmaf(v0, w0, v1 * w1) with the product rounded on its own.
static float lerp_torch(float v0, float w0, float v1, float w1) {
  volatile float p1 = v1 * w1;
  return fmaf(v0, w0, p1);
}

// ---- Masks on the original image --------------------------------------------

// Scratch: taps for the output columns (w) and rows (h), for the grid columns
// (gw) and rows (gh), then the (gh, gw) float grid block when f > 1.
size_t carve_mask_native_scratch_bytes(size_t mh, size_t mw, const carve_letterbox_info* info) {
  native_geometry g;
  if (info == NULL || !native_geometry_of(mh, mw, info->src_w, info->src_h, &g)) {
    return 0;
  }
  const size_t taps = (size_t)info->src_w + (size_t)info->src_h + (size_t)g.gw + (size_t)g.gh;
  const size_t grid = g.f > 1 ? (size_t)g.gh * (size_t)g.gw : 0;
  return taps * sizeof(lin_tap) + grid * sizeof(float);
}

typedef struct native_ctx {
  const float* logits;  // (mh, mw)
  size_t mw;
  const lin_tap* grid_x;  // (gw) grid column -> logit columns
  const lin_tap* grid_y;  // (gh)
  const lin_tap* out_x;   // (w) output column -> crop column
  const lin_tap* out_y;   // (h)
  const float* block;     // (ny, nx) grid values of rows gy_lo.., columns gx_lo..
  float* grid;            // where native_grid_tile writes the block when f > 1
  int64_t gy_lo, gx_lo, nx;
  int64_t top, left;
  int64_t c0, c1;         // output columns inside the box
  int64_t r0;             // first output row inside the box
  int identity;
  uint8_t* mask;
  size_t w;
} native_ctx;

// Grid rows [start, start + count) of the block: the f-times upsampled logits.
static void native_grid_tile(void* context, size_t start, size_t count) {
  const native_ctx* ctx = context;
  for (size_t r = start; r < start + count; r++) {
    const lin_tap ty = ctx->grid_y[ctx->gy_lo + (int64_t)r];
    const float* l0 = ctx->logits + (size_t)ty.i0 * ctx->mw;
    const float* l1 = ctx->logits + (size_t)ty.i1 * ctx->mw;
    float* out = ctx->grid + r * (size_t)ctx->nx;
    for (int64_t x = 0; x < ctx->nx; x++) {
      const lin_tap tx = ctx->grid_x[ctx->gx_lo + x];
      const float t0 = lerp_torch(l0[tx.i0], tx.w0, l0[tx.i1], tx.w1);
      const float t1 = lerp_torch(l1[tx.i0], tx.w0, l1[tx.i1], tx.w1);
      out[x] = lerp_torch(t0, ty.w0, t1, ty.w1);
    }
  }
}

// Output rows r0 + [start, start + count): resize the crop, threshold at 0.
static void native_output_tile(void* context, size_t start, size_t count) {
  const native_ctx* ctx = context;
  for (size_t i = start; i < start + count; i++) {
    const int64_t r = ctx->r0 + (int64_t)i;
    uint8_t* out = ctx->mask + (size_t)r * ctx->w;
    const lin_tap ty = ctx->out_y[r];
    const float* g0 = ctx->block + (size_t)(ctx->top + ty.i0 - ctx->gy_lo) * (size_t)ctx->nx;
    const float* g1 = ctx->block + (size_t)(ctx->top + ty.i1 - ctx->gy_lo) * (size_t)ctx->nx;
    for (int64_t c = ctx->c0; c < ctx->c1; c++) {
      const lin_tap tx = ctx->out_x[c];
      const int64_t x0 = ctx->left + tx.i0 - ctx->gx_lo, x1 = ctx->left + tx.i1 - ctx->gx_lo;
      float v;
      if (ctx->identity) {
        v = g0[x0];
      } else {
        const float t0 = lerp_torch(g0[x0], tx.w0, g0[x1], tx.w1);
        const float t1 = lerp_torch(g1[x0], tx.w0, g1[x1], tx.w1);
        v = lerp_torch(t0, ty.w0, t1, ty.w1);
      }
      out[c] = v > 0.0f;
    }
  }
}

// The index range [lo, hi) of 0 .. n - 1 with a <= (float)i < b (crop_mask's
// compare; an interval since (float)i increases with i).
static void box_range(float a, float b, int64_t n, int64_t* lo, int64_t* hi) {
  int64_t i = 0;
  while (i < n && !((float)i >= a && (float)i < b)) {
    i++;
  }
  *lo = i;
  while (i < n && (float)i < b) {
    i++;
  }
  *hi = i;
}

carve_status carve_mask_native(const float* logits, size_t mh, size_t mw,
                               const carve_letterbox_info* info, const float box[4],
                               uint8_t* mask, void* scratch, pthreadpool_t pool) {
  if (logits == NULL || info == NULL || box == NULL || mask == NULL || scratch == NULL ||
      (uintptr_t)scratch % _Alignof(float) != 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  native_geometry g;
  if (!native_geometry_of(mh, mw, info->src_w, info->src_h, &g)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const int64_t h = info->src_h, w = info->src_w;
  memset(mask, 0, (size_t)h * (size_t)w);

  int64_t c0, c1, r0, r1;
  box_range(box[0], box[2], w, &c0, &c1);
  box_range(box[1], box[3], h, &r0, &r1);
  if (c0 >= c1 || r0 >= r1) {
    return CARVE_OK;  // empty box: nothing survives crop_mask
  }

  // Scratch (see carve_mask_native_scratch_bytes).
  lin_tap* out_x = scratch;        // (w)
  lin_tap* out_y = out_x + w;      // (h)
  lin_tap* grid_x = out_y + h;     // (gw)
  lin_tap* grid_y = grid_x + g.gw; // (gh)
  float* grid = (float*)(grid_y + g.gh);

  // Output taps into the crop (scale = in / out in float), only inside the box.
  if (!g.identity) {
    const float sx = (float)g.cw / (float)w, sy = (float)g.ch / (float)h;
    for (int64_t c = c0; c < c1; c++) {
      out_x[c] = linear_tap(sx, c, g.cw);
    }
    for (int64_t r = r0; r < r1; r++) {
      out_y[r] = linear_tap(sy, r, g.ch);
    }
  } else {
    for (int64_t c = c0; c < c1; c++) {
      out_x[c] = (lin_tap){(int32_t)c, (int32_t)c, 1.0f, 0.0f};
    }
    for (int64_t r = r0; r < r1; r++) {
      out_y[r] = (lin_tap){(int32_t)r, (int32_t)r, 1.0f, 0.0f};
    }
  }

  // The grid rows and columns those taps read: a block of the (gh, gw) grid.
  const int64_t gy_lo = g.top + out_y[r0].i0, gy_hi = g.top + out_y[r1 - 1].i1;
  const int64_t gx_lo = g.left + out_x[c0].i0, gx_hi = g.left + out_x[c1 - 1].i1;
  native_ctx ctx = {
      .logits = logits, .mw = mw, .grid_x = grid_x, .grid_y = grid_y, .out_x = out_x,
      .out_y = out_y, .gy_lo = gy_lo, .gx_lo = gx_lo, .nx = gx_hi - gx_lo + 1,
      .top = g.top, .left = g.left, .c0 = c0, .c1 = c1, .r0 = r0,
      .identity = g.identity, .mask = mask, .w = (size_t)w,
  };
  if (g.f == 1) {
    // The grid is the logits themselves: read them in place.
    ctx.block = logits;
    ctx.nx = (int64_t)mw;
    ctx.gy_lo = 0;
    ctx.gx_lo = 0;
  } else {
    const float inv_f = (float)(1.0 / (double)g.f);  // F.interpolate(scale_factor=f)
    for (int64_t x = gx_lo; x <= gx_hi; x++) {
      grid_x[x] = linear_tap(inv_f, x, (int64_t)mw);
    }
    for (int64_t y = gy_lo; y <= gy_hi; y++) {
      grid_y[y] = linear_tap(inv_f, y, (int64_t)mh);
    }
    ctx.block = grid;
    ctx.grid = grid;
    carve_parallelize_1d_tile(pool, native_grid_tile, &ctx, (size_t)(gy_hi - gy_lo + 1), 16);
  }
  carve_parallelize_1d_tile(pool, native_output_tile, &ctx, (size_t)(r1 - r0), 16);
  return CARVE_OK;
}

// ---- Run-length encoding ----------------------------------------------------

size_t carve_rle_encode(const uint8_t* mask, int w, int h, uint32_t* counts, size_t capacity) {
  if (w < 0 || h < 0) {
    return 0;
  }
  const uint64_t total = (uint64_t)w * (uint64_t)h;
  if (total > UINT32_MAX || (total > 0 && mask == NULL)) {
    return 0;
  }
  if (counts == NULL) {
    capacity = 0;
  }
  size_t n = 0;
  uint8_t prev = 0;  // runs start with background
  uint32_t run = 0;
  for (int x = 0; x < w; x++) {
    for (int y = 0; y < h; y++) {
      const uint8_t v = mask[(size_t)y * (size_t)w + (size_t)x] != 0;
      if (v != prev) {
        if (n < capacity) {
          counts[n] = run;
        }
        n++;
        run = 0;
        prev = v;
      }
      run++;
    }
  }
  if (n < capacity) {
    counts[n] = run;
  }
  return n + 1;
}
