// Checks carve_e2e_postprocess against a brute-force version of the same
// semantics built on a full qsort (score descending, NaN lowest, ties to the
// lower index): three levels at odd sizes and strides wider than the channels,
// nc = 1, 3, 80, extras 0 and 5, k = 1, 7, A, A + 5, heavy ties (logits from a
// small set, and saturated sigmoids), NaN and +-inf logits, all-NaN anchors, a
// full 640x640 layout (A = 8400, nc = 80, k = 300), an empty level between two
// others; every case of every task the extras allow run serially and on pools of
// 2 and 3 threads, bit for bit the same rows; plus carve_filter_conf.

#include "carve_post.h"
#include "test_common.h"

// ---- Brute force ------------------------------------------------------------

typedef struct cand {
  float score;
  size_t index;
} cand;

// qsort order: score descending, NaN after every number, then index ascending.
static int cand_cmp(const void* pa, const void* pb) {
  const cand* a = pa;
  const cand* b = pb;
  const int a_nan = a->score != a->score, b_nan = b->score != b->score;
  if (a_nan != b_nan) {
    return a_nan ? 1 : -1;
  }
  if (!a_nan && a->score != b->score) {
    return a->score > b->score ? -1 : 1;
  }
  return a->index < b->index ? -1 : (a->index > b->index ? 1 : 0);
}

static float sigmoid_ref(float x) { return 1.0f / (1.0f + expf(-x)); }

typedef struct anchor_ref {
  const carve_level* level;
  size_t pixel;
} anchor_ref;

static size_t brute_force(const carve_level* levels, size_t num_levels, size_t nc, size_t extra,
                          size_t k, float* rows) {
  size_t A = 0;
  for (size_t l = 0; l < num_levels; l++) {
    A += levels[l].h * levels[l].w;
  }
  anchor_ref* anchors = malloc(A * sizeof(anchor_ref));
  cand* c1 = malloc(A * sizeof(cand));
  CHECK(anchors && c1);
  size_t a = 0;
  for (size_t l = 0; l < num_levels; l++) {
    for (size_t p = 0; p < levels[l].h * levels[l].w; p++, a++) {
      anchors[a].level = &levels[l];
      anchors[a].pixel = p;
      // max over classes of sigmoid, NaN ignored unless all NaN.
      float m = NAN;
      for (size_t c = 0; c < nc; c++) {
        const float s = sigmoid_ref(levels[l].cls[p * levels[l].cls_stride + c]);
        if (m != m || s > m) {
          m = s;
        }
      }
      c1[a].score = m;
      c1[a].index = a;
    }
  }
  const size_t kk = k < A ? k : A;
  qsort(c1, A, sizeof(cand), cand_cmp);
  cand* c2 = malloc(kk * nc * sizeof(cand));
  CHECK(c2);
  for (size_t r = 0; r < kk; r++) {
    const anchor_ref* ar = &anchors[c1[r].index];
    for (size_t c = 0; c < nc; c++) {
      c2[r * nc + c].score = sigmoid_ref(ar->level->cls[ar->pixel * ar->level->cls_stride + c]);
      c2[r * nc + c].index = r * nc + c;
    }
  }
  qsort(c2, kk * nc, sizeof(cand), cand_cmp);
  for (size_t i = 0; i < kk; i++) {
    const size_t r = c2[i].index / nc, c = c2[i].index % nc;
    const anchor_ref* ar = &anchors[c1[r].index];
    const carve_level* L = ar->level;
    const float ax = (float)(ar->pixel % L->w) + 0.5f, ay = (float)(ar->pixel / L->w) + 0.5f;
    const float* b = L->box + ar->pixel * L->box_stride;
    float* row = rows + i * (6 + extra);
    row[0] = (ax - b[0]) * L->stride;
    row[1] = (ay - b[1]) * L->stride;
    row[2] = (ax + b[2]) * L->stride;
    row[3] = (ay + b[3]) * L->stride;
    row[4] = c2[i].score;
    row[5] = (float)c;
    for (size_t e = 0; e < extra; e++) {
      row[6 + e] = L->extra[ar->pixel * L->extra_stride + e];
    }
  }
  free(anchors);
  free(c1);
  free(c2);
  return kk;
}

// ---- Cases ------------------------------------------------------------------

enum logit_mode { LOGITS_NORMAL, LOGITS_TIES, LOGITS_SPECIAL };

