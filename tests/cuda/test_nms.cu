// tests/cuda/test_nms.cu: carve_cu_nms_postprocess (runtime/carve_cuda_nms.cu) against the CPU
// reference carve_nms_postprocess (runtime/carve_nms.c, itself checked against Ultralytics by
// tests/runtime/nms_vs_ultralytics.py): the same rows and count (bit for bit under emulation;
// on a GPU the count, classes and order exactly, floats within CUDA's expf / cosf error), for
// the four tasks and:
//   * ties: logits and boxes from a few values, so that many candidates have equal scores (the
//     lower anchor first) and equal boxes;
//   * every box suppressed but one per class (boxes far wider than the grid), and agnostic;
//   * none suppressed (boxes smaller than a cell), with max_det cutting the kept boxes;
//   * random heads, NaN and infinite logits, conf at 0.001 / 0.25 / above every score, iou 0,
//     0.45, 0.7, 1, max_det 1 / 7 / 300, strided level views, an empty level;
//   * more anchors than max_nms (30000 candidates sorted by the global network);
//   * the run's conf read from device memory: captured once into a CUDA graph and replayed with
//     other conf values and inputs;
//   * on half maps (carve_cu_level_h: an fp16 package's head): the count and rows bit for bit the
//     float32 function's on float32 copies of the same halves, the four tasks, every kind above;
//   * a batch (carve_cu_nms_postprocess_batch): three images with different heads in one call, each
//     image's count and rows the CPU's on its head alone, float32 and half maps, the candidates' order with
//     its results in shared memory and in the scratch (more than 2048 candidates), max_det cutting some
//     images only;
//   * carve_cu_nms_set_conf; argument errors.

#include <algorithm>  // std::min of an initializer list (nvcc's headers do not bring it in)
#include <string>

#include "carve_cuda_f16.h"  // __half (cuda_fp16.h; the emulation's cuda_emu_f16.h)
#include "carve_cuda_nms.h"
#include "cuda_test.h"

// Head outputs of one variant: per level one (h, w, 4 + nc + extra + 2) tensor, so every view is strided.
struct Head {
  std::vector<size_t> hs, ws;
  size_t nc, extra, pix;
  std::vector<float> data;
  std::vector<size_t> off;
  size_t anchors = 0;

  Head(std::vector<size_t> h, std::vector<size_t> w, size_t nc_, size_t extra_)
      : hs(h), ws(w), nc(nc_), extra(extra_), pix(4 + nc_ + extra_ + 2) {
    size_t total = 0;
    for (size_t l = 0; l < hs.size(); l++) {
      off.push_back(total);
      total += hs[l] * ws[l] * pix;
      anchors += hs[l] * ws[l];
    }
    data.resize(total);
  }

  // kind: "random", "ties", "huge" (every box about 4000 px), "tiny" (boxes of 0.1 cell); nan: some NaN /
  // infinite logits.
  void fill(TestRng& rng, const std::string& kind, bool nan) {
    const float few[] = {-2.0f, -1.0f, 0.0f, 1.0f, 2.0f};
    for (size_t l = 0; l < hs.size(); l++) {
      const float stride = (float)(8u << l);
      for (size_t p = 0; p < hs[l] * ws[l]; p++) {
        float* px = &data[off[l] + p * pix];
        for (int k = 0; k < 4; k++) {
          px[k] = kind == "ties" ? (float)(2 + rng.below(2)) : kind == "huge" ? 2000.0f / stride
                  : kind == "tiny" ? 0.05f : rng.range(1.0f, 5.0f);
        }
        for (size_t c = 0; c < nc; c++) {
          float v = kind == "ties" ? few[rng.below(5)] : rng.normal() * 2.0f;
          if (nan && rng.below(50) == 0) {
            const float special[] = {NAN, INFINITY, -INFINITY, 40.0f};
            v = special[rng.below(4)];
          }
          px[4 + c] = v;
        }
        for (size_t e = 0; e < extra; e++) {
          px[4 + nc + e] = extra == 1 ? rng.range(-1.5f, 1.5f) : rng.normal();
        }
        px[4 + nc + extra] = px[4 + nc + extra + 1] = 12345.0f;  // padding the views skip
      }
    }
  }

