// tests/cuda/test_topk.cu: carve_cu_topk, carve_cu_gather_rows and
// carve_cu_e2e_postprocess_task (runtime/carve_cuda_topk.cu).
//   * top-k against a plain sort written from carve_post.h's order (larger first, ties to
//     the lower index, NaN below -inf, -0 == +0) and against the CPU carve_topk_probs:
//     random values, heavy ties, all equal, NaN and +-inf, k = 1, k = n, k > n, odd sizes,
//     both sort paths (one block, global network), n up to 1,000,003; indices and values exact;
//   * gather against a loop;
//   * e2e rows of all four tasks equal (bit for bit under emulation; on a GPU indices and
//     classes exactly, floats within CUDA's expf / cosf error) to the CPU carve_e2e_postprocess_task on
//     random head outputs with ties, flat scores, strided level views, k below / equal to / above the
//     anchor count, every way through the head (the general launches, the fused head from its
//     candidates, its overflow); the same captured into a CUDA graph and replayed on new inputs;
//   * the e2e head on half maps (carve_cu_level_h: an fp16 package's head, read where the network
//     wrote it) bit for bit the float32 function on float32 copies of the same halves, batch 1 and
//     3, the four tasks, NaN logits; the same 2 launches;
//   * argument errors.

#include <algorithm>
#include <numeric>

#include "carve_cuda_f16.h"  // __half (cuda_fp16.h; the emulation's cuda_emu_f16.h)
#include "cuda_test.h"

// ---- Top-k ----------------------------------------------------------------------------

static uint32_t order_key(float f) {
  if (f != f) return 0;
  if (f == 0.0f) f = 0.0f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The reference: indices sorted by (key descending, index ascending), first k'.
static std::vector<int32_t> sort_topk(const std::vector<float>& v, size_t k) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  const size_t kk = std::min(k, v.size());
  std::partial_sort(idx.begin(), idx.begin() + (long)kk, idx.end(), [&](int32_t a, int32_t b) {
    const uint32_t ka = order_key(v[a]), kb = order_key(v[b]);
    return ka != kb ? ka > kb : a < b;
  });
  idx.resize(kk);
  return idx;
}

enum Mode { RANDOM, TIES, SPECIAL, EQUAL, ALL_NAN, NEGATIVE };
static const char* mode_name[] = {"random", "ties", "nan/inf/-0", "all-equal", "all-nan", "negative"};

static std::vector<float> make_values(size_t n, Mode mode, TestRng& rng) {
  std::vector<float> v(n);
  const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f, -1.0f, 3.5f, 1e-30f, -1e30f};
  const float few[] = {-1.0f, 0.0f, -0.0f, 0.5f, 1.0f, 2.0f};
  for (size_t i = 0; i < n; i++) {
    switch (mode) {
      case RANDOM: v[i] = rng.normal(); break;
      case TIES: v[i] = few[rng.below(6)]; break;
      case SPECIAL: v[i] = rng.below(3) == 0 ? specials[rng.below(10)] : rng.normal(); break;
      case EQUAL: v[i] = 0.25f; break;
      case ALL_NAN: v[i] = NAN; break;
      case NEGATIVE: v[i] = -std::fabs(rng.normal()) - 1.0f; break;
    }
  }
  return v;
}

static void check_topk(TestCtx& t, size_t n, size_t k, Mode mode, TestRng& rng, bool with_cpu) {
  const std::vector<float> v = make_values(n, mode, rng);
  const size_t kk = std::min(k, n);
  DevBuf<float> dv(v), dval(kk + 1);
  DevBuf<int32_t> didx(kk + 1);
  DevScratch scratch(carve_cu_topk_scratch_bytes(n, k));
  CHECK_OK(carve_cu_topk(&t.ctx, dv.p, n, k, didx.p, dval.p, scratch.get()));
  t.sync();
  const std::vector<int32_t> idx = didx.download(kk);
  const std::vector<float> val = dval.download(kk);
  const std::vector<int32_t> want = sort_topk(v, k);
  for (size_t i = 0; i < kk; i++) {
    CHECK_MSG(idx[i] == want[i], "n %zu k %zu %s: rank %zu index %d, sort says %d", n, k, mode_name[mode], i,
              idx[i], want[i]);
    CHECK(same_float(val[i], v[idx[i]]));
  }
  if (with_cpu) {
    std::vector<int> cidx(kk);
    std::vector<float> cval(kk);
    CHECK(carve_topk_probs(v.data(), n, k, cidx.data(), cval.data()) == kk);
    for (size_t i = 0; i < kk; i++) CHECK(cidx[i] == idx[i]);
  }
}