static float draw_logit(test_rng* rng, enum logit_mode mode) {
  switch (mode) {
    case LOGITS_NORMAL:
      return rng_normal(rng) * 4.0f;
    case LOGITS_TIES: {
      static const float few[] = {-2.0f, -1.0f, 0.0f, 1.0f, 2.0f, 20.0f, 30.0f};
      return few[rng_below(rng, 7)];  // 20 and 30 both give sigmoid == 1.0f
    }
    case LOGITS_SPECIAL: {
      const size_t r = rng_below(rng, 10);
      return r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -INFINITY : r == 3 ? 20.0f
                                                                            : rng_normal(rng);
    }
  }
  return 0.0f;
}

typedef struct level_spec {
  size_t h, w;
  float stride;
} level_spec;

static size_t total_cases = 0;

// ---- Thread pools -----------------------------------------------------------

// Pools of 2 and 3 threads, made in main.
static pthreadpool_t pools[2];

// Every task the extras allow (DETECT, SEGMENT; POSE for whole keypoints, OBB for
// one angle), serially and then on each pool: the keys of both top-k steps are
// built over the pool, tile by tile, and the rows and their count must not depend
// on it, bit for bit (NaN scores included). carve_e2e_postprocess passes its pool on.
static void check_pools(const carve_level* levels, size_t num_levels, size_t nc, size_t extra,
                        size_t k, size_t kk, void* scratch) {
  const size_t width = 6 + extra;
  float* want = malloc((kk * width + 1) * sizeof(float));
  float* got = malloc((kk * width + 8) * sizeof(float));
  CHECK(want && got);
  for (int task = CARVE_E2E_DETECT; task <= CARVE_E2E_OBB; task++) {
    if ((task == CARVE_E2E_POSE && extra % 3 != 0) || (task == CARVE_E2E_OBB && extra != 1)) {
      continue;
    }
    size_t n_want = 0;
    carve_e2e_postprocess_task(levels, num_levels, nc, extra, k, (carve_e2e_task)task, scratch, want,
                               &n_want, NULL);
    CHECK(n_want == kk);
    for (size_t p = 0; p < 2; p++) {
      for (int wrapper = 0; wrapper <= (task == CARVE_E2E_DETECT); wrapper++) {
        size_t n = 12345;
        fill_canary(got, kk * width + 8);
        if (wrapper) {
          carve_e2e_postprocess(levels, num_levels, nc, extra, k, scratch, got, &n, pools[p]);
        } else {
          carve_e2e_postprocess_task(levels, num_levels, nc, extra, k, (carve_e2e_task)task, scratch,
                                     got, &n, pools[p]);
        }
        CHECK_MSG(n == n_want && memcmp(got, want, kk * width * sizeof(float)) == 0,
                  "task %d (%s) on %zu threads, nc=%zu k=%zu: not the serial rows", task,
                  wrapper ? "carve_e2e_postprocess" : "carve_e2e_postprocess_task",
                  pthreadpool_get_threads_count(pools[p]), nc, k);
        CHECK(is_canary(got[kk * width]));
      }
    }
  }
  free(want);
  free(got);
}

