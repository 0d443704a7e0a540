// carve_q8conv (runtime/carve_q8conv.h: the int8 convolution on AMX / AVX-512 VNNI / AVX-VNNI / AVX2 / portable C) against XNNPACK
// 2022's int8 convolution (xnn_create_convolution2d_nhwc_qc8: per-channel int8 weights, float requantization) and
// carve's float32 path for the same layer (what the xnnpack package runs: carve_conv3x3s2_small_cin for the stem,
// carve_conv3x3s1_winograd for the 3x3 stride-1 convolutions with channels in multiples of 8, else XNNPACK's f32
// convolution followed by carve_epilogue's SiLU), on every groups-1 convolution of yolo26n at 640x640 (from the
// generator's graph of manifests/yolo26n-shapes.yaml: the stem, the 3x3 stride-2 downsamplings, the C3k2 / C2PSA /
// head 1x1 and 3x3 convolutions). Not part of the package or the tests (tests/runtime/q8conv_vs_arith.py checks
// the kernel). Timings on a shared machine are indicative only.
//
//   cc -std=c11 -O3 -Iruntime bench/q8conv_vs_xnnpack.c runtime/carve_q8conv*.c runtime/carve_isa.c runtime/carve_rt.c runtime/carve_pool.c runtime/carve_epilogue.c runtime/carve_winograd.c runtime/carve_stem.c -o /tmp/q8conv_bench -lXNNPACK -lm -lpthread
//   /tmp/q8conv_bench [--threads N] [--runs R] [--layer NAME] [--variants amx,amx_packed,amx_implicit,avx512vnni,avxvnni,avx2,portable] [--no-fp32] [--cpu] [--in-stride-x2]
//
// Per layer: the median of R runs (default 9) of each system, alternating (run r starts with system r mod the number
// of systems, so that none always runs first), with a pool of N threads (default 2;
// carve's pool, which XNNPACK's operators run on too, as in a package) and N * CARVE_POOL_SLOTS_PER_THREAD scratch
// slots. carve int8 applies the layer's SiLU table in the kernel; XNNPACK's qc8 convolution has no SiLU (an int8
// package would need one more pass): its times are the convolution alone. GOP/s counts 2 * MACs of the direct
// convolution for every system. Each layer's outputs of carve int8 (act none) and XNNPACK qc8 are compared: the two
// requantizations (integer vs float) may differ by 1 (printed: the largest difference and the share of outputs
// that differ). The last lines sum the layers. Needs x86-64 (the int8 variants this CPU has are timed).

#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xnnpack.h>

#include "../runtime/carve_epilogue.h"
#include "../runtime/carve_q8conv_isa.h"
#include "../runtime/carve_stem.h"
#include "../runtime/carve_winograd.h"

typedef struct layer {
  const char* name;
  int h, w, cin, cout, k, stride, silu;
} layer;

