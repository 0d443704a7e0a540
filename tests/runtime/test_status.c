// Checks carve_status_str: a distinct non-empty sentence for every status,
// a non-NULL answer for values outside the enum, and the ABI macro; the one error
// contract (ABI 7; ABI 8 added carve_weights_expand): the entry points that returned void return carve_status (the
// typed pointers below do not compile otherwise) and refuse bad arguments with
// CARVE_ERR_INVALID_ARGUMENT, writing nothing; carve_isa_name of every
// instruction set.

#include "carve_attention.h"
#include "carve_dwconv.h"
#include "carve_epilogue.h"
#include "carve_layout.h"
#include "carve_stem.h"
#include "carve_winograd.h"
#include "carve_portable.h"
#include "carve_post.h"
#include "carve_pre.h"
#include "carve_rt.h"
#include "carve_weights.h"
#include "test_common.h"

#if CARVE_RT_ABI != 13
#error "test written for carve runtime ABI 13"
#endif

// Each of these was void before ABI 7.
static carve_status (*const k_epilogue)(float*, size_t, const float*, size_t, size_t, size_t, carve_act,
                                        pthreadpool_t) = carve_epilogue;
static carve_status (*const k_attention)(const float*, size_t, size_t, size_t, size_t, size_t, float, float*,
                                         size_t, float*, size_t, float*, pthreadpool_t) = carve_attention;
static carve_status (*const k_upsample)(const float*, size_t, size_t, size_t, size_t, float*, size_t,
                                        pthreadpool_t) = carve_upsample_nearest2x;
static carve_status (*const k_to_nhwc)(const float*, size_t, size_t, size_t, float*, size_t) = carve_nchw_to_nhwc;
static carve_status (*const k_to_nchw)(const float*, size_t, size_t, size_t, size_t, float*) = carve_nhwc_to_nchw;
static carve_status (*const k_e2e)(const carve_level*, size_t, size_t, size_t, size_t, void*, float*, size_t*,
                                   pthreadpool_t) = carve_e2e_postprocess;
static carve_status (*const k_e2e_task)(const carve_level*, size_t, size_t, size_t, size_t, carve_e2e_task, void*,
                                        float*, size_t*, pthreadpool_t) = carve_e2e_postprocess_task;
static carve_status (*const k_softmax)(const float*, size_t, float*) = carve_softmax;
static carve_status (*const k_scale_xyxy)(float*, size_t, size_t, const carve_letterbox_info*) =
    carve_scale_boxes_xyxy;
static carve_status (*const k_scale_coords)(float*, size_t, size_t, const carve_letterbox_info*) =
    carve_scale_coords;
static carve_status (*const k_scale_xywhr)(float*, size_t, size_t, const carve_letterbox_info*) =
    carve_scale_boxes_xywhr;
static carve_status (*const k_pt_run)(const carve_pt_desc*, const float*, float*, const float*) = carve_pt_run;
static carve_status (*const k_f16)(const void*, float*, size_t) = carve_f16_to_f32;
// ABI 8: an f16 package's weights rebuilt (tests/runtime/test_weights_expand.c checks it).
static carve_status (*const k_expand)(const void*, size_t, const carve_weights_piece*, size_t, size_t, size_t, float*,
                                      size_t) = carve_weights_expand;

