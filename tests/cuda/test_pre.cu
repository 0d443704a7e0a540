// tests/cuda/test_pre.cu: carve_cu_letterbox and carve_cu_classify_preprocess
// (runtime/carve_cuda_pre.cu) bit for bit against the CPU carve_letterbox and
// carve_classify_preprocess on random images of odd sizes (down- and up-scaling, no
// resize, one pixel, very wide and very tall, padded rows), and carve_letterbox_geometry
// against the info carve_letterbox returns; carve_cu_nchw_to_nhwc(_batch) exact; the half-output overloads of
// carve_cu_letterbox and carve_cu_nchw_to_nhwc_batch (an fp16 package's input) bit for bit the float32 results
// rounded to half.

#include "carve_cuda_f16.h"  // __half (cuda_fp16.h; the emulation's cuda_emu_f16.h)
#include "carve_layout.h"
#include "cuda_test.h"

// Each half of `got` is `want`'s float rounded once to nearest even (carve_cu_f32_to_f16's rounding).
static void check_halves(const std::vector<__half>& got, const std::vector<float>& want, const char* what) {
  CHECK(got.size() == want.size());
  for (size_t i = 0; i < want.size(); i++) {
    const __half h = __float2half_rn(want[i]);
    CHECK_MSG(std::memcmp(&got[i], &h, sizeof h) == 0, "%s: [%zu] %.9g as half differs", what, i, want[i]);
  }
}

static std::vector<uint8_t> random_image(TestRng& rng, int w, int h, size_t stride) {
  std::vector<uint8_t> img((size_t)h * stride);
  for (auto& b : img) b = (uint8_t)(rng.next() & 255u);
  (void)w;
  return img;
}

static void check_letterbox(TestCtx& t, TestRng& rng, int sw, int sh, int ow, int oh) {
  const size_t stride = (size_t)sw * 3 + 5;
  const std::vector<uint8_t> img = random_image(rng, sw, sh, stride);
  // CPU.
  std::vector<float> cpu((size_t)ow * oh * 3);
  std::vector<uint64_t> cpu_scratch(carve_letterbox_scratch_bytes(ow, oh) / 8 + 1);
  carve_letterbox_info cpu_info;
  CHECK_OK(carve_letterbox(img.data(), sw, sh, stride, ow, oh, cpu.data(), cpu_scratch.data(), &cpu_info, NULL));
  carve_letterbox_info info;
  CHECK_OK(carve_letterbox_geometry(sw, sh, ow, oh, &info));
  CHECK(std::memcmp(&info, &cpu_info, sizeof info) == 0);
  // Device.
  DevBuf<uint8_t> dimg(img);
  DevBuf<float> dout(cpu.size());
  DevScratch scratch(carve_cu_letterbox_scratch_bytes(sw, sh, ow, oh));
  CHECK_OK(carve_cu_letterbox(&t.ctx, dimg.p, sw, sh, stride, &info, ow, oh, dout.p, scratch.get()));
  t.sync();
  const std::vector<float> got = dout.download();
  for (size_t i = 0; i < cpu.size(); i++)
    CHECK_MSG(same_float(got[i], cpu[i]), "letterbox %dx%d -> %dx%d: [%zu] %.9g vs CPU %.9g", sw, sh, ow, oh, i, got[i],
              cpu[i]);
  // As halves (an fp16 package's input, written in place of the float32 copy and its cast).
  DevBuf<__half> dhalf(cpu.size());
  CHECK_OK(carve_cu_letterbox(&t.ctx, dimg.p, sw, sh, stride, &info, ow, oh, dhalf.p, scratch.get()));
  t.sync();
  char what[96];
  std::snprintf(what, sizeof what, "letterbox %dx%d -> %dx%d as halves", sw, sh, ow, oh);
  check_halves(dhalf.download(), cpu, what);
}

static void check_classify(TestCtx& t, TestRng& rng, int w, int h, int out) {
  const size_t stride = (size_t)w * 3 + 3;
  const std::vector<uint8_t> img = random_image(rng, w, h, stride);
  std::vector<float> cpu((size_t)out * out * 3);
  std::vector<uint64_t> cpu_scratch(carve_classify_scratch_bytes(w, h, out) / 8 + 1);
  CHECK_OK(carve_classify_preprocess(img.data(), w, h, stride, out, cpu.data(), cpu_scratch.data(), NULL));
  DevBuf<uint8_t> dimg(img);
  DevBuf<float> dout(cpu.size());
  DevScratch scratch(carve_cu_classify_scratch_bytes(w, h, out));
  CHECK_OK(carve_cu_classify_preprocess(&t.ctx, dimg.p, w, h, stride, out, dout.p, scratch.get()));
  t.sync();
  const std::vector<float> got = dout.download();
  for (size_t i = 0; i < cpu.size(); i++)
    CHECK_MSG(same_float(got[i], cpu[i]), "classify %dx%d -> %d: [%zu] %.9g vs CPU %.9g", w, h, out, i, got[i], cpu[i]);
}

