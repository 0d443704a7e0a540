// int8 peak of this machine, as bench/fma_peak.c measures the FMA peak: register- (tile-) blocked loops of
// independent int8 dot products, throughput bound.
//
//   cc -std=c11 -O3 -pthread bench/int8_peak.c -o /tmp/int8_peak && /tmp/int8_peak [--threads N] [--seconds S]
//
// For each int8 instruction the CPU has, every thread runs its loop at once:
//   avx512vnni  VPDPBUSD zmm, 16 independent accumulators (latency 5 x 2 ports needs 10): 64 MACs each;
//   avxvnni     VPDPBUSD ymm (AVX-VNNI, VEX), 16 accumulators: 32 MACs each;
//   amx         TDPBSSD on 4 independent 16 x 16 int32 tiles from 2 A and 2 B tiles (16 x 64 bytes): 16 x 16 x 64
//               = 16384 MACs each (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM) first; skipped when refused).
// Reports GOP/s per core (1 MAC = 2 ops), the best of several repeats, as JSON:
//   {"threads": N, "avx512vnni": {"gops_per_core": ..., "gops_per_core_wall": ...}, "avxvnni": {...},
//    "amx": {...}}
// gops_per_core divides by the CPU time each thread was given (the hardware's peak, also on a shared machine);
// _wall by wall-clock time (what the loop got under the machine's load at that moment).

#define _DEFAULT_SOURCE  // syscall

#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <cpuid.h>

#define ACC 16
#define REPEATS 5

