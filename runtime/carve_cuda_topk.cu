// carve runtime, CUDA: top-k, gather and the end-to-end post-processing (see carve_cuda.h).
//
// Top-k follows PyTorch's SortingRadixSelect / TensorTopK:
//   1. keys: each float maps to an order-preserving uint32 (carve_post.h's order):
//        NaN -> 0 (below everything, -inf included), -0 -> +0, otherwise
//        key = (bits & sign) ? ~bits : bits | sign
//      so that a > b as floats <=> key(a) > key(b); the rank of candidate i is the
//      64-bit composite (key << 32) | (2^32 - 1 - i): larger first, ties to the lower index.
//   2. radix select: four passes over 8-bit digits, most significant first. Invariant
//      after a pass: the wanted k-th key T has the digits fixed so far (prefix under mask),
//      and k_rem = k' - #{keys whose masked bits exceed prefix}. A pass histograms the next
//      digit of the keys that match the prefix (block histograms in shared memory, then
//      atomicAdd into a global one), then one thread walks the digits from 255 down until
//      the running count reaches k_rem. After the last pass T = prefix and
//      #{key > T} = k' - k_rem, 1 <= k_rem <= #{key == T}.
//   3. compaction: the input is cut into fixed chunks; each block counts its keys > T and
//      == T, an exclusive scan gives every chunk its offsets, and each block writes its
//      keys > T (in index order) at [0, k' - k_rem) and its keys == T whose rank among
//      equal keys (in index order) is below k_rem at [k' - k_rem, k'): the ties kept are
//      those of the lowest indices, deterministically.
//   4. sort: the k' composites descending, a bitonic sort (one block in shared memory up
//      to CARVE_CU_SORT_BLOCK items, otherwise a global bitonic network).
// That is 14 launches for the head's sizes. Up to CARVE_CU_TOPK_ONE_BLOCK_N values and
// CARVE_CU_SORT_BLOCK results, one block of 1024 threads does all four steps in one launch
// (carve_cu_topk_one_block_kernel: the same keys, digits and tie rule, so the same result; it stops
// selecting once a digit's bin is wanted whole and sorts by rank; the values are read up to six times
// from global memory, L2-resident at these sizes). On one SM, its cost is instructions issued.
// carve_cu_topk_numbers_batch (the NMS's order) runs the same steps per list in one launch: up to
// CARVE_CU_SORT_BLOCK results as that kernel, more with the composites in global memory and a
// bitonic network inside the block (carve_cu_bitonic_block).
// Every launch is checked; nothing is allocated; nothing synchronises with the host.

#include "carve_cuda_impl.h"

#define CARVE_CU_TOPK_THREADS 256
#define CARVE_CU_TOPK_ITEMS 16  // consecutive items per thread in a compaction chunk
#define CARVE_CU_TOPK_CHUNK (CARVE_CU_TOPK_THREADS * CARVE_CU_TOPK_ITEMS)
#define CARVE_CU_SORT_BLOCK 2048  // composites a one-block sort holds (16 KB of shared memory)
#define CARVE_CU_SCAN_THREADS 1024
#define CARVE_CU_MAX_LEVELS 8
#define CARVE_CU_TOPK_ONE_BLOCK_N 65536  // up to this many values: the one-launch top-k
#define CARVE_CU_TOPK_ONE_BLOCK_THREADS 1024
#define CARVE_CU_TOPK_UNROLL 4  // the one-block kernel's loads in flight per thread and pass

// ---- Keys ------------------------------------------------------------------------------

// order-preserving uint32 of a float: NaN -> 0, -0 -> +0.
static __device__ __forceinline__ uint32_t carve_cu_order_key(float f) {
  if (f != f) {
    return 0u;
  }
  if (f == 0.0f) {
    f = 0.0f;
  }
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Radix-select state in scratch.
typedef struct topk_state {
  uint32_t prefix;  // the digits of T fixed so far
  uint32_t mask;    // which bits of prefix are fixed
  uint32_t k_rem;   // how many keys matching prefix are still wanted
  uint32_t pad;
} topk_state;

// Scratch layout: composites (pow2 >= k'), state, histogram (256), chunk counts (2 x chunks).
static size_t pow2_at_least(size_t v) {
  size_t p = 1;
  while (p < v) {
    p <<= 1;
  }
  return p;
}

static size_t topk_chunks(size_t n) { return (n + CARVE_CU_TOPK_CHUNK - 1) / CARVE_CU_TOPK_CHUNK; }

extern "C" size_t carve_cu_topk_scratch_bytes(size_t n, size_t k) {
  const size_t kk = k < n ? k : n;
  if (n > (size_t)INT32_MAX) {
    return SIZE_MAX;
  }
  return pow2_at_least(kk == 0 ? 1 : kk) * sizeof(uint64_t) + sizeof(topk_state) + 256 * sizeof(uint32_t) +
         2 * topk_chunks(n) * sizeof(uint32_t);
}

// ---- Radix select ----------------------------------------------------------------------

__global__ void carve_cu_topk_init_kernel(topk_state* st, uint32_t* hist, uint32_t kk) {
  CARVE_CU_KERNEL_ENTRY();
  const unsigned t = threadIdx.x;
  hist[t] = 0;
  if (t == 0) {
    st->prefix = 0;
    st->mask = 0;
    st->k_rem = kk;
    st->pad = 0;
  }
}

// hist[d] += #{i : (key_i & mask) == prefix, digit(key_i, shift) == d}.
__global__ void carve_cu_topk_hist_kernel(const float* __restrict__ vals, size_t n, const topk_state* st,
                                          uint32_t* hist, uint32_t shift) {
  CARVE_CU_KERNEL_ENTRY();
  __shared__ uint32_t local[256];
  const unsigned t = threadIdx.x;
  local[t] = 0;
  __syncthreads();
  const uint32_t prefix = st->prefix, mask = st->mask;
  CARVE_CU_FOR(i, n) {
    const uint32_t key = carve_cu_order_key(vals[i]);
    if ((key & mask) == prefix) {
      atomicAdd(&local[(key >> shift) & 255u], 1u);
    }
  }
  __syncthreads();
  if (local[t] != 0) {
    atomicAdd(&hist[t], local[t]);
  }
}

// Fixes the digit at `shift`: the largest d with #{matching keys with digit >= d} >= k_rem.
// One thread; clears the histogram for the next pass.
__global__ void carve_cu_topk_digit_kernel(topk_state* st, uint32_t* hist, uint32_t shift) {
  CARVE_CU_KERNEL_ENTRY();
  uint32_t above = 0;  // matching keys with a larger digit
  int digit = 0;
  for (int d = 255; d >= 0; d--) {
    if (above + hist[d] >= st->k_rem) {
      digit = d;
      break;
    }
    above += hist[d];
  }
  st->prefix |= (uint32_t)digit << shift;
  st->mask |= 255u << shift;
  st->k_rem -= above;
  for (int d = 0; d < 256; d++) {
    hist[d] = 0;
  }
}

// ---- Compaction ------------------------------------------------------------------------

// Block-wide exclusive scan of one uint32 per thread (CARVE_CU_TOPK_THREADS threads):
// returns the thread's exclusive prefix and *total the block's sum. Two levels with four
// barriers: lane 0 of each warp scans its warp's 32 values, thread 0 the warp totals.
static __device__ uint32_t carve_cu_block_scan(uint32_t v, uint32_t* sh, uint32_t* warp_sh, uint32_t* total) {
  const unsigned t = threadIdx.x;
  const unsigned warps = CARVE_CU_TOPK_THREADS / 32;
  sh[t] = v;
  __syncthreads();
  if ((t & 31u) == 0) {
    uint32_t s = 0;
    for (unsigned j = 0; j < 32; j++) {
      const uint32_t x = sh[t + j];
      sh[t + j] = s;
      s += x;
    }
    warp_sh[t / 32] = s;
  }
  __syncthreads();
  if (t == 0) {
    uint32_t s = 0;
    for (unsigned w = 0; w < warps; w++) {
      const uint32_t x = warp_sh[w];
      warp_sh[w] = s;
      s += x;
    }
    warp_sh[warps] = s;
  }
  __syncthreads();
  const uint32_t r = sh[t] + warp_sh[t / 32];
  *total = warp_sh[warps];
  __syncthreads();  // sh and warp_sh may be reused
  return r;
}

// Chunk b = items [b CHUNK, (b + 1) CHUNK); thread t owns the ITEMS consecutive items
// from b CHUNK + t ITEMS, so a chunk is in index order thread after thread. Counts of one
// thread (<= ITEMS) and of a chunk (<= CHUNK < 2^16) are packed as (gt << 16) | eq.

// gt[b], eq[b] = #{key > T}, #{key == T} over chunk b (after the last pass T = prefix).
__global__ void carve_cu_topk_count_kernel(const float* __restrict__ vals, size_t n, const topk_state* st,
                                           uint32_t* gt, uint32_t* eq) {
  CARVE_CU_KERNEL_ENTRY();
  __shared__ uint32_t sh[CARVE_CU_TOPK_THREADS];
  __shared__ uint32_t warp_sh[CARVE_CU_TOPK_THREADS / 32 + 1];
  const uint32_t thr = st->prefix;
  const size_t first = (size_t)blockIdx.x * CARVE_CU_TOPK_CHUNK + (size_t)threadIdx.x * CARVE_CU_TOPK_ITEMS;
  uint32_t g = 0, e = 0;
  for (unsigned j = 0; j < CARVE_CU_TOPK_ITEMS; j++) {
    const size_t i = first + j;
    if (i < n) {
      const uint32_t key = carve_cu_order_key(vals[i]);
      g += key > thr;
      e += key == thr;
    }
  }
  uint32_t total;
  carve_cu_block_scan((g << 16) | e, sh, warp_sh, &total);
  if (threadIdx.x == 0) {
    gt[blockIdx.x] = total >> 16;
    eq[blockIdx.x] = total & 0xFFFFu;
  }
}

// In place: gt[b] = sum_{b' < b} gt[b'] and likewise eq (one block, tiles of 1024).
__global__ void __launch_bounds__(CARVE_CU_SCAN_THREADS)
    carve_cu_topk_scan_kernel(uint32_t* gt, uint32_t* eq, size_t chunks) {
  CARVE_CU_KERNEL_ENTRY();
  __shared__ uint32_t sg[CARVE_CU_SCAN_THREADS], se[CARVE_CU_SCAN_THREADS];
  const unsigned t = threadIdx.x;
  uint32_t carry_g = 0, carry_e = 0;
  for (size_t base = 0; base < chunks; base += CARVE_CU_SCAN_THREADS) {
    const size_t i = base + t;
    const uint32_t vg = i < chunks ? gt[i] : 0u, ve = i < chunks ? eq[i] : 0u;
    sg[t] = vg;
    se[t] = ve;
    __syncthreads();
    for (unsigned off = 1; off < CARVE_CU_SCAN_THREADS; off *= 2) {
      const uint32_t ag = t >= off ? sg[t - off] : 0u, ae = t >= off ? se[t - off] : 0u;
      __syncthreads();
      sg[t] += ag;
      se[t] += ae;
      __syncthreads();
    }
    if (i < chunks) {
      gt[i] = carry_g + sg[t] - vg;
      eq[i] = carry_e + se[t] - ve;
    }
    carry_g += sg[CARVE_CU_SCAN_THREADS - 1];
    carry_e += se[CARVE_CU_SCAN_THREADS - 1];
    __syncthreads();
  }
}

// Writes the composites of chunk b's keys > T at gt[b] + (rank among them), and of its
// keys == T with global equal-rank r = eq[b] + (rank) < k_rem at (k' - k_rem) + r, ranks
// in index order.
__global__ void carve_cu_topk_compact_kernel(const float* __restrict__ vals, size_t n, const topk_state* st,
                                             const uint32_t* gt, const uint32_t* eq, uint32_t kk,
                                             uint64_t* __restrict__ cand) {
  CARVE_CU_KERNEL_ENTRY();
  __shared__ uint32_t sh[CARVE_CU_TOPK_THREADS];
  __shared__ uint32_t warp_sh[CARVE_CU_TOPK_THREADS / 32 + 1];
  const uint32_t thr = st->prefix, k_rem = st->k_rem;
  const size_t first = (size_t)blockIdx.x * CARVE_CU_TOPK_CHUNK + (size_t)threadIdx.x * CARVE_CU_TOPK_ITEMS;
  uint32_t g = 0, e = 0;
  for (unsigned j = 0; j < CARVE_CU_TOPK_ITEMS; j++) {
    const size_t i = first + j;
    if (i < n) {
      const uint32_t key = carve_cu_order_key(vals[i]);
      g += key > thr;
      e += key == thr;
    }
  }
  uint32_t total;
  const uint32_t before = carve_cu_block_scan((g << 16) | e, sh, warp_sh, &total);
  uint32_t pos_g = gt[blockIdx.x] + (before >> 16);
  uint32_t rank_e = eq[blockIdx.x] + (before & 0xFFFFu);
  if (g == 0 && (e == 0 || rank_e >= k_rem)) {
    return;
  }
  for (unsigned j = 0; j < CARVE_CU_TOPK_ITEMS; j++) {
    const size_t i = first + j;
    if (i >= n) {
      break;
    }
    const uint32_t key = carve_cu_order_key(vals[i]);
    const uint64_t comp = ((uint64_t)key << 32) | (uint64_t)(0xFFFFFFFFu - (uint32_t)i);
    if (key > thr) {
      cand[pos_g++] = comp;
    } else if (key == thr) {
      if (rank_e < k_rem) {
        cand[(kk - k_rem) + rank_e] = comp;
      }
      rank_e++;
    }
  }
}

// ---- Sort ---------------------------------------------------------------------------------

// cand[kk .. p) = 0 (below every real composite: key 0 with index 2^32 - 1).
__global__ void carve_cu_topk_pad_kernel(uint64_t* cand, size_t kk, size_t p) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(i, p - kk) { cand[kk + i] = 0; }
}