  std::vector<carve_level> levels(const float* base) const {
    std::vector<carve_level> out;
    for (size_t l = 0; l < hs.size(); l++) {
      const float* p = base + off[l];
      out.push_back(carve_level{p, pix, p + 4, pix, extra ? p + 4 + nc : nullptr, pix, hs[l], ws[l],
                                (float)(8u << l)});
    }
    return out;
  }
};

static bool rows_equal(float got, float want) {
#ifdef CARVE_CUDA_EMULATION
  return same_float(got, want);
#else
  return near_float(got, want, 1e-5 * (std::fabs((double)want) + 1.0));
#endif
}

// The CPU reference: count and rows.
static size_t cpu_nms(const Head& h, carve_e2e_task task, float conf, double iou, int agnostic, size_t max_det,
                      std::vector<float>& rows) {
  const std::vector<carve_level> hl = h.levels(h.data.data());
  std::vector<uint64_t> scratch(carve_nms_scratch_bytes(h.anchors) / 8 + 1);
  rows.assign((std::min(max_det, h.anchors) + 1) * (6 + h.extra), 0.0f);
  const carve_nms_params p = {conf, iou, agnostic, max_det};
  size_t n = 0;
  CHECK_OK(carve_nms_postprocess(hl.data(), hl.size(), h.nc, h.extra, task, &p, scratch.data(), rows.data(), &n,
                                 NULL));
  return n;
}

static void compare(const std::vector<float>& got, uint32_t n_got, const std::vector<float>& want, size_t n_want,
                    size_t width, const std::string& what) {
  CHECK_MSG(n_got == n_want, "%s: %u rows on the device, %zu on the CPU", what.c_str(), n_got, n_want);
  for (size_t i = 0; i < n_want * width; i++) {
    CHECK_MSG(rows_equal(got[i], want[i]), "%s: row %zu col %zu: device %.9g, CPU %.9g", what.c_str(), i / width,
              i % width, (double)got[i], (double)want[i]);
  }
}

static int check_case(TestCtx& t, Head& h, carve_e2e_task task, float conf, double iou, int agnostic, size_t max_det,
                      const std::string& what) {
  std::vector<float> want;
  const size_t n_want = cpu_nms(h, task, conf, iou, agnostic, max_det, want);
  const size_t width = 6 + h.extra, cap = std::min(max_det, h.anchors);
  DevBuf<float> dd(h.data), drows(cap * width + 1), dconf(std::vector<float>{conf});
  DevBuf<uint32_t> dn(1);
  DevScratch scratch(carve_cu_nms_scratch_bytes(h.anchors, max_det));
  const std::vector<carve_level> dl = h.levels(dd.p);
  CHECK_OK(carve_cu_nms_postprocess(&t.ctx, dl.data(), dl.size(), h.nc, h.extra, task, dconf.p, iou, agnostic,
                                    max_det, scratch.get(), drows.p, dn.p));
  t.sync();
  compare(drows.download(), dn.download()[0], want, n_want, width, what);
  return (int)n_want;
}

static const struct {
  carve_e2e_task task;
  size_t extra;
  const char* name;
} kTasks[] = {{CARVE_E2E_DETECT, 0, "detect"}, {CARVE_E2E_SEGMENT, 5, "segment"}, {CARVE_E2E_POSE, 6, "pose"},
              {CARVE_E2E_OBB, 1, "obb"}};

