// carve_pt_run (runtime/carve_portable.c) against plain loops in double.
//
// Every kernel runs on odd sizes, strided channel views (a slice of a wider
// buffer on input and output) and, for the convolutions, output channel counts
// that are not multiples of CARVE_PT_OC, groups (dense, grouped, depthwise),
// padding and strides. Weights are drawn in PyTorch's layout and packed into
// the blob layout carve_portable.h documents. A float32 sum of n terms is
// within n * 2^-24 * sum|term| of the exact sum, so each output must be within
// (n + 2) * 2^-24 * sum|term| of the double reference; the channels of a
// strided output outside the op's slot must stay untouched.

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carve_portable.h"

#define CHECK(cond, ...)                                                 \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                      \
      fputc('\n', stderr);                                               \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

#define SENTINEL 12345.0f
#define ULP (1.0 / 16777216.0)  // 2^-24

// ---- Random numbers (splitmix64, fixed seed) ------------------------------------

static uint64_t rng_state = 0x5eed;

static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static float uniform(float lo, float hi) { return lo + (hi - lo) * (float)((next_u64() >> 40) * (1.0 / 16777216.0)); }

static size_t pick(size_t lo, size_t hi) { return lo + (size_t)(next_u64() % (hi - lo + 1)); }

// ---- Buffers ----------------------------------------------------------------------

typedef struct bufs {
  float* weights;  // blob
  float* arena;
  size_t arena_floats;
} bufs;

static float* fill(size_t n, float lo, float hi) {
  float* p = malloc((n ? n : 1) * sizeof(float));
  CHECK(p != NULL, "out of memory");
  for (size_t i = 0; i < n; i++) p[i] = uniform(lo, hi);
  return p;
}

// Checks y (strided, `count` pixels of `c` channels at channel `off` of `stride`)
// against ref, within tol[i], and that the other channels still hold SENTINEL.
static void check_output(const char* what, const float* y, size_t count, size_t c, size_t off, size_t stride,
                         const double* ref, const double* tol) {
  for (size_t p = 0; p < count; p++) {
    for (size_t ch = 0; ch < stride; ch++) {
      const float v = y[p * stride + ch];
      if (ch < off || ch >= off + c) {
        CHECK(v == SENTINEL, "%s: pixel %zu channel %zu outside the slot was written (%g)", what, p, ch, v);
        continue;
      }
      const double r = ref[p * c + ch - off], t = tol[p * c + ch - off];
      CHECK(fabs(v - r) <= t, "%s: pixel %zu channel %zu: %.9g vs %.9g (tol %.3g)", what, p, ch - off, v, r, t);
    }
  }
}

static size_t out_size(size_t in, size_t k, size_t s, size_t p) { return (in + 2 * p - k) / s + 1; }

// ---- Convolution --------------------------------------------------------------------

