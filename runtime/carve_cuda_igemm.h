// carve runtime, CUDA: the fused implicit-GEMM convolution (groups 1) on tensor cores, one launch per
// convolution: y = act(conv(x, W) + b) + residual, the same contract as carve_cu_conv2d (carve_cuda.h),
// for T = float (TF32 tensor cores, sm_80 and newer) and T = __half (fp16 operands, sm_70 and newer),
// both accumulating in float32. Not part of the API; C++ only; included by carve_cuda_elem.h after its
// loads and stores (carve_cu_ld, carve_cu_store_act, which the epilogue uses). Chosen per context by
// carve_cu_ctx_set_conv_impl (CARVE_CU_CONV_FUSED), per convolution by its tactic (carve_cu_ctx_set_tactics: timed
// on the device against the cuBLAS path, im2col + GEMM + epilogue), else by carve_cu_igemm_preferred
// (docs/backends/cuda.md, "The fused convolution", "Tactics").
//
// The GEMM: rows are output pixels (M = oh ow), columns output channels (N = cout), the reduction runs
// over k = (ky kw + kx) cin + i (K = kh kw cin), the OHWI weights' order, so W is the (N, K) row-major
// matrix as stored and the input tile is gathered from the NHWC input directly (no im2col buffer):
//   A[p][k] = x[oy s - pad + ky][ox s - pad + kx][i]  (0 outside the input: padding),
//   B[k][o] = W[o][k].
// One block of CARVE_CU_IGEMM_THREADS (4 warps, 2 x 2) computes a BM x BN tile of Y, each warp a
// BM/2 x BN/2 part as 16 x 16 wmma accumulators. The tile is chosen per convolution at launch
// (carve_cu_igemm_tile, runtime/carve_cuda_igemm_tile.h): 64 x 64, 64 x 32, 32 x 64 or 32 x 32, the
// largest that still gives the device's SMs a block each, so that small-pixel layers (20 x 20, 40 x 40)
// run on many SMs instead of a few; a tactic may also pick 32 x 32 with the reduction sliced over two warp
// groups (KS 2, or 4), with asynchronous shared stages (STAGES 4), or that one with the reduction split across blocks
// (SPLIT: partial tiles in the context's workspace, summed by the last block of each tile), and 64 x 32 / 32 x 64
// with 3 asynchronous stages, see the kernel. Per step of BK along K (128 bytes
// of operands per row; 256 for the register-pipelined 32 x 32, whose blocks are the cheapest), the threads gather A (BM x BK) and B (BN x BK, stored as W's
// rows: matrix_b col_major) in 16-byte chunks (4 floats / 8 halves of consecutive k), zero-filling rows
// past the pixels, columns past cout, k past K and the padding taps, so that every fragment is whole.
// The steps are software-pipelined through registers and two shared stages: the chunks of step s + 1
// are loaded into registers before the tensor cores work on stage s, stored to the other stage after,
// one __syncthreads per step. A chunk is one 16-byte load (the VEC kernels) when cin and the input's
// pixel stride are multiples of the chunk and both x and W are 16-byte aligned (so the 4 / 8 k of a
// chunk are one tap's consecutive channels, and a weight row's chunks aligned); otherwise element by
// element (the stem's 3 channels). TF32 operands are rounded once, where a chunk is stored to shared
// memory (wmma::__float_to_tf32: cvt.rna, as cuBLAS' TF32 kernels convert theirs). After the last step
// the accumulators go to a shared BM x BN float tile (over the operand stages) and the epilogue reads
// it: v = acc + b[o], SiLU, + residual, one rounding per output for __half (the cuBLAS path rounds the GEMM's result
// to half before the epilogue, this one does not), stored 16 bytes at a time where the outputs allow.
//
// Builds with nvcc for every architecture of tests/cuda/tests.cmake: the TF32 kernel's body needs
// sm_80 (wmma::precision::tf32) and is empty below (never launched there: carve_cu_ctx_set_conv_math
// leaves conv_tf32 at 0 before sm_80, and the float path is fused only with TF32); the half kernel
// needs sm_70. Under the emulation (tests/cuda/cuda_emu.h) wmma is the host model described there.

#ifndef CARVE_CUDA_IGEMM_H
#define CARVE_CUDA_IGEMM_H

#include "carve_cuda_igemm_tile.h"
#include "carve_cuda_impl.h"

#ifndef CARVE_CUDA_EMULATION
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <mma.h>
#endif

#define CARVE_CU_IGEMM_THREADS 128  // 4 warps, 2 x 2 over the tile
static_assert(CARVE_CU_PATHS == CARVE_CU_PATH_FUSED_TILE + CARVE_CU_IGEMM_TILES, "a tactic path per tile (carve_cuda.h)");
// Blocks an SM should hold at once (__launch_bounds__: at most 128 registers a thread; the shared memory,
// <= 36 KB a block, allows as many on sm_80+, and the wide asynchronous kernels' 40.5 KB on sm_86+ / sm_90, 3 on an
// A100's 164 KB). Also keeps ptxas from a spill it otherwise chooses.
#define CARVE_CU_IGEMM_MIN_BLOCKS 4
// Shared stages of the asynchronous 32 x 32 kernel (CARVE_CU_IGEMM_TILE_32X32_ASYNC): 128 bytes of operands per row
// and step, 9 KB a stage, 36 KB in all.
#define CARVE_CU_IGEMM_ASYNC_STAGES 4
// Shared stages of the asynchronous 64 x 32 and 32 x 64 kernels: 13.5 KB a stage (96 rows of 128 bytes), 40.5 KB in all.
#define CARVE_CU_IGEMM_ASYNC_STAGES_WIDE 3

