// The batch and asynchronous API of a cuda package (detect, either head), under the host emulation or on a GPU:
//
//   batch_main OUT_DIR TENSOR.npy... IMAGE...     (YOLO26N_BATCH tensors (1,3,H,W), then YOLO26N_BATCH images)
//
// Built against one package (yolo26n, any --batch N), it writes, for each image b of the batch:
//   OUT_DIR/sync_<b>.npy   the rows of run_tensors (the N tensors stacked; --head nms: the rows its NMS kept)
//   OUT_DIR/async_<b>.npy  the rows of enqueue_tensors from a device copy of the same tensors, on a stream of
//                          this program's, read from the pinned results after a cudaStreamSynchronize (three
//                          runs: the eager one, the capture, a graph replay)
//   OUT_DIR/dets_<b>.txt   the detections of run_images on the N images (class, score, box; conf 0: every row)
//   OUT_DIR/fused_<b>.npy  the rows of run_tensors with options.fused_conv (carve's implicit-GEMM convolutions)
//   OUT_DIR/nodes.txt      the CUDA Graph nodes (launches) of one forward: <name>_graph_nodes
// and checks in-process that device_rows equals the pinned rows, that enqueue_images from device copies of the
// images gives run_images' detections exactly, that run_image (its image in every slot) gives run_images' image 0,
// that bad arguments are refused and the device scratch's size is the header's. --head nms (YOLO26N_HEAD_NMS): every
// run at conf 0 (options.enqueue_conf too), the device and pinned row counts equal, and a context whose
// enqueue_conf is a middle score keeps what run_tensors at that conf keeps. tests/cuda/cuda_batch.py compares the
// files of a --batch 2 package with those of the --batch 1 package run on each input alone.

#include "yolo26n.h"

#include "batch_io.h"

static const int kBatch = YOLO26N_BATCH;

static bool write_rows(const std::string& path, const float* rows, size_t count) {
  const size_t shape[3] = {1, count, (size_t)YOLO26N_ROW_LEN};
  return carve_npy_write_f32(path.c_str(), rows, shape, 3) == CARVE_OK;
}

// The options of every context here: --head nms runs its enqueued NMS at conf 0, as the synchronous runs below.
static yolo26n_options test_options() {
  yolo26n_options opt;
  yolo26n_default_options(&opt);
#if YOLO26N_HEAD_NMS
  opt.enqueue_conf = 0.0f;
#endif
  return opt;
}

// The rows of image b in the pinned results: the NMS's count, or every row.
static size_t pinned_count(const yolo26n* m, int b) {
#if YOLO26N_HEAD_NMS
  const uint32_t* counts = yolo26n_pinned_row_counts(m);
  return counts != nullptr ? counts[b] : 0;
#else
  (void)m;
  (void)b;
  return (size_t)YOLO26N_ROWS_PER_IMAGE;
#endif
}

static std::string dets_text(const yolo26n_detection* d, size_t n) {
  std::string s;
  char line[160];
  for (size_t i = 0; i < n; i++) {
    std::snprintf(line, sizeof line, "%d %.6f %.3f %.3f %.3f %.3f\n", d[i].class_id, d[i].score, d[i].x1, d[i].y1,
                  d[i].x2, d[i].y2);
    s += line;
  }
  return s;
}

