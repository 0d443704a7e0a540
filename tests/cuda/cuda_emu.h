// carve tests: a host emulation of the CUDA runtime, device intrinsics and a cuBLAS subset,
// so that the cuda backend's .cu sources (runtime/carve_cuda_*.cu and generated packages)
// build and run on a machine without a GPU:
//
//   g++ -std=c++17 -x c++ -include tests/cuda/cuda_emu.h -DCARVE_CUDA_EMULATION -c file.cu
//
// Header only (inline functions and variables); link nothing else.
//
// ---- What is emulated ------------------------------------------------------------------
//   * Kernels: __global__/__device__/__host__/__forceinline__/__constant__/__launch_bounds__;
//     dim3, threadIdx, blockIdx, blockDim, gridDim, warpSize. A launch is
//     CARVE_LAUNCH(kernel, grid, block, stream, args...) (carve_cuda.h's macro; `<<< >>>` is
//     not C++). Blocks of a launch run one after another on the calling OS thread, in
//     blockIdx order (x fastest; with CARVE_EMU_BLOCK_ORDER=reverse in the environment, read at each launch, the
//     reverse order: what a kernel's result must not depend on); the threads of a block run as cooperative fibers that
//     switch only at barriers, so there are no data races and every run is deterministic. Between two barriers the
//     threads run in threadIdx order, or with CARVE_EMU_THREAD_ORDER=reverse (read at each launch) thread 0 and then
//     the others from the last to the first: a thread that reads what another thread wrote with no barrier between
//     them (a race on a GPU) reads the new value in one of the two orders and the old in the other, so a test run
//     both ways fails on it.
//     Fast path: thread 0 of each block runs first; when it finishes without reaching a
//     barrier the other threads run as plain calls, in threadIdx order (or reversed). A thread that then
//     reaches a barrier (a barrier in divergent code, undefined in CUDA) aborts the program
//     with a message.
//   * __shared__ is `static thread_local`: one array per OS thread, shared by the fibers of
//     the block running on it; its contents carry over from block to block (uninitialised
//     in CUDA). Only static __shared__ arrays (no `extern __shared__`).
//   * __syncthreads(): a barrier of the block's live threads (exited threads no longer count,
//     as on current GPUs). __syncwarp, __shfl_sync, __shfl_xor_sync, __shfl_down_sync,
//     __shfl_up_sync, __ballot_sync, __match_any_sync, __any_sync, __all_sync: barriers among the live lanes
//     of a 32-lane warp (lane = linear thread index % 32); the mask argument is ignored
//     (kernels use full warps), width must be 32 (default).
//   * Atomics (plain read-modify-write: fibers never interleave inside one): atomicAdd on
//     int / unsigned / unsigned long long / float, atomicMax / atomicMin on int / unsigned,
//     atomicCAS on int / unsigned / unsigned long long, atomicExch on int / unsigned / float.
//   * Intrinsics: __float_as_uint/__uint_as_float/__float_as_int/__int_as_float, __popc,
//     __popcll, __clz, __ffs, __brev, __ldg, __ldcg, __stcg, __threadfence (a no-op: blocks run in turn), __fadd_rn/__fsub_rn/__fmul_rn/__dadd_rn/
//     __dsub_rn/__dmul_rn; math functions are the C library's (expf, ...), so float results
//     can differ from a GPU's by the device libm's error (expf: 2 ulp).
//   * Runtime API: cudaMalloc/cudaFree/cudaMallocHost/cudaFreeHost, cudaMemcpy(Async),
//     cudaMemset(Async), streams (create/destroy/synchronize), events (record, synchronize,
//     elapsed time on the host clock; cudaStreamWaitEvent; cudaEventRecordWithFlags: external records in a capture
//     are nodes), graphs (cudaStreamBeginCapture/EndCapture record the
//     launches, copies, sets and cuBLAS calls of the stream, and of every stream that joins the capture
//     by waiting on an event recorded in it, as nodes with their dependencies: the stream order and the
//     event edges; event records and waits make edges, not nodes, as on a GPU. cudaStreamEndCapture
//     fails with cudaErrorStreamCaptureUnjoined when a joined stream's last work is not joined back
//     into the origin stream. cudaGraphInstantiate and cudaGraphLaunch replay the nodes: in the order
//     they were recorded, or, with CARVE_EMU_GRAPH_ORDER=interleave in the environment, in another
//     order the dependencies allow: each next node from the stream after the last one's (round robin),
//     so that concurrent branches interleave node by node and a missing dependency or two branches
//     sharing memory change the results); cudaGraphGetNodes and cudaGraphGetEdges list the nodes and their
//     dependencies (CUDA 13's signatures: CUDART_VERSION is 13000; an edge from a kernel into a CARVE_LAUNCH kernel
//     is programmatic, as programmatic dependent launch makes it on a GPU, and asking for the edges without their
//     data then fails with cudaErrorLossyQuery), cudaGetLastError/PeekAtLastError/GetErrorString/
//     GetErrorName, cudaDeviceSynchronize, cudaSetDevice/GetDevice/GetDeviceCount,
//     cudaDeviceGetAttribute (a few attributes; compute capability 9.0).
//     cudaMalloc, cudaMallocHost and cublasCreate calls are counted per OS thread
//     (carve_emu_allocs(), for the tests of caller-owned memory).
//     Every call is synchronous (the work is done when it returns) except under capture.
//   * Launch errors as CUDA reports them (through cudaGetLastError, sticky until read):
//     a zero grid or block dimension, more than 1024 threads per block, block.z > 64,
//     grid.y or grid.z > 65535: cudaErrorInvalidConfiguration; a launch on a destroyed or
//     invalid stream: cudaErrorInvalidResourceHandle. A synchronous call (cudaMemcpy,
//     cudaMemset, cudaStreamSynchronize, cudaDeviceSynchronize, cudaMalloc, cudaFree) while a
//     stream captures: cudaErrorStreamCaptureUnsupported, and the capture is invalidated
//     (cudaStreamEndCapture returns cudaErrorStreamCaptureInvalidated).
//   * cuBLAS (column-major, host pointer mode): cublasCreate/Destroy/SetStream/GetStream/
//     SetMathMode/GetMathMode/SetWorkspace, cublasSgemm, cublasSgemmStridedBatched, cublasSgemv, with a
//     blocked host GEMM (float accumulation; summation order differs from cuBLAS, as it does
//     between GPUs). cublasGemmEx for float32 data with CUBLAS_COMPUTE_32F(_PEDANTIC) or
//     CUBLAS_COMPUTE_32F_FAST_TF32. TF32 (that compute type, or the math mode
//     CUBLAS_TF32_TENSOR_OP_MATH for cublasSgemm / StridedBatched) is emulated by rounding every GEMM
//     input to TF32's 10-bit mantissa (round to nearest, ties away: cvt.rna) and accumulating in
//     float32, what the tensor cores compute up to summation order; other math modes are recorded.
//   * Half precision: __half, its conversions and cublasGemmEx / cublasGemmStridedBatchedEx
//     (fp16 operands, fp32 accumulation): cuda_emu_f16.h, included at the end.
//   * Warp matrix ops (<mma.h>, nvcuda::wmma), the subset carve's implicit-GEMM convolutions use
//     (runtime/carve_cuda_igemm.h): fragment, fill_fragment, load_matrix_sync (matrix_a / matrix_b,
//     row_major or col_major), store_matrix_sync (float accumulator), mma_sync, for the shapes
//     m16n16k8 with precision::tf32 (sm_80+) and m16n16k16 with __half operands (cuda_emu_f16.h),
//     float accumulators; wmma::__float_to_tf32 (cvt.rna: round to nearest, ties away, as to_tf32).
//     Numerics: TF32 operands are used with their low 13 mantissa bits ignored (truncated), as the
//     tensor cores read a float that was not converted (a kernel converts with __float_to_tf32
//     first, so this is a no-op for it); half operands exactly; each product is exact in float32
//     (11 x 11 significant bits) and the sum is accumulated in float32, in k order (the hardware's
//     order and alignment of the partial sums differ: tests allow float32 accumulation error).
//     Element layout: CUDA leaves a fragment's mapping of elements to lanes unspecified, so kernels
//     may only fill, load, store and mma fragments, and apply the same element-wise function to
//     every x[i] (how __float_to_tf32 is applied to a loaded fragment). Here every lane of a warp holds
//     the WHOLE operand tile (matrix_a: M x K, matrix_b: K x N; num_elements = that many), and
//     element j of an accumulator fragment of lane l is the tile's entry e = l + 32 j (row e / N,
//     column e % N; num_elements = M N / 32), so that store_matrix_sync by the 32 lanes writes the
//     tile once. load / store check what the hardware requires: the pointer 32-byte aligned and ldm
//     a multiple of 16 bytes (a violation aborts with a message; on a GPU it is undefined).
//
// ---- What is not -----------------------------------------------------------------------
//   * Concurrency between blocks, streams or the host: all work is serial, so races and
//     missing synchronisation between blocks of a kernel or between streams go unnoticed.
//   * Memory spaces: device pointers are host pointers (a kernel that reads host memory
//     works here and faults on a GPU); cudaMemcpyKind is checked for range only.
//   * Resource limits other than the launch configuration: shared-memory and register
//     sizes (ptxas reports those when nvcc compiles the same source), stack depth.
//   * Dynamic shared memory, cooperative groups, textures, warp-level matrix ops other than the
//     wmma subset above, lane masks other than full warps, independent thread scheduling inside a warp, floating-point
//     differences of the device (FMA contraction, fast-math intrinsics).