// yolo26n at 640x640, groups-1 convolutions in graph order: input size, channels, kernel, stride (pad k / 2), SiLU.
static const layer k_layers[] = {
    {"model.0", 640, 640, 3, 16, 3, 2, 1},
    {"model.1", 320, 320, 16, 32, 3, 2, 1},
    {"model.2.cv1", 160, 160, 32, 32, 1, 1, 1},
    {"model.2.m.0.cv1", 160, 160, 16, 8, 3, 1, 1},
    {"model.2.m.0.cv2", 160, 160, 8, 16, 3, 1, 1},
    {"model.2.cv2", 160, 160, 48, 64, 1, 1, 1},
    {"model.3", 160, 160, 64, 64, 3, 2, 1},
    {"model.4.cv1", 80, 80, 64, 64, 1, 1, 1},
    {"model.4.m.0.cv1", 80, 80, 32, 16, 3, 1, 1},
    {"model.4.m.0.cv2", 80, 80, 16, 32, 3, 1, 1},
    {"model.4.cv2", 80, 80, 96, 128, 1, 1, 1},
    {"model.5", 80, 80, 128, 128, 3, 2, 1},
    {"model.6.cv1", 40, 40, 128, 128, 1, 1, 1},
    {"model.6.m.0.cv1", 40, 40, 64, 32, 1, 1, 1},
    {"model.6.m.0.cv2", 40, 40, 64, 32, 1, 1, 1},
    {"model.6.m.0.m.0.cv1", 40, 40, 32, 32, 3, 1, 1},
    {"model.6.m.0.m.0.cv2", 40, 40, 32, 32, 3, 1, 1},
    {"model.6.m.0.m.1.cv1", 40, 40, 32, 32, 3, 1, 1},
    {"model.6.m.0.m.1.cv2", 40, 40, 32, 32, 3, 1, 1},
    {"model.6.m.0.cv3", 40, 40, 64, 64, 1, 1, 1},
    {"model.6.cv2", 40, 40, 192, 128, 1, 1, 1},
    {"model.7", 40, 40, 128, 256, 3, 2, 1},
    {"model.8.cv1", 20, 20, 256, 256, 1, 1, 1},
    {"model.8.m.0.cv1", 20, 20, 128, 64, 1, 1, 1},
    {"model.8.m.0.cv2", 20, 20, 128, 64, 1, 1, 1},
    {"model.8.m.0.m.0.cv1", 20, 20, 64, 64, 3, 1, 1},
    {"model.8.m.0.m.0.cv2", 20, 20, 64, 64, 3, 1, 1},
    {"model.8.m.0.m.1.cv1", 20, 20, 64, 64, 3, 1, 1},
    {"model.8.m.0.m.1.cv2", 20, 20, 64, 64, 3, 1, 1},
    {"model.8.m.0.cv3", 20, 20, 128, 128, 1, 1, 1},
    {"model.8.cv2", 20, 20, 384, 256, 1, 1, 1},
    {"model.9.cv1", 20, 20, 256, 128, 1, 1, 0},
    {"model.9.cv2", 20, 20, 512, 256, 1, 1, 1},
    {"model.10.cv1", 20, 20, 256, 256, 1, 1, 1},
    {"model.10.m.0.attn.qkv", 20, 20, 128, 256, 1, 1, 0},
    {"model.10.m.0.attn.proj", 20, 20, 128, 128, 1, 1, 0},
    {"model.10.m.0.ffn.0", 20, 20, 128, 256, 1, 1, 1},
    {"model.10.m.0.ffn.1", 20, 20, 256, 128, 1, 1, 0},
    {"model.10.cv2", 20, 20, 256, 256, 1, 1, 1},
    {"model.13.cv1", 40, 40, 384, 128, 1, 1, 1},
    {"model.13.m.0.cv1", 40, 40, 64, 32, 1, 1, 1},
    {"model.13.m.0.cv2", 40, 40, 64, 32, 1, 1, 1},
    {"model.13.m.0.m.0.cv1", 40, 40, 32, 32, 3, 1, 1},
    {"model.13.m.0.m.0.cv2", 40, 40, 32, 32, 3, 1, 1},
    {"model.13.m.0.m.1.cv1", 40, 40, 32, 32, 3, 1, 1},
    {"model.13.m.0.m.1.cv2", 40, 40, 32, 32, 3, 1, 1},
    {"model.13.m.0.cv3", 40, 40, 64, 64, 1, 1, 1},
    {"model.13.cv2", 40, 40, 192, 128, 1, 1, 1},
    {"model.16.cv1", 80, 80, 256, 64, 1, 1, 1},
    {"model.16.m.0.cv1", 80, 80, 32, 16, 1, 1, 1},
    {"model.16.m.0.cv2", 80, 80, 32, 16, 1, 1, 1},
    {"model.16.m.0.m.0.cv1", 80, 80, 16, 16, 3, 1, 1},
    {"model.16.m.0.m.0.cv2", 80, 80, 16, 16, 3, 1, 1},
    {"model.16.m.0.m.1.cv1", 80, 80, 16, 16, 3, 1, 1},
    {"model.16.m.0.m.1.cv2", 80, 80, 16, 16, 3, 1, 1},
    {"model.16.m.0.cv3", 80, 80, 32, 32, 1, 1, 1},
    {"model.16.cv2", 80, 80, 96, 64, 1, 1, 1},
    {"model.17", 80, 80, 64, 64, 3, 2, 1},
    {"model.19.cv1", 40, 40, 192, 128, 1, 1, 1},
    {"model.19.m.0.cv1", 40, 40, 64, 32, 1, 1, 1},
    {"model.19.m.0.cv2", 40, 40, 64, 32, 1, 1, 1},
    {"model.19.m.0.m.0.cv1", 40, 40, 32, 32, 3, 1, 1},
    {"model.19.m.0.m.0.cv2", 40, 40, 32, 32, 3, 1, 1},
    {"model.19.m.0.m.1.cv1", 40, 40, 32, 32, 3, 1, 1},
    {"model.19.m.0.m.1.cv2", 40, 40, 32, 32, 3, 1, 1},
    {"model.19.m.0.cv3", 40, 40, 64, 64, 1, 1, 1},
    {"model.19.cv2", 40, 40, 192, 128, 1, 1, 1},
    {"model.20", 40, 40, 128, 128, 3, 2, 1},
    {"model.22.cv1", 20, 20, 384, 256, 1, 1, 1},
    {"model.22.m.0.0.cv1", 20, 20, 128, 64, 3, 1, 1},
    {"model.22.m.0.0.cv2", 20, 20, 64, 128, 3, 1, 1},
    {"model.22.m.0.1.attn.qkv", 20, 20, 128, 256, 1, 1, 0},
    {"model.22.m.0.1.attn.proj", 20, 20, 128, 128, 1, 1, 0},
    {"model.22.m.0.1.ffn.0", 20, 20, 128, 256, 1, 1, 1},
    {"model.22.m.0.1.ffn.1", 20, 20, 256, 128, 1, 1, 0},
    {"model.22.cv2", 20, 20, 384, 256, 1, 1, 1},
    {"model.23.one2one_cv2.0.0", 80, 80, 64, 16, 3, 1, 1},
    {"model.23.one2one_cv2.0.1", 80, 80, 16, 16, 3, 1, 1},
    {"model.23.one2one_cv2.0.2", 80, 80, 16, 4, 1, 1, 0},
    {"model.23.one2one_cv3.0.0.1", 80, 80, 64, 64, 1, 1, 1},
    {"model.23.one2one_cv3.0.1.1", 80, 80, 64, 64, 1, 1, 1},
    {"model.23.one2one_cv3.0.2", 80, 80, 64, 5, 1, 1, 0},
    {"model.23.one2one_cv2.1.0", 40, 40, 128, 16, 3, 1, 1},
    {"model.23.one2one_cv2.1.1", 40, 40, 16, 16, 3, 1, 1},
    {"model.23.one2one_cv2.1.2", 40, 40, 16, 4, 1, 1, 0},
    {"model.23.one2one_cv3.1.0.1", 40, 40, 128, 64, 1, 1, 1},
    {"model.23.one2one_cv3.1.1.1", 40, 40, 64, 64, 1, 1, 1},
    {"model.23.one2one_cv3.1.2", 40, 40, 64, 5, 1, 1, 0},
    {"model.23.one2one_cv2.2.0", 20, 20, 256, 16, 3, 1, 1},
    {"model.23.one2one_cv2.2.1", 20, 20, 16, 16, 3, 1, 1},
    {"model.23.one2one_cv2.2.2", 20, 20, 16, 4, 1, 1, 0},
    {"model.23.one2one_cv3.2.0.1", 20, 20, 256, 64, 1, 1, 1},
    {"model.23.one2one_cv3.2.1.1", 20, 20, 64, 64, 1, 1, 1},
    {"model.23.one2one_cv3.2.2", 20, 20, 64, 5, 1, 1, 0},
};
enum { NUM_LAYERS = sizeof k_layers / sizeof k_layers[0] };

