// Experiment: would a Winograd F(2x2,3x3) convolution (3x3, stride 1, pad 1, NHWC, batch 1) with bias + SiLU
// fused into its output transform beat XNNPACK 2022's direct convolution followed by carve's SiLU pass, on one
// thread, for one layer shape, and how accurate is it? Weights are transformed once (G g G^T in double, rounded to
// float) into 16 matrices (16, cin, cout). The output is cut into 2x2 tiles, flattened (so rows of 10 or 20 tiles
// do not leave a ragged group), and processed GT = 12 tiles at a time in a caller-provided scratch buffer (no
// allocation per run, 16 * 12 * (KC + cout) floats): for each block of KC = 128 input channels the input transform
// B^T d B writes U[16][GT][KC] (zero padding at the borders and for odd sizes) and 16 small GEMMs GT x KC x cout
// accumulate into M[16][GT][cout], MR = 12 tiles x 32 output channels in 24 AVX-512 registers (a 16-channel
// variant for cout % 32 == 16); then the output transform A^T m A adds the bias, applies SiLU and stores the
// (possibly partial) 2x2 tiles. Accuracy is measured against a double-precision reference of conv + bias + SiLU;
// relative error is |y - ref| / max(|ref|, 0.01). Not part of the package or the tests.
//
//   cc -O3 -march=x86-64-v3 -Iruntime bench/winograd_vs_xnnpack.c runtime/carve_rt.c -o /tmp/winograd -lXNNPACK -lpthreadpool -lcpuinfo -lm
//   /tmp/winograd H W CIN COUT      (e.g. 40 40 32 32; cin and cout multiples of 16)
//
// GF/s counts the direct convolution's FLOPs (2*H*W*cin*cout*9) for both. Best of 15 runs each; needs a CPU with
// AVX-512F.
#define _GNU_SOURCE
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xnnpack.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

// The runtime's own SiLU (silu16_avx512, as the package's kernels use it) and SiLU pass (carve_epilogue).
#include "../runtime/carve_ops.c"
#define silu16 silu16_avx512

// The package's SiLU pass after an XNNPACK convolution: carve_epilogue on one thread.
static void silu_pass(float* y, size_t n) { carve_epilogue(y, n, NULL, 0, 1, n, CARVE_ACT_SILU, NULL); }

#ifndef MR
#define MR 12  // tiles per micro-kernel call (x 32 channels: 2*MR accumulators)
#endif
#ifndef GT
#define GT 12  // tiles per group (a multiple of MR)
#endif
#ifndef KC
#define KC 128  // input channels per block: U holds one block, M accumulates over the blocks
#endif
#define MAX_CIN 4096
static const float k_zeros[MAX_CIN];

typedef struct {
  size_t h, w, cin, cout, th, tw;  // th, tw: tile rows and columns, ceil(h / 2), ceil(w / 2)
  const float* wt;                 // (16, cin, cout), G g G^T
  const float* bias;
} wino_t;

// U[16][GT][KC] and M[16][GT][cout] in scratch; each of the 16 planes is padded by 16 floats so that the 16
// planes do not all fall into the same L1 set when GT * KC is a multiple of 1024 (4 KiB).
#define PAD 16
static size_t wino_scratch(size_t cout) { return 16 * (GT * KC + PAD) + 16 * (GT * cout + PAD); }

// ohwi (cout, 3, 3, cin) -> wt (16, cin, cout).
static void wino_weights(const float* ohwi, size_t cin, size_t cout, float* wt) {
  static const double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  for (size_t o = 0; o < cout; o++)
    for (size_t i = 0; i < cin; i++) {
      double g[3][3], t[4][3];
      for (int ky = 0; ky < 3; ky++)
        for (int kx = 0; kx < 3; kx++) g[ky][kx] = ohwi[((o * 3 + ky) * 3 + kx) * cin + i];
      for (int a = 0; a < 4; a++)
        for (int kx = 0; kx < 3; kx++) t[a][kx] = G[a][0] * g[0][kx] + G[a][1] * g[1][kx] + G[a][2] * g[2][kx];
      for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
          wt[((size_t)(a * 4 + b) * cin + i) * cout + o] =
              (float)(t[a][0] * G[b][0] + t[a][1] * G[b][1] + t[a][2] * G[b][2]);
    }
}

