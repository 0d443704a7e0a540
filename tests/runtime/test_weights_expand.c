// Checks carve_weights_expand (runtime/carve_weights.c), which rebuilds an f16 package's float32 weights: on a
// small table of every kind of piece (halves; a convolution with its BatchNorm folded, with and without its own
// bias, one in a layout with a padding channel; Winograd, widened and folded) the values worked out by hand
// (exact numbers; the formulas in the comments), every chunk of every size giving the whole buffer's bits (the
// cuda package rebuilds in chunks), and every malformed argument or piece refused with
// CARVE_ERR_INVALID_ARGUMENT, nothing written. tests/firmware/f16.py checks the function on real models against
// the generator's numpy, bit for bit.

#include <float.h>

#include "carve_weights.h"
#include "test_common.h"

// The payload, in halves: two convolutions' weights and BatchNorms, a 3x3 kernel of ones, a third BatchNorm.
enum { H_W0 = 0, H_BN0 = 6, H_W1 = 14, H_BN1 = 20, H_ONES = 30, H_WBN = 39, N_HALVES = 43 };

// The floats: W0 0..5, B0 8..9, W1 16..21, B1 24..25, WINO 32..47, WINO_BN 48..63, B_WINO 64, HALVES 66..69;
// the rest (padding between tensors) 0.
#define TOTAL 72

static const carve_weights_piece k_pieces[] = {
    // (2 channels, 3): channel = i_0; eps 1
    {CARVE_WEIGHTS_PIECE_CONV, CARVE_WEIGHTS_BN, 0, 6, H_W0, 2, 0, 8, H_BN0, 1.0f, 2, {2, 3}, {1, 0}},
    // (2, 3 channels, the last one padding): channel = i_1; the conv's own bias
    {CARVE_WEIGHTS_PIECE_CONV, CARVE_WEIGHTS_BN | CARVE_WEIGHTS_BIAS, 16, 6, H_W1, 2, 0, 24, H_BN1, 1.0f, 2, {2, 3},
     {0, 1}},
    // the kernel of ones, widened then transformed
    {CARVE_WEIGHTS_PIECE_CONV, CARVE_WEIGHTS_WINOGRAD, 32, 16, H_ONES, 1, 1, 0, 0, 0.0f, 0, {0}, {0}},
    // the same kernel folded (scale 2) then transformed; eps 0.25
    {CARVE_WEIGHTS_PIECE_CONV, CARVE_WEIGHTS_BN | CARVE_WEIGHTS_WINOGRAD, 48, 16, H_ONES, 1, 1, 64, H_WBN, 0.25f, 0,
     {0}, {0}},
    {CARVE_WEIGHTS_PIECE_HALVES, 0, 66, 4, H_ONES, 0, 0, 0, 0, 0.0f, 0, {0}, {0}},
};
#define N_PIECES (sizeof k_pieces / sizeof k_pieces[0])

static uint16_t g_payload[N_HALVES];  // little-endian halves (every carve target is little-endian)

// The half of f, for the small exact values used here.
static uint16_t half_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof(b));
  const uint32_t sign = (b >> 16) & 0x8000u;
  if ((b & 0x7fffffffu) == 0) {
    return (uint16_t)sign;
  }
  const int exp = (int)((b >> 23) & 0xffu) - 127 + 15;
  CHECK(exp > 0 && exp < 31 && (b & 0x1fffu) == 0);
  return (uint16_t)(sign | (uint32_t)exp << 10 | ((b >> 13) & 0x3ffu));
}

static void put(size_t at, const float* v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    g_payload[at + i] = half_bits(v[i]);
  }
}

static void make_payload(void) {
  const float w0[6] = {1, 2, 3, -1, 0.5f, 4};
  // gamma, beta, mean, var of 2 channels: channel 0 gamma 2, beta 0.5, mean 1, var 3 (var + eps 1 = 4: r = 0.5,
  // s = 1); channel 1 gamma -1, beta 0, mean 0, var 3 (r = 0.5, s = -0.5)
  const float bn0[8] = {2, -1, 0.5f, 0, 1, 0, 3, 3};
  const float w1[6] = {1, 2, 0, 3, 4, 0};              // the padding channel's halves are 0
  const float bn1[10] = {2, -1, 0.5f, 0, 1, 0, 3, 3, 3, -2};  // ... then the conv's bias 3, -2
  const float ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  const float wbn[4] = {2, 1, 0, 0.75f};                // var + eps 0.25 = 1: r = 1, s = 2; bias 1
  put(H_W0, w0, 6);
  put(H_BN0, bn0, 8);
  put(H_W1, w1, 6);
  put(H_BN1, bn1, 10);
  put(H_ONES, ones, 9);
  put(H_WBN, wbn, 4);
}

