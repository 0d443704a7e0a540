// carve_attention timed on the YOLO26 attention shapes: the P5 attention of C2PSA (model.10) and of the head's
// PSA block (model.22) at 640 is n = 20x20 = 400 tokens, key_dim 32, head_dim 64, with 2 heads in yolo26n, 4 in
// s/m/l and 6 in x; 320 gives n = 100, 1280 gives n = 1600. Not part of the package or the tests
// (tests/runtime/test_attention.c checks the kernel).
//
// The kernel to time is picked by the runtime directory; build the bench once against this tree and once against
// another checkout (e.g. the commit before a change) and alternate:
//
//   cc -O3 -Iruntime bench/attention_bench.c runtime/carve_rt.c runtime/carve_isa.c runtime/carve_attention.c \
//      -o /tmp/attn-new -lpthreadpool -lm
//   OLD=/path/to/old/runtime
//   cc -O3 -I$OLD bench/attention_bench.c $OLD/carve_rt.c $OLD/carve_isa.c $OLD/carve_attention.c \
//      -o /tmp/attn-old -lpthreadpool -lm
//   /tmp/attn-old [RUNS]; /tmp/attn-new [RUNS]   (or RUNS N HEADS [KEY_DIM HEAD_DIM]: that shape alone)
//
// -DBENCH_SIMD=0/1/2 (a carve_isa) times the portable kernel (its best target_clones clone), the AVX2 + FMA or
// the AVX-512 one (carve_attention_select: the CPU must have it);
// -DCARVE_ATTN_ROWS_PER_TASK=N or -DATTN_R=R -DATTN_KEY_V=K -DATTN_CH_V=C try other task sizes and AVX-512 tiles.
// (-O3 and no -march: the flags of a CMake Release build of a package; the kernel picks AVX-512, AVX2 + FMA or
// the portable path at run time.) Prints, per shape and thread count (1, 2), the best of RUNS calls (default
// 200) in microseconds and GFLOP/s counting the two matrix products' multiply-adds as 2 FLOPs
// (2 * heads * n^2 * (key_dim + head_dim)), and a checksum of the output so that two builds can be compared.
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "carve_attention.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static void bench(size_t n, size_t heads, size_t kd, size_t hd, int runs, pthreadpool_t pool, int threads) {
  const size_t stride = heads * (2 * kd + hd);
  float* qkv = malloc(n * stride * sizeof(float));
  float* out = malloc(n * heads * hd * sizeof(float));
  float* v_out = malloc(n * heads * hd * sizeof(float));
  float* scratch = aligned_alloc(64, (carve_attention_scratch_floats(n, heads, kd) * sizeof(float) + 63) / 64 * 64);
  unsigned s = 12345;
  for (size_t i = 0; i < n * stride; i++) {
    s = s * 1103515245u + 12345u;
    qkv[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 4.0f;
  }
  const float scale = 1.0f / sqrtf((float)kd);
  double best = 1e30;
  for (int r = 0; r < runs; r++) {
    const double t0 = now_us();
#ifdef BENCH_SIMD  // a variant by instruction set (0 portable, 1 AVX2 + FMA, 2 AVX-512)
    carve_attention_select((carve_isa)BENCH_SIMD)(qkv, stride, n, heads, kd, hd, scale, out, heads * hd, v_out,
                                                  heads * hd, scratch, pool);
#else
    carve_attention(qkv, stride, n, heads, kd, hd, scale, out, heads * hd, v_out, heads * hd, scratch, pool);
#endif
    const double t = now_us() - t0;
    best = t < best ? t : best;
  }
  double sum = 0.0;
  for (size_t i = 0; i < n * heads * hd; i++) {
    sum += out[i];
  }
  const double flops = 2.0 * (double)heads * (double)n * (double)n * (double)(kd + hd);
  printf("n=%4zu heads=%zu kd=%zu hd=%zu threads=%d: %8.1f us %6.1f GFLOP/s  checksum %.6f\n", n, heads, kd, hd,
         threads, best, flops / best * 1e-3, sum);
  free(qkv);
  free(out);
  free(v_out);
  free(scratch);
}

int main(int argc, char** argv) {
  const int runs = argc > 1 ? atoi(argv[1]) : 200;
  pthreadpool_t pool2 = pthreadpool_create(2);
  if (argc > 3) {  // one shape: RUNS N HEADS [KEY_DIM HEAD_DIM]
    const size_t n = (size_t)atoi(argv[2]), heads = (size_t)atoi(argv[3]);
    const size_t kd = argc > 5 ? (size_t)atoi(argv[4]) : 32, hd = argc > 5 ? (size_t)atoi(argv[5]) : 64;
    bench(n, heads, kd, hd, runs, NULL, 1);
    bench(n, heads, kd, hd, runs, pool2, 2);
    pthreadpool_destroy(pool2);
    return 0;
  }
  static const size_t shapes[][4] = {{400, 2, 32, 64}, {400, 4, 32, 64}, {400, 6, 32, 64},
                                     {100, 2, 32, 64}, {1600, 2, 32, 64}, {399, 2, 32, 64}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    bench(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], runs, NULL, 1);
    bench(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], runs, pool2, 2);
  }
  pthreadpool_destroy(pool2);
  return 0;
}
