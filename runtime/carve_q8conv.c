// carve runtime: the int8 dense convolution (see carve_q8conv.h): the driver every variant runs through, the
// portable C variant and the choice of a variant for the CPU. The instruction-set variants are in
// carve_q8conv_avx512.c, carve_q8conv_avx2.c and carve_q8conv_neon.c; carve_q8conv_impl.h has what they share.

#include "carve_q8conv.h"
#include "carve_q8conv_impl.h"
#include "carve_q8conv_isa.h"

static void pack_block_portable(const q8c_ctx* c, size_t m0, uint8_t* a, uint8_t flip) {
  size_t oy = m0 / c->ow, ox = m0 % c->ow;
  const uint8_t fill = (uint8_t)((uint8_t)c->zx ^ flip);
  for (size_t i = 0; i < MB; i++, a += c->kp) {
    if (m0 + i >= c->m) {
      memset(a, 0, c->kp);
      continue;
    }
    uint8_t* d = a;
    for (size_t ky = 0; ky < c->kh; ky++) {
      for (size_t kx = 0; kx < c->kw; kx++, d += c->cin) {
        const uint8_t* s = tap_pixel(c, oy, ox, ky, kx);
        if (s == NULL) {
          memset(d, fill, c->cin);
        } else {
          for (size_t j = 0; j < c->cin; j++) {
            d[j] = (uint8_t)(s[j] ^ flip);
          }
        }
      }
    }
    memset(d, 0, c->kp - c->k);
    if (++ox == c->ow) {
      ox = 0;
      oy++;
    }
  }
}

// ---- Portable ----------------------------------------------------------------------------

#if defined(__GNUC__) && !defined(__clang__)
#define Q8C_VECTORIZE __attribute__((optimize("tree-loop-vectorize", "vect-cost-model=dynamic")))
#else
#define Q8C_VECTORIZE
#endif

// acc[j] = sum over the k4 groups g and i < 4 of a[4g + i] * panel[g * 64 + 4j + i] (16 channels of one row).
Q8C_VECTORIZE static void dot_panel(const int8_t* restrict a, const int8_t* restrict panel, size_t k4,
                                    int32_t acc[restrict 16]) {
  for (size_t j = 0; j < 16; j++) {
    acc[j] = 0;
  }
  for (size_t g = 0; g < k4; g++) {
    const int8_t* wg = panel + g * 64;
    const int8_t* ag = a + 4 * g;
    for (size_t j = 0; j < 16; j++) {
      acc[j] += ag[0] * wg[4 * j] + ag[1] * wg[4 * j + 1] + ag[2] * wg[4 * j + 2] + ag[3] * wg[4 * j + 3];
    }
  }
}

static void block_portable(const q8c_ctx* c, size_t m0, unsigned char* slot) {
  uint8_t* a = slot + SLOT_A;
  pack_block_portable(c, m0, a, 0);
  const size_t rows = min_size(MB, c->m - m0);
  for (size_t r = 0; r < rows; r++) {
    const int8_t* ar = (const int8_t*)(a + r * c->kp);
    int8_t* yp = c->y + (m0 + r) * c->y_stride;
    for (size_t q = 0; q < c->panels; q++) {
      int32_t acc[16];
      dot_panel(ar, c->wt + q * c->kp * 16, c->k4, acc);
      const size_t n = min_size(16, c->cout - 16 * q);
      for (size_t j = 0; j < n; j++) {
        const size_t o = 16 * q + j;
        const int64_t v = (int64_t)acc[j] + c->bias[o] - (int64_t)c->zx * c->wsum[o];
        yp[o] = requantize(v, c->mul[o], c->shift[o], c->zy);
      }
    }
  }
  if (c->lut != NULL) {
    lut_rows_scalar(c, m0, rows);
  }
}

// ---- Driver --------------------------------------------------------------------------------------

// Slots [start, start + count): slot s computes blocks [s * blocks / slots, (s + 1) * blocks / slots).
static void q8c_task(void* context, size_t start, size_t count) {
  const q8c_ctx* c = context;
  for (size_t s = start; s < start + count; s++) {
    const size_t b0 = s * c->blocks / c->slots, b1 = (s + 1) * c->blocks / c->slots;
    if (b0 == b1) {
      continue;
    }
    c->isa->blocks(c, b0, b1, c->scratch + s * c->slot_bytes);
  }
}

static uint32_t read_u32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static int zero_point_ok(int32_t z) { return z >= -128 && z <= 127; }

