// carve runtime, CUDA: which output tile the fused implicit-GEMM convolution (carve_cuda_igemm.h) takes
// for a convolution's shape. Plain C (no CUDA), so that tests can state which kernels their shapes reach.
//
// A block of 4 warps computes BM x BN outputs (pixels x channels). The largest tile whose grid still
// gives each of the device's SMs a block: 64 x 64 when that grid fills the SMs (and cout > 32), then
// 32 x 64 (cout > 32), then 64 x 32, else 32 x 32 (the most blocks: small-pixel layers, 20 x 20 and
// 40 x 40, whose few 64 x 64 blocks would leave most SMs idle through a long reduction). cout <= 32
// never takes a 64-wide tile (half its columns would be zeros). sm_count: the context's SM count
// (carve_cu_ctx.sm_count; below 1 is read as 1, which always takes the largest tile).

#ifndef CARVE_CUDA_IGEMM_TILE_H
#define CARVE_CUDA_IGEMM_TILE_H

#include <stddef.h>

// The kernels' tiles: the first four are the rule's (carve_cu_igemm_tile); 32X32_K2 is 32 x 32
// with the reduction sliced between two groups of 4 warps (256 threads, each group half of every step along K, the
// two partial tiles summed in the epilogue: half the chain of dependent tensor-core steps per warp and twice the
// warps per SM for few-pixel layers with long reductions) and 32X32_ASYNC is 32 x 32 with its operands copied
// asynchronously into 4 shared stages, 3 steps in flight (16-byte chunks only; else the 32 x 32 kernel), which only a
// tactic picks (carve_cuda.h, "Tactics"). 32X32_SPLIT is the asynchronous 32 x 32 kernel with the reduction split
// across blocks (carve_cu_igemm_splits of them per output tile, the last to finish sums their partial tiles in a
// fixed order and runs the epilogue): for layers whose tiles leave most SMs idle, also a tactic's only; 64X32_ASYNC and
// 32X64_ASYNC are those tiles with 3 asynchronous shared stages (what fits 48 KB of static shared memory), the same
// way (16-byte chunks only; else the register-pipelined kernel of the tile), tactics' only too. 32X32_K4 is 32 x 32
// with the reduction sliced over four warp groups (512 threads: a quarter of every step's k each, half the sliced
// tile's dependent instructions per warp and twice its warps per SM, for the long reductions of the 20 x 20 and
// 40 x 40 layers, where Nsight Compute found the sliced tile's 8 warps per SM issuing one instruction in 6.5 cycles
// each, H100 2026-11-27), a tactic's only.
enum {
  CARVE_CU_IGEMM_TILE_64X64 = 0,
  CARVE_CU_IGEMM_TILE_64X32 = 1,
  CARVE_CU_IGEMM_TILE_32X64 = 2,
  CARVE_CU_IGEMM_TILE_32X32 = 3,
  CARVE_CU_IGEMM_TILE_32X32_K2 = 4,
  CARVE_CU_IGEMM_TILE_32X32_ASYNC = 5,
  CARVE_CU_IGEMM_TILE_32X32_SPLIT = 6,
  CARVE_CU_IGEMM_TILE_64X32_ASYNC = 7,
  CARVE_CU_IGEMM_TILE_32X64_ASYNC = 8,
  CARVE_CU_IGEMM_TILE_32X32_K4 = 9,
  CARVE_CU_IGEMM_TILES = 10
};

static inline size_t carve_cu_igemm_blocks(size_t pixels, size_t cout, size_t bm, size_t bn) {
  return ((pixels + bm - 1) / bm) * ((cout + bn - 1) / bn);
}

// Whether the fused kernel is the faster path for this convolution even where the context keeps the cuBLAS path
// (conv_fused 0): a strided k x k convolution (k > 1, stride 2) with few output channels (cout <= 64) over many
// output pixels of the batch (>= CARVE_CU_IGEMM_WIDE_PIXELS), where the cuBLAS path's im2col matrix (K = k k cin
// values per output pixel, written then read) costs more than the GEMM on it. Measured on an H100 (yolo26n 640
// batch 32, per-layer profile, docs/data/cuda-h100-2026-11-26): the fused kernel took layers 1 (16 -> 32, 160 x 160
// out), 3 (32 -> 64, 80 x 80) and 17 (64 -> 64, 40 x 40) from 277 / 253 / 70 us to 184 / 151 / 45 (fp16) and
// from 539 / 499 / 140 to 308 / 346 / 106 (TF32), and lost on the stride-2 convs with cout 128 and 256; at batch
// 1 (25 600 / 6 400 / 1 600 pixels) nothing was measured in a graph, so smaller batches keep the cuBLAS path.
#define CARVE_CU_IGEMM_WIDE_PIXELS 51200u  // layer 17's output pixels at batch 32, the smallest measured win
static inline int carve_cu_igemm_preferred(size_t kh, size_t stride, size_t cout, size_t pixels) {
  return kh > 1 && stride == 2 && cout <= 64 && pixels >= CARVE_CU_IGEMM_WIDE_PIXELS;
}

// The split-K tile's blocks per output tile (32 x 32 outputs, gridDim.z of the launch): enough for about
// CARVE_CU_IGEMM_SPLIT_WAVES blocks per SM over the layer's `tiles`, at most CARVE_CU_IGEMM_MAX_SPLITS, at most the
// `steps` of the reduction (each split at least one step), and only as many as the partial tiles (BM BN floats each)
// that `workspace_floats` holds; no split (1) when the layer has more tiles than `counters` (the context's arrival
// counters, one per tile) or already gives every SM as many blocks.
#define CARVE_CU_IGEMM_SPLIT_WAVES 2u
#define CARVE_CU_IGEMM_MAX_SPLITS 8u
static inline unsigned carve_cu_igemm_splits(int sm_count, size_t pixels, size_t cout, size_t steps,
                                             size_t workspace_floats, size_t counters) {
  const size_t sms = sm_count < 1 ? 1 : (size_t)sm_count;
  const size_t tiles = carve_cu_igemm_blocks(pixels, cout, 32, 32);
  if (tiles == 0 || tiles > counters) return 1u;
  size_t s = (CARVE_CU_IGEMM_SPLIT_WAVES * sms + tiles - 1) / tiles;
  if (s > CARVE_CU_IGEMM_MAX_SPLITS) s = CARVE_CU_IGEMM_MAX_SPLITS;
  if (s > steps) s = steps;
  if (s > workspace_floats / (tiles * 32 * 32)) s = workspace_floats / (tiles * 32 * 32);
  return s < 1 ? 1u : (unsigned)s;
}

static inline int carve_cu_igemm_tile(int sm_count, size_t pixels, size_t cout) {
  const size_t sms = sm_count < 1 ? 1 : (size_t)sm_count;
  if (cout > 32 && carve_cu_igemm_blocks(pixels, cout, 64, 64) >= sms) return CARVE_CU_IGEMM_TILE_64X64;
  if (cout > 32 && carve_cu_igemm_blocks(pixels, cout, 32, 64) >= sms) return CARVE_CU_IGEMM_TILE_32X64;
  if (carve_cu_igemm_blocks(pixels, cout, 64, 32) >= sms) return CARVE_CU_IGEMM_TILE_64X32;
  return CARVE_CU_IGEMM_TILE_32X32;
}

#endif  // CARVE_CUDA_IGEMM_TILE_H
