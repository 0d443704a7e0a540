// carve_q8_run_pool (runtime/carve_q8.h: the carve_q8 kinds on the thread pool, bit for bit arith.py) against
// XNNPACK 2022's int8 operators for the same ops, and against carve_q8_run (one thread), on yolo26n's shapes at
// 640x640 (the generator's graph of manifests/yolo26n-shapes.yaml): every depthwise 3x3 convolution (the head's
// cv3 with SiLU, the attention's positional conv), the largest residual adds, and the element-wise int8 ops an
// xnnpack int8 package runs on carve_q8 (the image's quantize, SPPF's max pool, the upsamples, a concat copy,
// dequantizes). Not part of the package or the tests (tests/runtime/q8_pool_vs_run.py checks the kernels).
// Timings on a shared machine are indicative only.
//
//   cc -std=c11 -O3 -Iruntime bench/q8pool_vs_xnnpack.c runtime/carve_q8.c runtime/carve_q8_pool*.c runtime/carve_isa.c runtime/carve_rt.c runtime/carve_pool.c -o /tmp/q8pool_bench -lXNNPACK -lm -lpthread
//   /tmp/q8pool_bench [--threads N] [--runs R] [--op NAME] [--cpu] [--isa portable|avx2|avx512|avx512vbmi]
//
// Systems, per op: "q8 run" carve_q8_run on the calling thread (what xnnpack int8 packages ran these element-wise
// ops on before carve_q8_run_pool), "q8 pool" carve_q8_run_pool on a pool of N threads (default 2; carve's pool,
// which XNNPACK's operators run on too, as in a package; its portable loops), "q8 isa" the variant of
// carve_q8_run_pool a package selects on this CPU (runtime/carve_q8_pool.h: avx512vbmi, avx512, avx2 or portable,
// or the one --isa names, where this CPU runs it; its
// output checked byte for byte against carve_q8_run_pool's, "isa x" its speed-up over "q8 pool"), "xnnpack"
// XNNPACK's operator on the same pool:
// xnn_create_convolution2d_nhwc_qc8 for a depthwise convolution, followed for a SiLU layer by the int8 table in
// place on the pool (lut_pass: what the xnnpack int8 package ran, carve_q8_lut of runtime ABI 10, before
// carve_q8_run_pool), xnn_create_add_nd_qs8 for an add,
// xnn_create_convert_nc_qs8_f32 for a dequantize; none for quantize (XNNPACK's convert rounds differently), the max
// pool, the upsample and the copy. The median of R runs (default 9), alternating (run r starts with system r mod
// the number of systems). The outputs of carve and XNNPACK are compared: XNNPACK's float requantization may differ
// from arith's by 1 (printed: the largest difference and the share of outputs that differ). The last line sums
// the ops each system ran.

#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xnnpack.h>

#include "../runtime/carve_q8.h"
#include "../runtime/carve_q8_pool.h"
#include "../runtime/carve_q8_pool_isa.h"

typedef enum op_kind { DW, ADD, QUANT, DEQUANT, POOL, UPSAMPLE, COPY } op_kind;

typedef struct op {
  const char* name;
  op_kind kind;
  int h, w, c, silu;  // input size and channels; DW: SiLU
} op;

// yolo26n at 640 (manifests/yolo26n-shapes.yaml's graph): input sizes and channels.
static const op k_ops[] = {
    {"model.10.m.0.attn.pe", DW, 20, 20, 128, 0},
    {"model.22.m.0.1.attn.pe", DW, 20, 20, 128, 0},
    {"model.23.one2one_cv3.0.0.0", DW, 80, 80, 64, 1},
    {"model.23.one2one_cv3.0.1.0", DW, 80, 80, 64, 1},
    {"model.23.one2one_cv3.1.0.0", DW, 40, 40, 128, 1},
    {"model.23.one2one_cv3.1.1.0", DW, 40, 40, 64, 1},
    {"model.23.one2one_cv3.2.0.0", DW, 20, 20, 256, 1},
    {"model.23.one2one_cv3.2.1.0", DW, 20, 20, 64, 1},
    {"model.2.m.0 add", ADD, 160, 160, 16, 0},
    {"model.4.m.0 add", ADD, 80, 80, 32, 0},
    {"model.16.m.0.m.0 add", ADD, 80, 80, 16, 0},
    {"model.6.m.0.m.0 add", ADD, 40, 40, 32, 0},
    {"model.9 add (SPPF)", ADD, 20, 20, 256, 0},
    {"model.10.m.0.ffn add", ADD, 20, 20, 128, 0},
    {"the image's quantize", QUANT, 640, 640, 3, 0},
    {"model.9.m max pool 5/1/2", POOL, 20, 20, 128, 0},
    {"model.11 upsample", UPSAMPLE, 20, 20, 256, 0},
    {"model.14 upsample", UPSAMPLE, 40, 40, 128, 0},
    {"model.15 concat copy", COPY, 80, 80, 128, 0},
    {"dequantize 80x80x64", DEQUANT, 80, 80, 64, 0},
    {"dequantize 20x20x256", DEQUANT, 20, 20, 256, 0},
};
enum { NUM_OPS = sizeof k_ops / sizeof k_ops[0], SYSTEMS = 4, XNN = 3 };