static void test_topk(TestCtx& t) {
  TestRng rng(11);
  const size_t cases[][2] = {{1, 1},       {1, 5},       {2, 1},        {7, 7},          {7, 3},
                             {33, 1},      {33, 33},     {33, 100},     {257, 256},      {1000, 300},
                             {2048, 2048}, {2049, 2049}, {4097, 4097},  {4097, 2048},    {12293, 300},
                             {12293, 12293}, {65537, 1}, {65537, 3000}, {100003, 300}};
  int count = 0;
  for (const auto& c : cases) {
    for (int m = 0; m < 6; m++) {
      check_topk(t, c[0], c[1], (Mode)m, rng, true);
      count++;
    }
  }
  // Large: n about 1e6 with k = 1, 300 and 3000 (the global sort network), ties and NaN;
  // k = n on 100003 values (a 2^17 network).
  // (The AddressSanitizer build, cuda_*_asan, stops at 100003: same code paths, 10x faster.)
#ifndef CARVE_EMU_ASAN
  const size_t large = 1000003;
#else
  const size_t large = 100003;
#endif
  check_topk(t, large, 300, TIES, rng, false);
  check_topk(t, large, 300, SPECIAL, rng, false);
  check_topk(t, large, 3000, TIES, rng, false);
  check_topk(t, large, 1, RANDOM, rng, false);
  check_topk(t, 100003, 100003, SPECIAL, rng, false);
  check_topk(t, 100003, 100003, TIES, rng, false);
  count += 6;
  std::printf("top-k: %d cases equal to the sort (and carve_topk_probs)\n", count);

  // k == 0 and n == 0 do nothing; NULL and misaligned scratch are refused.
  DevBuf<float> dv(4);
  DevBuf<int32_t> di(4);
  DevScratch s(carve_cu_topk_scratch_bytes(4, 4));
  CHECK_OK(carve_cu_topk(&t.ctx, dv.p, 4, 0, di.p, nullptr, s.get()));
  CHECK_OK(carve_cu_topk(&t.ctx, dv.p, 0, 3, di.p, nullptr, s.get()));
  CHECK(carve_cu_topk(&t.ctx, nullptr, 4, 2, di.p, nullptr, s.get()) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_topk(&t.ctx, dv.p, 4, 2, di.p, nullptr, (char*)s.get() + 4) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_topk(&t.ctx, dv.p, (size_t)INT32_MAX + 1, 2, di.p, nullptr, s.get()) == CARVE_ERR_INVALID_ARGUMENT);
}

// carve_cu_topk_numbers_batch: `batch` lists of n values with NaN among them; list b's count is min(k, its numbers)
// and its indices the first ones of carve_cu_topk's order (NaN last) on that list alone.
static void check_numbers(TestCtx& t, size_t n, size_t k, size_t batch, const Mode* modes, TestRng& rng,
                          size_t nan_every, size_t keep_every = 0) {
  const size_t kk = std::min(k, n);
  std::vector<float> v;
  std::vector<std::vector<float>> lists;
  for (size_t b = 0; b < batch; b++) {
    lists.push_back(make_values(n, modes[b % 3], rng));
    for (size_t i = 0; nan_every != 0 && i < n; i++) {
      if (rng.below((uint32_t)nan_every) == 0) lists.back()[i] = NAN;  // the NMS's non-candidates
    }
    for (size_t i = 0; keep_every != 0 && i < n; i++) {
      if (rng.below((uint32_t)keep_every) != 0) lists.back()[i] = NAN;  // few candidates (a high conf)
    }
    v.insert(v.end(), lists.back().begin(), lists.back().end());
  }
  DevBuf<float> dv(v);
  DevBuf<int32_t> didx(batch * kk + 1);
  DevBuf<uint32_t> dcount(std::vector<uint32_t>(batch, 77));
  DevScratch scratch(carve_cu_topk_numbers_scratch_bytes(n, k, batch));
  CHECK_OK(carve_cu_topk_numbers_batch(&t.ctx, dv.p, n, k, batch, didx.p, dcount.p, scratch.get()));
  t.sync();
  const std::vector<int32_t> idx = didx.download();
  const std::vector<uint32_t> count = dcount.download();
  for (size_t b = 0; b < batch; b++) {
    const std::vector<float>& l = lists[b];
    const size_t numbers = (size_t)std::count_if(l.begin(), l.end(), [](float x) { return x == x; });
    const std::vector<int32_t> want = sort_topk(l, k);
    CHECK_MSG(count[b] == std::min(kk, numbers), "numbers n %zu k %zu list %zu: count %u, want %zu", n, k, b,
              count[b], std::min(kk, numbers));
    for (size_t i = 0; i < std::min((size_t)count[b], kk); i++) {
      CHECK_MSG(idx[b * kk + i] == want[i], "numbers n %zu k %zu list %zu rank %zu: index %d, sort says %d", n, k,
                b, i, idx[b * kk + i], want[i]);
    }
  }
}

