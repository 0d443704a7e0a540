// carve runtime: the Winograd F(2x2, 3x3) convolution, carve_conv3x3s1_winograd (see carve_winograd.h).
//
// The instruction-set variants sit side by side in this file (portable C, AVX-512, AVX2 + FMA, aarch64 NEON),
// sharing the tiling (wino_patch, wino_out_tile); each variant is its input transform, GEMMs and output
// transform (a wino_isa), and one driver checks the arguments and walks the slots and groups for all of them.

#include "carve_winograd.h"
#include "carve_winograd_isa.h"
#include "carve_simd.h"

// ---- Winograd convolution -------------------------------------------------------
//
// A 3x3, stride 1, pad 1 convolution by Winograd F(2x2, 3x3) (bench/winograd_vs_xnnpack.c: 1.25x to 2.35x
// XNNPACK's direct convolution + SiLU pass on yolo26n/s's shapes, one thread). The output is cut into 2x2
// tiles, numbered row-major and taken CARVE_WINOGRAD_TILES at a time (a group; tiles past the last are all
// zeros). For each block of CARVE_WINOGRAD_KC input channels the input transform B^T d B of the 4x4 input
// patches (zeros outside the image) writes U[16][TILES][kc], and 16 GEMMs TILES x kc x cout accumulate
// U[k] x weights[k] into M[16][TILES][cout]; then the output transform A^T m A gives the 2x2 outputs, to
// which the bias, the activation and the residual are applied in registers before the (clipped) store.
// The transforms are additions and subtractions only, the same on every path; the GEMMs sum over the input
// channels in increasing order, with FMA on the x86-64 paths (AVX-512: 12 tiles x 32 channels in 24
// registers, or 12 x 16 for the last 16 channels; AVX2 + FMA: 6 tiles x 16 channels), with CARVE_MLA in
// the portable loops (2 tiles x 16 channels, which compilers vectorise); on aarch64 NEON replaces the
// portable path (GEMM 4 tiles x 16 channels, 16 accumulators and vfmaq_laneq_f32, 1.33 instructions per FMA
// in GCC 12's inner loop; NEON transforms, the portable SiLU): checked under qemu-aarch64 only, its speed
// unmeasured. One thread, 40x40x64 -> 64:
// 0.41 ms on AVX-512, 0.75 ms on AVX2 + FMA, 3.2 ms portable (SSE2); 80x80x32 -> 32: 0.54, 0.88, 4.0 ms. A tile's result depends only on its own data, so neither the split of the groups
// over the slots nor the number of threads changes a bit.
// Channels come in multiples of 8 (CARVE_WINOGRAD_CHANNEL_MULTIPLE): every path keeps its blocks of 16 (or 32)
// and ends an odd multiple of 8 with one 8-channel block, so the multiples of 16 run as before. On AVX-512 the
// transforms of that block load and store with the mask 0x00ff (a plain 512-bit load would read past the last
// pixel's channels) and the GEMM of the last 8 output channels is wino_gemm8_avx2 (12 tiles x 8 channels in
// 256-bit registers, shared with the AVX2 path); the portable and NEON loops have 8-channel instances. With
// exactly 8 channels the AVX-512 transforms take two tiles per register instead (input when the block has 8
// channels, output when cout is 8): their rows of U or M are adjacent. This is for yolo26n's model.2
// bottleneck (160x160, 16 -> 8, then 8 -> 16 + residual), XNNPACK's until then: one thread, 1.66x and 1.15x
// XNNPACK + its SiLU (+ residual) pass (docs/performance.md).

#define WINO_TILES CARVE_WINOGRAD_TILES
#define WINO_KC CARVE_WINOGRAD_KC
#define WINO_PAD 16  // floats after each plane of U and M: the 16 planes do not share one L1 set
#define WINO_U_PLANE (WINO_TILES * WINO_KC + WINO_PAD)

_Static_assert(CARVE_WINOGRAD_KC % 16 == 0 && CARVE_WINOGRAD_TILES % 12 == 0,
               "the micro-kernels take 12 (or 2 x 6, 3 x 4) tiles and 16 channels at a time");

// Input for the positions of a 4x4 patch outside the image (or of a tile past the last).
static const float wino_zeros[WINO_KC];

typedef struct wino_ctx wino_ctx;

// The instruction-set-specific part of a variant: the input transform of tiles [t0, t0 + WINO_TILES), channels
// [c0, c0 + kc), into U; the 16 GEMMs of that channel block into M; the output transform of the group into y.
typedef struct wino_isa {
  void (*input)(const wino_ctx* c, size_t t0, size_t c0, size_t kc, float* U);
  void (*gemms)(const wino_ctx* c, const float* U, size_t c0, size_t kc, float* M);
  void (*output)(const wino_ctx* c, const float* M, size_t t0);
} wino_isa;

struct wino_ctx {
  const float* x;          // (h, w, cin), pixel stride x_stride
  size_t x_stride, h, w, cin;
  const float* weights;    // (16, cin, cout)
  const float* bias;       // (cout)
  size_t cout;
  float* y;                // (h, w, cout), pixel stride y_stride
  size_t y_stride;
  const float* residual;   // (h, w, cout), pixel stride r_stride, or NULL
  size_t r_stride;
  size_t tw, tiles, groups, slots;  // tiles per row, tiles, groups of WINO_TILES tiles, slots
  unsigned char* scratch;  // slots of CARVE_WINOGRAD_SLOT_BYTES(cout)
  int silu;
  const wino_isa* isa;     // the variant's transforms and GEMMs
};

// A tile's number and its row and column in the grid of tiles, stepped one tile at a time: a division per
// tile (t / tw) cost some 8% of a 160x160x8 -> 16 layer, whose tiles carry little work each.
typedef struct wino_pos {
  size_t t, ty, tx;
} wino_pos;

static inline wino_pos wino_pos_at(const wino_ctx* c, size_t t) {
  const wino_pos q = {t, t / c->tw, t % c->tw};
  return q;
}

static inline void wino_pos_next(const wino_ctx* c, wino_pos* q) {
  q->t++;
  if (++q->tx == c->tw) {
    q->tx = 0;
    q->ty++;
  }
}

