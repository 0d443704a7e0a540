// carve runtime, CUDA: the one-to-many head + non-maximum suppression of --head nms on
// the device (carve_cuda_nms.cu), the semantics of the CPU runtime's carve_nms.h. The
// contract of carve_cuda.h holds: device pointers unless said, work enqueued on
// ctx->stream only (no allocation, no host copy, no synchronisation), so it can be
// captured into a CUDA Graph; the run's confidence threshold is therefore read from
// device memory (`conf`), which the caller writes before the forward.

#ifndef CARVE_CUDA_NMS_H
#define CARVE_CUDA_NMS_H

#include "carve_cuda.h"
#include "carve_nms.h"  // CARVE_NMS_MAX_NMS, CARVE_NMS_MAX_WH

#ifdef __cplusplus
extern "C" {
#endif

// What a generated cuda package keeps at the end of its device scratch, where no other call of
// the forward reaches: the run's conf (a float) and each image's rows' count (a uint32) of the NMS,
// in a multiple of these bytes (one for up to 63 images).
#define CARVE_CU_NMS_PARAM_BYTES 256

// *conf = value on the device, enqueued on ctx->stream (one thread of one block; the value travels as the
// kernel's argument, so no host memory is read later and the call never waits for the stream, which a copy
// from pageable memory may). CARVE_ERR_INVALID_ARGUMENT for NULL.
carve_status carve_cu_nms_set_conf(const carve_cu_ctx* ctx, float* conf, float value);

// Bytes of scratch carve_cu_nms_postprocess needs (8-byte aligned), for `anchors` = sum of
// h*w over the levels and the rows' max_det; SIZE_MAX when too large.
size_t carve_cu_nms_scratch_bytes(size_t anchors, size_t max_det);
// The same for carve_cu_nms_postprocess_batch's `batch` images (every image's scores, order, boxes,
// kept anchors and candidate count, and carve_cu_topk_numbers_batch's scratch for them); SIZE_MAX for
// batch 0 or when too large.
size_t carve_cu_nms_batch_scratch_bytes(size_t anchors, size_t max_det, size_t batch);

// carve_nms_postprocess on the device, in four steps, each indexing what it reads
// (gather-style: no index_put or scatter, every thread writes its own slot):
//   1. scores (one thread per anchor): the best class score, or NaN when the anchor is
//      not a candidate (score <= *conf, or every logit NaN);
//   2. order: carve_cu_topk_numbers_batch's radix select + sort of the candidates' scores,
//      at most CARVE_NMS_MAX_NMS anchors best first, ties to the lower anchor, and their
//      count (one launch, one block an image);
//   3. suppression (one block an image): the candidates in that order, 256 at a time: each
//      thread decodes one and compares it with the boxes kept before the chunk and the
//      chunk's better candidates (detect, segment, pose: torchvision's greedy NMS, float IoU
//      of the class-offset boxes compared in double) or with every earlier candidate (obb:
//      fast NMS with batch_probiou, compared in float); one thread then walks the chunk in
//      order and puts each kept one's anchor in the kept list; stops at max_det kept;
//   4. rows (one thread per row r < max_det): row r decoded from the r-th kept anchor,
//      as carve_nms_postprocess writes it (rows from *num_rows on are not written).
// conf: device, one float (the run's threshold); num_rows: device, one uint32 (the rows
// written). iou in [0, 1]; rows: min(max_det, anchors) rows of 6 + extra_channels floats.
// Products are rounded one by one (__fmul_rn: no FMA contraction), so the rows equal the
// CPU's bit for bit where expf / cosf / sinf / logf / sqrtf do (the emulation's C
// library: always; a GPU's: to their ulp error). CARVE_ERR_INVALID_ARGUMENT for NULL
// pointers, nc == 0, no level or more than 8, a scratch not 8-byte aligned, iou outside
// [0, 1], an unknown task or extras that do not fit it (carve_nms.h), more than 2^31 - 1
// anchors; nothing is enqueued then. max_det == 0 or no anchors: *num_rows = 0 (a memset).
carve_status carve_cu_nms_postprocess(const carve_cu_ctx* ctx, const carve_level* levels, size_t num_levels,
                                      size_t nc, size_t extra_channels, carve_e2e_task task, const float* conf,
                                      double iou, int agnostic, size_t max_det, void* scratch, float* rows,
                                      uint32_t* num_rows);

// The same for `batch` (>= 1) images in one call: each step runs once for the batch (the scores over every
// image's anchors, the order one block per image, the suppression one block per image, the rows over every
// image's), each image with its own scores, order and kept list, so image b's rows and count are those
// carve_cu_nms_postprocess gives on its maps alone, bit for bit. Image b's maps follow image 0's in each view
// (level l's box, class and extra maps of image b start b h w box_stride, b h w cls_stride and b h w
// extra_stride values after `levels`' pointers); its min(max_det, anchors, CARVE_NMS_MAX_NMS) rows follow
// image b - 1's in `rows`, its count is num_rows[b]. One conf for the batch. Scratch:
// carve_cu_nms_batch_scratch_bytes. batch 0 is CARVE_ERR_INVALID_ARGUMENT.
carve_status carve_cu_nms_postprocess_batch(const carve_cu_ctx* ctx, const carve_level* levels, size_t num_levels,
                                            size_t nc, size_t extra_channels, carve_e2e_task task, const float* conf,
                                            double iou, int agnostic, size_t max_det, size_t batch, void* scratch,
                                            float* rows, uint32_t* num_rows);

#ifdef __cplusplus
}  // extern "C"

// carve_cu_nms_postprocess on half maps (carve_cu_level_h of carve_cuda.h, an fp16 package's head
// inputs; C++ overload): each value widened to float32 as it is read (exact), so the rows and their
// count are bit for bit those of the float32 function on float32 copies of the maps.
carve_status carve_cu_nms_postprocess(const carve_cu_ctx* ctx, const carve_cu_level_h* levels, size_t num_levels,
                                      size_t nc, size_t extra_channels, carve_e2e_task task, const float* conf,
                                      double iou, int agnostic, size_t max_det, void* scratch, float* rows,
                                      uint32_t* num_rows);
carve_status carve_cu_nms_postprocess_batch(const carve_cu_ctx* ctx, const carve_cu_level_h* levels,
                                            size_t num_levels, size_t nc, size_t extra_channels, carve_e2e_task task,
                                            const float* conf, double iou, int agnostic, size_t max_det, size_t batch,
                                            void* scratch, float* rows, uint32_t* num_rows);
#endif

#endif  // CARVE_CUDA_NMS_H
