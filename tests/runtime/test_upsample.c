// Checks carve_upsample_nearest2x against a plain loop at odd sizes and strides
// wider than the channels, that padding columns stay untouched, and identical
// results with 0 or 2 threads.

#include "carve_layout.h"
#include "test_common.h"

static void run_case(test_rng* rng, pthreadpool_t pool2, size_t h, size_t w, size_t c,
                     size_t x_stride, size_t y_stride) {
  const size_t x_len = h * w * x_stride, y_len = 4 * h * w * y_stride;
  float* x = malloc(x_len * sizeof(float));
  float* y0 = malloc(y_len * sizeof(float));
  float* y2 = malloc(y_len * sizeof(float));
  CHECK(x && y0 && y2);
  for (size_t i = 0; i < x_len; i++) {
    x[i] = rng_normal(rng);
  }
  fill_canary(y0, y_len);
  fill_canary(y2, y_len);
  CHECK(carve_upsample_nearest2x(x, x_stride, h, w, c, y0, y_stride, NULL) == CARVE_OK);
  CHECK(carve_upsample_nearest2x(x, x_stride, h, w, c, y2, y_stride, pool2) == CARVE_OK);
  CHECK(memcmp(y0, y2, y_len * sizeof(float)) == 0);
  for (size_t oy = 0; oy < 2 * h; oy++) {
    for (size_t ox = 0; ox < 2 * w; ox++) {
      for (size_t ch = 0; ch < y_stride; ch++) {
        const float got = y0[(oy * 2 * w + ox) * y_stride + ch];
        if (ch < c) {
          CHECK(got == x[((oy / 2) * w + ox / 2) * x_stride + ch]);
        } else {
          CHECK(is_canary(got));
        }
      }
    }
  }
  free(x);
  free(y0);
  free(y2);
}

int main(void) {
  test_rng rng = {777};
  pthreadpool_t pool2 = make_pool2();
  run_case(&rng, pool2, 1, 1, 1, 1, 1);
  run_case(&rng, pool2, 7, 5, 3, 3, 3);
  run_case(&rng, pool2, 7, 5, 3, 8, 11);
  run_case(&rng, pool2, 1, 9, 17, 20, 17);
  run_case(&rng, pool2, 13, 1, 2, 2, 6);
  run_case(&rng, pool2, 20, 20, 64, 128, 192);  // a slice of a concat buffer
  pthreadpool_destroy(pool2);
  printf("runtime_upsample: ok\n");
  return 0;
}
