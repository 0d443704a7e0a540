// carve_q8conv (runtime/carve_q8conv.h): for every variant this CPU runs, a small 3x3 convolution whose record is
// written here by hand from the header's layout description (a second reading of it, beside q8conv_pack.py) equals
// a plain loop of arith.qconv2d's formula, with and without a pool; each bad pointer, slot count, alignment,
// descriptor field or header word is refused with CARVE_ERR_INVALID_ARGUMENT, leaving the arena as it was; the
// selector returns the variant of this CPU and names it. The arithmetic on realistic data, every shape and every
// thread count is q8conv_vs_arith.py's (bit for bit against arith.py).

#include "carve_q8conv_isa.h"
#include "test_common.h"

#include <stdalign.h>

_Static_assert(CARVE_Q8CONV_LAYOUT == 1, "make_record() below writes layout 1");
_Static_assert(CARVE_Q8CONV_SLOT_BYTES(3, 3, 20) % CARVE_Q8CONV_ALIGN == 0, "slots laid end to end stay aligned");

static carve_status (*const k_entry)(const carve_q8_desc*, const uint8_t*, uint8_t*, void*, size_t,
                                     pthreadpool_t) = carve_q8conv__portable;  // the signature (a change breaks this)

enum { ARENA = 8192, BLOB = 16384, SLOTS = 3 };
enum { H = 5, W = 6, CIN = 20, COUT = 19, XS = 23, YS = 21 };  // 3x3, stride 1, pad 1; strided views

static alignas(64) uint8_t g_arena[ARENA];
static alignas(64) uint8_t g_before[ARENA];
static alignas(64) uint8_t g_blob[BLOB];
static alignas(64) uint8_t g_scratch[SLOTS * CARVE_Q8CONV_SLOT_BYTES(3, 3, CIN) + 64];

static int8_t g_w[COUT][3][3][CIN];  // (cout, kh, kw, cin)
static int32_t g_bias[COUT], g_mul[COUT], g_shift[COUT];

static void fill_arena(void) {
  test_rng rng = {7};
  for (size_t i = 0; i < ARENA; i++) {
    g_arena[i] = (uint8_t)rng_u64(&rng);
  }
  memcpy(g_before, g_arena, ARENA);
}

static void put_u32(uint8_t* p, uint32_t v) { memcpy(p, &v, 4); }

// The descriptor (input at 0, output at 4096, record at 128, table at 64) and its record, written from the layout
// in carve_q8conv.h.
static carve_q8_desc make_case(void) {
  test_rng rng = {11};
  for (size_t o = 0; o < COUT; o++) {
    for (size_t k = 0; k < 9 * CIN; k++) {
      (&g_w[o][0][0][0])[k] = (int8_t)((int)rng_below(&rng, 255) - 127);
    }
    g_bias[o] = (int32_t)rng_below(&rng, 20001) - 10000;
    g_mul[o] = (1 << 30) + (int32_t)rng_below(&rng, 1u << 30);
    g_shift[o] = 40 + (int32_t)rng_below(&rng, 4);
  }
  carve_q8_desc d;
  memset(&d, 0, sizeof d);
  d.kind = CARVE_Q8_CONV;
  d.kh = d.kw = 3;
  d.stride = d.pad = 1;
  d.groups = 1;
  d.cin = CIN;
  d.cout = COUT;
  d.h = H;
  d.w = W;
  d.in_stride = XS;
  d.out_stride = YS;
  d.in_off = 0;
  d.out_off = 4096;
  d.weight_off = 128;
  d.lut_off = 64;
  d.act = CARVE_ACT_SILU;
  d.in_zero = -7;
  d.out_zero = 3;
  const size_t kp = CARVE_Q8CONV_KP(3, 3, CIN), coutp = CARVE_Q8CONV_COUTP(COUT);
  CHECK(kp == 192 && coutp == 32);
  memset(g_blob, 0, BLOB);
  for (size_t i = 0; i < 256; i++) {
    g_blob[d.lut_off + i] = (uint8_t)(i * 7 + 3);  // any int8 -> int8 table
  }
  uint8_t* rec = g_blob + d.weight_off;
  const uint32_t header[7] = {CARVE_Q8CONV_LAYOUT, 3, 3, CIN, COUT, (uint32_t)kp, (uint32_t)coutp};
  for (int i = 0; i < 7; i++) {
    put_u32(rec + 4 * i, header[i]);
  }
  int32_t* arr = (int32_t*)(void*)(rec + CARVE_Q8CONV_HEADER_BYTES);  // bias, wsum, mul, shift
  for (size_t o = 0; o < coutp; o++) {
    int32_t wsum = 0;
    for (size_t k = 0; o < COUT && k < 9 * CIN; k++) {
      wsum += (&g_w[o][0][0][0])[k];
    }
    arr[o] = o < COUT ? g_bias[o] : 0;
    arr[coutp + o] = wsum;
    arr[2 * coutp + o] = o < COUT ? g_mul[o] : 0;
    arr[3 * coutp + o] = o < COUT ? g_shift[o] : 1;
  }
  int8_t* panels = (int8_t*)(rec + CARVE_Q8CONV_HEADER_BYTES + 16 * coutp);
  for (size_t o = 0; o < COUT; o++) {
    for (size_t k = 0; k < 9 * CIN; k++) {  // byte g * 64 + 4 j + i of panel q is B[4g + i][16q + j]
      panels[(o / 16) * kp * 16 + (k / 4) * 64 + (o % 16) * 4 + k % 4] = (&g_w[o][0][0][0])[k];
    }
  }
  return d;
}