static void check_values(const float* w) {
  const float want0[6] = {1, 2, 3, 0.5f, -0.25f, -2};  // channel 1 times -0.5
  for (int i = 0; i < 6; i++) {
    CHECK_MSG(w[i] == want0[i], "W0[%d] = %g, want %g", i, w[i], want0[i]);
  }
  CHECK(w[8] == -0.5f);  // ((0 - 1) * 0.5) * 2 + 0.5
  CHECK(w[9] == 0.0f);   // ((0 - 0) * 0.5) * -1 + 0
  const float want1[6] = {1, -1, 0, 3, -2, 0};  // rows of (channel 0, channel 1, padding)
  for (int i = 0; i < 6; i++) {
    CHECK_MSG(w[16 + i] == want1[i], "W1[%d] = %g, want %g", i, w[16 + i], want1[i]);
  }
  CHECK(w[24] == 2.5f);   // ((3 - 1) * 0.5) * 2 + 0.5
  CHECK(w[25] == 1.0f);   // ((-2 - 0) * 0.5) * -1 + 0
  // G g G^T of a kernel of ones: the outer product of G's row sums (1, 1.5, 0.5, 1); folded: twice that
  const float rows[4] = {1, 1.5f, 0.5f, 1};
  for (int p = 0; p < 16; p++) {
    CHECK_MSG(w[32 + p] == rows[p / 4] * rows[p % 4], "WINO[%d] = %g", p, w[32 + p]);
    CHECK_MSG(w[48 + p] == 2 * rows[p / 4] * rows[p % 4], "WINO_BN[%d] = %g", p, w[48 + p]);
  }
  CHECK(w[64] == 1.0f);  // ((0 - 0) * 1) * 2 + 1
  for (int i = 66; i < 70; i++) {
    CHECK(w[i] == 1.0f);
  }
  const int zeros[] = {6, 7, 10, 11, 12, 13, 14, 15, 22, 23, 26, 27, 28, 29, 30, 31, 65, 70, 71};
  for (size_t i = 0; i < sizeof zeros / sizeof zeros[0]; i++) {
    uint32_t bits;
    memcpy(&bits, &w[zeros[i]], sizeof(bits));
    CHECK_MSG(bits == 0, "float %d: 0x%08x, want +0", zeros[i], bits);
  }
}

// Every chunk [first, first + n) equals the whole buffer's floats, bit for bit.
static void check_chunks(const float* whole) {
  float chunk[TOTAL];
  for (size_t n = 1; n <= TOTAL; n++) {
    for (size_t first = 0; first + n <= TOTAL; first++) {
      CHECK(carve_weights_expand(g_payload, sizeof g_payload, k_pieces, N_PIECES, TOTAL, first, chunk, n) == CARVE_OK);
      CHECK_MSG(memcmp(chunk, whole + first, n * sizeof(float)) == 0, "chunk [%zu, %zu)", first, first + n);
    }
  }
}

// One piece changed by `edit` is refused, nothing written.
static void refuse(const char* what, void (*edit)(carve_weights_piece*)) {
  carve_weights_piece pieces[N_PIECES];
  memcpy(pieces, k_pieces, sizeof pieces);
  edit(&pieces[1]);
  float out[TOTAL];
  fill_canary(out, TOTAL);
  const carve_status s = carve_weights_expand(g_payload, sizeof g_payload, pieces, N_PIECES, TOTAL, 0, out, TOTAL);
  CHECK_MSG(s == CARVE_ERR_INVALID_ARGUMENT, "%s: status %d", what, (int)s);
  for (size_t i = 0; i < TOTAL; i++) {
    CHECK_MSG(is_canary(out[i]), "%s: float %zu written", what, i);
  }
}

