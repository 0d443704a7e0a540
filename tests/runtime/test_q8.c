// carve_q8_run's and carve_q8_run_pool's argument checks (runtime/carve_q8.h):
// for every kind, a valid descriptor runs (CARVE_OK; carve_q8_run_pool on no
// pool and on 2 threads gives carve_q8_run's bytes), and each bad field or
// pointer is refused by both with CARVE_ERR_INVALID_ARGUMENT leaving the arena
// byte for byte as it was. The same for the carve_q8_run_pool variant
// carve_q8_pool_select picks on this CPU (runtime/carve_q8_pool.h), and the
// selector's choice per instruction set. The arithmetic itself is compared with
// arith.py by q8_vs_arith.py, the pool on larger ops by q8_pool_vs_run.py.

#include "carve_q8.h"
#include "carve_q8_pool_isa.h"
#include "simd_paths.h"
#include "test_common.h"

#include <stdalign.h>

_Static_assert((CARVE_Q8_ALIGN & (CARVE_Q8_ALIGN - 1)) == 0, "CARVE_Q8_ALIGN is a power of two");
_Static_assert(CARVE_Q8_ALIGN % alignof(int32_t) == 0 && CARVE_Q8_ALIGN % alignof(float) == 0,
               "a CONV record's int32 arrays and the float32 views need CARVE_Q8_ALIGN");
_Static_assert(CARVE_Q8_LUT_SIZE == 256, "an int8 -> int8 table");
_Static_assert(CARVE_Q8_LAYOUT == 1, "conv_desc() below writes a CONV record of layout 1 by hand");

// The entry points' types (a change breaks these lines).
static carve_status (*const k_q8_run)(const carve_q8_desc*, const uint8_t*, uint8_t*) = carve_q8_run;
static carve_status (*const k_q8_run_pool)(const carve_q8_desc*, const uint8_t*, uint8_t*, pthreadpool_t) =
    carve_q8_run_pool;

static pthreadpool_t g_pool;  // 2 threads
static carve_q8_pool_fn g_variant;  // carve_q8_pool_select(carve_isa_detect())

enum { ARENA = 4096, BLOB = 1024 };

// 32-byte aligned, so that offsets alone set the alignment the kernels see.
static alignas(32) uint8_t g_arena[ARENA];
static alignas(32) uint8_t g_before[ARENA];
static alignas(32) uint8_t g_serial[ARENA];  // carve_q8_run's result
static alignas(32) uint8_t g_blob[BLOB];

static void fill_arena(void) {
  test_rng rng = {42};
  for (size_t i = 0; i < ARENA; i++) {
    g_arena[i] = (uint8_t)rng_u64(&rng);
  }
  memcpy(g_before, g_arena, ARENA);
}

// A 3x3 stride-1 pad-1 conv of a 4x5 x cin input to cout channels with SiLU, packed input and output: the
// record (written here) at 64, the table at 512.
static carve_q8_desc conv_desc(uint32_t groups, uint32_t cin, uint32_t cout) {
  carve_q8_desc d;
  memset(&d, 0, sizeof d);
  d.kind = CARVE_Q8_CONV;
  d.kh = d.kw = 3;
  d.stride = d.pad = 1;
  d.groups = groups;
  d.cin = cin;
  d.cout = cout;
  d.h = 4;
  d.w = 5;
  d.in_stride = cin;
  d.out_stride = cout;
  d.in_off = 0;
  d.out_off = 1024;
  d.weight_off = 64;
  d.lut_off = 512;
  d.act = CARVE_ACT_SILU;
  d.in_zero = -3;
  d.out_zero = 5;
  int32_t* rec = (int32_t*)(void*)(g_blob + d.weight_off);
  for (size_t o = 0; o < d.cout; o++) {
    rec[o] = 100 * (int32_t)o - 300;       // bias
    rec[d.cout + o] = 1 << 30;             // mul
    rec[2 * d.cout + o] = 40 + (int32_t)o;  // shift
  }
  int8_t* w = (int8_t*)(g_blob + d.weight_off + 12 * d.cout);
  for (size_t i = 0; i < d.cout * 9 * (d.cin / groups); i++) {
    w[i] = (int8_t)((int)(i * 37 % 255) - 127);
  }
  for (size_t i = 0; i < CARVE_Q8_LUT_SIZE; i++) {
    g_blob[d.lut_off + i] = (uint8_t)(255 - i);
  }
  return d;
}

static carve_q8_desc pixel_desc(int kind) {
  carve_q8_desc d;
  memset(&d, 0, sizeof d);
  d.kind = kind;
  d.h = 3;
  d.w = 4;
  d.cin = 5;
  d.in_stride = d.in2_stride = d.out_stride = 7;
  d.in_off = 0;
  d.in2_off = 256;
  d.out_off = 1024;
  d.kh = 3;
  d.stride = 1;
  d.pad = 1;
  d.mul_a = d.mul_b = 1 << 30;
  d.shift = 31;
  d.scale = 0.05f;
  return d;
}

