// tests/cuda/test_igemm.cu: the fused implicit-GEMM convolution (runtime/carve_cuda_igemm.h,
// carve_cu_ctx_set_conv_impl(CARVE_CU_CONV_FUSED)), both operand types:
//   * TF32 (float32 storage, conv_tf32 = 1): against a double-precision loop over the inputs and
//     weights rounded as cvt.rna.tf32 does (10-bit mantissa, to nearest, ties away), within the float32
//     accumulation and the epilogue's float roundings: tight enough that operands truncated instead of
//     rounded, or not converted at all, fail;
//   * fp16 (__half storage): against a double loop over the same halves, within the float accumulation
//     and the one rounding of the store;
// on shapes that spread: 1x1 stride 1 and 2, 3x3 stride 1 and 2, 3 channels with a 5x5 / 2 kernel (K 75: the
// stem's 3x3 / 2, K 27, takes the direct kernel instead, carve_cuda_direct.h), a 3x1 kernel, odd sizes, K below one step and over many (yolo26n's 20 x 20 stage: 128 -> 256, K 1152), cout
// not a multiple of 16 and over one tile, pixels over several tiles; residual and none, SiLU and none;
// strided input, output and residual views (what lies between the output's channels never written); every
// tile of carve_cuda_igemm_tile.h (the case's SM count picks it) with the 16-byte loads (channels and
// pixel stride whole chunks, aligned) and without (odd channels, cin 12 in halves, x misaligned). Each
// output varies (not flat). Each case prints its worst error against its tolerance.
// The epilogue stores 16-byte vectors where cout and the output / residual strides are whole vectors (the vout
// cases, the last four) and one output a thread elsewhere (the others: strides cout + 2 / cout + 1).
//   * one launch per convolution (a stream capture's node count), against 2-3 for the cuBLAS path;
//   * strict float32 (conv_tf32 = 0) with the fused request keeps the cuBLAS path and its float32 results;
//   * without the request, the shapes where the fused kernel is the faster path (carve_cu_igemm_preferred: a
//     stride-2 k x k conv, cout <= 64, >= CARVE_CU_IGEMM_WIDE_PIXELS output pixels) take it anyway (TF32 and fp16;
//     strict float32 not);
//   * the stem (3 -> 16, 3x3 / 2) with the fused request runs the direct kernel: one launch, float32 results
//     (no TF32 rounding) in the TF32 math, the fp16 bound in half;
//   * the tactics' own tiles (sliced K over 2 and 4 warp groups, asynchronous stages of 32x32, 64x32 and 32x64, split K) on every case,
//     through a tactic table entry;
//   * the split K: results independent of the blocks' order, the arrival counters zero after each launch;
//   * tactics (carve_cu_ctx_set_tactics): a tuning call times both paths and keeps the faster, entries choose
//     the path, the default rule elsewhere (test_tactics);
//   * argument errors of carve_cu_ctx_set_conv_impl and _set_tactics.
// Runs under the emulation (ctest cuda_igemm) and on a GPU (tests/cuda/gpu_kernel_tests.sh, sm_80+).
// CARVE_TEST_REDUCED=1 (the AddressSanitizer build of `make test`, cuda_igemm_asan; tests/cuda/tests.cmake): the
// large case (yolo26n's 20 x 20 stage, some 5 s a launch there) runs on its own tile only and the split test takes
// the smaller split case instead: the other cases still reach every kernel, and cuda_igemm runs the whole sweep.

#include <set>
#include <utility>

#ifndef CARVE_TEST_REDUCED
#define CARVE_TEST_REDUCED 0
#endif

#include "carve_cuda_direct.h"
#include "carve_cuda_f16.h"
#include "carve_cuda_igemm_tile.h"
#include "cuda_test.h"

// The accumulation error, relative to the sum of |products| (mag) of an output.
// Emulation: the products are exact and summed in float32 in k order (cuda_emu.h's wmma; its host GEMM for
// the cuBLAS path): a few float32 roundings of sums below mag, far under 2^-21 mag on these shapes.
// GPU, the fused kernel: one mma k-step adds kstep exact products (11 x 11 significant bits) to the
// accumulator c; the tensor cores align those kstep + 1 terms to the largest exponent among them and keep a
// fixed number of bits (about fp32's 24, with truncation: Fasi et al., "Numerical behavior of NVIDIA tensor
// cores", 2021), so a term loses below one unit of the 24th bit of that largest term, <= 2^-23 mag (every
// term and every partial sum is <= mag); with the result's normalisation, (kstep + 1) 2^-22 mag per k-step
// at most, ceil(K / kstep) k-steps. Not IEEE float32 per add: the same K can round differently from the
// emulation's order, a few units of 2^-24 more per step, which this bound covers (a wrong tap, channel or a
// missing bias changes an output by about mag / K or more, and K^2 2^-22 < 1 for K <= 2048).
// GPU, the cuBLAS path (TF32): its kernels' conversion of the float32 operands to TF32 is not specified
// (rounded or truncated): each operand within one TF32 unit (2^-10 relative) of the rounded value the
// reference uses, so each product within (2^-9 + 2^-20) of it, and the same accumulation bound.
// (CARVE_TEST_GPU_TOLERANCE: the GPU's bounds under the emulation too, to check that they still fail a
// broken kernel.)
static double acc_tol(size_t k, int kstep, bool fused) {
#if defined(CARVE_CUDA_EMULATION) && !defined(CARVE_TEST_GPU_TOLERANCE)
  (void)k;
  (void)kstep;
  (void)fused;
  return 0x1p-21;
#else
  const double steps = (double)((k + (size_t)kstep - 1) / (size_t)kstep);
  return steps * (kstep + 1) * 0x1p-22 + (fused ? 0.0 : 0x1p-9 + 0x1p-20);
#endif
}
static const double kF32 = 0x1p-21;  // a few float32 roundings (bias add, expf, residual add, store)
static const double kU16 = 0x1p-11;  // fp16's unit roundoff: the store of a half result

// cvt.rna.tf32.f32, written out here (the test's statement of what TF32 operands are).
static float rna_tf32(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&v, &u, 4);
  return v;
}

// The element types under test: storage, conversion to it, and the value the tensor cores multiply.
struct F32 {
  typedef float T;
  static constexpr const char* name = "tf32";
  static constexpr int kstep = 8;  // wmma m16n16k8
  static T make(float v) { return v; }
  static double val(T v) { return v; }
  static double op(T v) { return rna_tf32(v); }
  static T canary() { return -12345.5f; }
  static bool is_canary(T v) { return v == -12345.5f; }
  static double store_tol(double want) { return kF32 * std::fabs(want); }
};

struct F16 {
  typedef __half T;
  static constexpr const char* name = "fp16";
  static constexpr int kstep = 16;  // wmma m16n16k16
  static T make(float v) { return __float2half(v); }
  static double val(T v) { return __half2float(v); }
  static double op(T v) { return __half2float(v); }
  static T canary() { return __ushort_as_half(0x7bffu); }
  static bool is_canary(T v) { return __half_as_ushort(v) == 0x7bffu; }
  static double store_tol(double want) { return kU16 * std::fabs(want) + 0x1p-24; }
};

