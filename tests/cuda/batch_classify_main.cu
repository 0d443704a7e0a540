// The batch and asynchronous API of a classify cuda package, under the host emulation or on a GPU:
//
//   batch_classify_main OUT_DIR TENSOR.npy... IMAGE...   (YOLO26N_CLS_BATCH tensors (1,3,H,W), then as many images)
//
// Built against one package (yolo26n-cls, any --batch N), it writes, for each image b of the batch:
//   OUT_DIR/sync_<b>.npy   the probabilities of run_tensors (the N tensors stacked), (1, NUM_CLASSES)
//   OUT_DIR/async_<b>.npy  the probabilities of enqueue_tensors from a device copy of the same tensors, on a stream
//                          of this program's, read from the pinned results after a cudaStreamSynchronize (three runs:
//                          the eager one, the capture, a graph replay)
//   OUT_DIR/top_<b>.txt    the top 5 classes of run_images on the N images (class, probability)
//   OUT_DIR/nodes.txt      the CUDA Graph nodes (launches) of one forward: <name>_graph_nodes
// and checks in-process that device_probs equals the pinned probabilities, that enqueue_images from device copies
// of the images gives run_images' classes exactly (pinned_top), that run_image (its image in every slot) gives
// run_images' image 0, and that bad arguments are refused. tests/cuda/cuda_batch.py compares the files of a
// --batch 2 package with those of the --batch 1 package run on each input alone.

#include "yolo26n_cls.h"

#include "batch_io.h"

static const int kBatch = YOLO26N_CLS_BATCH;
static const size_t kClasses = YOLO26N_CLS_NUM_CLASSES;
static const size_t kTop = 5;

static bool write_probs(const std::string& path, const float* probs) {
  const size_t shape[2] = {1, kClasses};
  return carve_npy_write_f32(path.c_str(), probs, shape, 2) == CARVE_OK;
}

static std::string top_text(const yolo26n_cls_class* t, size_t n) {
  std::string s;
  char line[64];
  for (size_t i = 0; i < n; i++) {
    std::snprintf(line, sizeof line, "%d %.9g\n", t[i].class_id, t[i].prob);
    s += line;
  }
  return s;
}

int main(int argc, char** argv) {
  std::string out;
  std::vector<float> tensors;
  std::vector<uint8_t*> rgb;
  std::vector<yolo26n_cls_image> images;
  if (load_batch_inputs(argc, argv, kBatch, YOLO26N_CLS_INPUT_H, YOLO26N_CLS_INPUT_W, &out, &tensors, &rgb, &images) != 0) {
    return 2;
  }

  yolo26n_cls* m = nullptr;
  if (yolo26n_cls_create(nullptr, &m) != CARVE_OK) {
    std::fprintf(stderr, "create failed\n");
    return 1;
  }
  std::vector<yolo26n_cls_class> top(kTop * kBatch), top2(kTop * kBatch);

  // Synchronous runs: run_tensors (probabilities), run_images (classes).
  CHECK(yolo26n_cls_run_tensors(m, tensors.data(), top.data(), kTop) == CARVE_OK);
  for (int b = 0; b < kBatch; b++) {
    const float* p = yolo26n_cls_batch_probs(m, b);
    CHECK(p != nullptr && write_probs(out + "/sync_" + std::to_string(b) + ".npy", p));
  }
  CHECK(yolo26n_cls_batch_probs(m, kBatch) == nullptr && yolo26n_cls_batch_probs(m, -1) == nullptr);
  CHECK(yolo26n_cls_run_images(m, images.data(), top.data(), kTop) == CARVE_OK);
  for (int b = 0; b < kBatch; b++) {
    write_text(out + "/top_" + std::to_string(b) + ".txt", top_text(top.data() + b * kTop, kTop));
  }

  // Asynchronous runs on a stream of ours, from device copies of the inputs.
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  float* dt = device_tensors(tensors);
  for (int run = 0; run < 3; run++) {  // eager, capture, replay
    CHECK(yolo26n_cls_enqueue_tensors(m, stream, dt, 1) == CARVE_OK);
  }
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  for (int b = 0; b < kBatch; b++) {
    const float* pinned = yolo26n_cls_pinned_probs(m, b);
    CHECK(pinned != nullptr && write_probs(out + "/async_" + std::to_string(b) + ".npy", pinned));
    CHECK(device_equals_pinned(yolo26n_cls_device_probs(m, b), pinned, kClasses));
  }

  // enqueue_images from device images: the classes of run_images, exactly.
  std::vector<uint8_t*> drgb;
  std::vector<yolo26n_cls_image> dimages = device_images(rgb, images, &drgb);
  CHECK(yolo26n_cls_enqueue_images(m, stream, dimages.data(), 1) == CARVE_OK);
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(yolo26n_cls_pinned_top(m, top2.data(), kTop) == CARVE_OK);
  CHECK(top_text(top2.data(), kTop * kBatch) == top_text(top.data(), kTop * kBatch));
  // run_image of a batch package: its one image in every slot; image 0's classes are run_images' for it.
  CHECK(yolo26n_cls_run_image(m, rgb[0], images[0].width, images[0].height, images[0].stride_bytes, top2.data(), kTop,
                              nullptr, 0) == CARVE_OK);
  CHECK(top_text(top2.data(), kTop) == top_text(top.data(), kTop));
  size_t staging_bytes = 0;
  CHECK(yolo26n_cls_staging_image(m, &staging_bytes) != nullptr &&
        staging_bytes >= (size_t)YOLO26N_CLS_MAX_IMAGE_W * YOLO26N_CLS_MAX_IMAGE_H * 3);

  // Refusals.
  CHECK(yolo26n_cls_enqueue_tensors(m, nullptr, dt, 0) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(yolo26n_cls_enqueue_tensors(m, stream, nullptr, 0) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(yolo26n_cls_enqueue_images(m, stream, nullptr, 0) == CARVE_ERR_INVALID_ARGUMENT);
  dimages[0].stride_bytes = 1;
  CHECK(yolo26n_cls_enqueue_images(m, stream, dimages.data(), 0) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(yolo26n_cls_device_probs(m, -1) == nullptr && yolo26n_cls_device_probs(m, kBatch) == nullptr);
  CHECK(yolo26n_cls_pinned_probs(m, kBatch) == nullptr);
  CHECK(yolo26n_cls_run_images(m, nullptr, top.data(), kTop) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(yolo26n_cls_run_images(m, images.data(), top.data(), YOLO26N_CLS_TOPK + 1) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(yolo26n_cls_pinned_top(nullptr, top.data(), kTop) == CARVE_ERR_INVALID_ARGUMENT);

  // Launches per forward.
  const size_t nodes = yolo26n_cls_graph_nodes(m);
  write_nodes(out, nodes);
  yolo26n_cls_destroy(m);
  for (int b = 0; b < kBatch; b++) {
    cudaFree(drgb[b]);
    carve_image_free(rgb[b]);
  }
  cudaFree(dt);
  cudaStreamDestroy(stream);
  std::printf("batch_classify_main (batch %d): %zu graph nodes per forward: %s\n", kBatch, nodes,
              g_failed ? "FAIL" : "ok");
  return g_failed;
}