// carve_q8_run (pool -1), or carve_q8_run_pool without a pool (0) or on g_pool (1), or the selected variant
// without a pool (2) or on g_pool (3).
static carve_status run(int pool, const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena) {
  if (pool < 0) {
    return k_q8_run(d, blob, arena);
  }
  return (pool < 2 ? k_q8_run_pool : g_variant)(d, blob, arena, pool % 2 ? g_pool : NULL);
}

static void expect_refused(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, int line) {
  for (int pool = -1; pool <= 3; pool++) {
    fill_arena();
    const carve_status s = run(pool, d, blob, arena);
    CHECK_MSG(s == CARVE_ERR_INVALID_ARGUMENT, "case at line %d, pool %d: status %d", line, pool, (int)s);
    CHECK_MSG(memcmp(g_arena, g_before, ARENA) == 0, "case at line %d, pool %d: the arena was written", line, pool);
  }
}

static void expect_ok(const carve_q8_desc* d, int line) {
  for (int pool = -1; pool <= 3; pool++) {
    fill_arena();
    const carve_status s = run(pool, d, g_blob, g_arena);
    CHECK_MSG(s == CARVE_OK, "case at line %d, pool %d: status %d", line, pool, (int)s);
    CHECK_MSG(memcmp(g_arena, g_before, ARENA) != 0, "case at line %d, pool %d: nothing written", line, pool);
    if (pool < 0) {
      memcpy(g_serial, g_arena, ARENA);
    } else {
      CHECK_MSG(memcmp(g_arena, g_serial, ARENA) == 0, "case at line %d, pool %d: not carve_q8_run's bytes", line,
                pool);
    }
  }
}

#define REFUSED(d, blob, arena) expect_refused(&(d), blob, arena, __LINE__)
#define OK(d) expect_ok(&(d), __LINE__)
// REFUSED_IF(field = value): the valid descriptor `base` with one field changed is refused
#define REFUSED_IF(base, assignment)        \
  do {                                      \
    carve_q8_desc d_ = (base);              \
    d_.assignment;                          \
    REFUSED(d_, g_blob, g_arena);           \
  } while (0)

static void check_pointers_and_kinds(void) {
  const carve_q8_desc conv = conv_desc(1, 6, 8);
  OK(conv);
  REFUSED(conv, g_blob, NULL);
  REFUSED(conv, NULL, g_arena);  // CONV needs the blob
  expect_refused(NULL, g_blob, g_arena, __LINE__);
  REFUSED_IF(conv, kind = 0);
  REFUSED_IF(conv, kind = 8);
  REFUSED_IF(conv, kind = -1);
  REFUSED_IF(conv, act = 2);
  REFUSED_IF(conv, act = -1);
  // the kinds without weights run without a blob
  const carve_q8_desc copy = pixel_desc(CARVE_Q8_COPY);
  for (int pool = -1; pool <= 3; pool++) {
    fill_arena();
    CHECK(run(pool, &copy, NULL, g_arena) == CARVE_OK);
  }
}

static void check_conv_fields(void) {
  const carve_q8_desc conv = conv_desc(1, 6, 8);
  REFUSED_IF(conv, groups = 0);
  REFUSED_IF(conv, groups = 4);   // does not divide cin = 6
  REFUSED_IF(conv, groups = 3);   // divides cin, not cout = 8
  REFUSED_IF(conv, cin = 0);
  REFUSED_IF(conv, cout = 0);
  REFUSED_IF(conv, stride = 0);
  REFUSED_IF(conv, kh = 0);
  REFUSED_IF(conv, kw = 0);
  REFUSED_IF(conv, h = 0);
  REFUSED_IF(conv, w = 0);
  REFUSED_IF(conv, kh = 7);       // 4 + 2 * 1 < 7: no output row
  REFUSED_IF(conv, kw = 8);
  REFUSED_IF(conv, in_stride = 5);
  REFUSED_IF(conv, out_stride = 7);
  REFUSED_IF(conv, in_zero = 128);
  REFUSED_IF(conv, in_zero = -129);
  REFUSED_IF(conv, out_zero = 200);
  REFUSED_IF(conv, weight_off = 66);  // the record's int32 arrays misaligned
  // a shift outside [1, 62] in any output channel
  int32_t* shift = (int32_t*)(void*)(g_blob + conv.weight_off) + 2 * conv.cout;
  const int32_t keep = shift[conv.cout - 1];
  const int32_t bad[] = {0, -1, 63, 64};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    shift[conv.cout - 1] = bad[i];
    REFUSED(conv, g_blob, g_arena);
  }
  shift[conv.cout - 1] = keep;
  OK(conv);
  // depthwise and grouped run
  const carve_q8_desc dw = conv_desc(6, 6, 6);
  OK(dw);
  REFUSED_IF(dw, out_stride = 5);
  REFUSED_IF(dw, in_stride = 5);
  const carve_q8_desc grouped = conv_desc(2, 6, 8);
  OK(grouped);
}

