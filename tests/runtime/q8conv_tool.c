// Helper for q8conv_vs_arith.py: runs one variant of carve_q8conv (runtime/carve_q8conv.h) on cases the script
// writes.
//
//   q8conv_tool --variants               the variants this build and CPU run, one name a line, then
//                                        "selected NAME" (carve_q8conv_select(carve_isa_detect()))
//   q8conv_tool --sizes KH KW CIN COUT   "kp coutp record_bytes slot_bytes" from the header's macros
//   q8conv_tool VARIANT THREADS SLOTS CASES.bin RESULTS.bin
//
// VARIANT: portable, avx512vnni, avx512vnni_novbmi, amx, amx_novbmi, amx_packed, amx_implicit, avx2, avxvnni, neon,
// neondot (runtime/carve_q8conv_isa.h) or select.
// THREADS: the pool's threads (1: no pool, NULL); SLOTS: the scratch slots the work is split into.
// CASES.bin (little-endian): "Q8V1", uint32 layout (the CARVE_Q8CONV_LAYOUT the script's records are packed in),
// uint32 number of cases, then per case: int64 fields[26] (carve_q8_desc, in the order of q8_tool.c's read_desc),
// uint64 blob bytes, the blob, uint64 arena bytes, the arena. RESULTS.bin: per case, int32 carve_status then the
// arena after the call.
//
// Guard pages: the blob, the arena and the scratch each end where an inaccessible page begins, so that a read or
// write past their end faults, also from the vector and tile instructions that AddressSanitizer does not see
// (masked AVX-512 loads and stores, AMX tile loads). The blob starts 64-byte aligned (its offsets set the alignment
// the kernel sees; the script ends it with the record, at a multiple of 64 bytes, so the record ends at the guard);
// the arena ends at its last byte (the script's "tight" cases end it with the input view); the scratch, filled
// with noise (its contents must not matter), ends with the last slot.

#define _DEFAULT_SOURCE  // mmap's MAP_ANONYMOUS

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>
#include <unistd.h>

#include "carve_q8conv_isa.h"
#include "q8_case_io.h"


static int fail(const char* what) {
  fprintf(stderr, "q8conv_tool: %s\n", what);
  return 1;
}

typedef struct variant {
  const char* name;
  carve_q8conv_fn fn;
  int (*ready)(void);
} variant;

static int always(void) { return 1; }

static const variant k_variants[] = {
    {"portable", carve_q8conv__portable, always},
#ifdef CARVE_HAVE_X86_SIMD
    {"avx512vnni", carve_q8conv__avx512vnni, carve_q8conv_vnni_ready},
    {"avx512vnni_novbmi", carve_q8conv__avx512vnni_novbmi, carve_q8conv_vnni_ready},
    {"amx", carve_q8conv__amx, carve_q8conv_amx_ready},
    {"amx_novbmi", carve_q8conv__amx_novbmi, carve_q8conv_amx_ready},
    {"amx_packed", carve_q8conv__amx_packed, carve_q8conv_amx_ready},
    {"amx_implicit", carve_q8conv__amx_implicit, carve_q8conv_amx_ready},
    {"avx2", carve_q8conv__avx2, carve_q8conv_avx2_ready},
#ifdef CARVE_Q8CONV_HAVE_AVXVNNI
    {"avxvnni", carve_q8conv__avxvnni, carve_q8conv_avxvnni_ready},
#endif
#endif
#ifdef CARVE_HAVE_NEON
    {"neon", carve_q8conv__neon, always},
#ifdef CARVE_Q8CONV_HAVE_NEONDOT
    {"neondot", carve_q8conv__neondot, carve_q8conv_neondot_ready},
#endif
#endif
};
enum { NUM_VARIANTS = sizeof k_variants / sizeof k_variants[0] };

// A buffer of `bytes` (rounded up to a multiple of `align`) that ends where a PROT_NONE page begins; NULL on
// failure. Freed by guarded_free with the same sizes.
static size_t guarded_span(size_t bytes, size_t align, size_t* page) {
  *page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t rounded = (bytes + align - 1) / align * align + (bytes == 0 ? align : 0);
  return (rounded + *page - 1) / *page * *page + *page;
}

static uint8_t* guarded(size_t bytes, size_t align) {
  size_t page;
  const size_t span = guarded_span(bytes, align, &page);
  uint8_t* base = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED || mprotect(base + span - page, page, PROT_NONE) != 0) {
    return NULL;
  }
  const size_t rounded = (bytes + align - 1) / align * align + (bytes == 0 ? align : 0);
  return base + span - page - rounded;
}