// xpad: elements between input pixels beyond cin (in_stride = cin + xpad); xoff: x starts that many
// elements into its buffer (xoff 1: not 16-byte aligned); sms: the context's SM count for the case, which
// picks the tile (carve_cu_igemm_tile): together the cases reach every tile with and without the 16-byte
// loads, in both types (checked: test_fused).
struct Case {
  uint32_t kh, kw, stride, pad, cin, cout, h, w;
  bool residual;
  carve_cu_act act;
  uint32_t xpad, xoff;
  int sms;
  bool vout = false;  // output and residual strides of whole 16-byte vectors (cout + 8, cout + 16), else cout + 2 / + 1
};

static const Case kCases[] = {
    {1, 1, 1, 0, 19, 13, 7, 9, false, CARVE_CU_ACT_SILU, 3, 0, 1},   // 1x1, K below one step, cout < 16: 64x32
    {1, 1, 1, 0, 8, 24, 5, 3, true, CARVE_CU_ACT_NONE, 3, 0, 1},     // 1x1 + residual, cout 24
    {1, 1, 2, 0, 16, 33, 9, 9, false, CARVE_CU_ACT_SILU, 3, 0, 1},   // 1x1 stride 2: 64x64
    {3, 3, 1, 1, 11, 10, 9, 8, true, CARVE_CU_ACT_SILU, 3, 0, 3},    // 3x3 / 1, padding, residual: 32x32
    {3, 3, 2, 1, 6, 7, 11, 10, false, CARVE_CU_ACT_SILU, 3, 0, 1},   // 3x3 / 2, odd sizes
    {5, 5, 2, 2, 3, 16, 17, 15, false, CARVE_CU_ACT_SILU, 3, 0, 132},  // 3 channels, 5x5 / 2 (K 75): 32x32
    {3, 3, 1, 1, 40, 70, 13, 11, true, CARVE_CU_ACT_NONE, 3, 0, 8},  // K 360, 5 x 2 tiles of 32x64
    {3, 1, 1, 1, 5, 9, 6, 4, false, CARVE_CU_ACT_NONE, 3, 0, 1},     // 3x1 kernel (pad on all four sides)
    // 16-byte loads (cin and in_stride multiples of 8 halves / 4 floats):
    {1, 1, 1, 0, 32, 48, 12, 10, true, CARVE_CU_ACT_SILU, 8, 0, 1},  // 1x1 + residual: 64x64
    {3, 3, 1, 1, 16, 40, 9, 7, false, CARVE_CU_ACT_SILU, 8, 0, 2},   // K 144 (a partial last step): 32x64
    {3, 3, 2, 1, 24, 20, 15, 13, false, CARVE_CU_ACT_NONE, 8, 0, 1}, // 3x3 / 2, cout 20: 64x32
    // yolo26n's 20 x 20 stage (layer 7: 128 -> 256, 3x3 / 2 from 40 x 40; K 1152): 32x32 on an H100's 132 SMs
    {3, 3, 2, 1, 128, 256, 40, 40, true, CARVE_CU_ACT_SILU, 8, 0, 132},
    {1, 1, 1, 0, 32, 24, 6, 5, false, CARVE_CU_ACT_SILU, 8, 1, 1},   // channels of whole chunks, x misaligned
    {3, 3, 1, 1, 12, 36, 7, 6, true, CARVE_CU_ACT_SILU, 8, 0, 1},    // cin 12: whole float chunks, not half ones
    // 16-byte stores of the epilogue too (cout and the output / residual strides whole vectors):
    {1, 1, 1, 0, 32, 48, 12, 10, true, CARVE_CU_ACT_SILU, 8, 0, 1, true},   // 1x1 + residual: 64x64
    {3, 3, 2, 1, 24, 24, 15, 13, false, CARVE_CU_ACT_NONE, 8, 0, 1, true},  // 3x3 / 2, cout 24: 64x32, a partial tile
    {3, 3, 1, 1, 40, 72, 13, 11, true, CARVE_CU_ACT_SILU, 3, 0, 8, true},   // chunks element by element: 32x64
    {3, 3, 1, 1, 64, 64, 10, 9, true, CARVE_CU_ACT_SILU, 8, 0, 132, true},  // K 576 over many SMs: 32x32, split
};

// The SM count the split tile's cases run with: many SMs for few tiles, so that the reduction is split wherever its
// steps allow (carve_cu_igemm_splits).
static const int kSplitSms = 1024;

// The split tile's blocks per output tile for a case (the runtime's rule, carve_cu_igemm_splits, over the steps of
// the kernel it runs: 128-byte steps with 16-byte chunks, else 256-byte ones).
template <typename E>
static unsigned case_splits(const TestCtx& t, const Case& cs, bool vec) {
  const size_t oh = (cs.h + 2 * cs.pad - cs.kh) / cs.stride + 1, ow = (cs.w + 2 * cs.pad - cs.kw) / cs.stride + 1;
  const size_t bk = (vec ? 128 : 256) / sizeof(typename E::T), k = (size_t)cs.kh * cs.kw * cs.cin;
  return carve_cu_igemm_splits(kSplitSms, oh * ow, cs.cout, (k + bk - 1) / bk, t.ctx.blas_workspace_bytes / 4,
                               CARVE_CU_SPLIT_COUNTERS);
}