#ifndef CARVE_CUDA_EMU_H
#define CARVE_CUDA_EMU_H

#ifndef __cplusplus
#error "cuda_emu.h emulates CUDA C++: compile with g++ -x c++"
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/mman.h>

#if !(defined(__x86_64__) && defined(__linux__))
#include <ucontext.h>
#endif

// AddressSanitizer must be told about every switch between the fibers' stacks.
#if defined(__SANITIZE_ADDRESS__)
#define CARVE_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CARVE_EMU_ASAN 1
#endif
#endif
#ifdef CARVE_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#ifndef CARVE_CUDA_EMULATION
#define CARVE_CUDA_EMULATION 1
#endif

// ---- Qualifiers ------------------------------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static thread_local
// __restrict__ is a GNU C++ keyword already.

// ---- Built-in types and variables ------------------------------------------------------

struct uint3 {
  unsigned int x, y, z;
};

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;

// ---- Runtime API types -----------------------------------------------------------------

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorLossyQuery = 402,
  cudaErrorNotReady = 600,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureUnmatched = 902,
  cudaErrorStreamCaptureUnjoined = 904,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorStreamCaptureWrongThread = 908,
  cudaErrorUnknown = 999,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};

enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02

namespace carve_emu {
struct Stream;
struct Event;
struct Graph;
struct GraphExec;
struct BlasHandle;
}  // namespace carve_emu

typedef carve_emu::Stream* cudaStream_t;
typedef carve_emu::Event* cudaEvent_t;
typedef carve_emu::Graph* cudaGraph_t;
typedef carve_emu::GraphExec* cudaGraphExec_t;
typedef struct CUgraphNode_st* cudaGraphNode_t;
// An edge's data (CUDA 12.3+): its type, cudaGraphDependencyTypeDefault or ...Programmatic (the ports: 0).
typedef struct cudaGraphEdgeData_st {
  unsigned char from_port, to_port, type, reserved[5];
} cudaGraphEdgeData;
#define cudaGraphDependencyTypeDefault 0
#define cudaGraphDependencyTypeProgrammatic 1
#ifndef CUDART_VERSION
#define CUDART_VERSION 13000  // the runtime API emulated: CUDA 13's signatures (cudaGraphGetEdges with edge data)
#endif

// ---- cuBLAS types ----------------------------------------------------------------------

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum {
  CUBLAS_DEFAULT_MATH = 0,
  CUBLAS_TENSOR_OP_MATH = 1,
  CUBLAS_PEDANTIC_MATH = 2,
  CUBLAS_TF32_TENSOR_OP_MATH = 3,
  CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
} cublasMath_t;

typedef carve_emu::BlasHandle* cublasHandle_t;

// cublasGemmEx's types (CUDA_R_32F data with 32F / 32F_FAST_TF32 compute here; CUDA_R_16F in cuda_emu_f16.h).
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2 } cudaDataType_t;
typedef enum {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_PEDANTIC = 69,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;

// ---- Emulator internals ----------------------------------------------------------------

namespace carve_emu {

[[noreturn]] inline void fatal(const char* what) {
  std::fprintf(stderr, "cuda_emu: %s\n", what);
  std::abort();
}

// A unit of stream work: a launch, copy, set or GEMM, run now or recorded by a capture.
using Work = std::function<void()>;

// What a node is: a copy, set or event record; a kernel that waits for all of the work before it (cuBLAS's); or one
// launched with programmatic dependent launch allowed (CARVE_LAUNCH's, as carve_cuda.h launches with nvcc), whose
// edges from the kernels before it a capture makes programmatic (cudaGraphDependencyTypeProgrammatic).
enum NodeKind { kNodeOther, kNodeKernel, kNodeProgrammatic };

// A node of a captured graph: its work, the stream that recorded it (the interleaved replay's round robin),
// the nodes it depends on (indices of earlier nodes) and its kind.
struct Node {
  Work work;
  unsigned stream;
  std::vector<size_t> deps;
  NodeKind kind;
};

struct Graph {
  std::vector<Node> nodes;
};

struct GraphExec {
  std::vector<Work> order;  // the nodes' work in the replay order (instantiate)
};

struct Stream {
  unsigned magic;
  bool capturing;
  bool invalidated;
  Graph* graph;  // being recorded while capturing (shared by the streams that joined the origin's capture)
  bool origin;   // the stream that began the capture (the others joined it through events)
  std::vector<size_t> tail;  // capturing: the nodes the stream's next node depends on
  unsigned id;   // the number the interleaved replay orders streams by
};

struct Event {
  unsigned magic;
  std::chrono::steady_clock::time_point t;
  Graph* graph;               // recorded in a capture of this graph (nullptr: not captured)
  std::vector<size_t> nodes;  // the capture's nodes the record followed
};

struct BlasHandle {
  unsigned magic;
  cudaStream_t stream;
  cublasMath_t math;
  void* workspace;
  size_t workspace_bytes;
};

constexpr unsigned kStreamMagic = 0x5354524du, kEventMagic = 0x45564e54u, kBlasMagic = 0x424c4153u;

// Calls of the allocating API, counted for the tests of caller-owned memory (create_with
// must make none): read and reset through carve_emu_allocs().
struct Allocs {
  size_t cuda_malloc = 0;       // cudaMalloc
  size_t cuda_malloc_host = 0;  // cudaMallocHost (pinned host memory)
  size_t blas_create = 0;       // cublasCreate
};

struct State {
  cudaError_t last_error = cudaSuccess;
  std::vector<Stream*> capturing;  // streams capturing now
  Stream legacy = {kStreamMagic, false, false, nullptr, false, {}, 0};  // stream 0
  unsigned streams = 0;            // streams created (their ids)
  Allocs allocs;
};

inline State& state() {
  static thread_local State s;
  return s;
}

inline cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess && state().last_error == cudaSuccess) {
    state().last_error = e;
  }
  return e;
}

inline Stream* stream_of(cudaStream_t s) {
  Stream* st = s == nullptr ? &state().legacy : s;
  return st->magic == kStreamMagic ? st : nullptr;
}

// A synchronous call while any stream captures (cudaStreamCaptureModeGlobal) is an error
// that also invalidates the capture.
inline bool sync_forbidden() {
  if (state().capturing.empty()) {
    return false;
  }
  for (Stream* s : state().capturing) {
    s->invalidated = true;
  }
  set_error(cudaErrorStreamCaptureUnsupported);
  return true;
}

inline void stop_capture(Stream* st) {
  st->capturing = false;
  std::vector<Stream*>& c = state().capturing;
  c.erase(std::remove(c.begin(), c.end(), st), c.end());
}

// Enqueues work on a stream: recorded when it captures, otherwise run now.
inline cudaError_t enqueue(cudaStream_t s, Work w, NodeKind kind = kNodeOther) {
  Stream* st = stream_of(s);
  if (st == nullptr) {
    return cudaErrorInvalidResourceHandle;
  }
  if (st->capturing) {
    st->graph->nodes.push_back(Node{std::move(w), st->id, st->tail, kind});
    st->tail.assign(1, st->graph->nodes.size() - 1);
  } else {
    w();
  }
  return cudaSuccess;
}