// p[r * 4 + q]: channels [c0, c0 + kc) of the input pixel (2 ty + r - 1, 2 tx + q - 1) of tile t, or zeros.
static inline void wino_patch(const wino_ctx* c, const wino_pos* t, size_t c0, const float* p[16]) {
  const size_t ty = t->ty, tx = t->tx;
  if (t->t < c->tiles && ty >= 1 && tx >= 1 && 2 * ty + 3 <= c->h && 2 * tx + 3 <= c->w) {
    // inside the image (most tiles): 16 pixels at fixed offsets from the first
    const float* p0 = c->x + ((2 * ty - 1) * c->w + (2 * tx - 1)) * c->x_stride + c0;
    for (size_t r = 0; r < 4; r++) {
      for (size_t q = 0; q < 4; q++) {
        p[r * 4 + q] = p0 + (r * c->w + q) * c->x_stride;
      }
    }
    return;
  }
  for (size_t r = 0; r < 4; r++) {
    for (size_t q = 0; q < 4; q++) {
      const size_t iy = 2 * ty + r, ix = 2 * tx + q;  // plus one
      const int inside = t->t < c->tiles && iy >= 1 && ix >= 1 && iy <= c->h && ix <= c->w;
      p[r * 4 + q] = inside ? c->x + ((iy - 1) * c->w + (ix - 1)) * c->x_stride + c0 : wino_zeros;
    }
  }
}

// The 2x2 output pixels of tile t (top-left, top-right, bottom-left, bottom-right): where to store them in y,
// their residuals (NULL without one) and which lie inside the image (the right column and bottom row of a tile
// at an odd edge do not).
static inline void wino_out_tile(const wino_ctx* c, const wino_pos* t, float* yp[4], const float* rp[4],
                                 int inside[4]) {
  const size_t oy = 2 * t->ty, ox = 2 * t->tx;
  const size_t pix[4] = {oy * c->w + ox, oy * c->w + ox + 1, (oy + 1) * c->w + ox, (oy + 1) * c->w + ox + 1};
  const int dx = ox + 1 < c->w, dy = oy + 1 < c->h;
  inside[0] = 1;
  inside[1] = dx;
  inside[2] = dy;
  inside[3] = dx && dy;
  for (int k = 0; k < 4; k++) {
    yp[k] = c->y + pix[k] * c->y_stride;
    rp[k] = c->residual != NULL ? c->residual + pix[k] * c->r_stride : NULL;
  }
}

static inline float* wino_m(unsigned char* slot) { return (float*)(void*)slot + 16 * WINO_U_PLANE; }

static inline size_t wino_m_plane(const wino_ctx* c) { return WINO_TILES * c->cout + WINO_PAD; }

// ---- portable

// Inlined with a constant channel count (16 or 8), so that each width is a loop the compiler vectorises.
#if defined(__GNUC__)
#define WINO_INLINE __attribute__((always_inline)) static inline
#else
#define WINO_INLINE static inline
#endif

// n (16 or 8) channels from ci of one tile's input transform; u is the tile's row of plane 0 (at channel 0).
WINO_INLINE void wino_input_block_portable(const float* const p[16], size_t ci, float* u, const int n) {
  float d[16][16], e[16][16];
  for (int i = 0; i < 16; i++) {
    for (int j = 0; j < n; j++) {
      d[i][j] = p[i][ci + j];
    }
  }
  for (int q = 0; q < 4; q++) {  // B^T d
    for (int j = 0; j < n; j++) {
      e[q][j] = d[q][j] - d[8 + q][j];
      e[4 + q][j] = d[4 + q][j] + d[8 + q][j];
      e[8 + q][j] = d[8 + q][j] - d[4 + q][j];
      e[12 + q][j] = d[4 + q][j] - d[12 + q][j];
    }
  }
  for (int r = 0; r < 4; r++) {  // (B^T d) B
    float* ur = u + (size_t)(r * 4) * WINO_U_PLANE + ci;
    for (int j = 0; j < n; j++) {
      ur[j] = e[r * 4][j] - e[r * 4 + 2][j];
      ur[WINO_U_PLANE + j] = e[r * 4 + 1][j] + e[r * 4 + 2][j];
      ur[2 * WINO_U_PLANE + j] = e[r * 4 + 2][j] - e[r * 4 + 1][j];
      ur[3 * WINO_U_PLANE + j] = e[r * 4 + 1][j] - e[r * 4 + 3][j];
    }
  }
}

// kc is a multiple of 8: blocks of 16 channels, then one of 8 (constant widths, which the compiler vectorises).
static void wino_input_portable(const wino_ctx* c, size_t t0, size_t c0, size_t kc, float* U) {
  wino_pos pos = wino_pos_at(c, t0);
  for (size_t t = 0; t < WINO_TILES; t++, wino_pos_next(c, &pos)) {
    const float* p[16];
    wino_patch(c, &pos, c0, p);
    float* u = U + t * kc;
    size_t ci = 0;
    for (; ci + 16 <= kc; ci += 16) {
      wino_input_block_portable(p, ci, u, 16);
    }
    if (ci < kc) {
      wino_input_block_portable(p, ci, u, 8);
    }
  }
}

// Tiles of one portable GEMM call: 2 x 16 accumulators, 8 SSE registers (x86-64's baseline has 16).
#ifndef WINO_PORTABLE_TILES
#define WINO_PORTABLE_TILES 2
#endif

// GCC's -O3 vectorises the loop over the input channels below (shuffling across them, 4x slower than -O2);
// the 16 channels of each accumulator row are vectorised by SLP, which this leaves on.
#if defined(__GNUC__) && !defined(__clang__)
#define WINO_NO_LOOP_VECTORIZE __attribute__((optimize("no-tree-loop-vectorize")))
#else
#define WINO_NO_LOOP_VECTORIZE
#endif

