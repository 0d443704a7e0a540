// Experiment behind docs/performance.md ("A convolution kernel of our own"): a direct NHWC convolution (1x1 or
// 3x3, stride 1 or 2) with bias + SiLU in registers, against XNNPACK 2022's convolution followed by carve's SiLU
// pass, on one thread, for one layer shape. The kernel computes MR output pixels (flattened, so rows of 20 or 40
// pixels do not leave a ragged tile) x 32 output channels in 24 AVX-512 registers; weights are (kh, kw, cin,
// cout), read 32 channels at a time. Not part of the package or the tests.
//
//   cc -O3 -march=x86-64-v3 -Iruntime bench/conv_vs_xnnpack.c runtime/carve_rt.c runtime/carve_isa.c runtime/carve_epilogue.c -o /tmp/conv_vs_xnnpack -lXNNPACK -lpthreadpool -lcpuinfo -lm
//   /tmp/conv_vs_xnnpack H W CIN COUT K STRIDE      (e.g. 40 40 32 32 3 1)
//
// Best of 15 runs each; needs a CPU with AVX-512F.
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
#include "../runtime/carve_epilogue.h"
#include "../runtime/carve_simd.h"
#define silu16 silu16_avx512

// The package's SiLU pass after an XNNPACK convolution: carve_epilogue on one thread.
static void silu_pass(float* y, size_t n) { carve_epilogue(y, n, NULL, 0, 1, n, CARVE_ACT_SILU, NULL); }

#ifndef MR
#define MR 12
#endif
static const float k_zeros[4096];

typedef struct {
  const float* x;
  size_t h, w, cin, cout, k, s, pad, oh, ow;
  const float* wt;  // (k, k, cin, cout)
  const float* bias;
  float* y;
} conv_t;

// MR flattened output pixels starting at p (mr of them valid) x 32 channels at co.
__attribute__((target("avx512f"))) static void tile(const conv_t* c, size_t p, size_t mr, size_t co) {
  __m512 acc[MR][2];
  const __m512 b0 = _mm512_loadu_ps(c->bias + co), b1 = _mm512_loadu_ps(c->bias + co + 16);
  for (int i = 0; i < MR; i++) {
    acc[i][0] = b0;
    acc[i][1] = b1;
  }
  size_t oy[MR], ox[MR];
  for (size_t i = 0; i < MR; i++) {
    const size_t q = p + (i < mr ? i : mr - 1);
    oy[i] = q / c->ow;
    ox[i] = q % c->ow;
  }
  const size_t cin = c->cin, cout = c->cout;
  for (size_t ky = 0; ky < c->k; ky++) {
    for (size_t kx = 0; kx < c->k; kx++) {
      const float* a[MR];
      for (size_t i = 0; i < MR; i++) {
        const ptrdiff_t iy = (ptrdiff_t)(oy[i] * c->s + ky) - (ptrdiff_t)c->pad;
        const ptrdiff_t ix = (ptrdiff_t)(ox[i] * c->s + kx) - (ptrdiff_t)c->pad;
        a[i] = (iy < 0 || ix < 0 || iy >= (ptrdiff_t)c->h || ix >= (ptrdiff_t)c->w)
                   ? k_zeros
                   : c->x + ((size_t)iy * c->w + (size_t)ix) * cin;
      }
      const float* wp = c->wt + (ky * c->k + kx) * cin * cout + co;
      for (size_t ci = 0; ci < cin; ci++) {
        const __m512 w0 = _mm512_loadu_ps(wp + ci * cout), w1 = _mm512_loadu_ps(wp + ci * cout + 16);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
          const __m512 av = _mm512_set1_ps(a[i][ci]);
          acc[i][0] = _mm512_fmadd_ps(av, w0, acc[i][0]);
          acc[i][1] = _mm512_fmadd_ps(av, w1, acc[i][1]);
        }
      }
    }
  }
  for (size_t i = 0; i < mr; i++) {
    float* yp = c->y + (p + i) * cout + co;
    _mm512_storeu_ps(yp, silu16(acc[i][0]));
    _mm512_storeu_ps(yp + 16, silu16(acc[i][1]));
  }
}

