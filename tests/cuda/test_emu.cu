// tests/cuda/test_emu.cu: the CUDA emulation header itself (tests/cuda/cuda_emu.h).
// Checks block barriers with shared memory, warp shuffles and ballots, atomics, the
// plain-call fast path, launch-configuration errors, graph capture and replay, the
// error of a synchronous call under capture, the host GEMM / GEMV against loops, and the nvcuda::wmma subset
// (TF32 m16n16k8 and half m16n16k16 with both operand layouts and both store layouts, against loops: TF32
// operands truncated, __float_to_tf32 to nearest with ties away; misaligned pointers abort).
// Built with g++ -x c++ -include tests/cuda/cuda_emu.h (tests/cuda/tests.cmake).

#include <cassert>
#include <csignal>
#include <cstdio>
#include <string>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdlib>
#include <random>
#include <vector>

#define CHECK(cond)                                                       \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                       \
    }                                                                     \
  } while (0)

// ---- Kernels ---------------------------------------------------------------------------

// out[block] = sum of in[block * 256 .. +256) by a shared-memory tree (a barrier per level),
// and rev[i] = in[block's last - i] through shared memory (one barrier).
__global__ void block_sum(const int* in, int* out, int* rev) {
  __shared__ int s[256];
  const unsigned t = threadIdx.x;
  const size_t base = (size_t)blockIdx.x * 256;
  s[t] = in[base + t];
  __syncthreads();
  rev[base + t] = s[255 - t];
  __syncthreads();
  for (unsigned half = 128; half > 0; half /= 2) {
    if (t < half) s[t] += s[t + half];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// Warp reductions: xor butterfly (every lane gets the sum), down (lane 0 gets it), ballot
// of odd values, shfl broadcast of lane 3, shfl_up prefix sum.
__global__ void warp_ops(const float* in, float* xor_sum, float* down_sum, unsigned* ballot, float* bcast,
                         float* prefix) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  const float v = in[i];
  float a = v, b = v, p = v;
  for (int m = 16; m > 0; m /= 2) a += __shfl_xor_sync(0xFFFFFFFFu, a, m);
  for (int d = 16; d > 0; d /= 2) b += __shfl_down_sync(0xFFFFFFFFu, b, (unsigned)d);
  for (unsigned d = 1; d < 32; d *= 2) {
    const float o = __shfl_up_sync(0xFFFFFFFFu, p, d);
    if ((threadIdx.x & 31u) >= d) p += o;
  }
  const unsigned bal = __ballot_sync(0xFFFFFFFFu, ((int)v) & 1);
  xor_sum[i] = a;
  if ((threadIdx.x & 31u) == 0) down_sum[i / 32] = b;
  ballot[i] = bal;
  bcast[i] = __shfl_sync(0xFFFFFFFFu, v, 3);
  prefix[i] = p;
}

// Histogram of in[0 .. n) into 16 bins (atomicAdd), and max / min / CAS counters.
__global__ void atomics(const int* in, size_t n, int* hist, int* mx, unsigned* mn, float* fsum, int* cas_hits) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    atomicAdd(&hist[in[i] & 15], 1);
    atomicMax(mx, in[i]);
    atomicMin(mn, (unsigned)in[i]);
    atomicAdd(fsum, 1.0f);
    if (atomicCAS(cas_hits, 0, 1) == 0) atomicAdd(cas_hits, 100);
  }
}

// y = x + 1 over a 3-D launch (threads as plain calls: no barrier); writes the thread's
// coordinates so the mapping can be checked.
__global__ void coords(unsigned* y, dim3 n) {
  const unsigned x = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned yy = blockIdx.y * blockDim.y + threadIdx.y;
  const unsigned z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x < n.x && yy < n.y && z < n.z) y[((size_t)z * n.y + yy) * n.x + x] = (z << 20) | (yy << 10) | x;
}

__global__ void add_one(float* y, int n) {
  const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] += 1.0f;
}

// y[0] = a[0] * m + b[0] (b may be NULL): the nodes of the fork / join graphs below.
__global__ void axpb(float* y, const float* a, float m, const float* b) {
  if (threadIdx.x == 0) y[0] = a[0] * m + (b != nullptr ? b[0] : 0.0f);
}

