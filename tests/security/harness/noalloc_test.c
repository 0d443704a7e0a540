// Proof that a run allocates nothing: every allocation of the process, including those of
// libXNNPACK, libpthreadpool and the pool's worker threads, goes through the interposed allocator of
// alloc_count.h. Counting is switched on around the runs only.
//
// Positive control: the counter must see the allocations of _create (else the interposition is not
// in effect and the test fails), then count zero during _run_image / _run_tensor on 1 and 2
// threads, for several image sizes.
//
// Built without sanitizers (they replace malloc themselves): ctest security_noalloc.

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "alloc_count.h"
#include "mut.h"

int main(void) {
  const struct { int w, h; } sizes[] = {{1, 1}, {MUT_W, MUT_H}, {333, 17}, {1, 1000}, {640, 480}};
  uint8_t* imgs[5];
  for (int i = 0; i < 5; i++) {
    imgs[i] = mut_image(sizes[i].w, sizes[i].h, (size_t)sizes[i].w * 3 + 5, 7 + i);
  }
  float* x = malloc(sizeof(float) * 3 * MUT_H * MUT_W);
  CHECK(x != NULL);
  for (size_t i = 0; i < (size_t)3 * MUT_H * MUT_W; i++) {
    x[i] = (float)(i % 255) / 255.0f;
  }
  mut_detection dets[MUT_MAX_DETS];
  for (int threads = 1; threads <= 2; threads++) {
    mut_options o = {.threads = threads};
    mut_model* m = NULL;
    count_on();
    CHECK_STATUS(MUT(_create)(&o, &m), CARVE_OK);
    const long at_create = count_off();
    printf("threads %d: _create made %ld allocations\n", threads, at_create);
    CHECK(at_create > 0);  // the counter works

    count_on();
    for (int rep = 0; rep < 3; rep++) {
      for (int i = 0; i < 5; i++) {
        size_t n = 0;
        const int w = sizes[i].w, h = sizes[i].h;
        CHECK_STATUS(MUT(_run_image)(m, imgs[i], w, h, (size_t)w * 3 + 5, 0.25f, dets, MUT_MAX_DETS, &n), CARVE_OK);
      }
      size_t n = 0, rows = 0;
      CHECK_STATUS(MUT(_run_tensor)(m, x, 0.25f, dets, MUT_MAX_DETS, &n), CARVE_OK);
      CHECK(MUT(_rows)(m, &rows) != NULL && MUT(_layer_ms)(m) != NULL);
    }
    const long in_runs = count_off();
    printf("threads %d: 18 runs made %ld allocations\n", threads, in_runs);
    CHECK(in_runs == 0);
    MUT(_destroy)(m);
  }
  for (int i = 0; i < 5; i++) {
    free(imgs[i]);
  }
  free(x);
  printf("noalloc_test: runs allocate nothing\n");
  return 0;
}