static clockid_t g_clock = CLOCK_MONOTONIC;
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

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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

// y = lut[y + 128] in place over `pixels` rows of c channels, on the pool (tiles of about 16384 elements): the SiLU
// pass after an XNNPACK int8 convolution, as runtime ABI 10's carve_q8_lut.
typedef struct lut_task {
  int8_t* y;
  size_t c;
  const int8_t* lut;
} lut_task;

static void lut_rows(void* context, size_t start, size_t count) {
  const lut_task* t = (const lut_task*)context;
  for (size_t i = start * t->c; i < (start + count) * t->c; i++) {
    t->y[i] = t->lut[t->y[i] + 128];
  }
}

static void lut_pass(int8_t* y, size_t pixels, size_t c, const int8_t* lut, pthreadpool_t pool) {
  lut_task t = {y, c, lut};
  carve_parallelize_1d_tile(pool, lut_rows, &t, pixels, 16384 / c > 0 ? 16384 / c : 1);
}

// One op set up for every system: the carve descriptor, its arena and blob, XNNPACK's operator (or NULL).
typedef struct bench_op {
  carve_q8_desc d;
  uint8_t *arena, *blob;
  xnn_operator_t xop;
  uint8_t* y_xnn;     // XNNPACK's output (int8 or float32)
  size_t y_bytes;     // of the output
  const int8_t* lut;  // DW with SiLU: the table XNNPACK's output goes through (lut_pass)
} bench_op;