// Runs one case with the context's current settings (its SM count set to the case's); checks it against the
// double reference (over the operands as TF32 rounds them when tf32_operands, else as stored) and returns
// the nodes its capture records. Prints the largest error against its tolerance (what a GPU's tensor cores
// or cuBLAS kernels actually do, for the record), then fails on the worst output out of tolerance.
// tile >= 0: the fused kernel with that tile (CARVE_CU_IGEMM_TILE_*), through a tactic table's entry.
template <typename E>
static size_t run_case(TestCtx& t, const Case& cs, uint64_t seed, bool tf32_operands, int tile = -1) {
  typedef typename E::T T;
  TestRng rng(seed);
  const bool fused = t.ctx.conv_fused != 0 || tile >= 0;
  uint8_t entry = (uint8_t)(CARVE_CU_PATH_FUSED_TILE + tile);
  carve_cu_tactics forced = {&entry, nullptr, 1, 0};
  if (tile >= 0) CHECK_OK(carve_cu_ctx_set_tactics(&t.ctx, &forced));
  const size_t in_stride = cs.cin + cs.xpad, out_stride = cs.cout + (cs.vout ? 8 : 2),
               res_stride = cs.cout + (cs.vout ? 16 : 1);
  const size_t oh = (cs.h + 2 * cs.pad - cs.kh) / cs.stride + 1, ow = (cs.w + 2 * cs.pad - cs.kw) / cs.stride + 1;
  const size_t kk = (size_t)cs.kh * cs.kw * cs.cin;
  auto random = [&](size_t n, float scale) {
    std::vector<T> v(n);
    for (auto& e : v) e = E::make(rng.normal() * scale);
    return v;
  };
  const std::vector<T> x = random(cs.xoff + (size_t)cs.h * cs.w * in_stride, 1.0f);
  const std::vector<T> wt = random(cs.cout * kk, 1.5f / std::sqrt((float)kk));
  const std::vector<T> b = random(cs.cout, 0.5f);
  const std::vector<T> r = random(oh * ow * res_stride, 1.0f);
  std::vector<T> y0(oh * ow * out_stride, E::canary());
  DevBuf<T> dx(x), dw(wt), db(b), dr(r), dy(y0);
  const carve_cu_conv c = {cs.kh, cs.kw, cs.stride, cs.pad, 1, cs.cin, cs.cout, cs.h, cs.w,
                           in_stride, out_stride, res_stride, cs.act, 1, tile >= 0 ? 1u : 0u};
  const char* path = carve_cu_conv_direct(&c)                  ? "direct"
                     : tile == CARVE_CU_IGEMM_TILE_32X32_K2    ? "fused (sliced K)"
                     : tile == CARVE_CU_IGEMM_TILE_32X32_K4    ? "fused (sliced K4)"
                     : tile == CARVE_CU_IGEMM_TILE_32X32_ASYNC ? "fused (async stages)"
                     : tile == CARVE_CU_IGEMM_TILE_64X32_ASYNC ? "fused (64x32 async)"
                     : tile == CARVE_CU_IGEMM_TILE_32X64_ASYNC ? "fused (32x64 async)"
                     : tile == CARVE_CU_IGEMM_TILE_32X32_SPLIT ? "fused (split K)"
                     : fused                                   ? "fused"
                                                               : "cublas";
  DevBuf<float> scratch(carve_cu_conv2d_scratch_floats(&c) + 1);
  const int sms = t.ctx.sm_count;
  t.ctx.sm_count = tile == CARVE_CU_IGEMM_TILE_32X32_SPLIT ? kSplitSms : cs.sms;
  const size_t nodes = captured_nodes(t, [&]() {
    return carve_cu_conv2d(&t.ctx, &c, dx.p + cs.xoff, dw.p, db.p, cs.residual ? dr.p : nullptr, dy.p, scratch.p);
  });
  CHECK_OK(carve_cu_conv2d(&t.ctx, &c, dx.p + cs.xoff, dw.p, db.p, cs.residual ? dr.p : nullptr, dy.p, scratch.p));
  t.ctx.sm_count = sms;
  if (tile >= 0) CHECK_OK(carve_cu_ctx_set_tactics(&t.ctx, nullptr));
  t.sync();
  const std::vector<T> y = dy.download();
  auto opv = [&](T v) { return tf32_operands ? E::op(v) : E::val(v); };
  const double acc = tf32_operands || sizeof(T) == 2 ? acc_tol(kk, E::kstep, fused) : 0x1p-21;
  double sum = 0.0, sum2 = 0.0, worst = -1.0, worst_got = 0.0, worst_want = 0.0, worst_tol = 0.0, max_rel = 0.0;
  size_t n = 0, worst_p = 0, worst_o = 0;
  for (size_t oy = 0; oy < oh; oy++) {
    for (size_t ox = 0; ox < ow; ox++) {
      const size_t p = oy * ow + ox;
      for (size_t o = 0; o < out_stride; o++) {
        const T got_t = y[p * out_stride + o];
        if (o >= cs.cout) {
          CHECK_MSG(E::is_canary(got_t), "%s conv: pixel %zu channel %zu (padding) overwritten", E::name, p, o);
          continue;
        }
        double s = 0.0, mag = 0.0;
        for (uint32_t ky = 0; ky < cs.kh; ky++) {
          for (uint32_t kx = 0; kx < cs.kw; kx++) {
            const long long iy = (long long)(oy * cs.stride + ky) - cs.pad;
            const long long ix = (long long)(ox * cs.stride + kx) - cs.pad;
            if (iy < 0 || ix < 0 || iy >= cs.h || ix >= cs.w) continue;
            for (size_t i = 0; i < cs.cin; i++) {
              const double v = opv(x[cs.xoff + ((size_t)iy * cs.w + (size_t)ix) * in_stride + i]) *
                               opv(wt[o * kk + ((size_t)ky * cs.kw + kx) * cs.cin + i]);
              s += v;
              mag += std::fabs(v);
            }
          }
        }
        double v = s + E::val(b[o]);
        if (cs.act == CARVE_CU_ACT_SILU) v = v / (1.0 + std::exp(-v));
        const double rr = cs.residual ? E::val(r[p * res_stride + o]) : 0.0;
        const double want = v + rr;
        // float accumulation (SiLU's slope <= 1.1), the epilogue's float steps, the store's rounding
        const double tol = 1.1 * acc * mag + kF32 * (std::fabs(v) + std::fabs(rr)) + E::store_tol(want) + 1e-7;
        const double got = E::val(got_t);
        const double err = std::fabs(got - want), ratio = near_float(got, want, tol) ? err / tol : 1e300;
        if (ratio > worst) {
          worst = ratio;
          worst_got = got;
          worst_want = want;
          worst_tol = tol;
          worst_p = p;
          worst_o = o;
        }
        if (mag > 0.0) max_rel = std::max(max_rel, err / mag);
        sum += got;
        sum2 += got * got;
        n++;
      }
    }
  }
  std::printf("%s %s conv %ux%u/%u %u->%u %ux%u: worst err / tol %.3g, max err / mag %.3g (2^%.1f)\n", E::name, path,
              cs.kh, cs.kw, cs.stride, cs.cin, cs.cout, cs.h, cs.w, worst, max_rel,
              max_rel > 0.0 ? std::log2(max_rel) : -999.0);
  CHECK_MSG(worst <= 1.0,
            "%s %s conv %ux%u/%u %u->%u %ux%u: pixel %zu channel %zu: %.9g vs %.9g (tol %.3g, err %.3g)", E::name, path,
            cs.kh, cs.kw, cs.stride, cs.cin, cs.cout, cs.h, cs.w, worst_p, worst_o, worst_got, worst_want, worst_tol,
            std::fabs(worst_got - worst_want));
  const double mean = sum / (double)n, sd = std::sqrt(std::max(0.0, sum2 / (double)n - mean * mean));
  CHECK_MSG(sd > 0.1, "%s conv %ux%u %u->%u: outputs flat (sd %.3g)", E::name, cs.kh, cs.kw, cs.cin, cs.cout, sd);
  return nodes;
}

// Whether the fused kernel reads the case's operands as 16-byte chunks (carve_cuda_igemm.h: cin and the
// input's pixel stride whole chunks of 4 floats / 8 halves, x and W 16-byte aligned; W is cudaMalloc'ed).
template <typename E>
static bool vec_loads(const Case& cs) {
  const size_t vw = 16 / sizeof(typename E::T);
  return cs.cin % vw == 0 && (cs.cin + cs.xpad) % vw == 0 && (cs.xoff * sizeof(typename E::T)) % 16 == 0;
}

// A case of over 2^24 multiply-adds (only yolo26n's 20 x 20 stage): CARVE_TEST_REDUCED runs it on its own tile only.
static bool large_case(const Case& cs) {
  const size_t oh = (cs.h + 2 * cs.pad - cs.kh) / cs.stride + 1, ow = (cs.w + 2 * cs.pad - cs.kw) / cs.stride + 1;
  return oh * ow * cs.cout * cs.kh * cs.kw * cs.cin > ((size_t)1 << 24);
}