static void test_numbers(TestCtx& t) {
  TestRng rng(13);
  const Mode mixed[] = {SPECIAL, TIES, RANDOM}, nan_only[] = {ALL_NAN, RANDOM, ALL_NAN};
  // {n, k, batch, NaN one in, a number one in}: the results in shared memory (k <= 2048, or few numbers: 8400
  // anchors at 640 with a high conf, 1 in 5 a number, the scratch there but unused) and in the scratch by the
  // block's bitonic network (more than 2048 numbers: a low conf; 33600 anchors, max_nms), an all-NaN list, lists
  // above 65536 values (the select's passes and walks over more than 64 values a thread; with more and fewer numbers
  // than k; 344064 anchors: a 4096 x 4096 input, a few hundred candidates), k above n
  const size_t cases[][5] = {{300, 300, 3, 2, 0},     {8400, 8400, 3, 50, 0},     {8400, 8400, 2, 0, 0},
                             {8400, 8400, 3, 1000, 0}, {8400, 8400, 3, 0, 5},     {8400, 300, 2, 4, 0},
                             {33600, 30000, 2, 3, 0},  {70000, 30000, 2, 40, 0},  {70000, 50000, 2, 2, 0},
                             {344064, 30000, 2, 0, 1000}, {7, 100, 3, 2, 0}};
  for (const auto& c : cases) {
    check_numbers(t, c[0], c[1], c[2], mixed, rng, c[3], c[4]);
  }
  check_numbers(t, 4000, 4000, 3, nan_only, rng, 0);
  std::printf("top-k of the numbers: %zu batches against the sort, counts and indices\n",
              sizeof(cases) / sizeof(cases[0]) + 1);
  DevBuf<float> dv(4);
  DevBuf<int32_t> di(4);
  DevBuf<uint32_t> dc(std::vector<uint32_t>{77});
  CHECK(carve_cu_topk_numbers_scratch_bytes(4, 4, 0) == SIZE_MAX);
  CHECK(carve_cu_topk_numbers_batch(&t.ctx, dv.p, 4, 4, 0, di.p, dc.p, nullptr) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_topk_numbers_batch(&t.ctx, dv.p, 4, 4, 1, di.p, nullptr, nullptr) == CARVE_ERR_INVALID_ARGUMENT);
  DevScratch s(carve_cu_topk_numbers_scratch_bytes(4000, 4000, 1));
  CHECK(carve_cu_topk_numbers_batch(&t.ctx, dv.p, 4000, 4000, 1, di.p, dc.p, (char*)s.get() + 4) ==
        CARVE_ERR_INVALID_ARGUMENT);
  t.sync();
  CHECK(dc.download()[0] == 77);  // nothing was enqueued
}

// ---- Gather -----------------------------------------------------------------------------

static void test_gather(TestCtx& t) {
  TestRng rng(12);
  const size_t rows = 301, c = 7, stride = 11, n = 57;
  std::vector<float> src(rows * stride);
  for (auto& x : src) x = rng.normal();
  std::vector<int32_t> idx(n);
  for (auto& i : idx) i = (int32_t)rng.below(rows);
  DevBuf<float> ds(src), dr(n * c);
  DevBuf<int32_t> di(idx);
  CHECK_OK(carve_cu_gather_rows(&t.ctx, ds.p, stride, (uint32_t)c, di.p, n, dr.p));
  t.sync();
  const std::vector<float> r = dr.download();
  for (size_t i = 0; i < n; i++)
    for (size_t ch = 0; ch < c; ch++) CHECK(r[i * c + ch] == src[(size_t)idx[i] * stride + ch]);
  CHECK(carve_cu_gather_rows(&t.ctx, ds.p, 3, 7, di.p, n, dr.p) == CARVE_ERR_INVALID_ARGUMENT);
  std::printf("gather: ok\n");
}

// ---- End-to-end ---------------------------------------------------------------------------

// Head outputs of one variant: per level, box (4), cls (nc) and extra channels packed in one
// (h, w, 4 + nc + extra + 3) tensor, so that every view is strided.
struct Head {
  std::vector<size_t> hs, ws;
  std::vector<float> strides;
  size_t nc, extra, pix_stride;
  std::vector<float> data;  // all levels, level l at offset off[l]
  std::vector<size_t> off;
  size_t anchors = 0;
  bool flat = false;  // every logit -1 (an untrained head's flat scores: all tie)
  float shift = 0.0f, step = 0.5f;  // logits -2 + shift + N(0, 2) on a grid of `step`

  Head(std::vector<size_t> h, std::vector<size_t> w, std::vector<float> s, size_t nc_, size_t extra_)
      : hs(h), ws(w), strides(s), nc(nc_), extra(extra_), pix_stride(4 + nc_ + extra_ + 3) {
    size_t total = 0;
    for (size_t l = 0; l < hs.size(); l++) {
      off.push_back(total);
      total += hs[l] * ws[l] * pix_stride;
      anchors += hs[l] * ws[l];
    }
    data.resize(total);
  }

  // Random outputs: ltrb distances, logits on a coarse grid (many exact ties), raw extras
  // (angles in [-1, 1], keypoints around the anchor); a few NaN logits when asked.
  void fill(TestRng& rng, bool nan_logits) {
    for (size_t l = 0; l < hs.size(); l++) {
      for (size_t p = 0; p < hs[l] * ws[l]; p++) {
        float* px = &data[off[l] + p * pix_stride];
        for (int j = 0; j < 4; j++) px[j] = rng.range(0.0f, 6.0f);
        for (size_t c = 0; c < nc; c++) {
          px[4 + c] = flat ? -1.0f : std::round(rng.normal() * 2.0f / step) * step - 2.0f + shift;
          if (nan_logits && rng.below(50) == 0) px[4 + c] = NAN;
        }
        for (size_t e = 0; e < extra; e++) px[4 + nc + e] = rng.range(-1.0f, 1.0f);
      }
    }
  }

  std::vector<carve_level> levels(const float* base) const {
    std::vector<carve_level> L(hs.size());
    for (size_t l = 0; l < hs.size(); l++) {
      const float* p = base + off[l];
      L[l].box = p;
      L[l].box_stride = pix_stride;
      L[l].cls = p + 4;
      L[l].cls_stride = pix_stride;
      L[l].extra = extra != 0 ? p + 4 + nc : nullptr;
      L[l].extra_stride = pix_stride;
      L[l].h = hs[l];
      L[l].w = ws[l];
      L[l].stride = strides[l];
    }
    return L;
  }
};