// m[WINO_PORTABLE_TILES][cout] (at co) (+)= u[WINO_PORTABLE_TILES][kc] x w[kc][cout] (at co), n (16 or 8)
// channels; += unless first.
WINO_NO_LOOP_VECTORIZE WINO_INLINE void wino_gemm_portable(const float* u, const float* w, float* m, size_t kc,
                                                           size_t cout, int first, const int n) {
  float acc[WINO_PORTABLE_TILES][16];
#pragma GCC unroll 4
  for (int i = 0; i < WINO_PORTABLE_TILES; i++) {
#pragma GCC unroll 16
    for (int j = 0; j < n; j++) {
      acc[i][j] = first ? 0.0f : m[i * cout + j];
    }
  }
  for (size_t ci = 0; ci < kc; ci++) {
    const float* wr = w + ci * cout;
#pragma GCC unroll 4
    for (int i = 0; i < WINO_PORTABLE_TILES; i++) {
      const float a = u[i * kc + ci];
#pragma GCC unroll 16
      for (int j = 0; j < n; j++) {
        acc[i][j] = CARVE_MLA(a, wr[j], acc[i][j]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < WINO_PORTABLE_TILES; i++) {
#pragma GCC unroll 16
    for (int j = 0; j < n; j++) {
      m[i * cout + j] = acc[i][j];
    }
  }
}

WINO_NO_LOOP_VECTORIZE static void wino_gemm16_portable(const float* u, const float* w, float* m, size_t kc,
                                                        size_t cout, int first) {
  wino_gemm_portable(u, w, m, kc, cout, first, 16);
}

WINO_NO_LOOP_VECTORIZE static void wino_gemm8_portable(const float* u, const float* w, float* m, size_t kc,
                                                       size_t cout, int first) {
  wino_gemm_portable(u, w, m, kc, cout, first, 8);
}

// cout is a multiple of 8: blocks of 16 output channels, the last one 8 if cout is an odd multiple of 8.
static void wino_gemms_portable(const wino_ctx* c, const float* U, size_t c0, size_t kc, float* M) {
  const size_t cin = c->cin, cout = c->cout, mp = wino_m_plane(c);
  for (size_t k = 0; k < 16; k++) {
    for (size_t co = 0; co < cout; co += 16) {
      for (size_t i = 0; i < WINO_TILES; i += WINO_PORTABLE_TILES) {
        const float* u = U + k * WINO_U_PLANE + i * kc;
        const float* w = c->weights + (k * cin + c0) * cout + co;
        float* m = M + k * mp + i * cout + co;
        if (cout - co >= 16) {
          wino_gemm16_portable(u, w, m, kc, cout, c0 == 0);
        } else {
          wino_gemm8_portable(u, w, m, kc, cout, c0 == 0);
        }
      }
    }
  }
}

// n (16 or 8) output channels from co of tile t (M at the tile's row, channel 0).
WINO_INLINE void wino_output_block_portable(const wino_ctx* c, const float* M, size_t co, float* const yp[4],
                                            const float* const rp[4], const int inside[4], const int n) {
  const size_t mp = wino_m_plane(c);
  const float* m = M + co;
  float r0[4][16], r1[4][16], o[4][16];
  for (int q = 0; q < 4; q++) {  // A^T m
    for (int j = 0; j < n; j++) {
      r0[q][j] = (m[q * mp + j] + m[(4 + q) * mp + j]) + m[(8 + q) * mp + j];
      r1[q][j] = (m[(4 + q) * mp + j] - m[(8 + q) * mp + j]) - m[(12 + q) * mp + j];
    }
  }
  for (int j = 0; j < n; j++) {  // (A^T m) A + bias
    const float b = c->bias[co + j];
    o[0][j] = ((r0[0][j] + r0[1][j]) + r0[2][j]) + b;
    o[1][j] = ((r0[1][j] - r0[2][j]) - r0[3][j]) + b;
    o[2][j] = ((r1[0][j] + r1[1][j]) + r1[2][j]) + b;
    o[3][j] = ((r1[1][j] - r1[2][j]) - r1[3][j]) + b;
  }
  for (int k = 0; k < 4; k++) {
    if (!inside[k]) {
      continue;
    }
    for (int j = 0; j < n; j++) {
      const float v = c->silu ? silu(o[k][j]) : o[k][j];
      yp[k][co + j] = rp[k] != NULL ? v + rp[k][co + j] : v;
    }
  }
}

static void wino_output_portable(const wino_ctx* c, const float* M, size_t t0) {
  const size_t cout = c->cout;
  const size_t n = min_size(WINO_TILES, c->tiles - t0);
  wino_pos pos = wino_pos_at(c, t0);
  for (size_t t = 0; t < n; t++, wino_pos_next(c, &pos)) {
    float* yp[4];
    const float* rp[4];
    int inside[4];
    wino_out_tile(c, &pos, yp, rp, inside);
    size_t co = 0;
    for (; co + 16 <= cout; co += 16) {
      wino_output_block_portable(c, M + t * cout, co, yp, rp, inside, 16);
    }
    if (co < cout) {
      wino_output_block_portable(c, M + t * cout, co, yp, rp, inside, 8);
    }
  }
}

#ifdef CARVE_HAVE_X86_SIMD
// ---- AVX-512

// The input transform of one tile's 16 channels from ci (mode 1; u: the tile's row of plane 0), of a block's
// last 8 channels by masked loads and stores (mode 0: plain ones would read past cin, at the end of x), or of
// two tiles' 8 channels when the block has 8 (mode 2, ci 0): tile t (p) in the low half of each register and
// t + 1 (p1) in the high half, whose rows of U are adjacent, for half the arithmetic and stores of mode 0.
__attribute__((target("avx512f"), always_inline)) static inline void wino_input_block_avx512(
    const float* const p[16], const float* const p1[16], size_t ci, float* u, const int mode) {
  __m512 d[16], e[16];
  for (int i = 0; i < 16; i++) {
    if (mode == 1) {
      d[i] = _mm512_loadu_ps(p[i] + ci);
    } else if (mode == 0) {
      d[i] = _mm512_maskz_loadu_ps(0x00ff, p[i] + ci);
    } else {
      d[i] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(p[i]))),
                                                 _mm256_castps_pd(_mm256_loadu_ps(p1[i])), 1));
    }
  }
  for (int q = 0; q < 4; q++) {  // B^T d
    e[q] = _mm512_sub_ps(d[q], d[8 + q]);
    e[4 + q] = _mm512_add_ps(d[4 + q], d[8 + q]);
    e[8 + q] = _mm512_sub_ps(d[8 + q], d[4 + q]);
    e[12 + q] = _mm512_sub_ps(d[4 + q], d[12 + q]);
  }
  for (int r = 0; r < 4; r++) {  // (B^T d) B
    float* ur = u + (size_t)(r * 4) * WINO_U_PLANE + ci;
    const __m512 v[4] = {_mm512_sub_ps(e[r * 4], e[r * 4 + 2]), _mm512_add_ps(e[r * 4 + 1], e[r * 4 + 2]),
                         _mm512_sub_ps(e[r * 4 + 2], e[r * 4 + 1]), _mm512_sub_ps(e[r * 4 + 1], e[r * 4 + 3])};
    for (int k = 0; k < 4; k++) {
      if (mode != 0) {
        _mm512_storeu_ps(ur + k * WINO_U_PLANE, v[k]);
      } else {
        _mm512_mask_storeu_ps(ur + k * WINO_U_PLANE, 0x00ff, v[k]);
      }
    }
  }
}