static void test_conv(size_t h, size_t w, size_t cin, size_t cout, size_t k, size_t s, size_t pad, size_t groups) {
  char what[128];
  snprintf(what, sizeof what, "conv %zux%zux%zu -> %zu, k%zu s%zu p%zu g%zu", h, w, cin, cout, k, s, pad, groups);
  const size_t cin_g = cin / groups, cout_g = cout / groups;
  const size_t oh = out_size(h, k, s, pad), ow = out_size(w, k, s, pad);
  const size_t in_stride = cin + 3, in_off = 2, out_stride = cout + 5, out_off = 1;
  float* wt = fill(cout * cin_g * k * k, -1.0f, 1.0f);  // PyTorch (cout, cin/g, k, k)
  float* bias = fill(cout, -1.0f, 1.0f);
  float* x = fill(h * w * in_stride, -2.0f, 2.0f);
  // Blob: bias, then the packed weights.
  const int depthwise = groups == cin && cin == cout;
  const size_t blocks = (cout_g + CARVE_PT_OC - 1) / CARVE_PT_OC;
  const size_t packed = depthwise ? k * k * cin : groups * blocks * k * k * cin_g * CARVE_PT_OC;
  float* blob = calloc(cout + packed, sizeof(float));
  CHECK(blob != NULL, "out of memory");
  memcpy(blob, bias, cout * sizeof(float));
  float* pw = blob + cout;
  for (size_t o = 0; o < cout; o++) {
    for (size_t i = 0; i < cin_g; i++) {
      for (size_t ky = 0; ky < k; ky++) {
        for (size_t kx = 0; kx < k; kx++) {
          const float v = wt[((o * cin_g + i) * k + ky) * k + kx];
          if (depthwise) {
            pw[(ky * k + kx) * cin + o] = v;  // (kh, kw, c)
          } else {
            const size_t g = o / cout_g, og = o % cout_g, blk = og / CARVE_PT_OC, lane = og % CARVE_PT_OC;
            // (g, blocks, kh, kw, cin/g, OC)
            pw[((((g * blocks + blk) * k + ky) * k + kx) * cin_g + i) * CARVE_PT_OC + lane] = v;
          }
        }
      }
    }
  }
  // Arena: x, then y.
  const size_t x_floats = h * w * in_stride, y_floats = oh * ow * out_stride;
  float* arena = malloc((x_floats + y_floats) * sizeof(float));
  CHECK(arena != NULL, "out of memory");
  memcpy(arena, x, x_floats * sizeof(float));
  for (size_t i = 0; i < y_floats; i++) arena[x_floats + i] = SENTINEL;
  float* zeros = calloc(cin + 1, sizeof(float));
  CHECK(zeros != NULL, "out of memory");
  const carve_pt_desc d = {.kind = CARVE_PT_CONV, .kh = (uint32_t)k, .kw = (uint32_t)k, .stride = (uint32_t)s,
                           .pad = (uint32_t)pad, .groups = (uint32_t)groups, .cin = (uint32_t)cin,
                           .cout = (uint32_t)cout, .h = (uint32_t)h, .w = (uint32_t)w, .in_stride = in_stride,
                           .out_stride = out_stride, .weight_off = cout, .bias_off = 0, .in_off = in_off,
                           .out_off = x_floats + out_off};
  carve_pt_run(&d, blob, arena, zeros);
  double* ref = malloc(oh * ow * cout * sizeof(double));
  double* tol = malloc(oh * ow * cout * sizeof(double));
  CHECK(ref != NULL && tol != NULL, "out of memory");
  for (size_t oy = 0; oy < oh; oy++) {
    for (size_t ox = 0; ox < ow; ox++) {
      for (size_t o = 0; o < cout; o++) {
        const size_t g = o / cout_g;
        double acc = bias[o], mag = fabs(bias[o]);
        for (size_t ky = 0; ky < k; ky++) {
          for (size_t kx = 0; kx < k; kx++) {
            const long iy = (long)(oy * s + ky) - (long)pad, ix = (long)(ox * s + kx) - (long)pad;
            if (iy < 0 || ix < 0 || iy >= (long)h || ix >= (long)w) continue;
            for (size_t i = 0; i < cin_g; i++) {
              const double t = (double)x[((size_t)iy * w + (size_t)ix) * in_stride + in_off + g * cin_g + i] *
                                wt[((o * cin_g + i) * k + ky) * k + kx];
              acc += t;
              mag += fabs(t);
            }
          }
        }
        ref[(oy * ow + ox) * cout + o] = acc;
        tol[(oy * ow + ox) * cout + o] = (double)(k * k * cin_g + 2) * ULP * mag + 1e-30;
      }
    }
  }
  check_output(what, arena + x_floats, oh * ow, cout, out_off, out_stride, ref, tol);
  free(wt), free(bias), free(x), free(blob), free(arena), free(zeros), free(ref), free(tol);
}

// ---- Transposed convolution (kernel = stride) -----------------------------------------