static void check_refusals(void) {
  const carve_status bad = CARVE_ERR_INVALID_ARGUMENT;
  float buf[64];
  fill_canary(buf, 64);
  const carve_letterbox_info info = {0};
  size_t rows = 7;
  CHECK(k_epilogue(NULL, 4, NULL, 0, 2, 4, CARVE_ACT_SILU, NULL) == bad);
  CHECK(k_epilogue(buf, 3, NULL, 0, 2, 4, CARVE_ACT_SILU, NULL) == bad);            // y_stride < channels
  CHECK(k_epilogue(buf, 4, buf + 32, 3, 2, 4, CARVE_ACT_NONE, NULL) == bad);        // r_stride < channels
  CHECK(k_epilogue(buf, 4, NULL, 0, 0, 4, CARVE_ACT_SILU, NULL) == bad);            // no pixels
  CHECK(k_epilogue(buf, 4, NULL, 0, 2, 4, (carve_act)5, NULL) == bad);              // act
  CHECK(k_attention(NULL, 12, 4, 2, 1, 4, 1.0f, buf, 8, NULL, 0, buf + 32, NULL) == bad);
  CHECK(k_upsample(NULL, 4, 2, 2, 4, buf, 4, NULL) == bad);
  CHECK(k_upsample(buf, 3, 2, 2, 4, buf + 32, 4, NULL) == bad);                     // x_stride < c
  CHECK(k_upsample(buf, 4, 2, 0, 4, buf + 32, 4, NULL) == bad);                     // w 0
  CHECK(k_to_nhwc(NULL, 4, 2, 2, buf, 4) == bad);
  CHECK(k_to_nhwc(buf + 32, 4, 2, 2, buf, 3) == bad);                               // y_stride < c
  CHECK(k_to_nchw(buf + 32, 3, 2, 2, 4, buf) == bad);                               // x_stride < c
  CHECK(k_to_nchw(buf + 32, 4, 0, 2, 4, buf) == bad);                               // h 0
  CHECK(k_e2e(NULL, 1, 80, 0, 10, buf, buf, &rows, NULL) == bad && rows == 0);
  rows = 7;
  CHECK(k_e2e_task(NULL, 1, 80, 0, 10, CARVE_E2E_DETECT, buf, buf, &rows, NULL) == bad && rows == 0);
  CHECK(k_softmax(NULL, 4, buf) == bad);
  CHECK(k_softmax(buf + 32, 0, buf) == bad);
  CHECK(k_scale_xyxy(NULL, 1, 6, &info) == bad);
  CHECK(k_scale_xyxy(buf, 1, 3, &info) == bad);                                     // row_stride < 4
  CHECK(k_scale_coords(buf, 1, 3, NULL) == bad);
  CHECK(k_scale_coords(buf, 2, 1, &info) == bad);                                   // stride < 2
  CHECK(k_scale_xywhr(NULL, 1, 7, &info) == bad);
  CHECK(k_pt_run(NULL, buf, buf, buf) == bad);
  CHECK(k_f16(NULL, buf, 4) == bad);
  CHECK(k_expand(NULL, 8, NULL, 0, 64, 0, buf, 64) == bad);
  for (size_t i = 0; i < 64; i++) {
    CHECK(is_canary(buf[i]));
  }
  // Nothing to do is not an error.
  CHECK(k_epilogue(buf, 4, NULL, 0, 2, 4, CARVE_ACT_NONE, NULL) == CARVE_OK);       // no act, no residual
  CHECK(k_scale_xyxy(buf, 0, 6, &info) == CARVE_OK);                                // no rows
  CHECK(k_f16(NULL, NULL, 0) == CARVE_OK);
  CHECK(k_expand(NULL, 0, NULL, 0, 0, 0, NULL, 0) == CARVE_OK);
  for (size_t i = 0; i < 64; i++) {
    CHECK(is_canary(buf[i]));
  }
}

static void check_isa_names(void) {
  static const char* const want[] = {"portable", "AVX2+FMA", "AVX-512", "NEON"};
  for (int isa = CARVE_ISA_PORTABLE; isa <= CARVE_ISA_NEON; isa++) {
    CHECK(strcmp(carve_isa_name((carve_isa)isa), want[isa]) == 0);
  }
  CHECK(strcmp(carve_isa_name((carve_isa)17), "unknown") == 0);
  const carve_isa cpu = carve_isa_detect();
  CHECK(cpu >= CARVE_ISA_PORTABLE && cpu <= CARVE_ISA_NEON);
  printf("runtime_status: this CPU and build: %s\n", carve_isa_name(cpu));
}

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
  check_refusals();
  check_isa_names();
  printf("runtime_status: %zu statuses ok\n", n);
  return 0;
}