int main(int argc, char** argv) {
  std::string out;
  std::vector<float> tensors;
  std::vector<uint8_t*> rgb;
  std::vector<yolo26n_image> images;
  if (load_batch_inputs(argc, argv, kBatch, YOLO26N_INPUT_H, YOLO26N_INPUT_W, &out, &tensors, &rgb, &images) != 0) {
    return 2;
  }

  yolo26n* m = nullptr;
  yolo26n_options opt = test_options();
  if (yolo26n_create(&opt, &m) != CARVE_OK) {
    std::fprintf(stderr, "create failed\n");
    return 1;
  }
  const size_t max_dets = YOLO26N_MAX_DETECTIONS;
  std::vector<yolo26n_detection> dets(max_dets * kBatch), dets2(max_dets * kBatch);
  std::vector<size_t> n(kBatch), n2(kBatch);

  // Synchronous runs: run_tensors (rows), run_images (detections).
  CHECK(yolo26n_run_tensors(m, tensors.data(), 0.0f, dets.data(), max_dets, n.data()) == CARVE_OK);
  for (int b = 0; b < kBatch; b++) {
    size_t rows = 0;
    const float* r = yolo26n_batch_rows(m, b, &rows);
    CHECK(r != nullptr && (YOLO26N_HEAD_NMS ? rows > 0 && rows <= YOLO26N_ROWS_PER_IMAGE
                                            : rows == (size_t)YOLO26N_ROWS_PER_IMAGE));
    CHECK(r != nullptr && write_rows(out + "/sync_" + std::to_string(b) + ".npy", r, rows));
  }
  CHECK(yolo26n_batch_rows(m, kBatch, nullptr) == nullptr);
  CHECK(yolo26n_run_images(m, images.data(), 0.0f, dets.data(), max_dets, n.data()) == CARVE_OK);
  for (int b = 0; b < kBatch; b++) {
    write_text(out + "/dets_" + std::to_string(b) + ".txt", dets_text(dets.data() + b * max_dets, n[b]));
  }

  // Asynchronous runs on a stream of ours, from device copies of the inputs.
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  float* dt = device_tensors(tensors);
  for (int run = 0; run < 3; run++) {  // eager, capture, replay
    CHECK(yolo26n_enqueue_tensors(m, stream, dt, 1) == CARVE_OK);
  }
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  for (int b = 0; b < kBatch; b++) {
    const float* pinned = yolo26n_pinned_rows(m, b);
    const size_t count = pinned_count(m, b);
    CHECK(pinned != nullptr && write_rows(out + "/async_" + std::to_string(b) + ".npy", pinned, count));
    CHECK(device_equals_pinned(yolo26n_device_rows(m, b), pinned, count * YOLO26N_ROW_LEN));
  }
#if YOLO26N_HEAD_NMS
  {
    std::vector<uint32_t> counts(kBatch);
    CHECK(cudaMemcpy(counts.data(), yolo26n_device_row_counts(m), kBatch * sizeof(uint32_t),
                     cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(std::memcmp(counts.data(), yolo26n_pinned_row_counts(m), kBatch * sizeof(uint32_t)) == 0);
  }
#endif

  // enqueue_images from device images: the detections of run_images, exactly.
  std::vector<uint8_t*> drgb;
  std::vector<yolo26n_image> dimages = device_images(rgb, images, &drgb);
  CHECK(yolo26n_enqueue_images(m, stream, dimages.data(), 1) == CARVE_OK);
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(yolo26n_pinned_detections(m, 0.0f, dets2.data(), max_dets, n2.data()) == CARVE_OK);
  for (int b = 0; b < kBatch; b++) {
    CHECK(n2[b] == n[b]);
    CHECK(dets_text(dets2.data() + b * max_dets, n2[b]) == dets_text(dets.data() + b * max_dets, n[b]));
  }
  // run_image of a batch package: its one image in every slot; image 0's detections are run_images' for it.
  size_t one = 0;
  CHECK(yolo26n_run_image(m, rgb[0], images[0].width, images[0].height, images[0].stride_bytes, 0.0f, dets2.data(),
                          max_dets, &one) == CARVE_OK);
  CHECK(one == n[0] && dets_text(dets2.data(), one) == dets_text(dets.data(), n[0]));
  size_t staging_bytes = 0;
  CHECK(yolo26n_staging_image(m, &staging_bytes) != nullptr &&
        staging_bytes >= (size_t)YOLO26N_MAX_IMAGE_W * YOLO26N_MAX_IMAGE_H * 3);

  // Refusals.
  CHECK(yolo26n_enqueue_tensors(m, nullptr, dt, 0) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(yolo26n_enqueue_tensors(m, stream, nullptr, 0) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(yolo26n_enqueue_images(m, stream, nullptr, 0) == CARVE_ERR_INVALID_ARGUMENT);
  dimages[0].stride_bytes = 1;
  CHECK(yolo26n_enqueue_images(m, stream, dimages.data(), 0) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(yolo26n_device_rows(m, -1) == nullptr && yolo26n_device_rows(m, kBatch) == nullptr);
  CHECK(yolo26n_pinned_rows(m, kBatch) == nullptr);
  CHECK(yolo26n_run_images(m, nullptr, 0.25f, dets.data(), max_dets, n.data()) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(yolo26n_pinned_detections(nullptr, 0.25f, dets.data(), max_dets, n.data()) == CARVE_ERR_INVALID_ARGUMENT);
  CHECK(yolo26n_device_scratch_bytes(YOLO26N_MAX_IMAGE_W, YOLO26N_MAX_IMAGE_H) == YOLO26N_DEVICE_SCRATCH_BYTES);
#if YOLO26N_HEAD_NMS
  CHECK(yolo26n_device_row_counts(nullptr) == nullptr && yolo26n_pinned_row_counts(nullptr) == nullptr);
  {  // the enqueued NMS at options.enqueue_conf: a middle score of image 0 keeps what run_tensors at it keeps
    size_t rows = 0;
    CHECK(yolo26n_run_tensors(m, tensors.data(), 0.0f, dets.data(), max_dets, n.data()) == CARVE_OK);
    const float* r = yolo26n_batch_rows(m, 0, &rows);
    yolo26n_options mid = test_options();
    mid.enqueue_conf = r != nullptr && rows > 0 ? r[(rows / 2) * YOLO26N_ROW_LEN + 4] : 0.5f;
    yolo26n* m2 = nullptr;
    CHECK(yolo26n_create(&mid, &m2) == CARVE_OK);
    CHECK(yolo26n_run_tensors(m2, tensors.data(), 0.0f, dets.data(), max_dets, n.data()) == CARVE_OK);
    for (int run = 0; run < 3; run++) {  // capture, replays, after a synchronous run at another conf
      CHECK(yolo26n_enqueue_tensors(m2, stream, dt, 1) == CARVE_OK);
    }
    CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
    std::vector<float> pinned(YOLO26N_BATCH * YOLO26N_ROWS_PER_IMAGE * YOLO26N_ROW_LEN);
    std::vector<size_t> pinned_n(kBatch);
    for (int b = 0; b < kBatch; b++) {
      pinned_n[b] = pinned_count(m2, b);
      std::memcpy(&pinned[b * YOLO26N_ROWS_PER_IMAGE * YOLO26N_ROW_LEN], yolo26n_pinned_rows(m2, b),
                  pinned_n[b] * YOLO26N_ROW_LEN * sizeof(float));
    }
    CHECK(yolo26n_run_tensors(m2, tensors.data(), mid.enqueue_conf, dets.data(), max_dets, n.data()) == CARVE_OK);
    for (int b = 0; b < kBatch; b++) {
      size_t want = 0;
      const float* sync = yolo26n_batch_rows(m2, b, &want);
      CHECK(sync != nullptr && pinned_n[b] == want && (b != 0 || (want > 0 && want < rows)));
      CHECK(sync != nullptr && std::memcmp(sync, &pinned[b * YOLO26N_ROWS_PER_IMAGE * YOLO26N_ROW_LEN],
                                           want * YOLO26N_ROW_LEN * sizeof(float)) == 0);
    }
    std::printf("enqueue_conf %.4f: %zu of image 0's %zu rows at conf 0 kept\n", mid.enqueue_conf,
                pinned_count(m2, 0), rows);
    yolo26n_destroy(m2);
    mid.enqueue_conf = NAN;
    CHECK(yolo26n_create(&mid, &m2) == CARVE_ERR_INVALID_ARGUMENT && m2 == nullptr);
  }
#endif

  // Launches per forward, and the fused convolutions' rows.
  const size_t nodes = yolo26n_graph_nodes(m);
  write_nodes(out, nodes);
  yolo26n_destroy(m);
  opt.fused_conv = 1;
  CHECK(yolo26n_create(&opt, &m) == CARVE_OK);
  CHECK(yolo26n_run_tensors(m, tensors.data(), 0.0f, dets.data(), max_dets, n.data()) == CARVE_OK);
  for (int b = 0; b < kBatch; b++) {
    size_t rows = 0;
    const float* r = yolo26n_batch_rows(m, b, &rows);
    CHECK(r != nullptr && write_rows(out + "/fused_" + std::to_string(b) + ".npy", r, rows));
  }
  yolo26n_destroy(m);
  for (int b = 0; b < kBatch; b++) {
    cudaFree(drgb[b]);
    carve_image_free(rgb[b]);
  }
  cudaFree(dt);
  cudaStreamDestroy(stream);
  std::printf("batch_main (batch %d): %zu graph nodes per forward: %s\n", kBatch, nodes, g_failed ? "FAIL" : "ok");
  return g_failed;
}