// arith.qconv2d of the case, a plain loop: acc = bias + sum over in-image taps of w * (x - zx) (padding holds zx,
// so it adds 0), pre = clamp(zy + ((acc * m + 2^(n-1)) >> n)), y = lut[pre + 128].
static int8_t reference(const carve_q8_desc* d, const uint8_t* arena, size_t oy, size_t ox, size_t o) {
  int64_t acc = g_bias[o];
  for (int ky = 0; ky < 3; ky++) {
    for (int kx = 0; kx < 3; kx++) {
      const long iy = (long)oy + ky - 1, ix = (long)ox + kx - 1;
      if (iy < 0 || ix < 0 || iy >= H || ix >= W) {
        continue;
      }
      const int8_t* xp = (const int8_t*)(arena + d->in_off) + ((size_t)iy * W + (size_t)ix) * XS;
      for (int c = 0; c < CIN; c++) {
        acc += (int64_t)g_w[o][ky][kx][c] * (xp[c] - d->in_zero);
      }
    }
  }
  int64_t pre = d->out_zero + ((acc * g_mul[o] + ((int64_t)1 << (g_shift[o] - 1))) >> g_shift[o]);
  pre = pre < -128 ? -128 : pre > 127 ? 127 : pre;
  return (int8_t)g_blob[d->lut_off + (size_t)(pre + 128)];
}

static void check_result(const char* name, const carve_q8_desc* d) {
  size_t distinct = 0;
  int seen[256] = {0};
  for (size_t i = 0; i < ARENA; i++) {
    const size_t rel = i - d->out_off;
    const int in_out = i >= d->out_off && rel / YS < H * W && rel % YS < COUT;
    if (!in_out) {
      CHECK_MSG(g_arena[i] == g_before[i], "%s: byte %zu outside the output written", name, i);
      continue;
    }
    const size_t p = rel / YS, o = rel % YS;
    const int8_t want = reference(d, g_before, p / W, p % W, o);
    CHECK_MSG((int8_t)g_arena[i] == want, "%s: pixel %zu channel %zu: %d, expected %d", name, p, o,
              (int8_t)g_arena[i], want);
    distinct += !seen[(uint8_t)want]++;
  }
  CHECK_MSG(distinct > 40, "%s: flat reference (%zu distinct values)", name, distinct);
}

typedef struct variant {
  const char* name;
  carve_q8conv_fn fn;
  int ready;
} variant;