// The number of full tiles of A (16 pixels [16t, 16t + 16) with 16t + 16 <= m) that tile_direct takes in place,
// counted a output row at a time: the rows whose taps are all inside, times the tiles that start in the row at a
// column ox in [lo, hi] (ox * stride >= pad, ox + 16 <= ow, (ox + 15) * stride - pad + kw <= w).
static size_t direct_tiles(const q8c_ctx* c) {
  if (c->flat) {
    return c->m / 16;
  }
  const long long s = (long long)c->stride, pad = (long long)c->pad;
  const long long lo = (pad + s - 1) / s;
  const long long by_w = (long long)c->w + pad - (long long)c->kw - 15 * s;  // hi * s <= by_w
  long long hi = (long long)c->ow - 16;
  if (by_w < 0) {
    return 0;
  }
  hi = by_w / s < hi ? by_w / s : hi;
  if (hi < lo) {
    return 0;
  }
  size_t n = 0;
  for (size_t oy = 0; oy < c->oh; oy++) {
    if (oy * c->stride < c->pad || oy * c->stride - c->pad + c->kh > c->h) {
      continue;
    }
    const long long a = (long long)(oy * c->ow) + lo, b = (long long)(oy * c->ow) + hi;  // multiples of 16 in [a, b]
    n += (size_t)(b / 16 - (a + 15) / 16 + 1);
  }
  return n;
}

// AMX: whether and how the conv runs as an implicit GEMM (the chunk, nch, nseg and flat of q8c_ctx; chunk 0: the
// packed blocks of 64-byte K blocks). The chunk is the largest multiple of 4 up to 64 that divides a segment (none:
// a segment of a length not a multiple of 4, such as the stem's 3 x 3 bytes). Unless forced (the tests), only where
// at least a quarter of the tiles are direct: a packed tile costs more in chunks than in 64-byte K blocks when the
// chunk is short, and reading a tile in place saves far more than its extra TDPBSSDs cost (the packing dominates:
// bench/q8conv_vs_xnnpack.c, docs/quantization.md).
static void amx_plan(q8c_ctx* c, int force) {
  c->chunk = 0;
  c->flat = c->kh == 1 && c->kw == 1 && c->stride == 1 && c->pad == 0;
  const int row_seg = c->x_stride == c->cin;  // a kernel row of a packed input is one run of bytes
  const size_t seg = row_seg ? c->kw * c->cin : c->cin;
  size_t ch = 0;
  for (size_t d = 64; d >= 4 && ch == 0; d -= 4) {
    ch = seg % d == 0 ? d : 0;
  }
  if (ch == 0 || (!force && 4 * direct_tiles(c) < div_round_up(c->m, 16))) {
    return;
  }
  c->chunk = ch;
  c->nch = seg / ch;
  c->nseg = row_seg ? 1 : c->kw;
}

