// XNNPACK's operators run on carve's pool: the package executable's pthreadpool_* (runtime/carve_pool.c)
// take precedence over libpthreadpool's, which Debian's libXNNPACK.so imports. A clamp operator over
// 4096 rows run on a 2-thread pool must count steps in carve_pool_steps() and give the clamped values;
// the same on a NULL pool (XNNPACK's serial path, also ours).

#include <stdio.h>
#include <stdlib.h>

#include <xnnpack.h>

#include "carve_pool.h"

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

int main(void) {
  enum { ROWS = 4096, CH = 16 };
  static float x[ROWS * CH], y[ROWS * CH];
  for (int i = 0; i < ROWS * CH; i++) x[i] = (float)(i % 97) - 48.0f;
  CHECK(xnn_initialize(NULL) == xnn_status_success);
  pthreadpool_t pool = pthreadpool_create(2);
  CHECK(pool != NULL && pthreadpool_get_threads_count(pool) == 2);
  xnn_operator_t op = NULL;
  CHECK(xnn_create_clamp_nc_f32(CH, CH, CH, -10.0f, 10.0f, 0, &op) == xnn_status_success);
  CHECK(xnn_setup_clamp_nc_f32(op, ROWS, x, y, pool) == xnn_status_success);
  const uint64_t before = carve_pool_steps(pool);
  CHECK(xnn_run_operator(op, pool) == xnn_status_success);
  const uint64_t after = carve_pool_steps(pool);
  printf("XNNPACK clamp: %llu step(s) on carve's pool\n", (unsigned long long)(after - before));
  CHECK(after > before);
  for (int i = 0; i < ROWS * CH; i++) {
    const float want = x[i] < -10.0f ? -10.0f : (x[i] > 10.0f ? 10.0f : x[i]);
    CHECK(y[i] == want);
  }
  xnn_delete_operator(op);
  pthreadpool_destroy(pool);
  printf("pool_xnnpack: ok\n");
  return 0;
}