static void test_deconv(size_t h, size_t w, size_t cin, size_t cout, size_t k) {
  char what[96];
  snprintf(what, sizeof what, "deconv %zux%zux%zu -> %zu, k%zu", h, w, cin, cout, k);
  const size_t oh = h * k, ow = w * k, in_stride = cin + 1, out_stride = cout + 2, out_off = 2;
  float* wt = fill(cin * cout * k * k, -1.0f, 1.0f);  // PyTorch (cin, cout, k, k)
  float* bias = fill(cout, -1.0f, 1.0f);
  float* x = fill(h * w * in_stride, -2.0f, 2.0f);
  const size_t blocks = (cout + CARVE_PT_OC - 1) / CARVE_PT_OC;
  float* blob = calloc(cout + blocks * k * k * cin * CARVE_PT_OC, sizeof(float));
  CHECK(blob != NULL, "out of memory");
  memcpy(blob, bias, cout * sizeof(float));
  for (size_t i = 0; i < cin; i++)
    for (size_t o = 0; o < cout; o++)
      for (size_t ky = 0; ky < k; ky++)
        for (size_t kx = 0; kx < k; kx++)  // (blocks, kh, kw, cin, OC)
          blob[cout + ((((o / CARVE_PT_OC) * k + ky) * k + kx) * cin + i) * CARVE_PT_OC + o % CARVE_PT_OC] =
              wt[((i * cout + o) * k + ky) * k + kx];
  const size_t x_floats = h * w * in_stride, y_floats = oh * ow * out_stride;
  float* arena = malloc((x_floats + y_floats) * sizeof(float));
  CHECK(arena != NULL, "out of memory");
  memcpy(arena, x, x_floats * sizeof(float));
  for (size_t i = 0; i < y_floats; i++) arena[x_floats + i] = SENTINEL;
  float* zeros = calloc(cin, sizeof(float));
  CHECK(zeros != NULL, "out of memory");
  const carve_pt_desc d = {.kind = CARVE_PT_DECONV, .kh = (uint32_t)k, .kw = (uint32_t)k, .stride = (uint32_t)k,
                           .groups = 1, .cin = (uint32_t)cin, .cout = (uint32_t)cout, .h = (uint32_t)h,
                           .w = (uint32_t)w, .in_stride = in_stride, .out_stride = out_stride, .weight_off = cout,
                           .out_off = x_floats + out_off};
  carve_pt_run(&d, blob, arena, zeros);
  double* ref = malloc(oh * ow * cout * sizeof(double));
  double* tol = malloc(oh * ow * cout * sizeof(double));
  CHECK(ref != NULL && tol != NULL, "out of memory");
  for (size_t oy = 0; oy < oh; oy++) {
    for (size_t ox = 0; ox < ow; ox++) {
      for (size_t o = 0; o < cout; o++) {
        double acc = bias[o], mag = fabs(bias[o]);
        for (size_t i = 0; i < cin; i++) {
          const double t = (double)x[((oy / k) * w + ox / k) * in_stride + i] *
                           wt[((i * cout + o) * k + oy % k) * k + ox % k];
          acc += t;
          mag += fabs(t);
        }
        ref[(oy * ow + ox) * cout + o] = acc;
        tol[(oy * ow + ox) * cout + o] = (double)(cin + 2) * ULP * mag + 1e-30;
      }
    }
  }
  check_output(what, arena + x_floats, oh * ow, cout, out_off, out_stride, ref, tol);
  free(wt), free(bias), free(x), free(blob), free(arena), free(zeros), free(ref), free(tol);
}

// ---- Max pool, global average pool, fully connected, softmax, add, copy --------------------

static void test_maxpool(size_t h, size_t w, size_t c, size_t k, size_t s, size_t pad) {
  char what[96];
  snprintf(what, sizeof what, "maxpool %zux%zux%zu, k%zu s%zu p%zu", h, w, c, k, s, pad);
  const size_t oh = out_size(h, k, s, pad), ow = out_size(w, k, s, pad), in_stride = c + 2, out_stride = c + 1;
  const size_t x_floats = h * w * in_stride, y_floats = oh * ow * out_stride;
  float* arena = fill(x_floats + y_floats, -3.0f, -1.0f);  // all negative: padding must not act as 0
  for (size_t i = 0; i < y_floats; i++) arena[x_floats + i] = SENTINEL;
  const carve_pt_desc d = {.kind = CARVE_PT_MAXPOOL, .kh = (uint32_t)k, .kw = (uint32_t)k, .stride = (uint32_t)s,
                           .pad = (uint32_t)pad, .cin = (uint32_t)c, .h = (uint32_t)h, .w = (uint32_t)w,
                           .in_stride = in_stride, .out_stride = out_stride, .out_off = x_floats};
  carve_pt_run(&d, NULL, arena, NULL);
  double* ref = malloc(oh * ow * c * sizeof(double));
  double* tol = calloc(oh * ow * c, sizeof(double));  // exact
  CHECK(ref != NULL && tol != NULL, "out of memory");
  for (size_t oy = 0; oy < oh; oy++)
    for (size_t ox = 0; ox < ow; ox++)
      for (size_t ch = 0; ch < c; ch++) {
        double m = -INFINITY;
        for (size_t ky = 0; ky < k; ky++)
          for (size_t kx = 0; kx < k; kx++) {
            const long iy = (long)(oy * s + ky) - (long)pad, ix = (long)(ox * s + kx) - (long)pad;
            if (iy < 0 || ix < 0 || iy >= (long)h || ix >= (long)w) continue;
            const double v = arena[((size_t)iy * w + (size_t)ix) * in_stride + ch];
            m = v > m ? v : m;
          }
        ref[(oy * ow + ox) * c + ch] = m;
      }
  check_output(what, arena + x_floats, oh * ow, c, 0, out_stride, ref, tol);
  free(arena), free(ref), free(tol);
}