static void compare_rows(const std::vector<float>& got, const std::vector<float>& want, size_t rows, size_t width,
                         const char* what) {
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < width; j++)
      CHECK_MSG(libm_equal(got[i * width + j], want[i * width + j]), "%s: row %zu col %zu: %.9g vs CPU %.9g", what,
                i, j, got[i * width + j], want[i * width + j]);
}

// The way carve_cu_e2e_postprocess_* takes for an image, from the conditions of carve_cuda_topk.cu's fused head
// (A <= CARVE_CU_E2E_ITEMS x 1024 = 12288, k' <= CARVE_CU_E2E_KMAX = 1024) and its step-2 candidates, counted
// here from the CPU's scores: the class scores of the k' chosen anchors that are >= the k'-th anchor score
// (up to CARVE_CU_E2E_CAND = 3072 in shared memory, else the one-block top-k over all of them).
enum E2ePath { E2E_GENERAL, E2E_CANDIDATES, E2E_OVERFLOW };
static int e2e_path_count[3];

static float host_sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

static E2ePath e2e_path(const Head& head, size_t k) {
  const size_t kk = std::min(k, head.anchors);
  if (head.anchors > 12288 || kk > 1024) return E2E_GENERAL;
  std::vector<const float*> logits;
  std::vector<float> s1;
  for (size_t l = 0; l < head.hs.size(); l++) {
    for (size_t p = 0; p < head.hs[l] * head.ws[l]; p++) {
      const float* x = &head.data[head.off[l] + p * head.pix_stride + 4];
      float m = NAN;
      for (size_t c = 0; c < head.nc; c++)
        if (x[c] > m || m != m) m = x[c];
      logits.push_back(x);
      s1.push_back(host_sigmoid(m));
    }
  }
  const std::vector<int32_t> top = sort_topk(s1, kk);
  const uint32_t thr = order_key(s1[top[kk - 1]]);
  size_t count = 0;
  for (size_t r = 0; r < kk; r++)
    for (size_t c = 0; c < head.nc; c++) count += order_key(host_sigmoid(logits[top[r]][c])) >= thr;
  CHECK_MSG(count >= kk, "e2e: %zu class scores >= the k'-th anchor score, fewer than k' = %zu", count, kk);
  return count <= 3072 ? E2E_CANDIDATES : E2E_OVERFLOW;
}

static void check_e2e(TestCtx& t, Head& head, size_t k, carve_e2e_task task, TestRng& rng, bool nan_logits,
                      const char* what) {
  head.fill(rng, nan_logits);
  e2e_path_count[e2e_path(head, k)]++;
  const size_t kk = std::min(k, head.anchors), width = 6 + head.extra;
  // CPU reference.
  std::vector<unsigned char> cpu_scratch(carve_e2e_scratch_bytes(head.anchors, head.nc, k) + 8);
  void* cs = (void*)(((uintptr_t)cpu_scratch.data() + 7) & ~(uintptr_t)7);
  std::vector<float> want(kk * width);
  size_t num = 0;
  const std::vector<carve_level> hl = head.levels(head.data.data());
  carve_e2e_postprocess_task(hl.data(), hl.size(), head.nc, head.extra, k, task, cs, want.data(), &num, NULL);
  CHECK(num == kk);
  // Device.
  DevBuf<float> dd(head.data), drows(kk * width);
  DevScratch scratch(carve_cu_e2e_scratch_bytes(head.anchors, head.nc, k));
  const std::vector<carve_level> dl = head.levels(dd.p);
  CHECK_OK(carve_cu_e2e_postprocess_task(&t.ctx, dl.data(), dl.size(), head.nc, head.extra, k, task, scratch.get(),
                                         drows.p));
  t.sync();
  compare_rows(drows.download(), want, kk, width, what);
}