static int setup(const op* o, pthreadpool_t pool, bench_op* b) {
  const size_t h = (size_t)o->h, w = (size_t)o->w, c = (size_t)o->c, px = h * w;
  memset(b, 0, sizeof *b);
  carve_q8_desc* d = &b->d;
  d->h = (uint32_t)h;
  d->w = (uint32_t)w;
  d->cin = (uint32_t)c;
  d->in_stride = d->in2_stride = d->out_stride = c;
  const size_t in_bytes = px * c * (o->kind == QUANT ? 4 : 1);
  const size_t out_px = o->kind == UPSAMPLE ? 4 * px : px;
  b->y_bytes = out_px * c * (o->kind == DEQUANT ? 4 : 1);
  d->in_off = 0;
  d->in2_off = (in_bytes + 63) / 64 * 64;
  d->out_off = d->in2_off + (o->kind == ADD ? (in_bytes + 63) / 64 * 64 : 0);
  b->arena = alloc64(d->out_off + b->y_bytes);
  b->y_xnn = alloc64(b->y_bytes);
  if (o->kind == QUANT) {
    float* x = (float*)(void*)b->arena;
    for (size_t i = 0; i < px * c; i++) x[i] = (float)(next_u32() % 256) / 255.0f;
  } else {
    for (size_t i = 0; i < d->out_off; i++) b->arena[i] = (uint8_t)next_u32();
  }
  const int8_t* x = (const int8_t*)b->arena;
  enum xnn_status s = xnn_status_success;
  switch (o->kind) {
    case DW: {
      // 3x3 stride 1 pad 1, realistic scales: weights over [-127, 127], the output range a few sd of the sums
      const size_t k = 3, kk = k * k;
      d->kind = CARVE_Q8_CONV;
      d->kh = d->kw = (uint32_t)k;
      d->stride = d->pad = 1;
      d->groups = d->cout = (uint32_t)c;
      d->in_zero = -5;
      d->out_zero = 3;
      d->act = o->silu ? CARVE_ACT_SILU : CARVE_ACT_NONE;
      const size_t rec = 256, wbytes = kk * c;
      b->blob = alloc64(rec + 12 * c + wbytes);
      int8_t* lut = (int8_t*)b->blob;
      for (int i = 0; i < 256; i++) lut[i] = (int8_t)(i < 128 ? -128 : i - 128);  // any table costs the same
      b->lut = o->silu ? lut : NULL;
      d->lut_off = 0;
      d->weight_off = rec;
      int32_t* bias = (int32_t*)(void*)(b->blob + rec);
      int32_t *mul = bias + c, *shift = mul + c;
      int8_t* wq = (int8_t*)(b->blob + rec + 12 * c);  // carve_q8's (kh, kw, c)
      int8_t* w_ohwi = alloc64(wbytes);                // XNNPACK's (c, kh, kw, 1)
      float* wscale = alloc64(c * 4);
      const float in_scale = 0.02f;
      const double acc_sd = sqrt((double)kk) * 73.3 * 58.0;
      const float out_scale = (float)(in_scale * 0.01 * acc_sd / 40.0);
      for (size_t ch = 0; ch < c; ch++) {
        wscale[ch] = 0.01f * (1.0f + (float)(ch % 7) / 7.0f);
        bias[ch] = (int32_t)(next_u32() % 20001) - 10000;
        quantize_multiplier((double)in_scale * wscale[ch] / out_scale, &mul[ch], &shift[ch]);
        for (size_t t = 0; t < kk; t++) {
          const int8_t v = (int8_t)((int)(next_u32() % 255) - 127);
          wq[t * c + ch] = v;
          w_ohwi[ch * kk + t] = v;
        }
      }
      // XNNPACK: input and output scale 1, kernel scale m * 2^-n (what the runtime ABI 10 lowering gave it)
      for (size_t ch = 0; ch < c; ch++) wscale[ch] = (float)ldexp((double)mul[ch], -shift[ch]);
      s = xnn_create_convolution2d_nhwc_qc8(1, 1, 1, 1, 3, 3, 1, 1, 1, 1, (uint32_t)c, 1, 1, c, c, (int8_t)d->in_zero,
                                            1.0f, wscale, w_ohwi, bias, (int8_t)d->out_zero, 1.0f, -128, 127, 0,
                                            &b->xop);
      if (s == xnn_status_success) {
        s = xnn_setup_convolution2d_nhwc_qc8(b->xop, 1, h, w, x, (int8_t*)b->y_xnn, pool);
      }
      free(w_ohwi), free(wscale);
      break;
    }
    case ADD: {
      // arith.add_multipliers of scales 0.05 and 0.03 into 0.06: n = 30 - floor(log2(max ratio)), mul = rint(ratio 2^n)
      const double ra = 0.05 / 0.06, rb = 0.03 / 0.06;
      const int n = 30 - (int)floor(log2(ra > rb ? ra : rb));
      d->kind = CARVE_Q8_ADD;
      d->mul_a = (int32_t)llround(ldexp(ra, n));
      d->mul_b = (int32_t)llround(ldexp(rb, n));
      d->shift = n;
      d->in_zero = -7;
      d->in2_zero = 11;
      d->out_zero = 2;
      // XNNPACK: the ratios m * 2^-n over an output scale of 1 (what xnn_q8.qadd_scales gave the package)
      s = xnn_create_add_nd_qs8((int8_t)d->in_zero, (float)ldexp(d->mul_a, -n), (int8_t)d->in2_zero,
                                (float)ldexp(d->mul_b, -n), (int8_t)d->out_zero, 1.0f, -128, 127, 0, &b->xop);
      const size_t shape[2] = {px, c};
      if (s == xnn_status_success) {
        s = xnn_setup_add_nd_qs8(b->xop, 2, shape, 2, shape, x, (const int8_t*)(b->arena + d->in2_off),
                                 (int8_t*)b->y_xnn, pool);
      }
      break;
    }
    case DEQUANT:
      d->kind = CARVE_Q8_DEQUANTIZE;
      d->in_zero = -9;
      d->scale = 0.037f;
      s = xnn_create_convert_nc_qs8_f32(c, c, c, d->scale, (int8_t)d->in_zero, 0, &b->xop);
      if (s == xnn_status_success) {
        s = xnn_setup_convert_nc_qs8_f32(b->xop, px, x, (float*)(void*)b->y_xnn, pool);
      }
      break;
    case QUANT:
      d->kind = CARVE_Q8_QUANTIZE;
      d->out_zero = -128;
      d->scale = 1.0f / 255.0f;
      break;
    case POOL:
      d->kind = CARVE_Q8_MAXPOOL;
      d->kh = d->kw = 5;
      d->stride = 1;
      d->pad = 2;
      break;
    case UPSAMPLE:
      d->kind = CARVE_Q8_UPSAMPLE2X;
      break;
    case COPY:  // into a channel slot of a concatenation twice as wide
      d->kind = CARVE_Q8_COPY;
      d->out_stride = 2 * c;
      free(b->arena);
      b->arena = alloc64(d->out_off + 2 * px * c);
      for (size_t i = 0; i < d->out_off; i++) b->arena[i] = (uint8_t)next_u32();
      break;
  }
  return s == xnn_status_success;
}