template <typename E>
static void test_fused(TestCtx& t, bool tf32) {
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, tf32 ? CARVE_CU_MATH_TF32 : CARVE_CU_MATH_STRICT));
  uint64_t seed = 500;
  std::set<std::pair<int, bool>> reached;  // (tile, 16-byte loads) of the fused launches
  int vec_stores = 0;                       // cases whose outputs the epilogue stores in 16-byte vectors
  for (const Case& cs : kCases) {
    const size_t oh = (cs.h + 2 * cs.pad - cs.kh) / cs.stride + 1, ow = (cs.w + 2 * cs.pad - cs.kw) / cs.stride + 1;
    const carve_cu_conv c = {cs.kh, cs.kw, cs.stride, cs.pad, 1, cs.cin, cs.cout, cs.h, cs.w, cs.cin + cs.xpad,
                             cs.cout + 2, cs.cout + 1, cs.act, 1, 0};
    CHECK_MSG(!carve_cu_conv_direct(&c), "conv %ux%u %u->%u: the direct kernel's, not this test's", cs.kh, cs.kw,
              cs.cin, cs.cout);  // (so that `reached` counts fused launches)
    reached.insert({carve_cu_igemm_tile(cs.sms, oh * ow, cs.cout), vec_loads<E>(cs)});
    vec_stores += cs.vout && cs.cout % (16 / sizeof(typename E::T)) == 0;  // the epilogue's 16-byte stores
    CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_FUSED));
    CHECK(t.ctx.conv_fused == 1);
    const size_t fused = run_case<E>(t, cs, seed, tf32);
    CHECK_MSG(fused == 1, "%s conv %ux%u %u->%u: %zu launches fused, want 1", E::name, cs.kh, cs.kw, cs.cin, cs.cout,
              fused);
    CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
    // the tactics' own tiles on every case: sliced K (also where K leaves the second warp group nothing), the
    // asynchronous stages (the tile's register-pipelined kernel where the chunks are not 16-byte loads), the split
    // reduction (the asynchronous or 32 x 32 kernel split over the blocks of kSplitSms SMs, unsplit where K has one
    // step); each kernel a tile runs, the tile it is the kernel of
    for (int tile = CARVE_CU_IGEMM_TILE_32X32_K2; tile < CARVE_CU_IGEMM_TILES; tile++) {
      if (CARVE_TEST_REDUCED && large_case(cs)) break;
      const size_t n = run_case<E>(t, cs, seed, tf32, tile);
      CHECK_MSG(n == 1, "%s conv %ux%u %u->%u: %zu launches with tile %d, want 1", E::name, cs.kh, cs.kw, cs.cin,
                cs.cout, n, tile);
      const bool vec = vec_loads<E>(cs);
      int ran = tile;
      if (tile == CARVE_CU_IGEMM_TILE_32X32_SPLIT && case_splits<E>(t, cs, vec) <= 1) {
        ran = vec ? CARVE_CU_IGEMM_TILE_32X32_ASYNC : CARVE_CU_IGEMM_TILE_32X32;
      } else if (!vec && tile == CARVE_CU_IGEMM_TILE_32X32_ASYNC) {
        ran = CARVE_CU_IGEMM_TILE_32X32;
      } else if (!vec && tile == CARVE_CU_IGEMM_TILE_64X32_ASYNC) {
        ran = CARVE_CU_IGEMM_TILE_64X32;
      } else if (!vec && tile == CARVE_CU_IGEMM_TILE_32X64_ASYNC) {
        ran = CARVE_CU_IGEMM_TILE_32X64;
      }
      reached.insert({ran, vec});
    }
    CHECK(t.ctx.conv_fused == 0);
    // The cuBLAS path of the same case: a GEMM (+ im2col) + the epilogue. In fp16 its GEMM result is stored
    // as half before the bias: not within the fused path's one-rounding tolerance, so only its count here
    // (tests/cuda/test_f16.cu checks its values).
    if (sizeof(typename E::T) == 4) {
      const size_t gemm = run_case<E>(t, cs, seed, tf32);
      CHECK_MSG(gemm >= 2, "%s conv: cuBLAS path %zu launches", E::name, gemm);
    }
    seed++;
  }
  // every tile with and without 16-byte loads, but the three asynchronous ones, which have only the 16-byte kernel
  CHECK_MSG(reached.size() == 2 * CARVE_CU_IGEMM_TILES - 3, "%s: the cases reach %zu of the %d kernels", E::name,
            reached.size(), 2 * CARVE_CU_IGEMM_TILES - 3);
  // both epilogues: 16-byte stores (every tile, with and without 16-byte loads) and one output a thread
  CHECK(vec_stores >= 3 && vec_stores < (int)(sizeof(kCases) / sizeof(kCases[0])));
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
}

// The split reduction (CARVE_CU_IGEMM_TILE_32X32_SPLIT) on the cases it splits most (yolo26n's 20 x 20 stage, 16-byte
// chunks, or with CARVE_TEST_REDUCED the 64 -> 64 case at 10 x 9; K 360 without them): the results do not depend on
// which block of a tile arrives last (the emulation's blocks in reverse order give the same bits), every arrival
// counter is zero again after the launch, and a lane's context has counters of its own (main's next group).
template <typename E>
static void test_split(TestCtx& t, bool tf32) {
  typedef typename E::T T;
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, tf32 ? CARVE_CU_MATH_TF32 : CARVE_CU_MATH_STRICT));
  CHECK(t.ctx.split_counters != nullptr);
  for (const Case* cs : {CARVE_TEST_REDUCED ? &kCases[17] : &kCases[11], &kCases[6]}) {
    const bool vec = vec_loads<E>(*cs);
    const unsigned splits = case_splits<E>(t, *cs, vec);
    CHECK_MSG(splits >= 3, "%s conv %u->%u: split %u ways, want >= 3", E::name, cs->cin, cs->cout, splits);
    TestRng rng(1200);
    const size_t oh = (cs->h + 2 * cs->pad - cs->kh) / cs->stride + 1, ow = (cs->w + 2 * cs->pad - cs->kw) / cs->stride + 1;
    const size_t kk = (size_t)cs->kh * cs->kw * cs->cin, in_stride = cs->cin + cs->xpad;
    auto random = [&](size_t n, float scale) {
      std::vector<T> v(n);
      for (auto& e : v) e = E::make(rng.normal() * scale);
      return v;
    };
    DevBuf<T> dx(random(cs->xoff + (size_t)cs->h * cs->w * in_stride, 1.0f));
    DevBuf<T> dw(random(cs->cout * kk, 1.5f / std::sqrt((float)kk))), db(random(cs->cout, 0.5f));
    DevBuf<T> dr(random(oh * ow * cs->cout, 1.0f)), dy(oh * ow * cs->cout);
    const carve_cu_conv c = {cs->kh, cs->kw, cs->stride, cs->pad, 1, cs->cin, cs->cout, cs->h, cs->w, in_stride,
                             cs->cout, cs->cout, cs->act, 1, 1};
    uint8_t entry = CARVE_CU_PATH_FUSED_TILE + CARVE_CU_IGEMM_TILE_32X32_SPLIT;
    carve_cu_tactics forced = {&entry, nullptr, 1, 0};
    CHECK_OK(carve_cu_ctx_set_tactics(&t.ctx, &forced));
    const int sms = t.ctx.sm_count;
    t.ctx.sm_count = kSplitSms;
    auto run = [&]() {
      dy.upload(std::vector<T>(dy.n, E::canary()));
      CHECK_OK(carve_cu_conv2d(&t.ctx, &c, dx.p + cs->xoff, dw.p, db.p, cs->residual ? dr.p : nullptr, dy.p, nullptr));
      t.sync();
      CHECK_CUDA(cudaGetLastError());
      return dy.download();
    };
    const std::vector<T> first = run();
#ifdef CARVE_CUDA_EMULATION
    setenv("CARVE_EMU_BLOCK_ORDER", "reverse", 1);
    const std::vector<T> reversed = run();
    unsetenv("CARVE_EMU_BLOCK_ORDER");
    CHECK_MSG(std::memcmp(first.data(), reversed.data(), first.size() * sizeof(T)) == 0,
              "%s conv %u->%u split %u ways: blocks in reverse order give other results", E::name, cs->cin, cs->cout,
              splits);
#endif
    const std::vector<T> again = run();
    CHECK_MSG(std::memcmp(first.data(), again.data(), first.size() * sizeof(T)) == 0,
              "%s conv %u->%u split %u ways: a second run gives other results", E::name, cs->cin, cs->cout, splits);
    for (const T& v : first) CHECK_MSG(!E::is_canary(v), "%s conv %u->%u: an output not written", E::name, cs->cin, cs->cout);
    std::vector<unsigned> counters(CARVE_CU_SPLIT_COUNTERS, 1u);
    CHECK_CUDA(cudaMemcpy(counters.data(), t.ctx.split_counters, CARVE_CU_SPLIT_COUNTERS * sizeof(unsigned),
                          cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < counters.size(); i++) {
      CHECK_MSG(counters[i] == 0, "%s: split counter %zu is %u after the launch", E::name, i, counters[i]);
    }
    t.ctx.sm_count = sms;
    CHECK_OK(carve_cu_ctx_set_tactics(&t.ctx, nullptr));
    std::printf("%s conv %ux%u %u->%u %ux%u split %u ways: order-independent, counters zero again\n", E::name, cs->kh,
                cs->kw, cs->cin, cs->cout, cs->h, cs->w, splits);
  }
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_STRICT));
}