// A batch of `heads.size()` images through carve_cu_e2e_postprocess_batch: level l holds image 0's map, then
// image 1's, ... (the layout of a batch package's views), each image against its own CPU reference.
static void check_e2e_batch(TestCtx& t, std::vector<Head>& heads, size_t k, carve_e2e_task task, TestRng& rng,
                            const char* what) {
  const Head& h0 = heads[0];
  const size_t batch = heads.size(), kk = std::min(k, h0.anchors), width = 6 + h0.extra;
  std::vector<float> data, want(batch * kk * width);
  std::vector<size_t> level_off;
  for (Head& h : heads) {
    h.fill(rng, false);
    e2e_path_count[e2e_path(h, k)]++;
  }
  for (size_t l = 0; l < h0.hs.size(); l++) {
    level_off.push_back(data.size());
    for (const Head& h : heads) {
      const size_t n = h.hs[l] * h.ws[l] * h.pix_stride;
      data.insert(data.end(), h.data.begin() + (long)h.off[l], h.data.begin() + (long)(h.off[l] + n));
    }
  }
  for (size_t b = 0; b < batch; b++) {
    std::vector<unsigned char> cpu_scratch(carve_e2e_scratch_bytes(h0.anchors, h0.nc, k) + 8);
    void* cs = (void*)(((uintptr_t)cpu_scratch.data() + 7) & ~(uintptr_t)7);
    size_t num = 0;
    const std::vector<carve_level> hl = heads[b].levels(heads[b].data.data());
    carve_e2e_postprocess_task(hl.data(), hl.size(), h0.nc, h0.extra, k, task, cs, want.data() + b * kk * width, &num,
                               NULL);
    CHECK(num == kk);
  }
  DevBuf<float> dd(data), drows(batch * kk * width);
  DevScratch scratch(carve_cu_e2e_batch_scratch_bytes(h0.anchors, h0.nc, k, batch));
  std::vector<carve_level> dl = h0.levels(dd.p);
  for (size_t l = 0; l < dl.size(); l++) {  // image 0's maps of level l (the same offsets within a pixel)
    const size_t shift = level_off[l] - h0.off[l];
    dl[l].box += shift;
    dl[l].cls += shift;
    if (dl[l].extra != nullptr) dl[l].extra += shift;
  }
  CHECK_OK(carve_cu_e2e_postprocess_batch(&t.ctx, dl.data(), dl.size(), h0.nc, h0.extra, k, task, batch, scratch.get(),
                                          drows.p));
  t.sync();
  const std::vector<float> got = drows.download();
  for (size_t b = 0; b < batch; b++) {
    char w[256];
    std::snprintf(w, sizeof w, "%.160s image %zu of %zu", what, b, batch);
    compare_rows(std::vector<float>(got.begin() + (long)(b * kk * width), got.begin() + (long)((b + 1) * kk * width)),
                 std::vector<float>(want.begin() + (long)(b * kk * width), want.begin() + (long)((b + 1) * kk * width)),
                 kk, width, w);
  }
  // The images differ (else a kernel reading image 0 for every image would pass).
  CHECK_MSG(!std::equal(want.begin(), want.begin() + (long)(kk * width), want.begin() + (long)(kk * width)),
            "%s: images 0 and 1 gave the same rows", what);
}