static void guarded_free(uint8_t* p, size_t bytes, size_t align) {
  size_t page;
  const size_t span = guarded_span(bytes, align, &page);
  const size_t rounded = (bytes + align - 1) / align * align + (bytes == 0 ? align : 0);
  munmap(p + rounded + page - span, span);
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--variants") == 0) {
    for (int i = 0; i < NUM_VARIANTS; i++) {
      if (k_variants[i].ready()) {
        printf("%s\n", k_variants[i].name);
      }
    }
    printf("selected %s\n", carve_q8conv_name(carve_q8conv_select(carve_isa_detect())));
    return 0;
  }
  if (argc == 6 && strcmp(argv[1], "--sizes") == 0) {
    const size_t kh = strtoul(argv[2], NULL, 10), kw = strtoul(argv[3], NULL, 10);
    const size_t cin = strtoul(argv[4], NULL, 10), cout = strtoul(argv[5], NULL, 10);
    printf("%zu %zu %zu %zu\n", CARVE_Q8CONV_KP(kh, kw, cin), CARVE_Q8CONV_COUTP(cout),
           CARVE_Q8CONV_RECORD_BYTES(kh, kw, cin, cout), CARVE_Q8CONV_SLOT_BYTES(kh, kw, cin));
    return 0;
  }
  if (argc != 6) {
    fprintf(stderr, "usage: %s --variants | --sizes KH KW CIN COUT | VARIANT THREADS SLOTS CASES.bin RESULTS.bin\n",
            argv[0]);
    return 2;
  }
  carve_q8conv_fn fn = NULL;
  for (int i = 0; i < NUM_VARIANTS; i++) {
    if (strcmp(argv[1], k_variants[i].name) == 0) {
      if (!k_variants[i].ready()) {
        fprintf(stderr, "q8conv_tool: this CPU does not run the %s variant\n", argv[1]);
        return 77;
      }
      fn = k_variants[i].fn;
    }
  }
  if (strcmp(argv[1], "select") == 0) {
    fn = carve_q8conv_select(carve_isa_detect());
  }
  const long threads = strtol(argv[2], NULL, 10), slots = strtol(argv[3], NULL, 10);
  if (fn == NULL || threads < 1 || threads > 64 || slots < 1) {
    return fail("unknown variant, or THREADS not in 1..64, or SLOTS < 1");
  }
  FILE* in = fopen(argv[4], "rb");
  FILE* out = fopen(argv[5], "wb");
  if (in == NULL || out == NULL) {
    return fail("cannot open the files");
  }
  unsigned char head[12];
  if (!read_exact(in, head, sizeof head) || memcmp(head, "Q8V1", 4) != 0) {
    return fail("not a Q8V1 cases file");
  }
  const uint32_t layout = head[4] | head[5] << 8 | (uint32_t)head[6] << 16 | (uint32_t)head[7] << 24;
  const uint32_t cases = head[8] | head[9] << 8 | (uint32_t)head[10] << 16 | (uint32_t)head[11] << 24;
  if (layout != CARVE_Q8CONV_LAYOUT) {
    fprintf(stderr, "q8conv_tool: records packed in layout %u, the runtime reads layout %d\n", (unsigned)layout,
            CARVE_Q8CONV_LAYOUT);
    return 1;
  }
  pthreadpool_t pool = threads > 1 ? pthreadpool_create((size_t)threads) : NULL;
  if (threads > 1 && pool == NULL) {
    return fail("cannot create the thread pool");
  }
  uint64_t noise = 0x9e3779b97f4a7c15ull;
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
    uint8_t* blob = guarded(blob_n, 64);
    if (blob == NULL || !read_exact(in, blob, blob_n) || !read_u64(in, &arena_n)) {
      return fail("truncated case or out of memory");
    }
    uint8_t* arena = guarded(arena_n, 1);
    if (arena == NULL || !read_exact(in, arena, arena_n)) {
      return fail("truncated case or out of memory");
    }
    const carve_q8_desc d = read_desc(fields);
    // The slot size of the case's geometry (a refusal case may have any: at least one byte).
    const size_t slot_bytes = d.kh && d.kw && d.cin ? CARVE_Q8CONV_SLOT_BYTES(d.kh, d.kw, d.cin) : 64;
    uint8_t* scratch = guarded(slot_bytes * (size_t)slots, 64);
    if (scratch == NULL) {
      return fail("out of memory");
    }
    for (size_t i = 0; i < slot_bytes * (size_t)slots; i++) {
      noise = noise * 6364136223846793005ull + 1442695040888963407ull;
      scratch[i] = (uint8_t)(noise >> 56);
    }
    const int32_t status = (int32_t)fn(&d, blob_n ? blob : NULL, arena, scratch, (size_t)slots, pool);
    unsigned char sb[4] = {(unsigned char)status, (unsigned char)(status >> 8), (unsigned char)(status >> 16),
                           (unsigned char)(status >> 24)};
    if (fwrite(sb, 1, 4, out) != 4 || fwrite(arena, 1, arena_n, out) != arena_n) {
      return fail("cannot write the results");
    }
    guarded_free(scratch, slot_bytes * (size_t)slots, 64);
    guarded_free(blob, blob_n, 64);
    guarded_free(arena, arena_n, 1);
  }
  if (pool != NULL) {
    pthreadpool_destroy(pool);
  }
  if (fclose(out) != 0) {
    return fail("cannot write the results");
  }
  fclose(in);
  return 0;
}