// The preferred shapes without the fused request (carve_cu_igemm_preferred): a stride-2 3x3 conv with 16 outputs
// over 227 x 227 = 51529 >= CARVE_CU_IGEMM_WIDE_PIXELS output pixels takes the fused kernel (one launch, within
// its tolerance) in TF32 and fp16; strict float32 keeps the cuBLAS path.
static const Case kWide = {3, 3, 2, 1, 8, 16, 454, 454, false, CARVE_CU_ACT_SILU, 8, 0, 132};

template <typename E>
static void test_preferred(TestCtx& t, bool tf32) {
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, tf32 ? CARVE_CU_MATH_TF32 : CARVE_CU_MATH_STRICT));
  const size_t nodes = run_case<E>(t, kWide, 950, tf32);
  CHECK_MSG(nodes == 1, "%s: the wide stride-2 conv took %zu launches without the fused request, want 1", E::name,
            nodes);
  if (sizeof(typename E::T) == 4) {
    CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_STRICT));
    const size_t strict = run_case<E>(t, kWide, 951, false);
    CHECK_MSG(strict >= 2, "strict float32 took the fused kernel for the wide conv (%zu launches)", strict);
  }
}

// Strict float32 with the fused request: the cuBLAS path (2-3 launches), float32 results.
static void test_strict_keeps_gemm(TestCtx& t) {
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_STRICT));
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_FUSED));
  const size_t nodes = run_case<F32>(t, kCases[3], 900, false);
  CHECK_MSG(nodes >= 2, "strict float32 took the fused kernel (%zu launches)", nodes);
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
}

// The stem's shape (3 -> 16, 3x3 / 2) with the fused request, in TF32 and fp16: the direct kernel of the
// few-input-channel convs (carve_cuda_direct.h), one launch; in TF32 its float results are float32's: held to
// the strict bound against the unrounded reference (the fused kernel's TF32 operands would be 2^-11 off).
static void test_stem_direct(TestCtx& t) {
  const Case stem = {3, 3, 2, 1, 3, 16, 17, 15, true, CARVE_CU_ACT_SILU, 3, 0, 132};
  const carve_cu_conv c = {3, 3, 2, 1, 1, 3, 16, 17, 15, 6, 18, 17, CARVE_CU_ACT_SILU, 1, 0};
  CHECK(carve_cu_conv_direct(&c));
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_FUSED));
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_TF32));
  CHECK(t.ctx.conv_fused == 1 && t.ctx.conv_tf32 == 1);
  size_t nodes = run_case<F32>(t, stem, 950, false);
  CHECK_MSG(nodes == 1, "tf32 stem: %zu launches, want 1", nodes);
  nodes = run_case<F16>(t, stem, 951, false);
  CHECK_MSG(nodes == 1, "fp16 stem: %zu launches, want 1", nodes);
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_STRICT));
}