static void run_variant(const variant* v, pthreadpool_t pool) {
  const carve_q8_desc good = make_case();
  const carve_status bad = CARVE_ERR_INVALID_ARGUMENT;
  uint8_t* scratch = g_scratch;
  fill_arena();
  CHECK(v->fn(&good, g_blob, g_arena, scratch, SLOTS, pool) == CARVE_OK);
  check_result(v->name, &good);
  fill_arena();
  CHECK(v->fn(&good, g_blob, g_arena, scratch, 1, pool) == CARVE_OK);
  check_result(v->name, &good);

#define EXPECT_REFUSED(call)                                                                   \
  do {                                                                                         \
    fill_arena();                                                                              \
    CHECK_MSG((call) == bad, "%s: %s not refused", v->name, #call);                            \
    CHECK_MSG(memcmp(g_arena, g_before, ARENA) == 0, "%s: %s wrote the arena", v->name, #call); \
  } while (0)
#define REFUSED_IF(assignment)                                      \
  do {                                                              \
    carve_q8_desc d_ = good;                                        \
    d_.assignment;                                                  \
    EXPECT_REFUSED(v->fn(&d_, g_blob, g_arena, scratch, SLOTS, pool)); \
  } while (0)
  EXPECT_REFUSED(v->fn(NULL, g_blob, g_arena, scratch, SLOTS, pool));
  EXPECT_REFUSED(v->fn(&good, NULL, g_arena, scratch, SLOTS, pool));
  EXPECT_REFUSED(v->fn(&good, g_blob, NULL, scratch, SLOTS, pool));
  EXPECT_REFUSED(v->fn(&good, g_blob, g_arena, NULL, SLOTS, pool));
  EXPECT_REFUSED(v->fn(&good, g_blob, g_arena, scratch, 0, pool));
  EXPECT_REFUSED(v->fn(&good, g_blob, g_arena, scratch + 32, SLOTS, pool));  // scratch not 64-byte aligned
  REFUSED_IF(kind = CARVE_Q8_ADD);
  REFUSED_IF(groups = 0);
  REFUSED_IF(groups = 2);
  REFUSED_IF(kh = 0);
  REFUSED_IF(kw = 0);
  REFUSED_IF(stride = 0);
  REFUSED_IF(cin = 0);
  REFUSED_IF(cout = 0);
  REFUSED_IF(h = 0);
  REFUSED_IF(w = 0);
  REFUSED_IF(kh = 8);                 // 5 + 2 < 8: no output row (and the header says 3)
  REFUSED_IF(in_stride = CIN - 1);
  REFUSED_IF(out_stride = COUT - 1);
  REFUSED_IF(in_zero = 128);
  REFUSED_IF(in_zero = -129);
  REFUSED_IF(out_zero = 128);
  REFUSED_IF(act = 2);
  REFUSED_IF(weight_off = 132);       // not 64-byte aligned
  REFUSED_IF(weight_off = 192);       // aligned, but no header there
  REFUSED_IF(cin = CIN + 1);          // the header's cin differs (in_stride still >= cin)
  REFUSED_IF(cout = COUT - 1);        // the header's cout differs
  REFUSED_IF(kw = 1);                 // the header's kw differs
  uint8_t* rec = g_blob + good.weight_off;
  for (int word = 0; word < 7; word++) {  // each header word off by one
    uint32_t keep;
    memcpy(&keep, rec + 4 * word, 4);
    put_u32(rec + 4 * word, keep + 1);
    EXPECT_REFUSED(v->fn(&good, g_blob, g_arena, scratch, SLOTS, pool));
    put_u32(rec + 4 * word, keep);
  }
  int32_t* shift = (int32_t*)(void*)(rec + CARVE_Q8CONV_HEADER_BYTES) + 3 * CARVE_Q8CONV_COUTP(COUT);
  const int32_t bad_shift[] = {0, -1, 63, 64};
  for (size_t i = 0; i < 4; i++) {
    const size_t o = i % 2 ? CARVE_Q8CONV_COUTP(COUT) - 1 : COUT - 1;  // a real and a padding channel
    const int32_t keep = shift[o];
    shift[o] = bad_shift[i];
    EXPECT_REFUSED(v->fn(&good, g_blob, g_arena, scratch, SLOTS, pool));
    shift[o] = keep;
  }
  fill_arena();
  CHECK(v->fn(&good, g_blob, g_arena, scratch, SLOTS, pool) == CARVE_OK);  // all restored
  check_result(v->name, &good);
}

int main(void) {
  (void)k_entry;
  const variant variants[] = {
      {"portable", carve_q8conv__portable, 1},
#ifdef CARVE_HAVE_X86_SIMD
      {"avx512vnni", carve_q8conv__avx512vnni, carve_q8conv_vnni_ready()},
      {"avx512vnni_novbmi", carve_q8conv__avx512vnni_novbmi, carve_q8conv_vnni_ready()},
      {"amx", carve_q8conv__amx, carve_q8conv_amx_ready()},
      {"amx_novbmi", carve_q8conv__amx_novbmi, carve_q8conv_amx_ready()},
      {"amx_packed", carve_q8conv__amx_packed, carve_q8conv_amx_ready()},
      {"amx_implicit", carve_q8conv__amx_implicit, carve_q8conv_amx_ready()},
      {"avx2", carve_q8conv__avx2, carve_q8conv_avx2_ready()},
#ifdef CARVE_Q8CONV_HAVE_AVXVNNI
      {"avxvnni", carve_q8conv__avxvnni, carve_q8conv_avxvnni_ready()},
#endif
#endif
#ifdef CARVE_HAVE_NEON
      {"neon", carve_q8conv__neon, 1},
#ifdef CARVE_Q8CONV_HAVE_NEONDOT
      {"neondot", carve_q8conv__neondot, carve_q8conv_neondot_ready()},
#endif
#endif
  };
  pthreadpool_t pool = make_pool2();
  int ran = 0;
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    if (!variants[i].ready) {
      printf("%s: not on this CPU\n", variants[i].name);
      continue;
    }
    run_variant(&variants[i], NULL);
    run_variant(&variants[i], pool);
    printf("%s: ok\n", variants[i].name);
    ran++;
  }
  pthreadpool_destroy(pool);
  // The selector: for AVX2, AVX-VNNI where ready, else AVX2 where ready, else portable; for AVX-512, AMX where
  // ready, else AVX-512 VNNI where ready, else AVX2's choice; for NEON (aarch64 builds) the dot-product variant
  // where ready, else NEON's; portable for the others.
  carve_q8conv_fn want2 = carve_q8conv__portable, want512 = carve_q8conv__portable;
  carve_q8conv_fn want_neon = carve_q8conv__portable;
#ifdef CARVE_HAVE_NEON
  want_neon = carve_q8conv__neon;
  CHECK(strcmp(carve_q8conv_name(carve_q8conv__neon), "neon") == 0);
#ifdef CARVE_Q8CONV_HAVE_NEONDOT
  want_neon = carve_q8conv_neondot_ready() ? carve_q8conv__neondot : want_neon;
  CHECK(strcmp(carve_q8conv_name(carve_q8conv__neondot), "neondot") == 0);
#endif
#endif
#ifdef CARVE_HAVE_X86_SIMD
  want2 = carve_q8conv_avx2_ready() ? carve_q8conv__avx2 : carve_q8conv__portable;
#ifdef CARVE_Q8CONV_HAVE_AVXVNNI
  want2 = carve_q8conv_avxvnni_ready() ? carve_q8conv__avxvnni : want2;
  CHECK(!carve_q8conv_avxvnni_ready() || strcmp(carve_q8conv_name(carve_q8conv__avxvnni), "avxvnni") == 0);
#endif
  want512 = carve_q8conv_amx_ready()    ? carve_q8conv__amx
            : carve_q8conv_vnni_ready() ? carve_q8conv__avx512vnni
                                        : want2;
  CHECK(strcmp(carve_q8conv_name(carve_q8conv__avx2), "avx2") == 0);
#endif
  CHECK(carve_q8conv_select(CARVE_ISA_AVX512) == want512);
  CHECK(carve_q8conv_select(CARVE_ISA_AVX2) == want2);
  CHECK(carve_q8conv_select(CARVE_ISA_PORTABLE) == carve_q8conv__portable);
  CHECK(carve_q8conv_select(CARVE_ISA_NEON) == want_neon);
  CHECK(strcmp(carve_q8conv_name(carve_q8conv__portable), "portable") == 0);
  CHECK(strcmp(carve_q8conv_name(NULL), "unknown") == 0);
  printf("test_q8conv: ok (%d variants; selected for this CPU: %s)\n", ran,
         carve_q8conv_name(carve_q8conv_select(carve_isa_detect())));
  return 0;
}
