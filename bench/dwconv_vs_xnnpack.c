// Depthwise 3x3 convolution against XNNPACK: the runtime's carve_dwconv3x3 (stride 1, pad 1, NHWC, batch 1,
// bias + SiLU before the store; runtime/carve_dwconv.h) against XNNPACK 2022's depthwise convolution (groups = c)
// followed by carve's SiLU pass (carve_epilogue), on 1 and 2 threads, for one layer shape, and how accurate
// each is against a double-precision depthwise conv + bias + SiLU (relative error |y - ref| / max(|ref|,
// 0.01)). Not part of the package or the tests (tests/runtime/test_dwconv.c checks the kernel).
//
//   cc -O3 -march=x86-64-v3 -Iruntime bench/dwconv_vs_xnnpack.c runtime/carve_rt.c runtime/carve_isa.c runtime/carve_epilogue.c runtime/carve_dwconv.c -o /tmp/dwconv -lXNNPACK -lpthreadpool -lcpuinfo -lm
//   /tmp/dwconv H W C [none] [THREADS] [RUNS]   (e.g. 80 80 64; "none": no SiLU, as the PSA's attn.pe)
//
// Best of RUNS (default 30) runs each, alternating; the kernel picks the best path the CPU has (AVX-512,
// AVX2 + FMA, portable) as in a package. GB/s counts one read of x and one write of y.
#define _GNU_SOURCE
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

#include "../runtime/carve_dwconv.h"
#include "../runtime/carve_epilogue.h"

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
  if (argc < 4) {
    fprintf(stderr, "usage: dwconv_vs_xnnpack H W C [none] [THREADS] [RUNS]\n");
    return 2;
  }
  const size_t H = atol(argv[1]), W = atol(argv[2]), C = atol(argv[3]);
  int act = 1, threads = 1, runs = 30, nums = 0;
  for (int a = 4; a < argc; a++) {
    if (strcmp(argv[a], "none") == 0) {
      act = 0;
    } else if (nums++ == 0) {
      threads = atoi(argv[a]);
    } else {
      runs = atoi(argv[a]);
    }
  }
  const size_t N = H * W * C;
  float* x = aligned_alloc(64, N * 4);
  float* cw = aligned_alloc(64, C * 9 * 4);  // (c, 3, 3): XNNPACK's (groups, kh, kw, 1)
  float* hwc = aligned_alloc(64, C * 9 * 4);  // (3, 3, c): carve_dwconv3x3's
  float* bias = aligned_alloc(64, C * 4);
  float* y1 = aligned_alloc(64, N * 4);
  float* y2 = aligned_alloc(64, N * 4);
  double* ref = malloc(N * sizeof(double));
  for (size_t i = 0; i < N; i++) x[i] = (float)(4 * uniform() - 2);
  for (size_t i = 0; i < C * 9; i++) cw[i] = (float)(2 * uniform() - 1) / 3;
  for (size_t i = 0; i < C; i++) bias[i] = (float)(0.2 * uniform() - 0.1);
  for (size_t ch = 0; ch < C; ch++)
    for (size_t t = 0; t < 9; t++) hwc[t * C + ch] = cw[ch * 9 + t];
  for (size_t oy = 0; oy < H; oy++)
    for (size_t ox = 0; ox < W; ox++)
      for (size_t ch = 0; ch < C; ch++) {
        double s = bias[ch];
        for (size_t ky = 0; ky < 3; ky++)
          for (size_t kx = 0; kx < 3; kx++) {
            const ptrdiff_t iy = (ptrdiff_t)(oy + ky) - 1, ix = (ptrdiff_t)(ox + kx) - 1;
            if (iy < 0 || ix < 0 || iy >= (ptrdiff_t)H || ix >= (ptrdiff_t)W) continue;
            s += (double)x[((size_t)iy * W + (size_t)ix) * C + ch] * cw[ch * 9 + ky * 3 + kx];
          }
        ref[(oy * W + ox) * C + ch] = act ? s / (1 + exp(-s)) : s;
      }

  xnn_initialize(NULL);
  pthreadpool_t pool = threads > 1 ? pthreadpool_create(threads) : NULL;
  xnn_operator_t op;
  if (xnn_create_convolution2d_nhwc_f32(1, 1, 1, 1, 3, 3, 1, 1, 1, 1, C, 1, 1, C, C, cw, bias, -INFINITY, INFINITY,
                                        0, &op) != xnn_status_success ||
      xnn_setup_convolution2d_nhwc_f32(op, 1, H, W, x, y2, pool) != xnn_status_success) {
    fprintf(stderr, "xnnpack failed\n");
    return 1;
  }
  const carve_act a = act ? CARVE_ACT_SILU : CARVE_ACT_NONE;
  double bx = 1e9, bo = 1e9;
  for (int r = 0; r < runs; r++) {
    double t0 = now();
    xnn_run_operator(op, pool);
    if (act) carve_epilogue(y2, C, NULL, C, H * W, C, CARVE_ACT_SILU, pool);
    double t = now() - t0;
    if (t < bx) bx = t;
    t0 = now();
    if (carve_dwconv3x3(x, C, H, W, C, hwc, bias, y1, C, a, pool) != CARVE_OK) {
      fprintf(stderr, "carve_dwconv3x3 failed\n");
      return 1;
    }
    t = now() - t0;
    if (t < bo) bo = t;
  }
  double md = 0, xa, xr, ka, kr;
  for (size_t i = 0; i < N; i++) {
    const double d = fabs(y1[i] - y2[i]);
    if (d > md) md = d;
  }
  errors(y2, ref, N, &xa, &xr);
  errors(y1, ref, N, &ka, &kr);
  const double gb = 2.0 * N * 4 * 1e-6;
  printf("%zux%zux%zu %s t%d: xnn%s %.4f ms %.1f GB/s | carve %.4f ms %.1f GB/s | x%.2f | "
         "vs f64: xnn abs %.2g rel %.2g, carve abs %.2g rel %.2g | xnn-carve %.2g\n",
         H, W, C, act ? "silu" : "none", threads, act ? "+silu" : "", bx, gb / bx, bo, gb / bo, bx / bo, xa, xr, ka,
         kr, md);
  return 0;
}
