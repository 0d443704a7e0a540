// Checks carve_nchw_to_nhwc / carve_nhwc_to_nchw against plain loops at odd
// sizes (and sizes over the 32x32 transpose tile) with strides wider than the
// channels, and that they are inverse of each other.

#include "carve_layout.h"
#include "test_common.h"

static void run_case(test_rng* rng, size_t c, size_t h, size_t w, size_t stride) {
  const size_t pixels = h * w;
  float* nchw = malloc(c * pixels * sizeof(float));
  float* nhwc = malloc(pixels * stride * sizeof(float));
  float* back = malloc(c * pixels * sizeof(float));
  CHECK(nchw && nhwc && back);
  for (size_t i = 0; i < c * pixels; i++) {
    nchw[i] = rng_normal(rng);
  }
  fill_canary(nhwc, pixels * stride);
  CHECK(carve_nchw_to_nhwc(nchw, c, h, w, nhwc, stride) == CARVE_OK);
  for (size_t p = 0; p < pixels; p++) {
    for (size_t ch = 0; ch < stride; ch++) {
      const float got = nhwc[p * stride + ch];
      if (ch < c) {
        CHECK(got == nchw[ch * pixels + p]);
      } else {
        CHECK(is_canary(got));
      }
    }
  }
  CHECK(carve_nhwc_to_nchw(nhwc, stride, h, w, c, back) == CARVE_OK);
  CHECK(memcmp(back, nchw, c * pixels * sizeof(float)) == 0);
  free(nchw);
  free(nhwc);
  free(back);
}

int main(void) {
  test_rng rng = {4242};
  run_case(&rng, 1, 1, 1, 1);
  run_case(&rng, 3, 7, 5, 3);
  run_case(&rng, 3, 7, 5, 10);
  run_case(&rng, 33, 9, 11, 40);
  run_case(&rng, 80, 20, 20, 80);
  run_case(&rng, 5, 1, 97, 7);
  printf("runtime_layout: ok\n");
  return 0;
}