// Tactics (carve_cu_ctx_set_tactics) on kCases[6] (3x3 / 1, 40 -> 70: K 360, every tile a candidate; not a
// preferred shape): a tuning call with an unset entry times the cuBLAS path and the fused kernel's tiles, stores
// the fastest and the times, and returns that path's results (bit for bit what the entry set by hand then gives);
// entries set by hand choose the path (1 launch fused, whatever the tile, 3 cuBLAS); an unset entry outside
// tuning, an entry out of range, a call in a capture (nothing stored, the capture intact), slot 0 and a slot past
// the table take the default rule; conv_fused wins over the table; strict float32 (no fused kernel) is never timed.
template <typename E>
static void test_tactics(TestCtx& t, bool tf32) {
  typedef typename E::T T;
  const Case& cs = kCases[6];
  TestRng rng(990);
  auto random = [&](size_t n, float scale) {
    std::vector<T> v(n);
    for (auto& e : v) e = E::make(rng.normal() * scale);
    return v;
  };
  const size_t oh = (cs.h + 2 * cs.pad - cs.kh) / cs.stride + 1, ow = (cs.w + 2 * cs.pad - cs.kw) / cs.stride + 1;
  const size_t kk = (size_t)cs.kh * cs.kw * cs.cin;
  DevBuf<T> dx(random((size_t)cs.h * cs.w * cs.cin, 1.0f)), dw(random(cs.cout * kk, 1.5f / std::sqrt((float)kk)));
  DevBuf<T> db(random(cs.cout, 0.5f)), dr(random(oh * ow * cs.cout, 1.0f)), dy(oh * ow * cs.cout);
  carve_cu_conv c = {cs.kh, cs.kw, cs.stride, cs.pad, 1, cs.cin, cs.cout, cs.h, cs.w, cs.cin, cs.cout, cs.cout,
                     cs.act, 1, 2};
  DevBuf<float> scratch(carve_cu_conv2d_scratch_floats(&c) + 1);
  uint8_t path[3] = {CARVE_CU_PATH_UNSET, CARVE_CU_PATH_UNSET, CARVE_CU_PATH_UNSET};
  float us[6] = {0, 0, 0, 0, 0, 0};
  carve_cu_tactics tactics = {path, us, 3, 1};
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, tf32 ? CARVE_CU_MATH_TF32 : CARVE_CU_MATH_STRICT));
  CHECK_OK(carve_cu_ctx_set_tactics(&t.ctx, &tactics));
  auto call = [&]() { return carve_cu_conv2d(&t.ctx, &c, dx.p, dw.p, db.p, dr.p, dy.p, scratch.p); };
  auto nodes = [&]() { return captured_nodes(t, call); };
  // In a capture: the default rule (the cuBLAS path here), nothing timed, the capture whole.
  CHECK_MSG(nodes() == 3 && path[1] == CARVE_CU_PATH_UNSET, "%s: a capture with tuning on: %d", E::name, path[1]);
  // Eager: timed, stored, and the call's results are the chosen path's.
  CHECK_OK(call());
  t.sync();
  CHECK_CUDA(cudaGetLastError());
  const std::vector<T> tuned = dy.download();
  const bool fused = path[1] >= CARVE_CU_PATH_FUSED_TILE && path[1] < CARVE_CU_PATH_FUSED_TILE + CARVE_CU_IGEMM_TILES;
  CHECK_MSG(path[1] == CARVE_CU_PATH_GEMM || fused, "%s: entry %d after tuning", E::name, path[1]);
  CHECK_MSG(us[2] > 0.0f && us[3] > 0.0f && fused == (us[3] < us[2]) &&
                path[0] == CARVE_CU_PATH_UNSET && path[2] == CARVE_CU_PATH_UNSET && us[0] == 0.0f && us[5] == 0.0f,
            "%s: tuned entry %d, times %g / %g us, neighbours %d %d", E::name, path[1], us[2], us[3], path[0], path[2]);
  std::printf("%s tactic of %ux%u/%u %u->%u %ux%u: cuBLAS path %.1f us, fused (best tile) %.1f us: %s\n", E::name,
              cs.kh, cs.kw, cs.stride, cs.cin, cs.cout, cs.h, cs.w, us[2], us[3], fused ? "fused" : "cuBLAS");
  tactics.tune = 0;
  CHECK_MSG(nodes() == (fused ? 1u : 3u), "%s: the stored tactic's launches", E::name);
  const std::vector<T> canary(dy.n, E::canary());
  dy.upload(canary);
  CHECK_OK(call());
  t.sync();
  const std::vector<T> again = dy.download();
  CHECK_MSG(std::memcmp(tuned.data(), again.data(), tuned.size() * sizeof(T)) == 0,
            "%s: the tuning call's results differ from its stored path's", E::name);
  // By hand; conv_fused over the table; without a slot, past the table, unset, out of range: the default rule.
  for (int p = CARVE_CU_PATH_FUSED; p < CARVE_CU_PATH_FUSED_TILE + CARVE_CU_IGEMM_TILES; p++) {
    path[1] = (uint8_t)p;
    CHECK_MSG(nodes() == 1, "%s: entry %d", E::name, p);
  }
  path[1] = CARVE_CU_PATH_FUSED_TILE + CARVE_CU_IGEMM_TILES;
  CHECK_MSG(nodes() == 3, "%s: an entry out of range", E::name);
  path[1] = CARVE_CU_PATH_GEMM;
  CHECK_MSG(nodes() == 3, "%s: entry GEMM", E::name);
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_FUSED));
  CHECK_MSG(nodes() == 1, "%s: conv_fused with entry GEMM", E::name);
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
  path[1] = CARVE_CU_PATH_FUSED;
  tactics.tune = 1;
  for (uint32_t slot : {0u, 4u}) {
    c.slot = slot;
    CHECK_OK(call());
    t.sync();
    CHECK_MSG(nodes() == 3, "%s: slot %u took the table", E::name, slot);
  }
  CHECK_MSG(path[0] == CARVE_CU_PATH_UNSET && path[2] == CARVE_CU_PATH_UNSET, "%s: a slot outside set", E::name);
  c.slot = 3;
  tactics.tune = 0;
  CHECK_MSG(nodes() == 3 && path[2] == CARVE_CU_PATH_UNSET, "%s: unset entry without tuning", E::name);
  if (sizeof(T) == 4) {  // strict float32: only the cuBLAS path exists, nothing to time
    tactics.tune = 1;
    CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_STRICT));
    CHECK_OK(call());
    t.sync();
    CHECK_MSG(path[2] == CARVE_CU_PATH_UNSET && us[4] == 0.0f, "strict float32 was timed");
  }
  CHECK_OK(carve_cu_ctx_set_tactics(&t.ctx, nullptr));
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_STRICT));
}

// The depthwise + 1x1 pair (carve_cu_conv2d_dwpw): fused with each 32 x 32 tile (an entry on the depthwise
// descriptor's slot), bit for bit what the two launches give with the 1x1 on the same tile (its own entry): the
// fused kernel's depthwise values are the depthwise kernel's; the map in `mid` untouched when fused and written
// when not; one launch fused, two not. A tuning call times the 1x1's paths, then the pair's, and its results are
// those of the entries it stored; conv_fused fuses; strict float32 and channels that are not whole chunks run the
// two launches whatever the entry; argument errors.
struct DwPwCase {
  uint32_t h, w, c, cout, k, stride, batch;
  bool residual;
};
static const DwPwCase kDwPw[] = {
    {13, 11, 16, 24, 3, 1, 1, false},  // the class branch's DWConv 3x3 / 1 -> 1x1 Conv (2 chunks of channels)
    {15, 14, 16, 40, 3, 2, 2, true},   // stride 2, a batch of 2, a residual on the 1x1
    {9, 7, 144, 80, 3, 1, 1, false},   // K 144: 2 steps in fp16, 3 in float32 (a partial last one)
    {8, 8, 64, 33, 5, 1, 1, false},    // 5x5 window, cout not a multiple of 16
};

// The tuning part of check_dwpw: an eager call with both entries unset times them; then the stored entries' results.
template <typename E, typename Call, typename Run>
static void check_dwpw_tuning(TestCtx& t, carve_cu_tactics& tactics, uint8_t (&path)[2], const float (&us)[4],
                              Call&& call, Run&& run, DevBuf<typename E::T>& dy) {
  typedef typename E::T T;
  path[0] = path[1] = CARVE_CU_PATH_UNSET;
  tactics.tune = 1;
  dy.upload(std::vector<T>(dy.n, E::canary()));
  CHECK_OK(call());  // eager (a capture times nothing): its results are the paths' it stores
  t.sync();
  const std::vector<T> tuned = dy.download();
  tactics.tune = 0;
  size_t launches = 0;
  const bool pair_fused = path[0] == CARVE_CU_PATH_FUSED_TILE + CARVE_CU_IGEMM_TILE_32X32 ||
                          path[0] == CARVE_CU_PATH_FUSED_TILE + CARVE_CU_IGEMM_TILE_32X32_K2 ||
                          path[0] == CARVE_CU_PATH_FUSED_TILE + CARVE_CU_IGEMM_TILE_32X32_K4;
  CHECK_MSG((pair_fused || path[0] == CARVE_CU_PATH_GEMM) && path[1] != CARVE_CU_PATH_UNSET && us[0] > 0.0f &&
                us[1] > 0.0f && pair_fused == (us[1] < us[0]),
            "%s dwpw: tuned entries %d %d, times %g / %g us", E::name, path[0], path[1], us[0], us[1]);
  const auto again = run(&launches);
  const bool pw_gemm = path[1] == CARVE_CU_PATH_GEMM;  // the 1x1's cuBLAS path: a GEMM and the epilogue
  CHECK_MSG(launches_as_planned(launches, pair_fused ? 1u : pw_gemm ? 3u : 2u, pair_fused ? 0u : pw_gemm) &&
                again.second == !pair_fused &&
                std::memcmp(again.first.data(), tuned.data(), tuned.size() * sizeof(T)) == 0,
            "%s dwpw: the tuned call differs from its stored entries (%d %d: %zu launches, mid %d)", E::name,
            path[0], path[1], launches, (int)again.second);
}