// Channels c0 .. c0+kc-1 of tiles t0 .. t0+nt-1 of x -> U[16][GT][kc] (rows nt .. GT-1 left as they are).
__attribute__((target("avx512f"))) static void input_tf(const wino_t* c, const float* x, size_t t0, size_t nt,
                                                        size_t c0, size_t kc, float* U) {
  const size_t cin = c->cin, ks = GT * KC + PAD;
  for (size_t t = 0; t < nt; t++) {
    const size_t ty = (t0 + t) / c->tw, tx = (t0 + t) % c->tw;
    const float* p[16];
    for (size_t r = 0; r < 4; r++)
      for (size_t q = 0; q < 4; q++) {
        const ptrdiff_t iy = (ptrdiff_t)(2 * ty + r) - 1, ix = (ptrdiff_t)(2 * tx + q) - 1;
        p[r * 4 + q] = (iy < 0 || ix < 0 || iy >= (ptrdiff_t)c->h || ix >= (ptrdiff_t)c->w)
                           ? k_zeros
                           : x + ((size_t)iy * c->w + (size_t)ix) * cin + c0;
      }
    float* u = U + t * kc;
    for (size_t ci = 0; ci < kc; ci += 16) {
      __m512 d[16], e[16];
      for (int i = 0; i < 16; i++) d[i] = _mm512_loadu_ps(p[i] + ci);
      for (int q = 0; q < 4; q++) {  // B^T d
        e[q] = _mm512_sub_ps(d[q], d[8 + q]);
        e[4 + q] = _mm512_add_ps(d[4 + q], d[8 + q]);
        e[8 + q] = _mm512_sub_ps(d[8 + q], d[4 + q]);
        e[12 + q] = _mm512_sub_ps(d[4 + q], d[12 + q]);
      }
      for (int r = 0; r < 4; r++) {  // (B^T d) B
        float* ur = u + (size_t)(r * 4) * ks + ci;
        _mm512_storeu_ps(ur, _mm512_sub_ps(e[r * 4], e[r * 4 + 2]));
        _mm512_storeu_ps(ur + ks, _mm512_add_ps(e[r * 4 + 1], e[r * 4 + 2]));
        _mm512_storeu_ps(ur + 2 * ks, _mm512_sub_ps(e[r * 4 + 2], e[r * 4 + 1]));
        _mm512_storeu_ps(ur + 3 * ks, _mm512_sub_ps(e[r * 4 + 1], e[r * 4 + 3]));
      }
    }
  }
}

// m[MR][cout] (at channel co) (+)= u[MR][kc] x w[kc][cout] (at co), nv * 16 channels; += unless first.
__attribute__((target("avx512f"), always_inline)) static inline void gemm_mr(const float* u, const float* w,
                                                                            float* m, size_t kc, size_t cout,
                                                                            int first, const int nv) {
  __m512 acc[MR][2];
  for (int i = 0; i < MR; i++) {
    acc[i][0] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(m + i * cout);
    acc[i][1] = first || nv == 1 ? _mm512_setzero_ps() : _mm512_loadu_ps(m + i * cout + 16);
  }
  for (size_t ci = 0; ci < kc; ci++) {
    const __m512 w0 = _mm512_loadu_ps(w + ci * cout);
    const __m512 w1 = nv == 2 ? _mm512_loadu_ps(w + ci * cout + 16) : w0;
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
      const __m512 av = _mm512_set1_ps(u[i * kc + ci]);
      acc[i][0] = _mm512_fmadd_ps(av, w0, acc[i][0]);
      if (nv == 2) acc[i][1] = _mm512_fmadd_ps(av, w1, acc[i][1]);
    }
  }
  for (int i = 0; i < MR; i++) {
    _mm512_storeu_ps(m + i * cout, acc[i][0]);
    if (nv == 2) _mm512_storeu_ps(m + i * cout + 16, acc[i][1]);
  }
}

__attribute__((target("avx512f"))) static void gemm32(const float* u, const float* w, float* m, size_t kc,
                                                      size_t cout, int first) {
  gemm_mr(u, w, m, kc, cout, first, 2);
}

__attribute__((target("avx512f"))) static void gemm16(const float* u, const float* w, float* m, size_t kc,
                                                      size_t cout, int first) {
  gemm_mr(u, w, m, kc, cout, first, 1);
}