static void test_gap_fc_softmax(size_t h, size_t w, size_t c, size_t cout) {
  // x (h, w, c) -> gap (c) -> fc (cout) -> softmax (cout), each into its own part of the arena.
  const size_t in_stride = c + 1, x_floats = h * w * in_stride;
  const size_t g_off = x_floats, f_off = g_off + c, s_off = f_off + cout, total = s_off + cout;
  float* arena = fill(total, -2.0f, 2.0f);
  float* blob = fill(cout + c * cout, -1.0f, 1.0f);  // bias (cout), then W (cin, cout)
  const carve_pt_desc gap = {.kind = CARVE_PT_GAP, .cin = (uint32_t)c, .h = (uint32_t)h, .w = (uint32_t)w,
                             .in_stride = in_stride, .out_stride = c, .out_off = g_off};
  const carve_pt_desc fc = {.kind = CARVE_PT_FC, .cin = (uint32_t)c, .cout = (uint32_t)cout, .h = 1, .w = 1,
                            .in_stride = c, .out_stride = cout, .weight_off = cout, .bias_off = 0,
                            .in_off = g_off, .out_off = f_off};
  const carve_pt_desc sm = {.kind = CARVE_PT_SOFTMAX, .cin = (uint32_t)cout, .h = 1, .w = 1, .in_stride = cout,
                            .out_stride = cout, .in_off = f_off, .out_off = s_off};
  carve_pt_run(&gap, blob, arena, NULL);
  carve_pt_run(&fc, blob, arena, NULL);
  carve_pt_run(&sm, blob, arena, NULL);
  double* mean = calloc(c, sizeof(double));
  double* logit = calloc(cout, sizeof(double));
  CHECK(mean != NULL && logit != NULL, "out of memory");
  for (size_t ch = 0; ch < c; ch++) {
    double sum = 0.0, mag = 0.0;
    for (size_t p = 0; p < h * w; p++) {
      sum += arena[p * in_stride + ch];
      mag += fabs(arena[p * in_stride + ch]);
    }
    mean[ch] = sum / (double)(h * w);
    const double tol = ((double)(h * w + 2) * ULP * mag) / (double)(h * w);
    CHECK(fabs(arena[g_off + ch] - mean[ch]) <= tol, "gap channel %zu: %.9g vs %.9g", ch, arena[g_off + ch],
          mean[ch]);
  }
  double zmax = -INFINITY;
  for (size_t o = 0; o < cout; o++) {
    double acc = blob[o], mag = fabs(blob[o]);
    for (size_t i = 0; i < c; i++) {  // on the kernel's own gap output, so that only the fc's error counts
      const double t = (double)arena[g_off + i] * blob[cout + i * cout + o];
      acc += t;
      mag += fabs(t);
    }
    CHECK(fabs(arena[f_off + o] - acc) <= (double)(c + 2) * ULP * mag, "fc output %zu: %.9g vs %.9g", o,
          arena[f_off + o], acc);
    logit[o] = arena[f_off + o];
    zmax = logit[o] > zmax ? logit[o] : zmax;
  }
  double z = 0.0;
  for (size_t o = 0; o < cout; o++) z += exp(logit[o] - zmax);
  double total_p = 0.0;
  for (size_t o = 0; o < cout; o++) {
    const double p = exp(logit[o] - zmax) / z;
    CHECK(fabs(arena[s_off + o] - p) <= 1e-6 * p + 1e-12, "softmax %zu: %.9g vs %.9g", o, arena[s_off + o], p);
    total_p += arena[s_off + o];
  }
  CHECK(fabs(total_p - 1.0) <= 1e-5, "softmax sums to %.9g", total_p);
  free(arena), free(blob), free(mean), free(logit);
}