// Whether TF32 wmma operands exist for the architecture being compiled (always on the host pass and
// under emulation, where only the runtime checks decide). Half operands need sm_70, below every
// architecture carve compiles for (tests/cuda/tests.cmake: sm_75 and newer).
#if defined(CARVE_CUDA_EMULATION) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define CARVE_CU_IGEMM_HAS_TF32 1
#else
#define CARVE_CU_IGEMM_HAS_TF32 0
#endif
#if !defined(CARVE_CUDA_EMULATION) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700
#error "carve_cuda_igemm.h: the wmma convolution needs sm_70 or newer (carve compiles for sm_75 and newer)"
#endif

// The unit of the global loads and shared stores: 16 bytes of operands (carve_cuda_elem.h's carve_cu_v16: 4
// floats or 8 halves, element e in the bytes 16 / VW e on), loaded through the read-only path.

// The wmma shape and operand type of each storage type T: `ok` whether the kernel exists for the
// architecture compiled; kstep the wmma k; vw the elements of a 16-byte chunk; put(c, e, v) sets
// element e of a chunk (zero-initialised); to_op(c) converts a chunk's operands as the tensor cores
// take them (TF32: cvt.rna per float; halves as they are).
template <typename T>
struct carve_cu_igemm_traits;

template <>
struct carve_cu_igemm_traits<float> {
#if CARVE_CU_IGEMM_HAS_TF32
  static constexpr bool ok = true;
  typedef nvcuda::wmma::precision::tf32 op;  // fragments of TF32 values stored as float
#else
  static constexpr bool ok = false;
  typedef float op;  // unused: no TF32 before sm_80
#endif
  static constexpr int kstep = 8;  // m16n16k8
  static constexpr int vw = 4;
  static __device__ __forceinline__ void put(carve_cu_v16& c, int e, float v) { c.w[e] = __float_as_uint(v); }
  static __device__ __forceinline__ carve_cu_v16 to_op(carve_cu_v16 c) {
#if CARVE_CU_IGEMM_HAS_TF32
    for (int i = 0; i < 4; i++) c.w[i] = __float_as_uint(nvcuda::wmma::__float_to_tf32(__uint_as_float(c.w[i])));
#endif
    return c;
  }
  // A fragment loaded from operands as stored (the asynchronous copies), converted as the tensor cores take them.
  template <typename F>
  static __device__ __forceinline__ void frag_op(F& f) {
#if CARVE_CU_IGEMM_HAS_TF32
    for (int i = 0; i < f.num_elements; i++) f.x[i] = nvcuda::wmma::__float_to_tf32(f.x[i]);
#endif
  }
};

template <>
struct carve_cu_igemm_traits<__half> {
  static constexpr bool ok = true;
  typedef __half op;
  static constexpr int kstep = 16;  // m16n16k16
  static constexpr int vw = 8;
  static __device__ __forceinline__ void put(carve_cu_v16& c, int e, __half v) {
    c.w[e / 2] |= (uint32_t)__half_as_ushort(v) << (16 * (e % 2));  // little-endian: element 2j the low half
  }
  static __device__ __forceinline__ carve_cu_v16 to_op(carve_cu_v16 c) { return c; }
  template <typename F>
  static __device__ __forceinline__ void frag_op(F&) {}
};

// Division by a divisor fixed per launch without a divide instruction (the multiply-high method of Granlund and
// Montgomery, as CUTLASS's FastDivmod): for d >= 1, q(n) = n / d exactly for every n < 2^31. The kernel's address
// arithmetic divides by cin, kw, ow and opix this way: a division by a runtime value is a software routine of
// about 20 dependent instructions, and Nsight Compute counted the sliced-K kernel's warps (8 of them per SM on a
// 20 x 20 layer) issuing about 2850 instructions each, 1270 of them the per-step chunk addresses (H100, 2026-11-27).
struct carve_cu_fastdiv {
  uint32_t d, mul, shr;
};
static inline carve_cu_fastdiv carve_cu_fastdiv_make(uint32_t d) {
  carve_cu_fastdiv f = {d, 0u, 0u};
  if (d > 1) {
    uint32_t l = 0;  // ceil(log2 d)
    while ((1ull << l) < d) l++;
    f.mul = (uint32_t)(((1ull << (31 + l)) + d - 1) / d);  // < 2^32 for d > 1
    f.shr = l - 1;
  }
  return f;
}
static __host__ __device__ __forceinline__ uint32_t carve_cu_fastdiv_q(uint32_t n, carve_cu_fastdiv f) {
  return f.d == 1 ? n : (uint32_t)(((uint64_t)n * f.mul) >> 32) >> f.shr;
}
// The launch's divisors.
struct carve_cu_igemm_divs {
  carve_cu_fastdiv cin, kw, ow, opix;
};

// A depthwise convolution whose output is the A operand (DW kernels, carve_cu_conv2d_dwpw): its weights [c][tap]
// (OHWI with one input channel per group), bias, window and activation; its input, stride and padding are the
// kernel's x, in_stride, h, w, stride and pad. Each block stages the weights in shared memory as [tap][c] (they fit
// CARVE_CU_IGEMM_DW_STAGE_BYTES: carve_cu_dwpw_fusable), one 16-byte load per tap and chunk.
template <typename T>
struct carve_cu_igemm_dw {
  const T* weight;
  const T* bias;
  uint32_t kh, kw;
  int silu;
};
#define CARVE_CU_IGEMM_DW_STAGE_BYTES 9216  // 256 channels x 9 taps of float32