// Pair u of one step of a descending bitonic network over p = 2^m items: pairs (i, i + stride)
// inside blocks of `size`; blocks with (i & size) == 0 sort descending, the others
// ascending (at size == p every block is descending). I: the index type (uint32_t where it
// fits: 64-bit divisions are software sequences on the GPU).
template <typename I>
static __device__ __forceinline__ void carve_cu_bitonic_pair(uint64_t* a, I u, I size, I stride) {
  const I i = 2 * stride * (u / stride) + u % stride, j = i + stride;
  const uint64_t x = a[i], y = a[j];
  const int desc = (i & size) == 0;
  if (desc ? x < y : x > y) {
    a[i] = y;
    a[j] = x;
  }
}

// One step over the whole network, a thread per pair (the multi-launch sort).
__global__ void carve_cu_bitonic_step_kernel(uint64_t* a, size_t p, size_t size, size_t stride) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(t, p / 2) { carve_cu_bitonic_pair<size_t>(a, t, size, stride); }
}

// The whole descending network on a[0 .. p) (shared or global memory), p a power of two, by one block: each
// thread the pairs t, t + blockDim, ... of each step, a barrier between steps (which also makes the block's
// global writes visible to it); every thread of the block must call it.
static __device__ void carve_cu_bitonic_block(uint64_t* a, uint32_t p) {
  for (uint32_t size = 2; size <= p; size *= 2) {
    for (uint32_t stride = size / 2; stride > 0; stride /= 2) {
      for (uint32_t u = threadIdx.x; u < p / 2; u += blockDim.x) {
        carve_cu_bitonic_pair<uint32_t>(a, u, size, stride);
      }
      __syncthreads();
    }
  }
}

// The same network on p <= CARVE_CU_SORT_BLOCK items in shared memory, one block of
// CARVE_CU_SORT_BLOCK / 2 threads (each owns one pair per step); pads with 0 itself.
__global__ void __launch_bounds__(CARVE_CU_SORT_BLOCK / 2)
    carve_cu_bitonic_block_kernel(uint64_t* a, uint32_t kk, uint32_t p) {
  CARVE_CU_KERNEL_ENTRY();
  __shared__ uint64_t s[CARVE_CU_SORT_BLOCK];
  const unsigned t = threadIdx.x;
  for (unsigned i = t; i < p; i += blockDim.x) {
    s[i] = i < kk ? a[i] : 0;
  }
  __syncthreads();
  carve_cu_bitonic_block(s, p);
  for (unsigned i = t; i < kk; i += blockDim.x) {
    a[i] = s[i];
  }
}

// ---- One launch ----------------------------------------------------------------------------

// The inclusive sum of v over lanes 0 .. this lane of a full warp (every lane must call it).
static __device__ __forceinline__ uint32_t carve_cu_warp_incl_sum(uint32_t v) {
  const unsigned lane = threadIdx.x & 31u;
  for (unsigned off = 1; off < 32; off *= 2) {
    const uint32_t u = __shfl_up_sync(0xFFFFFFFFu, v, off);
    if (lane >= off) {
      v += u;
    }
  }
  return v;
}

// A radix-select pass's digit, by the 32 lanes of one warp (every lane calls it): the largest d with
// #{matching keys whose digit >= d} >= need. Each lane sums 8 bins from the top (lane l: bins
// 255 - 8 l - j, j = 0 .. 7) and a scan over the lanes finds the one holding the digit; that lane returns
// true with the digit, the matching keys above its bin and the keys in it.
static __device__ __forceinline__ bool carve_cu_pick_digit(const uint32_t* hist, uint32_t need, uint32_t* digit,
                                                           uint32_t* above, uint32_t* in_bin) {
  const unsigned lane = threadIdx.x & 31u;
  uint32_t c[8], sum = 0;
  CARVE_CU_UNROLL
  for (int j = 0; j < 8; j++) {
    c[j] = hist[255u - 8u * lane - (uint32_t)j];
    sum += c[j];
  }
  const uint32_t incl = carve_cu_warp_incl_sum(sum);  // matching keys in this lane's bins and every bin above
  if (!(incl - sum < need && need <= incl)) {
    return false;
  }
  uint32_t a = incl - sum;
  CARVE_CU_UNROLL
  for (int j = 0; j < 8; j++) {
    if (a + c[j] >= need) {
      *digit = 255u - 8u * lane - (uint32_t)j;
      *above = a;
      *in_bin = c[j];
      return true;
    }
    a += c[j];
  }
  return false;  // not reached: need <= incl
}

// A radix select's state in shared memory over keys of type K (uint32_t order keys, or uint64_t composites): the
// digits of the k-th largest key fixed so far (prefix), which bits they are (mask), how many keys matching them are
// still wanted (k_rem), how many keys match them (in_bin: the chosen bin's count, after the first pass), whether the
// set is known (settled), and the digit histograms: pass p counts into hist[p % 2] while its threads clear the
// other for pass p + 1 (pass p - 1's, read before that pass's last barrier), one barrier a pass fewer.
template <typename K>
struct radix_state {
  uint32_t hist[2][256];
  K prefix, mask;
  uint32_t k_rem, in_bin, settled;
};

// Every thread: starts a select of the kk largest (the state, both histograms cleared), then a barrier. `fixed`:
// bits that every key has set, taken as known digits (no pass over a byte of them).
template <typename K>
static __device__ __forceinline__ void carve_cu_radix_start(radix_state<K>* rs, uint32_t kk, K fixed = 0) {
  if (threadIdx.x == 0) {
    rs->prefix = fixed;
    rs->mask = fixed;
    rs->k_rem = kk;
    rs->in_bin = 0xFFFFFFFFu;  // unknown before the first pass (carve_cu_select64 lists no more than a thread each)
    rs->settled = 0;
  }
  for (unsigned d = threadIdx.x; d < 2 * 256; d += blockDim.x) {
    rs->hist[d / 256][d % 256] = 0;
  }
  __syncthreads();
}

// Every thread, in pass `pass` before its radix_fix: clears the histogram of the next pass.
template <typename K>
static __device__ __forceinline__ void carve_cu_radix_clear_next(radix_state<K>* rs, int pass) {
  for (unsigned d = threadIdx.x; d < 256; d += blockDim.x) {
    rs->hist[(pass + 1) % 2][d] = 0;
  }
}

// One key per lane into the histogram (every lane of the warp calls it; match false: not counted): the lanes that
// share a bin find each other with one __match_any_sync and the lowest adds their count (keys sharing their leading
// digits share a bin, and one bin taking every lane's atomicAdd would serialise the warp).
static __device__ __forceinline__ void carve_cu_radix_count(uint32_t* hist, bool match, uint32_t bin) {
  const unsigned peers = __match_any_sync(0xFFFFFFFFu, match ? bin : 0xFFFFFFFFu);
  if (match && (unsigned)(__ffs((int)peers) - 1) == (threadIdx.x & 31u)) {
    atomicAdd(&hist[bin], (uint32_t)__popc(peers));
  }
}