static void kind_0(carve_weights_piece* p) { p->kind = (carve_weights_piece_kind)0; }
static void kind_3(carve_weights_piece* p) { p->kind = (carve_weights_piece_kind)3; }
static void no_flags(carve_weights_piece* p) { p->flags = 0; }
static void unknown_flag(carve_weights_piece* p) { p->flags |= 8u; }
static void bias_without_bn(carve_weights_piece* p) { p->flags = CARVE_WEIGHTS_BIAS | CARVE_WEIGHTS_WINOGRAD; }
static void no_channels(carve_weights_piece* p) { p->channels = 0; }
static void ndim_0(carve_weights_piece* p) { p->ndim = 0; }
static void ndim_7(carve_weights_piece* p) { p->ndim = CARVE_WEIGHTS_MAX_DIMS + 1; }
static void dims_not_count(carve_weights_piece* p) { p->dims[1] = 2; }
static void dim_0(carve_weights_piece* p) { p->dims[0] = 0; }
static void step_overflow(carve_weights_piece* p) { p->steps[0] = SIZE_MAX; }
static void reads_past(carve_weights_piece* p) { p->src = N_HALVES - 5; }
static void writes_past(carve_weights_piece* p) { p->dst = TOTAL - 5; }
static void src_huge(carve_weights_piece* p) { p->src = SIZE_MAX; }
static void bn_past(carve_weights_piece* p) { p->bn_src = N_HALVES - 9; }
static void bias_past(carve_weights_piece* p) { p->bias_dst = TOTAL - 1; }
static void eps_negative(carve_weights_piece* p) { p->eps = -1e-3f; }
static void eps_nan(carve_weights_piece* p) { p->eps = NAN; }
static void eps_inf(carve_weights_piece* p) { p->eps = INFINITY; }
static void wino_cin_0(carve_weights_piece* p) {
  *p = k_pieces[2];
  p->cin = 0;
}
static void wino_count(carve_weights_piece* p) {
  *p = k_pieces[2];
  p->count = 15;
}
static void wino_huge(carve_weights_piece* p) {
  *p = k_pieces[2];
  p->cin = SIZE_MAX / 4;
}
static void halves_flags(carve_weights_piece* p) {
  *p = k_pieces[4];
  p->flags = CARVE_WEIGHTS_BN;
}
static void halves_past(carve_weights_piece* p) {
  *p = k_pieces[4];
  p->count = N_HALVES;
}

static void check_refusals(void) {
  float out[TOTAL];
  fill_canary(out, TOTAL);
  const carve_status bad = CARVE_ERR_INVALID_ARGUMENT;
  CHECK(carve_weights_expand(NULL, sizeof g_payload, k_pieces, N_PIECES, TOTAL, 0, out, TOTAL) == bad);
  CHECK(carve_weights_expand(g_payload, sizeof g_payload, NULL, N_PIECES, TOTAL, 0, out, TOTAL) == bad);
  CHECK(carve_weights_expand(g_payload, sizeof g_payload, k_pieces, N_PIECES, TOTAL, 0, NULL, TOTAL) == bad);
  CHECK(carve_weights_expand(g_payload, sizeof g_payload, k_pieces, N_PIECES, TOTAL, 1, out, TOTAL) == bad);
  CHECK(carve_weights_expand(g_payload, sizeof g_payload, k_pieces, N_PIECES, TOTAL, SIZE_MAX, out, 2) == bad);
  CHECK(carve_weights_expand(g_payload, sizeof g_payload, k_pieces, N_PIECES, TOTAL - 3, 0, out, 1) == bad);  // past total
  CHECK(carve_weights_expand(g_payload, 2 * H_WBN, k_pieces, N_PIECES, TOTAL, 0, out, TOTAL) == bad);  // short payload
  for (size_t i = 0; i < TOTAL; i++) {
    CHECK(is_canary(out[i]));
  }
  // nothing to do is not an error
  CHECK(carve_weights_expand(NULL, 0, NULL, 0, 0, 0, NULL, 0) == CARVE_OK);
  CHECK(carve_weights_expand(g_payload, sizeof g_payload, k_pieces, N_PIECES, TOTAL, TOTAL, NULL, 0) == CARVE_OK);
  refuse("kind 0", kind_0);
  refuse("kind 3", kind_3);
  refuse("a conv piece that does nothing", no_flags);
  refuse("an unknown flag", unknown_flag);
  refuse("BIAS without BN", bias_without_bn);
  refuse("0 channels", no_channels);
  refuse("ndim 0", ndim_0);
  refuse("ndim 7", ndim_7);
  refuse("dims whose product is not count", dims_not_count);
  refuse("a dim of 0", dim_0);
  refuse("a step that overflows", step_overflow);
  refuse("weights past the payload", reads_past);
  refuse("weights past total", writes_past);
  refuse("src SIZE_MAX", src_huge);
  refuse("the BatchNorm past the payload", bn_past);
  refuse("biases past total", bias_past);
  refuse("eps < 0", eps_negative);
  refuse("eps NaN", eps_nan);
  refuse("eps inf", eps_inf);
  refuse("Winograd cin 0", wino_cin_0);
  refuse("Winograd count not 16 cin channels", wino_count);
  refuse("Winograd sizes that overflow", wino_huge);
  refuse("halves with a flag", halves_flags);
  refuse("halves past the payload", halves_past);
}

int main(void) {
  make_payload();
  float whole[TOTAL];
  fill_canary(whole, TOTAL);
  CHECK(carve_weights_expand(g_payload, sizeof g_payload, k_pieces, N_PIECES, TOTAL, 0, whole, TOTAL) == CARVE_OK);
  check_values(whole);
  check_chunks(whole);
  check_refusals();
  printf("runtime_weights_expand: %zu pieces: values, %d chunkings, %d refusals ok\n", N_PIECES,
         TOTAL * (TOTAL + 1) / 2, 24);
  return 0;
}