// Threads that exit early before a barrier still let the others pass it (exited threads
// do not count, as on a GPU), for a block whose size is not a multiple of 32.
__global__ void early_exit(int* out) {
  __shared__ int s[100];
  const unsigned t = threadIdx.x;
  if (t >= 90) return;
  s[t] = (int)t;
  __syncthreads();
  out[t] = s[89 - t];
}

// Thread t stores `round` to s[t] and reads its neighbour's s[t + 1] (wrapping), after a barrier when `sync`;
// without it that is a race: which value it reads depends on which thread ran first.
__global__ void neighbour_read(int* out, int round, int sync) {
  __shared__ int s[64];
  const unsigned t = threadIdx.x;
  s[t] = round;
  if (sync) __syncthreads();
  out[t] = s[(t + 1) % 64];
}

// A barrier in divergent code: thread 0 returns at once, the others wait at __syncthreads.
// Undefined in CUDA; the emulator aborts with a message instead of hanging.
__global__ void divergent_barrier(int* out) {
  if (threadIdx.x == 0) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

// One warp: D = A B + C with wmma, A (16 x K) read with layout LA from a (ld lda), B (K x 16) with LB from b
// (ld ldb), C filled with c0, D stored with `out_layout` to d (ld 16). tf32: the operands converted with
// __float_to_tf32 after the load when `convert`.
template <typename T, int K, typename LA, typename LB, typename S>
__global__ void wmma_tile(const S* a, unsigned lda, const S* b, unsigned ldb, float c0, float* d, int col_out,
                          int convert) {
  namespace wm = nvcuda::wmma;
  wm::fragment<wm::matrix_a, 16, 16, K, T, LA> fa;
  wm::fragment<wm::matrix_b, 16, 16, K, T, LB> fb;
  wm::fragment<wm::accumulator, 16, 16, K, float> acc;
  wm::fill_fragment(acc, c0);
  wm::load_matrix_sync(fa, a, lda);
  wm::load_matrix_sync(fb, b, ldb);
  if constexpr (std::is_same<T, wm::precision::tf32>::value) {
    if (convert) {
      for (int i = 0; i < (int)fa.num_elements; i++) fa.x[i] = wm::__float_to_tf32(fa.x[i]);
      for (int i = 0; i < (int)fb.num_elements; i++) fb.x[i] = wm::__float_to_tf32(fb.x[i]);
    }
  }
  wm::mma_sync(acc, fa, fb, acc);
  wm::store_matrix_sync(d, acc, 16, col_out ? wm::mem_col_major : wm::mem_row_major);
}

// Runs f in a child process; true when the child was killed by SIGABRT.
template <typename F>
static bool aborts(F f) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    f();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

int main() {
  std::mt19937 rng(5);

  // Barriers and shared memory.
  {
    const int blocks = 37;
    std::vector<int> in(blocks * 256), out(blocks), rev(blocks * 256);
    for (auto& v : in) v = (int)(rng() % 1000) - 500;
    CARVE_LAUNCH(block_sum, blocks, 256, nullptr, in.data(), out.data(), rev.data());
    CHECK(cudaGetLastError() == cudaSuccess);
    for (int b = 0; b < blocks; b++) {
      long s = 0;
      for (int t = 0; t < 256; t++) {
        s += in[b * 256 + t];
        CHECK(rev[b * 256 + t] == in[b * 256 + 255 - t]);
      }
      CHECK(out[b] == s);
    }
    std::printf("barriers + shared memory: %d blocks of 256 ok\n", blocks);
  }
  {
    std::vector<int> out(90, -1);
    CARVE_LAUNCH(early_exit, 2, 100, nullptr, out.data());
    CHECK(cudaGetLastError() == cudaSuccess);
    for (int t = 0; t < 90; t++) CHECK(out[t] == 89 - t);
    std::printf("barrier after early exits ok\n");
  }

  // Warp functions.
  {
    const int n = 4 * 128;
    std::vector<float> in(n), xs(n), ds(n / 32), bc(n), pre(n);
    std::vector<unsigned> bal(n);
    for (auto& v : in) v = (float)(rng() % 64);
    CARVE_LAUNCH(warp_ops, 4, 128, nullptr, in.data(), xs.data(), ds.data(), bal.data(), bc.data(), pre.data());
    CHECK(cudaGetLastError() == cudaSuccess);
    for (int w = 0; w < n / 32; w++) {
      float s = 0, p = 0;
      unsigned odd = 0;
      for (int l = 0; l < 32; l++) {
        s += in[w * 32 + l];
        odd |= (unsigned)((int)in[w * 32 + l] & 1) << l;
      }
      CHECK(ds[w] == s);
      for (int l = 0; l < 32; l++) {
        p += in[w * 32 + l];
        CHECK(xs[w * 32 + l] == s);
        CHECK(bal[w * 32 + l] == odd);
        CHECK(bc[w * 32 + l] == in[w * 32 + 3]);
        CHECK(pre[w * 32 + l] == p);
      }
    }
    std::printf("warp shuffles + ballot ok\n");
  }

  // Atomics.
  {
    const size_t n = 10007;
    std::vector<int> in(n), hist(16, 0);
    for (auto& v : in) v = (int)(rng() % 100000);
    int mx = -1, cas = 0;
    unsigned mn = 0xFFFFFFFFu;
    float fs = 0;
    CARVE_LAUNCH(atomics, 7, 96, nullptr, in.data(), n, hist.data(), &mx, &mn, &fs, &cas);
    CHECK(cudaGetLastError() == cudaSuccess);
    std::vector<int> want(16, 0);
    int wmx = -1;
    unsigned wmn = 0xFFFFFFFFu;
    for (int v : in) {
      want[v & 15]++;
      wmx = std::max(wmx, v);
      wmn = std::min(wmn, (unsigned)v);
    }
    CHECK(hist == want && mx == wmx && mn == wmn && fs == (float)n && cas == 101);
    std::printf("atomics ok\n");
  }

  // 3-D launch, plain-call path.
  {
    const dim3 n(37, 19, 5);
    std::vector<unsigned> y((size_t)n.x * n.y * n.z, 0xFFFFFFFFu);
    CARVE_LAUNCH(coords, dim3(3, 5, 2), dim3(16, 4, 3), nullptr, y.data(), n);
    CHECK(cudaGetLastError() == cudaSuccess);
    for (unsigned z = 0; z < n.z; z++)
      for (unsigned yy = 0; yy < n.y; yy++)
        for (unsigned x = 0; x < n.x; x++) CHECK(y[((size_t)z * n.y + yy) * n.x + x] == ((z << 20) | (yy << 10) | x));
    std::printf("3-D grid ok\n");
  }

  // Launch configuration errors (sticky until read, as CUDA's).
  {
    float v = 0;
    CARVE_LAUNCH(add_one, 0, 32, nullptr, &v, 1);
    CHECK(cudaPeekAtLastError() == cudaErrorInvalidConfiguration);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    CHECK(cudaGetLastError() == cudaSuccess);
    CARVE_LAUNCH(add_one, 1, 1025, nullptr, &v, 1);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    CARVE_LAUNCH(add_one, dim3(1, 65536), 32, nullptr, &v, 1);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    CARVE_LAUNCH(add_one, 1, dim3(1, 1, 65), nullptr, &v, 1);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    CHECK(v == 0.0f);
    CHECK(std::string(cudaGetErrorString(cudaErrorInvalidConfiguration)) == "invalid configuration argument");
    std::printf("launch errors ok\n");
  }

  // Graph capture and replay; a synchronous copy under capture invalidates it.
  {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s) == cudaSuccess);
    float* d;
    CHECK(cudaMalloc(&d, 100 * sizeof(float)) == cudaSuccess);
    CHECK(cudaMemsetAsync(d, 0, 100 * sizeof(float), s) == cudaSuccess);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CARVE_LAUNCH(add_one, 4, 32, s, d, 100);
    CARVE_LAUNCH(add_one, 4, 32, s, d, 50);
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(d[0] == 0.0f);  // recorded, not run
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
    cudaGraphExec_t ge;
    CHECK(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
    for (int r = 0; r < 3; r++) CHECK(cudaGraphLaunch(ge, s) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    for (int i = 0; i < 100; i++) CHECK(d[i] == (i < 50 ? 6.0f : 3.0f));
    CHECK(cudaGraphExecDestroy(ge) == cudaSuccess);
    CHECK(cudaGraphDestroy(g) == cudaSuccess);

    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    float h[4];
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaErrorStreamCaptureUnsupported);
    CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
    CHECK(cudaGetLastError() == cudaErrorStreamCaptureUnsupported);
    CHECK(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
    CHECK(cudaFree(d) == cudaSuccess);
    CHECK(cudaStreamDestroy(s) == cudaSuccess);
    std::printf("graph capture + replay ok\n");
  }

  // A capture over two streams: a fork (event recorded on the origin, waited on by s2) and a join; the replay in
  // the recorded and the interleaved order; a fork never joined back; two branches sharing a scratch value give
  // different results in the interleaved order (what the packages' lanes are checked with).
  {
    cudaStream_t s, s2;
    cudaEvent_t fork, join;
    CHECK(cudaStreamCreate(&s) == cudaSuccess && cudaStreamCreate(&s2) == cudaSuccess);
    CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess);
    CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess);
    float* d;
    CHECK(cudaMalloc(&d, 8 * sizeof(float)) == cudaSuccess);
    for (int order = 0; order < 2; order++) {
      if (order == 1) setenv("CARVE_EMU_GRAPH_ORDER", "interleave", 1);
      CHECK(cudaMemsetAsync(d, 0, 8 * sizeof(float), s) == cudaSuccess);
      d[0] = 1.0f;
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
      CARVE_LAUNCH(axpb, 1, 32, s, d + 1, d, 1.0f, d + 1);  // x = x + 1 (node 0)
      CHECK(cudaEventRecord(fork, s) == cudaSuccess);
      CHECK(cudaStreamWaitEvent(s2, fork, 0) == cudaSuccess);
      CARVE_LAUNCH(axpb, 1, 32, s2, d + 2, d + 1, 2.0f, nullptr);  // y = 2 x (branch 2)
      CARVE_LAUNCH(axpb, 1, 32, s, d + 3, d + 1, 1.0f, d);         // z = x + 1 (branch 1)
      CARVE_LAUNCH(axpb, 1, 32, s2, d + 4, d + 2, 10.0f, nullptr);  // 10 y
      CHECK(cudaEventRecord(join, s2) == cudaSuccess);
      CHECK(cudaStreamWaitEvent(s, join, 0) == cudaSuccess);
      CARVE_LAUNCH(axpb, 1, 32, s, d + 5, d + 4, 1.0f, d + 3);  // 10 y + z
      cudaGraph_t g;
      CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
      size_t nodes = 0;
      CHECK(cudaGraphGetNodes(g, nullptr, &nodes) == cudaSuccess && nodes == 5);  // records and waits: edges only
      cudaGraphExec_t ge;
      CHECK(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
      for (int r = 1; r <= 2; r++) {
        CHECK(cudaGraphLaunch(ge, s) == cudaSuccess);
        CHECK(d[1] == (float)r && d[5] == 20.0f * r + r + 1.0f);
      }
      CHECK(cudaGraphExecDestroy(ge) == cudaSuccess && cudaGraphDestroy(g) == cudaSuccess);

      // Unjoined: s2 forks off and is never waited on.
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
      CHECK(cudaEventRecord(fork, s) == cudaSuccess);
      CHECK(cudaStreamWaitEvent(s2, fork, 0) == cudaSuccess);
      CARVE_LAUNCH(axpb, 1, 32, s2, d + 2, d + 1, 2.0f, nullptr);
      CHECK(cudaStreamEndCapture(s2, &g) == cudaErrorStreamCaptureUnmatched);  // only the origin ends it
      CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureUnjoined && g == nullptr);
      CARVE_LAUNCH(axpb, 1, 32, s2, d + 6, d + 1, 0.0f, nullptr);  // s2 no longer captures: runs now
      CHECK(cudaGetLastError() == cudaSuccess && d[6] == 0.0f);

      // A race: both branches use d[7] as scratch (write, then read back). Recorded order: each branch reads its
      // own value; interleaved: branch 1 reads branch 2's.
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
      CHECK(cudaEventRecord(fork, s) == cudaSuccess);
      CHECK(cudaStreamWaitEvent(s2, fork, 0) == cudaSuccess);
      CARVE_LAUNCH(axpb, 1, 32, s, d + 7, d, 3.0f, nullptr);      // scratch = 3
      CARVE_LAUNCH(axpb, 1, 32, s, d + 2, d + 7, 1.0f, nullptr);  // branch 1 reads it
      CARVE_LAUNCH(axpb, 1, 32, s2, d + 7, d, 5.0f, nullptr);     // scratch = 5
      CARVE_LAUNCH(axpb, 1, 32, s2, d + 3, d + 7, 1.0f, nullptr); // branch 2 reads it
      CHECK(cudaEventRecord(join, s2) == cudaSuccess);
      CHECK(cudaStreamWaitEvent(s, join, 0) == cudaSuccess);
      CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
      CHECK(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
      CHECK(cudaGraphLaunch(ge, s) == cudaSuccess);
      CHECK(d[3] == 5.0f && d[2] == (order == 0 ? 3.0f : 5.0f));
      CHECK(cudaGraphExecDestroy(ge) == cudaSuccess && cudaGraphDestroy(g) == cudaSuccess);
    }
    unsetenv("CARVE_EMU_GRAPH_ORDER");
    CHECK(cudaFree(d) == cudaSuccess);
    CHECK(cudaEventDestroy(fork) == cudaSuccess && cudaEventDestroy(join) == cudaSuccess);
    CHECK(cudaStreamDestroy(s2) == cudaSuccess && cudaStreamDestroy(s) == cudaSuccess);
    std::printf("fork / join capture, interleaved replay ok\n");
  }

  // Host GEMM (all transposes, beta, odd sizes) and GEMV against loops in double.
  {
    cublasHandle_t h;
    CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH) == CUBLAS_STATUS_SUCCESS);
    std::uniform_real_distribution<float> U(-1, 1);
    const int sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {130, 67, 259}, {257, 9, 300}, {33, 260, 17}};
    for (auto& sz : sizes) {
      const int m = sz[0], n = sz[1], k = sz[2];
      for (int ta = 0; ta < 2; ta++) {
        for (int tb = 0; tb < 2; tb++) {
          const int lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 1, ldc = m + 2;
          std::vector<float> A((size_t)lda * (ta ? m : k)), B((size_t)ldb * (tb ? k : n)), C((size_t)ldc * n);
          for (auto& v : A) v = U(rng);
          for (auto& v : B) v = U(rng);
          for (auto& v : C) v = U(rng);
          std::vector<float> C0 = C;
          const float alpha = 0.75f, beta = ta ? 0.5f : 0.0f;
          CHECK(cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
                            A.data(), lda, B.data(), ldb, &beta, C.data(), ldc) == CUBLAS_STATUS_SUCCESS);
          for (int j = 0; j < n; j++) {
            for (int i = 0; i < m; i++) {
              double s = 0, mag = 0;
              for (int p = 0; p < k; p++) {
                const double a = ta ? A[(size_t)i * lda + p] : A[(size_t)p * lda + i];
                const double b = tb ? B[(size_t)p * ldb + j] : B[(size_t)j * ldb + p];
                s += a * b;
                mag += std::fabs(a * b);
              }
              const double want = alpha * s + (beta != 0 ? beta * C0[(size_t)j * ldc + i] : 0.0);
              CHECK(std::fabs(C[(size_t)j * ldc + i] - want) <= 1e-6 * (mag + 1) * (k + 2));
            }
            for (int i = m; i < ldc; i++) CHECK(C[(size_t)j * ldc + i] == C0[(size_t)j * ldc + i]);
          }
        }
      }
      // GEMV: y = A^T x with A (k, m) column-major.
      std::vector<float> A((size_t)k * m), x(k), y(m, 7.0f);
      for (auto& v : A) v = U(rng);
      for (auto& v : x) v = U(rng);
      const float one = 1.0f, zero = 0.0f;
      CHECK(cublasSgemv(h, CUBLAS_OP_T, k, m, &one, A.data(), k, x.data(), 1, &zero, y.data(), 1) ==
            CUBLAS_STATUS_SUCCESS);
      for (int i = 0; i < m; i++) {
        double s = 0, mag = 0;
        for (int p = 0; p < k; p++) {
          s += (double)A[(size_t)i * k + p] * x[p];
          mag += std::fabs((double)A[(size_t)i * k + p] * x[p]);
        }
        CHECK(std::fabs(y[i] - s) <= 1e-6 * (mag + 1) * (k + 2));
      }
    }
    const float one = 1.0f;
    float dummy = 0;
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 1, 1, &one, &dummy, 3, &dummy, 1, &one, &dummy, 4) ==
          CUBLAS_STATUS_INVALID_VALUE);  // lda < m
    CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
    std::printf("host GEMM / GEMV ok\n");
  }
  // wmma: D = A B + C on one warp, against loops over the operands as the tensor cores read them.
  {
    namespace wm = nvcuda::wmma;
    auto trunc13 = [](float v) {
      uint32_t u;
      std::memcpy(&u, &v, 4);
      u &= 0xffffe000u;
      std::memcpy(&v, &u, 4);
      return v;
    };
    // __float_to_tf32: to nearest, ties away from zero (1 + 2^-11 is a tie: up; 1 + 2^-11 - 2^-23: down)
    CHECK(wm::__float_to_tf32(1.0f + 0x1p-11f) == 1.0f + 0x1p-10f);
    CHECK(wm::__float_to_tf32(-(1.0f + 0x1p-11f)) == -(1.0f + 0x1p-10f));
    CHECK(wm::__float_to_tf32(1.0f + 0x1p-11f - 0x1p-23f) == 1.0f);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    alignas(32) static float a32[16 * 24], b32[16 * 24], d[16 * 16];
    alignas(32) static __half a16[16 * 24], b16[16 * 24];
    for (int i = 0; i < 16 * 24; i++) {
      a32[i] = U(rng);
      b32[i] = U(rng);
      a16[i] = __float2half(U(rng));
      b16[i] = __float2half(U(rng));
    }
    // element (r, k) of A / (k, n) of B under row- or col-major storage with ld 24
    auto at = [](bool row, int i, int j) { return row ? i * 24 + j : j * 24 + i; };
    for (int variant = 0; variant < 4; variant++) {
      const bool a_row = variant & 1, b_row = variant & 2, col_out = variant == 3;
      for (int convert = 0; convert < 2; convert++) {
        std::fill(d, d + 256, -1.0f);
        using tf32 = wm::precision::tf32;
        using rm = wm::row_major;
        using cm = wm::col_major;
        const int co = col_out;
        if (a_row && b_row) {
          CARVE_LAUNCH((wmma_tile<tf32, 8, rm, rm, float>), 1, 32, nullptr, a32, 24u, b32, 24u, 0.5f, d, co, convert);
        } else if (a_row) {
          CARVE_LAUNCH((wmma_tile<tf32, 8, rm, cm, float>), 1, 32, nullptr, a32, 24u, b32, 24u, 0.5f, d, co, convert);
        } else if (b_row) {
          CARVE_LAUNCH((wmma_tile<tf32, 8, cm, rm, float>), 1, 32, nullptr, a32, 24u, b32, 24u, 0.5f, d, co, convert);
        } else {
          CARVE_LAUNCH((wmma_tile<tf32, 8, cm, cm, float>), 1, 32, nullptr, a32, 24u, b32, 24u, 0.5f, d, co, convert);
        }
        for (int r = 0; r < 16; r++) {
          for (int n = 0; n < 16; n++) {
            double s = 0.5, mag = 0.5;
            for (int k = 0; k < 8; k++) {
              const float av = a32[at(a_row, r, k)], bv = b32[at(b_row, k, n)];
              const double p = convert ? (double)wm::__float_to_tf32(av) * wm::__float_to_tf32(bv)
                                       : (double)trunc13(av) * trunc13(bv);
              s += p;
              mag += std::fabs(p);
            }
            const float got = d[col_out ? n * 16 + r : r * 16 + n];
            CHECK(std::fabs(got - s) <= 0x1p-22 * mag);
          }
        }
      }
    }
    // half m16n16k16: A row-major, B col-major (the fused convolution's layouts), exact operands
    CARVE_LAUNCH((wmma_tile<__half, 16, wm::row_major, wm::col_major, __half>), 1, 32, nullptr, a16, 24u, b16, 24u,
                 -0.25f, d, 0, 0);
    for (int r = 0; r < 16; r++) {
      for (int n = 0; n < 16; n++) {
        double s = -0.25, mag = 0.25;
        for (int k = 0; k < 16; k++) {
          const double p = (double)__half2float(a16[r * 24 + k]) * __half2float(b16[n * 24 + k]);
          s += p;
          mag += std::fabs(p);
        }
        CHECK(std::fabs(d[r * 16 + n] - s) <= 0x1p-22 * mag);
      }
    }
    // what the hardware requires: 32-byte aligned pointers, ldm a multiple of 16 bytes
    CHECK(aborts([&]() {
      CARVE_LAUNCH((wmma_tile<__half, 16, wm::row_major, wm::col_major, __half>), 1, 32, nullptr, a16 + 1, 24u, b16,
                   24u, 0.0f, d, 0, 0);
    }));
    CHECK(aborts([&]() {
      CARVE_LAUNCH((wmma_tile<__half, 16, wm::row_major, wm::col_major, __half>), 1, 32, nullptr, a16, 20u, b16, 24u,
                   0.0f, d, 0, 0);
    }));
    std::printf("wmma ok\n");
  }
  const char* started_with = std::getenv("CARVE_EMU_THREAD_ORDER");
  const std::string thread_order = started_with != nullptr ? started_with : "";
  // CARVE_EMU_THREAD_ORDER=reverse: a missing barrier gives other results in the two orders (forward: every thread
  // but the last reads the old value; reverse, thread 0 first and then 63 down to 1: only thread 0), a barrier the
  // same ones.
  {
    std::vector<int> fwd(64), rev(64), fwd_sync(64), rev_sync(64);
    auto run = [&](std::vector<int>& out, bool reverse, int sync) {
      CARVE_LAUNCH(neighbour_read, 1, 64, nullptr, out.data(), 1, 1);  // s = 1 everywhere
      setenv("CARVE_EMU_THREAD_ORDER", reverse ? "reverse" : "forward", 1);
      CARVE_LAUNCH(neighbour_read, 1, 64, nullptr, out.data(), 2, sync);
      CHECK(cudaDeviceSynchronize() == cudaSuccess);
    };
    run(fwd, false, 0);
    run(rev, true, 0);
    run(fwd_sync, false, 1);
    run(rev_sync, true, 1);
    for (int t = 0; t < 64; t++) {
      CHECK(fwd[t] == (t < 63 ? 1 : 2));
      CHECK(rev[t] == (t == 0 ? 1 : 2));
      CHECK(fwd_sync[t] == 2 && rev_sync[t] == 2);
    }
    std::printf("thread order: a missing barrier shows, reversed ok\n");
  }
  // the rest in the order this test was started with (cuda_emu_asan: reversed)
  if (thread_order.empty()) {
    unsetenv("CARVE_EMU_THREAD_ORDER");
  } else {
    setenv("CARVE_EMU_THREAD_ORDER", thread_order.c_str(), 1);
  }
  // Divergent barrier: an abort with a message, not a hang (in either thread order).
  {
    std::vector<int> out(64, 0);
    for (const char* order : {"forward", "reverse"}) {
      setenv("CARVE_EMU_THREAD_ORDER", order, 1);
      CHECK(aborts([&]() { CARVE_LAUNCH(divergent_barrier, 1, 64, nullptr, out.data()); }));
    }
    std::printf("divergent barrier aborts ok\n");
  }
  std::printf("test_emu: all ok\n");
  return 0;
}