int main(int argc, char** argv) {
  size_t threads = 2;
  int runs = 9;
  const char* only = NULL;
  const char* isa_name = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = strtoul(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--op") && i + 1 < argc) {
      only = argv[++i];
    } else if (!strcmp(argv[i], "--cpu")) {
      g_clock = CLOCK_THREAD_CPUTIME_ID;
    } else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
      isa_name = argv[++i];
    } else {
      fprintf(stderr, "usage: q8pool_bench [--threads N] [--runs R] [--op NAME] [--cpu] [--isa NAME]\n");
      return 2;
    }
  }
  if (threads < 1 || threads > 64 || runs < 1 || runs > 1000 || (g_clock != CLOCK_MONOTONIC && threads != 1)) {
    fprintf(stderr, "q8pool_bench: --threads 1..64, --runs 1..1000, --cpu only with --threads 1\n");
    return 2;
  }
  pthreadpool_t pool = threads > 1 ? pthreadpool_create(threads) : NULL;
  if (xnn_initialize(NULL) != xnn_status_success) {
    fprintf(stderr, "xnn_initialize failed\n");
    return 1;
  }
  printf("yolo26n 640, int8 ops, %zu thread(s), median of %d runs, %s ms; indicative only\n", threads, runs,
         g_clock == CLOCK_MONOTONIC ? "wall-clock" : "thread CPU");
  carve_q8_pool_fn isa_run = carve_q8_pool_select(carve_isa_detect());
  if (isa_name != NULL) {  // a variant by name, where this CPU runs it (runtime/carve_q8_pool_isa.h)
    isa_run = NULL;
    if (!strcmp(isa_name, "portable")) {
      isa_run = carve_q8_pool__portable;
    }
#ifdef CARVE_HAVE_X86_SIMD
    if (!strcmp(isa_name, "avx2") && carve_q8_pool_avx2_ready()) {
      isa_run = carve_q8_pool__avx2;
    } else if (!strcmp(isa_name, "avx512") && carve_q8_pool_avx512_ready()) {
      isa_run = carve_q8_pool__avx512;
    } else if (!strcmp(isa_name, "avx512vbmi") && carve_q8_pool_vbmi_ready()) {
      isa_run = carve_q8_pool__avx512vbmi;
    }
#endif
    if (isa_run == NULL) {
      fprintf(stderr, "q8pool_bench: --isa %s: not a variant this build and CPU run\n", isa_name);
      return 2;
    }
  }
  printf("q8 isa: the %s variant of carve_q8_run_pool\n", carve_q8_pool_name(isa_run));
  printf("%-28s %-14s %9s %9s %9s %6s %9s %9s\n", "op", "input", "q8 run", "q8 pool", "q8 isa", "isa x", "xnnpack",
         "diff");
  double tot[SYSTEMS] = {0}, tot_xnn_ops[SYSTEMS] = {0};
  for (int oi = 0; oi < NUM_OPS; oi++) {
    const op* o = &k_ops[oi];
    if (only != NULL && strcmp(only, o->name) != 0) {
      continue;
    }
    bench_op b;
    if (!setup(o, pool, &b)) {
      fprintf(stderr, "%s: XNNPACK's operator failed\n", o->name);
      return 1;
    }
    const size_t px = (size_t)o->h * o->w, out_c = o->kind == COPY ? 2 * (size_t)o->c : (size_t)o->c;
    double t[SYSTEMS][1000];
    for (int r = 0; r < runs + 1; r++) {  // run 0 warms up
      for (int j = 0; j < SYSTEMS; j++) {
        const int v = (r + j) % SYSTEMS;
        if (v == XNN && b.xop == NULL) {
          continue;
        }
        const double t0 = now_ms();
        carve_status st = CARVE_OK;
        if (v == 0) {
          st = carve_q8_run(&b.d, b.blob, b.arena);
        } else if (v == 1) {
          st = carve_q8_run_pool(&b.d, b.blob, b.arena, pool);
        } else if (v == 2) {
          st = isa_run(&b.d, b.blob, b.arena, pool);
        } else {
          st = xnn_run_operator(b.xop, pool) == xnn_status_success ? CARVE_OK : CARVE_ERR_BACKEND;
          if (st == CARVE_OK && b.lut != NULL) {
            lut_pass((int8_t*)b.y_xnn, px, out_c, b.lut, pool);
          }
        }
        if (st != CARVE_OK) {
          fprintf(stderr, "%s: system %d failed\n", o->name, v);
          return 1;
        }
        if (r > 0) t[v][r - 1] = now_ms() - t0;
      }
    }
    char shape[32];
    snprintf(shape, sizeof shape, "%dx%dx%d", o->h, o->w, o->c);
    printf("%-28s %-14s", o->name, shape);
    double ms[SYSTEMS];
    for (int v = 0; v < SYSTEMS; v++) {
      if (v == XNN && b.xop == NULL) {
        printf(" %9s", "-");
        continue;
      }
      ms[v] = median(t[v], runs);
      tot[v] += ms[v];
      printf(" %9.3f", ms[v]);
      if (v == 2) {
        printf(" %5.2fx", ms[1] / ms[2]);
      }
    }
    if (o->kind != COPY && o->kind != UPSAMPLE) {  // the variant's bytes against carve_q8_run_pool's (packed outputs)
      const size_t out_bytes = b.y_bytes;
      unsigned char* ref = malloc(out_bytes);
      if (ref == NULL || carve_q8_run_pool(&b.d, b.blob, b.arena, pool) != CARVE_OK) {
        return 1;
      }
      memcpy(ref, b.arena + b.d.out_off, out_bytes);
      memset(b.arena + b.d.out_off, 0x5a, out_bytes);
      if (isa_run(&b.d, b.blob, b.arena, pool) != CARVE_OK || memcmp(ref, b.arena + b.d.out_off, out_bytes) != 0) {
        fprintf(stderr, "%s: the %s variant's bytes differ from carve_q8_run_pool's\n", o->name,
                carve_q8_pool_name(isa_run));
        return 1;
      }
      free(ref);
    }
    if (b.xop != NULL) {
      for (int v = 0; v < SYSTEMS; v++) tot_xnn_ops[v] += ms[v];
      // carve (its last run left the output in the arena) against XNNPACK
      double worst = 0;
      size_t differ = 0, n = o->kind == DEQUANT ? b.y_bytes / 4 : b.y_bytes;
      for (size_t i = 0; i < n; i++) {
        double dlt;
        if (o->kind == DEQUANT) {
          float a, x;
          memcpy(&a, b.arena + b.d.out_off + 4 * i, 4);
          memcpy(&x, b.y_xnn + 4 * i, 4);
          dlt = fabs((double)a - (double)x);
        } else {
          dlt = abs((int)(int8_t)b.arena[b.d.out_off + i] - (int)(int8_t)b.y_xnn[i]);
        }
        worst = dlt > worst ? dlt : worst;
        differ += dlt != 0;
      }
      printf(" %3g %4.1f%%", worst, 100.0 * (double)differ / (double)n);
      xnn_delete_operator(b.xop);
    }
    printf("\n");
    free(b.arena), free(b.blob), free(b.y_xnn);
  }
  printf("%-28s %-14s %9.2f %9.2f %9.2f %5.2fx %9s  (all ops)\n", "total", "", tot[0], tot[1], tot[2],
         tot[1] / tot[2], "");
  printf("%-28s %-14s %9.2f %9.2f %9.2f %5.2fx %9.2f  (the ops XNNPACK has)\n", "total", "", tot_xnn_ops[0],
         tot_xnn_ops[1], tot_xnn_ops[2], tot_xnn_ops[1] / tot_xnn_ops[2], tot_xnn_ops[XNN]);
  if (pool) pthreadpool_destroy(pool);
  return 0;
}