__attribute__((target("avx512f"))) static void wino_input_avx512(const wino_ctx* c, size_t t0, size_t c0,
                                                                 size_t kc, float* U) {
  wino_pos pos = wino_pos_at(c, t0);
  if (kc == 8) {  // an 8-channel block (cin 8, or the last of an odd multiple of 8): pairs of tiles
    _Static_assert(WINO_TILES % 2 == 0, "tiles are paired");
    for (size_t t = 0; t < WINO_TILES; t += 2) {
      const float* p[16];
      const float* p1[16];
      wino_patch(c, &pos, c0, p);
      wino_pos_next(c, &pos);
      wino_patch(c, &pos, c0, p1);
      wino_pos_next(c, &pos);
      wino_input_block_avx512(p, p1, 0, U + t * kc, 2);
    }
    return;
  }
  for (size_t t = 0; t < WINO_TILES; t++, wino_pos_next(c, &pos)) {
    const float* p[16];
    wino_patch(c, &pos, c0, p);
    float* u = U + t * kc;
    size_t ci = 0;
    for (; ci + 16 <= kc; ci += 16) {
      wino_input_block_avx512(p, p, ci, u, 1);
    }
    if (ci < kc) {
      wino_input_block_avx512(p, p, ci, u, 0);
    }
  }
}

// m[12][cout] (at co) (+)= u[12][kc] x w[kc][cout] (at co), nv * 16 channels; += unless first.
__attribute__((target("avx512f"), always_inline)) static inline void wino_gemm_avx512(
    const float* u, const float* w, float* m, size_t kc, size_t cout, int first, const int nv) {
  __m512 acc[12][2];
  for (int i = 0; i < 12; i++) {
    acc[i][0] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(m + i * cout);
    acc[i][1] = first || nv == 1 ? _mm512_setzero_ps() : _mm512_loadu_ps(m + i * cout + 16);
  }
  for (size_t ci = 0; ci < kc; ci++) {
    const __m512 w0 = _mm512_loadu_ps(w + ci * cout);
    const __m512 w1 = nv == 2 ? _mm512_loadu_ps(w + ci * cout + 16) : w0;
#pragma GCC unroll 16
    for (int i = 0; i < 12; i++) {
      const __m512 a = _mm512_set1_ps(u[i * kc + ci]);
      acc[i][0] = _mm512_fmadd_ps(a, w0, acc[i][0]);
      if (nv == 2) {
        acc[i][1] = _mm512_fmadd_ps(a, w1, acc[i][1]);
      }
    }
  }
  for (int i = 0; i < 12; i++) {
    _mm512_storeu_ps(m + i * cout, acc[i][0]);
    if (nv == 2) {
      _mm512_storeu_ps(m + i * cout + 16, acc[i][1]);
    }
  }
}

__attribute__((target("avx512f"))) static void wino_gemm32_avx512(const float* u, const float* w, float* m,
                                                                  size_t kc, size_t cout, int first) {
  wino_gemm_avx512(u, w, m, kc, cout, first, 2);
}

__attribute__((target("avx512f"))) static void wino_gemm16_avx512(const float* u, const float* w, float* m,
                                                                  size_t kc, size_t cout, int first) {
  wino_gemm_avx512(u, w, m, kc, cout, first, 1);
}

__attribute__((target("avx2,fma"))) static void wino_gemm8_avx2(const float* u, const float* w, float* m,
                                                                size_t kc, size_t cout, int first);

// cout is a multiple of 8: blocks of 32 output channels, the last one 16, 24 (16 + 8) or 8 (wino_gemm8_avx2:
// 12 tiles x 8 channels in 256-bit registers; every CPU with AVX-512F has AVX2 and FMA).
static void wino_gemms_avx512(const wino_ctx* c, const float* U, size_t c0, size_t kc, float* M) {
  const size_t cin = c->cin, cout = c->cout, mp = wino_m_plane(c);
  for (size_t k = 0; k < 16; k++) {
    for (size_t co = 0; co < cout; co += 32) {
      for (size_t i = 0; i < WINO_TILES; i += 12) {
        const float* u = U + k * WINO_U_PLANE + i * kc;
        const float* w = c->weights + (k * cin + c0) * cout + co;
        float* m = M + k * mp + i * cout + co;
        if (cout - co >= 32) {
          wino_gemm32_avx512(u, w, m, kc, cout, c0 == 0);
        } else if (cout - co >= 16) {
          wino_gemm16_avx512(u, w, m, kc, cout, c0 == 0);
          if (cout - co == 24) {
            wino_gemm8_avx2(u, w + 16, m + 16, kc, cout, c0 == 0);
          }
        } else {
          wino_gemm8_avx2(u, w, m, kc, cout, c0 == 0);
        }
      }
    }
  }
}