static void run_case(test_rng* rng, const level_spec* spec, size_t num_levels, size_t nc,
                     size_t extra, size_t k, enum logit_mode mode, int all_nan_anchor) {
  carve_level levels[3];
  float* storage[3][3];
  size_t A = 0;
  for (size_t l = 0; l < num_levels; l++) {
    const size_t px = spec[l].h * spec[l].w;
    const size_t box_stride = 4 + l, cls_stride = nc + 2 * l, extra_stride = extra + 3;
    float* box = malloc((px * box_stride + 1) * sizeof(float));
    float* cls = malloc((px * cls_stride + 1) * sizeof(float));
    float* ext = malloc((px * extra_stride + 1) * sizeof(float));
    CHECK(box && cls && ext);
    for (size_t i = 0; i < px * box_stride; i++) {
      box[i] = rng_range(rng, 0.0f, 6.0f);
    }
    for (size_t i = 0; i < px * cls_stride; i++) {
      cls[i] = draw_logit(rng, mode);
    }
    for (size_t i = 0; i < px * extra_stride; i++) {
      ext[i] = rng_normal(rng);
    }
    if (all_nan_anchor) {
      const size_t p = rng_below(rng, px);
      for (size_t c = 0; c < nc; c++) {
        cls[p * cls_stride + c] = NAN;
      }
    }
    levels[l] = (carve_level){box, box_stride, cls, cls_stride, extra ? ext : NULL, extra_stride,
                              spec[l].h, spec[l].w, spec[l].stride};
    storage[l][0] = box;
    storage[l][1] = cls;
    storage[l][2] = ext;
    A += px;
  }
  const size_t kk = k < A ? k : A;
  const size_t width = 6 + extra;
  const size_t scratch_bytes = carve_e2e_scratch_bytes(A, nc, k);
  uint64_t* scratch = malloc(scratch_bytes + 64);
  float* rows = malloc((kk * width + 8) * sizeof(float));
  float* ref = malloc((kk * width + 1) * sizeof(float));
  CHECK(scratch && rows && ref);
  memset(scratch, 0xA5, scratch_bytes + 64);
  fill_canary(rows, kk * width + 8);

  size_t num_rows = 12345;
  carve_e2e_postprocess(levels, num_levels, nc, extra, k, scratch, rows, &num_rows, NULL);
  const size_t ref_rows = brute_force(levels, num_levels, nc, extra, k, ref);
  CHECK(num_rows == kk && ref_rows == kk);
  for (size_t i = 0; i < kk * width; i++) {
    CHECK_MSG(same_float(rows[i], ref[i]),
              "A=%zu nc=%zu k=%zu mode=%d row %zu col %zu: %.9g vs %.9g",
              A, nc, k, (int)mode, i / width, i % width, (double)rows[i], (double)ref[i]);
  }
  for (size_t i = kk * width; i < kk * width + 8; i++) {
    CHECK(is_canary(rows[i]));  // wrote exactly k' rows
  }
  check_pools(levels, num_levels, nc, extra, k, kk, scratch);
  const uint8_t* tail = (const uint8_t*)scratch + scratch_bytes;
  for (size_t i = 0; i < 64; i++) {
    CHECK(tail[i] == 0xA5);  // stayed inside the reported scratch
  }
  for (size_t l = 0; l < num_levels; l++) {
    for (size_t j = 0; j < 3; j++) {
      free(storage[l][j]);
    }
  }
  free(scratch);
  free(rows);
  free(ref);
  total_cases++;
}

// ---- Confidence filter ------------------------------------------------------

static void test_filter_conf(void) {
  const size_t stride = 8;  // 6 used + 2 padding
  float rows[6 * 8];
  const float scores[6] = {0.9f, 0.25f, NAN, 0.3f, 0.1f, 0.26f};
  for (size_t i = 0; i < 6; i++) {
    for (size_t j = 0; j < stride; j++) {
      rows[i * stride + j] = (float)(i * 10 + j);
    }
    rows[i * stride + 4] = scores[i];
  }
  const size_t kept = carve_filter_conf(rows, 6, stride, 0.25f);
  CHECK(kept == 3);  // 0.9, 0.3, 0.26; 0.25 is not > 0.25, NaN is dropped
  const size_t expect[3] = {0, 3, 5};
  for (size_t i = 0; i < kept; i++) {
    for (size_t j = 0; j < stride; j++) {
      const float want = j == 4 ? scores[expect[i]] : (float)(expect[i] * 10 + j);
      CHECK(rows[i * stride + j] == want);
    }
  }
  CHECK(carve_filter_conf(rows, 0, stride, 0.0f) == 0);
  CHECK(carve_filter_conf(NULL, 3, stride, 0.0f) == 0);
  CHECK(carve_filter_conf(rows, 3, stride, -INFINITY) == 3);
}

// ---- Invalid arguments ------------------------------------------------------