// Every thread, after its keys of pass `pass` are counted: a barrier, warp 0 fixes the digit at `shift`
// (carve_cu_pick_digit), a barrier. True (block-uniform) when the chosen bin is wanted whole: every key of it is in
// the result and none below it, so the remaining digits cannot change the set and the select stops, the set being
// the keys with (key & mask) >= prefix.
template <typename K>
static __device__ bool carve_cu_radix_fix(radix_state<K>* rs, int pass, uint32_t shift) {
  __syncthreads();
  if (threadIdx.x < 32) {
    const uint32_t need = rs->k_rem;  // read by every lane before one lane writes it below
    __syncwarp();
    uint32_t digit, above, in_bin;
    if (carve_cu_pick_digit(rs->hist[pass % 2], need, &digit, &above, &in_bin)) {
      rs->prefix |= (K)digit << shift;
      rs->mask |= (K)255u << shift;
      rs->k_rem = need - above;
      rs->in_bin = in_bin;
      rs->settled = in_bin == need - above;
    }
  }
  __syncthreads();
  return rs->settled != 0;
}

// Descending rank sort of the kk distinct composites s[0 .. kk) (written by the block before the call):
// composite e goes to place[e] = #{j : s[j] > s[e]}, every comparison made once. With kk < 1024 the threads
// split: thread t takes composite t % kk against the slice t / kk of the others. Every thread of the block
// calls it (barriers); place[e] is read after it.
static __device__ void carve_cu_rank_place(const uint64_t* s, uint32_t kk, uint32_t* place) {
  const unsigned t = threadIdx.x, threads = blockDim.x;
  for (uint32_t e = t; e < kk; e += threads) {
    place[e] = 0;
  }
  __syncthreads();
  const uint32_t parts = kk < threads ? threads / kk : 1u;
  const uint32_t per = (kk + parts - 1) / parts;
  for (uint32_t u = t; u < kk * parts; u += threads) {
    const uint32_t e = u % kk, part = u / kk;
    const uint32_t j0 = part * per, j1 = j0 + per < kk ? j0 + per : kk;
    const uint64_t me = s[e];
    uint32_t above = 0;
    for (uint32_t jj = j0; jj < j1; jj++) {
      above += s[jj] > me;
    }
    atomicAdd(&place[e], above);
  }
  __syncthreads();
}

// The index a composite carries.
static __device__ __forceinline__ uint32_t carve_cu_comp_index(uint64_t comp) {
  return 0xFFFFFFFFu - (uint32_t)comp;
}

// The state of carve_cu_topk_block in shared memory.
typedef struct topk_block_shared {
  radix_state<uint32_t> rs;
  uint32_t warp_eq[CARVE_CU_TOPK_ONE_BLOCK_THREADS / 32];
  uint32_t n_gt;
} topk_block_shared;

// The whole top-k of vals[0 .. n) (global memory) by one block of CARVE_CU_TOPK_ONE_BLOCK_THREADS threads,
// kk <= CARVE_CU_SORT_BLOCK, into idx[0 .. kk) / val (may be NULL; either may be in shared memory): steps 1-4
// above with the state, the histogram and the kk composites s[] / places place[] in shared memory, the same
// result as the multi-launch path. What it does differently (Nsight Compute, H100, the head's 8400 and 24000
// scores: 88k and 178k warp instructions, 28 and 47 us, before):
//  - the histogram: the lanes of a warp that share a bin find each other with one __match_any_sync
//    and its lowest lane adds their count (keys sharing their leading digits share a bin, and
//    one bin taking every lane's atomicAdd would serialise the warp);
//  - a pass whose chosen bin holds exactly the k_rem keys still wanted ends the select: every key
//    of that bin is in the result and none below it, so the remaining digits cannot change the
//    set (T stays a prefix under `mask`, and the compaction compares masked keys);
//  - the sort: composites are distinct, so each one's place is the number of composites above it
//    (carve_cu_rank_place: no barrier between steps), where the bitonic network took 45 barriered
//    steps (31k warp instructions);
//  - warp 0 picks each digit (carve_cu_pick_digit).
// The compaction: thread t owns the consecutive values [t c, (t + 1) c), c = ceil(n / 1024): it
// counts its keys above T and equal to it, one block-wide scan of the equal counts ranks them in
// index order, and a second walk writes the keys above T at atomic positions in [0, kk - k_rem) (any
// order: the rank sort orders them) and the keys equal to T ranked below k_rem at [kk - k_rem, kk):
// the lowest indices, as the multi-launch path. Every thread of the block calls it (barriers). vals is not
// __restrict__: the fused e2e head calls it on scores the block has just written (a read-only, non-coherent
// load of them would be undefined).
// carve_cu_topk_select writes steps 2-3's kk composites (any kk <= n) to s (shared or global memory; the
// caller's barrier before reading them), carve_cu_topk_block sorts them by rank (step 4).
static __device__ void carve_cu_topk_select(const float* vals, uint32_t n, uint32_t kk, uint64_t* s,
                                            topk_block_shared* sh) {
  const unsigned t = threadIdx.x, lane = t & 31u, warp = t / 32u;
  const unsigned threads = CARVE_CU_TOPK_ONE_BLOCK_THREADS;
  carve_cu_radix_start(&sh->rs, kk);
  if (t == 0) {
    sh->n_gt = 0;
  }
  // 2. radix select, up to four passes of 8 bits.
  for (int pass = 0; pass < 4; pass++) {
    const uint32_t shift = 24u - 8u * (uint32_t)pass;
    carve_cu_radix_clear_next(&sh->rs, pass);
    const uint32_t pre = sh->rs.prefix, msk = sh->rs.mask;
    uint32_t* hist = sh->rs.hist[pass % 2];
    // CARVE_CU_TOPK_UNROLL loads in flight per thread, then each key into the histogram (the loop
    // bound is warp-uniform, so every lane takes part in __match_any_sync).
    for (uint32_t i0 = t - lane; i0 < n; i0 += threads * CARVE_CU_TOPK_UNROLL) {
      uint32_t key[CARVE_CU_TOPK_UNROLL];
      for (int j = 0; j < CARVE_CU_TOPK_UNROLL; j++) {
        const uint32_t i = i0 + (uint32_t)j * threads + lane;
        key[j] = i < n ? carve_cu_order_key(vals[i]) : 0u;
      }
      for (int j = 0; j < CARVE_CU_TOPK_UNROLL; j++) {
        const uint32_t i = i0 + (uint32_t)j * threads + lane;
        carve_cu_radix_count(hist, i < n && (key[j] & msk) == pre, (key[j] >> shift) & 255u);
      }
    }
    if (carve_cu_radix_fix(&sh->rs, pass, shift)) {
      break;
    }
  }
  // 3. compaction over each thread's consecutive values, on keys under the select's mask.
  const uint32_t thr = sh->rs.prefix, msk = sh->rs.mask, rem = sh->rs.k_rem;
  const uint32_t chunk = (n + threads - 1) / threads;
  const uint32_t lo = t * chunk < n ? t * chunk : n, hi = lo + chunk < n ? lo + chunk : n;
  uint32_t n_above = 0, n_tie = 0;
  for (uint32_t i = lo; i < hi; i++) {
    const uint32_t key = carve_cu_order_key(vals[i]) & msk;
    n_above += key > thr;
    n_tie += key == thr;
  }
  const uint32_t incl = carve_cu_warp_incl_sum(n_tie);  // the ties of this thread and of the lower lanes
  if (lane == 31) {
    sh->warp_eq[warp] = incl;
  }
  __syncthreads();
  if (warp == 0) {  // the warps' totals to exclusive offsets (32 warps of 32)
    const uint32_t total = sh->warp_eq[lane];
    sh->warp_eq[lane] = carve_cu_warp_incl_sum(total) - total;
  }
  __syncthreads();
  uint32_t rank = sh->warp_eq[warp] + incl - n_tie;  // ties at lower indices
  uint32_t pos = n_above != 0 ? atomicAdd(&sh->n_gt, n_above) : 0u;
  if (n_above != 0 || (n_tie != 0 && rank < rem)) {
    for (uint32_t i = lo; i < hi; i++) {
      const uint32_t full = carve_cu_order_key(vals[i]), key = full & msk;
      const uint64_t comp = ((uint64_t)full << 32) | (uint64_t)(0xFFFFFFFFu - i);
      if (key > thr) {
        s[pos++] = comp;
      } else if (key == thr) {
        if (rank < rem) {
          s[(kk - rem) + rank] = comp;
        }
        rank++;
      }
    }
  }
}

static __device__ void carve_cu_topk_block(const float* vals, uint32_t n, uint32_t kk, int32_t* idx,
                                           float* val, uint64_t* s, uint32_t* place, topk_block_shared* sh) {
  const unsigned threads = CARVE_CU_TOPK_ONE_BLOCK_THREADS, t = threadIdx.x;
  carve_cu_topk_select(vals, n, kk, s, sh);
  // 4. rank sort, descending.
  carve_cu_rank_place(s, kk, place);
  for (uint32_t e = t; e < kk; e += threads) {
    const uint32_t index = carve_cu_comp_index(s[e]);
    idx[place[e]] = (int32_t)index;
    if (val != NULL) {
      val[place[e]] = vals[index];
    }
  }
}

// Block b of a grid of several: the top-k of vals[b n .. (b + 1) n) into idx / val [b kk ..) (a batch),
// by carve_cu_topk_block.
__global__ void __launch_bounds__(CARVE_CU_TOPK_ONE_BLOCK_THREADS)
    carve_cu_topk_one_block_kernel(const float* __restrict__ vals, uint32_t n, uint32_t kk,
                                   int32_t* __restrict__ idx, float* __restrict__ val) {
  CARVE_CU_KERNEL_ENTRY();
  __shared__ uint64_t s[CARVE_CU_SORT_BLOCK];
  __shared__ uint32_t place[CARVE_CU_SORT_BLOCK];
  __shared__ topk_block_shared sh;
  carve_cu_topk_block(vals + (size_t)blockIdx.x * n, n, kk, idx + (size_t)blockIdx.x * kk,
                      val != NULL ? val + (size_t)blockIdx.x * kk : NULL, s, place, &sh);
}

