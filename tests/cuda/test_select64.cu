// tests/cuda/test_select64.cu: carve_cu_select64 (runtime/carve_cuda_topk.cu), the fused e2e head's radix select,
// on its own: the composites (key << 32 | ~index) a case builds, the select run twice in a row on the same shared
// state (as the head runs its two selects), the set it leaves ((comp & mask) >= prefix) against the kk largest by a
// sort. The e2e tests (test_topk.cu) reach it only through heads of a few shapes; this reaches what they do not:
//   * indices of 1 to 4 bytes (n up to 2^32 - 1: the bytes that are 0xFF in every composite get no pass);
//   * a chosen bin of exactly blockDim.x (1024) composites, the most the select's list holds, and 1023 / 1025;
//   * undecided composites that agree on key bytes and on index bytes that differ elsewhere among the n (bytes fixed
//     with the list, without a pass): all-equal keys with consecutive indices, far from 0;
//   * random, few-valued, all-equal and byte-grouped keys; kk = 1, kk = the count, count - 1, random.
// It includes the runtime's source (its device functions are static), so the test links no carve_cuda_topk object.

#include <algorithm>

#include "carve_cuda_topk.cu"
#include "cuda_test.h"

#define SEL_ITEMS 3  // composites per thread: 3072, as the head's step 2 holds

// Block 0 of 1024 threads: select64 over in[0 .. count) held in shared memory, twice; for each call c,
// taken[c count + i] = whether composite i is in the set it leaves, listed[c] = how many composites it listed.
__global__ void __launch_bounds__(CARVE_CU_TOPK_ONE_BLOCK_THREADS)
    select64_test_kernel(const uint64_t* __restrict__ in, uint32_t count, uint32_t n, uint32_t kk,
                         uint32_t* __restrict__ taken, uint32_t* __restrict__ listed) {
  CARVE_CU_KERNEL_ENTRY();
  __shared__ uint64_t items[SEL_ITEMS * CARVE_CU_TOPK_ONE_BLOCK_THREADS];
  __shared__ uint64_t list[CARVE_CU_TOPK_ONE_BLOCK_THREADS];
  __shared__ select64_shared sh;
  const unsigned t = threadIdx.x, threads = CARVE_CU_TOPK_ONE_BLOCK_THREADS;
  for (uint32_t i = t; i < count; i += threads) {
    items[i] = in[i];
  }
  __syncthreads();
  const auto item = [&](int j, uint64_t* comp) {
    const uint32_t i = (uint32_t)j * threads + t;
    *comp = i < count ? items[i] : 0u;
    return i < count;
  };
  for (int call = 0; call < 2; call++) {
    carve_cu_select64<SEL_ITEMS>(item, (count + threads - 1) / threads, n, kk, &sh, list);
    const unsigned long long pre = sh.rs.prefix, msk = sh.rs.mask;
    for (uint32_t i = t; i < count; i += threads) {
      taken[call * count + i] = (items[i] & msk) >= pre;
    }
    if (t == 0) {
      listed[call] = sh.listed;
    }
    __syncthreads();
  }
}

static uint64_t composite(uint32_t key, uint32_t index) { return ((uint64_t)key << 32) | (0xFFFFFFFFu - index); }

static int cases, listed_cases, listed_full;

// One case: the set each call leaves against the kk largest of comps (distinct composites of indices < n).
static void check_select(const std::vector<uint64_t>& comps, uint32_t n, uint32_t kk, const char* what) {
  const uint32_t count = (uint32_t)comps.size();
  CHECK(count >= kk && kk >= 1 && count <= SEL_ITEMS * CARVE_CU_TOPK_ONE_BLOCK_THREADS);
  DevBuf<uint64_t> in(comps);
  DevBuf<uint32_t> taken(2 * (size_t)count), listed(2);
  CARVE_LAUNCH(select64_test_kernel, 1, CARVE_CU_TOPK_ONE_BLOCK_THREADS, (cudaStream_t)0, (const uint64_t*)in.p,
               count, n, kk, taken.p, listed.p);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<uint64_t> sorted = comps;
  std::sort(sorted.begin(), sorted.end(), std::greater<uint64_t>());
  CHECK_MSG(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), "%s: composites not distinct", what);
  const uint64_t kth = sorted[kk - 1];
  const std::vector<uint32_t> got = taken.download(), got_listed = listed.download();
  for (int call = 0; call < 2; call++) {
    for (uint32_t i = 0; i < count; i++) {
      CHECK_MSG((got[call * count + i] != 0) == (comps[i] >= kth), "%s (n %u, %u composites, kk %u), call %d: "
                "composite %u (%016llx) %s", what, n, count, kk, call, i, (unsigned long long)comps[i],
                comps[i] >= kth ? "left out" : "taken");
    }
    CHECK_MSG(got_listed[call] == got_listed[0], "%s: the second call listed %u, the first %u", what,
              got_listed[call], got_listed[0]);
  }
  cases++;
  listed_cases += got_listed[0] != 0;
  listed_full += got_listed[0] == CARVE_CU_TOPK_ONE_BLOCK_THREADS;
}