static void test_cases(TestCtx& t) {
  TestRng rng(18);
  int cases = 0, rows = 0;
  for (const auto& tk : kTasks) {
    for (const char* kind : {"random", "ties", "huge", "tiny"}) {
      for (int agnostic = 0; agnostic <= 1; agnostic++) {
        const size_t nc = std::string(kind) == "random" ? 7 : 3;
        Head h({13, 7, 4}, {11, 6, 3}, nc, tk.extra);
        h.fill(rng, kind, std::string(kind) == "random");
        const float conf = std::string(kind) == "random" ? 0.25f : 0.1f;
        for (size_t max_det : {(size_t)300, (size_t)7}) {
          const std::string what = std::string(tk.name) + " " + kind + (agnostic ? " agnostic" : "") + " max_det " +
                                   std::to_string(max_det);
          const int n = check_case(t, h, tk.task, conf, 0.7, agnostic, max_det, what);
          // what each kind must exercise
          if (std::string(kind) == "huge") CHECK_MSG(n >= 1 && n <= (agnostic ? 1 : 3), "%s: %d rows", what.c_str(), n);
          if (std::string(kind) == "tiny" && max_det == 7) CHECK_MSG(n == 7, "%s: %d rows", what.c_str(), n);
          rows += n;
          cases++;
        }
      }
    }
  }
  // thresholds: conf near 0 and above every score, iou 0 / 0.45 / 1, max_det 1
  for (const auto& tk : kTasks) {
    Head h({9, 5, 3}, {10, 5, 2}, 4, tk.extra);
    h.fill(rng, "random", true);
    const float confs[] = {0.001f, 0.25f, 0.99999f};
    const double ious[] = {0.0, 0.45, 1.0};
    for (float conf : confs) {
      for (double iou : ious) {
        rows += check_case(t, h, tk.task, conf, iou, 0, 300, std::string(tk.name) + " thresholds");
        cases++;
      }
    }
    rows += check_case(t, h, tk.task, 0.25f, 0.7, 0, 1, std::string(tk.name) + " max_det 1");
    cases++;
  }
  // an empty level between two others
  {
    Head h({6, 0, 3}, {5, 0, 2}, 2, 0);
    h.fill(rng, "random", false);
    rows += check_case(t, h, CARVE_E2E_DETECT, 0.1f, 0.7, 0, 300, "empty level");
    cases++;
  }
  // more anchors than max_nms: 33600 candidates, the best 30000 sorted by the block's bitonic network in the scratch
  {
    Head h({160, 80, 40}, {160, 80, 40}, 1, 0);
    h.fill(rng, "tiny", false);
    for (auto& v : h.data) {
      if (v == 0.0f) v = 0.0f;
    }
    const int n = check_case(t, h, CARVE_E2E_DETECT, 0.0f, 0.7, 0, 300, "max_nms");
    CHECK(n == 300);
    cases++;
  }
  // more anchors than the one-block top-k takes elsewhere (75600, above 65536): the order still one block per image
  {
    Head h({240, 120, 60}, {240, 120, 60}, 1, 0);
    h.fill(rng, "tiny", false);
    const int n = check_case(t, h, CARVE_E2E_DETECT, 0.9f, 0.7, 0, 300, "75600 anchors");
    CHECK(n == 300);
    cases++;
  }
  std::printf("nms: %d cases (4 tasks; ties, all / none suppressed, thresholds, max_nms) equal to carve_nms_postprocess "
              "(%d rows)\n", cases, rows);
}

