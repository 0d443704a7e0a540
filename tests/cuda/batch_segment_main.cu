// The batch API of a segment cuda package (its prototypes and masks per image), under the host emulation or on a
// GPU:
//
//   batch_segment_main OUT_DIR TENSOR.npy... IMAGE...   (YOLO26N_SEG_BATCH tensors (1,3,H,W), then as many images)
//
// Built against one package (yolo26n-seg, any --batch N), it writes, for each image b of the batch:
//   OUT_DIR/sync_<b>.npy    the rows of run_tensors (the N tensors stacked)
//   OUT_DIR/protos_<b>.npy  the prototypes of that run, (1, PROTO_H, PROTO_W, NUM_PROTOS)
//   OUT_DIR/masks_<b>.txt   run_images' detections (conf 0: every row) with each one's mask in the image's pixels (batch_mask:
//                           its pixel count and an FNV-1a hash of its bytes)
//   OUT_DIR/nodes.txt       the CUDA Graph nodes (launches) of one forward
// and checks in-process that device_protos equals the host copy (and, after enqueue_tensors, run_tensors' prototypes),
// that run_image (its image in every slot) gives run_images' image 0 and its masks (the single-image _mask), that
// batch_mask and _mask are refused after run_tensors and after an enqueued run, and for bad arguments. tests/cuda/cuda_batch.py compares the files of a --batch 2 package with those of the --batch 1
// package run on each input alone.

#include "yolo26n_seg.h"

#include "batch_io.h"

static const int kBatch = YOLO26N_SEG_BATCH;
static const size_t kProtoFloats = (size_t)YOLO26N_SEG_PROTO_H * YOLO26N_SEG_PROTO_W * YOLO26N_SEG_NUM_PROTOS;
static const float kConf = 0.0f;  // every row: both images get masks (random weights score low)

// One detection and its mask: class, score, box, the mask's pixel count and FNV-1a hash.
static std::string mask_line(const yolo26n_seg_detection& d, const std::vector<uint8_t>& mask) {
  uint64_t h = 1469598103934665603ull;
  size_t on = 0;
  for (uint8_t v : mask) {
    h = (h ^ v) * 1099511628211ull;
    on += v != 0;
  }
  char line[200];
  std::snprintf(line, sizeof line, "%d %.6f %.3f %.3f %.3f %.3f %zu %016llx\n", d.class_id, d.score, d.x1, d.y1, d.x2,
                d.y2, on, (unsigned long long)h);
  return line;
}