static void check_pixel_kinds(void) {
  const int kinds[] = {CARVE_Q8_ADD,      CARVE_Q8_MAXPOOL,  CARVE_Q8_COPY,
                       CARVE_Q8_UPSAMPLE2X, CARVE_Q8_QUANTIZE, CARVE_Q8_DEQUANTIZE};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    const carve_q8_desc d = pixel_desc(kinds[i]);
    OK(d);
    REFUSED(d, g_blob, NULL);
    REFUSED_IF(d, h = 0);
    REFUSED_IF(d, w = 0);
    REFUSED_IF(d, cin = 0);
    REFUSED_IF(d, in_stride = 4);
    REFUSED_IF(d, out_stride = 4);
  }
  const carve_q8_desc add = pixel_desc(CARVE_Q8_ADD);
  REFUSED_IF(add, in2_stride = 4);
  REFUSED_IF(add, shift = 0);
  REFUSED_IF(add, shift = 63);
  REFUSED_IF(add, in_zero = 128);
  REFUSED_IF(add, in2_zero = -129);
  REFUSED_IF(add, out_zero = 1000);
  const carve_q8_desc pool = pixel_desc(CARVE_Q8_MAXPOOL);
  REFUSED_IF(pool, kh = 0);
  REFUSED_IF(pool, stride = 0);
  REFUSED_IF(pool, pad = 2);  // pad > kh / 2: a window could lie in the padding
  REFUSED_IF(pool, kh = 6);   // larger than the padded input (3 + 2)
  const carve_q8_desc quant = pixel_desc(CARVE_Q8_QUANTIZE);
  const carve_q8_desc dequant = pixel_desc(CARVE_Q8_DEQUANTIZE);
  const float bad_scales[] = {0.0f, -0.5f, NAN, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++) {
    REFUSED_IF(quant, scale = bad_scales[i]);
    REFUSED_IF(dequant, scale = bad_scales[i]);
  }
  REFUSED_IF(quant, out_zero = 128);
  REFUSED_IF(dequant, in_zero = -129);
  REFUSED_IF(quant, in_off = 2);       // the float32 input misaligned
  REFUSED_IF(dequant, out_off = 1026);  // the float32 output misaligned
  carve_q8_desc odd = quant;
  odd.out_off = 1027;  // int8 views need no alignment
  OK(odd);
}

// carve_q8_pool_select: for AVX-512 the best AVX-512 variant this CPU runs, else (and for AVX2) the AVX2 one where
// the CPU has AVX2 + FMA; for NEON the neon one (aarch64 builds); the portable variant for the others.
static void check_select(void) {
  for (int isa = 0; isa < CARVE_TEST_ISAS; isa++) {
    const carve_q8_pool_fn fn = carve_q8_pool_select((carve_isa)isa);
    carve_q8_pool_fn want = carve_q8_pool__portable;
#ifdef CARVE_HAVE_X86_SIMD
    if ((isa == CARVE_ISA_AVX2 || isa == CARVE_ISA_AVX512) && carve_q8_pool_avx2_ready()) {
      want = carve_q8_pool__avx2;
    }
    if (isa == CARVE_ISA_AVX512 && carve_q8_pool_avx512_ready()) {
      want = carve_q8_pool_vbmi_ready() ? carve_q8_pool__avx512vbmi : carve_q8_pool__avx512;
    }
#endif
#ifdef CARVE_HAVE_NEON
    if (isa == CARVE_ISA_NEON) {
      want = carve_q8_pool__neon;
    }
#endif
    CHECK_MSG(fn == want, "carve_q8_pool_select(%s) is %s", carve_isa_name((carve_isa)isa), carve_q8_pool_name(fn));
  }
  CHECK(carve_q8_pool_name(NULL) != NULL && strcmp(carve_q8_pool_name(NULL), "unknown") == 0);
}

int main(void) {
  g_pool = pthreadpool_create(2);
  CHECK(g_pool != NULL);
  check_select();
  g_variant = carve_q8_pool_select(carve_isa_detect());
  check_pointers_and_kinds();
  check_conv_fields();
  check_pixel_kinds();
  pthreadpool_destroy(g_pool);
  printf("runtime_q8: argument checks ok (carve_q8_run; carve_q8_run_pool and the %s variant without a pool and on "
         "2 threads)\n", carve_q8_pool_name(g_variant));
  return 0;
}