// 16 output channels from co of one tile (M at the tile's row, channel 0), or with full == 0 the last 8 of
// cout by masked loads and stores.
__attribute__((target("avx512f"), always_inline)) static inline void wino_output_block_avx512(
    const wino_ctx* c, const float* M, size_t co, float* const yp[4], const float* const rp[4],
    const int inside[4], const int full) {
  const size_t mp = wino_m_plane(c);
  const __mmask16 mk = full ? 0xffff : 0x00ff;
  const float* mq = M + co;
  __m512 m[16], r0[4], r1[4], o[4];
  for (int k = 0; k < 16; k++) {
    m[k] = full ? _mm512_loadu_ps(mq + k * mp) : _mm512_maskz_loadu_ps(mk, mq + k * mp);
  }
  for (int q = 0; q < 4; q++) {  // A^T m
    r0[q] = _mm512_add_ps(_mm512_add_ps(m[q], m[4 + q]), m[8 + q]);
    r1[q] = _mm512_sub_ps(_mm512_sub_ps(m[4 + q], m[8 + q]), m[12 + q]);
  }
  const __m512 b = full ? _mm512_loadu_ps(c->bias + co) : _mm512_maskz_loadu_ps(mk, c->bias + co);
  o[0] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(r0[0], r0[1]), r0[2]), b);
  o[1] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(r0[1], r0[2]), r0[3]), b);
  o[2] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(r1[0], r1[1]), r1[2]), b);
  o[3] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(r1[1], r1[2]), r1[3]), b);
  for (int k = 0; k < 4; k++) {
    if (!inside[k]) {
      continue;
    }
    __m512 v = c->silu ? silu16_avx512(o[k]) : o[k];
    if (rp[k] != NULL) {
      v = _mm512_add_ps(v, full ? _mm512_loadu_ps(rp[k] + co) : _mm512_maskz_loadu_ps(mk, rp[k] + co));
    }
    if (full) {
      _mm512_storeu_ps(yp[k] + co, v);
    } else {
      _mm512_mask_storeu_ps(yp[k] + co, mk, v);
    }
  }
}

// Two tiles of 8 output channels (cout == 8): tile t in the low half of each register, t + 1 in the high half
// (their rows of M are adjacent), so that the loads of M, the transform and the SiLU are half those of two
// masked 16-lane blocks. A pixel outside the image reads no residual and stores nothing.
__attribute__((target("avx512f"))) static void wino_output_pair8_avx512(const wino_ctx* c, const float* M,
                                                                        const wino_pos* pos) {
  const size_t mp = wino_m_plane(c);
  wino_pos next = *pos;
  wino_pos_next(c, &next);
  float* yp[2][4];
  const float* rp[2][4];
  int inside[2][4];
  wino_out_tile(c, pos, yp[0], rp[0], inside[0]);
  wino_out_tile(c, &next, yp[1], rp[1], inside[1]);
  __m512 m[16], r0[4], r1[4], o[4];
  for (int k = 0; k < 16; k++) {
    m[k] = _mm512_loadu_ps(M + k * mp);
  }
  for (int q = 0; q < 4; q++) {  // A^T m
    r0[q] = _mm512_add_ps(_mm512_add_ps(m[q], m[4 + q]), m[8 + q]);
    r1[q] = _mm512_sub_ps(_mm512_sub_ps(m[4 + q], m[8 + q]), m[12 + q]);
  }
  const __m256 b8 = _mm256_loadu_ps(c->bias);
  const __m512 b = _mm512_insertf32x4(_mm512_insertf32x4(_mm512_castps256_ps512(b8), _mm256_castps256_ps128(b8), 2),
                                      _mm256_extractf128_ps(b8, 1), 3);
  o[0] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(r0[0], r0[1]), r0[2]), b);
  o[1] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(r0[1], r0[2]), r0[3]), b);
  o[2] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(r1[0], r1[1]), r1[2]), b);
  o[3] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(r1[1], r1[2]), r1[3]), b);
  for (int k = 0; k < 4; k++) {
    if (!inside[0][k] && !inside[1][k]) {
      continue;
    }
    __m512 v = c->silu ? silu16_avx512(o[k]) : o[k];
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    if (inside[0][k]) {
      _mm256_storeu_ps(yp[0][k], rp[0][k] != NULL ? _mm256_add_ps(lo, _mm256_loadu_ps(rp[0][k])) : lo);
    }
    if (inside[1][k]) {
      _mm256_storeu_ps(yp[1][k], rp[1][k] != NULL ? _mm256_add_ps(hi, _mm256_loadu_ps(rp[1][k])) : hi);
    }
  }
}

__attribute__((target("avx512f"))) static void wino_output_avx512(const wino_ctx* c, const float* M, size_t t0) {
  const size_t cout = c->cout;
  const size_t n = min_size(WINO_TILES, c->tiles - t0);
  wino_pos pos = wino_pos_at(c, t0);
  size_t t = 0;
  if (cout == 8) {  // pairs of tiles; an odd last tile below
    for (; t + 2 <= n; t += 2, wino_pos_next(c, &pos), wino_pos_next(c, &pos)) {
      wino_output_pair8_avx512(c, M + t * cout, &pos);
    }
  }
  for (; t < n; t++, wino_pos_next(c, &pos)) {
    float* yp[4];
    const float* rp[4];
    int inside[4];
    wino_out_tile(c, &pos, yp, rp, inside);
    size_t co = 0;
    for (; co + 16 <= cout; co += 16) {
      wino_output_block_avx512(c, M + t * cout, co, yp, rp, inside, 1);
    }
    if (co < cout) {
      wino_output_block_avx512(c, M + t * cout, co, yp, rp, inside, 0);
    }
  }
}

// ---- AVX2 + FMA

__attribute__((target("avx2,fma"))) static void wino_input_avx2(const wino_ctx* c, size_t t0, size_t c0,
                                                                size_t kc, float* U) {
  wino_pos pos = wino_pos_at(c, t0);
  for (size_t t = 0; t < WINO_TILES; t++, wino_pos_next(c, &pos)) {
    const float* p[16];
    wino_patch(c, &pos, c0, p);
    float* u = U + t * kc;
    for (size_t ci = 0; ci < kc; ci += 8) {
      for (int r = 0; r < 4; r++) {  // row r of B^T d, then times B
        __m256 e[4];
        for (int q = 0; q < 4; q++) {
          const __m256 d4 = _mm256_loadu_ps(p[4 + q] + ci), d8 = _mm256_loadu_ps(p[8 + q] + ci);
          e[q] = r == 0   ? _mm256_sub_ps(_mm256_loadu_ps(p[q] + ci), d8)
                 : r == 1 ? _mm256_add_ps(d4, d8)
                 : r == 2 ? _mm256_sub_ps(d8, d4)
                          : _mm256_sub_ps(d4, _mm256_loadu_ps(p[12 + q] + ci));
        }
        float* ur = u + (size_t)(r * 4) * WINO_U_PLANE + ci;
        _mm256_storeu_ps(ur, _mm256_sub_ps(e[0], e[2]));
        _mm256_storeu_ps(ur + WINO_U_PLANE, _mm256_add_ps(e[1], e[2]));
        _mm256_storeu_ps(ur + 2 * WINO_U_PLANE, _mm256_sub_ps(e[2], e[1]));
        _mm256_storeu_ps(ur + 3 * WINO_U_PLANE, _mm256_sub_ps(e[1], e[3]));
      }
    }
  }
}