static void test_e2e_batch(TestCtx& t) {
  TestRng rng(17);
  int count = 0;
  const std::vector<float> ss = {8.0f, 16.0f, 32.0f};
  struct {
    std::vector<size_t> hs, ws;
    carve_e2e_task task;
    size_t nc, extra, k;
    const char* name;
    bool flat1 = false;  // image 1's scores flat (the fused head's overflow on an image past the first)
  } cases[] = {
      {{13, 7, 4}, {7, 4, 2}, CARVE_E2E_DETECT, 80, 0, 300, "detect"},
      {{13, 7, 4}, {7, 4, 2}, CARVE_E2E_POSE, 1, 51, 10, "pose"},
      {{13, 7, 4}, {7, 4, 2}, CARVE_E2E_OBB, 15, 1, 50, "obb"},
      {{40, 20, 10}, {40, 20, 10}, CARVE_E2E_SEGMENT, 80, 32, 300, "segment"},
      {{40, 20, 10}, {40, 20, 10}, CARVE_E2E_DETECT, 3, 0, 2100, "detect k = A (the top-k image by image)"},
      {{40, 20, 10}, {40, 20, 10}, CARVE_E2E_DETECT, 80, 0, 300, "detect, image 1 flat", true},
  };
  for (const auto& c : cases) {
    std::vector<Head> heads(3, Head(c.hs, c.ws, ss, c.nc, c.extra));
    heads[1].flat = c.flat1;
    char what[160];
    std::snprintf(what, sizeof what, "batch %s A=%zu k=%zu", c.name, heads[0].anchors, c.k);
    check_e2e_batch(t, heads, c.k, c.task, rng, what);
    count++;
  }
  // Refusals: batch 0.
  Head head({4}, {4}, {8.0f}, 3, 0);
  DevBuf<float> dd(head.data.size()), drows(16 * 6);
  DevScratch scratch(carve_cu_e2e_batch_scratch_bytes(head.anchors, head.nc, 16, 1));
  const std::vector<carve_level> dl = head.levels(dd.p);
  CHECK(carve_cu_e2e_postprocess_batch(&t.ctx, dl.data(), dl.size(), head.nc, 0, 16, CARVE_E2E_DETECT, 0,
                                       scratch.get(), drows.p) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(carve_cu_e2e_batch_scratch_bytes(head.anchors, head.nc, 16, 0) == SIZE_MAX);
  std::printf("e2e batch: %d cases of 3 images equal to carve_e2e_postprocess_task image by image\n", count);
}

// The heads the e2e tests run: every task, with a one-class detect head carrying extra channels.
struct E2eTask {
  carve_e2e_task task;
  size_t nc, extra;
  const char* name;
};
static const E2eTask kE2eTasks[] = {{CARVE_E2E_DETECT, 80, 0, "detect"},
                                    {CARVE_E2E_DETECT, 1, 3, "detect nc=1 + extras"},
                                    {CARVE_E2E_SEGMENT, 80, 32, "segment"},
                                    {CARVE_E2E_POSE, 1, 51, "pose"},
                                    {CARVE_E2E_OBB, 15, 1, "obb"}};

static void test_e2e(TestCtx& t) {
  TestRng rng(13);
  int count = 0;
  // Small odd levels (A = 13*7 + 7*4 + 4*2 = 127) and the 320 detect head (A = 2100); then the 320 head's flat
  // scores, where every class score ties with the k'-th anchor score (the fused head's overflow; ties to the
  // lower index).
  for (int big = 0; big < 2; big++) {
    const std::vector<size_t> hs = big ? std::vector<size_t>{40, 20, 10} : std::vector<size_t>{13, 7, 4};
    const std::vector<size_t> ws = big ? std::vector<size_t>{40, 20, 10} : std::vector<size_t>{7, 4, 2};
    const std::vector<float> ss = {8.0f, 16.0f, 32.0f};
    for (const E2eTask& tk : kE2eTasks) {
      Head head(hs, ws, ss, tk.nc, tk.extra);
      for (size_t k : {(size_t)1, (size_t)10, (size_t)300, head.anchors}) {
        char what[128];
        std::snprintf(what, sizeof what, "%s A=%zu k=%zu", tk.name, head.anchors, k);
        check_e2e(t, head, k, tk.task, rng, k == 10, what);
        count++;
      }
    }
  }
  for (size_t k : {(size_t)1, (size_t)300}) {
    Head head({40, 20, 10}, {40, 20, 10}, {8.0f, 16.0f, 32.0f}, 80, 0);
    head.flat = true;
    char what[128];
    std::snprintf(what, sizeof what, "detect flat scores A=%zu k=%zu", head.anchors, k);
    check_e2e(t, head, k, CARVE_E2E_DETECT, rng, false, what);
    count++;
  }
  // k' a multiple of 32 (carve_cu_rank_lists' lists all full, none padded) up to the fused head's largest, 1024.
  for (size_t k : {(size_t)64, (size_t)1024}) {
    Head head({40, 20, 10}, {40, 20, 10}, {8.0f, 16.0f, 32.0f}, 80, 0);
    char what[128];
    std::snprintf(what, sizeof what, "detect A=%zu k=%zu (whole lists)", head.anchors, k);
    check_e2e(t, head, k, CARVE_E2E_DETECT, rng, false, what);
    count++;
  }
  // The fused head's logit bound (carve_cu_e2e_logit_bound): confident scores, where the k'-th anchor score T is
  // 1.0 and logits far below its anchor's largest one tie with it (the bound must be off), and logits on a fine grid
  // (1/1024), many of them within the bound's 0.01 of it.
  const struct {
    float shift, step;
    const char* name;
  } bounds[] = {{15.0f, 0.5f, "confident scores (T 1.0)"}, {0.0f, 1.0f / 1024.0f, "logits on a 1/1024 grid"}};
  for (const auto& bc : bounds) {
    for (size_t k : {(size_t)10, (size_t)300}) {
      Head head({40, 20, 10}, {40, 20, 10}, {8.0f, 16.0f, 32.0f}, 80, 0);
      head.shift = bc.shift;
      head.step = bc.step;
      char what[128];
      std::snprintf(what, sizeof what, "detect %s A=%zu k=%zu", bc.name, head.anchors, k);
      const int before = e2e_path_count[E2E_CANDIDATES];
      check_e2e(t, head, k, CARVE_E2E_DETECT, rng, false, what);
      CHECK_MSG(e2e_path_count[E2E_CANDIDATES] == before + 1, "%s: not the fused head's candidates", what);
      count++;
    }
  }
  std::printf("e2e: %d cases (4 tasks) equal to carve_e2e_postprocess_task bit for bit\n", count);
  // Every way through the e2e head ran: the general launches, the fused head from its candidates, and its
  // fallback when they overflow.
  std::printf("e2e: %d images by the general path, %d by the fused head's candidates, %d by its overflow\n",
              e2e_path_count[E2E_GENERAL], e2e_path_count[E2E_CANDIDATES], e2e_path_count[E2E_OVERFLOW]);
  for (int w = 0; w < 3; w++) CHECK_MSG(e2e_path_count[w] > 0, "e2e: no case took path %d", w);

  // Captured into a graph once, replayed on new inputs (no sync, no allocation inside).
  {
    Head head({13, 7, 4}, {7, 4, 2}, {8.0f, 16.0f, 32.0f}, 15, 1);
    const size_t k = 50, width = 7;
    DevBuf<float> dd(head.data.size()), drows(k * width);
    DevScratch scratch(carve_cu_e2e_scratch_bytes(head.anchors, head.nc, k));
    const std::vector<carve_level> dl = head.levels(dd.p);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK_CUDA(cudaStreamBeginCapture(t.stream, cudaStreamCaptureModeGlobal));
    CHECK_OK(carve_cu_e2e_postprocess_task(&t.ctx, dl.data(), dl.size(), head.nc, head.extra, k, CARVE_E2E_OBB,
                                           scratch.get(), drows.p));
    CHECK_CUDA(cudaStreamEndCapture(t.stream, &graph));
    // Two launches: anchor scores, the fused head (a GPU pays per launch, not for these kernels'
    // arithmetic; the general path's five: anchor scores, the one-block top-k, class scores, top-k, rows).
    size_t nodes = 0;
    CHECK_CUDA(cudaGraphGetNodes(graph, NULL, &nodes));
    CHECK_MSG(nodes == 2, "e2e post-processing: %zu graph nodes, want 2", nodes);
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int r = 0; r < 3; r++) {
      head.fill(rng, false);
      dd.upload(head.data);
      CHECK_CUDA(cudaGraphLaunch(exec, t.stream));
      t.sync();
      std::vector<unsigned char> cpu_scratch(carve_e2e_scratch_bytes(head.anchors, head.nc, k) + 8);
      void* cs = (void*)(((uintptr_t)cpu_scratch.data() + 7) & ~(uintptr_t)7);
      std::vector<float> want(k * width);
      size_t num = 0;
      const std::vector<carve_level> hl = head.levels(head.data.data());
      carve_e2e_postprocess_task(hl.data(), hl.size(), head.nc, head.extra, k, CARVE_E2E_OBB, cs, want.data(), &num, NULL);
      CHECK(num == k);
      compare_rows(drows.download(), want, k, width, "obb graph replay");
    }
    CHECK_CUDA(cudaGraphExecDestroy(exec));
    CHECK_CUDA(cudaGraphDestroy(graph));
    std::printf("e2e: graph capture + 3 replays ok\n");
  }

  // Refusals, as the CPU function's (which gives 0 rows for these).
  {
    Head head({4}, {4}, {8.0f}, 3, 2);
    DevBuf<float> dd(head.data.size()), drows(16 * 8);
    DevScratch scratch(carve_cu_e2e_scratch_bytes(head.anchors, head.nc, 16));
    const std::vector<carve_level> dl = head.levels(dd.p);
    CHECK(carve_cu_e2e_postprocess_task(&t.ctx, dl.data(), 1, 3, 2, 16, CARVE_E2E_POSE, scratch.get(), drows.p) ==
          CARVE_ERR_INVALID_ARGUMENT);
    CHECK(carve_cu_e2e_postprocess_task(&t.ctx, dl.data(), 1, 3, 2, 16, CARVE_E2E_OBB, scratch.get(), drows.p) ==
          CARVE_ERR_INVALID_ARGUMENT);
    CHECK(carve_cu_e2e_postprocess_task(&t.ctx, dl.data(), 1, 0, 2, 16, CARVE_E2E_DETECT, scratch.get(), drows.p) ==
          CARVE_ERR_INVALID_ARGUMENT);
    CHECK(carve_cu_e2e_postprocess_task(&t.ctx, dl.data(), 1, 3, 2, 16, (carve_e2e_task)7, scratch.get(), drows.p) ==
          CARVE_ERR_INVALID_ARGUMENT);
    CHECK(carve_cu_e2e_postprocess_task(&t.ctx, dl.data(), 1, 3, 2, 0, CARVE_E2E_DETECT, scratch.get(), drows.p) ==
          CARVE_ERR_INVALID_ARGUMENT);
  }
}