// M[16][GT][cout] -> A^T m A + bias, SiLU, stored into y for tiles t0 .. t0+nt-1 (clipped at odd edges).
__attribute__((target("avx512f"))) static void output_tf(const wino_t* c, const float* M, size_t t0, size_t nt,
                                                         float* y) {
  const size_t cout = c->cout, ks = GT * cout + PAD;
  for (size_t t = 0; t < nt; t++) {
    const size_t ty = (t0 + t) / c->tw, tx = (t0 + t) % c->tw, oy = 2 * ty, ox = 2 * tx;
    const int dy = oy + 1 < c->h, dx = ox + 1 < c->w;
    float* y00 = y + (oy * c->w + ox) * cout;
    float* y10 = y00 + c->w * cout;
    for (size_t co = 0; co < cout; co += 16) {
      const float* mp = M + t * cout + co;
      __m512 m[16], r0[4], r1[4];
      for (int k = 0; k < 16; k++) m[k] = _mm512_loadu_ps(mp + k * ks);
      for (int q = 0; q < 4; q++) {  // A^T m
        r0[q] = _mm512_add_ps(_mm512_add_ps(m[q], m[4 + q]), m[8 + q]);
        r1[q] = _mm512_sub_ps(_mm512_sub_ps(m[4 + q], m[8 + q]), m[12 + q]);
      }
      const __m512 b = _mm512_loadu_ps(c->bias + co);
      _mm512_storeu_ps(y00 + co, silu16(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(r0[0], r0[1]), r0[2]), b)));
      if (dx)
        _mm512_storeu_ps(y00 + cout + co,
                         silu16(_mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(r0[1], r0[2]), r0[3]), b)));
      if (dy) {
        _mm512_storeu_ps(y10 + co, silu16(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(r1[0], r1[1]), r1[2]), b)));
        if (dx)
          _mm512_storeu_ps(y10 + cout + co,
                           silu16(_mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(r1[1], r1[2]), r1[3]), b)));
      }
    }
  }
}

// scratch: wino_scratch(cout) floats, 64-byte aligned, allocated (and zeroed) once by the caller.
static void wino(const wino_t* c, const float* x, float* y, float* scratch) {
  const size_t cin = c->cin, cout = c->cout, nt = c->th * c->tw;
  float* U = scratch;
  float* M = scratch + 16 * (GT * KC + PAD);
  for (size_t t0 = 0; t0 < nt; t0 += GT) {
    const size_t n = nt - t0 < GT ? nt - t0 : GT;
    for (size_t c0 = 0; c0 < cin; c0 += KC) {
      const size_t kc = cin - c0 < KC ? cin - c0 : KC;
      input_tf(c, x, t0, n, c0, kc, U);
      for (size_t k = 0; k < 16; k++)
        for (size_t co = 0; co < cout; co += 32)
          for (size_t i = 0; i < n; i += MR) {
            const float* u = U + k * (GT * KC + PAD) + i * kc;
            const float* w = c->wt + (k * cin + c0) * cout + co;
            float* m = M + k * (GT * cout + PAD) + i * cout + co;
            if (cout - co >= 32)
              gemm32(u, w, m, kc, cout, c0 == 0);
            else
              gemm16(u, w, m, kc, cout, c0 == 0);
          }
    }
    output_tf(c, M, t0, n, y);
  }
}