enum { VNNI512 = 0, VNNI256 = 1, AMX = 2, KINDS = 3 };
static const char* const k_names[KINDS] = {"avx512vnni", "avxvnni", "amx"};
static const double k_macs[KINDS] = {64.0 * ACC, 32.0 * ACC, 4.0 * 16 * 16 * 64};  // MACs per iteration

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// Each returns a value of its accumulators so that the loop is not optimised away.
__attribute__((target("avx512f,avx512vnni"))) static int loop_vnni512(long iters) {
  __m512i acc[ACC];
  for (int i = 0; i < ACC; i++) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (long it = 0; it < iters; it++) {
    for (int i = 0; i < ACC; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  __m512i s = acc[0];
  for (int i = 1; i < ACC; i++) s = _mm512_add_epi32(s, acc[i]);
  return _mm512_reduce_add_epi32(s);
}

__attribute__((target("avx2,avxvnni"))) static int loop_vnni256(long iters) {
  __m256i acc[ACC];
  for (int i = 0; i < ACC; i++) acc[i] = _mm256_set1_epi32(i);
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  for (long it = 0; it < iters; it++) {
    for (int i = 0; i < ACC; i++) acc[i] = _mm256_dpbusd_avx_epi32(acc[i], a, b);
  }
  __m256i s = acc[0];
  for (int i = 1; i < ACC; i++) s = _mm256_add_epi32(s, acc[i]);
  int v[8];
  _mm256_storeu_si256((__m256i*)v, s);
  return v[0] + v[7];
}

// AMX: 8 tiles of 16 rows x 64 bytes; C tiles 0..3 accumulate A (4, 5) x B (6, 7).
static int loop_amx(long iters) {
  unsigned char cfg[64] = {0};
  cfg[0] = 1;
  for (int t = 0; t < 8; t++) {
    cfg[16 + 2 * t] = 64;
    cfg[48 + t] = 16;
  }
  static _Alignas(64) signed char ab[2][16 * 64];
  static _Alignas(64) int out[16 * 16];
  memset(ab, 1, sizeof ab);
  __asm__ volatile("ldtilecfg (%0)" ::"r"(cfg) : "memory");
  __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" ::: "memory");
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm4\n\ttileloadd (%0,%1,1), %%tmm5" ::"r"(ab[0]), "r"(64L) : "memory");
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm6\n\ttileloadd (%0,%1,1), %%tmm7" ::"r"(ab[1]), "r"(64L) : "memory");
  for (long it = 0; it < iters; it++) {
    __asm__ volatile(
        "tdpbssd %%tmm6, %%tmm4, %%tmm0\n\t"
        "tdpbssd %%tmm7, %%tmm4, %%tmm1\n\t"
        "tdpbssd %%tmm6, %%tmm5, %%tmm2\n\t"
        "tdpbssd %%tmm7, %%tmm5, %%tmm3" ::: "memory");
  }
  __asm__ volatile("tilestored %%tmm0, (%0,%1,1)" ::"r"(out), "r"(64L) : "memory");
  __asm__ volatile("tilerelease" ::: "memory");
  return out[0];
}

static int has_amx(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return 0;
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) return 0;
  unsigned long perm = 0;
  return syscall(SYS_arch_prctl, 0x1022 /* ARCH_GET_XCOMP_PERM */, &perm) == 0 && ((perm >> 18) & 1);
#else
  return 0;
#endif
}

static int has_avxvnni(void) {
  unsigned a, b, c, d;
  return __builtin_cpu_supports("avx2") && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}

static int run(int kind, long iters) {
  return kind == VNNI512 ? loop_vnni512(iters) : kind == VNNI256 ? loop_vnni256(iters) : loop_amx(iters);
}

typedef struct job {
  int kind;
  long iters;
  pthread_barrier_t* start;
  double seconds, cpu_seconds;
  int sink;
} job;

static void* worker(void* arg) {
  job* j = arg;
  pthread_barrier_wait(j->start);
  const double t0 = now_s(), c0 = thread_cpu_s();
  j->sink = run(j->kind, j->iters);
  j->seconds = now_s() - t0;
  j->cpu_seconds = thread_cpu_s() - c0;
  return NULL;
}

// GOP/s per core with `threads` threads at once, the best of REPEATS (as fma_peak.c's measure).
static double measure(int kind, int threads, long iters, double* cpu_out) {
  double best = 0.0, best_cpu = 0.0;
  for (int r = 0; r < REPEATS; r++) {
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    job jobs[64];
    pthread_t tid[64];
    for (int t = 0; t < threads; t++) {
      jobs[t] = (job){kind, iters, &start, 0.0, 0.0, 0};
      if (t > 0) pthread_create(&tid[t], NULL, worker, &jobs[t]);
    }
    worker(&jobs[0]);
    for (int t = 1; t < threads; t++) pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&start);
    double wall = 0.0, cpu = 0.0;
    for (int t = 0; t < threads; t++) {
      wall += (double)iters * k_macs[kind] * 2.0 / jobs[t].seconds / 1e9;
      cpu += (double)iters * k_macs[kind] * 2.0 / jobs[t].cpu_seconds / 1e9;
      if (jobs[t].sink == 12345) printf(" ");
    }
    if (wall / threads > best) best = wall / threads;
    if (cpu / threads > best_cpu) best_cpu = cpu / threads;
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
      fprintf(stderr, "usage: int8_peak [--threads N (1..64)] [--seconds S per repeat]\n");
      return 2;
    }
  }
  if (threads < 1 || threads > 64 || !(seconds > 0.0)) {
    fprintf(stderr, "int8_peak: --threads must be in 1..64 and --seconds > 0\n");
    return 2;
  }
  __builtin_cpu_init();
  const int have[KINDS] = {__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni"),
                           has_avxvnni(), has_amx()};
  printf("{\"threads\": %d", threads);
  int any = 0;
  for (int k = 0; k < KINDS; k++) {
    if (!have[k]) continue;
    long iters = k == AMX ? 2000 : 100000;  // calibrated to about `seconds` per repeat on one thread
    const double t0 = now_s();
    volatile int sink = run(k, iters);
    (void)sink;
    const double dt = now_s() - t0;
    iters = (long)((double)iters * seconds / (dt > 1e-6 ? dt : 1e-6));
    if (iters < 100) iters = 100;
    double cpu = 0.0;
    const double wall = measure(k, threads, iters, &cpu);
    printf(", \"%s\": {\"gops_per_core\": %.1f, \"gops_per_core_wall\": %.1f}", k_names[k], cpu, wall);
    any = 1;
  }
  printf("}\n");
  return any ? 0 : 1;
}