int main() {
  TestCtx t;
  TestRng rng(31);
  const int lb[][4] = {{640, 480, 640, 640}, {1, 1, 320, 320},   {13, 7, 64, 64},     {333, 517, 320, 320},
                       {1000, 30, 320, 320}, {30, 1000, 320, 320}, {320, 320, 320, 320}, {160, 120, 640, 640},
                       {641, 479, 640, 640}, {3, 1000, 96, 128},  {810, 1080, 640, 640}, {17, 23, 33, 65}};
  for (const auto& c : lb) check_letterbox(t, rng, c[0], c[1], c[2], c[3]);
  std::printf("letterbox: %zu sizes bit-identical to carve_letterbox (and as halves to its values rounded)\n",
              sizeof lb / sizeof lb[0]);

  const int cl[][3] = {{640, 480, 224}, {224, 224, 224}, {300, 224, 224}, {224, 300, 224}, {500, 375, 224},
                       {17, 31, 224},   {1, 1, 32},      {1000, 50, 224}, {225, 224, 224}, {33, 1000, 64},
                       {810, 1080, 224}, {7, 5, 3}};
  for (const auto& c : cl) check_classify(t, rng, c[0], c[1], c[2]);
  std::printf("classify: %zu sizes bit-identical to carve_classify_preprocess\n", sizeof cl / sizeof cl[0]);

  // NCHW -> NHWC on the device (the run from a device tensor) against the CPU carve_nchw_to_nhwc, exact.
  {
    const uint32_t c = 3, h = 7, w = 11;
    std::vector<float> x((size_t)c * h * w);
    for (auto& v : x) v = rng.normal();
    std::vector<float> want((size_t)h * w * c);
    carve_nchw_to_nhwc(x.data(), c, h, w, want.data(), c);
    DevBuf<float> dx(x), dy(want.size());
    CHECK_OK(carve_cu_nchw_to_nhwc(&t.ctx, dx.p, c, h, w, dy.p));
    t.sync();
    CHECK(dy.download() == want);
    // A batch of 3 different tensors in one launch, float32 and halves, each image against the CPU.
    const uint32_t batch = 3;
    std::vector<float> xb((size_t)batch * c * h * w), wantb(xb.size());
    for (auto& v : xb) v = rng.normal();
    for (uint32_t b = 0; b < batch; b++)
      carve_nchw_to_nhwc(xb.data() + (size_t)b * c * h * w, c, h, w, wantb.data() + (size_t)b * h * w * c, c);
    DevBuf<float> dxb(xb), dyb(wantb.size());
    DevBuf<__half> dh(wantb.size());
    CHECK_OK(carve_cu_nchw_to_nhwc_batch(&t.ctx, dxb.p, batch, c, h, w, dyb.p));
    CHECK_OK(carve_cu_nchw_to_nhwc_batch(&t.ctx, dxb.p, batch, c, h, w, dh.p));
    t.sync();
    CHECK(dyb.download() == wantb);
    check_halves(dh.download(), wantb, "nchw_to_nhwc batch 3 as halves");
    CHECK(carve_cu_nchw_to_nhwc_batch(&t.ctx, dxb.p, 0, c, h, w, dyb.p) == CARVE_ERR_INVALID_ARGUMENT);
    CHECK(carve_cu_nchw_to_nhwc(&t.ctx, dx.p, 0, h, w, dy.p) == CARVE_ERR_INVALID_ARGUMENT);
    CHECK(carve_cu_nchw_to_nhwc(&t.ctx, nullptr, c, h, w, dy.p) == CARVE_ERR_INVALID_ARGUMENT);
    CHECK(carve_cu_nchw_to_nhwc_batch(&t.ctx, nullptr, batch, c, h, w, dh.p) == CARVE_ERR_INVALID_ARGUMENT);
    std::printf("nchw_to_nhwc: ok (one tensor, a batch of 3, float32 and halves)\n");
  }

  // Refusals: the geometry of another image, bad sizes, short rows.
  {
    DevBuf<uint8_t> dimg(64 * 64 * 3);
    DevBuf<float> dout(32 * 32 * 3);
    DevScratch scratch(carve_cu_letterbox_scratch_bytes(64, 64, 32, 32) + carve_cu_classify_scratch_bytes(64, 64, 32));
    carve_letterbox_info info;
    CHECK_OK(carve_letterbox_geometry(64, 48, 32, 32, &info));
    CHECK(carve_cu_letterbox(&t.ctx, dimg.p, 64, 64, 192, &info, 32, 32, dout.p, scratch.get()) ==
          CARVE_ERR_INVALID_ARGUMENT);
    CHECK(carve_cu_letterbox(&t.ctx, dimg.p, 64, 48, 100, &info, 32, 32, dout.p, scratch.get()) == CARVE_ERR_BAD_IMAGE);
    CHECK(carve_letterbox_geometry(0, 48, 32, 32, &info) == CARVE_ERR_BAD_IMAGE);
    CHECK(carve_letterbox_geometry(64, 48, 0, 32, &info) == CARVE_ERR_INVALID_ARGUMENT);
    CHECK(carve_cu_classify_preprocess(&t.ctx, dimg.p, 64, 64, 100, 32, dout.p, scratch.get()) == CARVE_ERR_BAD_IMAGE);
    CHECK(carve_cu_classify_preprocess(&t.ctx, dimg.p, 64, 64, 192, 0, dout.p, scratch.get()) ==
          CARVE_ERR_INVALID_ARGUMENT);
  }
  std::printf("test_pre: all ok\n");
  return 0;
}