// count distinct indices below n, in random order.
static std::vector<uint32_t> distinct_indices(TestRng& rng, uint32_t n, uint32_t count) {
  std::vector<uint32_t> idx;
  if (n <= 4 * SEL_ITEMS * CARVE_CU_TOPK_ONE_BLOCK_THREADS) {
    idx.resize(n);
    for (uint32_t i = 0; i < n; i++) idx[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) std::swap(idx[i], idx[rng.below(i + 1)]);
    idx.resize(count);
    return idx;
  }
  while (idx.size() < count) {
    const uint32_t i = (uint32_t)rng.below(n);
    if (std::find(idx.begin(), idx.end(), i) == idx.end()) idx.push_back(i);
  }
  return idx;
}

static void test_random(TestRng& rng) {
  const char* mode_name[] = {"random keys", "4 keys", "one key", "keys grouped by their top byte", "half one key"};
  for (int iter = 0; iter < 200; iter++) {
    uint32_t n;  // indices of 1, 2, 3 or 4 bytes
    switch (iter % 4) {
      case 0: n = 1 + (uint32_t)rng.below(256); break;
      case 1: n = 257 + (uint32_t)rng.below(65280); break;
      case 2: n = 65537 + (uint32_t)rng.below(16000000); break;
      default: n = 16777217u + (uint32_t)rng.below(4000000000u); break;
    }
    const uint32_t count = std::min(n, 1 + (uint32_t)rng.below(SEL_ITEMS * CARVE_CU_TOPK_ONE_BLOCK_THREADS));
    std::vector<uint32_t> idx = distinct_indices(rng, n, count);
    if (iter % 7 == 0 && std::find(idx.begin(), idx.end(), n - 1) == idx.end()) {
      idx[0] = n - 1;  // the largest index (the fewest 0xFF bytes)
    }
    const int mode = (iter / 4) % 5;
    std::vector<uint64_t> comps(count);
    for (uint32_t e = 0; e < count; e++) {
      uint32_t key;
      switch (mode) {
        case 0: key = (uint32_t)rng.next(); break;
        case 1: key = 0xBF000000u + (uint32_t)rng.below(4); break;
        case 2: key = 0xBF800000u; break;
        case 3: key = (uint32_t)rng.below(3) << 24 | 0x00ABCD00u; break;
        default: key = rng.below(2) ? 0xC1200000u : (uint32_t)rng.next(); break;
      }
      comps[e] = composite(key, idx[e]);
    }
    uint32_t kk;
    switch (iter % 5) {
      case 0: kk = 1; break;
      case 1: kk = count; break;
      case 2: kk = count > 1 ? count - 1 : 1; break;
      case 3: kk = 1 + (uint32_t)rng.below(count); break;
      default: kk = 1 + (uint32_t)rng.below(std::min<uint32_t>(count, CARVE_CU_E2E_KMAX)); break;
    }
    check_select(comps, n, kk, mode_name[mode]);
  }
}

// A chosen bin of 1023, 1024 or 1025 composites after the first pass (their top key byte 0x7F, 600 below it).
static void test_bin_sizes() {
  for (uint32_t bin : {1023u, 1024u, 1025u}) {
    for (uint32_t kk : {1u, 500u, 1024u}) {
      std::vector<uint64_t> comps;
      uint32_t i = 0;
      for (uint32_t e = 0; e < 600; e++, i++) comps.push_back(composite(0x10000000u + e, i));
      for (uint32_t e = 0; e < bin; e++, i++) comps.push_back(composite(0x7F000000u | (e % 7), i));
      char what[64];
      std::snprintf(what, sizeof what, "a bin of %u", bin);
      check_select(comps, i, kk, what);
    }
  }
}

// Ties on one or three keys among consecutive indices far from 0: the listed composites share their high index
// bytes, which differ across the n indices.
static void test_agreeing_indices(TestRng& rng) {
  for (uint32_t n : {300u, 70000u, 5000000u, 40000000u, 0xFFFFFFFFu}) {
    for (uint32_t count : {2u, 200u, 1024u, 1025u, 3000u}) {
      for (int keys : {1, 3}) {
        if (count > n) continue;
        const uint32_t base = n - count - (n > 100000 ? 77777 : 0);
        std::vector<uint64_t> comps;
        for (uint32_t e = 0; e < count; e++) comps.push_back(composite(0xBF800000u + e % (uint32_t)keys, base + e));
        for (uint32_t e = count - 1; e > 0; e--) std::swap(comps[e], comps[rng.below(e + 1)]);
        for (uint32_t kk : {1u, count / 2 + 1, count}) {
          check_select(comps, n, kk, keys == 1 ? "one key, consecutive indices" : "3 keys, consecutive indices");
        }
      }
    }
  }
}

int main() {
  TestRng rng(64);
  test_random(rng);
  test_bin_sizes();
  test_agreeing_indices(rng);
  std::printf("select64: %d cases (two calls each) equal to a sort; %d listed, %d with 1024 listed\n", cases,
              listed_cases, listed_full);
  CHECK_MSG(listed_full > 0 && listed_cases > listed_full && listed_cases < cases,
            "the cases did not reach a full list, a shorter one and none");
  std::printf("test_select64: all ok\n");
  return 0;
}
