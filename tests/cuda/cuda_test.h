// Helpers of the cuda runtime tests (tests/cuda/test_*.cu): checks, a seeded generator,
// device buffers. The tests use only the CUDA runtime API, so they build with the host
// emulation header (ctest) and with nvcc for a real GPU alike.

#ifndef CARVE_CUDA_TEST_H
#define CARVE_CUDA_TEST_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "carve_cuda.h"

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

#define CHECK_MSG(cond, ...)                                                          \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                              \
      std::fputc('\n', stderr);                                                       \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

#define CHECK_CUDA(call) CHECK((call) == cudaSuccess)
#define CHECK_OK(call) CHECK((call) == CARVE_OK)

// splitmix64 with a fixed seed.
struct TestRng {
  uint64_t state;
  explicit TestRng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (double)(next() >> 11) * 0x1.0p-53; }
  float range(float lo, float hi) { return (float)(lo + (hi - lo) * uniform()); }
  float normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return (float)(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  size_t below(size_t n) { return (size_t)(next() % n); }
};

// A device buffer of n T, freed at scope exit.
template <typename T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count) : n(count) {
    if (count != 0) CHECK_CUDA(cudaMalloc((void**)&p, count * sizeof(T)));
  }
  DevBuf(const std::vector<T>& h) : DevBuf(h.size()) { upload(h); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void upload(const std::vector<T>& h) {
    CHECK(h.size() <= n);
    if (!h.empty()) CHECK_CUDA(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download(size_t count) const {
    std::vector<T> h(count);
    if (count != 0) CHECK_CUDA(cudaMemcpy(h.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  std::vector<T> download() const { return download(n); }
};

// Bytes as an 8-byte aligned device buffer.
struct DevScratch {
  DevBuf<uint64_t> buf;
  explicit DevScratch(size_t bytes) : buf((bytes + 7) / 8 + 1) {}
  void* get() { return buf.p; }
};

// a and b equal as bits, or both NaN.
inline bool same_float(float a, float b) {
  if (a != a || b != b) return a != a && b != b;
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub || (a == 0.0f && b == 0.0f);
}

// |a - b| <= tol (NaN equal to NaN, infinities equal to themselves).
inline bool near_float(double a, double b, double tol) {
  if (a != a || b != b) return a != a && b != b;
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= tol;
}

// Floats computed with the C library's expf / cosf / sinf: bit-identical to the CPU
// runtime under emulation (the same libm), within a few ulp on a GPU (CUDA's expf: 2 ulp).
inline bool libm_equal(float got, float want) {
#ifdef CARVE_CUDA_EMULATION
  return same_float(got, want);
#else
  return near_float(got, want, 2e-6 * (std::fabs((double)want) + 1e-3));
#endif
}

struct TestCtx {
  cudaStream_t stream = nullptr;
  carve_cu_ctx ctx;
  TestCtx() {
    CHECK_CUDA(cudaStreamCreate(&stream));
    CHECK_OK(carve_cu_ctx_init(&ctx, stream));
  }
  ~TestCtx() {
    carve_cu_ctx_destroy(&ctx);
    cudaStreamDestroy(stream);
  }
  void sync() { CHECK_CUDA(cudaStreamSynchronize(stream)); }
};

// The graph a stream capture of `launch` records on t.stream (the call must succeed).
template <typename F>
static cudaGraph_t captured_graph(TestCtx& t, F&& launch) {
  CHECK_CUDA(cudaStreamBeginCapture(t.stream, cudaStreamCaptureModeThreadLocal));
  const carve_status st = launch();
  cudaGraph_t graph = nullptr;
  CHECK_CUDA(cudaStreamEndCapture(t.stream, &graph));
  CHECK_OK(st);
  return graph;
}

static size_t graph_nodes(cudaGraph_t graph) {
  size_t nodes = 0;
  CHECK_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
  return nodes;
}

// Nodes a stream capture of `launch` records: the launches (carve's and cuBLAS's) of one call.
template <typename F>
static size_t captured_nodes(TestCtx& t, F&& launch) {
  cudaGraph_t graph = captured_graph(t, launch);
  const size_t nodes = graph_nodes(graph);
  CHECK_CUDA(cudaGraphDestroy(graph));
  return nodes;
}

// The same, with the graph run once on t.stream (synchronised): the call's results as a graph replay gives them.
template <typename F>
static size_t captured_run(TestCtx& t, F&& launch) {
  cudaGraph_t graph = captured_graph(t, launch);
  const size_t nodes = graph_nodes(graph);
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_CUDA(cudaGraphLaunch(exec, t.stream));
  t.sync();
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return nodes;
}

// carve_cu_attention_pe (into out, its launches counted in a captured graph, returned) and the two calls it stands
// for, carve_cu_attention into o2 / v2 and carve_cu_conv2d of the pe into out2, on the same inputs (test_ops,
// test_f16: test_attention_pe). T float or __half (the overloads of carve_cuda.h / carve_cuda_f16.h).
template <typename T>
struct AttentionPeCall {
  const T* qkv;
  size_t qkv_stride;
  uint32_t heads, kd, hd;
  float scale;
  const carve_cu_conv* pe;
  const T *w, *b;
  T *o, *v, *out, *o2, *v2, *out2;
  float* scratch;
};
template <typename T>
static size_t attention_pe_and_two_calls(TestCtx& t, const AttentionPeCall<T>& a) {
  const size_t nodes = captured_run(t, [&] {
    return carve_cu_attention_pe(&t.ctx, a.qkv, a.qkv_stride, a.heads, a.kd, a.hd, a.scale, a.o, a.v, a.pe, a.w, a.b,
                                 a.out, a.scratch);
  });
  CHECK_OK(carve_cu_attention(&t.ctx, a.pe->batch, a.qkv, a.qkv_stride, a.pe->h * a.pe->w, a.heads, a.kd, a.hd,
                              a.scale, a.o2, a.pe->res_stride, a.v2, a.pe->in_stride, a.scratch));
  CHECK_OK(carve_cu_conv2d(&t.ctx, a.pe, a.v2, a.w, a.b, a.o2, a.out2, a.scratch));
  t.sync();
  return nodes;
}

// The launches of a captured call with `gemms` cuBLAS GEMMs among its `want` kernels: exactly `want` under the
// emulation (one node per GEMM); on a GPU cuBLAS may run a GEMM as two kernels (a split-K reduction: 6 nodes for
// the 4 of one image and one head on an H100), so up to one more per GEMM.
static inline bool launches_as_planned(size_t nodes, size_t want, size_t gemms) {
#ifdef CARVE_CUDA_EMULATION
  (void)gemms;
  return nodes == want;
#else
  return nodes >= want && nodes <= want + gemms;
#endif
}

#endif  // CARVE_CUDA_TEST_H
