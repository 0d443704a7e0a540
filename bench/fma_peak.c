// FMA peak of this machine: a register-blocked loop of independent fused multiply-adds.
//
//   fma_peak [--threads N] [--seconds S]
//
// For each instruction set the CPU has (AVX-512F, AVX2+FMA), every thread runs
// ACC independent accumulator chains of y = y * a + b (one FMA = 2 FLOPs per lane),
// enough chains to cover the FMA latency x the number of FMA ports, so the loop
// is throughput bound. Reports GFLOP/s per core, the best of several repeats, as JSON:
//   {"threads": N, "avx512": {"gflops_per_core": ..., "gflops_per_core_wall": ...}, "avx2": {...},
//    "best_per_core": ..., "best_per_core_wall": ...}
// gflops_per_core divides by the CPU time each thread was given (the hardware's peak, also on a shared
// machine); _wall by wall-clock time (what the loop got under the machine's load at that moment).

#define _POSIX_C_SOURCE 200809L

#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ACC 16          // independent chains: 16 zmm/ymm accumulators (latency 4 x 2 ports = 8 needed)
#define REPEATS 5

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// Each returns the sum of its accumulators so that the loop is not optimised away.
__attribute__((target("avx512f"))) static float loop_avx512(long iters) {
  __m512 acc[ACC];
  for (int i = 0; i < ACC; i++) acc[i] = _mm512_set1_ps((float)i * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iters; it++) {
    for (int i = 0; i < ACC; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < ACC; i++) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float loop_avx2(long iters) {
  __m256 acc[ACC];
  for (int i = 0; i < ACC; i++) acc[i] = _mm256_set1_ps((float)i * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iters; it++) {
    for (int i = 0; i < ACC; i++) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < ACC; i++) s = _mm256_add_ps(s, acc[i]);
  float v[8];
  _mm256_storeu_ps(v, s);
  return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

typedef struct job {
  int isa;  // 512 or 256
  long iters;
  pthread_barrier_t* start;
  double seconds;      // wall-clock time of the loop
  double cpu_seconds;  // CPU time the thread was given for it
  float sink;
} job;

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void* worker(void* arg) {
  job* j = arg;
  pthread_barrier_wait(j->start);
  const double t0 = now_s(), c0 = thread_cpu_s();
  j->sink = j->isa == 512 ? loop_avx512(j->iters) : loop_avx2(j->iters);
  j->seconds = now_s() - t0;
  j->cpu_seconds = thread_cpu_s() - c0;
  return NULL;
}

// GFLOP/s per core with `threads` threads running the loop at once: each thread's FLOPs over
// its own time, averaged over threads; the best of REPEATS. wall: over wall-clock time (what the
// loop got on this machine as loaded as it was); cpu_out: over the CPU time each thread was
// given, which is the hardware's peak even when other processes share the cores.
static double measure(int isa, int threads, long iters, double* cpu_out) {
  const double lanes = isa == 512 ? 16.0 : 8.0;
  double best = 0.0, best_cpu = 0.0;
  for (int r = 0; r < REPEATS; r++) {
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    job jobs[64];
    pthread_t tid[64];
    for (int t = 0; t < threads; t++) {
      jobs[t] = (job){isa, iters, &start, 0.0, 0.0, 0.0f};
      if (t > 0) pthread_create(&tid[t], NULL, worker, &jobs[t]);
    }
    worker(&jobs[0]);
    for (int t = 1; t < threads; t++) pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&start);
    double per_core = 0.0, per_core_cpu = 0.0;
    for (int t = 0; t < threads; t++) {
      per_core += (double)iters * ACC * lanes * 2.0 / jobs[t].seconds / 1e9;
      per_core_cpu += (double)iters * ACC * lanes * 2.0 / jobs[t].cpu_seconds / 1e9;
      if (jobs[t].sink == 12345.0f) printf(" ");  // keep the result alive
    }
    per_core /= threads;
    per_core_cpu /= threads;
    if (per_core > best) best = per_core;
    if (per_core_cpu > best_cpu) best_cpu = per_core_cpu;
  }
  *cpu_out = best_cpu;
  return best;
}

int main(int argc, char** argv) {
  int threads = 1;
  double seconds = 0.3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = atof(argv[++i]);
    } else {
      fprintf(stderr, "usage: fma_peak [--threads N (1..64)] [--seconds S per repeat]\n");
      return 2;
    }
  }
  if (threads < 1 || threads > 64 || !(seconds > 0.0)) {
    fprintf(stderr, "fma_peak: --threads must be in 1..64 and --seconds > 0\n");
    return 2;
  }
  __builtin_cpu_init();
  const int has512 = __builtin_cpu_supports("avx512f");
  const int has256 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  printf("{\"threads\": %d", threads);
  double best = 0.0, best_wall = 0.0;
  for (int k = 0; k < 2; k++) {
    const int isa = k == 0 ? 512 : 256;
    if (!(isa == 512 ? has512 : has256)) continue;
    // Calibrate the iteration count to about `seconds` per repeat on one thread.
    long iters = 100000;
    double t0 = now_s();
    volatile float sink = isa == 512 ? loop_avx512(iters) : loop_avx2(iters);
    (void)sink;
    const double dt = now_s() - t0;
    iters = (long)((double)iters * seconds / (dt > 1e-6 ? dt : 1e-6));
    if (iters < 1000) iters = 1000;
    double cpu = 0.0;
    const double g = measure(isa, threads, iters, &cpu);
    printf(", \"%s\": {\"gflops_per_core\": %.2f, \"gflops_per_core_wall\": %.2f}", isa == 512 ? "avx512" : "avx2",
           cpu, g);
    if (cpu > best) best = cpu;
    if (g > best_wall) best_wall = g;
  }
  printf(", \"best_per_core\": %.2f, \"best_per_core_wall\": %.2f}\n", best, best_wall);
  return best > 0.0 ? 0 : 1;
}
