// Experiment behind docs/performance.md ("A GEMM kernel of our own"): is XNNPACK's
// 2022 f32 1x1 convolution (its 7x16 AVX-512 broadcast GEMM) what holds carve back?
// Times, on one thread, XNNPACK's convolution (1x1, bias, no clamp) against a
// plain 12x32 AVX-512 register-blocked GEMM over pre-packed 32-column weight
// panels, with and without SiLU fused into the register tile, on an M x K x N
// GEMM (M pixels, K input and N output channels, as yolo26n's 1x1 layers), and
// checks both give the same numbers. Not part of the package or the tests.
//
//   cc -O3 -march=x86-64-v3 -Iruntime bench/gemm_vs_xnnpack.c runtime/carve_rt.c runtime/carve_isa.c runtime/carve_epilogue.c -o /tmp/gemm_vs_xnnpack -lXNNPACK -lpthreadpool -lcpuinfo -lm
//   for s in "6400 96 64" "6400 256 64" "1600 384 128" "400 512 256" "25600 48 64"; do
//     /tmp/gemm_vs_xnnpack $s; done
//
// Best of 15 runs each; needs a CPU with AVX-512F.
#define _GNU_SOURCE
#include <immintrin.h>
#include <xnnpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec*1e-6;}
// The runtime's own SiLU (silu16_avx512, as the package's kernels use it) and SiLU pass (carve_epilogue).
#include "../runtime/carve_epilogue.h"
#include "../runtime/carve_simd.h"
#define silu16 silu16_avx512
#define MR 12
// C[m][0..32) for MR rows: A (rows lda apart), B panel (K x 32), bias 32
__attribute__((target("avx512f"))) static void kern(size_t mr, size_t K, const float* a, size_t lda, const float* b, const float* bias, float* c, size_t ldc, int act) {
  __m512 acc[MR][2];
  for (int i = 0; i < MR; i++) { acc[i][0] = _mm512_loadu_ps(bias); acc[i][1] = _mm512_loadu_ps(bias + 16); }
  const float* ap[MR]; for (size_t i = 0; i < MR; i++) ap[i] = a + (i < mr ? i : mr - 1) * lda;
  for (size_t k = 0; k < K; k++) {
    const __m512 b0 = _mm512_loadu_ps(b + k * 32), b1 = _mm512_loadu_ps(b + k * 32 + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) { const __m512 av = _mm512_set1_ps(ap[i][k]); acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]); acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]); }
  }
  for (size_t i = 0; i < mr; i++) {
    __m512 v0 = acc[i][0], v1 = acc[i][1];
    if (act) { v0 = silu16(v0); v1 = silu16(v1); }
    _mm512_storeu_ps(c + i * ldc, v0); _mm512_storeu_ps(c + i * ldc + 16, v1);
  }
}
static void gemm(size_t M, size_t K, size_t N, const float* a, const float* bp, const float* bias, float* c, int act) {
  for (size_t n = 0; n < N; n += 32)
  for (size_t m = 0; m < M; m += MR)
      kern(M - m < MR ? M - m : MR, K, a + m * K, K, bp + n * K, bias + n, c + m * N + n, N, act);
}
int main(int argc, char** argv) {
  if (argc != 4 || !__builtin_cpu_supports("avx512f")) {
    fprintf(stderr, "usage: gemm_vs_xnnpack M K N (needs AVX-512F)\n");
    return 2;
  }
  size_t M = atol(argv[1]), K = atol(argv[2]), N = atol(argv[3]);
  float *a = aligned_alloc(64, M*K*4), *w = aligned_alloc(64, N*K*4), *bp = aligned_alloc(64, N*K*4), *bias = calloc(N, 4), *c = aligned_alloc(64, M*N*4), *c2 = aligned_alloc(64, M*N*4);
  for (size_t i = 0; i < M*K; i++) a[i] = (rand()%200-100)*0.01f;
  for (size_t i = 0; i < N*K; i++) w[i] = (rand()%200-100)*0.001f;
  for (size_t n = 0; n < N; n += 32) for (size_t k = 0; k < K; k++) for (size_t j = 0; j < 32; j++) bp[n*K + k*32 + j] = w[(n+j)*K + k];
  xnn_initialize(NULL); xnn_operator_t op;
  xnn_create_convolution2d_nhwc_f32(0,0,0,0,1,1,1,1,1,1,1,K,N,K,N,w,bias,-INFINITY,INFINITY,0,&op);
  xnn_setup_convolution2d_nhwc_f32(op,1,M,1,a,c2,NULL);
  double bx=1e9,bc=1e9,bcs=1e9;
  for (int r = 0; r < 15; r++) {
    double t0=now(); xnn_run_operator(op,NULL); double t=now()-t0; if(t<bx)bx=t;
    t0=now(); gemm(M,K,N,a,bp,bias,c,0); t=now()-t0; if(t<bc)bc=t;
    t0=now(); gemm(M,K,N,a,bp,bias,c,1); t=now()-t0; if(t<bcs)bcs=t;
  }
  gemm(M,K,N,a,bp,bias,c,0); double md=0; for(size_t i=0;i<M*N;i++){double d=fabs(c[i]-c2[i]); if(d>md)md=d;}
  double fl = 2.0*M*K*N*1e-6;
  printf("M%zu K%zu N%zu: xnn %.3f ms %.0f GF/s | own %.3f ms %.0f GF/s | own+silu %.3f ms %.0f GF/s | maxdiff %.2g\n", M,K,N,bx,fl/bx,bc,fl/bc,bcs,fl/bcs,md);
}