static void conv(const conv_t* c) {
  const size_t np = c->oh * c->ow;
  for (size_t co = 0; co < c->cout; co += 32)
    for (size_t p = 0; p < np; p += MR) tile(c, p, np - p < MR ? np - p : MR, co);
}

int main(int argc, char** argv) {
  if (argc != 7 || !__builtin_cpu_supports("avx512f")) {
    fprintf(stderr, "usage: conv_vs_xnnpack H W CIN COUT K STRIDE (needs AVX-512F)\n");
    return 2;
  }
  const size_t H = atol(argv[1]), W = atol(argv[2]), CI = atol(argv[3]), CO = atol(argv[4]), K = atol(argv[5]),
               S = atol(argv[6]);
  const size_t pad = (K - 1) / 2, OH = (H + 2 * pad - K) / S + 1, OW = (W + 2 * pad - K) / S + 1;
  if (CO % 32 || CI > 4096) {
    fprintf(stderr, "cout must be a multiple of 32, cin <= 4096\n");
    return 2;
  }
  float* x = aligned_alloc(64, H * W * CI * 4);
  float* ohwi = aligned_alloc(64, CO * K * K * CI * 4);
  float* hwio = aligned_alloc(64, CO * K * K * CI * 4);
  float* bias = aligned_alloc(64, CO * 4);
  float* y1 = aligned_alloc(64, OH * OW * CO * 4);
  float* y2 = aligned_alloc(64, OH * OW * CO * 4);
  for (size_t i = 0; i < H * W * CI; i++) x[i] = (rand() % 200 - 100) * 0.01f;
  for (size_t i = 0; i < CO * K * K * CI; i++) ohwi[i] = (rand() % 200 - 100) * 0.001f;
  for (size_t i = 0; i < CO; i++) bias[i] = (rand() % 200 - 100) * 0.01f;
  for (size_t o = 0; o < CO; o++)
    for (size_t t = 0; t < K * K; t++)
      for (size_t i = 0; i < CI; i++) hwio[(t * CI + i) * CO + o] = ohwi[(o * K * K + t) * CI + i];
  xnn_initialize(NULL);
  xnn_operator_t op;
  if (xnn_create_convolution2d_nhwc_f32(pad, pad, pad, pad, K, K, S, S, 1, 1, 1, CI, CO, CI, CO, ohwi, bias,
                                        -INFINITY, INFINITY, 0, &op) != xnn_status_success ||
      xnn_setup_convolution2d_nhwc_f32(op, 1, H, W, x, y2, NULL) != xnn_status_success) {
    fprintf(stderr, "xnnpack failed\n");
    return 1;
  }
  conv_t c = {x, H, W, CI, CO, K, S, pad, OH, OW, hwio, bias, y1};
  double bx = 1e9, bo = 1e9;
  for (int r = 0; r < 15; r++) {
    double t0 = now();
    xnn_run_operator(op, NULL);
    silu_pass(y2, OH * OW * CO);
    double t = now() - t0;
    if (t < bx) bx = t;
    t0 = now();
    conv(&c);
    t = now() - t0;
    if (t < bo) bo = t;
  }
  double md = 0;
  for (size_t i = 0; i < OH * OW * CO; i++) {
    double d = fabs(y1[i] - y2[i]);
    if (d > md) md = d;
  }
  const double fl = 2.0 * OH * OW * CO * CI * K * K * 1e-6;
  printf("%zux%zux%zu -> %zu k%zu s%zu: xnn+silu %.3f ms %.0f GF/s | own %.3f ms %.0f GF/s | x%.2f | maxdiff %.2g\n",
         H, W, CI, CO, K, S, bx, fl / bx, bo, fl / bo, bx / bo, md);
  return 0;
}