// m[6][cout] (at co) (+)= u[6][kc] x w[kc][cout] (at co), 16 channels in 12 registers; += unless first.
__attribute__((target("avx2,fma"))) static void wino_gemm_avx2(const float* u, const float* w, float* m,
                                                               size_t kc, size_t cout, int first) {
  __m256 lo[6], hi[6];
#pragma GCC unroll 8
  for (int i = 0; i < 6; i++) {
    lo[i] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(m + i * cout);
    hi[i] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(m + i * cout + 8);
  }
  for (size_t ci = 0; ci < kc; ci++) {
    const __m256 w0 = _mm256_loadu_ps(w + ci * cout), w1 = _mm256_loadu_ps(w + ci * cout + 8);
#pragma GCC unroll 8
    for (int i = 0; i < 6; i++) {
      const __m256 a = _mm256_broadcast_ss(u + i * kc + ci);
      lo[i] = _mm256_fmadd_ps(a, w0, lo[i]);
      hi[i] = _mm256_fmadd_ps(a, w1, hi[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < 6; i++) {
    _mm256_storeu_ps(m + i * cout, lo[i]);
    _mm256_storeu_ps(m + i * cout + 8, hi[i]);
  }
}

// m[12][cout] (at co) (+)= u[12][kc] x w[kc][cout] (at co), 8 channels in 12 registers; += unless first. The
// last 8 channels of a cout that is an odd multiple of 8, on the AVX2 and the AVX-512 paths.
__attribute__((target("avx2,fma"))) static void wino_gemm8_avx2(const float* u, const float* w, float* m,
                                                                size_t kc, size_t cout, int first) {
  __m256 acc[12];
#pragma GCC unroll 12
  for (int i = 0; i < 12; i++) {
    acc[i] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(m + i * cout);
  }
  for (size_t ci = 0; ci < kc; ci++) {
    const __m256 w0 = _mm256_loadu_ps(w + ci * cout);
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
      acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(u + i * kc + ci), w0, acc[i]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < 12; i++) {
    _mm256_storeu_ps(m + i * cout, acc[i]);
  }
}

// cout is a multiple of 8: blocks of 16 output channels, the last one 8 (wino_gemm8_avx2) if cout is an odd
// multiple of 8.
static void wino_gemms_avx2(const wino_ctx* c, const float* U, size_t c0, size_t kc, float* M) {
  const size_t cin = c->cin, cout = c->cout, mp = wino_m_plane(c);
  for (size_t k = 0; k < 16; k++) {
    for (size_t co = 0; co < cout; co += 16) {
      const float* w = c->weights + (k * cin + c0) * cout + co;
      if (cout - co < 16) {
        wino_gemm8_avx2(U + k * WINO_U_PLANE, w, M + k * mp + co, kc, cout, c0 == 0);
        continue;
      }
      for (size_t i = 0; i < WINO_TILES; i += 6) {
        wino_gemm_avx2(U + k * WINO_U_PLANE + i * kc, w, M + k * mp + i * cout + co, kc, cout, c0 == 0);
      }
    }
  }
}

__attribute__((target("avx2,fma"))) static void wino_output_avx2(const wino_ctx* c, const float* M, size_t t0) {
  const size_t cout = c->cout, mp = wino_m_plane(c);
  const size_t n = min_size(WINO_TILES, c->tiles - t0);
  wino_pos pos = wino_pos_at(c, t0);
  for (size_t t = 0; t < n; t++, wino_pos_next(c, &pos)) {
    float* yp[4];
    const float* rp[4];
    int inside[4];
    wino_out_tile(c, &pos, yp, rp, inside);
    for (size_t co = 0; co < cout; co += 8) {
      const float* mq = M + t * cout + co;
      __m256 r0[4], r1[4], o[4];
      for (int q = 0; q < 4; q++) {  // A^T m
        const __m256 m4 = _mm256_loadu_ps(mq + (4 + q) * mp), m8 = _mm256_loadu_ps(mq + (8 + q) * mp);
        r0[q] = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(mq + q * mp), m4), m8);
        r1[q] = _mm256_sub_ps(_mm256_sub_ps(m4, m8), _mm256_loadu_ps(mq + (12 + q) * mp));
      }
      const __m256 b = _mm256_loadu_ps(c->bias + co);
      o[0] = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(r0[0], r0[1]), r0[2]), b);
      o[1] = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(r0[1], r0[2]), r0[3]), b);
      o[2] = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(r1[0], r1[1]), r1[2]), b);
      o[3] = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(r1[1], r1[2]), r1[3]), b);
      for (int k = 0; k < 4; k++) {
        if (!inside[k]) {
          continue;
        }
        __m256 v = c->silu ? silu8_avx2(o[k]) : o[k];
        if (rp[k] != NULL) {
          v = _mm256_add_ps(v, _mm256_loadu_ps(rp[k] + co));
        }
        _mm256_storeu_ps(yp[k] + co, v);
      }
    }
  }
}
#endif

#ifdef CARVE_HAVE_NEON
// ---- aarch64 NEON (checked under qemu-aarch64 only; its speed is unmeasured)
#include <arm_neon.h>

static void wino_input_neon(const wino_ctx* c, size_t t0, size_t c0, size_t kc, float* U) {
  wino_pos pos = wino_pos_at(c, t0);
  for (size_t t = 0; t < WINO_TILES; t++, wino_pos_next(c, &pos)) {
    const float* p[16];
    wino_patch(c, &pos, c0, p);
    float* u = U + t * kc;
    for (size_t ci = 0; ci < kc; ci += 4) {
      for (int r = 0; r < 4; r++) {  // row r of B^T d, then times B
        float32x4_t e[4];
        for (int q = 0; q < 4; q++) {
          const float32x4_t d4 = vld1q_f32(p[4 + q] + ci), d8 = vld1q_f32(p[8 + q] + ci);
          e[q] = r == 0   ? vsubq_f32(vld1q_f32(p[q] + ci), d8)
                 : r == 1 ? vaddq_f32(d4, d8)
                 : r == 2 ? vsubq_f32(d8, d4)
                          : vsubq_f32(d4, vld1q_f32(p[12 + q] + ci));
        }
        float* ur = u + (size_t)(r * 4) * WINO_U_PLANE + ci;
        vst1q_f32(ur, vsubq_f32(e[0], e[2]));
        vst1q_f32(ur + WINO_U_PLANE, vaddq_f32(e[1], e[2]));
        vst1q_f32(ur + 2 * WINO_U_PLANE, vsubq_f32(e[2], e[1]));
        vst1q_f32(ur + 3 * WINO_U_PLANE, vsubq_f32(e[1], e[3]));
      }
    }
  }
}