// ---- End-to-end on half maps -----------------------------------------------------------------

// The same views re-pointed at the same element offsets of a buffer of halves.
static std::vector<carve_cu_level_h> half_levels(const std::vector<carve_level>& L, const float* base,
                                                 const __half* hbase) {
  std::vector<carve_cu_level_h> out(L.size());
  for (size_t l = 0; l < L.size(); l++) {
    out[l] = {hbase + (L[l].box - base), L[l].box_stride, hbase + (L[l].cls - base), L[l].cls_stride,
              L[l].extra != nullptr ? hbase + (L[l].extra - base) : nullptr, L[l].extra_stride, L[l].h, L[l].w,
              L[l].stride};
  }
  return out;
}

// `batch` images of one head variant, level by level (image b's map after image b - 1's, as a batch
// package's views): the head outputs rounded to half, and their float32 copies (widened: exact). The
// half maps through the carve_cu_level_h overloads (batch 1: _task, else _batch) must give the rows of
// the float32 function on the copies, every bit, and the scores must spread.
static void check_e2e_half(TestCtx& t, const Head& proto, size_t batch, size_t k, carve_e2e_task task, TestRng& rng,
                           bool nan_logits, const char* what) {
  std::vector<Head> heads(batch, proto);
  std::vector<float> data;
  std::vector<size_t> level_off;
  for (Head& h : heads) h.fill(rng, nan_logits);
  for (size_t l = 0; l < proto.hs.size(); l++) {
    level_off.push_back(data.size());
    for (const Head& h : heads) {
      const size_t n = h.hs[l] * h.ws[l] * h.pix_stride;
      data.insert(data.end(), h.data.begin() + (long)h.off[l], h.data.begin() + (long)(h.off[l] + n));
    }
  }
  std::vector<__half> halves(data.size());
  for (size_t i = 0; i < data.size(); i++) {
    halves[i] = __float2half(data[i]);
    data[i] = __half2float(halves[i]);  // the float32 copy of each half
  }
  const size_t kk = std::min(k, proto.anchors), width = 6 + proto.extra;
  DevBuf<float> dd(data), rows_f(batch * kk * width), rows_h(batch * kk * width);
  DevBuf<__half> dh(halves);
  DevScratch scratch(carve_cu_e2e_batch_scratch_bytes(proto.anchors, proto.nc, k, batch));
  std::vector<carve_level> dl = proto.levels(dd.p);
  for (size_t l = 0; l < dl.size(); l++) {  // image 0's maps of level l
    const size_t shift = level_off[l] - proto.off[l];
    dl[l].box += shift;
    dl[l].cls += shift;
    if (dl[l].extra != nullptr) dl[l].extra += shift;
  }
  const std::vector<carve_cu_level_h> hl = half_levels(dl, dd.p, dh.p);
  if (batch == 1) {
    CHECK_OK(carve_cu_e2e_postprocess_task(&t.ctx, dl.data(), dl.size(), proto.nc, proto.extra, k, task,
                                           scratch.get(), rows_f.p));
    CHECK_OK(carve_cu_e2e_postprocess_task(&t.ctx, hl.data(), hl.size(), proto.nc, proto.extra, k, task,
                                           scratch.get(), rows_h.p));
  } else {
    CHECK_OK(carve_cu_e2e_postprocess_batch(&t.ctx, dl.data(), dl.size(), proto.nc, proto.extra, k, task, batch,
                                            scratch.get(), rows_f.p));
    CHECK_OK(carve_cu_e2e_postprocess_batch(&t.ctx, hl.data(), hl.size(), proto.nc, proto.extra, k, task, batch,
                                            scratch.get(), rows_h.p));
  }
  t.sync();
  const std::vector<float> f = rows_f.download(), h = rows_h.download();
  for (size_t i = 0; i < f.size(); i++) {
    uint32_t uf, uh;
    std::memcpy(&uf, &f[i], 4);
    std::memcpy(&uh, &h[i], 4);
    CHECK_MSG(uf == uh, "%s: row %zu col %zu: halves %.9g, float32 copies %.9g", what, i / width, i % width, h[i],
              f[i]);
  }
  // The compared values spread: the boxes (ltrb uniform in [0, 6)), and the scores of every anchor's row
  // (k >= A; the best few may tie: logits on a grid of 0.5).
  std::vector<float> x1, scores;
  for (size_t r = 0; r < batch * kk; r++) {
    x1.push_back(f[r * width]);
    scores.push_back(f[r * width + 4]);
  }
  std::sort(x1.begin(), x1.end());
  std::sort(scores.begin(), scores.end());
  const size_t n_x1 = (size_t)(std::unique(x1.begin(), x1.end()) - x1.begin());
  const size_t n_scores = (size_t)(std::unique(scores.begin(), scores.end()) - scores.begin());
  CHECK_MSG(n_x1 * 4 >= batch * kk, "%s: %zu distinct boxes in %zu rows", what, n_x1, batch * kk);
  CHECK_MSG(kk < proto.anchors || n_scores >= 3, "%s: %zu distinct scores", what, n_scores);
}

