// tests/cuda/bench_igemm.cu: device time of one groups-1 convolution, the cuBLAS path (im2col + GEMM +
// epilogue) against the fused implicit-GEMM kernel (runtime/carve_cuda_igemm.h), TF32 and fp16, on
// yolo26n 640's convolution shapes; in fp16 also the fused kernel with each of its tiles (forced through a tactic
// table entry, runtime/carve_cuda.h "Tactics": what a package's create times per shape). Each conv is captured 50 times into a CUDA graph (as the packages
// run: no launch gaps from the host), the graph launched 20 times; prints microseconds per convolution.
// A GPU tool, not a test (no emulation build; ctest's cuda_nvcc_kernel_tests compiles its device code), one command:
//   nvcc -std=c++17 -O2 -arch=native -DCARVE_RT_NO_THREADS -Iruntime -Itests/cuda tests/cuda/bench_igemm.cu
//     runtime/carve_cuda_*.cu runtime/carve_{rt,post,nms,pre,isa,epilogue,attention,layout,mask,weights}.c
//     -lcublas -o bench_igemm && ./bench_igemm

#include "carve_cuda_f16.h"
#include "carve_cuda_igemm_tile.h"
#include "cuda_test.h"

struct Shape {
  const char* what;
  uint32_t k, stride, cin, cout, h;  // k x k, pad k / 2, h x h input
};

static const Shape kShapes[] = {
    {"L0 stem 3->16 s2 640", 3, 2, 3, 16, 640},    {"L1 16->32 s2 320", 3, 2, 16, 32, 320},
    {"C3k2 1x1 32->32 160", 1, 1, 32, 32, 160},    {"C3k2 3x3 16->16 160", 3, 1, 16, 16, 160},
    {"L3 32->64 s2 160", 3, 2, 32, 64, 160},       {"C3k2 1x1 64->64 80", 1, 1, 64, 64, 80},
    {"C3k2 3x3 32->32 80", 3, 1, 32, 32, 80},      {"L5 64->128 s2 80", 3, 2, 64, 128, 80},
    {"C3k2 3x3 64->64 40", 3, 1, 64, 64, 40},      {"L7 128->256 s2 40", 3, 2, 128, 256, 40},
    {"C3k2 1x1 256->256 20", 1, 1, 256, 256, 20},  {"C3k2 3x3 64->64 20", 3, 1, 64, 64, 20},
    {"C3k2 3x3 128->128 20", 3, 1, 128, 128, 20},  {"Det cv2 3x3 64->64 80", 3, 1, 64, 64, 80},
    {"Det cv2 3x3 256->64 20", 3, 1, 256, 64, 20}, {"Det 1x1 64->80 80", 1, 1, 64, 80, 80},
};

template <typename T>
static T from_float(float v);
template <>
float from_float<float>(float v) {
  return v;
}
template <>
__half from_float<__half>(float v) {
  return __float2half(v);
}

// Microseconds per convolution with the context's current settings; tile >= 0: the fused kernel with that tile.
template <typename T>
static double time_conv(TestCtx& t, const Shape& s, int tile = -1) {
  const carve_cu_conv c = {s.k, s.k, s.stride, s.k / 2, 1, s.cin, s.cout, s.h, s.h, s.cin, s.cout, s.cout,
                           CARVE_CU_ACT_SILU, 1, tile >= 0 ? 1u : 0u};
  uint8_t entry = (uint8_t)(CARVE_CU_PATH_FUSED_TILE + tile);
  carve_cu_tactics forced = {&entry, nullptr, 1, 0};
  CHECK_OK(carve_cu_ctx_set_tactics(&t.ctx, tile >= 0 ? &forced : nullptr));
  const size_t oh = (s.h + 2 * (s.k / 2) - s.k) / s.stride + 1, kk = (size_t)s.k * s.k * s.cin;
  TestRng rng(7);
  auto random = [&](size_t n, float scale) {
    std::vector<T> v(n);
    for (auto& e : v) e = from_float<T>(rng.normal() * scale);
    return v;
  };
  DevBuf<T> x(random((size_t)s.h * s.h * s.cin, 1.0f)), w(random(s.cout * kk, 0.1f)), b(random(s.cout, 0.1f));
  DevBuf<T> y(random(oh * oh * s.cout, 0.0f));
  DevBuf<float> scratch(carve_cu_conv2d_scratch_floats(&c) + 1);
  CHECK_OK(carve_cu_conv2d(&t.ctx, &c, x.p, w.p, b.p, nullptr, y.p, scratch.p));  // warm (cuBLAS heuristics)
  t.sync();
  CHECK_CUDA(cudaStreamBeginCapture(t.stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < 50; i++) CHECK_OK(carve_cu_conv2d(&t.ctx, &c, x.p, w.p, b.p, nullptr, y.p, scratch.p));
  cudaGraph_t g = nullptr;
  CHECK_CUDA(cudaStreamEndCapture(t.stream, &g));
  cudaGraphExec_t ge = nullptr;
  CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
  CHECK_CUDA(cudaGraphLaunch(ge, t.stream));
  t.sync();
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  CHECK_CUDA(cudaEventRecord(e0, t.stream));
  for (int i = 0; i < 20; i++) CHECK_CUDA(cudaGraphLaunch(ge, t.stream));
  CHECK_CUDA(cudaEventRecord(e1, t.stream));
  t.sync();
  float ms = 0.0f;
  CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  CHECK_OK(carve_cu_ctx_set_tactics(&t.ctx, nullptr));
  return ms * 1000.0 / (20 * 50);
}

int main() {
  TestCtx t;
  constexpr int N = 4 + CARVE_CU_IGEMM_TILES + 1;  // + the fp16 best (the tactic a package's create would keep)
  std::printf("SMs %d; us per conv (graph of 50): tf32 cublas, tf32 fused, fp16 cublas, fp16 fused (the tile rule's); "
              "fp16 fused 64x64, 64x32, 32x64, 32x32, 32x32 sliced-K, 32x32 async stages, 32x32 split-K, 64x32 async, 32x64 async, "
              "32x32 sliced-K4; fp16 best\n", t.ctx.sm_count);
  double tot[N] = {};
  for (const Shape& s : kShapes) {
    double us[N];
    CHECK_OK(carve_cu_ctx_set_conv_math(&t.ctx, CARVE_CU_MATH_TF32));
    for (int f = 0; f < 2; f++) {
      CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, f ? CARVE_CU_CONV_FUSED : CARVE_CU_CONV_GEMM));
      us[f] = time_conv<float>(t, s);
      us[2 + f] = time_conv<__half>(t, s);
    }
    CHECK_OK(carve_cu_ctx_set_conv_impl(&t.ctx, CARVE_CU_CONV_GEMM));
    us[N - 1] = us[2];
    for (int tile = 0; tile < CARVE_CU_IGEMM_TILES; tile++) {
      us[4 + tile] = time_conv<__half>(t, s, tile);  // (the stem: its direct kernel whatever the entry)
      us[N - 1] = std::min(us[N - 1], us[4 + tile]);
    }
    std::printf("%-26s", s.what);
    for (int i = 0; i < N; i++) std::printf(" %8.2f", us[i]);
    std::printf("\n");
    for (int i = 0; i < N; i++) tot[i] += us[i];
  }
  std::printf("%-26s", "sum");
  for (int i = 0; i < N; i++) std::printf(" %8.2f", tot[i]);
  std::printf("\n");
  return 0;
}
