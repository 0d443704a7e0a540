// The chained max pools (carve_cu_maxpool2d_chain, SPPF's) against n carve_cu_maxpool2d calls, for the float
// (test_ops.cu) and the half overloads (test_f16.cu): the same bits in every channel of the buffer, and one launch
// where the one-launch kernel takes the shapes, n where the call falls back to the single pools.

#ifndef CARVE_POOL_CHAIN_CHECK_H
#define CARVE_POOL_CHAIN_CHECK_H

#include "cuda_test.h"

struct PoolChainCase {
  uint32_t batch, h, w, c, k, n;
  size_t stride, x_slot, y_slot, y_step;  // one buffer of `stride` channels per pixel: x at x_slot, y_j after y_slot
  size_t launches;                        // 1: the one-launch kernel; n: the fallback
  bool nans;                              // every 7th value NaN (a window of NaN only gives -inf)
};

// `make(n)`: n random values of T (spread: the maxima then differ from pixel to pixel); `nan`: a NaN of T.
template <typename T, typename Make>
static void check_pool_chain(TestCtx& t, const PoolChainCase& pc, Make&& make, T nan) {
  const size_t pixels = (size_t)pc.batch * pc.h * pc.w, n = pixels * pc.stride;
  std::vector<T> start = make(n);
  if (pc.nans) {
    for (size_t i = 0; i < n; i += 7) start[i] = nan;
  }
  DevBuf<T> chain(start), alone(start);
  const size_t nodes = captured_run(t, [&] {
    return carve_cu_maxpool2d_chain(&t.ctx, pc.batch, pc.h, pc.w, pc.c, pc.k, pc.n, chain.p + pc.x_slot, pc.stride,
                                    chain.p + pc.y_slot, pc.stride, pc.y_step);
  });
  CHECK_MSG(nodes == pc.launches, "pool chain %ux%u k %u n %u: %zu launches, want %zu", pc.h, pc.w, pc.k, pc.n, nodes,
            pc.launches);
  for (uint32_t j = 0; j < pc.n; j++) {
    const T* x = j == 0 ? alone.p + pc.x_slot : alone.p + pc.y_slot + (j - 1) * pc.y_step;
    CHECK_OK(carve_cu_maxpool2d(&t.ctx, pc.batch, pc.h, pc.w, pc.c, pc.k, 1, pc.k / 2, x, pc.stride,
                                alone.p + pc.y_slot + j * pc.y_step, pc.stride));
  }
  t.sync();
  const std::vector<T> got = chain.download(), want = alone.download();
  size_t changed = 0;
  for (size_t i = 0; i < n; i++) {
    CHECK_MSG(std::memcmp(&got[i], &want[i], sizeof(T)) == 0, "pool chain %ux%u k %u n %u: value %zu (pixel %zu "
              "channel %zu) differs", pc.h, pc.w, pc.k, pc.n, i, i / pc.stride, i % pc.stride);
    changed += std::memcmp(&got[i], &start[i], sizeof(T)) != 0;
  }
  CHECK(changed > pixels * pc.c / 2);  // the outputs were written (a max differs from the value it replaced)
}

// The shapes: SPPF's (k 5, n 3) in a concat's slots at 20 x 20 (2 x 2 tiles, three of them partial) and at 37 x 23
// with a batch of 2 and NaN, windows past the tile (k 3, n 2 on 5 x 7), the largest halo (k 5, n 4 and k 17, n 1:
// 8), one past it (k 7, n 3: 9, three launches), channels that are not whole 16-byte vectors (n launches), outputs
// apart from the input's buffer slot order (y before x).
template <typename T, typename Make>
static void check_pool_chains(TestCtx& t, Make&& make, T nan) {
  const size_t v = 16 / sizeof(T), c = 2 * v;
  const PoolChainCase cases[] = {
      {1, 20, 20, (uint32_t)c, 5, 3, 4 * c, 0, c, c, 1, false},
      {2, 37, 23, (uint32_t)c, 5, 3, 4 * c, 0, c, c, 1, true},
      {1, 5, 7, (uint32_t)v, 3, 2, 3 * v, 0, v, v, 1, false},
      {1, 19, 18, (uint32_t)v, 5, 4, 6 * v, v, 2 * v, v, 1, false},
      {1, 18, 17, (uint32_t)v, 17, 1, 2 * v, 0, v, 0, 1, false},
      {1, 12, 11, (uint32_t)v, 7, 3, 4 * v, 0, v, v, 3, false},
      {2, 9, 10, (uint32_t)(v - 2), 5, 3, 4 * v, 0, v, v, 3, false},
      {1, 21, 17, (uint32_t)c, 5, 3, 5 * c, 4 * c, 0, c, 1, false},
  };
  for (const PoolChainCase& pc : cases) check_pool_chain<T>(t, pc, make, nan);
  DevBuf<T> d(std::vector<T>(4 * 8 * v, nan));
  CHECK(carve_cu_maxpool2d_chain(&t.ctx, 1, 2, 2, v, 4, 2, d.p, 4 * v, d.p + v, 4 * v, v) ==
        CARVE_ERR_INVALID_ARGUMENT);  // even window
  CHECK(carve_cu_maxpool2d_chain(&t.ctx, 1, 2, 2, v, 5, 0, d.p, 4 * v, d.p + v, 4 * v, v) ==
        CARVE_ERR_INVALID_ARGUMENT);  // no pool
  CHECK(carve_cu_maxpool2d_chain(&t.ctx, 1, 2, 2, v, 5, 2, d.p, 4 * v, d.p + v, 4 * v, v - 1) ==
        CARVE_ERR_INVALID_ARGUMENT);  // outputs overlapping
  CHECK(carve_cu_maxpool2d_chain(&t.ctx, 0, 2, 2, v, 5, 2, d.p, 4 * v, d.p + v, 4 * v, v) ==
        CARVE_ERR_INVALID_ARGUMENT);  // no image
  CHECK(carve_cu_maxpool2d_chain(&t.ctx, 1, 2, 2, v, 5, 2, (const T*)nullptr, 4 * v, d.p + v, 4 * v, v) ==
        CARVE_ERR_INVALID_ARGUMENT);
  std::printf("maxpool chains (%zu-byte values): ok\n", sizeof(T));
}

#endif  // CARVE_POOL_CHAIN_CHECK_H