// Wall-clock time, or with --cpu the CPU time of the calling thread (for --threads 1: what the run cost the core,
// whatever else the machine runs; with a pool the workers' time would be missing).
static clockid_t g_clock = CLOCK_MONOTONIC;
static int g_in_stride_x2 = 0;  // --in-stride-x2: carve's input a view with pixels 2 * cin bytes apart
static double now_ms(void) {
  struct timespec t;
  clock_gettime(g_clock, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static unsigned long long g_rng = 0x2545F4914F6CDD1Dull;
static unsigned next_u32(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (unsigned)(g_rng >> 32);
}

static void* alloc64(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64 + 64); }

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// arith.quantize_multiplier: (m, n), m in [2^30, 2^31), r ~ m * 2^-n.
static void quantize_multiplier(double r, int32_t* m, int32_t* n) {
  int e;
  const double f = frexp(r, &e);
  long long q = llround(f * 2147483648.0);
  if (q == 2147483648ll) {
    q = 1ll << 30;
    e++;
  }
  *m = (int32_t)q;
  *n = 31 - e;
}

// The record of carve_q8conv.h (as q8conv_pack.conv_record writes it) from OHWI weights.
static void pack_record(uint8_t* rec, const int8_t* ohwi, const int32_t* bias, const int32_t* mul,
                        const int32_t* shift, size_t k, size_t cin, size_t cout) {
  const size_t kp = CARVE_Q8CONV_KP(k, k, cin), coutp = CARVE_Q8CONV_COUTP(cout), kk = k * k * cin;
  memset(rec, 0, CARVE_Q8CONV_RECORD_BYTES(k, k, cin, cout));
  const uint32_t header[7] = {CARVE_Q8CONV_LAYOUT, (uint32_t)k, (uint32_t)k, (uint32_t)cin, (uint32_t)cout,
                              (uint32_t)kp, (uint32_t)coutp};
  memcpy(rec, header, sizeof header);
  int32_t* arr = (int32_t*)(void*)(rec + CARVE_Q8CONV_HEADER_BYTES);
  int8_t* panels = (int8_t*)(rec + CARVE_Q8CONV_HEADER_BYTES + 16 * coutp);
  for (size_t o = 0; o < coutp; o++) {
    int32_t wsum = 0;
    for (size_t i = 0; o < cout && i < kk; i++) {
      const int8_t v = ohwi[o * kk + i];
      wsum += v;
      panels[(o / 16) * kp * 16 + (i / 4) * 64 + (o % 16) * 4 + i % 4] = v;
    }
    arr[o] = o < cout ? bias[o] : 0;
    arr[coutp + o] = wsum;
    arr[2 * coutp + o] = o < cout ? mul[o] : 0;
    arr[3 * coutp + o] = o < cout ? shift[o] : 1;
  }
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char** argv) {
  size_t threads = 2;
  int runs = 9, fp32 = 1;
  const char* only = NULL;
  const char* want = "amx,avx512vnni";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = strtoul(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--layer") && i + 1 < argc) {
      only = argv[++i];
    } else if (!strcmp(argv[i], "--variants") && i + 1 < argc) {
      want = argv[++i];
    } else if (!strcmp(argv[i], "--no-fp32")) {
      fp32 = 0;
    } else if (!strcmp(argv[i], "--cpu")) {
      g_clock = CLOCK_THREAD_CPUTIME_ID;
    } else if (!strcmp(argv[i], "--in-stride-x2")) {
      g_in_stride_x2 = 1;
    } else {
      fprintf(stderr, "usage: q8conv_bench [--threads N] [--runs R] [--layer NAME] [--variants LIST] [--no-fp32] "
                      "[--cpu] [--in-stride-x2]\n");
      return 2;
    }
  }
  if (threads < 1 || threads > 64 || runs < 1 || runs > 1000 || (g_clock != CLOCK_MONOTONIC && threads != 1)) {
    fprintf(stderr, "q8conv_bench: --threads 1..64, --runs 1..1000, --cpu only with --threads 1\n");
    return 2;
  }
  // The int8 variants to time, in the order asked, those this CPU runs (amx_packed / amx_implicit: the AMX variant
  // with A always packed / read in place wherever possible, runtime/carve_q8conv_isa.h).
  const char* names[8];
  carve_q8conv_fn fns[8];
  int nv = 0;
  char list[256];
  snprintf(list, sizeof list, "%s", want);
  for (char* tok = strtok(list, ","); tok != NULL; tok = strtok(NULL, ",")) {
    if (!strcmp(tok, "amx") && carve_q8conv_amx_ready()) {
      names[nv] = "amx";
      fns[nv++] = carve_q8conv__amx;
    } else if (!strcmp(tok, "amx_packed") && carve_q8conv_amx_ready()) {
      names[nv] = "amx_pk";
      fns[nv++] = carve_q8conv__amx_packed;
    } else if (!strcmp(tok, "amx_implicit") && carve_q8conv_amx_ready()) {
      names[nv] = "amx_im";
      fns[nv++] = carve_q8conv__amx_implicit;
    } else if (!strcmp(tok, "avx512vnni") && carve_q8conv_vnni_ready()) {
      names[nv] = "vnni";
      fns[nv++] = carve_q8conv__avx512vnni;
    } else if (!strcmp(tok, "avx2") && carve_q8conv_avx2_ready()) {
      names[nv] = "avx2";
      fns[nv++] = carve_q8conv__avx2;
#ifdef CARVE_Q8CONV_HAVE_AVXVNNI
    } else if (!strcmp(tok, "avxvnni") && carve_q8conv_avxvnni_ready()) {
      names[nv] = "avxvnni";
      fns[nv++] = carve_q8conv__avxvnni;
#endif
    } else if (!strcmp(tok, "portable")) {
      names[nv] = "portable";
      fns[nv++] = carve_q8conv__portable;
    }
    if (nv == 8) {
      break;
    }
  }
  pthreadpool_t pool = threads > 1 ? pthreadpool_create(threads) : NULL;
  const size_t slots = threads * CARVE_POOL_SLOTS_PER_THREAD;
  if (xnn_initialize(NULL) != xnn_status_success) {
    fprintf(stderr, "xnn_initialize failed\n");
    return 1;
  }
  const carve_isa isa = carve_isa_detect();
  const carve_conv3x3s1_winograd_fn wino = carve_conv3x3s1_winograd_select(isa);
  const carve_conv3x3s2_small_cin_fn stem = carve_conv3x3s2_small_cin_select(isa);
  const carve_epilogue_fn epilogue = carve_epilogue_select(isa);

  printf("yolo26n 640, groups-1 convolutions, %zu thread(s), median of %d runs, %s ms (GOP/s); indicative only\n",
         threads, runs, g_clock == CLOCK_MONOTONIC ? "wall-clock" : "thread CPU");
  printf("%-28s %-22s", "layer", "shape");
  for (int v = 0; v < nv; v++) {
    printf(" %16s", names[v]);
  }
  printf(" %16s %16s %9s\n", "xnn-qc8", fp32 ? "fp32" : "", "diff");
  double tot[8] = {0}, tot_ops = 0;
  int max_diff_all = 0;
  for (int li = 0; li < NUM_LAYERS; li++) {
    const layer* L = &k_layers[li];
    if (only != NULL && strcmp(only, L->name) != 0) {
      continue;
    }
    const size_t h = (size_t)L->h, w = (size_t)L->w, cin = (size_t)L->cin, cout = (size_t)L->cout;
    const size_t k = (size_t)L->k, s = (size_t)L->stride, pad = k / 2;
    const size_t oh = (h + 2 * pad - k) / s + 1, ow = (w + 2 * pad - k) / s + 1, kk = k * k * cin;
    const double ops = 2.0 * (double)(oh * ow) * (double)cout * (double)kk;
    // int8 data: input, OHWI weights (per-channel scale, values over [-127, 127]), bias, scales
    int8_t* x8 = alloc64(h * w * cin);
    int8_t* w8 = alloc64(cout * kk);
    int32_t* b32 = alloc64(cout * 4);
    int32_t *mul = alloc64(cout * 4), *shift = alloc64(cout * 4);
    float* wscale = alloc64(cout * 4);
    for (size_t i = 0; i < h * w * cin; i++) x8[i] = (int8_t)(next_u32() % 200 - 100);
    for (size_t i = 0; i < cout * kk; i++) w8[i] = (int8_t)((int)(next_u32() % 255) - 127);
    const float in_scale = 0.02f;
    const int32_t zx = -5, zy = 3;
    const double acc_sd = sqrt((double)kk) * 73.3 * 58.0;  // sd of sum w (x - zx): |w| uniform, x in [-100, 100)
    const float out_scale = (float)(in_scale * 0.01 * acc_sd / 40.0);
    for (size_t o = 0; o < cout; o++) {
      wscale[o] = 0.01f * (1.0f + (float)(o % 7) / 7.0f);
      b32[o] = (int32_t)(next_u32() % 20001) - 10000;
      quantize_multiplier((double)in_scale * wscale[o] / out_scale, &mul[o], &shift[o]);
    }
    // carve int8: blob = table (256 bytes, SiLU-like: any int8 -> int8 map costs the same) + record
    const size_t rec_off = 256, blob_n = rec_off + CARVE_Q8CONV_RECORD_BYTES(k, k, cin, cout);
    uint8_t* blob = alloc64(blob_n);
    for (int i = 0; i < 256; i++) blob[i] = (uint8_t)(i < 128 ? 128 : i);
    pack_record(blob + rec_off, w8, b32, mul, shift, k, cin, cout);
    // carve's input view: packed, or with --in-stride-x2 every pixel 2 * cin bytes apart (channels cin .. 2 cin - 1
    // another tensor's: noise), as a channel slice of a concat or split is
    const size_t xs = g_in_stride_x2 ? 2 * cin : cin;
    const size_t out_off = (h * w * xs + 63) / 64 * 64, arena_n = out_off + oh * ow * cout;
    uint8_t* arena = alloc64(arena_n);
    for (size_t p = 0; p < h * w; p++) {
      memcpy(arena + p * xs, x8 + p * cin, cin);
      for (size_t j = cin; j < xs; j++) arena[p * xs + j] = (uint8_t)next_u32();
    }
    void* scratch = alloc64(slots * CARVE_Q8CONV_SLOT_BYTES(k, k, cin));
    carve_q8_desc d;
    memset(&d, 0, sizeof d);
    d.kind = CARVE_Q8_CONV;
    d.kh = d.kw = (uint32_t)k;
    d.stride = (uint32_t)s;
    d.pad = (uint32_t)pad;
    d.groups = 1;
    d.cin = (uint32_t)cin;
    d.cout = (uint32_t)cout;
    d.h = (uint32_t)h;
    d.w = (uint32_t)w;
    d.in_stride = (uint32_t)xs;
    d.out_stride = cout;
    d.out_off = out_off;
    d.weight_off = rec_off;
    d.lut_off = 0;
    d.act = L->silu ? CARVE_ACT_SILU : CARVE_ACT_NONE;
    d.in_zero = zx;
    d.out_zero = zy;
    carve_q8_desc d_none = d;
    d_none.act = CARVE_ACT_NONE;
    // XNNPACK qc8
    int8_t* y_xnn = alloc64(oh * ow * cout);
    xnn_operator_t q8op = NULL;
    if (xnn_create_convolution2d_nhwc_qc8((uint32_t)pad, (uint32_t)pad, (uint32_t)pad, (uint32_t)pad, (uint32_t)k,
                                          (uint32_t)k, (uint32_t)s, (uint32_t)s, 1, 1, 1, cin, cout, cin, cout,
                                          (int8_t)zx, in_scale, wscale, w8, b32, (int8_t)zy, out_scale, -128, 127, 0,
                                          &q8op) != xnn_status_success ||
        xnn_setup_convolution2d_nhwc_qc8(q8op, 1, h, w, x8, y_xnn, pool) != xnn_status_success) {
      fprintf(stderr, "%s: XNNPACK qc8 failed\n", L->name);
      return 1;
    }
    // float32: x, OHWI weights, bias (values irrelevant to the time)
    float *xf = alloc64(h * w * cin * 4), *wf = alloc64(cout * kk * 4), *bf = alloc64(cout * 4);
    float *yf = alloc64(oh * ow * cout * 4), *wt = NULL, *wino_scratch = NULL;
    for (size_t i = 0; i < h * w * cin; i++) xf[i] = (float)x8[i] * in_scale;
    for (size_t i = 0; i < cout * kk; i++) wf[i] = (float)w8[i] * 0.01f;
    for (size_t o = 0; o < cout; o++) bf[o] = 0.01f * (float)(o % 5);
    const int use_stem = k == 3 && s == 2 && cin <= CARVE_STEM_MAX_CIN && cout % CARVE_STEM_COUT_MULTIPLE == 0;
    const int use_wino = k == 3 && s == 1 && cin % CARVE_WINOGRAD_CHANNEL_MULTIPLE == 0 &&
                         cout % CARVE_WINOGRAD_CHANNEL_MULTIPLE == 0;
    xnn_operator_t f32op = NULL;
    if (fp32 && use_stem) {
      wt = alloc64(9 * cin * cout * 4);  // (3, 3, cin, cout); values irrelevant
      for (size_t i = 0; i < 9 * cin * cout; i++) wt[i] = wf[i];
    } else if (fp32 && use_wino) {
      wt = alloc64(16 * cin * cout * 4);  // (16, cin, cout) transformed weights; values irrelevant to the time
      for (size_t i = 0; i < 16 * cin * cout; i++) wt[i] = wf[i % (cout * kk)];
      wino_scratch = alloc64(slots * CARVE_WINOGRAD_SLOT_BYTES(cout));
    } else if (fp32) {
      if (xnn_create_convolution2d_nhwc_f32((uint32_t)pad, (uint32_t)pad, (uint32_t)pad, (uint32_t)pad, (uint32_t)k,
                                            (uint32_t)k, (uint32_t)s, (uint32_t)s, 1, 1, 1, cin, cout, cin, cout, wf,
                                            bf, -INFINITY, INFINITY, 0, &f32op) != xnn_status_success ||
          xnn_setup_convolution2d_nhwc_f32(f32op, 1, h, w, xf, yf, pool) != xnn_status_success) {
        fprintf(stderr, "%s: XNNPACK f32 failed\n", L->name);
        return 1;
      }
    }
    const carve_act act = L->silu ? CARVE_ACT_SILU : CARVE_ACT_NONE;
    double t[8][1000];
    const int nsys = nv + 2;  // variants, XNNPACK qc8, fp32
    for (int r = 0; r < runs + 1; r++) {  // run 0 warms up; run r starts with system r % nsys (no order bias)
      for (int j = 0; j < nsys; j++) {
        const int v = (r + j) % nsys;
        if (v == nv + 1 && !fp32) {
          continue;
        }
        const double t0 = now_ms();
        carve_status st = CARVE_OK;
        if (v < nv) {
          st = fns[v](&d, blob, arena, scratch, slots, pool);
        } else if (v == nv) {
          st = xnn_run_operator(q8op, pool) == xnn_status_success ? CARVE_OK : CARVE_ERR_BACKEND;
        } else if (use_stem) {
          st = stem(xf, cin, h, w, cin, wt, bf, cout, yf, cout, act, pool);
        } else if (use_wino) {
          st = wino(xf, cin, h, w, cin, wt, bf, cout, yf, cout, NULL, 0, act, wino_scratch, slots, pool);
        } else {
          st = xnn_run_operator(f32op, pool) == xnn_status_success ? CARVE_OK : CARVE_ERR_BACKEND;
          if (st == CARVE_OK && L->silu) {
            st = epilogue(yf, cout, NULL, 0, oh * ow, cout, act, pool);
          }
        }
        if (st != CARVE_OK) {
          fprintf(stderr, "%s: system %d failed\n", L->name, v);
          return 1;
        }
        if (r > 0) t[v][r - 1] = now_ms() - t0;
      }
    }
    // carve int8 (act none) against XNNPACK qc8
    if (fns[0](&d_none, blob, arena, scratch, slots, pool) != CARVE_OK) return 1;
    int max_diff = 0;
    size_t differ = 0;
    for (size_t i = 0; i < oh * ow * cout; i++) {
      const int dlt = abs((int)(int8_t)arena[out_off + i] - (int)y_xnn[i]);
      max_diff = dlt > max_diff ? dlt : max_diff;
      differ += dlt != 0;
    }
    max_diff_all = max_diff > max_diff_all ? max_diff : max_diff_all;
    char shape[64];
    snprintf(shape, sizeof shape, "%dx%d %d->%d %dx%d/%d", L->h, L->w, L->cin, L->cout, L->k, L->k, L->stride);
    printf("%-28s %-22s", L->name, shape);
    for (int v = 0; v < nsys; v++) {
      if (v == nv + 1 && !fp32) {
        printf(" %16s", "");
        continue;
      }
      const double ms = median(t[v], runs);
      tot[v] += ms;
      printf(" %7.3f (%6.0f)", ms, ops / ms * 1e-6);
    }
    printf(" %3d %4.1f%%\n", max_diff, 100.0 * (double)differ / (double)(oh * ow * cout));
    tot_ops += ops;
    xnn_delete_operator(q8op);
    if (f32op) xnn_delete_operator(f32op);
    free(x8), free(w8), free(b32), free(mul), free(shift), free(wscale), free(blob), free(arena), free(scratch);
    free(y_xnn), free(xf), free(wf), free(bf), free(yf), free(wt), free(wino_scratch);
  }
  printf("%-28s %-22s", "total", "");
  for (int v = 0; v < nv + 2; v++) {
    if (v == nv + 1 && !fp32) break;
    printf(" %7.2f (%6.0f)", tot[v], tot_ops / tot[v] * 1e-6);
  }
  printf("\n%.2f GOP (2 x MACs); largest |carve int8 - XNNPACK qc8| over all outputs: %d\n", tot_ops * 1e-9,
         max_diff_all);
  if (pool) pthreadpool_destroy(pool);
  return 0;
}
