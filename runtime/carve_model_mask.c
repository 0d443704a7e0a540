// carve runtime: the segmentation masks of a model (carve_model.h), over carve_mask.c's kernels. Copied
// into the packages of segmentation models only, with carve_mask.c.

#include "carve_mask.h"
#include "carve_model.h"

// The last run's mask prototypes, (proto_h, proto_w, num_protos) NHWC.
static const carve_view* protos_view(const carve_model* m, carve_view* v) {
  v->data = m->arena + m->desc->output1_off;
  v->h = m->desc->proto_h;
  v->w = m->desc->proto_w;
  v->c = m->desc->num_protos;
  v->stride = m->desc->proto_stride;
  return v;
}

carve_status carve_model_mask_logits(const carve_model* m, int row, float* logits) {
  if (m == NULL || logits == NULL || !m->has_run || m->desc->task != CARVE_TASK_SEGMENT || row < 0 ||
      (size_t)row >= m->num_rows) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const carve_model_desc* d = m->desc;
  carve_view v;
  const float* r = m->arena + d->output0_off + (size_t)row * d->row_len;
  return carve_mask_logits(r, 1, d->row_len, 6, protos_view(m, &v), logits, NULL);
}

// The logits at prototype resolution, at the start of carve_model_mask's scratch.
static size_t logits_bytes(const carve_model* m) { return sizeof(float) * m->desc->proto_h * m->desc->proto_w; }

size_t carve_model_mask_scratch_bytes(const carve_model* m) {
  if (m == NULL || m->desc->task != CARVE_TASK_SEGMENT || m->letterbox.src_w <= 0) {
    return 0;
  }
  return logits_bytes(m) + carve_mask_native_scratch_bytes(m->desc->proto_h, m->desc->proto_w, &m->letterbox);
}

carve_status carve_model_mask(carve_model* m, int row, const float box[4], uint8_t* mask, void* scratch,
                              size_t scratch_bytes) {
  const size_t need = carve_model_mask_scratch_bytes(m);
  if (box == NULL || mask == NULL || scratch == NULL || need == 0 || scratch_bytes < need) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  float* logits = scratch;
  carve_status status = carve_model_mask_logits(m, row, logits);
  if (status != CARVE_OK) {
    return status;
  }
  return carve_mask_native(logits, m->desc->proto_h, m->desc->proto_w, &m->letterbox, box, mask,
                           (char*)scratch + logits_bytes(m), m->pool);
}