static unsigned long long rng = 88172645463325252ull;
static double uniform(void) {  // (0, 1)
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return ((rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static void errors(const float* y, const double* ref, size_t n, double* mabs, double* mrel) {
  *mabs = *mrel = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = fabs(y[i] - ref[i]), r = d / fmax(fabs(ref[i]), 0.01);
    if (d > *mabs) *mabs = d;
    if (r > *mrel) *mrel = r;
  }
}

int main(int argc, char** argv) {
  if (argc != 5 || !__builtin_cpu_supports("avx512f")) {
    fprintf(stderr, "usage: winograd_vs_xnnpack H W CIN COUT (needs AVX-512F)\n");
    return 2;
  }
  const size_t H = atol(argv[1]), W = atol(argv[2]), CI = atol(argv[3]), CO = atol(argv[4]);
  if (!H || !W || !CI || !CO || CO % 16 || CI % 16 || CI > MAX_CIN) {
    fprintf(stderr, "%zux%zux%zu -> %zu: unsupported (cin and cout must be multiples of 16, cin <= %d)\n", H, W, CI,
            CO, MAX_CIN);
    return 2;
  }
  const size_t TH = (H + 1) / 2, TW = (W + 1) / 2, NY = H * W * CO;
  float* x = aligned_alloc(64, H * W * CI * 4);
  float* ohwi = aligned_alloc(64, CO * 9 * CI * 4);
  float* wt = aligned_alloc(64, 16 * CI * CO * 4);
  float* bias = aligned_alloc(64, CO * 4);
  float* y1 = aligned_alloc(64, NY * 4);
  float* y2 = aligned_alloc(64, NY * 4);
  float* scratch = aligned_alloc(64, wino_scratch(CO) * 4);
  double* ref = malloc(NY * sizeof(double));
  memset(scratch, 0, wino_scratch(CO) * 4);
  for (size_t i = 0; i < H * W * CI; i++) x[i] = (float)(2 * uniform() - 1);
  const double sd = 1 / sqrt(9.0 * CI);
  for (size_t i = 0; i < CO * 9 * CI; i++)
    ohwi[i] = (float)(sd * sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform()));
  for (size_t i = 0; i < CO; i++) bias[i] = (float)(0.2 * uniform() - 0.1);
  wino_weights(ohwi, CI, CO, wt);

  for (size_t oy = 0; oy < H; oy++)  // double-precision conv + bias + SiLU
    for (size_t ox = 0; ox < W; ox++)
      for (size_t o = 0; o < CO; o++) {
        double s = bias[o];
        for (size_t ky = 0; ky < 3; ky++)
          for (size_t kx = 0; kx < 3; kx++) {
            const ptrdiff_t iy = (ptrdiff_t)(oy + ky) - 1, ix = (ptrdiff_t)(ox + kx) - 1;
            if (iy < 0 || ix < 0 || iy >= (ptrdiff_t)H || ix >= (ptrdiff_t)W) continue;
            const float* xp = x + ((size_t)iy * W + (size_t)ix) * CI;
            const float* wp = ohwi + ((o * 3 + ky) * 3 + kx) * CI;
            for (size_t i = 0; i < CI; i++) s += (double)xp[i] * wp[i];
          }
        ref[(oy * W + ox) * CO + o] = s / (1 + exp(-s));
      }

  xnn_initialize(NULL);
  xnn_operator_t op;
  if (xnn_create_convolution2d_nhwc_f32(1, 1, 1, 1, 3, 3, 1, 1, 1, 1, 1, CI, CO, CI, CO, ohwi, bias, -INFINITY,
                                        INFINITY, 0, &op) != xnn_status_success ||
      xnn_setup_convolution2d_nhwc_f32(op, 1, H, W, x, y2, NULL) != xnn_status_success) {
    fprintf(stderr, "xnnpack failed\n");
    return 1;
  }
  wino_t c = {H, W, CI, CO, TH, TW, wt, bias};
  double bx = 1e9, bo = 1e9;
  for (int r = 0; r < 15; r++) {
    double t0 = now();
    xnn_run_operator(op, NULL);
    silu_pass(y2, NY);
    double t = now() - t0;
    if (t < bx) bx = t;
    t0 = now();
    wino(&c, x, y1, scratch);
    t = now() - t0;
    if (t < bo) bo = t;
  }
  double md = 0, xa, xr, wa, wr;
  for (size_t i = 0; i < NY; i++) {
    const double d = fabs(y1[i] - y2[i]);
    if (d > md) md = d;
  }
  errors(y2, ref, NY, &xa, &xr);
  errors(y1, ref, NY, &wa, &wr);
  const double fl = 2.0 * H * W * CO * CI * 9 * 1e-6;
  printf("%zux%zux%zu -> %zu: xnn+silu %.3f ms %.0f GF/s | wino %.3f ms %.0f GF/s | x%.2f | "
         "vs f64: xnn abs %.2g rel %.2g, wino abs %.2g rel %.2g | xnn-wino %.2g\n",
         H, W, CI, CO, bx, fl / bx, bo, fl / bo, bx / bo, xa, xr, wa, wr, md);
  return 0;
}
