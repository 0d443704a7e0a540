// tests/cuda/test_igemm.cu: the fused implicit-GEMM convolution (runtime/carve_cuda_igemm.h,
// carve_cu_ctx_set_conv_impl(CARVE_CU_CONV_FUSED)), both operand types:
//   * TF32 (float32 storage, conv_tf32 = 1): against a double-precision loop over the inputs and
//     weights rounded as cvt.rna.tf32 does (10-bit mantissa, to nearest, ties away), within the float32
//     accumulation and the epilogue's float roundings: tight enough that operands truncated instead of
//     rounded, or not converted at all, fail;
//   * fp16 (__half storage): against a double loop over the same halves, within the float accumulation
//     and the one rounding of the store;
// on shapes that spread: 1x1 stride 1 and 2, 3x3 stride 1 and 2, the stem's 3-channel 3x3 / 2, a 3x1
// kernel, odd sizes, K below one step and over many, cout not a multiple of 16 and over one 64-wide
// tile, pixels over several tiles; residual and none, SiLU and none; strided input, output and residual
// views (what lies between the output's channels never written). Each output varies (not flat).
//   * one launch per convolution (a stream capture's node count), against 2-3 for the cuBLAS path;
//   * strict float32 (conv_tf32 = 0) with the fused request keeps the cuBLAS path and its float32 results;
//   * argument errors of carve_cu_ctx_set_conv_impl.
// Runs under the emulation (ctest cuda_igemm) and on a GPU (tests/cuda/gpu_kernel_tests.sh, sm_80+).

#include "carve_cuda_f16.h"
#include "cuda_test.h"

// The float accumulation, relative to the sum of |products|: the emulation sums in float32 in k order;
// tensor cores align partial sums their own way (looser, on a GPU).
#ifdef CARVE_CUDA_EMULATION
static const double kAcc = 0x1p-21;
#else
static const double kAcc = 0x1p-16;
#endif
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
  static T make(float v) { return __float2half(v); }
  static double val(T v) { return __half2float(v); }
  static double op(T v) { return __half2float(v); }
  static T canary() { return __ushort_as_half(0x7bffu); }
  static bool is_canary(T v) { return __half_as_ushort(v) == 0x7bffu; }
  static double store_tol(double want) { return kU16 * std::fabs(want) + 0x1p-24; }
};

struct Case {
  uint32_t kh, kw, stride, pad, cin, cout, h, w;
  bool residual;
  carve_cu_act act;
};

static const Case kCases[] = {
    {1, 1, 1, 0, 19, 13, 7, 9, false, CARVE_CU_ACT_SILU},   // 1x1, K below one step, cout < 16
    {1, 1, 1, 0, 8, 24, 5, 3, true, CARVE_CU_ACT_NONE},     // 1x1 + residual, cout 24
    {1, 1, 2, 0, 16, 33, 9, 9, false, CARVE_CU_ACT_SILU},   // 1x1 stride 2
    {3, 3, 1, 1, 11, 10, 9, 8, true, CARVE_CU_ACT_SILU},    // 3x3 / 1, padding, residual
    {3, 3, 2, 1, 6, 7, 11, 10, false, CARVE_CU_ACT_SILU},   // 3x3 / 2, odd sizes
    {3, 3, 2, 1, 3, 16, 17, 15, false, CARVE_CU_ACT_SILU},  // the stem: 3 channels, 3x3 / 2
    {3, 3, 1, 1, 40, 70, 13, 11, true, CARVE_CU_ACT_NONE},  // K 360 (12 steps), 2 x 3 tiles
    {3, 1, 1, 1, 5, 9, 6, 4, false, CARVE_CU_ACT_NONE},     // 3x1 kernel (pad on all four sides)
};

// Nodes a stream capture of `launch` records: the launches (carve's and cuBLAS's) of one call.
template <typename F>
static size_t captured_nodes(TestCtx& t, F&& launch) {
  CHECK_CUDA(cudaStreamBeginCapture(t.stream, cudaStreamCaptureModeThreadLocal));
  const carve_status st = launch();
  cudaGraph_t graph = nullptr;
  CHECK_CUDA(cudaStreamEndCapture(t.stream, &graph));
  CHECK_OK(st);
  size_t nodes = 0;
  CHECK_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return nodes;
}

