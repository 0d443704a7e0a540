// Helper for q8_vs_arith.py and q8_pool_vs_run.py: runs carve_q8_run (and carve_q8_run_pool or one of its
// instruction-set variants, runtime/carve_q8_pool.h) on cases the scripts write.
//
//   q8_tool --variants                                      the variants this build and CPU run, one a line
//   q8_tool [--variant NAME] CASES.bin RESULTS.bin [THREADS ...]
//
// CASES.bin (little-endian): "Q8C1", uint32 layout (the CARVE_Q8_LAYOUT the script's blobs are packed in:
// generator/carve/backends/q8_pack.PACKS_LAYOUT), uint32 number of cases, then per case:
//   int64 fields[Q8_FIELDS]   the carve_q8_desc, in the order of read_desc() (scale: its float32 bits)
//   uint64 blob bytes, the blob; uint64 arena bytes, the arena
// RESULTS.bin: per case and run, int32 carve_status then the arena after the call (as many bytes as it came
// with). The runs: carve_q8_run, then the variant (default "portable": carve_q8_run_pool itself) once per THREADS
// argument (0: a NULL pool, n: a pool of n threads), each on a fresh copy of the case's arena. The blob and arena
// are copied into malloc'd buffers (aligned for any type), so the offsets set the alignment the kernels see. Only
// carve_q8.c, carve_q8_pool*.c, carve_isa.c, carve_rt.c and libc (and carve_pool.c unless built with
// CARVE_RT_NO_THREADS, which allows only THREADS 0): it also runs cross-compiled (qemu-aarch64).

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carve_q8.h"
#include "carve_q8_pool_isa.h"
#include "q8_case_io.h"

#define MAX_RUNS 16

static int always(void) { return 1; }

// carve_q8_run_pool's variants, by the names carve_q8_pool_name gives them.
typedef struct variant {
  const char* name;
  carve_q8_pool_fn fn;
  int (*ready)(void);
} variant;

static const variant k_variants[] = {
    {"portable", carve_q8_pool__portable, always},
#ifdef CARVE_HAVE_X86_SIMD
    {"avx512", carve_q8_pool__avx512, carve_q8_pool_avx512_ready},
    {"avx512vbmi", carve_q8_pool__avx512vbmi, carve_q8_pool_vbmi_ready},
    {"avx2", carve_q8_pool__avx2, carve_q8_pool_avx2_ready},
#endif
#ifdef CARVE_HAVE_NEON
    {"neon", carve_q8_pool__neon, always},
#endif
};

static int fail(const char* what) {
  fprintf(stderr, "q8_tool: %s\n", what);
  return 1;
}

static int write_result(FILE* out, carve_status st, const uint8_t* arena, uint64_t arena_n) {
  const int32_t status = (int32_t)st;
  unsigned char sb[4] = {(unsigned char)status, (unsigned char)(status >> 8), (unsigned char)(status >> 16),
                         (unsigned char)(status >> 24)};
  return fwrite(sb, 1, 4, out) == 4 && fwrite(arena, 1, arena_n, out) == arena_n;
}