// m[4][cout] (at co) (+)= u[4][kc] x w[kc][cout] (at co), 4 * nv channels (nv 4 or 2); += unless first. nv 4:
// 16 accumulators, 4 registers of u (4 input channels of each tile, used by lane) and 4 of w: 24 of the 32.
// kc % 4 == 0.
__attribute__((always_inline)) static inline void wino_gemm_neon(const float* u, const float* w, float* m,
                                                                 size_t kc, size_t cout, int first, const int nv) {
  float32x4_t acc[4][4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
#pragma GCC unroll 4
    for (int j = 0; j < nv; j++) {
      acc[i][j] = first ? vdupq_n_f32(0.0f) : vld1q_f32(m + i * cout + 4 * j);
    }
  }
  for (size_t ci = 0; ci < kc; ci += 4) {
    float32x4_t a[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      a[i] = vld1q_f32(u + i * kc + ci);
    }
#define WINO_NEON_STEP(L)                                                \
  do {                                                                   \
    const float* wr = w + (ci + (L)) * cout;                             \
    float32x4_t wv[4];                                                   \
    for (int j = 0; j < nv; j++) {                                       \
      wv[j] = vld1q_f32(wr + 4 * j);                                     \
    }                                                                    \
    for (int i = 0; i < 4; i++) {                                        \
      for (int j = 0; j < nv; j++) {                                     \
        acc[i][j] = vfmaq_laneq_f32(acc[i][j], wv[j], a[i], (L));        \
      }                                                                  \
    }                                                                    \
  } while (0)
    WINO_NEON_STEP(0);
    WINO_NEON_STEP(1);
    WINO_NEON_STEP(2);
    WINO_NEON_STEP(3);
#undef WINO_NEON_STEP
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
#pragma GCC unroll 4
    for (int j = 0; j < nv; j++) {
      vst1q_f32(m + i * cout + 4 * j, acc[i][j]);
    }
  }
}

static void wino_gemm16_neon(const float* u, const float* w, float* m, size_t kc, size_t cout, int first) {
  wino_gemm_neon(u, w, m, kc, cout, first, 4);
}

static void wino_gemm8_neon(const float* u, const float* w, float* m, size_t kc, size_t cout, int first) {
  wino_gemm_neon(u, w, m, kc, cout, first, 2);
}

// cout is a multiple of 8: blocks of 16 output channels, the last one 8 if cout is an odd multiple of 8.
static void wino_gemms_neon(const wino_ctx* c, const float* U, size_t c0, size_t kc, float* M) {
  const size_t cin = c->cin, cout = c->cout, mp = wino_m_plane(c);
  for (size_t k = 0; k < 16; k++) {
    for (size_t co = 0; co < cout; co += 16) {
      for (size_t i = 0; i < WINO_TILES; i += 4) {
        const float* u = U + k * WINO_U_PLANE + i * kc;
        const float* w = c->weights + (k * cin + c0) * cout + co;
        float* m = M + k * mp + i * cout + co;
        if (cout - co >= 16) {
          wino_gemm16_neon(u, w, m, kc, cout, c0 == 0);
        } else {
          wino_gemm8_neon(u, w, m, kc, cout, c0 == 0);
        }
      }
    }
  }
}

// The transform as vectors; bias, SiLU (the portable silu, per element) and residual as the portable path.
static void wino_output_neon(const wino_ctx* c, const float* M, size_t t0) {
  const size_t cout = c->cout, mp = wino_m_plane(c);
  const size_t n = min_size(WINO_TILES, c->tiles - t0);
  wino_pos pos = wino_pos_at(c, t0);
  for (size_t t = 0; t < n; t++, wino_pos_next(c, &pos)) {
    float* yp[4];
    const float* rp[4];
    int inside[4];
    wino_out_tile(c, &pos, yp, rp, inside);
    for (size_t co = 0; co < cout; co += 16) {
      const size_t nb = min_size(16, cout - co);  // 16, or 8 for the last block of an odd multiple of 8
      float o[4][16];
      for (size_t j = 0; j < nb; j += 4) {
        const float* mq = M + t * cout + co + j;
        float32x4_t r0[4], r1[4];
        for (int q = 0; q < 4; q++) {  // A^T m
          const float32x4_t m4 = vld1q_f32(mq + (4 + q) * mp), m8 = vld1q_f32(mq + (8 + q) * mp);
          r0[q] = vaddq_f32(vaddq_f32(vld1q_f32(mq + q * mp), m4), m8);
          r1[q] = vsubq_f32(vsubq_f32(m4, m8), vld1q_f32(mq + (12 + q) * mp));
        }
        const float32x4_t b = vld1q_f32(c->bias + co + j);  // (A^T m) A + bias
        vst1q_f32(o[0] + j, vaddq_f32(vaddq_f32(vaddq_f32(r0[0], r0[1]), r0[2]), b));
        vst1q_f32(o[1] + j, vaddq_f32(vsubq_f32(vsubq_f32(r0[1], r0[2]), r0[3]), b));
        vst1q_f32(o[2] + j, vaddq_f32(vaddq_f32(vaddq_f32(r1[0], r1[1]), r1[2]), b));
        vst1q_f32(o[3] + j, vaddq_f32(vsubq_f32(vsubq_f32(r1[1], r1[2]), r1[3]), b));
      }
      for (int k = 0; k < 4; k++) {
        if (!inside[k]) {
          continue;
        }
        for (size_t j = 0; j < nb; j++) {
          const float v = c->silu ? silu(o[k][j]) : o[k][j];
          yp[k][co + j] = rp[k] != NULL ? v + rp[k][co + j] : v;
        }
      }
    }
  }
}
#endif