static void test_invalid(void) {
  float box[4] = {1, 1, 1, 1}, cls[2] = {0, 1};
  carve_level level = {box, 4, cls, 2, NULL, 0, 1, 1, 8.0f};
  uint64_t scratch[16];
  float rows[16];
  const carve_status bad = CARVE_ERR_INVALID_ARGUMENT;
  size_t n = 99;
  CHECK(carve_e2e_postprocess(&level, 1, 2, 0, 5, scratch, rows, &n, NULL) == CARVE_OK);
  CHECK(n == 1);  // k > A gives A rows
  CHECK(carve_e2e_postprocess(&level, 1, 0, 0, 5, scratch, rows, &n, NULL) == bad);
  CHECK(n == 0);  // nc == 0
  n = 99;
  CHECK(carve_e2e_postprocess(&level, 1, 2, 0, 0, scratch, rows, &n, NULL) == CARVE_OK);
  CHECK(n == 0);  // k == 0: no rows, not an error
  n = 99;
  CHECK(carve_e2e_postprocess(NULL, 1, 2, 0, 5, scratch, rows, &n, NULL) == bad);
  CHECK(n == 0);
  n = 99;
  CHECK(carve_e2e_postprocess(&level, 1, 2, 0, 5, NULL, rows, &n, NULL) == bad);
  CHECK(n == 0);
  n = 99;
  CHECK(carve_e2e_postprocess(&level, 1, 2, 3, 5, scratch, rows, &n, NULL) == bad);
  CHECK(n == 0);  // extras requested but level.extra == NULL
  n = 99;
  CHECK(carve_e2e_postprocess(&level, 0, 2, 0, 5, scratch, rows, &n, NULL) == CARVE_OK);
  CHECK(n == 0);  // no anchors: no rows
  CHECK(carve_e2e_postprocess(&level, 1, 2, 0, 5, scratch, rows, NULL, NULL) == bad);  // no crash
}

int main(void) {
  pools[0] = make_pool2();
  pools[1] = pthreadpool_create(3);
  CHECK(pools[1] != NULL && pthreadpool_get_threads_count(pools[1]) == 3);
  test_rng rng = {99};
  const level_spec small[3] = {{3, 5, 8.0f}, {2, 3, 16.0f}, {1, 1, 32.0f}};  // A = 22
  const size_t A = 22;
  const size_t ks[] = {1, 7, A, A + 5};
  const size_t ncs[] = {1, 3, 80};
  for (size_t m = 0; m < 3; m++) {
    for (size_t ki = 0; ki < 4; ki++) {
      for (size_t ni = 0; ni < 3; ni++) {
        for (size_t extra = 0; extra <= 5; extra += 5) {
          run_case(&rng, small, 3, ncs[ni], extra, ks[ki], (enum logit_mode)m, m == 2);
        }
      }
    }
  }
  // One level, one anchor.
  const level_spec one[1] = {{1, 1, 8.0f}};
  run_case(&rng, one, 1, 4, 2, 1, LOGITS_NORMAL, 0);
  run_case(&rng, one, 1, 4, 0, 300, LOGITS_SPECIAL, 1);
  // 480x640 input (A = 6300) and 640x640 (A = 8400), nc = 80, k = 300.
  const level_spec rect[3] = {{60, 80, 8.0f}, {30, 40, 16.0f}, {15, 20, 32.0f}};
  run_case(&rng, rect, 3, 80, 0, 300, LOGITS_NORMAL, 0);
  const level_spec square[3] = {{80, 80, 8.0f}, {40, 40, 16.0f}, {20, 20, 32.0f}};
  run_case(&rng, square, 3, 80, 32, 300, LOGITS_NORMAL, 0);
  run_case(&rng, square, 3, 80, 0, 300, LOGITS_TIES, 0);
  run_case(&rng, square, 3, 3, 0, 8400, LOGITS_SPECIAL, 1);  // k = A
  // Many key tiles per step with one angle (OBB) or one keypoint (POSE) as the
  // extras, in each logit mode; an empty level, which a tile of anchors crosses.
  for (size_t m = 0; m < 3; m++) {
    run_case(&rng, rect, 3, 15, 1, 300, (enum logit_mode)m, m == 2);
    run_case(&rng, rect, 3, 80, 3, 300, (enum logit_mode)m, m == 2);
  }
  const level_spec gap[3] = {{30, 40, 8.0f}, {0, 20, 16.0f}, {15, 20, 32.0f}};
  run_case(&rng, gap, 3, 80, 1, 1500, LOGITS_TIES, 0);
  run_case(&rng, gap, 3, 7, 3, 100, LOGITS_SPECIAL, 0);
  test_filter_conf();
  test_invalid();
  pthreadpool_destroy(pools[0]);
  pthreadpool_destroy(pools[1]);
  printf("runtime_e2e: %zu cases vs full sort ok, same rows on 2 and 3 threads, filter and argument checks ok\n", total_cases);
  return 0;
}
