// Checks carve_status_str: a distinct non-empty sentence for every status,
// a non-NULL answer for values outside the enum, and the ABI macro.

#include "carve_rt.h"
#include "test_common.h"

#if CARVE_RT_ABI != 7
#error "test written for carve runtime ABI 7"
#endif

int main(void) {
  const carve_status all[] = {
      CARVE_OK,          CARVE_ERR_INVALID_ARGUMENT, CARVE_ERR_OUT_OF_MEMORY,
      CARVE_ERR_BACKEND, CARVE_ERR_IO,               CARVE_ERR_UNSUPPORTED,
      CARVE_ERR_BAD_WEIGHTS, CARVE_ERR_BAD_IMAGE,    CARVE_ERR_WEIGHTS_MAGIC,
      CARVE_ERR_WEIGHTS_VERSION, CARVE_ERR_WEIGHTS_SIZE, CARVE_ERR_WEIGHTS_CHECKSUM,
      CARVE_ERR_WEIGHTS_MODEL,
  };
  const size_t n = sizeof all / sizeof all[0];
  for (size_t i = 0; i < n; i++) {
    CHECK((size_t)all[i] == i);  // explicit values 0..12
    const char* s = carve_status_str(all[i]);
    CHECK(s != NULL && s[0] != '\0');
    for (size_t j = 0; j < i; j++) {
      CHECK(strcmp(s, carve_status_str(all[j])) != 0);
    }
  }
  CHECK(carve_status_str((carve_status)99) != NULL);
  CHECK(carve_status_str((carve_status)-1) != NULL);
  printf("runtime_status: %zu statuses ok\n", n);
  return 0;
}