int main(int argc, char** argv) {
  const size_t num_variants = sizeof k_variants / sizeof k_variants[0];
  if (argc == 2 && strcmp(argv[1], "--variants") == 0) {
    for (size_t i = 0; i < num_variants; i++) {
      if (k_variants[i].ready()) {
        printf("%s\n", k_variants[i].name);
      }
    }
    printf("selected %s\n", carve_q8_pool_name(carve_q8_pool_select(carve_isa_detect())));
    return 0;
  }
  carve_q8_pool_fn pool_run = carve_q8_pool__portable;
  if (argc >= 3 && strcmp(argv[1], "--variant") == 0) {
    pool_run = NULL;
    for (size_t i = 0; i < num_variants; i++) {
      if (strcmp(argv[2], k_variants[i].name) == 0) {
        if (!k_variants[i].ready()) {
          fprintf(stderr, "q8_tool: this CPU does not run the %s variant\n", argv[2]);
          return 1;
        }
        pool_run = k_variants[i].fn;
      }
    }
    if (pool_run == NULL) {
      return fail("unknown variant (q8_tool --variants lists them)");
    }
    argc -= 2;
    argv += 2;
  }
  if (argc < 3 || argc - 3 > MAX_RUNS) {
    fprintf(stderr, "usage: q8_tool --variants | [--variant NAME] CASES.bin RESULTS.bin [THREADS ...] (at most %d)\n",
            MAX_RUNS);
    return 2;
  }
  const int runs = argc - 3;
  pthreadpool_t pools[MAX_RUNS] = {NULL};
  for (int r = 0; r < runs; r++) {
    const long n = strtol(argv[3 + r], NULL, 10);
    if (n < 0 || n > 64) {
      return fail("THREADS: 0 (no pool) to 64");
    }
#ifdef CARVE_RT_NO_THREADS
    if (n > 0) {
      return fail("built with CARVE_RT_NO_THREADS: THREADS 0 only");
    }
#else
    if (n > 0 && (pools[r] = pthreadpool_create((size_t)n)) == NULL) {
      return fail("cannot create a pool");
    }
#endif
  }
  FILE* in = fopen(argv[1], "rb");
  FILE* out = fopen(argv[2], "wb");
  if (in == NULL || out == NULL) {
    return fail("cannot open the files");
  }
  unsigned char head[12];
  if (!read_exact(in, head, sizeof head) || memcmp(head, "Q8C1", 4) != 0) {
    return fail("not a Q8C1 cases file");
  }
  const uint32_t layout = head[4] | head[5] << 8 | (uint32_t)head[6] << 16 | (uint32_t)head[7] << 24;
  const uint32_t cases = head[8] | head[9] << 8 | (uint32_t)head[10] << 16 | (uint32_t)head[11] << 24;
  if (layout != CARVE_Q8_LAYOUT) {
    fprintf(stderr, "q8_tool: blobs packed in layout %u, the runtime reads layout %d\n", (unsigned)layout,
            CARVE_Q8_LAYOUT);
    return 1;
  }
  for (uint32_t c = 0; c < cases; c++) {
    int64_t fields[Q8_FIELDS];
    for (int i = 0; i < Q8_FIELDS; i++) {
      uint64_t v;
      if (!read_u64(in, &v)) {
        return fail("truncated case");
      }
      fields[i] = (int64_t)v;
    }
    uint64_t blob_n, arena_n;
    if (!read_u64(in, &blob_n)) {
      return fail("truncated case");
    }
    uint8_t* blob = malloc(blob_n ? blob_n : 1);
    if (blob == NULL || !read_exact(in, blob, blob_n) || !read_u64(in, &arena_n)) {
      return fail("truncated case or out of memory");
    }
    uint8_t* arena = malloc(arena_n ? arena_n : 1);
    uint8_t* work = malloc(arena_n ? arena_n : 1);
    if (arena == NULL || work == NULL || !read_exact(in, arena, arena_n)) {
      return fail("truncated case or out of memory");
    }
    const carve_q8_desc d = read_desc(fields);
    memcpy(work, arena, arena_n);
    if (!write_result(out, carve_q8_run(&d, blob_n ? blob : NULL, work), work, arena_n)) {
      return fail("cannot write the results");
    }
    for (int r = 0; r < runs; r++) {
      memcpy(work, arena, arena_n);
      if (!write_result(out, pool_run(&d, blob_n ? blob : NULL, work, pools[r]), work, arena_n)) {
        return fail("cannot write the results");
      }
    }
    free(blob);
    free(arena);
    free(work);
  }
#ifndef CARVE_RT_NO_THREADS
  for (int r = 0; r < runs; r++) {
    if (pools[r] != NULL) {
      pthreadpool_destroy(pools[r]);
    }
  }
#endif
  if (fclose(out) != 0) {
    return fail("cannot write the results");
  }
  fclose(in);
  return 0;
}