// min(k, the numbers among v[0 .. n)) (NaN left out), for every thread of the block (which must all call it:
// barriers); *total: a shared counter.
static __device__ uint32_t carve_cu_block_numbers(const float* v, size_t n, size_t k, uint32_t* total) {
  if (threadIdx.x == 0) {
    *total = 0;
  }
  __syncthreads();
  uint32_t mine = 0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    mine += v[i] == v[i];
  }
  if (mine != 0) {
    atomicAdd(total, mine);
  }
  __syncthreads();
  return *total < k ? *total : (uint32_t)k;
}

// Block b: the numbers of vals[b n .. (b + 1) n) (NaN left out), the min(k, their count) = kk best of them into
// idx[b k ..) by carve_cu_topk_select, kk into count[b]: NaN ranks below every number, so the kk best values
// are numbers. Up to CARVE_CU_SORT_BLOCK composites in shared memory, sorted by rank (carve_cu_topk_block); more
// in gs[b p ..) (global memory, p = the power of two at least k), sorted by the block's bitonic network
// (carve_cu_bitonic_block).
__global__ void __launch_bounds__(CARVE_CU_TOPK_ONE_BLOCK_THREADS)
    carve_cu_topk_numbers_kernel(const float* __restrict__ vals, uint32_t n, uint32_t k, int32_t* __restrict__ idx,
                                 uint32_t* __restrict__ count, uint64_t* gs, uint32_t p) {
  CARVE_CU_KERNEL_ENTRY();
  __shared__ uint64_t s[CARVE_CU_SORT_BLOCK];
  __shared__ uint32_t place[CARVE_CU_SORT_BLOCK];
  __shared__ topk_block_shared sh;
  __shared__ uint32_t numbers;
  const unsigned t = threadIdx.x;
  const size_t b = blockIdx.x;
  vals += b * n;
  const uint32_t kk = carve_cu_block_numbers(vals, n, k, &numbers);  // the same for every thread
  if (t == 0) {
    count[b] = kk;
  }
  if (kk == 0) {
    return;
  }
  if (kk <= CARVE_CU_SORT_BLOCK) {
    carve_cu_topk_block(vals, n, kk, idx + b * k, NULL, s, place, &sh);
    return;
  }
  uint64_t* a = gs + b * p;
  uint32_t q = 1;  // the power of two at least kk: fewer steps than p when fewer values are numbers
  while (q < kk) {
    q *= 2;
  }
  carve_cu_topk_select(vals, n, kk, a, &sh);
  for (uint32_t i = kk + t; i < q; i += CARVE_CU_TOPK_ONE_BLOCK_THREADS) {
    a[i] = 0;  // padding: below every composite
  }
  __syncthreads();  // the compaction's composites and the padding
  // the block's bitonic network in global memory: (log2 q)(log2 q + 1) / 2 steps of q / 2 pairs, where a rank
  // sort would compare every pair (kk^2)
  carve_cu_bitonic_block(a, q);
  for (uint32_t e = t; e < kk; e += CARVE_CU_TOPK_ONE_BLOCK_THREADS) {
    idx[b * k + e] = (int32_t)carve_cu_comp_index(a[e]);
  }
}

// idx[i] = index in composite i; val[i] = vals[idx[i]] (val may be NULL).
__global__ void carve_cu_topk_output_kernel(const uint64_t* cand, size_t kk, const float* vals, int32_t* idx,
                                            float* val) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(i, kk) {
    const uint32_t index = 0xFFFFFFFFu - (uint32_t)cand[i];
    idx[i] = (int32_t)index;
    if (val != NULL) {
      val[i] = vals[index];
    }
  }
}