// The variants' shared entry: checks the arguments (carve_q8conv.h) and splits the blocks over the slots.
carve_status carve_q8conv_drive(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                size_t slots, pthreadpool_t pool, const q8c_isa* isa) {
  if (d == NULL || blob == NULL || arena == NULL || scratch == NULL || slots == 0 ||
      (uintptr_t)scratch % CARVE_Q8CONV_ALIGN != 0 || d->kind != CARVE_Q8_CONV || d->groups != 1 || d->kh == 0 ||
      d->kw == 0 || d->stride == 0 || d->cin == 0 || d->cout == 0 || d->h == 0 || d->w == 0 ||
      d->kh > (size_t)d->h + 2 * (size_t)d->pad || d->kw > (size_t)d->w + 2 * (size_t)d->pad ||
      d->in_stride < d->cin || d->out_stride < d->cout || !zero_point_ok(d->in_zero) ||
      !zero_point_ok(d->out_zero) || (d->act != CARVE_ACT_NONE && d->act != CARVE_ACT_SILU)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const uint8_t* rec = blob + d->weight_off;
  const size_t kp = CARVE_Q8CONV_KP(d->kh, d->kw, d->cin), coutp = CARVE_Q8CONV_COUTP(d->cout);
  if ((uintptr_t)rec % CARVE_Q8CONV_ALIGN != 0 || read_u32(rec) != CARVE_Q8CONV_LAYOUT ||
      read_u32(rec + 4) != d->kh || read_u32(rec + 8) != d->kw || read_u32(rec + 12) != d->cin ||
      read_u32(rec + 16) != d->cout || read_u32(rec + 20) != kp || read_u32(rec + 24) != coutp) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const int32_t* bias = (const int32_t*)(const void*)(rec + CARVE_Q8CONV_HEADER_BYTES);
  const int32_t* shift = bias + 3 * coutp;
  int narrow = 1;
  for (size_t o = 0; o < coutp; o++) {
    if (shift[o] < 1 || shift[o] > 62) {
      return CARVE_ERR_INVALID_ARGUMENT;
    }
    narrow &= o >= d->cout || shift[o] >= 33;  // the padding channels' sums are not stored
  }
  const size_t oh = (d->h + 2 * (size_t)d->pad - d->kh) / d->stride + 1;
  const size_t ow = (d->w + 2 * (size_t)d->pad - d->kw) / d->stride + 1;
  const size_t k = (size_t)d->kh * d->kw * d->cin;
  q8c_ctx c = {
      .x = (const int8_t*)(arena + d->in_off), .x_stride = d->in_stride, .h = d->h, .w = d->w, .cin = d->cin,
      .kh = d->kh, .kw = d->kw, .stride = d->stride, .pad = d->pad, .oh = oh, .ow = ow, .m = oh * ow,
      .k = k, .kp = kp, .k4 = (k + 3) / 4, .cout = d->cout, .panels = coutp / CARVE_Q8CONV_NR,
      .bias = bias, .wsum = bias + coutp, .mul = bias + 2 * coutp, .shift = shift,
      .wt = (const int8_t*)(const void*)(rec + CARVE_Q8CONV_HEADER_BYTES + 16 * coutp),
      .lut = d->act == CARVE_ACT_SILU ? (const int8_t*)(const void*)(blob + d->lut_off) : NULL,
      .y = (int8_t*)(arena + d->out_off), .y_stride = d->out_stride, .zx = d->in_zero, .zy = d->out_zero,
      .blocks = div_round_up(oh * ow, MB), .slots = slots,
      .slot_bytes = CARVE_Q8CONV_SLOT_BYTES(d->kh, d->kw, d->cin), .scratch = scratch,
      .narrow = narrow,
      .lut_span = d->act == CARVE_ACT_SILU && d->out_stride == d->cout,
      .isa = isa};
  if (isa->implicit) {
    amx_plan(&c, isa->implicit == 2);
  }
  const size_t row_bytes = (size_t)d->kw * d->cin;
  c.small = d->in_stride == d->cin && d->kh <= 4 && row_bytes <= 16 && kp == 64;
  c.small4 = c.small && 3 * (size_t)d->stride * d->cin + row_bytes <= 32;
  for (size_t j = 0; j < 64; j++) {
    c.small_idx[j] = (uint8_t)(c.small && j < k ? j / row_bytes * 16 + j % row_bytes : 0);
    c.small4_idx[j] = (uint8_t)(c.small4 && j < k ? j / row_bytes * 32 + j % row_bytes : 0);
  }
  carve_parallelize_1d_tile(pool, q8c_task, (void*)&c, slots, 1);
  return CARVE_OK;
}

// ---- Variants and selection ------------------------------------------------------------------------

static void blocks_portable(const q8c_ctx* c, size_t b0, size_t b1, unsigned char* slot) {
  for (size_t b = b0; b < b1; b++) {
    block_portable(c, b * MB, slot);
  }
}

static const q8c_isa q8c_portable = {blocks_portable, 0};

carve_status carve_q8conv__portable(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena, void* scratch,
                                    size_t slots, pthreadpool_t pool) {
  return carve_q8conv_drive(d, blob, arena, scratch, slots, pool, &q8c_portable);
}

carve_q8conv_fn carve_q8conv_select(carve_isa isa) {
#ifdef CARVE_HAVE_X86_SIMD
  if (isa == CARVE_ISA_AVX512) {
    if (carve_q8conv_amx_ready()) {
      return carve_q8conv__amx;
    }
    if (carve_q8conv_vnni_ready()) {
      return carve_q8conv__avx512vnni;
    }
  }
  if (isa == CARVE_ISA_AVX512 || isa == CARVE_ISA_AVX2) {  // (an AVX-512 CPU without VNNI: Skylake-SP)
#ifdef CARVE_Q8CONV_HAVE_AVXVNNI
    if (carve_q8conv_avxvnni_ready()) {
      return carve_q8conv__avxvnni;
    }
#endif
    if (carve_q8conv_avx2_ready()) {
      return carve_q8conv__avx2;
    }
  }
#endif
#ifdef CARVE_HAVE_NEON
  if (isa == CARVE_ISA_NEON) {
#ifdef CARVE_Q8CONV_HAVE_NEONDOT
    if (carve_q8conv_neondot_ready()) {
      return carve_q8conv__neondot;
    }
#endif
    return carve_q8conv__neon;
  }
#endif
  (void)isa;
  return carve_q8conv__portable;
}

const char* carve_q8conv_name(carve_q8conv_fn fn) {
#ifdef CARVE_HAVE_X86_SIMD
  if (fn == carve_q8conv__amx || fn == carve_q8conv__amx_novbmi || fn == carve_q8conv__amx_packed ||
      fn == carve_q8conv__amx_implicit) {
    return "amx";
  }
  if (fn == carve_q8conv__avx512vnni || fn == carve_q8conv__avx512vnni_novbmi) {
    return "avx512vnni";
  }
#ifdef CARVE_Q8CONV_HAVE_AVXVNNI
  if (fn == carve_q8conv__avxvnni) {
    return "avxvnni";
  }
#endif
  if (fn == carve_q8conv__avx2) {
    return "avx2";
  }
#endif
#ifdef CARVE_HAVE_NEON
  if (fn == carve_q8conv__neon) {
    return "neon";
  }
#ifdef CARVE_Q8CONV_HAVE_NEONDOT
  if (fn == carve_q8conv__neondot) {
    return "neondot";
  }
#endif
#endif
  return fn == carve_q8conv__portable ? "portable" : "unknown";
}