// The order cudaGraphInstantiate replays a graph's nodes in: as recorded, or with
// CARVE_EMU_GRAPH_ORDER=interleave the ready node (all its dependencies done) of the stream that comes next
// after the last node's stream (ids in creation order, wrapping; ties: the earliest recorded).
inline std::vector<Work> replay_order(const Graph& g) {
  std::vector<Work> order;
  const char* env = std::getenv("CARVE_EMU_GRAPH_ORDER");
  if (env == nullptr || std::strcmp(env, "interleave") != 0) {
    for (const Node& n : g.nodes) {
      order.push_back(n.work);
    }
    return order;
  }
  std::vector<char> done(g.nodes.size(), 0);
  unsigned last = 0;
  for (size_t count = 0; count < g.nodes.size(); count++) {
    size_t pick = g.nodes.size();
    unsigned best = 0;
    for (size_t i = 0; i < g.nodes.size(); i++) {
      if (done[i]) continue;
      bool ready = true;
      for (size_t d : g.nodes[i].deps) ready = ready && done[d];
      const unsigned dist = g.nodes[i].stream - last - 1u;  // unsigned wrap: streams after `last` first
      if (ready && (pick == g.nodes.size() || dist < best)) {
        pick = i;
        best = dist;
      }
    }
    done[pick] = 1;
    last = g.nodes[pick].stream;
    order.push_back(g.nodes[pick].work);
  }
  return order;
}

// ---- Fibers ------------------------------------------------------------------------------
//
// Each thread of a block that synchronises runs on its own stack; `switch_to` saves the
// callee-saved state of the running context and resumes another. On x86-64 Linux this is
// a few instructions (below); elsewhere ucontext (which also saves the signal mask: slower).

constexpr size_t kFiberStack = 128 * 1024;  // bytes per thread's stack
constexpr unsigned kMaxThreads = 1024;

#if defined(__x86_64__) && defined(__linux__)
extern "C" void carve_emu_switch(void** save_sp, void* load_sp);
// carve_emu_switch(save, load): push rbp, rbx, r12-r15 and the MXCSR / x87 control words,
// store rsp in *save, load rsp from `load`, pop the same, return into the other context.
// Weak, so that every translation unit may define it.
asm(R"(
  .text
  .weak carve_emu_switch
  .type carve_emu_switch, @function
carve_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size carve_emu_switch, .-carve_emu_switch
)");
#endif

struct Fiber {
#if defined(__x86_64__) && defined(__linux__)
  void* sp;
#else
  ucontext_t ctx;
#endif
  uint3 tid;
  unsigned linear;
  bool started, done;
  void* asan_fake;  // AddressSanitizer's fake stack of the fiber while switched out
};

struct Barrier {
  unsigned arrived = 0;
  unsigned alive = 0;
  unsigned long long generation = 0;
};

struct Block {
  const Work* body = nullptr;       // runs one thread: the kernel with its arguments
  unsigned n = 0;                   // threads
  Fiber fibers[kMaxThreads];
  unsigned current = 0;             // running fiber
  bool fiber_mode = false;          // the running thread is on a fiber
  Barrier block_bar;
  Barrier warp_bar[kMaxThreads / 32];
  alignas(8) unsigned char lane_slot[kMaxThreads][8];  // shuffle / ballot exchange
#if defined(__x86_64__) && defined(__linux__)
  void* sched_sp = nullptr;
  const void* sched_stack = nullptr;  // the scheduler's stack (for AddressSanitizer)
  size_t sched_stack_size = 0;
#else
  ucontext_t sched_ctx;
#endif
  unsigned char* stacks = nullptr;  // kMaxThreads * kFiberStack, reserved once
};

inline Block& block() {
  static thread_local std::unique_ptr<Block> b(new Block());
  return *b;
}

inline unsigned char* stack_of(Block& b, unsigned i) {
  if (b.stacks == nullptr) {
    void* p = mmap(nullptr, (size_t)kMaxThreads * kFiberStack, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      fatal("cannot reserve fiber stacks");
    }
    b.stacks = static_cast<unsigned char*>(p);
  }
  return b.stacks + (size_t)i * kFiberStack;
}

inline void set_thread(const Fiber& f) { threadIdx = f.tid; }

// AddressSanitizer's fiber protocol: start_switch before each switch (fake = NULL when the
// stack being left dies), finish_switch first thing after arriving.
inline void asan_start(void** fake, const void* bottom, size_t size) {
#ifdef CARVE_EMU_ASAN
  __sanitizer_start_switch_fiber(fake, bottom, size);
#else
  (void)fake, (void)bottom, (void)size;
#endif
}
inline void asan_finish(void* fake, const void** bottom_old, size_t* size_old) {
#ifdef CARVE_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, bottom_old, size_old);
#else
  (void)fake, (void)bottom_old, (void)size_old;
#endif
}

// Runs on a fiber's own stack: the thread's body, then back to the scheduler for good.
inline void fiber_main() {
  Block& b = block();
  asan_finish(nullptr, &b.sched_stack, &b.sched_stack_size);
  (*b.body)();
  Fiber& f = b.fibers[b.current];
  f.done = true;
  // Exited threads stop counting for barriers; release a barrier they were the last for.
  Barrier& wb = b.warp_bar[f.linear / 32];
  wb.alive--;
  if (wb.arrived != 0 && wb.arrived == wb.alive) {
    wb.arrived = 0;
    wb.generation++;
  }
  b.block_bar.alive--;
  if (b.block_bar.arrived != 0 && b.block_bar.arrived == b.block_bar.alive) {
    b.block_bar.arrived = 0;
    b.block_bar.generation++;
  }
  asan_start(nullptr, b.sched_stack, b.sched_stack_size);
#if defined(__x86_64__) && defined(__linux__)
  void* dead;
  carve_emu_switch(&dead, b.sched_sp);
#else
  setcontext(&b.sched_ctx);
#endif
  fatal("a finished fiber was resumed");
}

#if defined(__x86_64__) && defined(__linux__)
extern "C" inline void carve_emu_fiber_entry() { fiber_main(); }
#else
inline void fiber_entry_uc() { fiber_main(); }
#endif

inline void fiber_init(Block& b, unsigned i) {
  Fiber& f = b.fibers[i];
  f.started = true;
  f.done = false;
#ifdef CARVE_EMU_ASAN
  // A stack reused from an earlier block still carries the poison of its dead frames.
  __asan_unpoison_memory_region(stack_of(b, i), kFiberStack);
#endif
#if defined(__x86_64__) && defined(__linux__)
  // Initial frame popped by carve_emu_switch: control words, six zero registers, the
  // return address carve_emu_fiber_entry (entered with rsp % 16 == 8, as after a call).
  uintptr_t top = (uintptr_t)(stack_of(b, i) + kFiberStack) & ~(uintptr_t)15;
  uint64_t* sp = reinterpret_cast<uint64_t*>(top - 16);
  sp[1] = 0;
  sp[0] = (uint64_t)(uintptr_t)&carve_emu_fiber_entry;
  for (int r = 0; r < 6; r++) {
    *--sp = 0;
  }
  --sp;
  const uint32_t mxcsr = 0x1F80;
  const uint16_t fpucw = 0x037F;
  std::memcpy(sp, &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(sp) + 4, &fpucw, 2);
  f.sp = sp;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = stack_of(b, i);
  f.ctx.uc_stack.ss_size = kFiberStack;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, (void (*)())fiber_entry_uc, 0);
#endif
}

inline void resume(Block& b, unsigned i) {
  b.current = i;
  set_thread(b.fibers[i]);
  void* fake = nullptr;
  asan_start(&fake, stack_of(b, i), kFiberStack);
#if defined(__x86_64__) && defined(__linux__)
  carve_emu_switch(&b.sched_sp, b.fibers[i].sp);
#else
  swapcontext(&b.sched_ctx, &b.fibers[i].ctx);
#endif
  asan_finish(fake, nullptr, nullptr);
}

// From a fiber back to the scheduler (called at barriers).
inline void yield() {
  Block& b = block();
  Fiber& f = b.fibers[b.current];
  asan_start(&f.asan_fake, b.sched_stack, b.sched_stack_size);
#if defined(__x86_64__) && defined(__linux__)
  carve_emu_switch(&f.sp, b.sched_sp);
#else
  swapcontext(&f.ctx, &b.sched_ctx);
#endif
  asan_finish(f.asan_fake, &b.sched_stack, &b.sched_stack_size);
  set_thread(f);  // the scheduler set it already; kept for clarity
}

// Waits until every live participant of `bar` has arrived.
inline void barrier_wait(Barrier& bar, const char* what) {
  Block& b = block();
  if (!b.fiber_mode) {
    std::fprintf(stderr, "cuda_emu: %s reached by thread (%u, %u, %u) of block (%u, %u, %u) after thread 0 "
                 "finished without it (a barrier in divergent code)\n", what, threadIdx.x, threadIdx.y,
                 threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z);
    std::abort();
  }
  if (++bar.arrived == bar.alive) {
    bar.arrived = 0;
    bar.generation++;
    return;
  }
  const unsigned long long gen = bar.generation;
  while (bar.generation == gen) {
    yield();
  }
}

