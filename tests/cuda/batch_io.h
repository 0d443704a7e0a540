// What the batch API's test programs (batch_main.cu: detect, batch_classify_main.cu: classify) share: the failure
// flag and CHECK, the command line's inputs (BATCH NCHW tensors, then BATCH images), their device copies, and the
// graph node count's file. Image is the package's <name>_image (rgb, width, height, stride_bytes).

#ifndef CARVE_TESTS_BATCH_IO_H
#define CARVE_TESTS_BATCH_IO_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "carve_io.h"

static int g_failed = 0;

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      g_failed = 1;                                                        \
    }                                                                      \
  } while (0)

// The command line OUT_DIR TENSOR.npy x batch IMAGE x batch: the output folder into out, the `batch` float32
// (1, 3, h, w) tensors stacked into tensors, the images decoded into rgb (freed with carve_image_free) and described
// by images. 0, or 2 with a message.
template <typename Image>
static int load_batch_inputs(int argc, char** argv, int batch, int h, int w, std::string* out,
                             std::vector<float>* tensors, std::vector<uint8_t*>* rgb, std::vector<Image>* images) {
  if (argc != 2 + 2 * batch) {
    std::fprintf(stderr, "usage: %s OUT_DIR TENSOR.npy x%d IMAGE x%d\n", argv[0], batch, batch);
    return 2;
  }
  *out = argv[1];
  const size_t input = (size_t)3 * h * w;
  tensors->assign(input * batch, 0.0f);
  for (int b = 0; b < batch; b++) {
    float* t = nullptr;
    size_t shape[8];
    int ndim = 0;
    if (carve_npy_read_f32(argv[2 + b], &t, shape, &ndim) != CARVE_OK || ndim != 4 ||
        shape[0] * shape[1] * shape[2] * shape[3] != input) {
      std::fprintf(stderr, "%s: expected a float32 (1,3,%d,%d) array\n", argv[2 + b], h, w);
      std::free(t);
      return 2;
    }
    std::memcpy(tensors->data() + b * input, t, input * sizeof(float));
    std::free(t);
  }
  rgb->assign(batch, nullptr);
  images->assign(batch, Image{});
  for (int b = 0; b < batch; b++) {
    char why[256];
    Image& im = (*images)[b];
    if (carve_image_load_rgb_msg(argv[2 + batch + b], &(*rgb)[b], &im.width, &im.height, why, sizeof why) !=
        CARVE_OK) {
      std::fprintf(stderr, "%s: %s\n", argv[2 + batch + b], why);
      return 2;
    }
    im.rgb = (*rgb)[b];
    im.stride_bytes = (size_t)im.width * 3;
  }
  return 0;
}

// Device copies of the images (their buffers in drgb, for cudaFree), described as images on the device.
template <typename Image>
static std::vector<Image> device_images(const std::vector<uint8_t*>& rgb, const std::vector<Image>& images,
                                        std::vector<uint8_t*>* drgb) {
  std::vector<Image> out = images;
  drgb->assign(images.size(), nullptr);
  for (size_t b = 0; b < images.size(); b++) {
    const size_t bytes = (size_t)images[b].height * images[b].stride_bytes;
    CHECK(cudaMalloc((void**)&(*drgb)[b], bytes) == cudaSuccess);
    CHECK(cudaMemcpy((*drgb)[b], rgb[b], bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    out[b].rgb = (*drgb)[b];
  }
  return out;
}

// A device copy of the stacked tensors (cudaFree it).
static inline float* device_tensors(const std::vector<float>& tensors) {
  float* dt = nullptr;
  CHECK(cudaMalloc((void**)&dt, tensors.size() * sizeof(float)) == cudaSuccess);
  CHECK(cudaMemcpy(dt, tensors.data(), tensors.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  return dt;
}

// Whether `floats` results on the device equal their pinned host copy bit for bit.
static inline bool device_equals_pinned(const float* device, const float* pinned, size_t floats) {
  std::vector<float> copy(floats);
  return pinned != nullptr && device != nullptr &&
         cudaMemcpy(copy.data(), device, floats * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess &&
         std::memcmp(copy.data(), pinned, floats * sizeof(float)) == 0;
}

// OUT_DIR/nodes.txt: the graph nodes per forward (at least one).
static inline void write_nodes(const std::string& out, size_t nodes) {
  CHECK(nodes > 0);
  FILE* f = std::fopen((out + "/nodes.txt").c_str(), "w");
  CHECK(f != nullptr);
  if (f != nullptr) {
    std::fprintf(f, "%zu\n", nodes);
    std::fclose(f);
  }
}

// Writes text to path.
static inline void write_text(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  CHECK(f != nullptr);
  if (f != nullptr) {
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
}

#endif  // CARVE_TESTS_BATCH_IO_H