template <typename E>
static void check_dwpw(TestCtx& t, const DwPwCase& pc, bool tf32, bool tune) {
  typedef typename E::T T;
  TestRng rng(4242 + pc.c + pc.k);
  auto random = [&](size_t n, float scale) {
    std::vector<T> v(n);
    for (auto& e : v) e = E::make(rng.normal() * scale);
    return v;
  };
  const uint32_t pad = pc.k / 2;
  const uint32_t oh = (pc.h + 2 * pad - pc.k) / pc.stride + 1, ow = (pc.w + 2 * pad - pc.k) / pc.stride + 1;
  const size_t opix = (size_t)pc.batch * oh * ow;
  DevBuf<T> dx(random((size_t)pc.batch * pc.h * pc.w * pc.c, 1.0f)), dww(random((size_t)pc.c * pc.k * pc.k, 0.4f));
  DevBuf<T> dwb(random(pc.c, 0.3f)), pww(random((size_t)pc.cout * pc.c, 1.5f / std::sqrt((float)pc.c)));
  DevBuf<T> pwb(random(pc.cout, 0.3f)), dr(random(opix * pc.cout, 1.0f)), mid(opix * pc.c), dy(opix * pc.cout);
  const carve_cu_conv dw = {pc.k, pc.k, pc.stride, pad, pc.c, pc.c, pc.c, pc.h, pc.w, pc.c, pc.c, 0,
                            CARVE_CU_ACT_SILU, pc.batch, 1};
  const carve_cu_conv pw = {1, 1, 1, 0, 1, pc.c, pc.cout, oh, ow, pc.c, pc.cout, pc.cout, CARVE_CU_ACT_SILU,
                            pc.batch, 2};
  const T* residual = pc.residual ? dr.p : nullptr;
  uint8_t path[2] = {CARVE_CU_PATH_UNSET, CARVE_CU_PATH_UNSET};
  float us[4] = {0, 0, 0, 0};
  carve_cu_tactics tactics = {path, us, 2, 0};
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, tf32 ? CARVE_CU_MATH_TF32 : CARVE_CU_MATH_STRICT));
  CHECK_OK(carve_cu_ctx_set_tactics(&t.ctx, &tactics));
  auto call = [&]() {
    return carve_cu_conv2d_dwpw(&t.ctx, &dw, &pw, dx.p, dww.p, dwb.p, mid.p, pww.p, pwb.p, residual, dy.p, nullptr);
  };
  // (launches, y, whether mid was written) of one call from canaries
  auto run = [&](size_t* launches) {
    mid.upload(std::vector<T>(mid.n, E::canary()));
    dy.upload(std::vector<T>(dy.n, E::canary()));
    *launches = captured_run(t, call);
    const std::vector<T> m = mid.download();
    size_t written = 0;
    for (const T& v : m) written += !E::is_canary(v);
    CHECK_MSG(written == 0 || written == m.size(), "%s dwpw %ux%u c %u: mid partly written", E::name, pc.h, pc.w, pc.c);
    return std::make_pair(dy.download(), written > 0);
  };
  std::set<uint16_t> spread;
  for (int tile : {CARVE_CU_IGEMM_TILE_32X32, CARVE_CU_IGEMM_TILE_32X32_K2, CARVE_CU_IGEMM_TILE_32X32_K4}) {
    path[0] = path[1] = (uint8_t)(CARVE_CU_PATH_FUSED_TILE + tile);
    size_t fused_launches = 0, two_launches = 0;
    const auto fused = run(&fused_launches);
    path[0] = CARVE_CU_PATH_GEMM;
    const auto two = run(&two_launches);
    CHECK_MSG(fused_launches == 1 && !fused.second && two_launches == 2 && two.second,
              "%s dwpw %ux%u c %u tile %d: %zu / %zu launches, mid written %d / %d", E::name, pc.h, pc.w, pc.c, tile,
              fused_launches, two_launches, (int)fused.second, (int)two.second);
    for (size_t i = 0; i < fused.first.size(); i++) {
      CHECK_MSG(std::memcmp(&fused.first[i], &two.first[i], sizeof(T)) == 0 && !E::is_canary(fused.first[i]),
                "%s dwpw %ux%u c %u tile %d: output %zu: %g fused, %g in two launches", E::name, pc.h, pc.w, pc.c,
                tile, i, E::val(fused.first[i]), E::val(two.first[i]));
      uint16_t bits;
      std::memcpy(&bits, (const char*)&fused.first[i] + sizeof(T) - 2, 2);
      spread.insert(bits);
    }
  }
  CHECK_MSG(spread.size() > opix * pc.cout / 4, "%s dwpw: outputs flat (%zu distinct)", E::name, spread.size());
  // Tuning (the first shape: each timing replays its launches many times, slow under the emulation): the 1x1's
  // entry first, then the pair's; the call's results are its stored entries' (bit for bit).
  if (tune) check_dwpw_tuning<E>(t, tactics, path, us, call, run, dy);
  // conv_fused: one launch whatever the entry; strict float32: two launches (and the 1x1's cuBLAS path: 3).
  path[0] = CARVE_CU_PATH_GEMM;
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_FUSED));
  CHECK_MSG(captured_nodes(t, call) == 1, "%s dwpw: conv_fused", E::name);
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
  if (sizeof(T) == 4) {
    path[0] = path[1] = CARVE_CU_PATH_FUSED_TILE + CARVE_CU_IGEMM_TILE_32X32;
    CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_STRICT));
    // the depthwise launch, the 1x1's GEMM (one host GEMM under the emulation; cuBLAS may split it on a GPU: the
    // H200, 2026-11-28) and its epilogue: no fused launch
    const size_t strict_nodes = captured_nodes(t, call);
    CHECK_MSG(strict_nodes >= 3, "%s dwpw: strict float32 fused: %zu graph nodes", E::name, strict_nodes);
  }
  CHECK_OK(carve_cu_ctx_set_tactics(&t.ctx, nullptr));
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_STRICT));
}