static void test_add_copy(size_t pixels, size_t c) {
  const size_t n = pixels * c, wide = c + 7;
  float* arena = fill(3 * n + pixels * wide, -2.0f, 2.0f);
  for (size_t i = 0; i < pixels * wide; i++) arena[3 * n + i] = SENTINEL;
  const carve_pt_desc add = {.kind = CARVE_PT_ADD, .cin = (uint32_t)c, .h = (uint32_t)pixels, .w = 1,
                             .in_stride = c, .out_stride = c, .in_off = 0, .in2_off = n, .out_off = 2 * n};
  const carve_pt_desc copy = {.kind = CARVE_PT_COPY, .cin = (uint32_t)c, .h = 1, .w = (uint32_t)pixels,
                              .in_stride = c, .out_stride = wide, .in_off = 2 * n, .out_off = 3 * n + 4};
  carve_pt_run(&add, NULL, arena, NULL);
  carve_pt_run(&copy, NULL, arena, NULL);
  double* ref = malloc(n * sizeof(double));
  double* tol = malloc(n * sizeof(double));
  CHECK(ref != NULL && tol != NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    ref[i] = (double)arena[i] + arena[n + i];
    tol[i] = ULP * fabs(ref[i]);  // one rounding
  }
  check_output("add + copy into a slot", arena + 3 * n, pixels, c, 4, wide, ref, tol);
  free(arena), free(ref), free(tol);
}

int main(void) {
  int cases = 0;
  // The shapes YOLO26 uses (1x1, 3x3/1, 3x3/2, depthwise 3x3 and 7x7, 5x5 pools), then random ones.
  test_conv(7, 9, 3, 16, 3, 2, 1, 1), cases++;
  test_conv(5, 5, 16, 24, 1, 1, 0, 1), cases++;
  test_conv(6, 5, 13, 13, 3, 1, 1, 13), cases++;
  test_conv(5, 7, 9, 9, 7, 1, 3, 9), cases++;
  test_conv(4, 4, 12, 18, 3, 1, 1, 3), cases++;
  test_conv(1, 1, 5, 3, 3, 1, 1, 1), cases++;
  for (int i = 0; i < 150; i++) {
    const size_t k = pick(0, 2) * 2 + 1, s = pick(1, 2), pad = pick(0, 1) ? k / 2 : 0;
    const size_t h = pick(k > 2 * pad ? k - 2 * pad : 1, 11), w = pick(k > 2 * pad ? k - 2 * pad : 1, 11);
    const size_t kind = pick(0, 2), g = kind == 0 ? 1 : pick(2, 4);
    size_t cin, cout;
    if (kind == 2) {  // depthwise
      cin = cout = pick(1, 37);
      test_conv(h, w, cin, cout, k, s, pad, cin), cases++;
      continue;
    }
    cin = g * pick(1, 11);
    cout = g * pick(1, 21);
    test_conv(h, w, cin, cout, k, s, pad, g), cases++;
  }
  test_deconv(5, 3, 7, 11, 2), cases++;
  test_deconv(4, 4, 16, 8, 2), cases++;
  for (int i = 0; i < 20; i++) test_deconv(pick(1, 7), pick(1, 7), pick(1, 20), pick(1, 20), pick(1, 3)), cases++;
  test_maxpool(7, 6, 5, 5, 1, 2), cases++;
  test_maxpool(9, 8, 3, 3, 2, 1), cases++;
  test_maxpool(6, 6, 4, 2, 2, 0), cases++;
  test_gap_fc_softmax(7, 5, 37, 1000), cases++;
  test_gap_fc_softmax(1, 1, 3, 2), cases++;
  test_add_copy(13, 19), cases++;
  test_add_copy(1, 1), cases++;
  printf("portable kernels: %d cases OK\n", cases);
  return 0;
}