// ---- Driver

// Slots [start, start + count): slot s computes the groups [s * groups / slots, (s + 1) * groups / slots).
static void wino_task(void* context, size_t start, size_t count) {
  const wino_ctx* c = context;
  const wino_isa* isa = c->isa;
  for (size_t s = start; s < start + count; s++) {
    unsigned char* slot = c->scratch + s * CARVE_WINOGRAD_SLOT_BYTES(c->cout);
    float* U = (float*)(void*)slot;
    float* M = wino_m(slot);
    const size_t g1 = (s + 1) * c->groups / c->slots;
    for (size_t g = s * c->groups / c->slots; g < g1; g++) {
      const size_t t0 = g * WINO_TILES;
      for (size_t c0 = 0; c0 < c->cin; c0 += WINO_KC) {
        const size_t kc = min_size(WINO_KC, c->cin - c0);
        isa->input(c, t0, c0, kc, U);
        isa->gemms(c, U, c0, kc, M);
      }
      isa->output(c, M, t0);
    }
  }
}

// The variants' shared entry: checks the arguments and splits the groups over `slots` tasks; isa is the
// variant's.
static carve_status wino_drive(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                               const float* weights, const float* bias, size_t cout, float* y, size_t y_stride,
                               const float* residual, size_t r_stride, carve_act act, void* scratch, size_t slots,
                               const wino_isa* isa, pthreadpool_t pool) {
  if (x == NULL || weights == NULL || bias == NULL || y == NULL || scratch == NULL || h == 0 || w == 0 ||
      cin == 0 || cout == 0 || cin % CARVE_WINOGRAD_CHANNEL_MULTIPLE != 0 ||
      cout % CARVE_WINOGRAD_CHANNEL_MULTIPLE != 0 || x_stride < cin || y_stride < cout ||
      (residual != NULL && r_stride < cout) || slots == 0 || (uintptr_t)scratch % 64 != 0 ||
      (act != CARVE_ACT_NONE && act != CARVE_ACT_SILU)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t tw = (w + 1) / 2, tiles = tw * ((h + 1) / 2);
  const wino_ctx ctx = {.x = x, .x_stride = x_stride, .h = h, .w = w, .cin = cin, .weights = weights,
                        .bias = bias, .cout = cout, .y = y, .y_stride = y_stride, .residual = residual,
                        .r_stride = residual != NULL ? r_stride : 0, .tw = tw, .tiles = tiles,
                        .groups = div_round_up(tiles, WINO_TILES), .slots = slots, .scratch = scratch,
                        .silu = act == CARVE_ACT_SILU, .isa = isa};
  carve_parallelize_1d_tile(pool, wino_task, (void*)&ctx, slots, 1);
  return CARVE_OK;
}

// ---- Variants and selection

static const wino_isa wino_portable = {wino_input_portable, wino_gemms_portable, wino_output_portable};

carve_status carve_conv3x3s1_winograd__portable(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                                                const float* weights, const float* bias, size_t cout, float* y,
                                                size_t y_stride, const float* residual, size_t r_stride,
                                                carve_act act, void* scratch, size_t slots, pthreadpool_t pool) {
  return wino_drive(x, x_stride, h, w, cin, weights, bias, cout, y, y_stride, residual, r_stride, act, scratch,
                    slots, &wino_portable, pool);
}

#ifdef CARVE_HAVE_X86_SIMD
static const wino_isa wino_avx2 = {wino_input_avx2, wino_gemms_avx2, wino_output_avx2};
static const wino_isa wino_avx512 = {wino_input_avx512, wino_gemms_avx512, wino_output_avx512};

carve_status carve_conv3x3s1_winograd__avx2(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                                            const float* weights, const float* bias, size_t cout, float* y,
                                            size_t y_stride, const float* residual, size_t r_stride,
                                            carve_act act, void* scratch, size_t slots, pthreadpool_t pool) {
  return wino_drive(x, x_stride, h, w, cin, weights, bias, cout, y, y_stride, residual, r_stride, act, scratch,
                    slots, &wino_avx2, pool);
}

carve_status carve_conv3x3s1_winograd__avx512(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                                              const float* weights, const float* bias, size_t cout, float* y,
                                              size_t y_stride, const float* residual, size_t r_stride,
                                              carve_act act, void* scratch, size_t slots, pthreadpool_t pool) {
  return wino_drive(x, x_stride, h, w, cin, weights, bias, cout, y, y_stride, residual, r_stride, act, scratch,
                    slots, &wino_avx512, pool);
}
#endif

#ifdef CARVE_HAVE_NEON
static const wino_isa wino_neon = {wino_input_neon, wino_gemms_neon, wino_output_neon};

carve_status carve_conv3x3s1_winograd__neon(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                                            const float* weights, const float* bias, size_t cout, float* y,
                                            size_t y_stride, const float* residual, size_t r_stride,
                                            carve_act act, void* scratch, size_t slots, pthreadpool_t pool) {
  return wino_drive(x, x_stride, h, w, cin, weights, bias, cout, y, y_stride, residual, r_stride, act, scratch,
                    slots, &wino_neon, pool);
}
#endif

carve_conv3x3s1_winograd_fn carve_conv3x3s1_winograd_select(carve_isa isa) {
#ifdef CARVE_HAVE_X86_SIMD
  if (isa == CARVE_ISA_AVX512) {
    return carve_conv3x3s1_winograd__avx512;
  }
  if (isa == CARVE_ISA_AVX2) {
    return carve_conv3x3s1_winograd__avx2;
  }
#endif
#ifdef CARVE_HAVE_NEON
  if (isa == CARVE_ISA_NEON) {
    return carve_conv3x3s1_winograd__neon;
  }
#endif
  (void)isa;
  return carve_conv3x3s1_winograd__portable;
}

carve_status carve_conv3x3s1_winograd(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                                      const float* weights, const float* bias, size_t cout, float* y,
                                      size_t y_stride, const float* residual, size_t r_stride, carve_act act,
                                      void* scratch, size_t slots, pthreadpool_t pool) {
  return carve_conv3x3s1_winograd_select(carve_isa_detect())(x, x_stride, h, w, cin, weights, bias, cout, y,
                                                             y_stride, residual, r_stride, act, scratch, slots,
                                                             pool);
}
