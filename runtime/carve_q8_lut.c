// carve runtime: int8 table lookup on the thread pool. See carve_q8_lut.h.

#include "carve_q8_lut.h"

// Elements per task, about: small enough to spread a 20x20 layer over a few threads, large enough that the
// pool's hand-off stays small against the loop.
#define CARVE_Q8_LUT_TASK_ELEMENTS 16384

typedef struct lut_task {
  const int8_t* x;
  int8_t* y;
  size_t x_stride, y_stride, channels;
  const int8_t* lut;
} lut_task;

static void lut_rows(void* context, size_t start, size_t count) {
  const lut_task* t = (const lut_task*)context;
  const int8_t* lut = t->lut + 128;  // lut[q] for q in [-128, 127]
  for (size_t p = start; p < start + count; p++) {
    const int8_t* x = t->x + p * t->x_stride;
    int8_t* y = t->y + p * t->y_stride;
    for (size_t c = 0; c < t->channels; c++) {
      y[c] = lut[x[c]];
    }
  }
}

carve_status carve_q8_lut(const int8_t* x, size_t x_stride, int8_t* y, size_t y_stride, size_t pixels,
                          size_t channels, const int8_t* lut, pthreadpool_t pool) {
  if (x == NULL || y == NULL || lut == NULL || pixels == 0 || channels == 0 || x_stride < channels ||
      y_stride < channels || (x == y && x_stride != y_stride)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const lut_task t = {x, y, x_stride, y_stride, channels, lut};
  size_t tile = CARVE_Q8_LUT_TASK_ELEMENTS / channels;
  carve_parallelize_1d_tile(pool, lut_rows, (void*)&t, pixels, tile > 0 ? tile : 1);
  return CARVE_OK;
}