// Runs one case with the context's current settings; checks it against the double reference (over the
// operands as TF32 rounds them when tf32_operands, else as stored) and returns the nodes its capture records.
template <typename E>
static size_t run_case(TestCtx& t, const Case& cs, uint64_t seed, bool tf32_operands) {
  typedef typename E::T T;
  TestRng rng(seed);
  const size_t in_stride = cs.cin + 3, out_stride = cs.cout + 2, res_stride = cs.cout + 1;
  const size_t oh = (cs.h + 2 * cs.pad - cs.kh) / cs.stride + 1, ow = (cs.w + 2 * cs.pad - cs.kw) / cs.stride + 1;
  const size_t kk = (size_t)cs.kh * cs.kw * cs.cin;
  auto random = [&](size_t n, float scale) {
    std::vector<T> v(n);
    for (auto& e : v) e = E::make(rng.normal() * scale);
    return v;
  };
  const std::vector<T> x = random((size_t)cs.h * cs.w * in_stride, 1.0f);
  const std::vector<T> wt = random(cs.cout * kk, 1.5f / std::sqrt((float)kk));
  const std::vector<T> b = random(cs.cout, 0.5f);
  const std::vector<T> r = random(oh * ow * res_stride, 1.0f);
  std::vector<T> y0(oh * ow * out_stride, E::canary());
  DevBuf<T> dx(x), dw(wt), db(b), dr(r), dy(y0);
  const carve_cu_conv c = {cs.kh, cs.kw, cs.stride, cs.pad, 1, cs.cin, cs.cout, cs.h, cs.w,
                           in_stride, out_stride, res_stride, cs.act, 1};
  DevBuf<float> scratch(carve_cu_conv2d_scratch_floats(&c) + 1);
  const size_t nodes = captured_nodes(t, [&]() {
    return carve_cu_conv2d(&t.ctx, &c, dx.p, dw.p, db.p, cs.residual ? dr.p : nullptr, dy.p, scratch.p);
  });
  CHECK_OK(carve_cu_conv2d(&t.ctx, &c, dx.p, dw.p, db.p, cs.residual ? dr.p : nullptr, dy.p, scratch.p));
  t.sync();
  const std::vector<T> y = dy.download();
  auto opv = [&](T v) { return tf32_operands ? E::op(v) : E::val(v); };
  double sum = 0.0, sum2 = 0.0;
  size_t n = 0;
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
              const double v = opv(x[((size_t)iy * cs.w + (size_t)ix) * in_stride + i]) *
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
        const double tol = 1.1 * kAcc * mag + kF32 * (std::fabs(v) + std::fabs(rr)) + E::store_tol(want) + 1e-7;
        const double got = E::val(got_t);
        CHECK_MSG(near_float(got, want, tol),
                  "%s conv %ux%u/%u %u->%u %ux%u: pixel %zu channel %zu: %.9g vs %.9g (tol %.3g, err %.3g)", E::name,
                  cs.kh, cs.kw, cs.stride, cs.cin, cs.cout, cs.h, cs.w, p, o, got, want, tol, std::fabs(got - want));
        sum += got;
        sum2 += got * got;
        n++;
      }
    }
  }
  const double mean = sum / (double)n, sd = std::sqrt(std::max(0.0, sum2 / (double)n - mean * mean));
  CHECK_MSG(sd > 0.1, "%s conv %ux%u %u->%u: outputs flat (sd %.3g)", E::name, cs.kh, cs.kw, cs.cin, cs.cout, sd);
  return nodes;
}

template <typename E>
static void test_fused(TestCtx& t, bool tf32) {
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, tf32 ? CARVE_CU_MATH_TF32 : CARVE_CU_MATH_STRICT));
  uint64_t seed = 500;
  for (const Case& cs : kCases) {
    CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_FUSED));
    CHECK(t.ctx.conv_fused == 1);
    const size_t fused = run_case<E>(t, cs, seed, tf32);
    CHECK_MSG(fused == 1, "%s conv %ux%u %u->%u: %zu launches fused, want 1", E::name, cs.kh, cs.kw, cs.cin, cs.cout,
              fused);
    CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
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
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
}

// Strict float32 with the fused request: the cuBLAS path (2-3 launches), float32 results.
static void test_strict_keeps_gemm(TestCtx& t) {
  CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_STRICT));
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_FUSED));
  const size_t nodes = run_case<F32>(t, kCases[3], 900, false);
  CHECK_MSG(nodes >= 2, "strict float32 took the fused kernel (%zu launches)", nodes);
  CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
}

static void test_args(TestCtx& t) {
  CHECK(carve_cu_ctx_set_conv_impl(nullptr, CARVE_CU_CONV_FUSED) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_ctx_set_conv_impl(&t.ctx, (carve_cu_conv_impl)2) == CARVE_ERR_INVALID_ARGUMENT);
  carve_cu_ctx fresh;
  CHECK_OK(carve_cu_ctx_init(&fresh, t.stream));
  CHECK(fresh.conv_fused == 0);  // the default: the cuBLAS path
  carve_cu_ctx_destroy(&fresh);
}

int main() {
  int device = 0, major = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TestCtx t;
  test_args(t);
  if (major >= 8) {
    test_fused<F32>(t, true);
  } else {
    std::printf("sm_%d0: no TF32 tensor cores, the float32 fused cases skipped\n", major);
  }
  test_strict_keeps_gemm(t);
  test_fused<F16>(t, false);
  std::printf("ok: fused implicit-GEMM convolution (TF32 and fp16), %zu shapes each\n",
              sizeof(kCases) / sizeof(kCases[0]));
  return 0;
}