// Runs one block: thread 0 on a fiber; the rest as plain calls if it never waited,
// otherwise every thread on its fiber, round robin, until all have finished. reverse (CARVE_EMU_THREAD_ORDER):
// after thread 0, the others from the last to the first (plain calls or round robin alike).
inline void run_block(Block& b, bool reverse) {
  const unsigned n = b.n;
  b.block_bar = Barrier();
  b.block_bar.alive = n;
  for (unsigned w = 0; w < (n + 31) / 32; w++) {
    b.warp_bar[w] = Barrier();
    b.warp_bar[w].alive = std::min(32u, n - 32 * w);
  }
  for (unsigned i = 0; i < n; i++) {
    Fiber& f = b.fibers[i];
    f.linear = i;
    f.tid.x = i % blockDim.x;
    f.tid.y = (i / blockDim.x) % blockDim.y;
    f.tid.z = i / (blockDim.x * blockDim.y);
    f.started = false;
    f.done = false;
  }
  b.fiber_mode = true;
  fiber_init(b, 0);
  resume(b, 0);
  // the k-th thread to run: 0 first, then 1 up to n - 1 (reverse: n - 1 down to 1)
  auto nth = [n, reverse](unsigned k) { return reverse && k != 0 ? n - k : k; };
  if (b.fibers[0].done) {
    b.fiber_mode = false;
    for (unsigned k = 1; k < n; k++) {
      b.current = nth(k);
      set_thread(b.fibers[b.current]);
      (*b.body)();
    }
    return;
  }
  for (unsigned i = 1; i < n; i++) {
    fiber_init(b, i);
  }
  unsigned remaining = n;
  while (remaining != 0) {
    remaining = 0;
    for (unsigned k = 0; k < n; k++) {
      const unsigned i = nth(k);
      if (!b.fibers[i].done) {
        resume(b, i);
        remaining += !b.fibers[i].done;
      }
    }
  }
  b.fiber_mode = false;
}

inline bool launch_config_ok(dim3 grid, dim3 blk) {
  const unsigned long long threads = (unsigned long long)blk.x * blk.y * blk.z;
  return grid.x != 0 && grid.y != 0 && grid.z != 0 && blk.x != 0 && blk.y != 0 && blk.z != 0 &&
         threads <= kMaxThreads && blk.x <= 1024 && blk.y <= 1024 && blk.z <= 64 &&
         grid.x <= 0x7FFFFFFFu && grid.y <= 65535 && grid.z <= 65535;
}

// Runs every block of a launch; `thread_body` runs one thread.
inline void run_grid(dim3 grid, dim3 blk, const Work& thread_body) {
  Block& b = block();
  if (b.body != nullptr) {
    fatal("kernel launched from a kernel (dynamic parallelism is not emulated)");
  }
  b.body = &thread_body;
  b.n = blk.x * blk.y * blk.z;
  gridDim = grid;
  blockDim = blk;
  const char* order = std::getenv("CARVE_EMU_BLOCK_ORDER");
  const bool reverse = order != nullptr && std::strcmp(order, "reverse") == 0;
  const char* thread_order = std::getenv("CARVE_EMU_THREAD_ORDER");
  const bool threads_reversed = thread_order != nullptr && std::strcmp(thread_order, "reverse") == 0;
  for (unsigned z = 0; z < grid.z; z++) {
    for (unsigned y = 0; y < grid.y; y++) {
      for (unsigned x = 0; x < grid.x; x++) {
        blockIdx = reverse ? uint3{grid.x - 1 - x, grid.y - 1 - y, grid.z - 1 - z} : uint3{x, y, z};
        run_block(b, threads_reversed);
      }
    }
  }
  b.body = nullptr;
}

// CARVE_LAUNCH: checks the configuration, binds the arguments by value (converted to the
// kernel's parameter types, as a launch does) and runs or records the grid.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 blk, cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "CARVE_LAUNCH: wrong number of kernel arguments");
  if (!launch_config_ok(grid, blk)) {
    set_error(cudaErrorInvalidConfiguration);
    return;
  }
  std::tuple<std::decay_t<P>...> bound(static_cast<std::decay_t<P>>(std::forward<A>(args))...);
  Work w = [kernel, grid, blk, bound]() {
    const Work body = [&]() { std::apply(kernel, bound); };
    run_grid(grid, blk, body);
  };
  set_error(enqueue(stream, std::move(w), kNodeProgrammatic));
}

template <typename T>
inline unsigned long long to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type wider than 8 bytes");
  unsigned long long u = 0;
  std::memcpy(&u, &v, sizeof v);
  return u;
}

template <typename T>
inline T from_bits(unsigned long long u) {
  T v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

inline unsigned linear_tid() { return block().fibers[block().current].linear; }

// Every live lane of the warp publishes `v`, then reads lane `src` (same warp) of it.
template <typename T>
inline T warp_exchange(T v, int src_lane, const char* what) {
  Block& b = block();
  const unsigned me = linear_tid(), base = me & ~31u;
  const unsigned long long u = to_bits(v);
  std::memcpy(b.lane_slot[me], &u, 8);
  barrier_wait(b.warp_bar[me / 32], what);
  unsigned long long r;
  const unsigned src = base + (unsigned)src_lane;
  std::memcpy(&r, b.lane_slot[src < b.n ? src : me], 8);
  barrier_wait(b.warp_bar[me / 32], what);
  return from_bits<T>(r);
}

}  // namespace carve_emu

#define CARVE_LAUNCH(kernel, grid, block, stream, ...) \
  carve_emu::launch((kernel), dim3(grid), dim3(block), (stream), __VA_ARGS__)

// cuda_pipeline.h's asynchronous copies (the fused convolution's asynchronous stages): done at once, so that waiting
// is a no-op; size_and_align - zfill bytes copied, zfill bytes zeroed (all 16 zeroed: src not read).
inline void __pipeline_memcpy_async(void* dst, const void* src, size_t size_and_align, size_t zfill = 0) {
  if (size_and_align != 4 && size_and_align != 8 && size_and_align != 16) std::abort();
  if ((uintptr_t)dst % size_and_align != 0 || (zfill < size_and_align && (uintptr_t)src % size_and_align != 0)) {
    std::fprintf(stderr, "cuda_emu: __pipeline_memcpy_async: pointers not %zu-byte aligned\n", size_and_align);
    std::abort();
  }
  if (zfill < size_and_align) std::memcpy(dst, src, size_and_align - zfill);
  std::memset((char*)dst + (size_and_align - zfill), 0, zfill);
}
inline void __pipeline_commit() {}
inline void __pipeline_wait_prior(size_t) {}

// Tactics (carve_cuda.h): the emulation's times are the host's, so generated packages do not tune by default
// here (options.conv_tune 0; a test asks for it), and a timing is one launch replayed once (every replay is
// "long").
#define CARVE_CU_TUNE_DEFAULT 0
#define CARVE_CU_TUNE_LAUNCHES 1
#define CARVE_CU_TUNE_REPLAYS 1
#define CARVE_CU_TUNE_LONG_MS 0.0f

// ---- Device functions --------------------------------------------------------------------

inline void __syncthreads() { carve_emu::barrier_wait(carve_emu::block().block_bar, "__syncthreads"); }

inline void __syncwarp(unsigned mask = 0xFFFFFFFFu) {
  (void)mask;
  carve_emu::Block& b = carve_emu::block();
  carve_emu::barrier_wait(b.warp_bar[carve_emu::linear_tid() / 32], "__syncwarp");
}

template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  (void)mask;
  if (width != 32) carve_emu::fatal("__shfl_sync: only width 32 is emulated");
  return carve_emu::warp_exchange(v, src_lane & 31, "__shfl_sync");
}

template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  (void)mask;
  if (width != 32) carve_emu::fatal("__shfl_xor_sync: only width 32 is emulated");
  const int lane = (int)(carve_emu::linear_tid() & 31u);
  return carve_emu::warp_exchange(v, (lane ^ lane_mask) & 31, "__shfl_xor_sync");
}

template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  (void)mask;
  if (width != 32) carve_emu::fatal("__shfl_down_sync: only width 32 is emulated");
  const unsigned lane = carve_emu::linear_tid() & 31u;
  return carve_emu::warp_exchange(v, (int)(lane + delta < 32 ? lane + delta : lane), "__shfl_down_sync");
}

template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  (void)mask;
  if (width != 32) carve_emu::fatal("__shfl_up_sync: only width 32 is emulated");
  const unsigned lane = carve_emu::linear_tid() & 31u;
  return carve_emu::warp_exchange(v, (int)(lane >= delta ? lane - delta : lane), "__shfl_up_sync");
}