// The block's BM x BN tile of Y at (blockIdx.x BM, blockIdx.y BN), with its epilogue; BK the step along K
// (a multiple of the chunk and of the wmma k). VEC: every chunk is one 16-byte load (the caller checked
// carve_cu_igemm_vec). KS: warp groups of 4 (2 x 2 over the tile) slicing each step along K (KS CARVE_CU_IGEMM_THREADS
// threads; group g multiplies the step's k in [g BK / KS, (g + 1) BK / KS) into accumulators of its own, which the
// epilogue sums, group 0's first). STAGES 0: the steps pipelined through registers and two shared stages (above);
// STAGES >= 3 (VEC only): asynchronous copies global -> shared (cp.async, __pipeline_memcpy_async; synchronous
// copies before sm_80) into STAGES shared stages, STAGES - 1 steps in flight ahead of the one the tensor cores work
// on, zero-filled where a chunk lies outside (the padding, past K, past the pixels or channels), TF32 operands
// rounded on the loaded fragments: for reductions of a few steps, about one load latency in all instead of one per
// step. SPLIT: the reduction's steps split evenly over gridDim.z blocks per output tile (block z the steps
// [z steps / Z, (z + 1) steps / Z)); with gridDim.z > 1 each block stores its partial tile (float32) at `part`
// (Z tiles x BM BN floats, the context's workspace), fences, and counts itself in the tile's arrival counter
// (`counters`, zero before the launch); the last to arrive resets the counter to 0 and runs the epilogue on the
// partial tiles summed in z order (the same sum whichever block arrives last: results do not depend on the
// schedule). (An empty kernel where traits<T>::ok is false: never launched, carve_cu_igemm_fits.)
template <typename T, int BM, int BN, int BK, bool VEC, int KS = 1, int STAGES = 0, bool SPLIT = false, bool DW = false>
__global__ void __launch_bounds__(CARVE_CU_IGEMM_THREADS * KS, CARVE_CU_IGEMM_MIN_BLOCKS / KS)
    carve_cu_igemm_kernel(const T* __restrict__ x, size_t in_stride, uint32_t h, uint32_t w, uint32_t cin,
                          uint32_t kh, uint32_t kw, uint32_t stride, uint32_t pad, uint32_t ow, uint32_t opix,
                          uint32_t pixels, uint32_t cout, const T* __restrict__ weight, const T* __restrict__ bias,
                          const T* __restrict__ residual, size_t res_stride, int silu, T* __restrict__ y,
                          size_t out_stride, float* __restrict__ part, unsigned* __restrict__ counters,
                          carve_cu_igemm_divs dv, carve_cu_igemm_dw<T> dw) {
  CARVE_CU_KERNEL_ENTRY();
  typedef carve_cu_igemm_traits<T> tr;
  if constexpr (tr::ok) {
    namespace wm = nvcuda::wmma;
    typedef typename tr::op op;
    constexpr int NT = CARVE_CU_IGEMM_THREADS * KS;
    constexpr int KSL = BK / KS;                    // a warp group's k of each step
    constexpr int VW = tr::vw;                      // elements per chunk
    constexpr int CPR = BK / VW;                    // chunks per tile row and step
    constexpr int RSTEP = NT / CPR;                 // rows between a thread's chunks
    constexpr int AJ = BM / RSTEP, BJ = BN / RSTEP;  // a thread's chunks of A and of B per step
    constexpr int LD = BK + VW;                     // row pitch of the operand tiles, in T (16-byte pad: banks)
    constexpr int STAGE = (BM + BN) * LD;           // one stage: A rows, then B rows
    constexpr int CLD = BN + 4;                     // the float result tile's row pitch
    constexpr int WM = BM / 2, WN = BN / 2, FM = WM / 16, FN = WN / 16;  // a warp's part, in fragments
    constexpr int OPS = (STAGES > 0 ? STAGES : 2) * STAGE, RES = (int)(KS * BM * CLD * sizeof(float) / sizeof(T));
    static_assert(STAGES == 0 || (STAGES >= 3 && VEC), "asynchronous stages: 3 or more, 16-byte chunks");
    static_assert(BK % VW == 0 && KSL % tr::kstep == 0 && NT % CPR == 0 && KS >= 1, "step");
    static_assert(BM % RSTEP == 0 && BN % RSTEP == 0 && AJ >= 1 && BJ >= 1, "chunks per thread");
    static_assert(FM >= 1 && FN >= 1 && WM % 16 == 0 && WN % 16 == 0, "warp tile");
    static_assert((16 * LD * sizeof(T)) % 32 == 0 && (BM * LD * sizeof(T)) % 32 == 0 &&
                      (STAGE * sizeof(T)) % 32 == 0 && (tr::kstep * sizeof(T)) % 32 == 0,
                  "wmma pointers 32-byte aligned");
    static_assert(!DW || (STAGES == 0 && VEC && !SPLIT), "depthwise A: the register-pipelined kernel, 16-byte chunks");
    constexpr int DWS = DW ? CARVE_CU_IGEMM_DW_STAGE_BYTES / 16 : 1;  // the depthwise weights' stage, in chunks
    static_assert((OPS > RES ? OPS : RES) * sizeof(T) + DWS * 16 <= 48 * 1024, "static shared memory");
    // Two operand stages; after the loop the result tile over them.
    alignas(32) __shared__ T smem[OPS > RES ? OPS : RES];
    float* const c_tile = reinterpret_cast<float*>(smem);
    __shared__ carve_cu_v16 dw_stage[DWS];

    const int t = (int)threadIdx.x, cc = t % CPR, r0 = t / CPR;  // the thread's chunk column and first row
    const uint32_t m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const uint32_t k_total = kh * kw * cin;  // < 2^31 (carve_cu_igemm_fits)
    const int warp = t / 32, slice = warp / 4, wm0 = (warp % 4 / 2) * WM, wn0 = (warp % 2) * WN;

    // The thread's rows of A: the input position of tap (0, 0) of output pixel m0 + r0 + j RSTEP (the
    // divisions by ow once per block); a row past the pixels reads as far above the image.
    // Batches: row pg is pixel pg % opix of image pg / opix, whose input starts xo[j] elements into x.
    int iy0[AJ], ix0[AJ];
    size_t xo[AJ];
    for (int j = 0; j < AJ; j++) {
      const uint32_t pg = m0 + (uint32_t)(r0 + j * RSTEP), img = carve_cu_fastdiv_q(pg, dv.opix);
      const uint32_t p = pg - img * opix, oy = carve_cu_fastdiv_q(p, dv.ow), ox = p - oy * ow;
      iy0[j] = pg < pixels ? (int)(oy * stride) - (int)pad : -0x40000000;
      ix0[j] = pg < pixels ? (int)(ox * stride) - (int)pad : 0;
      xo[j] = pg < pixels ? (size_t)img * h * w * in_stride : 0;
    }

    if constexpr (DW) {  // the depthwise weights [c][tap] -> dw_stage [tap][c] (the first load() reads them)
      T* const ws = reinterpret_cast<T*>(dw_stage);
      const uint32_t taps = dw.kh * dw.kw;
      for (uint32_t e = (uint32_t)t; e < cin * taps; e += NT) {
        const uint32_t ch = e / taps;
        ws[(e - ch * taps) * cin + ch] = dw.weight[e];
      }
      __syncthreads();
    }
    // DW: the A chunk of row j, channels i .. i + VW - 1: the depthwise convolution at the row's pixel, its taps
    // in carve_cu_for_window's order with the depthwise kernel's arithmetic and its end (carve_cu_store_act16: the
    // bias, the activation, one rounding to T), as carve_cu_depthwise_vec_kernel: the values that kernel stores.
    auto dw_chunk = [&](int j, uint32_t i) {
      const T* const ws = reinterpret_cast<const T*>(dw_stage);
      const T* const xc = x + xo[j] + i;
      float acc[VW];
      for (int e = 0; e < VW; e++) acc[e] = 0.0f;
      carve_cu_for_window(iy0[j], ix0[j], dw.kh, dw.kw, h, w, [&](size_t tap, size_t pixel) {
        const carve_cu_pack<T> xv = carve_cu_ld16(xc + pixel * in_stride);
        const carve_cu_pack<T> wv = carve_cu_ld16(ws + tap * cin + i);
        for (int e = 0; e < VW; e++) acc[e] += carve_cu_ld(xv.e, e) * carve_cu_ld(wv.e, e);
      });
      carve_cu_v16 r;  // (16-byte aligned: carve_cu_store_act16's store)
      carve_cu_store_act16(reinterpret_cast<T*>(&r), acc, dw.bias + i, dw.silu, (const T*)nullptr);
      return r;
    };
    carve_cu_v16 ra[AJ], rb[BJ];
    // VEC: where the thread's chunks of the step at k0 lie, NULL for a chunk of zeros. The chunk's VW k are one
    // tap's channels i .. i + VW - 1 (cin % VW == 0), all in K or none. A: row r0 + j RSTEP, k0 + cc VW ..:
    // consecutive threads, consecutive chunks of one pixel's channels (coalesced); B: W's row n0 + r0 + j RSTEP,
    // the same k.
    auto chunks = [&](uint32_t k0, const T* (&a)[AJ], const T* (&b)[BJ]) {
      const uint32_t k = k0 + (uint32_t)(cc * VW);
      const bool kin = k < k_total;
      const uint32_t tap = kin ? carve_cu_fastdiv_q(k, dv.cin) : 0, i = k - tap * cin;
      const uint32_t tap_y = carve_cu_fastdiv_q(tap, dv.kw);
      const int ky = (int)tap_y, kx = (int)(tap - tap_y * kw);
      for (int j = 0; j < AJ; j++) {
        const int iy = iy0[j] + ky, ix = ix0[j] + kx;
        a[j] = kin && iy >= 0 && iy < (int)h && ix >= 0 && ix < (int)w
                   ? x + xo[j] + ((size_t)iy * w + (size_t)ix) * in_stride + i
                   : nullptr;
      }
      for (int j = 0; j < BJ; j++) {
        const uint32_t o = n0 + (uint32_t)(r0 + j * RSTEP);
        b[j] = kin && o < cout ? weight + (size_t)o * k_total + k : nullptr;
      }
    };
    // The thread's chunks of step k0 into ra / rb.
    auto load = [&](uint32_t k0) {
      if constexpr (DW) {  // K = cin (a 1x1 convolution of the depthwise output): chunk k is channels k ..
        const uint32_t i = k0 + (uint32_t)(cc * VW);
        const bool kin = i < k_total;
        CARVE_CU_UNROLL  // (the rows' origins stay in registers)
        for (int j = 0; j < AJ; j++) {
          ra[j] = kin && m0 + (uint32_t)(r0 + j * RSTEP) < pixels ? dw_chunk(j, i) : carve_cu_v16_zero();
        }
        const T* a[AJ];  // (unused: A is computed above)
        const T* b[BJ];
        chunks(k0, a, b);
        for (int j = 0; j < BJ; j++) rb[j] = b[j] != nullptr ? carve_cu_ldg16_bytes(b[j]) : carve_cu_v16_zero();
      } else if constexpr (VEC) {
        const T* a[AJ];
        const T* b[BJ];
        chunks(k0, a, b);
        for (int j = 0; j < AJ; j++) ra[j] = a[j] != nullptr ? carve_cu_ldg16_bytes(a[j]) : carve_cu_v16_zero();
        for (int j = 0; j < BJ; j++) rb[j] = b[j] != nullptr ? carve_cu_ldg16_bytes(b[j]) : carve_cu_v16_zero();
      } else {
        const uint32_t k = k0 + (uint32_t)(cc * VW);
        for (int j = 0; j < AJ; j++) ra[j] = carve_cu_v16_zero();
        for (int j = 0; j < BJ; j++) rb[j] = carve_cu_v16_zero();
        for (int e = 0; e < VW; e++) {
          const uint32_t ke = k + (uint32_t)e;
          if (ke >= k_total) break;
          const uint32_t tap = ke / cin, i = ke - tap * cin;  // (element by element: a rare, slow path anyway)
          const int ky = (int)(tap / kw), kx = (int)(tap % kw);
          for (int j = 0; j < AJ; j++) {
            const int iy = iy0[j] + ky, ix = ix0[j] + kx;
            if (iy >= 0 && iy < (int)h && ix >= 0 && ix < (int)w) {
              tr::put(ra[j], e, x[xo[j] + ((size_t)iy * w + (size_t)ix) * in_stride + i]);
            }
          }
          for (int j = 0; j < BJ; j++) {
            const uint32_t o = n0 + (uint32_t)(r0 + j * RSTEP);
            if (o < cout) tr::put(rb[j], e, weight[(size_t)o * k_total + ke]);
          }
        }
      }
    };
    // The registers to a stage, as the tensor cores take the operands.
    auto store = [&](T* stage) {
      for (int j = 0; j < AJ; j++) carve_cu_st16_bytes(stage + (r0 + j * RSTEP) * LD + cc * VW, tr::to_op(ra[j]));
      for (int j = 0; j < BJ; j++) {
        carve_cu_st16_bytes(stage + (BM + r0 + j * RSTEP) * LD + cc * VW, tr::to_op(rb[j]));
      }
    };

    wm::fragment<wm::accumulator, 16, 16, tr::kstep, float> acc[FM][FN];
    for (int i = 0; i < FM; i++) {
      for (int j = 0; j < FN; j++) wm::fill_fragment(acc[i][j], 0.0f);
    }
    // The tensor cores on one stage's step at k0 (this warp group's k of it).
    auto multiply = [&](const T* a_tile, uint32_t k0) {
      const T* const b_tile = a_tile + BM * LD;
      CARVE_CU_UNROLL
      for (int q = 0; q < KSL / tr::kstep; q++) {  // unrolled: no loop arithmetic between the tensor-core steps
        const int kk = slice * KSL + q * tr::kstep;
        if (k0 + (uint32_t)kk >= k_total) break;
        wm::fragment<wm::matrix_a, 16, 16, tr::kstep, op, wm::row_major> fa[FM];
        wm::fragment<wm::matrix_b, 16, 16, tr::kstep, op, wm::col_major> fb[FN];
        for (int i = 0; i < FM; i++) wm::load_matrix_sync(fa[i], a_tile + (wm0 + 16 * i) * LD + kk, LD);
        for (int j = 0; j < FN; j++) wm::load_matrix_sync(fb[j], b_tile + (wn0 + 16 * j) * LD + kk, LD);
        if constexpr (STAGES > 0) {  // as stored: rounded here (TF32)
          for (int i = 0; i < FM; i++) tr::frag_op(fa[i]);
          for (int j = 0; j < FN; j++) tr::frag_op(fb[j]);
        }
        for (int i = 0; i < FM; i++) {
          for (int j = 0; j < FN; j++) wm::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
      }
    };
    // The block's steps [s_lo, s_hi) of the reduction: all of them, or its split's.
    const uint32_t steps = (k_total + BK - 1) / BK;
    uint32_t s_lo = 0, s_hi = steps;
    if constexpr (SPLIT) {
      s_lo = (uint32_t)((uint64_t)steps * blockIdx.z / gridDim.z);
      s_hi = (uint32_t)((uint64_t)steps * (blockIdx.z + 1) / gridDim.z);
    }
    if constexpr (STAGES > 0) {
      // Step s lands in stage (s - s_lo) % STAGES. Its copies are the thread's group s (an empty group past the
      // steps, so that every thread commits one group per step); waiting for all but the STAGES - 2 newest completes s.
      auto issue = [&](uint32_t s) {
        if (s < s_hi) {
          T* const stage = smem + ((s - s_lo) % STAGES) * STAGE;
          const T* a[AJ];
          const T* b[BJ];
          chunks(s * BK, a, b);
          for (int j = 0; j < AJ; j++) {
            __pipeline_memcpy_async(stage + (r0 + j * RSTEP) * LD + cc * VW, a[j] != nullptr ? a[j] : x, 16,
                                    a[j] != nullptr ? 0 : 16);
          }
          for (int j = 0; j < BJ; j++) {
            __pipeline_memcpy_async(stage + (BM + r0 + j * RSTEP) * LD + cc * VW, b[j] != nullptr ? b[j] : weight, 16,
                                    b[j] != nullptr ? 0 : 16);
          }
        }
        __pipeline_commit();
      };
      for (int s = 0; s < STAGES - 1; s++) issue(s_lo + (uint32_t)s);
      for (uint32_t s = s_lo; s < s_hi; s++) {
        __pipeline_wait_prior(STAGES - 2);
        // Step s's copies of every thread done; every warp done with step s - 1's stage, which the next issue reuses.
        __syncthreads();
        issue(s + STAGES - 1);
        multiply(smem + ((s - s_lo) % STAGES) * STAGE, s * BK);
      }
      __pipeline_wait_prior(0);
      __syncthreads();
    } else if (s_lo < s_hi) {
      load(s_lo * BK);
      store(smem);
      __syncthreads();
      for (uint32_t s = s_lo; s < s_hi; s++) {
        const uint32_t k0 = s * BK;
        if (s + 1 < s_hi) load(k0 + BK);  // in flight while the tensor cores work
        multiply(smem + ((s - s_lo) % 2) * STAGE, k0);
        // The other stage was last read in step s - 1, before the barrier that ended it.
        if (s + 1 < s_hi) store(smem + ((s - s_lo + 1) % 2) * STAGE);
        __syncthreads();
      }
    }
    // The result tiles over the stages (every read of them ended at the loop's last barrier): one per warp group.
    for (int i = 0; i < FM; i++) {
      for (int j = 0; j < FN; j++) {
        wm::store_matrix_sync(c_tile + slice * BM * CLD + (wm0 + 16 * i) * CLD + wn0 + 16 * j, acc[i][j], CLD,
                              wm::mem_row_major);
      }
    }
    __syncthreads();
    // Output (r, c) of the block's accumulators: the warp groups' result tiles summed, group 0's first.
    auto acc_at = [&](int r, int c) {
      float v = c_tile[r * CLD + c];
      for (int g = 1; g < KS; g++) v += c_tile[g * BM * CLD + r * CLD + c];
      return v;
    };
    // Split (gridDim.z > 1): the block's partial tile to the workspace (L2: __stcg), then the arrival; only the last
    // block of the tile goes on, to the epilogue over every partial tile.
    bool split = false;
    uint32_t tiles = 0, tile = 0;
    if constexpr (SPLIT) {
      split = gridDim.z > 1;
      tiles = gridDim.x * gridDim.y;
      tile = blockIdx.y * gridDim.x + blockIdx.x;
      if (split) {
        float* const mine = part + ((size_t)blockIdx.z * tiles + tile) * (BM * BN);
        for (int e = t; e < BM * BN; e += NT) __stcg(mine + e, acc_at(e / BN, e % BN));
        __threadfence();  // the partial tile visible device-wide before the arrival is counted
        __syncthreads();
        __shared__ int carve_last;
        if (t == 0) {
          carve_last = atomicAdd(&counters[tile], 1u) == gridDim.z - 1;
          if (carve_last) atomicExch(&counters[tile], 0u);  // zero again for the next launch
        }
        __syncthreads();
        if (!carve_last) return;
        __threadfence();  // (acquire) the other blocks' partial tiles, read from L2 (__ldcg) below
      }
    }
    // Output (r, c) before the epilogue: the accumulators, or split, the partial tiles summed in z order.
    auto out_at = [&](int r, int c) {
      if (!split) return acc_at(r, c);
      const float* const first = part + (size_t)tile * (BM * BN) + r * BN + c;
      float v = __ldcg(first);
      for (uint32_t z = 1; z < gridDim.z; z++) v += __ldcg(first + (size_t)z * tiles * (BM * BN));
      return v;
    };
    // Epilogue: consecutive threads, consecutive output channels of a pixel. In 16-byte vectors (VW outputs a
    // thread: one load of the bias and of the residual, one store; carve_cu_store_act16, the same arithmetic per
    // output) where every vector is whole and aligned (cout and the strides whole vectors; y, bias and residual
    // 16-byte aligned), else one output a thread.
    const bool vec_out = cout % VW == 0 && out_stride % VW == 0 && (residual == nullptr || res_stride % VW == 0) &&
                         (((uintptr_t)y | (uintptr_t)bias | (uintptr_t)residual) & 15u) == 0;
    if (vec_out) {
      for (int e = t; e < BM * BN / VW; e += NT) {
        const int r = e / (BN / VW), c = e % (BN / VW) * VW;
        const uint32_t p = m0 + (uint32_t)r, o = n0 + (uint32_t)c;
        if (p < pixels && o < cout) {  // (o + VW <= cout: both whole vectors)
          float v[VW];
          CARVE_CU_UNROLL
          for (int j = 0; j < VW; j++) v[j] = out_at(r, c + j);
          carve_cu_store_act16(y + (size_t)p * out_stride + o, v, bias + o, silu,
                               residual != nullptr ? residual + (size_t)p * res_stride + o : nullptr);
        }
      }
    } else {
      for (int e = t; e < BM * BN; e += NT) {
        const int r = e / BN, c = e % BN;
        const uint32_t p = m0 + (uint32_t)r, o = n0 + (uint32_t)c;
        if (p < pixels && o < cout) {
          carve_cu_store_act(y, (size_t)p * out_stride + o, out_at(r, c) + carve_cu_ld(bias, o), silu, residual,
                             (size_t)p * res_stride + o);
        }
      }
    }
  }
}

// Whether the fused kernel can run this convolution: groups 1, its math has tensor cores for T (float: TF32 on,
// sm_80+, so never for strict float32; half: sm_70+, below every architecture carve compiles for), the sizes fit
// the kernel's 32-bit indices (pixels, channels, K, and the input's rows and columns as int with the padding).
// Whether it does is carve_cu_conv2d_t's choice: the context asks for it (carve_cu_ctx_set_conv_impl), the
// convolution's tactic (carve_cu_ctx_set_tactics), or the default rule (carve_cu_igemm_preferred).
template <typename T>
static inline int carve_cu_igemm_fits(const carve_cu_ctx* ctx, const carve_cu_conv* c, size_t pixels) {
  const int math = sizeof(T) == 2 ? 1 : ctx->conv_tf32;
  const size_t k = (size_t)c->kh * c->kw * c->cin;
  return math && c->groups == 1 && pixels <= 0x7FFFFFFFu && c->cout <= 0x7FFFFFFFu && k <= 0x7FFFFFFFu &&
         c->h < 0x20000000u && c->w < 0x20000000u && c->pad < 0x10000000u && c->kh < 0x10000000u &&
         c->kw < 0x10000000u && (c->cout + 31) / 32 <= 65535u;
}

// Whether every 16-byte chunk of the operands is one aligned load: cin and the input's pixel stride whole
// chunks (so a chunk is one tap's consecutive channels, K a whole number of chunks) and x, W 16-byte aligned.
template <typename T>
static inline int carve_cu_igemm_vec(const carve_cu_conv* c, const T* x, const T* weight) {
  const size_t vw = 16 / sizeof(T);
  return c->cin % vw == 0 && c->in_stride % vw == 0 && carve_cu_aligned16(x) && carve_cu_aligned16(weight);
}

// The kernel's type (every instantiation's).
template <typename T>
using carve_cu_igemm_kernel_fn = void (*)(const T*, size_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t,
                                          uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, const T*, const T*,
                                          const T*, size_t, int, T*, size_t, float*, unsigned*, carve_cu_igemm_divs,
                                          carve_cu_igemm_dw<T>);

// splits: gridDim.z (SPLIT kernels only; their partial tiles in the context's workspace, counted in its
// split_counters).
template <typename T, int BM, int BN, int BK, bool VEC, int KS = 1, int STAGES = 0, bool SPLIT = false>
static void carve_cu_igemm_launch(const carve_cu_ctx* ctx, const carve_cu_conv* c, const T* x, const T* weight,
                                  const T* bias, const T* residual, T* y, size_t ow, size_t opix, size_t pixels,
                                  unsigned splits = 1) {
  const dim3 grid((unsigned)((pixels + BM - 1) / BM), (unsigned)((c->cout + BN - 1) / BN), SPLIT ? splits : 1u);
  carve_cu_igemm_kernel_fn<T> const kernel = carve_cu_igemm_kernel<T, BM, BN, BK, VEC, KS, STAGES, SPLIT>;
  CARVE_LAUNCH(kernel, grid, CARVE_CU_IGEMM_THREADS * KS, ctx->stream, x,
               c->in_stride, c->h, c->w, c->cin, c->kh, c->kw, c->stride, c->pad, (uint32_t)ow, (uint32_t)opix,
               (uint32_t)pixels, c->cout, weight, bias, residual, c->res_stride, c->act == CARVE_CU_ACT_SILU, y,
               c->out_stride, SPLIT ? (float*)ctx->blas_workspace : (float*)NULL, SPLIT ? ctx->split_counters : NULL,
               carve_cu_igemm_divs{carve_cu_fastdiv_make(c->cin), carve_cu_fastdiv_make(c->kw),
                                   carve_cu_fastdiv_make((uint32_t)ow), carve_cu_fastdiv_make((uint32_t)opix)},
               carve_cu_igemm_dw<T>{NULL, NULL, 0u, 0u, 0});
}

// The split-K tile's blocks per output tile for this convolution (carve_cu_igemm_splits over the steps of the
// kernel it runs: the asynchronous one's with 16-byte chunks, else the register-pipelined 32 x 32 one's), 1 where
// the context has no counters.
template <typename T>
static unsigned carve_cu_igemm_conv_splits(const carve_cu_ctx* ctx, const carve_cu_conv* c, bool vec, size_t pixels) {
  const size_t bk = (vec ? 128 : 256) / sizeof(T), k = (size_t)c->kh * c->kw * c->cin;
  return ctx->split_counters == NULL
             ? 1u
             : carve_cu_igemm_splits(ctx->sm_count, pixels, c->cout, (k + bk - 1) / bk,
                                     ctx->blas_workspace_bytes / sizeof(float), CARVE_CU_SPLIT_COUNTERS);
}

// Whether a tactic times the fused kernel with `tile` on this convolution (carve_cu_conv_tactic): not where the tile
// would run another tile's kernel or waste it: the 64-wide tiles for cout <= 32 (half the block's columns zeros),
// the sliced-K tile where K holds at most 128 bytes (the second warp group would have no k), the asynchronous ones
// without 16-byte chunks (their register-pipelined kernel again), the split one where it gives a tile one block.
template <typename T>
static bool carve_cu_igemm_candidate(const carve_cu_ctx* ctx, const carve_cu_conv* c, bool vec, size_t pixels,
                                     int tile) {
  switch (tile) {
    case CARVE_CU_IGEMM_TILE_64X64:
    case CARVE_CU_IGEMM_TILE_32X64:
      return c->cout > 32;
    case CARVE_CU_IGEMM_TILE_32X64_ASYNC:
      return c->cout > 32 && vec;
    case CARVE_CU_IGEMM_TILE_32X32_K2:
      return (size_t)c->kh * c->kw * c->cin * sizeof(T) > 128;
    case CARVE_CU_IGEMM_TILE_32X32_K4:
      return (size_t)c->kh * c->kw * c->cin * sizeof(T) > 256;
    case CARVE_CU_IGEMM_TILE_32X32_ASYNC:
    case CARVE_CU_IGEMM_TILE_64X32_ASYNC:
      return vec;
    case CARVE_CU_IGEMM_TILE_32X32_SPLIT:
      return carve_cu_igemm_conv_splits<T>(ctx, c, vec, pixels) > 1;
    default:
      return true;
  }
}

// A tile's asynchronous kernel (STAGES shared stages, steps of BK), which needs 16-byte chunks; without them (VEC
// false) the tile's register-pipelined kernel (steps of RBK); SPLIT: either one split `splits` ways.
template <typename T, int BM, int BN, int BK, int RBK, bool VEC, int STAGES, bool SPLIT = false>
static void carve_cu_igemm_launch_async(const carve_cu_ctx* ctx, const carve_cu_conv* c, const T* x, const T* weight,
                                        const T* bias, const T* residual, T* y, size_t ow, size_t opix, size_t pixels,
                                        unsigned splits = 1) {
  if constexpr (VEC) {
    carve_cu_igemm_launch<T, BM, BN, BK, VEC, 1, STAGES, SPLIT>(ctx, c, x, weight, bias, residual, y, ow, opix, pixels,
                                                                splits);
  } else {
    carve_cu_igemm_launch<T, BM, BN, RBK, VEC, 1, 0, SPLIT>(ctx, c, x, weight, bias, residual, y, ow, opix, pixels,
                                                            splits);
  }
}

// The tile (carve_cu_igemm_tile) and the loads (carve_cu_igemm_vec) of one convolution.
template <typename T, bool VEC>
static void carve_cu_igemm_launch_tile(int tile, const carve_cu_ctx* ctx, const carve_cu_conv* c, const T* x,
                                       const T* weight, const T* bias, const T* residual, T* y, size_t ow, size_t opix,
                                       size_t pixels) {
  constexpr int BK = 128 / (int)sizeof(T);  // 128 bytes per row and step; 256 for 32 x 32
  switch (tile) {
    case CARVE_CU_IGEMM_TILE_64X64:
      carve_cu_igemm_launch<T, 64, 64, BK, VEC>(ctx, c, x, weight, bias, residual, y, ow, opix, pixels);
      break;
    case CARVE_CU_IGEMM_TILE_64X32:
      carve_cu_igemm_launch<T, 64, 32, BK, VEC>(ctx, c, x, weight, bias, residual, y, ow, opix, pixels);
      break;
    case CARVE_CU_IGEMM_TILE_32X64:
      carve_cu_igemm_launch<T, 32, 64, BK, VEC>(ctx, c, x, weight, bias, residual, y, ow, opix, pixels);
      break;
    case CARVE_CU_IGEMM_TILE_32X32_K2:
      carve_cu_igemm_launch<T, 32, 32, 2 * BK, VEC, 2>(ctx, c, x, weight, bias, residual, y, ow, opix, pixels);
      break;
    case CARVE_CU_IGEMM_TILE_32X32_K4:
      carve_cu_igemm_launch<T, 32, 32, 2 * BK, VEC, 4>(ctx, c, x, weight, bias, residual, y, ow, opix, pixels);
      break;
    case CARVE_CU_IGEMM_TILE_32X32_SPLIT:  // the asynchronous 32 x 32 kernel (else the register one), split
      carve_cu_igemm_launch_async<T, 32, 32, BK, 2 * BK, VEC, CARVE_CU_IGEMM_ASYNC_STAGES, true>(
          ctx, c, x, weight, bias, residual, y, ow, opix, pixels, carve_cu_igemm_conv_splits<T>(ctx, c, VEC, pixels));
      break;
    case CARVE_CU_IGEMM_TILE_64X32_ASYNC:
      carve_cu_igemm_launch_async<T, 64, 32, BK, BK, VEC, CARVE_CU_IGEMM_ASYNC_STAGES_WIDE>(ctx, c, x, weight, bias,
                                                                                          residual, y, ow, opix, pixels);
      break;
    case CARVE_CU_IGEMM_TILE_32X64_ASYNC:
      carve_cu_igemm_launch_async<T, 32, 64, BK, BK, VEC, CARVE_CU_IGEMM_ASYNC_STAGES_WIDE>(ctx, c, x, weight, bias,
                                                                                          residual, y, ow, opix, pixels);
      break;
    case CARVE_CU_IGEMM_TILE_32X32_ASYNC:
      carve_cu_igemm_launch_async<T, 32, 32, BK, 2 * BK, VEC, CARVE_CU_IGEMM_ASYNC_STAGES>(ctx, c, x, weight, bias,
                                                                                         residual, y, ow, opix, pixels);
      break;
    default:
      carve_cu_igemm_launch<T, 32, 32, 2 * BK, VEC>(ctx, c, x, weight, bias, residual, y, ow, opix, pixels);
      break;
  }
}

// One launch: the whole convolution with its epilogue (arguments checked by the caller); `pixels` the
// output pixels of the batch, opix those of one image; `tile` a CARVE_CU_IGEMM_TILE_*, or -1: the tile rule's
// (carve_cu_igemm_tile) for the context's SM count.
template <typename T>
static carve_status carve_cu_igemm_conv(const carve_cu_ctx* ctx, const carve_cu_conv* c, const T* x, const T* weight,
                                        const T* bias, const T* residual, T* y, size_t ow, size_t opix, size_t pixels,
                                        int tile = -1) {
  if (tile < 0 || tile >= CARVE_CU_IGEMM_TILES) {
    tile = carve_cu_igemm_tile(ctx->sm_count, pixels, c->cout);
  }
  if (carve_cu_igemm_vec(c, x, weight)) {
    carve_cu_igemm_launch_tile<T, true>(tile, ctx, c, x, weight, bias, residual, y, ow, opix, pixels);
  } else {
    carve_cu_igemm_launch_tile<T, false>(tile, ctx, c, x, weight, bias, residual, y, ow, opix, pixels);
  }
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

#endif  // CARVE_CUDA_IGEMM_H