template <typename E>
static void test_dwpw(TestCtx& t, bool tf32) {
  typedef typename E::T T;
  for (const DwPwCase& pc : kDwPw) check_dwpw<E>(t, pc, tf32, &pc == &kDwPw[0]);
  // Channels that are not whole 16-byte chunks (6): the two launches even with a fused entry.
  DevBuf<T> b(std::vector<T>(6 * 6 * 8 * 4, E::make(0.5f)));
  const carve_cu_conv dw = {3, 3, 1, 1, 6, 6, 6, 6, 6, 6, 6, 0, CARVE_CU_ACT_SILU, 1, 1};
  carve_cu_conv pw = {1, 1, 1, 0, 1, 6, 8, 6, 6, 6, 8, 8, CARVE_CU_ACT_SILU, 1, 2};
  uint8_t path[2] = {CARVE_CU_PATH_FUSED_TILE + CARVE_CU_IGEMM_TILE_32X32,
                     CARVE_CU_PATH_FUSED_TILE + CARVE_CU_IGEMM_TILE_32X32};
  carve_cu_tactics tactics = {path, nullptr, 2, 0};
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, tf32 ? CARVE_CU_MATH_TF32 : CARVE_CU_MATH_STRICT));
  CHECK_OK(carve_cu_ctx_set_tactics(&t.ctx, &tactics));
  T* const p = b.p;
  auto call = [&]() {
    return carve_cu_conv2d_dwpw(&t.ctx, &dw, &pw, p, p, p, p + 256, p, p, nullptr, p + 512, nullptr);
  };
  CHECK_MSG(captured_nodes(t, call) == 2, "%s dwpw: 6 channels", E::name);
  // Errors: the 1x1's input channels, its stride, a missing map.
  pw.cin = 5;
  CHECK(call() == CARVE_ERR_INVALID_ARGUMENT);
  pw.cin = 6;
  pw.stride = 2;
  CHECK(call() == CARVE_ERR_INVALID_ARGUMENT);
  pw.stride = 1;
  CHECK(carve_cu_conv2d_dwpw(&t.ctx, &dw, &pw, p, p, p, nullptr, p, p, nullptr, p + 512, nullptr) ==
        CARVE_ERR_INVALID_ARGUMENT);
  CHECK_OK(carve_cu_ctx_set_tactics(&t.ctx, nullptr));
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_STRICT));
  std::printf("%s depthwise + 1x1 pairs: %zu shapes, fused = two launches bit for bit on each 32 x 32 tile\n", E::name,
              sizeof(kDwPw) / sizeof(kDwPw[0]));
}

static void test_args(TestCtx& t) {
  carve_cu_tactics no_path = {nullptr, nullptr, 1, 0}, empty = {nullptr, nullptr, 0, 1};
  CHECK(carve_cu_ctx_set_tactics(nullptr, &empty) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_ctx_set_tactics(&t.ctx, &no_path) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK_OK(carve_cu_ctx_set_tactics(&t.ctx, &empty));
  CHECK_OK(carve_cu_ctx_set_tactics(&t.ctx, nullptr));
  CHECK(t.ctx.tactics == nullptr);
  CHECK(carve_cu_ctx_set_conv_impl(nullptr, CARVE_CU_CONV_FUSED) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_ctx_set_conv_impl(&t.ctx, (carve_cu_conv_impl)2) == CARVE_ERR_INVALID_ARGUMENT);
  carve_cu_ctx fresh;
  CHECK_OK(carve_cu_ctx_init(&fresh, t.stream));
  CHECK(fresh.conv_fused == 0);  // the default: the cuBLAS path
  CHECK(fresh.sm_count >= 1);    // read at init (the emulated device has 1 SM)
  carve_cu_ctx_destroy(&fresh);
}

// The tile policy (carve_cuda_igemm_tile.h) on yolo26n 640's shapes with an H100's 132 SMs, and its edges.
static void test_tile() {
  // carve_cu_igemm_preferred(kh, stride, cout, pixels): the measured wins and their neighbours
  CHECK(carve_cu_igemm_preferred(3, 2, 32, 160 * 160 * 32));       // layer 1 at batch 32
  CHECK(carve_cu_igemm_preferred(3, 2, 64, 40 * 40 * 32));         // layer 17 at batch 32: the threshold
  CHECK(!carve_cu_igemm_preferred(3, 2, 64, 40 * 40 * 32 - 1));
  CHECK(!carve_cu_igemm_preferred(3, 2, 128, 80 * 80 * 32));       // layer 5 (cout 128): no measured win
  CHECK(!carve_cu_igemm_preferred(3, 1, 32, 160 * 160 * 32));      // stride 1
  CHECK(!carve_cu_igemm_preferred(1, 2, 32, 160 * 160 * 32));      // 1x1: no im2col
  CHECK(!carve_cu_igemm_preferred(3, 2, 32, 160 * 160));           // batch 1: not measured in a graph
  CHECK(carve_cu_igemm_tile(132, 400, 256) == CARVE_CU_IGEMM_TILE_32X32);    // 20 x 20, 256 ch: 104 blocks
  CHECK(carve_cu_igemm_tile(132, 1600, 128) == CARVE_CU_IGEMM_TILE_32X32);   // 40 x 40, 128 ch: 200 blocks
  CHECK(carve_cu_igemm_tile(132, 6400, 64) == CARVE_CU_IGEMM_TILE_32X64);    // 80 x 80, 64 ch: 200 blocks
  CHECK(carve_cu_igemm_tile(132, 25600, 32) == CARVE_CU_IGEMM_TILE_64X32);   // 160 x 160, 32 ch: 400 blocks
  CHECK(carve_cu_igemm_tile(132, 25600, 64) == CARVE_CU_IGEMM_TILE_64X64);
  CHECK(carve_cu_igemm_tile(132, 102400, 16) == CARVE_CU_IGEMM_TILE_64X32);  // the stem
  CHECK(carve_cu_igemm_tile(0, 1, 1) == CARVE_CU_IGEMM_TILE_64X32);          // below 1 SM: as 1
  CHECK(carve_cu_igemm_tile(1, 1, 33) == CARVE_CU_IGEMM_TILE_64X64);
  CHECK(carve_cu_igemm_tile(1 << 30, 1, 33) == CARVE_CU_IGEMM_TILE_32X32);
  // carve_cu_igemm_splits(sms, pixels, cout, steps, workspace floats, counters)
  const size_t ws = ((size_t)32 << 20) / 4;
  CHECK(carve_cu_igemm_splits(132, 400, 64, 18, ws, 1024) == 8);    // 20 x 20, 64 ch: 26 tiles, 11 wanted, at most 8
  CHECK(carve_cu_igemm_splits(132, 400, 256, 36, ws, 1024) == 3);   // 104 tiles: 3 for 2 blocks per SM
  CHECK(carve_cu_igemm_splits(132, 1600, 128, 18, ws, 1024) == 2);  // 200 tiles: 2 (264 / 200 rounded up)
  CHECK(carve_cu_igemm_splits(132, 6400, 64, 9, ws, 1024) == 1);    // 400 tiles: every SM busy
  CHECK(carve_cu_igemm_splits(132, 400, 64, 3, ws, 1024) == 3);     // at most the steps
  CHECK(carve_cu_igemm_splits(132, 400, 64, 18, 26 * 1024 * 2, 1024) == 2);  // the workspace holds 2 partial sets
  CHECK(carve_cu_igemm_splits(132, 400, 64, 18, ws, 25) == 1);      // more tiles than counters
  CHECK(carve_cu_igemm_splits(0, 1, 1, 0, ws, 1024) == 1);          // no steps, no SMs
}

int main() {
  int device = 0, major = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TestCtx t;
  test_args(t);
  test_tile();
  if (major >= 8) {
    test_fused<F32>(t, true);
  } else {
    std::printf("sm_%d0: no TF32 tensor cores, the float32 fused cases skipped\n", major);
  }
  test_strict_keeps_gemm(t);
  test_fused<F16>(t, false);
  if (major >= 8) test_split<F32>(t, true);
  test_split<F16>(t, false);
  if (major >= 8) test_preferred<F32>(t, true);
  test_preferred<F16>(t, false);
  test_stem_direct(t);
  if (major >= 8) test_tactics<F32>(t, true);
  test_tactics<F16>(t, false);
  if (major >= 8) test_dwpw<F32>(t, true);
  test_dwpw<F16>(t, false);
  std::printf("ok: fused implicit-GEMM convolution (TF32 and fp16), %zu shapes each\n",
              sizeof(kCases) / sizeof(kCases[0]));
  return 0;
}