static void test_e2e_half(TestCtx& t) {
  TestRng rng(29);
  int count = 0;
  const std::vector<float> ss = {8.0f, 16.0f, 32.0f};
  for (const E2eTask& tk : kE2eTasks) {
    const Head head({13, 7, 4}, {7, 4, 2}, ss, tk.nc, tk.extra);
    for (size_t batch : {(size_t)1, (size_t)3}) {
      for (size_t k : {(size_t)10, (size_t)300, head.anchors}) {
        char what[160];
        std::snprintf(what, sizeof what, "half %s batch %zu A=%zu k=%zu", tk.name, batch, head.anchors, k);
        check_e2e_half(t, head, batch, k, tk.task, rng, k == 10, what);
        count++;
      }
    }
  }
  // The 320 detect head (A = 2100), batch 2.
  check_e2e_half(t, Head({40, 20, 10}, {40, 20, 10}, ss, 80, 0), 2, 300, CARVE_E2E_DETECT, rng, false,
                 "half detect batch 2 A=2100 k=300");
  count++;
  // The same 2 launches as the float32 function; a refusal as its.
  {
    Head head({13, 7, 4}, {7, 4, 2}, ss, 15, 1);
    DevBuf<__half> dh(head.data.size());
    DevBuf<float> drows(50 * 7);
    DevScratch scratch(carve_cu_e2e_scratch_bytes(head.anchors, head.nc, 50));
    const std::vector<carve_level> dl = head.levels(head.data.data());
    const std::vector<carve_cu_level_h> hl = half_levels(dl, head.data.data(), dh.p);
    cudaGraph_t graph;
    CHECK_CUDA(cudaStreamBeginCapture(t.stream, cudaStreamCaptureModeGlobal));
    CHECK_OK(carve_cu_e2e_postprocess_task(&t.ctx, hl.data(), hl.size(), head.nc, head.extra, 50, CARVE_E2E_OBB,
                                           scratch.get(), drows.p));
    CHECK_CUDA(cudaStreamEndCapture(t.stream, &graph));
    size_t nodes = 0;
    CHECK_CUDA(cudaGraphGetNodes(graph, NULL, &nodes));
    CHECK_MSG(nodes == 2, "e2e on halves: %zu graph nodes, want 2", nodes);
    CHECK_CUDA(cudaGraphDestroy(graph));
    CHECK(carve_cu_e2e_postprocess_task(&t.ctx, hl.data(), hl.size(), head.nc, 2, 50, CARVE_E2E_OBB, scratch.get(),
                                        drows.p) == CARVE_ERR_INVALID_ARGUMENT);
    CHECK(carve_cu_e2e_postprocess_batch(&t.ctx, hl.data(), hl.size(), head.nc, 1, 50, CARVE_E2E_OBB, 0, scratch.get(),
                                         drows.p) == CARVE_ERR_INVALID_ARGUMENT);
  }
  std::printf("e2e on halves: %d cases (4 tasks, batch 1 / 2 / 3) bit for bit the float32 function on float32 "
              "copies\n", count);
}

int main() {
  TestCtx t;
  test_topk(t);
  test_numbers(t);
  test_gather(t);
  test_e2e(t);
  test_e2e_batch(t);
  test_e2e_half(t);
  std::printf("test_topk: all ok\n");
  return 0;
}