// The k' = min(k, n) best of vals[0 .. n) into idx / val by the multi-launch path (steps 1-4 in 14 or more
// launches); scratch: carve_cu_topk_scratch_bytes.
static carve_status topk_run(cudaStream_t stream, const float* vals, size_t n, size_t kk, int32_t* idx, float* val,
                             void* scratch) {
  const size_t p = pow2_at_least(kk);
  uint64_t* cand = (uint64_t*)scratch;                 // (p) composites
  topk_state* st = (topk_state*)(cand + p);            // radix-select state
  uint32_t* hist = (uint32_t*)(st + 1);                // (256) digit histogram
  const size_t chunks = topk_chunks(n);
  uint32_t* gt = hist + 256;                           // (chunks) keys > T per chunk, then offsets
  uint32_t* eq = gt + chunks;                          // (chunks) keys == T per chunk, then offsets

  CARVE_LAUNCH(carve_cu_topk_init_kernel, 1, 256, stream, st, hist, (uint32_t)kk);
  CARVE_CU_CHECK_LAUNCH();
  for (int pass = 0; pass < 4; pass++) {
    const uint32_t shift = 24u - 8u * (uint32_t)pass;
    CARVE_LAUNCH(carve_cu_topk_hist_kernel, carve_cu_blocks(n), 256, stream, vals, n, (const topk_state*)st, hist,
                 shift);
    CARVE_CU_CHECK_LAUNCH();
    CARVE_LAUNCH(carve_cu_topk_digit_kernel, 1, 1, stream, st, hist, shift);
    CARVE_CU_CHECK_LAUNCH();
  }
  CARVE_LAUNCH(carve_cu_topk_count_kernel, (unsigned)chunks, CARVE_CU_TOPK_THREADS, stream, vals, n,
               (const topk_state*)st, gt, eq);
  CARVE_CU_CHECK_LAUNCH();
  CARVE_LAUNCH(carve_cu_topk_scan_kernel, 1, CARVE_CU_SCAN_THREADS, stream, gt, eq, chunks);
  CARVE_CU_CHECK_LAUNCH();
  CARVE_LAUNCH(carve_cu_topk_compact_kernel, (unsigned)chunks, CARVE_CU_TOPK_THREADS, stream, vals, n,
               (const topk_state*)st, (const uint32_t*)gt, (const uint32_t*)eq, (uint32_t)kk, cand);
  CARVE_CU_CHECK_LAUNCH();
  if (p <= CARVE_CU_SORT_BLOCK) {
    CARVE_LAUNCH(carve_cu_bitonic_block_kernel, 1, CARVE_CU_SORT_BLOCK / 2, stream, cand, (uint32_t)kk, (uint32_t)p);
    CARVE_CU_CHECK_LAUNCH();
  } else {
    CARVE_LAUNCH(carve_cu_topk_pad_kernel, carve_cu_blocks(p - kk), CARVE_CU_THREADS, stream, cand, kk, p);
    CARVE_CU_CHECK_LAUNCH();
    for (size_t size = 2; size <= p; size *= 2) {
      for (size_t stride = size / 2; stride > 0; stride /= 2) {
        CARVE_LAUNCH(carve_cu_bitonic_step_kernel, carve_cu_blocks(p / 2), CARVE_CU_THREADS, stream, cand, p, size,
                     stride);
        CARVE_CU_CHECK_LAUNCH();
      }
    }
  }
  CARVE_LAUNCH(carve_cu_topk_output_kernel, carve_cu_blocks(kk), CARVE_CU_THREADS, stream, (const uint64_t*)cand, kk,
               vals, idx, val);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// The top-k of each of `batch` consecutive value lists of n (idx / val [b kk ..) for list b; val may be NULL):
// one launch of the one-block kernel when it applies, else topk_run list by list on the one scratch.
static carve_status topk_batch(cudaStream_t stream, const float* vals, size_t n, size_t kk, size_t batch, int32_t* idx,
                               float* val, void* scratch) {
  if (n <= CARVE_CU_TOPK_ONE_BLOCK_N && kk <= CARVE_CU_SORT_BLOCK && batch <= 0x7FFFFFFFu) {
    CARVE_LAUNCH(carve_cu_topk_one_block_kernel, (unsigned)batch, CARVE_CU_TOPK_ONE_BLOCK_THREADS, stream, vals,
                 (uint32_t)n, (uint32_t)kk, idx, val);
    CARVE_CU_CHECK_LAUNCH();
    return CARVE_OK;
  }
  for (size_t b = 0; b < batch; b++) {
    const carve_status st = topk_run(stream, vals + b * n, n, kk, idx + b * kk, val != NULL ? val + b * kk : NULL,
                                     scratch);
    if (st != CARVE_OK) {
      return st;
    }
  }
  return CARVE_OK;
}

extern "C" carve_status carve_cu_topk(const carve_cu_ctx* ctx, const float* vals, size_t n, size_t k, int32_t* idx,
                                      float* val, void* scratch) {
  if (ctx == NULL || n > (size_t)INT32_MAX) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const size_t kk = k < n ? k : n;
  if (kk == 0) {
    return CARVE_OK;
  }
  if (vals == NULL || idx == NULL || scratch == NULL || (uintptr_t)scratch % sizeof(uint64_t) != 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  return topk_batch(ctx->stream, vals, n, kk, 1, idx, val, scratch);
}

extern "C" size_t carve_cu_topk_numbers_scratch_bytes(size_t n, size_t k, size_t batch) {
  const size_t kk = k < n ? k : n;
  if (batch == 0 || n > (size_t)INT32_MAX) {
    return SIZE_MAX;
  }
  if (kk <= CARVE_CU_SORT_BLOCK) {
    return 0;  // everything in shared memory
  }
  const size_t p = pow2_at_least(kk);
  if (batch > SIZE_MAX / 16 / p) {
    return SIZE_MAX;
  }
  return batch * p * sizeof(uint64_t);  // each list's composites, padded to a power of two
}

extern "C" carve_status carve_cu_topk_numbers_batch(const carve_cu_ctx* ctx, const float* vals, size_t n, size_t k,
                                                    size_t batch, int32_t* idx, uint32_t* count, void* scratch) {
  const size_t kk = k < n ? k : n;
  const size_t bytes = carve_cu_topk_numbers_scratch_bytes(n, k, batch);
  if (ctx == NULL || vals == NULL || idx == NULL || count == NULL || bytes == SIZE_MAX || batch > 0x7FFFFFFFu ||
      (bytes != 0 && (scratch == NULL || (uintptr_t)scratch % sizeof(uint64_t) != 0))) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (kk == 0) {
    return cudaMemsetAsync(count, 0, batch * sizeof(uint32_t), ctx->stream) == cudaSuccess ? CARVE_OK
                                                                                            : CARVE_ERR_BACKEND;
  }
  // one launch: a block per list, whatever n (the select reads a list 5 or 6 times from one SM, where the
  // multi-launch top-k would order min(k, n) values, NaN included: 120 launches for k = 30000, list after list)
  CARVE_LAUNCH(carve_cu_topk_numbers_kernel, (unsigned)batch, CARVE_CU_TOPK_ONE_BLOCK_THREADS, ctx->stream, vals,
               (uint32_t)n, (uint32_t)kk, idx, count, (uint64_t*)scratch, (uint32_t)pow2_at_least(kk));
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// ---- Gather ------------------------------------------------------------------------------

// rows[i][ch] = src[idx[i]][ch].
__global__ void carve_cu_gather_rows_kernel(const float* __restrict__ src, size_t src_stride, uint32_t c,
                                            const int32_t* __restrict__ idx, size_t n, float* __restrict__ rows) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(e, n * c) {
    const size_t i = e / c, ch = e % c;
    rows[e] = src[(size_t)idx[i] * src_stride + ch];
  }
}

extern "C" carve_status carve_cu_gather_rows(const carve_cu_ctx* ctx, const float* src, size_t src_stride, uint32_t c,
                                             const int32_t* idx, size_t n, float* rows) {
  if (ctx == NULL || src == NULL || idx == NULL || rows == NULL || c == 0 || src_stride < c) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (n == 0) {
    return CARVE_OK;
  }
  CARVE_LAUNCH(carve_cu_gather_rows_kernel, carve_cu_blocks(n * c), CARVE_CU_THREADS, ctx->stream, src, src_stride, c,
               idx, n, rows);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

// ---- End-to-end post-processing ------------------------------------------------------------

// The kernels are templates over the level type Lv: carve_level (float32 maps) or carve_cu_level_h
// (an fp16 package's half maps). Every map value is read through carve_cu_ld, widened to float32
// (the plain load for float), then the same float32 arithmetic: on halves, the rows of float32
// copies of the maps, bit for bit.

// The levels by value (kernel arguments): anchors of level l are [start[l], start[l + 1]).
template <typename Lv>
struct e2e_levels {
  Lv lv[CARVE_CU_MAX_LEVELS];
  size_t start[CARVE_CU_MAX_LEVELS + 1];
  uint32_t num;
};

// The level of anchor a and its pixel in that level.
template <typename Lv>
static __device__ __forceinline__ const Lv* carve_cu_locate(const e2e_levels<Lv>* L, size_t a, size_t* pixel) {
  uint32_t l = 0;
  while (l + 1 < L->num && a >= L->start[l + 1]) {
    l++;
  }
  *pixel = a - L->start[l];
  return &L->lv[l];
}

// One step of a max ignoring NaN from m = NaN: NaN only when every value is NaN (carve_post.c's rule).
static __device__ __forceinline__ float carve_cu_max_ignoring_nan(float m, float v) {
  return v > m || m != m ? v : m;
}

// Image b's map of a view whose image 0 starts at `base` (images one after another: h w stride elements each).
template <typename T, typename Lv>
static __device__ __forceinline__ const T* carve_cu_image_map(const T* base, const Lv* lv, size_t stride, size_t b) {
  return base + b * lv->h * lv->w * stride;
}

// Step 1 scores: s[b A + a] = sigmoid(max_c logit[a][c]) of image b (= max_c sigmoid, sigmoid being monotonic).
// CARVE_CU_E2E_SUB lanes per anchor, lane j reading classes j, j + SUB, ... (the lanes of an anchor read
// neighbouring values), then a butterfly over the lanes: max ignoring NaN is order-free but for the sign of
// a zero, which sigmoid does not see. The loop bound is warp-uniform (every lane takes part in the shuffles).
#define CARVE_CU_E2E_SUB 8
template <typename Lv>
__global__ void carve_cu_e2e_anchor_scores_kernel(e2e_levels<Lv> L, size_t anchors, size_t batch, size_t nc,
                                                  float* __restrict__ s) {
  CARVE_CU_KERNEL_ENTRY();
  const size_t total = batch * anchors * CARVE_CU_E2E_SUB;
  const unsigned lane = threadIdx.x & 31u, sub = threadIdx.x % CARVE_CU_E2E_SUB;
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e - lane < total;
       e += (size_t)gridDim.x * blockDim.x) {
    // batch A < 2^31 (carve_cu_e2e_batch_scratch_bytes): 32-bit divisions where size_t ones are software sequences
    const uint32_t g = (uint32_t)(e / CARVE_CU_E2E_SUB), b = g / (uint32_t)anchors, a = g - b * (uint32_t)anchors;
    float m = NAN;
    if (e < total) {
      size_t pixel;
      const Lv* lv = carve_cu_locate(&L, a, &pixel);
      const auto* cls = carve_cu_image_map(lv->cls, lv, lv->cls_stride, b) + pixel * lv->cls_stride;
      for (size_t c = sub; c < nc; c += CARVE_CU_E2E_SUB) {
        m = carve_cu_max_ignoring_nan(m, carve_cu_ld(cls, c));
      }
    }
    for (unsigned off = CARVE_CU_E2E_SUB / 2; off > 0; off /= 2) {
      m = carve_cu_max_ignoring_nan(m, __shfl_xor_sync(0xFFFFFFFFu, m, (int)off));
    }
    if (e < total && sub == 0) {
      s[g] = carve_cu_sigmoid(m);
    }
  }
}

// Step 2 scores: s[(b k' + r) nc + c] = sigmoid(logit[ori[b k' + r]][c]) of image b, for its k' chosen anchors.
template <typename Lv>
__global__ void carve_cu_e2e_class_scores_kernel(e2e_levels<Lv> L, const int32_t* __restrict__ ori, size_t kk,
                                                 size_t batch, size_t nc, float* __restrict__ s) {
  CARVE_CU_KERNEL_ENTRY();
  CARVE_CU_FOR(e, batch * kk * nc) {
    const size_t br = e / nc, c = e % nc, b = br / kk;
    size_t pixel;
    const Lv* lv = carve_cu_locate(&L, (size_t)ori[br], &pixel);
    const auto* cls = carve_cu_image_map(lv->cls, lv, lv->cls_stride, b);
    s[e] = carve_cu_sigmoid(carve_cu_ld(cls, pixel * lv->cls_stride + c));
  }
}

// The row of anchor `anchor`, class c of image b: the decoded box (xyxy, or OBB's xywh by dist2rbox with each
// product rounded on its own as PyTorch does), the score, the class and the extras (POSE: kx = (raw_x + ax) s,
// ky = (raw_y + ay) s, kv = sigmoid(raw_v); others raw), as carve_e2e_postprocess_task.
template <typename Lv>
static __device__ void carve_cu_e2e_row(const e2e_levels<Lv>* L, size_t anchor, size_t c, size_t b,
                                        size_t extra_channels, int task, float* __restrict__ row) {
  size_t pixel;
  const Lv* lv = carve_cu_locate(L, anchor, &pixel);
  const uint32_t px = (uint32_t)pixel, w = (uint32_t)lv->w;  // pixel < A < 2^31: 32-bit division, not size_t's
  const float ax = (float)(px % w) + 0.5f;
  const float ay = (float)(px / w) + 0.5f;
  const float s = lv->stride;
  const auto* box = carve_cu_image_map(lv->box, lv, lv->box_stride, b) + pixel * lv->box_stride;
  const float ltrb[4] = {carve_cu_ld(box, 0), carve_cu_ld(box, 1), carve_cu_ld(box, 2), carve_cu_ld(box, 3)};
  const auto* extra =
      extra_channels != 0 ? carve_cu_image_map(lv->extra, lv, lv->extra_stride, b) + pixel * lv->extra_stride : NULL;
  if (task == CARVE_E2E_OBB) {
    const float xf = (ltrb[2] - ltrb[0]) / 2.0f;
    const float yf = (ltrb[3] - ltrb[1]) / 2.0f;
    const float theta = carve_cu_ld(extra, 0);
    const float co = cosf(theta), sn = sinf(theta);
    const float x = __fsub_rn(__fmul_rn(xf, co), __fmul_rn(yf, sn));
    const float y = __fadd_rn(__fmul_rn(xf, sn), __fmul_rn(yf, co));
    row[0] = (x + ax) * s;
    row[1] = (y + ay) * s;
    row[2] = (ltrb[0] + ltrb[2]) * s;
    row[3] = (ltrb[1] + ltrb[3]) * s;
  } else {
    row[0] = (ax - ltrb[0]) * s;
    row[1] = (ay - ltrb[1]) * s;
    row[2] = (ax + ltrb[2]) * s;
    row[3] = (ay + ltrb[3]) * s;
  }
  const auto* cls = carve_cu_image_map(lv->cls, lv, lv->cls_stride, b);
  row[4] = carve_cu_sigmoid(carve_cu_ld(cls, pixel * lv->cls_stride + c));
  row[5] = (float)c;
  if (task == CARVE_E2E_POSE) {
    for (size_t j = 0; j + 3 <= extra_channels; j += 3) {
      row[6 + j] = (carve_cu_ld(extra, j) + ax) * s;
      row[6 + j + 1] = (carve_cu_ld(extra, j + 1) + ay) * s;
      row[6 + j + 2] = carve_cu_sigmoid(carve_cu_ld(extra, j + 2));
    }
  } else {
    for (size_t j = 0; j < extra_channels; j++) {
      row[6 + j] = carve_cu_ld(extra, j);
    }
  }
}

// Row i from the i-th best (anchor rank, class) pair (carve_cu_e2e_row).
// Image b's rows are rows [b k', (b + 1) k'), from its ori / best [b k' ..).
template <typename Lv>
__global__ void carve_cu_e2e_rows_kernel(e2e_levels<Lv> L, const int32_t* __restrict__ ori,
                                         const int32_t* __restrict__ best, size_t kk, size_t batch, size_t nc,
                                         size_t extra_channels, int task, float* __restrict__ rows) {
  CARVE_CU_KERNEL_ENTRY();
  const size_t width = 6 + extra_channels;
  CARVE_CU_FOR(i, batch * kk) {
    const size_t b = i / kk;
    const size_t flat = (size_t)best[i];
    carve_cu_e2e_row(&L, (size_t)ori[b * kk + flat / nc], flat % nc, b, extra_channels, task, rows + i * width);
  }
}

// ---- The fused head: both top-k steps and the rows in one block per image ------------------------
//
// After the anchor scores, one block of 1024 threads per image does the rest (2 launches in all, where
// the general path takes 5): step 1's select over the A anchor scores held in registers
// (CARVE_CU_E2E_ITEMS per thread), step 2 over the class scores that can still be chosen, the rows.
// Step 2 prunes: let T be the k'-th best anchor score of step 1. Each chosen anchor's best class score IS
// its anchor score (the same sigmoid of the same max logit), so at least k' of the k' nc class scores are
// >= T, the k'-th best of them is >= T, and no score below T can be chosen: the candidates are the
// scores >= T (keys, NaN's 0 included), with their flat index r nc + c, and the k' best of them are the k'
// best of all, the same composites in the same order (ties to the lower flat index). On a trained
// model few class scores pass T (a few hundred); when more than CARVE_CU_E2E_CAND do (flat scores), the
// block writes every class score to scratch and runs carve_cu_topk_block over them: the same result.
// Both selects work on 64-bit composites (key << 32 | ~index), which are distinct, so neither needs a
// tie pass: carve_cu_select64; each orders its k' by carve_cu_rank_lists. The gather of step 2 reads each chosen
// anchor's logit row from a table in shared memory and skips the sigmoid of logits under a bound that no candidate
// reaches (carve_cu_e2e_logit_bound). On an H200 (Nsight Compute, yolo26n fp16 at 640, 2026-11-28) the kernel before
// these two took 50 us on its one SM, 230k warp instructions: 140k the gather (per class score a level search,
// 64-bit index arithmetic, a division and a sigmoid), 36k the two rank sorts.
#define CARVE_CU_E2E_ITEMS 12    // anchor scores per thread in registers: the fused head takes A <= 12288
#define CARVE_CU_E2E_KMAX 1024   // its largest k' (the shared lists)
#define CARVE_CU_E2E_CAND 3072   // the step-2 candidates it holds (24 KB)
#define CARVE_CU_E2E_LOADS 16    // class scores in flight per thread while gathering candidates (63 registers)

// The state of carve_cu_select64 and the fused head in shared memory.
typedef struct select64_shared {
  radix_state<unsigned long long> rs;
  uint32_t taken;   // chosen composites written so far
  uint32_t listed;  // carve_cu_select64's undecided composites in its list
  uint32_t cand;    // step-2 candidates found so far
  uint32_t thr;     // T: the key of the k'-th best anchor score
  unsigned long long warp_and[32], warp_or[32];  // the bits of each warp's listed composites: all set, any set
} select64_shared;

// f(j) for j = 0 .. rows - 1 (rows <= PT, block-uniform), unrolled: a per-thread array indexed by j stays in
// registers.
template <int PT, typename F>
static __device__ __forceinline__ void carve_cu_for_items(uint32_t rows, const F& f) {
  CARVE_CU_UNROLL
  for (int j = 0; j < PT; j++) {
    if ((uint32_t)j >= rows) {
      break;
    }
    f(j);
  }
}

// The bytes of a composite's index part (~i) that are 0xFF for every index i < n (n >= 1): those above the lowest
// byte that holds n - 1's highest set bit, as a mask of the composite's bits.
static __device__ __forceinline__ unsigned long long carve_cu_index_fixed(uint32_t n) {
  uint32_t fixed = 0xFFFFFF00u;
  while (fixed != 0 && ((n - 1u) & fixed) != 0) {
    fixed <<= 8;
  }
  return fixed;
}

// AND and OR of `all` / `any` over the 32 lanes of the warp (every lane calls it).
static __device__ __forceinline__ void carve_cu_warp_and_or(unsigned long long* all, unsigned long long* any) {
  for (unsigned off = 16; off > 0; off /= 2) {
    *all &= __shfl_xor_sync(0xFFFFFFFFu, *all, (int)off);
    *any |= __shfl_xor_sync(0xFFFFFFFFu, *any, (int)off);
  }
}

// The kk largest of a block's distinct 64-bit composites (key << 32 | ~i, every index i < n): a radix select over
// their bytes, most significant first, with carve_cu_topk_block's histogram (__match_any_sync) and early stop.
// Thread t holds items j = 0 .. rows - 1 (rows <= PT, block-uniform); get(j, &comp) says whether item j exists and
// gives it. The composites being distinct, the chosen bin ends up wanted whole (after the last byte it holds one
// composite), so on return the kk largest are exactly those with (comp & mask) >= prefix. What keeps the passes few
// and short:
//  - the index bytes that are 0xFF in every composite (carve_cu_index_fixed(n)) are known digits from the start:
//    no pass over them (yolo26n's 8400 anchors and 24000 class scores: 6 bytes to pass over, not 8);
//  - once the chosen bin holds at most blockDim.x composites (the undecided ones: after a pass or two), they are
//    copied to list[] (any order: a histogram does not see it) and the passes after that count one composite per
//    thread, where each counted every item (9 a thread for 8400 anchors);
//  - with the list, the bytes on which every undecided composite agrees are fixed at once (a pass over them would
//    choose that digit with none above it: the same state), so ties at the k'-th score (an untrained head's, fp16
//    logits': 449 anchors with one score on yolo26n fp16 640 with random weights) skip straight to the index bytes.
// On that head the anchor select ran 8 passes over 9 items a thread; now 2, and 2 over the list (the class scores':
// 8 passes over 612 candidates, now 1 and 2).
// list: blockDim.x composites of shared memory that nothing else uses during the call. There must be at least kk
// composites. Every thread of the block calls it (barriers).
template <int PT, typename Get>
static __device__ void carve_cu_select64(const Get& get, uint32_t rows, uint32_t n, uint32_t kk, select64_shared* sh,
                                         uint64_t* list) {
  const unsigned t = threadIdx.x, lane = t & 31u;
  carve_cu_radix_start(&sh->rs, kk, carve_cu_index_fixed(n));
  if (t == 0) {
    sh->taken = 0;
    sh->listed = 0;
  }
  int counted = 0;      // passes counted so far (their histograms alternate)
  bool listed = false;  // block-uniform: the undecided composites are list[0 .. sh->listed)
  for (int byte = 7; byte >= 0; byte--) {  // most significant first
    const uint32_t shift = 8u * (uint32_t)byte;
    const unsigned long long pre = sh->rs.prefix, msk = sh->rs.mask;
    if (((msk >> shift) & 255u) != 0) {
      continue;  // a known digit: a constant index byte, or fixed with the list (block-uniform)
    }
    carve_cu_radix_clear_next(&sh->rs, counted);
    uint32_t* hist = sh->rs.hist[counted % 2];
    if (listed) {
      const bool mine = t < sh->listed;
      const uint64_t comp = mine ? list[t] : 0u;
      carve_cu_radix_count(hist, mine && (comp & msk) == pre, (uint32_t)(comp >> shift) & 255u);
    } else {
      carve_cu_for_items<PT>(rows, [&](int j) {
        uint64_t comp = 0;
        const bool match = get(j, &comp) && (comp & msk) == pre;
        carve_cu_radix_count(hist, match, (uint32_t)(comp >> shift) & 255u);
      });
    }
    if (carve_cu_radix_fix(&sh->rs, counted++, shift)) {
      break;
    }
    if (!listed && sh->rs.in_bin <= blockDim.x) {  // block-uniform (read after radix_fix's barrier)
      const unsigned long long in_pre = sh->rs.prefix, in_msk = sh->rs.mask;
      unsigned long long all = ~0ull, any = 0;
      carve_cu_for_items<PT>(rows, [&](int j) {
        uint64_t comp = 0;
        if (get(j, &comp) && (comp & in_msk) == in_pre) {
          list[atomicAdd(&sh->listed, 1u)] = comp;
          all &= comp;
          any |= comp;
        }
      });
      carve_cu_warp_and_or(&all, &any);
      if (lane == 0) {
        sh->warp_and[t / 32u] = all;
        sh->warp_or[t / 32u] = any;
      }
      __syncthreads();  // the list, its count and the warps' bits
      if (t < 32) {
        const bool warp = lane < blockDim.x / 32u;
        all = warp ? sh->warp_and[lane] : ~0ull;
        any = warp ? sh->warp_or[lane] : 0ull;
        carve_cu_warp_and_or(&all, &any);
        if (lane == 0) {
          for (uint32_t b = 0; b < 64; b += 8) {
            const unsigned long long field = 255ull << b;
            if ((sh->rs.mask & field) == 0 && ((all ^ any) & field) == 0) {  // every undecided composite's byte
              sh->rs.prefix |= all & field;
              sh->rs.mask |= field;
            }
          }
        }
      }
      __syncthreads();  // the fixed bytes
      listed = true;
    }
  }
}

// The descending order of the kk <= 1024 distinct composites sel[0 .. kk) (each > 0: an index's complement is
// never 0) into idx[0 .. kk) (their indices, best first; readable by the block on return), srt[0 .. 32 ceil(kk / 32))
// the scratch. Warp w sorts sel[32 w ..) in registers (a bitonic network over shuffles; 0 fills the last list) into
// srt[32 w ..); then each composite's place is its place in its own list plus, in each other list, the number of
// composites above it (a binary search over 32 sorted ones). It replaces carve_cu_rank_place's kk^2 comparisons
// (90000 at kk = 300: 15k warp instructions per call on an H200, Nsight Compute) by about 1k. Thread t holds
// composite t, so the block needs at least 32 ceil(kk / 32) threads (the fused head: 1024 for kk <= 1024). Every
// thread of the block calls it (barriers); sel must be published (a barrier) before the call.
static __device__ void carve_cu_rank_lists(const uint64_t* sel, uint32_t kk, uint64_t* srt, int32_t* idx) {
  const unsigned t = threadIdx.x, lane = t & 31u, warp = t / 32u;
  const uint32_t lists = (kk + 31u) / 32u;
  uint64_t me = warp < lists && t < kk ? sel[t] : 0u;
  if (warp < lists) {  // warp-uniform
    for (unsigned size = 2; size <= 32; size *= 2) {
      for (unsigned stride = size / 2; stride > 0; stride /= 2) {
        const uint64_t other = __shfl_xor_sync(0xFFFFFFFFu, me, (int)stride);
        const bool keep_max = ((lane & stride) == 0) == ((lane & size) == 0);  // descending at size 32
        me = keep_max ? (me > other ? me : other) : (me < other ? me : other);
      }
    }
    srt[t] = me;
  }
  __syncthreads();
  if (me != 0) {
    uint32_t place = lane;
    for (uint32_t l = 0; l < lists; l++) {
      if (l == warp) {
        continue;
      }
      const uint64_t* list = srt + 32u * l;
      uint32_t above = 0;  // list[0 .. above) > me, list[above ..] < me (distinct)
      for (uint32_t step = 32; step > 0; step /= 2) {
        if (above + step <= 32 && list[above + step - 1] > me) {
          above += step;
        }
      }
      place += above;
    }
    idx[place] = (int32_t)carve_cu_comp_index(me);
  }
  __syncthreads();
}

// After carve_cu_select64 over the same items: the indices of the kk chosen composites, best first, into
// idx[0 .. kk) (readable by the block on return), through sel (the chosen composites in any order) and srt
// (carve_cu_rank_lists' scratch, 32 ceil(kk / 32) composites, which may be the items' own storage: get() has
// read them all before it is written).
template <int PT, typename Get>
static __device__ void carve_cu_select64_take(const Get& get, uint32_t rows, uint32_t kk, select64_shared* sh,
                                              uint64_t* sel, uint64_t* srt, int32_t* idx) {
  const unsigned long long pre = sh->rs.prefix, msk = sh->rs.mask;
  carve_cu_for_items<PT>(rows, [&](int j) {
    uint64_t comp = 0;
    if (get(j, &comp) && (comp & msk) >= pre) {
      sel[atomicAdd(&sh->taken, 1u)] = comp;
    }
  });
  __syncthreads();
  carve_cu_rank_lists(sel, kk, srt, idx);
}

// The class logits of image b's anchor a (nc consecutive values).
template <typename Lv>
static __device__ __forceinline__ decltype(Lv::cls) carve_cu_e2e_logits(const e2e_levels<Lv>* L, size_t a, size_t b) {
  size_t pixel;
  const Lv* lv = carve_cu_locate(L, a, &pixel);
  return carve_cu_image_map(lv->cls, lv, lv->cls_stride, b) + pixel * lv->cls_stride;
}

// Step 2's logit bound: with T the k'-th best anchor score and m its anchor's largest logit (T = sigmoid(m), as the
// anchor-score kernel computed it), every logit l < m - 0.01 has sigmoid(l) < T, so its class score cannot be a
// candidate and the gather skips its sigmoid. Why, where 2^-60 <= T <= 0.99: for x <= m, d ln sigmoid(x) / dx =
// 1 - sigmoid(x) >= 1 - T >= 0.01, so sigmoid(l) <= T e^(-0.01 x 0.00999) < T (1 - 9.9e-5) in exact arithmetic
// (m - 0.01 rounds by at most 4e-6 for |m| < 64), while the computed sigmoid (expf within 2 ulp, or __expf's
// error under fast math, an add and a division) is within about 1e-5 of it; below T = 2^-60 a flush to zero or a
// subnormal result could tie with T, above 0.99 sigmoid's roundings near 1 do (every l above 16.7 gives 1). Elsewhere
// the bound is -inf: every sigmoid computed, as when m is NaN (T is NaN's key 0).
static __device__ __forceinline__ float carve_cu_e2e_logit_bound(float t_score, float m) {
  return t_score >= 0x1p-60f && t_score <= 0.99f && m == m ? m - 0.01f : -INFINITY;
}

// Image blockIdx.x: s1 its anchor scores (A <= CARVE_CU_E2E_ITEMS x 1024), kk <= CARVE_CU_E2E_KMAX; s2 its
// scratch of k' nc class scores (written only when the candidates overflow); rows its k' rows.
template <typename Lv>
__global__ void __launch_bounds__(CARVE_CU_TOPK_ONE_BLOCK_THREADS)
    carve_cu_e2e_head_kernel(e2e_levels<Lv> L, const float* __restrict__ s1, uint32_t anchors, uint32_t nc,
                             uint32_t kk, uint32_t extra_channels, int task, float* __restrict__ s2,
                             float* __restrict__ rows) {
  CARVE_CU_KERNEL_ENTRY();
  __shared__ uint64_t cand[CARVE_CU_E2E_CAND];  // step 2's candidates; step 1's select list, the rank sorts' scratch
  __shared__ uint64_t sel[CARVE_CU_E2E_KMAX];   // the chosen composites; the logit rows (step 2's gather), its list
  __shared__ int32_t ori[CARVE_CU_E2E_KMAX], best[CARVE_CU_E2E_KMAX];
  __shared__ select64_shared sh;
  __shared__ topk_block_shared tb;
  __shared__ float lo_shared;  // step 2's logit bound (carve_cu_e2e_logit_bound)
  static_assert(CARVE_CU_E2E_CAND * 8 + CARVE_CU_E2E_KMAX * (8 + 4 + 4) + sizeof(select64_shared) +
                        sizeof(topk_block_shared) + sizeof(float) <=
                    48 * 1024,
                "the fused head's static shared memory (CARVE_CU_E2E_CAND, CARVE_CU_E2E_KMAX) over 48 KB");
  static_assert(CARVE_CU_E2E_CAND * 8 >= CARVE_CU_E2E_KMAX * 8, "cand holds carve_cu_rank_lists' scratch");
  static_assert(CARVE_CU_E2E_CAND >= CARVE_CU_TOPK_ONE_BLOCK_THREADS &&
                    CARVE_CU_E2E_KMAX >= CARVE_CU_TOPK_ONE_BLOCK_THREADS,
                "cand and sel hold carve_cu_select64's list (a composite per thread)");
  static_assert(CARVE_CU_E2E_KMAX <= CARVE_CU_TOPK_ONE_BLOCK_THREADS, "carve_cu_rank_lists: a thread per composite");
  using Cls = decltype(Lv::cls);
  const unsigned t = threadIdx.x, lane = t & 31u, threads = CARVE_CU_TOPK_ONE_BLOCK_THREADS;
  const size_t b = blockIdx.x;
  const uint32_t n2 = kk * nc;
  s1 += b * anchors;
  s2 += b * n2;

  // Step 1: the k' best anchors, from keys in registers (item j of thread t: anchor j 1024 + t).
  uint32_t key[CARVE_CU_E2E_ITEMS];
  const uint32_t rows1 = (anchors + threads - 1) / threads;
  CARVE_CU_UNROLL
  for (int j = 0; j < CARVE_CU_E2E_ITEMS; j++) {
    const uint32_t i = (uint32_t)j * threads + t;
    key[j] = i < anchors ? carve_cu_order_key(s1[i]) : 0u;
  }
  const auto anchor_item = [&](int j, uint64_t* comp) {
    const uint32_t i = (uint32_t)j * threads + t;
    *comp = ((uint64_t)key[j] << 32) | (uint64_t)(0xFFFFFFFFu - i);
    return i < anchors;
  };
  carve_cu_select64<CARVE_CU_E2E_ITEMS>(anchor_item, rows1, anchors, kk, &sh, cand);
  carve_cu_select64_take<CARVE_CU_E2E_ITEMS>(anchor_item, rows1, kk, &sh, sel, cand, ori);

  // Each chosen anchor's logit row into sel[] (free until step 2's take or the overflow's top-k), by rank; warp 0:
  // T's key, its anchor's largest logit m and the logit bound.
  const auto row_of = [&](uint32_t r) { return reinterpret_cast<Cls>((uintptr_t)sel[r]); };
  for (uint32_t r = t; r < kk; r += threads) {
    sel[r] = (uint64_t)(uintptr_t)carve_cu_e2e_logits(&L, (size_t)ori[r], b);
  }
  if (t < 32) {
    const Cls last = carve_cu_e2e_logits(&L, (size_t)ori[kk - 1], b);
    float m = NAN;
    for (uint32_t c = lane; c < nc; c += 32) {
      m = carve_cu_max_ignoring_nan(m, carve_cu_ld(last, c));
    }
    for (unsigned off = 16; off > 0; off /= 2) {
      m = carve_cu_max_ignoring_nan(m, __shfl_xor_sync(0xFFFFFFFFu, m, (int)off));
    }
    if (t == 0) {
      const float t_score = s1[ori[kk - 1]];
      sh.thr = carve_cu_order_key(t_score);  // T: the k'-th best anchor score's key
      sh.cand = 0;
      lo_shared = carve_cu_e2e_logit_bound(t_score, m);
    }
  }
  __syncthreads();

  // Step 2: the class scores >= T as composites (key << 32 | ~flat), flat = r nc + c. Warp w takes the items
  // (anchor rank r, 32 classes from 32 q) with r = w, w + 32, ...: one lane per class, the item's row and chunk
  // counted on (no division), CARVE_CU_E2E_LOADS items' loads in flight; a logit under the bound is no candidate
  // (no sigmoid); a warp's takers get places with one atomicAdd.
  const uint32_t thr = sh.thr, warp = t / 32u, warps = threads / 32u;
  const float lo = lo_shared;
  const uint32_t chunks = (nc + 31u) / 32u;
  const uint32_t mine = warp < kk ? (kk - 1u - warp) / warps + 1u : 0u;  // this warp's anchor ranks
  uint32_t at_r = 0, at_q = 0;  // the next item's (this warp's rank number, chunk)
  for (uint32_t it0 = 0; it0 < mine * chunks; it0 += CARVE_CU_E2E_LOADS) {  // warp-uniform
    float logit[CARVE_CU_E2E_LOADS];
    uint32_t flat[CARVE_CU_E2E_LOADS];
    CARVE_CU_UNROLL
    for (int u = 0; u < CARVE_CU_E2E_LOADS; u++) {
      const uint32_t r = warp + warps * at_r, c = at_q * 32u + lane;
      const bool live = at_r < mine && c < nc;
      flat[u] = live ? r * nc + c : n2;
      logit[u] = live ? carve_cu_ld(row_of(r), c) : 0.0f;
      if (++at_q == chunks) {
        at_q = 0;
        at_r++;
      }
    }
    CARVE_CU_UNROLL
    for (int u = 0; u < CARVE_CU_E2E_LOADS; u++) {
      const bool maybe = flat[u] < n2 && !(logit[u] < lo);
      if (__ballot_sync(0xFFFFFFFFu, maybe) == 0) {
        continue;  // warp-uniform
      }
      const uint32_t k = maybe ? carve_cu_order_key(carve_cu_sigmoid(logit[u])) : 0u;
      const bool take = maybe && k >= thr;
      const unsigned ballot = __ballot_sync(0xFFFFFFFFu, take);
      if (ballot == 0) {
        continue;  // warp-uniform
      }
      const unsigned leader = (unsigned)__ffs((int)ballot) - 1u;
      uint32_t base = 0;
      if (lane == leader) {
        base = atomicAdd(&sh.cand, (uint32_t)__popc(ballot));
      }
      base = __shfl_sync(0xFFFFFFFFu, base, (int)leader);
      const uint32_t pos = base + (uint32_t)__popc(ballot & ((1u << lane) - 1u));
      if (take && pos < CARVE_CU_E2E_CAND) {
        cand[pos] = ((uint64_t)k << 32) | (uint64_t)(0xFFFFFFFFu - flat[u]);
      }
    }
  }
  __syncthreads();
  const uint32_t count = sh.cand;
  if (count >= kk && count <= CARVE_CU_E2E_CAND) {  // block-uniform
    const uint32_t rows2 = (count + threads - 1) / threads;
    const auto cand_item = [&](int j, uint64_t* comp) {
      const uint32_t i = (uint32_t)j * threads + t;
      *comp = i < count ? cand[i] : 0u;
      return i < count;
    };
    carve_cu_select64<CARVE_CU_E2E_CAND / CARVE_CU_TOPK_ONE_BLOCK_THREADS>(cand_item, rows2, n2, kk, &sh, sel);
    carve_cu_select64_take<CARVE_CU_E2E_CAND / CARVE_CU_TOPK_ONE_BLOCK_THREADS>(cand_item, rows2, kk, &sh, sel,
                                                                                cand, best);
  } else {  // every class score through the general one-block top-k (cand, unused here, holds its places)
    for (uint32_t f = t; f < n2; f += threads) {
      s2[f] = carve_cu_sigmoid(carve_cu_ld(row_of(f / nc), f % nc));
    }
    __syncthreads();  // (the rows' table in sel[] read before the top-k writes its composites there)
    carve_cu_topk_block(s2, n2, kk, best, NULL, sel, reinterpret_cast<uint32_t*>(cand), &tb);
  }
  __syncthreads();

  // Rows.
  const size_t width = 6 + extra_channels;
  for (uint32_t i = t; i < kk; i += threads) {
    const uint32_t flat = (uint32_t)best[i];
    carve_cu_e2e_row(&L, (size_t)ori[flat / nc], flat % nc, b, extra_channels, task,
                     rows + (b * kk + i) * width);
  }
}

// Scratch: top-k scratch (the larger of the two steps), anchor scores (A), class scores
// (k' nc), the two index lists (k' each).
static size_t align8(size_t v) { return (v + 7) & ~(size_t)7; }

static size_t e2e_topk_bytes(size_t anchors, size_t nc, size_t kk) {
  const size_t a = carve_cu_topk_scratch_bytes(anchors, kk), b = carve_cu_topk_scratch_bytes(kk * nc, kk);
  return align8(a > b ? a : b);
}

extern "C" size_t carve_cu_e2e_batch_scratch_bytes(size_t anchors, size_t nc, size_t k, size_t batch) {
  const size_t kk = k < anchors ? k : anchors;
  if (nc == 0 || batch == 0 || anchors > (size_t)INT32_MAX || kk > (size_t)INT32_MAX / nc) {
    return SIZE_MAX;
  }
  const size_t per_image = anchors > kk * nc ? anchors : kk * nc;  // the longest score list of an image
  if (per_image != 0 && batch > (size_t)INT32_MAX / per_image) {
    return SIZE_MAX;
  }
  return e2e_topk_bytes(anchors, nc, kk) + align8(batch * anchors * sizeof(float)) +
         align8(batch * kk * nc * sizeof(float)) + 2 * align8(batch * kk * sizeof(int32_t));
}

extern "C" size_t carve_cu_e2e_scratch_bytes(size_t anchors, size_t nc, size_t k) {
  return carve_cu_e2e_batch_scratch_bytes(anchors, nc, k, 1);
}

// carve_cu_e2e_postprocess_batch over either level type (the checks, scratch and launches of both).
template <typename Lv>
static carve_status e2e_batch(const carve_cu_ctx* ctx, const Lv* levels, size_t num_levels, size_t nc,
                              size_t extra_channels, size_t k, carve_e2e_task task, size_t batch, void* scratch,
                              float* rows) {
  if (ctx == NULL || levels == NULL || scratch == NULL || rows == NULL || nc == 0 || num_levels == 0 || batch == 0 ||
      num_levels > CARVE_CU_MAX_LEVELS || (uintptr_t)scratch % sizeof(uint64_t) != 0) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  switch (task) {
    case CARVE_E2E_DETECT:
    case CARVE_E2E_SEGMENT:
      break;
    case CARVE_E2E_POSE:
      if (extra_channels % 3 != 0) {
        return CARVE_ERR_INVALID_ARGUMENT;
      }
      break;
    case CARVE_E2E_OBB:
      if (extra_channels != 1) {
        return CARVE_ERR_INVALID_ARGUMENT;
      }
      break;
    default:
      return CARVE_ERR_INVALID_ARGUMENT;
  }
  e2e_levels<Lv> L;
  memset(&L, 0, sizeof L);
  L.num = (uint32_t)num_levels;
  size_t anchors = 0;
  for (size_t l = 0; l < num_levels; l++) {
    const Lv* lv = &levels[l];
    if (lv->box == NULL || lv->cls == NULL || (extra_channels != 0 && lv->extra == NULL) || lv->box_stride < 4 ||
        lv->cls_stride < nc || (extra_channels != 0 && lv->extra_stride < extra_channels)) {
      return CARVE_ERR_INVALID_ARGUMENT;
    }
    L.lv[l] = *lv;
    L.start[l] = anchors;
    anchors += lv->h * lv->w;
  }
  L.start[num_levels] = anchors;
  const size_t kk = k < anchors ? k : anchors;
  if (kk == 0 || carve_cu_e2e_batch_scratch_bytes(anchors, nc, k, batch) == SIZE_MAX) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }

  unsigned char* base = (unsigned char*)scratch;
  void* tk = base;                                                    // top-k scratch
  float* s1 = (float*)(base + e2e_topk_bytes(anchors, nc, kk));  // (batch, A) anchor scores
  float* s2 = (float*)((unsigned char*)s1 + align8(batch * anchors * sizeof(float)));  // (batch, k', nc) class scores
  int32_t* ori = (int32_t*)((unsigned char*)s2 + align8(batch * kk * nc * sizeof(float)));  // (batch, k') step 1
  int32_t* best = (int32_t*)((unsigned char*)ori + align8(batch * kk * sizeof(int32_t)));   // (batch, k') step 2

  // Step 1: the k' anchors with the best class score.
  CARVE_LAUNCH(carve_cu_e2e_anchor_scores_kernel<Lv>, carve_cu_blocks(batch * anchors * CARVE_CU_E2E_SUB),
               CARVE_CU_THREADS, ctx->stream, L, anchors, batch, nc, s1);
  CARVE_CU_CHECK_LAUNCH();
  if (anchors <= (size_t)CARVE_CU_E2E_ITEMS * CARVE_CU_TOPK_ONE_BLOCK_THREADS && kk <= CARVE_CU_E2E_KMAX &&
      batch <= 0x7FFFFFFFu) {  // the rest in one launch: the fused head
    CARVE_LAUNCH(carve_cu_e2e_head_kernel<Lv>, (unsigned)batch, CARVE_CU_TOPK_ONE_BLOCK_THREADS, ctx->stream, L,
                 (const float*)s1, (uint32_t)anchors, (uint32_t)nc, (uint32_t)kk, (uint32_t)extra_channels, (int)task,
                 s2, rows);
    CARVE_CU_CHECK_LAUNCH();
    return CARVE_OK;
  }
  carve_status st = topk_batch(ctx->stream, s1, anchors, kk, batch, ori, NULL, tk);
  if (st != CARVE_OK) {
    return st;
  }
  // Step 2: the k' best of the k' x nc (anchor rank, class) scores.
  CARVE_LAUNCH(carve_cu_e2e_class_scores_kernel<Lv>, carve_cu_blocks(batch * kk * nc), CARVE_CU_THREADS, ctx->stream,
               L, (const int32_t*)ori, kk, batch, nc, s2);
  CARVE_CU_CHECK_LAUNCH();
  st = topk_batch(ctx->stream, s2, kk * nc, kk, batch, best, NULL, tk);
  if (st != CARVE_OK) {
    return st;
  }
  // Rows.
  CARVE_LAUNCH(carve_cu_e2e_rows_kernel<Lv>, carve_cu_blocks(batch * kk), CARVE_CU_THREADS, ctx->stream, L,
               (const int32_t*)ori, (const int32_t*)best, kk, batch, nc, extra_channels, (int)task, rows);
  CARVE_CU_CHECK_LAUNCH();
  return CARVE_OK;
}

extern "C" carve_status carve_cu_e2e_postprocess_batch(const carve_cu_ctx* ctx, const carve_level* levels,
                                                       size_t num_levels, size_t nc, size_t extra_channels, size_t k,
                                                       carve_e2e_task task, size_t batch, void* scratch, float* rows) {
  return e2e_batch(ctx, levels, num_levels, nc, extra_channels, k, task, batch, scratch, rows);
}

extern "C" carve_status carve_cu_e2e_postprocess_task(const carve_cu_ctx* ctx, const carve_level* levels,
                                                      size_t num_levels, size_t nc, size_t extra_channels, size_t k,
                                                      carve_e2e_task task, void* scratch, float* rows) {
  return e2e_batch(ctx, levels, num_levels, nc, extra_channels, k, task, 1, scratch, rows);
}

// The half-map overloads (carve_cuda.h, C++).
carve_status carve_cu_e2e_postprocess_batch(const carve_cu_ctx* ctx, const carve_cu_level_h* levels, size_t num_levels,
                                            size_t nc, size_t extra_channels, size_t k, carve_e2e_task task,
                                            size_t batch, void* scratch, float* rows) {
  return e2e_batch(ctx, levels, num_levels, nc, extra_channels, k, task, batch, scratch, rows);
}

carve_status carve_cu_e2e_postprocess_task(const carve_cu_ctx* ctx, const carve_cu_level_h* levels, size_t num_levels,
                                           size_t nc, size_t extra_channels, size_t k, carve_e2e_task task,
                                           void* scratch, float* rows) {
  return e2e_batch(ctx, levels, num_levels, nc, extra_channels, k, task, 1, scratch, rows);
}