namespace carve_emu {
// Bit i of the result: live lane i of this warp published a value v (every live lane publishes its `mine`) for
// which keep(v) holds. The exchange of __ballot_sync and __match_any_sync.
template <typename Keep>
inline unsigned warp_mask(unsigned long long mine, Keep keep, const char* what) {
  Block& b = block();
  const unsigned me = linear_tid(), base = me & ~31u;
  std::memcpy(b.lane_slot[me], &mine, 8);
  barrier_wait(b.warp_bar[me / 32], what);
  unsigned r = 0;
  for (unsigned l = 0; l < 32 && base + l < b.n; l++) {
    unsigned long long v;
    std::memcpy(&v, b.lane_slot[base + l], 8);
    if (keep(v) && !b.fibers[base + l].done) r |= 1u << l;
  }
  barrier_wait(b.warp_bar[me / 32], what);
  return r;
}
}  // namespace carve_emu

// Bit i of the result: the predicate of lane i (live lanes only).
inline unsigned __ballot_sync(unsigned mask, int pred) {
  (void)mask;
  return carve_emu::warp_mask(pred != 0, [](unsigned long long v) { return v != 0; }, "__ballot_sync");
}

// Bit i of the result: lane i (live) holds the same value as this lane.
inline unsigned __match_any_sync(unsigned mask, unsigned value) {
  (void)mask;
  return carve_emu::warp_mask(value, [value](unsigned long long v) { return v == value; }, "__match_any_sync");
}

inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  carve_emu::Block& b = carve_emu::block();
  const unsigned base = carve_emu::linear_tid() & ~31u;
  unsigned live = 0;
  for (unsigned l = 0; l < 32 && base + l < b.n; l++) {
    if (!b.fibers[base + l].done) live |= 1u << l;
  }
  return __ballot_sync(mask, pred) == live;
}

// Atomics: a fiber never switches inside one, so a plain update is atomic here.
inline int atomicAdd(int* p, int v) { const int o = *p; *p = o + v; return o; }
inline unsigned atomicAdd(unsigned* p, unsigned v) { const unsigned o = *p; *p = o + v; return o; }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  const unsigned long long o = *p; *p = o + v; return o;
}
inline float atomicAdd(float* p, float v) { const float o = *p; *p = o + v; return o; }
inline int atomicMax(int* p, int v) { const int o = *p; *p = std::max(o, v); return o; }
inline unsigned atomicMax(unsigned* p, unsigned v) { const unsigned o = *p; *p = std::max(o, v); return o; }
inline int atomicMin(int* p, int v) { const int o = *p; *p = std::min(o, v); return o; }
inline unsigned atomicMin(unsigned* p, unsigned v) { const unsigned o = *p; *p = std::min(o, v); return o; }
inline int atomicCAS(int* p, int cmp, int v) { const int o = *p; if (o == cmp) *p = v; return o; }
inline unsigned atomicCAS(unsigned* p, unsigned cmp, unsigned v) { const unsigned o = *p; if (o == cmp) *p = v; return o; }
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long cmp, unsigned long long v) {
  const unsigned long long o = *p; if (o == cmp) *p = v; return o;
}
inline int atomicExch(int* p, int v) { const int o = *p; *p = v; return o; }
inline unsigned atomicExch(unsigned* p, unsigned v) { const unsigned o = *p; *p = v; return o; }
inline float atomicExch(float* p, float v) { const float o = *p; *p = v; return o; }

// Bit casts and bit counts.
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline int __float_as_int(float f) { int u; std::memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
template <typename T>
inline T __ldg(const T* p) { return *p; }
template <typename T>
inline T __ldcg(const T* p) { return *p; }
template <typename T>
inline void __stcg(T* p, T v) { *p = v; }
// Blocks run one after another: every write is visible to the next block without a fence.
inline void __threadfence() {}

// Correctly rounded arithmetic that nvcc never contracts into an FMA: the host build is
// ISO C++ (-std=c++17: -ffp-contract=off), so plain operations are the same.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }

// ---- Runtime API -------------------------------------------------------------------------

inline cudaError_t cudaGetLastError() {
  const cudaError_t e = carve_emu::state().last_error;
  carve_emu::state().last_error = cudaSuccess;
  return e;
}
inline cudaError_t cudaPeekAtLastError() { return carve_emu::state().last_error; }

inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorLossyQuery: return "cudaErrorLossyQuery";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    default: return "cudaErrorUnknown";
  }
}

inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorLossyQuery: return "attempted introspection would be lossy";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    default: return "unknown error";
  }
}

inline cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidValue; }
inline cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return cudaErrorInvalidValue;
  *device = 0;
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return cudaErrorInvalidValue;
  *count = 1;
  return cudaSuccess;
}

// The attributes asked here; the emulated device reports compute capability 9.0.
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
};
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr || device != 0) return cudaErrorInvalidValue;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 1; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

inline cudaError_t cudaDeviceSynchronize() {
  return carve_emu::sync_forbidden() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

// The allocation counters of this thread (tests only; not a CUDA API).
inline carve_emu::Allocs& carve_emu_allocs() { return carve_emu::state().allocs; }

inline cudaError_t cudaMalloc(void** p, size_t bytes) {
  carve_emu::state().allocs.cuda_malloc++;
  if (p == nullptr) return cudaErrorInvalidValue;
  if (carve_emu::sync_forbidden()) return cudaErrorStreamCaptureUnsupported;
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  void* q = std::aligned_alloc(256, (bytes + 255) & ~(size_t)255);
  if (q == nullptr) return carve_emu::set_error(cudaErrorMemoryAllocation);
  *p = q;
  return cudaSuccess;
}
template <typename T>
inline cudaError_t cudaMalloc(T** p, size_t bytes) { return cudaMalloc(reinterpret_cast<void**>(p), bytes); }

inline cudaError_t cudaFree(void* p) {
  if (carve_emu::sync_forbidden()) return cudaErrorStreamCaptureUnsupported;
  std::free(p);
  return cudaSuccess;
}

inline cudaError_t cudaMallocHost(void** p, size_t bytes) {
  carve_emu::state().allocs.cuda_malloc_host++;
  if (p == nullptr) return cudaErrorInvalidValue;
  *p = bytes == 0 ? nullptr : std::aligned_alloc(256, (bytes + 255) & ~(size_t)255);
  return bytes != 0 && *p == nullptr ? cudaErrorMemoryAllocation : cudaSuccess;
}
template <typename T>
inline cudaError_t cudaMallocHost(T** p, size_t bytes) { return cudaMallocHost(reinterpret_cast<void**>(p), bytes); }
inline cudaError_t cudaFreeHost(void* p) { std::free(p); return cudaSuccess; }

inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                   cudaStream_t stream = nullptr) {
  if ((int)kind < 0 || (int)kind > 4) return cudaErrorInvalidMemcpyDirection;
  if (bytes != 0 && (dst == nullptr || src == nullptr)) return cudaErrorInvalidValue;
  if (bytes == 0) return cudaSuccess;
  return carve_emu::enqueue(stream, [dst, src, bytes]() { std::memmove(dst, src, bytes); });
}

inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (carve_emu::sync_forbidden()) return cudaErrorStreamCaptureUnsupported;
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}

inline cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = nullptr) {
  if (bytes != 0 && dst == nullptr) return cudaErrorInvalidValue;
  if (bytes == 0) return cudaSuccess;
  return carve_emu::enqueue(stream, [dst, value, bytes]() { std::memset(dst, value, bytes); });
}

inline cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  if (carve_emu::sync_forbidden()) return cudaErrorStreamCaptureUnsupported;
  return cudaMemsetAsync(dst, value, bytes, nullptr);
}

// Streams.
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  (void)flags;
  if (s == nullptr) return cudaErrorInvalidValue;
  *s = new carve_emu::Stream{carve_emu::kStreamMagic, false, false, nullptr, false, {}, ++carve_emu::state().streams};
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  carve_emu::Stream* st = carve_emu::stream_of(s);
  if (s == nullptr || st == nullptr) return cudaErrorInvalidResourceHandle;
  if (st->capturing) {
    carve_emu::stop_capture(st);
    if (st->origin) {
      delete st->graph;
    }
  }
  st->magic = 0;
  delete st;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (carve_emu::stream_of(s) == nullptr) return cudaErrorInvalidResourceHandle;
  return carve_emu::sync_forbidden() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  (void)mode;
  carve_emu::Stream* st = carve_emu::stream_of(s);
  if (st == nullptr) return cudaErrorInvalidResourceHandle;
  if (s == nullptr) return cudaErrorStreamCaptureUnsupported;  // the legacy stream cannot capture
  if (st->capturing) return cudaErrorIllegalState;
  st->capturing = true;
  st->invalidated = false;
  st->graph = new carve_emu::Graph();
  st->origin = true;
  st->tail.clear();
  carve_emu::state().capturing.push_back(st);
  return cudaSuccess;
}

inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  carve_emu::Stream* st = carve_emu::stream_of(s);
  if (st == nullptr) return cudaErrorInvalidResourceHandle;
  if (!st->capturing) return cudaErrorIllegalState;
  if (!st->origin) return cudaErrorStreamCaptureUnmatched;  // a joined stream cannot end the capture
  if (graph == nullptr) return cudaErrorInvalidValue;
  // Every stream that joined must have been joined back: its last node an ancestor of the origin's tail.
  std::vector<char> reach(st->graph->nodes.size(), 0);
  std::vector<size_t> todo(st->tail);
  while (!todo.empty()) {
    const size_t n = todo.back();
    todo.pop_back();
    if (!reach[n]) {
      reach[n] = 1;
      todo.insert(todo.end(), st->graph->nodes[n].deps.begin(), st->graph->nodes[n].deps.end());
    }
  }
  bool unjoined = false;
  for (carve_emu::Stream* other : std::vector<carve_emu::Stream*>(carve_emu::state().capturing)) {
    if (other != st && other->graph == st->graph) {
      for (size_t n : other->tail) {
        unjoined = unjoined || !reach[n];
      }
      carve_emu::stop_capture(other);
      other->graph = nullptr;
    }
  }
  carve_emu::stop_capture(st);
  if (unjoined) {
    delete st->graph;
    st->graph = nullptr;
    *graph = nullptr;
    return cudaErrorStreamCaptureUnjoined;
  }
  if (st->invalidated) {
    delete st->graph;
    st->graph = nullptr;
    *graph = nullptr;
    return cudaErrorStreamCaptureInvalidated;
  }
  *graph = st->graph;
  st->graph = nullptr;
  return cudaSuccess;
}

inline cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  carve_emu::Stream* st = carve_emu::stream_of(s);
  if (st == nullptr) return cudaErrorInvalidResourceHandle;
  if (status == nullptr) return cudaErrorInvalidValue;
  *status = !st->capturing ? cudaStreamCaptureStatusNone
                           : (st->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive);
  return cudaSuccess;
}

// Graphs: a graph is the list of recorded work; an executable graph a copy of it.
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0) {
  (void)flags;
  if (exec == nullptr || graph == nullptr) return cudaErrorInvalidValue;
  *exec = new carve_emu::GraphExec{carve_emu::replay_order(*graph)};
  return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return cudaErrorInvalidValue;
  carve_emu::Stream* st = carve_emu::stream_of(stream);
  if (st == nullptr) return cudaErrorInvalidResourceHandle;
  if (st->capturing) return cudaErrorStreamCaptureUnsupported;  // child graphs are not emulated
  for (const carve_emu::Work& w : exec->order) {
    w();
  }
  return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { delete exec; return cudaSuccess; }
inline cudaError_t cudaGraphDestroy(cudaGraph_t graph) { delete graph; return cudaSuccess; }
// A node's handle: its index + 1 (never NULL), as opaque as a GPU's.
inline cudaGraphNode_t carve_emu_node_handle(size_t i) { return reinterpret_cast<cudaGraphNode_t>(i + 1); }
// Nodes in recording order; with an array, the first *count of them, the rest of it NULL, *count the number
// written (CUDA's rules).
inline cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (graph == nullptr || count == nullptr) return cudaErrorInvalidValue;
  const size_t n = graph->nodes.size();
  if (nodes != nullptr) {
    for (size_t i = 0; i < *count; i++) nodes[i] = i < n ? carve_emu_node_handle(i) : nullptr;
    if (*count > n) *count = n;
    return cudaSuccess;
  }
  *count = n;
  return cudaSuccess;
}
// Edges (a dependency d -> node i), in node order; from / to (and edge_data) as cudaGraphGetNodes' array: the
// first *count edges, the rest NULL (zeroed data), *count the number written. An edge into a CARVE_LAUNCH kernel
// from a kernel is programmatic; a query of the edges without edge_data when one is fails with
// cudaErrorLossyQuery (CUDA's rule), also as the last error.
inline cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t* from, cudaGraphNode_t* to,
                                     cudaGraphEdgeData* edge_data, size_t* count) {
  if (graph == nullptr || count == nullptr || (from == nullptr) != (to == nullptr) ||
      (edge_data != nullptr && from == nullptr)) {
    return cudaErrorInvalidValue;
  }
  size_t e = 0;
  for (size_t i = 0; i < graph->nodes.size(); i++) {
    for (size_t d : graph->nodes[i].deps) {
      const bool programmatic = graph->nodes[i].kind == carve_emu::kNodeProgrammatic &&
                                graph->nodes[d].kind != carve_emu::kNodeOther;
      if (from != nullptr && programmatic && edge_data == nullptr) {
        return carve_emu::set_error(cudaErrorLossyQuery);
      }
      if (from != nullptr && e < *count) {
        from[e] = carve_emu_node_handle(d);
        to[e] = carve_emu_node_handle(i);
        if (edge_data != nullptr) {
          edge_data[e] = cudaGraphEdgeData{};
          edge_data[e].type = programmatic ? cudaGraphDependencyTypeProgrammatic : cudaGraphDependencyTypeDefault;
        }
      }
      e++;
    }
  }
  if (from == nullptr) {
    *count = e;
    return cudaSuccess;
  }
  for (size_t k = e; k < *count; k++) {
    from[k] = to[k] = nullptr;
    if (edge_data != nullptr) edge_data[k] = cudaGraphEdgeData{};
  }
  if (*count > e) *count = e;
  return cudaSuccess;
}

// Events: host clock at record time (the work before it is done: every call is synchronous). In a capture,
// a record notes the stream's tail and a wait adds it to the waiting stream's (joining the capture);
// cudaEventRecordWithFlags with cudaEventRecordExternal records a node instead (below).
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  (void)flags;
  if (e == nullptr) return cudaErrorInvalidValue;
  *e = new carve_emu::Event{carve_emu::kEventMagic, std::chrono::steady_clock::now(), nullptr, {}};
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (e == nullptr || e->magic != carve_emu::kEventMagic) return cudaErrorInvalidResourceHandle;
  e->magic = 0;
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream = nullptr) {
  if (e == nullptr || e->magic != carve_emu::kEventMagic) return cudaErrorInvalidResourceHandle;
  carve_emu::Stream* st = carve_emu::stream_of(stream);
  if (st == nullptr) return cudaErrorInvalidResourceHandle;
  if (st->capturing) {  // an edge source, not a node
    e->graph = st->graph;
    e->nodes = st->tail;
    return cudaSuccess;
  }
  e->graph = nullptr;
  e->t = std::chrono::steady_clock::now();
  return cudaSuccess;
}
// cudaEventRecordExternal in a capture: a node of the graph (an event-record node) that records the host clock
// when the graph replays it, as cudaEventRecord does outside a capture; otherwise cudaEventRecord.
#define cudaEventRecordDefault 0x00
#define cudaEventRecordExternal 0x01
inline cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t stream = nullptr, unsigned flags = 0) {
  if (e == nullptr || e->magic != carve_emu::kEventMagic) return cudaErrorInvalidResourceHandle;
  carve_emu::Stream* st = carve_emu::stream_of(stream);
  if (st == nullptr) return cudaErrorInvalidResourceHandle;
  if ((flags & cudaEventRecordExternal) == 0 || !st->capturing) return cudaEventRecord(e, stream);
  return carve_emu::enqueue(stream, [e]() {
    e->graph = nullptr;
    e->t = std::chrono::steady_clock::now();
  });
}
// Outside a capture, work after the wait runs after the event's work: always true here (all work is
// serial). An event recorded in a capture makes the waiting stream's next node depend on the record's
// tail; a stream that was not capturing joins that capture.
inline cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned flags = 0) {
  (void)flags;
  if (e == nullptr || e->magic != carve_emu::kEventMagic) return cudaErrorInvalidResourceHandle;
  carve_emu::Stream* st = carve_emu::stream_of(stream);
  if (st == nullptr) return cudaErrorInvalidResourceHandle;
  if (e->graph == nullptr) {
    return cudaSuccess;
  }
  if (st->capturing && st->graph != e->graph) return cudaErrorStreamCaptureIsolation;
  if (!st->capturing) {
    if (stream == nullptr) return cudaErrorStreamCaptureImplicit;  // the legacy stream cannot join
    st->capturing = true;
    st->invalidated = false;
    st->graph = e->graph;
    st->origin = false;
    st->tail.clear();
    carve_emu::state().capturing.push_back(st);
  }
  for (size_t n : e->nodes) {
    if (std::find(st->tail.begin(), st->tail.end(), n) == st->tail.end()) {
      st->tail.push_back(n);
    }
  }
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (e == nullptr || e->magic != carve_emu::kEventMagic) return cudaErrorInvalidResourceHandle;
  return carve_emu::sync_forbidden() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return cudaErrorInvalidValue;
  if (start == nullptr || end == nullptr || start->magic != carve_emu::kEventMagic ||
      end->magic != carve_emu::kEventMagic) {
    return cudaErrorInvalidResourceHandle;
  }
  *ms = std::chrono::duration<float, std::milli>(end->t - start->t).count();
  return cudaSuccess;
}