// The run's conf is read from device memory: one capture, replays with new inputs and thresholds.
static void test_graph(TestCtx& t) {
  TestRng rng(19);
  Head h({12, 6, 3}, {12, 6, 3}, 5, 1);
  const size_t width = 7, cap = 300;
  DevBuf<float> dd(h.data.size()), drows(cap * width), dconf(1);
  DevBuf<uint32_t> dn(1);
  DevScratch scratch(carve_cu_nms_scratch_bytes(h.anchors, cap));
  const std::vector<carve_level> dl = h.levels(dd.p);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CHECK_CUDA(cudaStreamBeginCapture(t.stream, cudaStreamCaptureModeThreadLocal));
  CHECK_OK(carve_cu_nms_postprocess(&t.ctx, dl.data(), dl.size(), h.nc, h.extra, CARVE_E2E_OBB, dconf.p, 0.7, 0, cap,
                                    scratch.get(), drows.p, dn.p));
  CHECK_CUDA(cudaStreamEndCapture(t.stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const float confs[] = {0.25f, 0.05f, 0.6f};
  for (int r = 0; r < 3; r++) {
    h.fill(rng, r == 1 ? "ties" : "random", false);
    dd.upload(h.data);
    dconf.upload(std::vector<float>{confs[r]});
    CHECK_CUDA(cudaGraphLaunch(exec, t.stream));
    t.sync();
    std::vector<float> want;
    const size_t n = cpu_nms(h, CARVE_E2E_OBB, confs[r], 0.7, 0, cap, want);
    compare(drows.download(), dn.download()[0], want, n, width, "graph replay " + std::to_string(r));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::printf("nms: graph capture + 3 replays with the conf in device memory ok\n");
}

static void test_errors(TestCtx& t) {
  Head h({2}, {2}, 3, 3);
  TestRng rng(20);
  h.fill(rng, "random", false);
  DevBuf<float> dd(h.data), drows(16 * 9), dconf(std::vector<float>{0.25f});
  DevBuf<uint32_t> dn(std::vector<uint32_t>{77});
  DevScratch s(carve_cu_nms_scratch_bytes(h.anchors, 16));
  const std::vector<carve_level> dl = h.levels(dd.p);
  const carve_status bad = CARVE_ERR_INVALID_ARGUMENT;
  CHECK(carve_cu_nms_postprocess(nullptr, dl.data(), 1, 3, 3, CARVE_E2E_POSE, dconf.p, 0.7, 0, 16, s.get(), drows.p,
                                 dn.p) == bad);
  CHECK(carve_cu_nms_postprocess(&t.ctx, dl.data(), 1, 3, 3, CARVE_E2E_POSE, nullptr, 0.7, 0, 16, s.get(), drows.p,
                                 dn.p) == bad);
  CHECK(carve_cu_nms_postprocess(&t.ctx, dl.data(), 1, 3, 3, CARVE_E2E_POSE, dconf.p, 0.7, 0, 16, s.get(), drows.p,
                                 nullptr) == bad);
  CHECK(carve_cu_nms_postprocess(&t.ctx, dl.data(), 1, 0, 3, CARVE_E2E_POSE, dconf.p, 0.7, 0, 16, s.get(), drows.p,
                                 dn.p) == bad);
  CHECK(carve_cu_nms_postprocess(&t.ctx, dl.data(), 1, 3, 2, CARVE_E2E_POSE, dconf.p, 0.7, 0, 16, s.get(), drows.p,
                                 dn.p) == bad);  // keypoints in threes
  CHECK(carve_cu_nms_postprocess(&t.ctx, dl.data(), 1, 3, 3, CARVE_E2E_OBB, dconf.p, 0.7, 0, 16, s.get(), drows.p,
                                 dn.p) == bad);  // one angle
  CHECK(carve_cu_nms_postprocess(&t.ctx, dl.data(), 1, 3, 3, (carve_e2e_task)7, dconf.p, 0.7, 0, 16, s.get(), drows.p,
                                 dn.p) == bad);
  CHECK(carve_cu_nms_postprocess(&t.ctx, dl.data(), 1, 3, 3, CARVE_E2E_POSE, dconf.p, 1.5, 0, 16, s.get(), drows.p,
                                 dn.p) == bad);
  CHECK(carve_cu_nms_postprocess(&t.ctx, dl.data(), 1, 3, 3, CARVE_E2E_POSE, dconf.p, NAN, 0, 16, s.get(), drows.p,
                                 dn.p) == bad);
  CHECK(carve_cu_nms_postprocess(&t.ctx, dl.data(), 1, 3, 3, CARVE_E2E_POSE, dconf.p, 0.7, 0, 16,
                                 (char*)s.get() + 4, drows.p, dn.p) == bad);
  CHECK(carve_cu_nms_postprocess(&t.ctx, dl.data(), 9, 3, 3, CARVE_E2E_POSE, dconf.p, 0.7, 0, 16, s.get(), drows.p,
                                 dn.p) == bad);
  t.sync();
  CHECK(dn.download()[0] == 77);  // nothing was enqueued
  CHECK_OK(carve_cu_nms_postprocess(&t.ctx, dl.data(), 1, 3, 3, CARVE_E2E_POSE, dconf.p, 0.7, 0, 0, s.get(), drows.p,
                                    dn.p));  // max_det 0: no rows
  t.sync();
  CHECK(dn.download()[0] == 0);
  // carve_cu_nms_set_conf: the value lands on the device, in stream order
  CHECK_OK(carve_cu_nms_set_conf(&t.ctx, dconf.p, 0.375f));
  t.sync();
  CHECK(dconf.download()[0] == 0.375f);
  CHECK(carve_cu_nms_set_conf(nullptr, dconf.p, 0.5f) == bad && carve_cu_nms_set_conf(&t.ctx, nullptr, 0.5f) == bad);
  std::printf("nms: argument errors ok\n");
}

// The head rounded to half: the half maps (carve_cu_level_h overload) against the float32 function on their
// float32 copies (widened: exact); count and rows bit for bit. Returns the rows.
static int check_half(TestCtx& t, Head& h, carve_e2e_task task, float conf, double iou, int agnostic, size_t max_det,
                      const std::string& what) {
  std::vector<__half> halves(h.data.size());
  for (size_t i = 0; i < h.data.size(); i++) {
    halves[i] = __float2half(h.data[i]);
    h.data[i] = __half2float(halves[i]);
  }
  const size_t width = 6 + h.extra, cap = std::min(max_det, h.anchors);
  DevBuf<float> dd(h.data), rows_f(cap * width + 1), rows_h(cap * width + 1), dconf(std::vector<float>{conf});
  DevBuf<__half> dh(halves);
  DevBuf<uint32_t> n_f(1), n_h(1);
  DevScratch scratch(carve_cu_nms_scratch_bytes(h.anchors, max_det));
  const std::vector<carve_level> dl = h.levels(dd.p);
  std::vector<carve_cu_level_h> hl;
  for (const carve_level& lv : dl) {
    hl.push_back({dh.p + (lv.box - dd.p), lv.box_stride, dh.p + (lv.cls - dd.p), lv.cls_stride,
                  lv.extra != nullptr ? dh.p + (lv.extra - dd.p) : nullptr, lv.extra_stride, lv.h, lv.w, lv.stride});
  }
  CHECK_OK(carve_cu_nms_postprocess(&t.ctx, dl.data(), dl.size(), h.nc, h.extra, task, dconf.p, iou, agnostic, max_det,
                                    scratch.get(), rows_f.p, n_f.p));
  CHECK_OK(carve_cu_nms_postprocess(&t.ctx, hl.data(), hl.size(), h.nc, h.extra, task, dconf.p, iou, agnostic, max_det,
                                    scratch.get(), rows_h.p, n_h.p));
  t.sync();
  const uint32_t nf = n_f.download()[0], nh = n_h.download()[0];
  CHECK_MSG(nf == nh, "%s: %u rows from the halves, %u from the float32 copies", what.c_str(), nh, nf);
  const std::vector<float> f = rows_f.download(), hr = rows_h.download();
  for (size_t i = 0; i < (size_t)std::min(nf, nh) * width; i++) {
    uint32_t uf, uh;
    std::memcpy(&uf, &f[i], 4);
    std::memcpy(&uh, &hr[i], 4);
    CHECK_MSG(uf == uh, "%s: row %zu col %zu: halves %.9g, float32 copies %.9g", what.c_str(), i / width, i % width,
              (double)hr[i], (double)f[i]);
  }
  return (int)nf;
}

static void test_half(TestCtx& t) {
  TestRng rng(21);
  int cases = 0, rows = 0;
  for (const auto& tk : kTasks) {
    for (const char* kind : {"random", "ties", "huge", "tiny"}) {
      for (int agnostic = 0; agnostic <= 1; agnostic++) {
        Head h({13, 7, 4}, {11, 6, 3}, std::string(kind) == "random" ? 7 : 3, tk.extra);
        h.fill(rng, kind, std::string(kind) == "random");
        const std::string what = std::string("half ") + tk.name + " " + kind + (agnostic ? " agnostic" : "");
        rows += check_half(t, h, tk.task, std::string(kind) == "random" ? 0.25f : 0.1f, 0.7, agnostic, 300, what);
        cases++;
      }
    }
  }
  CHECK(rows > 10 * cases);  // candidates kept: the comparison covers rows, not empty outputs
  std::printf("nms on halves: %d cases (4 tasks) bit for bit the float32 function on float32 copies (%d rows)\n",
              cases, rows);
}

// Image b's maps follow image 0's in each view: level l of every image, image after image.
static std::vector<float> stack_images(const std::vector<Head>& heads) {
  std::vector<float> out;
  for (size_t l = 0; l < heads[0].hs.size(); l++) {
    const size_t n = heads[0].hs[l] * heads[0].ws[l] * heads[0].pix;
    for (const Head& h : heads) {
      out.insert(out.end(), h.data.begin() + h.off[l], h.data.begin() + h.off[l] + n);
    }
  }
  return out;
}

// The levels of image 0 of stack_images' layout at base (rounded to halves into hbase when not null).
static std::vector<carve_level> batch_levels(const std::vector<Head>& heads, const float* base) {
  std::vector<carve_level> out = heads[0].levels(base);
  size_t at = 0;
  for (size_t l = 0; l < out.size(); l++) {
    const ptrdiff_t shift = (ptrdiff_t)at - (ptrdiff_t)heads[0].off[l];  // level l starts after every image's l - 1
    out[l].box += shift;
    out[l].cls += shift;
    if (out[l].extra != nullptr) out[l].extra += shift;
    at += heads.size() * heads[0].hs[l] * heads[0].ws[l] * heads[0].pix;
  }
  return out;
}

// Three images in one carve_cu_nms_postprocess_batch call against the CPU on each image's head alone; half:
// the heads rounded to half first, the half-map overload against the CPU on the float32 copies. Returns the rows.
static int check_batch(TestCtx& t, std::vector<Head>& heads, carve_e2e_task task, float conf, size_t max_det,
                       bool half, const std::string& what, int* cut = nullptr) {
  const size_t batch = heads.size(), width = 6 + heads[0].extra;
  const size_t cap = std::min({max_det, heads[0].anchors, (size_t)CARVE_NMS_MAX_NMS});
  if (half) {
    for (Head& h : heads) {
      for (float& v : h.data) v = __half2float(__float2half(v));
    }
  }
  const std::vector<float> stacked = stack_images(heads);
  std::vector<__half> halves(stacked.size());
  for (size_t i = 0; i < stacked.size(); i++) halves[i] = __float2half(stacked[i]);
  DevBuf<float> dd(stacked), drows(batch * cap * width + 1), dconf(std::vector<float>{conf});
  DevBuf<__half> dh(halves);
  DevBuf<uint32_t> dn(std::vector<uint32_t>(batch, 77));
  DevScratch scratch(carve_cu_nms_batch_scratch_bytes(heads[0].anchors, max_det, batch));
  const std::vector<carve_level> dl = batch_levels(heads, dd.p);
  std::vector<carve_cu_level_h> hl;
  for (const carve_level& lv : dl) {
    hl.push_back({dh.p + (lv.box - dd.p), lv.box_stride, dh.p + (lv.cls - dd.p), lv.cls_stride,
                  lv.extra != nullptr ? dh.p + (lv.extra - dd.p) : nullptr, lv.extra_stride, lv.h, lv.w, lv.stride});
  }
  if (half) {
    CHECK_OK(carve_cu_nms_postprocess_batch(&t.ctx, hl.data(), hl.size(), heads[0].nc, heads[0].extra, task, dconf.p,
                                            0.7, 0, max_det, batch, scratch.get(), drows.p, dn.p));
  } else {
    CHECK_OK(carve_cu_nms_postprocess_batch(&t.ctx, dl.data(), dl.size(), heads[0].nc, heads[0].extra, task, dconf.p,
                                            0.7, 0, max_det, batch, scratch.get(), drows.p, dn.p));
  }
  t.sync();
  const std::vector<float> rows = drows.download();
  const std::vector<uint32_t> counts = dn.download();
  int total = 0;
  for (size_t b = 0; b < batch; b++) {
    std::vector<float> want;
    const size_t n = cpu_nms(heads[b], task, conf, 0.7, 0, max_det, want);
    const std::vector<float> got(rows.begin() + b * cap * width, rows.begin() + (b + 1) * cap * width);
    compare(got, counts[b], want, n, width, what + " image " + std::to_string(b));
    total += (int)n;
    if (cut != nullptr && n == max_det) (*cut)++;  // max_det stopped the walk
  }
  return total;
}

static void test_batch(TestCtx& t) {
  TestRng rng(22);
  int cases = 0, rows = 0, bounded_cases = 0, bounded = 0;
  for (const auto& tk : kTasks) {
    for (int half = 0; half <= 1; half++) {
      for (const std::vector<size_t>& side : {std::vector<size_t>{13, 7, 4}, std::vector<size_t>{40, 20, 10}}) {
        std::vector<Head> heads;
        const char* kinds[] = {"random", "huge", "tiny"};  // huge: one box per class survives; tiny: max_det cuts them
        for (const char* kind : kinds) {
          heads.emplace_back(side, side, 3, tk.extra);
          heads.back().fill(rng, kind, std::string(kind) == "random");
        }
        const std::string what = std::string("batch ") + (half ? "half " : "") + tk.name + " " +
                                 std::to_string(heads[0].anchors) + " anchors";
        rows += check_batch(t, heads, tk.task, 0.1f, 300, half != 0, what);
        cases++;
        // the suppression's chunks of 256 candidates: max_det reached right at the end of the first (256) and
        // early in it (5), where later chunks still hold candidates
        for (const size_t max_det : {size_t{256}, size_t{5}}) {
          if (side[0] == 40 && !half) {
            int cut = 0;
            bounded += check_batch(t, heads, tk.task, 0.1f, max_det, false, what + " max_det " +
                                   std::to_string(max_det), &cut);
            CHECK_MSG(cut > 0, "%s max_det %zu: no image stopped by max_det", what.c_str(), max_det);
            bounded_cases++;
          }
        }
      }
    }
  }
  CHECK(rows > 30 * cases);  // candidates kept in every image: the comparison covers rows, not empty outputs
  CHECK(bounded > 5 * bounded_cases);
  std::printf("nms batch: %d cases of 3 images (4 tasks, float32 and half maps, 234 and 2100 anchors) equal to "
              "carve_nms_postprocess on each image (%d rows); %d more with max_det 256 and 5 (%d rows)\n", cases,
              rows, bounded_cases, bounded);
  // argument errors of the batch call: batch 0; nothing enqueued
  Head h({2}, {2}, 3, 0);
  h.fill(rng, "random", false);
  DevBuf<float> dd(h.data), drows(64), dconf(std::vector<float>{0.25f});
  DevBuf<uint32_t> dn(std::vector<uint32_t>{77});
  DevScratch s(carve_cu_nms_batch_scratch_bytes(h.anchors, 4, 1));
  const std::vector<carve_level> dl = h.levels(dd.p);
  CHECK(carve_cu_nms_batch_scratch_bytes(h.anchors, 4, 0) == SIZE_MAX);
  CHECK(carve_cu_nms_postprocess_batch(&t.ctx, dl.data(), 1, 3, 0, CARVE_E2E_DETECT, dconf.p, 0.7, 0, 4, 0, s.get(),
                                       drows.p, dn.p) == CARVE_ERR_INVALID_ARGUMENT);
  t.sync();
  CHECK(dn.download()[0] == 77);
}

int main() {
  TestCtx t;
  test_cases(t);
  test_half(t);
  test_batch(t);
  test_graph(t);
  test_errors(t);
  return 0;
}
