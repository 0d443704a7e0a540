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

enum {
  CARVE_CU_IGEMM_TILE_64X64 = 0,
  CARVE_CU_IGEMM_TILE_64X32 = 1,
  CARVE_CU_IGEMM_TILE_32X64 = 2,
  CARVE_CU_IGEMM_TILE_32X32 = 3,
  CARVE_CU_IGEMM_TILES = 4
};

static inline size_t carve_cu_igemm_blocks(size_t pixels, size_t cout, size_t bm, size_t bn) {
  return ((pixels + bm - 1) / bm) * ((cout + bn - 1) / bn);
}

static inline int carve_cu_igemm_tile(int sm_count, size_t pixels, size_t cout) {
  const size_t sms = sm_count < 1 ? 1 : (size_t)sm_count;
  if (cout > 32 && carve_cu_igemm_blocks(pixels, cout, 64, 64) >= sms) return CARVE_CU_IGEMM_TILE_64X64;
  if (cout > 32 && carve_cu_igemm_blocks(pixels, cout, 32, 64) >= sms) return CARVE_CU_IGEMM_TILE_32X64;
  if (carve_cu_igemm_blocks(pixels, cout, 64, 32) >= sms) return CARVE_CU_IGEMM_TILE_64X32;
  return CARVE_CU_IGEMM_TILE_32X32;
}

#endif  // CARVE_CUDA_IGEMM_TILE_H