// ---- cuBLAS ------------------------------------------------------------------------------

namespace carve_emu {

// v rounded to TF32 (the 10-bit mantissa of the tensor cores' TF32 inputs): round to nearest, ties away
// from zero, as cvt.rna.tf32.f32 (what cuBLAS' TF32 kernels convert their float32 operands with); the
// low 13 bits cleared. Infinities and NaN unchanged.
inline float to_tf32(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) {
    u = (u + 0x1000u) & 0xffffe000u;
  }
  std::memcpy(&v, &u, 4);
  return v;
}

// C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C, column-major, on the host.
// tf32: every element of op(A) and op(B) rounded to TF32 first (to_tf32), float32 accumulation.
// Blocked like a BLAS: per (KC) slice of k and (MC) rows, op(A) is packed into 8-row
// strips a[strip][p][8] and each 4 columns of op(B) into b[p][4]; an 8 x 4 block of C is
// then accumulated in registers over the slice (the compiler vectorises the 8 rows).
// Rows and columns past the edges are packed as zeros and never stored. Optimised as -O3
// whatever the build's level (GCC vectorises the 8 x 4 block only there).
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3")))
#endif
inline void host_sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* A, int lda,
                       const float* B, int ldb, float beta, float* C, int ldc, bool tf32 = false) {
  constexpr int MR = 8, NR = 4, MC = 128, KC = 256;
  for (int j = 0; j < n; j++) {
    float* c = C + (size_t)j * ldc;
    if (beta == 0.0f) {
      for (int i = 0; i < m; i++) c[i] = 0.0f;
    } else if (beta != 1.0f) {
      for (int i = 0; i < m; i++) c[i] *= beta;
    }
  }
  if (k == 0 || alpha == 0.0f) return;
  static thread_local std::vector<float> apack, bpack;
  apack.resize((size_t)MC * KC);
  bpack.resize((size_t)KC * NR);
  auto rd = [&](float v) { return tf32 ? to_tf32(v) : v; };
  auto a_at = [&](int i, int p) { return rd(ta ? A[(size_t)i * lda + p] : A[(size_t)p * lda + i]); };
  auto b_at = [&](int p, int j) { return rd(tb ? B[(size_t)p * ldb + j] : B[(size_t)j * ldb + p]); };
  for (int p0 = 0; p0 < k; p0 += KC) {
    const int kc = std::min(KC, k - p0);
    for (int i0 = 0; i0 < m; i0 += MC) {
      const int mc = std::min(MC, m - i0);
      const int strips = (mc + MR - 1) / MR;
      for (int s = 0; s < strips; s++) {
        float* a = apack.data() + (size_t)s * kc * MR;
        for (int p = 0; p < kc; p++) {
          for (int r = 0; r < MR; r++) {
            const int i = s * MR + r;
            a[(size_t)p * MR + r] = i < mc ? a_at(i0 + i, p0 + p) : 0.0f;
          }
        }
      }
      for (int j0 = 0; j0 < n; j0 += NR) {
        const int nr = std::min(NR, n - j0);
        float* bp = bpack.data();
        for (int p = 0; p < kc; p++) {
          for (int q = 0; q < NR; q++) bp[(size_t)p * NR + q] = q < nr ? b_at(p0 + p, j0 + q) : 0.0f;
        }
        for (int s = 0; s < strips; s++) {
          const float* a = apack.data() + (size_t)s * kc * MR;
          float acc[NR][MR] = {};
          for (int p = 0; p < kc; p++) {
            const float* ap = a + (size_t)p * MR;
            const float* bq = bp + (size_t)p * NR;
            for (int q = 0; q < NR; q++) {
              for (int r = 0; r < MR; r++) acc[q][r] += ap[r] * bq[q];
            }
          }
          const int rows = std::min(MR, mc - s * MR);
          for (int q = 0; q < nr; q++) {
            float* c = C + (size_t)(j0 + q) * ldc + i0 + s * MR;
            for (int r = 0; r < rows; r++) c[r] += alpha * acc[q][r];
          }
        }
      }
    }
  }
}

inline bool blas_ok(cublasHandle_t h) { return h != nullptr && h->magic == kBlasMagic; }