int main(int argc, char** argv) {
  std::string out;
  std::vector<float> tensors;
  std::vector<uint8_t*> rgb;
  std::vector<yolo26n_seg_image> images;
  if (load_batch_inputs(argc, argv, kBatch, YOLO26N_SEG_INPUT_H, YOLO26N_SEG_INPUT_W, &out, &tensors, &rgb,
                        &images) != 0) {
    return 2;
  }
  yolo26n_seg* m = nullptr;
  if (yolo26n_seg_create(nullptr, &m) != CARVE_OK) {
    std::fprintf(stderr, "create failed\n");
    return 1;
  }
  const size_t max_dets = YOLO26N_SEG_MAX_DETECTIONS;
  std::vector<yolo26n_seg_detection> dets(max_dets * kBatch), one(max_dets);
  std::vector<size_t> n(kBatch);

  // run_tensors: each image's rows and prototypes; the device prototypes are the host copy.
  CHECK(yolo26n_seg_run_tensors(m, tensors.data(), kConf, dets.data(), max_dets, n.data()) == CARVE_OK);
  for (int b = 0; b < kBatch; b++) {
    size_t count = 0;  // every row, or (--head nms) the rows its NMS kept
    const float* rows = yolo26n_seg_batch_rows(m, b, &count);
    const float* protos = yolo26n_seg_batch_protos(m, b);
    const size_t rshape[3] = {1, count, (size_t)YOLO26N_SEG_ROW_LEN};
    const size_t pshape[4] = {1, YOLO26N_SEG_PROTO_H, YOLO26N_SEG_PROTO_W, YOLO26N_SEG_NUM_PROTOS};
    CHECK(rows != nullptr && carve_npy_write_f32((out + "/sync_" + std::to_string(b) + ".npy").c_str(), rows, rshape,
                                                 3) == CARVE_OK);
    CHECK(protos != nullptr && carve_npy_write_f32((out + "/protos_" + std::to_string(b) + ".npy").c_str(), protos,
                                                   pshape, 4) == CARVE_OK);
    CHECK(device_equals_pinned(yolo26n_seg_device_protos(m, b), protos, kProtoFloats));  // (a host copy here)
  }
  const std::vector<float> tensor_protos(yolo26n_seg_batch_protos(m, 0), yolo26n_seg_batch_protos(m, 0) +
                                                                           kProtoFloats * kBatch);

  // run_images: every detection's mask in its image's pixels.
  CHECK(yolo26n_seg_run_images(m, images.data(), kConf, dets.data(), max_dets, n.data()) == CARVE_OK);
  std::vector<std::string> text(kBatch);
  for (int b = 0; b < kBatch; b++) {
    const size_t bytes = yolo26n_seg_batch_mask_scratch_bytes(m, b);
    CHECK(bytes > 0);
    std::vector<uint8_t> scratch(bytes + 16), mask((size_t)images[b].width * images[b].height);
    for (size_t i = 0; i < n[b]; i++) {
      const yolo26n_seg_detection& d = dets[b * max_dets + i];
      CHECK(yolo26n_seg_batch_mask(m, b, &d, mask.data(), scratch.data(), bytes) == CARVE_OK);
      text[b] += mask_line(d, mask);
    }
    write_text(out + "/masks_" + std::to_string(b) + ".txt", text[b]);
    CHECK(yolo26n_seg_batch_mask(m, b, &dets[b * max_dets], mask.data(), scratch.data(), bytes - 1) ==
          CARVE_ERR_INVALID_ARGUMENT || n[b] == 0);
  }
  CHECK(yolo26n_seg_batch_mask_scratch_bytes(m, kBatch) == 0 && yolo26n_seg_batch_protos(m, -1) == nullptr);
  {  // bad arguments
    const size_t bytes = yolo26n_seg_batch_mask_scratch_bytes(m, 0);
    std::vector<uint8_t> scratch(bytes), mask((size_t)images[0].width * images[0].height);
    yolo26n_seg_detection bad = dets[0];
    size_t count = 0;
    CHECK(yolo26n_seg_batch_rows(m, 0, &count) != nullptr);
    bad.row = (int)count;  // past image 0's rows (--head nms: its NMS's count)
    CHECK(yolo26n_seg_batch_mask(m, 0, &bad, mask.data(), scratch.data(), bytes) == CARVE_ERR_INVALID_ARGUMENT);
    CHECK(yolo26n_seg_batch_mask(m, kBatch, &dets[0], mask.data(), scratch.data(), bytes) ==
          CARVE_ERR_INVALID_ARGUMENT);
    CHECK(yolo26n_seg_batch_mask(m, 0, nullptr, mask.data(), scratch.data(), bytes) == CARVE_ERR_INVALID_ARGUMENT);
    CHECK(yolo26n_seg_batch_mask(m, 0, &dets[0], nullptr, scratch.data(), bytes) == CARVE_ERR_INVALID_ARGUMENT);
  }
  // after run_images: run_tensors, then an enqueued run, each leave no image to map the masks back to (both mask
  // functions refuse); the enqueued run's device prototypes are run_tensors' (the same tensors)
  CHECK(yolo26n_seg_run_tensors(m, tensors.data(), kConf, dets.data(), max_dets, n.data()) == CARVE_OK);
  CHECK(yolo26n_seg_batch_mask_scratch_bytes(m, 0) == 0 && yolo26n_seg_mask_scratch_bytes(m) == 0);
  CHECK(yolo26n_seg_run_images(m, images.data(), kConf, dets.data(), max_dets, n.data()) == CARVE_OK);
  CHECK(yolo26n_seg_batch_mask_scratch_bytes(m, 0) > 0);
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  float* dt = device_tensors(tensors);
  CHECK(yolo26n_seg_enqueue_tensors(m, stream, dt, 0) == CARVE_OK);
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(yolo26n_seg_batch_mask_scratch_bytes(m, 0) == 0);
  for (int b = 0; b < kBatch; b++) {
    CHECK(device_equals_pinned(yolo26n_seg_device_protos(m, b), tensor_protos.data() + b * kProtoFloats,
                               kProtoFloats));
  }
  cudaFree(dt);
  cudaStreamDestroy(stream);
  CHECK(yolo26n_seg_run_images(m, images.data(), kConf, dets.data(), max_dets, n.data()) == CARVE_OK);
  CHECK(yolo26n_seg_mask_scratch_bytes(m) == 0);  // _mask is run_image's: run_images maps through _batch_mask

  // run_image of a batch package: its one image in every slot; image 0's detections and masks are run_images'.
  size_t k = 0;
  CHECK(yolo26n_seg_run_image(m, rgb[0], images[0].width, images[0].height, images[0].stride_bytes, kConf, one.data(),
                              max_dets, &k) == CARVE_OK);
  std::string single;
  const size_t bytes = yolo26n_seg_mask_scratch_bytes(m);
  std::vector<uint8_t> scratch(bytes + 16), mask((size_t)images[0].width * images[0].height);
  for (size_t i = 0; i < k; i++) {
    CHECK(yolo26n_seg_mask(m, &one[i], mask.data(), scratch.data(), bytes) == CARVE_OK);
    single += mask_line(one[i], mask);
  }
  CHECK(k == n[0] && single == text[0]);
  CHECK(yolo26n_seg_batch_mask_scratch_bytes(m, 0) == 0);  // run_image is not a run_images

  write_nodes(out, yolo26n_seg_graph_nodes(m));
  yolo26n_seg_destroy(m);
  for (int b = 0; b < kBatch; b++) {
    carve_image_free(rgb[b]);
  }
  std::printf("batch_segment_main (batch %d): %zu + %zu masks: %s\n", kBatch, n[0], kBatch > 1 ? n[1] : 0,
              g_failed ? "FAIL" : "ok");
  return g_failed;
}
