// Winograd F(2x2,3x3) against XNNPACK: the runtime's carve_conv3x3s1_winograd (3x3, stride 1, pad 1, NHWC,
// batch 1, bias + SiLU in its output transform; runtime/carve_winograd.h) against XNNPACK 2022's direct convolution
// followed by carve's SiLU pass, on one thread (slots 1, no pool), for one layer shape, and how accurate each is
// against a double-precision conv + bias + SiLU (relative error |y - ref| / max(|ref|, 0.01)). Weights are
// transformed here as the generator does (G g G^T in double, rounded to float, (16, cin, cout)). This began as the
// experiment the kernel was built from (docs/performance.md, "Winograd F(2x2, 3x3)"). Not part of the package or
// the tests (tests/runtime/test_winograd.c checks the kernel).
//
//   cc -O3 -march=x86-64-v3 -Iruntime bench/winograd_vs_xnnpack.c runtime/carve_rt.c runtime/carve_isa.c runtime/carve_epilogue.c runtime/carve_winograd.c -o /tmp/winograd -lXNNPACK -lpthreadpool -lcpuinfo -lm
//   /tmp/winograd H W CIN COUT [res] [RUNS]   (e.g. 40 40 32 32; cin and cout multiples of 8)
//
// With "res" both add a residual (h, w, cout) after the SiLU, as a C3k2 bottleneck's second conv does: the
// Winograd kernel in its output transform, XNNPACK's package in its epilogue pass (carve_epilogue, SiLU and the
// addition in one pass). GF/s counts the direct convolution's FLOPs (2*H*W*cin*cout*9) for both. Best of RUNS
// (default 15) runs each, alternating; the kernel picks the best path the CPU has (AVX-512, AVX2 + FMA,
// portable) as in a package.
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

// The runtime: carve_conv3x3s1_winograd and the SiLU pass (carve_epilogue).
#include "../runtime/carve_epilogue.h"
#include "../runtime/carve_winograd.h"

// The package's SiLU (+ residual) pass after an XNNPACK convolution: carve_epilogue on one thread.
static void silu_pass(float* y, size_t n, const float* r) { carve_epilogue(y, n, r, n, 1, n, CARVE_ACT_SILU, NULL); }

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
  if (argc < 5 || argc > 7 || !__builtin_cpu_supports("avx512f")) {
    fprintf(stderr, "usage: winograd_vs_xnnpack H W CIN COUT [res] [RUNS] (needs AVX-512F)\n");
    return 2;
  }
  const size_t H = atol(argv[1]), W = atol(argv[2]), CI = atol(argv[3]), CO = atol(argv[4]);
  int with_res = 0, runs = 15;
  for (int a = 5; a < argc; a++) {
    if (strcmp(argv[a], "res") == 0) {
      with_res = 1;
    } else {
      runs = atoi(argv[a]);
    }
  }
  if (!H || !W || !CI || !CO || CO % CARVE_WINOGRAD_CHANNEL_MULTIPLE || CI % CARVE_WINOGRAD_CHANNEL_MULTIPLE) {
    fprintf(stderr, "%zux%zux%zu -> %zu: unsupported (cin and cout must be multiples of %d)\n", H, W, CI, CO,
            CARVE_WINOGRAD_CHANNEL_MULTIPLE);
    return 2;
  }
  const size_t NY = H * W * CO;
  float* x = aligned_alloc(64, H * W * CI * 4);
  float* ohwi = aligned_alloc(64, CO * 9 * CI * 4);
  float* wt = aligned_alloc(64, 16 * CI * CO * 4);
  float* bias = aligned_alloc(64, CO * 4);
  float* y1 = aligned_alloc(64, NY * 4);
  float* y2 = aligned_alloc(64, NY * 4);
  float* scratch = aligned_alloc(64, CARVE_WINOGRAD_SLOT_BYTES(CO));
  float* res = with_res ? aligned_alloc(64, NY * 4) : NULL;
  double* ref = malloc(NY * sizeof(double));
  for (size_t i = 0; i < H * W * CI; i++) x[i] = (float)(2 * uniform() - 1);
  for (size_t i = 0; with_res && i < NY; i++) res[i] = (float)(2 * uniform() - 1);
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
        ref[(oy * W + ox) * CO + o] = s / (1 + exp(-s)) + (with_res ? res[(oy * W + ox) * CO + o] : 0.0);
      }

  xnn_initialize(NULL);
  xnn_operator_t op;
  if (xnn_create_convolution2d_nhwc_f32(1, 1, 1, 1, 3, 3, 1, 1, 1, 1, 1, CI, CO, CI, CO, ohwi, bias, -INFINITY,
                                        INFINITY, 0, &op) != xnn_status_success ||
      xnn_setup_convolution2d_nhwc_f32(op, 1, H, W, x, y2, NULL) != xnn_status_success) {
    fprintf(stderr, "xnnpack failed\n");
    return 1;
  }
  double bx = 1e9, bo = 1e9;
  for (int r = 0; r < runs; r++) {
    double t0 = now();
    xnn_run_operator(op, NULL);
    silu_pass(y2, NY, res);
    double t = now() - t0;
    if (t < bx) bx = t;
    t0 = now();
    if (carve_conv3x3s1_winograd(x, CI, H, W, CI, wt, bias, CO, y1, CO, res, CO, CARVE_ACT_SILU, scratch, 1,
                                 NULL) != CARVE_OK) {
      fprintf(stderr, "carve_conv3x3s1_winograd failed\n");
      return 1;
    }
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
  printf("%zux%zux%zu -> %zu%s: xnn+silu %.3f ms %.0f GF/s | wino %.3f ms %.0f GF/s | x%.2f | "
         "vs f64: xnn abs %.2g rel %.2g, wino abs %.2g rel %.2g | xnn-wino %.2g\n",
         H, W, CI, CO, with_res ? " +res" : "", bx, fl / bx, bo, fl / bo, bx / bo, xa, xr, wa, wr, md);
  return 0;
}