inline cublasStatus_t blas_enqueue(cublasHandle_t h, Work w) {
  return enqueue(h->stream, std::move(w), kNodeKernel) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                                       : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace carve_emu

inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  carve_emu::state().allocs.blas_create++;
  if (h == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *h = new carve_emu::BlasHandle{carve_emu::kBlasMagic, nullptr, CUBLAS_DEFAULT_MATH, nullptr, 0};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
  if (!carve_emu::blas_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->magic = 0;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (!carve_emu::blas_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t* s) {
  if (!carve_emu::blas_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (s == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *s = h->stream;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  if (!carve_emu::blas_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
// The workspace is recorded (the host GEMM needs none); cublasSetStream keeps it here.
inline cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void* workspace, size_t bytes) {
  if (!carve_emu::blas_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (workspace == nullptr && bytes != 0) return CUBLAS_STATUS_INVALID_VALUE;
  h->workspace = workspace;
  h->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t* mode) {
  if (!carve_emu::blas_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->math;
  return CUBLAS_STATUS_SUCCESS;
}

namespace carve_emu {

// cuBLAS' argument checks of a (batched) GEMM: op in {N, T}, sizes >= 0, alpha / beta given, leading
// dimensions >= the rows stored (column-major, op(A) m x k, op(B) k x n, C m x n).
inline bool gemm_args_ok(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb, int ldc,
                         int batch, const void* alpha, const void* beta) {
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || m < 0 || n < 0 ||
      k < 0 || batch < 0 || alpha == nullptr || beta == nullptr) {
    return false;
  }
  const bool a_t = ta == CUBLAS_OP_T, b_t = tb == CUBLAS_OP_T;
  return lda >= std::max(1, a_t ? k : m) && ldb >= std::max(1, b_t ? n : k) && ldc >= std::max(1, m);
}

}  // namespace carve_emu

// cuBLAS' argument checks (carve_emu::gemm_args_ok).
inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                int n, int k, const float* alpha, const float* A, int lda,
                                                long long strideA, const float* B, int ldb, long long strideB,
                                                const float* beta, float* C, int ldc, long long strideC,
                                                int batch) {
  if (!carve_emu::blas_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!carve_emu::gemm_args_ok(ta, tb, m, n, k, lda, ldb, ldc, batch, alpha, beta)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool a_t = ta == CUBLAS_OP_T, b_t = tb == CUBLAS_OP_T;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const float al = *alpha, be = *beta;
  const bool tf32 = h->math == CUBLAS_TF32_TENSOR_OP_MATH;  // cuBLAS' TF32 math mode: TF32 inputs
  return carve_emu::blas_enqueue(h, [=]() {
    for (int b = 0; b < batch; b++) {
      carve_emu::host_sgemm(a_t, b_t, m, n, k, al, A + b * strideA, lda, B + b * strideB, ldb, be, C + b * strideC,
                            ldc, tf32);
    }
  });
}

inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float* alpha, const float* A, int lda, const float* B, int ldb,
                                  const float* beta, float* C, int ldc) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

// cublasGemmEx's float32 half (Atype = Btype = Ctype = CUDA_R_32F, alpha / beta float): compute
// CUBLAS_COMPUTE_32F / _PEDANTIC as cublasSgemm; CUBLAS_COMPUTE_32F_FAST_TF32 rounds both inputs to TF32
// (carve_emu::to_tf32) and accumulates in float32. Other types: CUBLAS_STATUS_NOT_SUPPORTED. cublasGemmEx
// itself (cuda_emu_f16.h) sends CUDA_R_32F operands here and CUDA_R_16F ones to the half GEMM.
inline cublasStatus_t emu_gemm_ex_f32(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* A, cudaDataType_t atype, int lda, const void* B,
                                   cudaDataType_t btype, int ldb, const void* beta, void* C, cudaDataType_t ctype,
                                   int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  if (!carve_emu::blas_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (atype != CUDA_R_32F || btype != CUDA_R_32F || ctype != CUDA_R_32F || algo != CUBLAS_GEMM_DEFAULT ||
      (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
       compute != CUBLAS_COMPUTE_32F_FAST_TF32)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (!carve_emu::gemm_args_ok(ta, tb, m, n, k, lda, ldb, ldc, 1, alpha, beta)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool a_t = ta == CUBLAS_OP_T, b_t = tb == CUBLAS_OP_T;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const float al = *(const float*)alpha, be = *(const float*)beta;
  const float* a = (const float*)A;
  const float* b = (const float*)B;
  float* c = (float*)C;
  const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  return carve_emu::blas_enqueue(
      h, [=]() { carve_emu::host_sgemm(a_t, b_t, m, n, k, al, a, lda, b, ldb, be, c, ldc, tf32); });
}

// y = alpha op(A) x + beta y, A (m, n) column-major.
inline cublasStatus_t cublasSgemv(cublasHandle_t h, cublasOperation_t trans, int m, int n, const float* alpha,
                                  const float* A, int lda, const float* x, int incx, const float* beta, float* y,
                                  int incy) {
  if (!carve_emu::blas_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if ((trans != CUBLAS_OP_N && trans != CUBLAS_OP_T) || m < 0 || n < 0 || lda < std::max(1, m) || incx == 0 ||
      incy == 0 || alpha == nullptr || beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const float al = *alpha, be = *beta;
  const bool t = trans == CUBLAS_OP_T;
  return carve_emu::blas_enqueue(h, [=]() {
    const int ny = t ? n : m, nx = t ? m : n;
    for (int i = 0; i < ny; i++) {
      float acc = 0.0f;
      for (int j = 0; j < nx; j++) {
        const float a = t ? A[(size_t)i * lda + j] : A[(size_t)j * lda + i];
        acc += a * x[(long long)j * incx];
      }
      float& yi = y[(long long)i * incy];
      yi = be == 0.0f ? al * acc : al * acc + be * yi;
    }
  });
}

// ---- Warp matrix ops (nvcuda::wmma) ---------------------------------------------------------
// The subset of <mma.h> described in the first comment (What is emulated). The half operand shape
// (m16n16k16, __half) is enabled by cuda_emu_f16.h's specialisation of carve_emu::WmmaElem.

namespace carve_emu {

// An operand element type of wmma: its storage type and its value as the tensor cores read it.
// Specialised for precision::tf32 below and for __half in cuda_emu_f16.h; others do not exist.
template <typename T>
struct WmmaElem;

[[noreturn]] inline void wmma_fatal(const char* what) {
  std::fprintf(stderr, "cuda_emu: wmma: %s\n", what);
  std::abort();
}

inline void wmma_check(const void* p, unsigned ldm, size_t elem, const char* what) {
  if (((uintptr_t)p & 31u) != 0 || ((size_t)ldm * elem) % 16 != 0) {
    wmma_fatal(what);
  }
}

}  // namespace carve_emu

namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
namespace precision {
struct tf32 {};
}  // namespace precision
enum layout_t { mem_row_major, mem_col_major };

// cvt.rna.tf32.f32: round to TF32's 10-bit mantissa, to nearest, ties away from zero.
inline float __float_to_tf32(float in) { return carve_emu::to_tf32(in); }

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment;

// Operand tiles: every lane holds the whole tile, row-major in x (rows x cols: M x K or K x N).
template <int Rows, int Cols, typename T>
struct operand_fragment {
  typedef typename carve_emu::WmmaElem<T>::storage storage_element_type;
  typedef T element_type;
  enum { num_elements = Rows * Cols, num_storage_elements = Rows * Cols };
  storage_element_type x[Rows * Cols];
};

template <int M, int N, int K, typename T, typename Layout>
class fragment<matrix_a, M, N, K, T, Layout> : public operand_fragment<M, K, T> {};
template <int M, int N, int K, typename T, typename Layout>
class fragment<matrix_b, M, N, K, T, Layout> : public operand_fragment<K, N, T> {};

// Accumulator: lane l holds entries l + 32 j of the M x N tile (row-major numbering).
template <int M, int N, int K>
class fragment<accumulator, M, N, K, float, void> {
 public:
  static_assert((M * N) % 32 == 0, "wmma accumulator tile");
  typedef float storage_element_type;
  typedef float element_type;
  enum { num_elements = M * N / 32, num_storage_elements = M * N / 32 };
  float x[M * N / 32];
};

template <typename Frag, typename V>
inline void fill_fragment(Frag& f, const V& v) {
  for (int i = 0; i < (int)Frag::num_elements; i++) f.x[i] = v;
}

// matrix_a (M x K): row_major reads p[r ldm + c], col_major p[c ldm + r].
template <int M, int N, int K, typename T, typename Layout, typename S>
inline void load_matrix_sync(fragment<matrix_a, M, N, K, T, Layout>& f, const S* p, unsigned ldm) {
  static_assert(std::is_same<S, typename carve_emu::WmmaElem<T>::storage>::value, "wmma: pointer type");
  carve_emu::wmma_check(p, ldm, sizeof(S),
                        "load_matrix_sync(matrix_a): pointer not 32-byte aligned or ldm not 16 bytes");
  const bool rm = std::is_same<Layout, row_major>::value;
  for (int r = 0; r < M; r++) {
    for (int c = 0; c < K; c++) f.x[r * K + c] = rm ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
  }
}

// matrix_b (K x N): row_major reads p[k ldm + n], col_major p[n ldm + k].
template <int M, int N, int K, typename T, typename Layout, typename S>
inline void load_matrix_sync(fragment<matrix_b, M, N, K, T, Layout>& f, const S* p, unsigned ldm) {
  static_assert(std::is_same<S, typename carve_emu::WmmaElem<T>::storage>::value, "wmma: pointer type");
  carve_emu::wmma_check(p, ldm, sizeof(S),
                        "load_matrix_sync(matrix_b): pointer not 32-byte aligned or ldm not 16 bytes");
  const bool rm = std::is_same<Layout, row_major>::value;
  for (int k = 0; k < K; k++) {
    for (int n = 0; n < N; n++) f.x[k * N + n] = rm ? p[(size_t)k * ldm + n] : p[(size_t)n * ldm + k];
  }
}

// The lane's entries of the accumulator tile to p (mem_row_major: p[r ldm + c]; mem_col_major: p[c ldm + r]).
template <int M, int N, int K>
inline void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm,
                              layout_t layout) {
  carve_emu::wmma_check(p, ldm, sizeof(float), "store_matrix_sync: pointer not 32-byte aligned or ldm not 16 bytes");
  const unsigned lane = carve_emu::linear_tid() % 32;
  for (int j = 0; j < M * N / 32; j++) {
    const int e = (int)lane + 32 * j, r = e / N, c = e % N;
    p[layout == mem_row_major ? (size_t)r * ldm + c : (size_t)c * ldm + r] = f.x[j];
  }
}

// d = a b + c on the lane's accumulator entries: exact products, float32 sums in k order. The lane's entries
// (e = lane + 32 j) lie on M N / 32 rows of a and, where N divides 32 (every shape above), on one column of b:
// those operands are read (WmmaElem::value) once per call, and the entries' sums advance together,
// k by k (each entry's sum is still its own, in k order). This loop is most of an emulated fp16 / TF32 convolution.
template <int M, int N, int K, typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
                     const fragment<matrix_b, M, N, K, T, LB>& b, const fragment<accumulator, M, N, K, float>& c) {
  typedef carve_emu::WmmaElem<T> E;
  constexpr int J = M * N / 32;
  const unsigned lane = carve_emu::linear_tid() % 32;
  float arow[J * K], bcol[J * K], out[J];
  for (int j = 0; j < J; j++) {
    const int e = (int)lane + 32 * j, r = e / N, n = e % N;
    for (int k = 0; k < K; k++) arow[j * K + k] = E::value(a.x[r * K + k]);
    if (j == 0 || 32 % N != 0) {
      for (int k = 0; k < K; k++) bcol[j * K + k] = E::value(b.x[k * N + n]);
    }
    out[j] = c.x[j];
  }
  for (int k = 0; k < K; k++) {
    for (int j = 0; j < J; j++) out[j] += arow[j * K + k] * bcol[(32 % N == 0 ? 0 : j) * K + k];
  }
  for (int j = 0; j < M * N / 32; j++) d.x[j] = out[j];
}

}  // namespace wmma
}  // namespace nvcuda

namespace carve_emu {

// TF32 operands: floats whose low 13 mantissa bits the tensor cores ignore.
template <>
struct WmmaElem<nvcuda::wmma::precision::tf32> {
  typedef float storage;
  static float value(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u &= 0xffffe000u;
    std::memcpy(&v, &u, 4);
    return v;
  }
};

}  // namespace carve_emu

// Half precision (__half, cublasGemmEx, the half wmma operands): the fp16 packages (runtime/carve_cuda_f16.cu).
#include "cuda_emu_f16.h"

#endif  // CARVE_CUDA_EMU_H
