// Checks carve_e2e_postprocess_task against carve_e2e_postprocess (itself
// checked against a full sort by test_e2e.c): DETECT and SEGMENT give the same
// rows bit for bit; POSE and OBB choose the same anchors and classes and decode
// them as a plain loop over the chosen anchor does (Pose26.kpts_decode and
// dist2rbox, written out again here); odd level sizes, strides wider than the
// channels, k = 1, k > A; argument errors (unknown task, POSE extras not a
// multiple of 3, OBB extras != 1, NULL extras). Every call of a case also runs
// on pools of 2 and 3 threads and must give the serial rows bit for bit (NaN,
// ties and empty levels on pools: test_e2e.c). Then carve_softmax against a
// double-precision softmax (and its NaN / inf rules) and carve_topk_probs against
// a full sort (ties, NaN, k = 1, k = n, k > n).

#include "carve_post.h"
#include "test_common.h"

typedef struct level_spec {
  size_t h, w;
  float stride;
} level_spec;

typedef struct test_levels {
  carve_level levels[3];
  float* storage[3][3];
  size_t num_levels, anchors;
} test_levels;

// Random head outputs; every extra value is distinct so that a row's raw extras
// identify its anchor.
static void make_levels(test_rng* rng, const level_spec* spec, size_t num_levels, size_t nc,
                        size_t extra, test_levels* t) {
  t->num_levels = num_levels;
  t->anchors = 0;
  for (size_t l = 0; l < num_levels; l++) {
    const size_t px = spec[l].h * spec[l].w;
    const size_t box_stride = 5 + l, cls_stride = nc + 1 + l, extra_stride = extra + 2;
    float* box = malloc(px * box_stride * sizeof(float));
    float* cls = malloc(px * cls_stride * sizeof(float));
    float* ext = malloc((px * extra_stride + 1) * sizeof(float));
    CHECK(box && cls && ext);
    for (size_t i = 0; i < px * box_stride; i++) {
      box[i] = rng_range(rng, -1.0f, 7.0f);
    }
    for (size_t i = 0; i < px * cls_stride; i++) {
      cls[i] = rng_normal(rng) * 3.0f;
    }
    for (size_t i = 0; i < px * extra_stride; i++) {
      ext[i] = rng_normal(rng) * 2.0f + (float)i * 1e-3f;
    }
    t->levels[l] = (carve_level){box, box_stride, cls, cls_stride, ext, extra_stride,
                                 spec[l].h, spec[l].w, spec[l].stride};
    t->storage[l][0] = box;
    t->storage[l][1] = cls;
    t->storage[l][2] = ext;
    t->anchors += px;
  }
}

static void free_levels(test_levels* t) {
  for (size_t l = 0; l < t->num_levels; l++) {
    for (size_t j = 0; j < 3; j++) {
      free(t->storage[l][j]);
    }
  }
}

// The level and pixel whose raw extras equal raw[0 .. extra).
static const carve_level* find_anchor(const test_levels* t, const float* raw, size_t extra,
                                      size_t* pixel) {
  for (size_t l = 0; l < t->num_levels; l++) {
    const carve_level* L = &t->levels[l];
    for (size_t p = 0; p < L->h * L->w; p++) {
      if (memcmp(L->extra + p * L->extra_stride, raw, extra * sizeof(float)) == 0) {
        *pixel = p;
        return L;
      }
    }
  }
  CHECK(!"row's extras match no anchor");
  return NULL;
}

static size_t total_cases = 0;

// Pools of 2 and 3 threads, made in main.
static pthreadpool_t pools[2];

// carve_e2e_postprocess_task serially into rows / *n, then on each pool, whose
// rows and count must be the serial ones bit for bit (the keys of both top-k
// steps are built over the pool).
static void e2e_task(const test_levels* t, size_t nc, size_t extra, size_t k, carve_e2e_task task,
                     void* scratch, float* rows, size_t* n) {
  carve_e2e_postprocess_task(t->levels, t->num_levels, nc, extra, k, task, scratch, rows, n, NULL);
  const size_t count = *n * (6 + extra);
  float* got = malloc((count + 8) * sizeof(float));
  CHECK(got);
  for (size_t p = 0; p < 2; p++) {
    size_t n_got = 12345;
    fill_canary(got, count + 8);
    carve_e2e_postprocess_task(t->levels, t->num_levels, nc, extra, k, task, scratch, got, &n_got,
                               pools[p]);
    CHECK_MSG(n_got == *n && memcmp(got, rows, count * sizeof(float)) == 0,
              "task %d on %zu threads, nc=%zu extra=%zu k=%zu: not the serial rows", (int)task,
              pthreadpool_get_threads_count(pools[p]), nc, extra, k);
    CHECK(is_canary(got[count]));
  }
  free(got);
}

static void run_case(test_rng* rng, const level_spec* spec, size_t num_levels, size_t nc,
                     size_t extra, size_t k) {
  test_levels t;
  make_levels(rng, spec, num_levels, nc, extra, &t);
  const size_t kk = k < t.anchors ? k : t.anchors;
  const size_t width = 6 + extra;
  const size_t scratch_bytes = carve_e2e_scratch_bytes(t.anchors, nc, k);
  uint64_t* scratch = malloc(scratch_bytes + 64);
  float* raw = malloc((kk * width + 1) * sizeof(float));
  float* rows = malloc((kk * width + 8) * sizeof(float));
  CHECK(scratch && raw && rows);

  size_t n_raw = 0, n = 0;
  carve_e2e_postprocess(t.levels, num_levels, nc, extra, k, scratch, raw, &n_raw, NULL);
  CHECK(n_raw == kk);

  // DETECT and SEGMENT: the same rows as carve_e2e_postprocess.
  for (int task = CARVE_E2E_DETECT; task <= CARVE_E2E_SEGMENT; task++) {
    fill_canary(rows, kk * width + 8);
    e2e_task(&t, nc, extra, k, (carve_e2e_task)task, scratch, rows, &n);
    CHECK(n == kk);
    CHECK(memcmp(rows, raw, kk * width * sizeof(float)) == 0);
    CHECK(is_canary(rows[kk * width]));
  }

  // POSE: boxes, scores, classes as DETECT; keypoints decoded from the anchor.
  if (extra % 3 == 0) {
    fill_canary(rows, kk * width + 8);
    e2e_task(&t, nc, extra, k, CARVE_E2E_POSE, scratch, rows, &n);
    CHECK(n == kk);
    for (size_t i = 0; i < kk; i++) {
      const float* r = raw + i * width;
      const float* g = rows + i * width;
      CHECK(memcmp(g, r, 6 * sizeof(float)) == 0);
      size_t p;
      const carve_level* L = find_anchor(&t, r + 6, extra, &p);
      const float ax = (float)(p % L->w) + 0.5f, ay = (float)(p / L->w) + 0.5f;
      for (size_t j = 0; j < extra; j += 3) {
        CHECK(g[6 + j] == (r[6 + j] + ax) * L->stride);
        CHECK(g[7 + j] == (r[7 + j] + ay) * L->stride);
        CHECK(g[8 + j] == 1.0f / (1.0f + expf(-r[8 + j])));
      }
    }
    CHECK(is_canary(rows[kk * width]));
  }

  // OBB: xywh from dist2rbox (checked in double against 1e-5 relative), angle raw.
  if (extra == 1) {
    fill_canary(rows, kk * width + 8);
    e2e_task(&t, nc, extra, k, CARVE_E2E_OBB, scratch, rows, &n);
    CHECK(n == kk);
    for (size_t i = 0; i < kk; i++) {
      const float* r = raw + i * width;
      const float* g = rows + i * width;
      CHECK(g[4] == r[4] && g[5] == r[5] && g[6] == r[6]);
      size_t p;
      const carve_level* L = find_anchor(&t, r + 6, 1, &p);
      const float* d = L->box + p * L->box_stride;
      const double ax = (double)(p % L->w) + 0.5, ay = (double)(p / L->w) + 0.5;
      const double xf = ((double)d[2] - d[0]) / 2, yf = ((double)d[3] - d[1]) / 2;
      const double th = r[6], s = L->stride;
      const double want[4] = {(xf * cos(th) - yf * sin(th) + ax) * s,
                              (xf * sin(th) + yf * cos(th) + ay) * s, ((double)d[0] + d[2]) * s,
                              ((double)d[1] + d[3]) * s};
      for (int c = 0; c < 4; c++) {
        CHECK_MSG(fabs(g[c] - want[c]) <= 1e-5 * fmax(1.0, fabs(want[c])), "obb row %zu col %d",
                  i, c);
      }
    }
    CHECK(is_canary(rows[kk * width]));
  }
  free_levels(&t);
  free(scratch);
  free(raw);
  free(rows);
  total_cases++;
}

static void test_invalid(void) {
  test_rng rng = {5};
  const level_spec spec[1] = {{2, 3, 8.0f}};
  test_levels t;
  make_levels(&rng, spec, 1, 2, 51, &t);
  uint64_t scratch[64];
  float rows[6 * 57];
  const carve_status bad = CARVE_ERR_INVALID_ARGUMENT;
  size_t n = 99;
  CHECK(carve_e2e_postprocess_task(t.levels, 1, 2, 51, 6, CARVE_E2E_POSE, scratch, rows, &n, NULL) == CARVE_OK);
  CHECK(n == 6);
  CHECK(carve_e2e_postprocess_task(t.levels, 1, 2, 50, 6, CARVE_E2E_POSE, scratch, rows, &n, NULL) == bad);
  CHECK(n == 0);  // not (x, y, v) triples
  n = 99;
  CHECK(carve_e2e_postprocess_task(t.levels, 1, 2, 2, 6, CARVE_E2E_OBB, scratch, rows, &n, NULL) == bad);
  CHECK(n == 0);  // one angle only
  n = 99;
  CHECK(carve_e2e_postprocess_task(t.levels, 1, 2, 0, 6, CARVE_E2E_OBB, scratch, rows, &n, NULL) == bad);
  CHECK(n == 0);
  n = 99;
  CHECK(carve_e2e_postprocess_task(t.levels, 1, 2, 1, 6, (carve_e2e_task)4, scratch, rows, &n, NULL) == bad);
  CHECK(n == 0);  // unknown task
  n = 99;
  CHECK(carve_e2e_postprocess_task(t.levels, 1, 2, 1, 6, (carve_e2e_task)-1, scratch, rows, &n, NULL) == bad);
  CHECK(n == 0);
  n = 99;
  CHECK(carve_e2e_postprocess_task(t.levels, 1, 2, 0, 6, CARVE_E2E_POSE, scratch, rows, &n, NULL) == CARVE_OK);
  CHECK(n == 6);  // zero keypoints is a valid (if odd) pose head
  t.levels[0].extra = NULL;
  n = 99;
  CHECK(carve_e2e_postprocess_task(t.levels, 1, 2, 1, 6, CARVE_E2E_OBB, scratch, rows, &n, NULL) == bad);
  CHECK(n == 0);  // extras needed but missing
  n = 99;
  CHECK(carve_e2e_postprocess_task(t.levels, 1, 2, 0, 0, CARVE_E2E_DETECT, scratch, rows, &n, NULL) == CARVE_OK);
  CHECK(n == 0);  // k == 0
  n = 99;
  carve_e2e_postprocess_task(NULL, 1, 2, 0, 3, CARVE_E2E_SEGMENT, scratch, rows, &n, NULL);
  CHECK(n == 0);
  carve_e2e_postprocess_task(t.levels, 1, 2, 0, 3, CARVE_E2E_DETECT, scratch, rows, NULL, NULL);
  free_levels(&t);
}

// ---- Softmax and top-k --------------------------------------------------------

static void test_softmax(void) {
  test_rng rng = {11};
  const size_t sizes[] = {1, 2, 5, 10, 1000, 1001};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    const size_t n = sizes[si];
    float* x = malloc(n * sizeof(float));
    float* y = malloc(n * sizeof(float));
    CHECK(x && y);
    for (size_t i = 0; i < n; i++) {
      x[i] = rng_normal(&rng) * 8.0f + 50.0f;  // large logits: needs the max subtraction
    }
    carve_softmax(x, n, y);
    double m = x[0], sum = 0.0, total = 0.0;
    for (size_t i = 0; i < n; i++) {
      m = fmax(m, x[i]);
    }
    for (size_t i = 0; i < n; i++) {
      sum += exp((double)x[i] - m);
    }
    for (size_t i = 0; i < n; i++) {
      const double want = exp((double)x[i] - m) / sum;
      CHECK_MSG(fabs(y[i] - want) <= 2e-7 * fmax(want, 1e-30) + 1e-12, "n=%zu i=%zu", n, i);
      total += y[i];
    }
    CHECK(fabs(total - 1.0) < 1e-5);
    carve_softmax(x, n, x);  // in place
    CHECK(memcmp(x, y, n * sizeof(float)) == 0);
    free(x);
    free(y);
  }
  float x[3] = {1.0f, NAN, 2.0f}, y[3];
  carve_softmax(x, 3, y);
  CHECK(y[0] != y[0] && y[1] != y[1] && y[2] != y[2]);
  const float big[3] = {-INFINITY, 0.0f, -INFINITY};
  carve_softmax(big, 3, y);
  CHECK(y[0] == 0.0f && y[1] == 1.0f && y[2] == 0.0f);
  const float pinf[3] = {INFINITY, 1.0f, 2.0f}, ninf[2] = {-INFINITY, -INFINITY};
  carve_softmax(pinf, 3, y);
  CHECK(y[0] != y[0] && y[1] != y[1] && y[2] != y[2]);  // inf - inf, as torch
  carve_softmax(ninf, 2, y);
  CHECK(y[0] != y[0] && y[1] != y[1]);
  carve_softmax(NULL, 3, y);
  carve_softmax(x, 0, y);
  carve_softmax(x, 3, NULL);
}

typedef struct ranked {
  float v;
  int i;
} ranked;

static int ranked_cmp(const void* pa, const void* pb) {
  const ranked* a = pa;
  const ranked* b = pb;
  const int an = a->v != a->v, bn = b->v != b->v;
  if (an != bn) {
    return an ? 1 : -1;
  }
  if (!an && a->v != b->v) {
    return a->v > b->v ? -1 : 1;
  }
  return a->i - b->i;
}

static void test_topk(void) {
  test_rng rng = {12};
  const size_t sizes[] = {1, 2, 7, 100, 1000};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    const size_t n = sizes[si];
    for (int mode = 0; mode < 3; mode++) {
      float* p = malloc(n * sizeof(float));
      ranked* ref = malloc(n * sizeof(ranked));
      int* idx = malloc((n + 6) * sizeof(int));
      float* val = malloc((n + 6) * sizeof(float));
      CHECK(p && ref && idx && val);
      for (size_t i = 0; i < n; i++) {
        p[i] = mode == 0   ? (float)rng_uniform(&rng)
               : mode == 1 ? (float)rng_below(&rng, 4) * 0.25f  // ties
                           : (rng_below(&rng, 5) == 0 ? NAN : (float)rng_uniform(&rng));
        ref[i] = (ranked){p[i], (int)i};
      }
      qsort(ref, n, sizeof(ranked), ranked_cmp);
      const size_t ks[] = {1, 5, n, n + 5};
      for (size_t ki = 0; ki < 4; ki++) {
        const size_t k = ks[ki], kk = k < n ? k : n;
        for (size_t i = 0; i < n + 6; i++) {
          idx[i] = -7;
          val[i] = -12345.5f;
        }
        CHECK(carve_topk_probs(p, n, k, idx, val) == kk);
        for (size_t i = 0; i < kk; i++) {
          CHECK(idx[i] == ref[i].i && same_float(val[i], ref[i].v));
        }
        CHECK(idx[kk] == -7 && is_canary(val[kk]));
        CHECK(carve_topk_probs(p, n, k, idx, NULL) == kk);  // values optional
        CHECK(idx[0] == ref[0].i);
      }
      free(p);
      free(ref);
      free(idx);
      free(val);
    }
  }
  int idx[2];
  float p[2] = {0.5f, 0.5f};
  CHECK(carve_topk_probs(p, 2, 0, idx, NULL) == 0);
  CHECK(carve_topk_probs(p, 0, 3, idx, NULL) == 0);
  CHECK(carve_topk_probs(NULL, 2, 1, idx, NULL) == 0);
  CHECK(carve_topk_probs(p, 2, 1, NULL, NULL) == 0);
  CHECK(carve_topk_probs(p, 2, 2, idx, NULL) == 2 && idx[0] == 0 && idx[1] == 1);
}

int main(void) {
  pools[0] = make_pool2();
  pools[1] = pthreadpool_create(3);
  CHECK(pools[1] != NULL && pthreadpool_get_threads_count(pools[1]) == 3);
  test_rng rng = {2024};
  const level_spec small[3] = {{3, 5, 8.0f}, {2, 3, 16.0f}, {1, 1, 32.0f}};  // A = 22
  const size_t ks[] = {1, 7, 22, 40};
  const size_t extras[] = {0, 1, 3, 32, 51};
  for (size_t ki = 0; ki < 4; ki++) {
    for (size_t ei = 0; ei < 5; ei++) {
      run_case(&rng, small, 3, 1, extras[ei], ks[ki]);
      run_case(&rng, small, 3, 15, extras[ei], ks[ki]);
    }
  }
  const level_spec rect[3] = {{60, 80, 8.0f}, {30, 40, 16.0f}, {15, 20, 32.0f}};
  run_case(&rng, rect, 3, 1, 51, 300);
  run_case(&rng, rect, 3, 15, 1, 300);
  run_case(&rng, rect, 3, 80, 32, 300);
  test_invalid();
  test_softmax();
  test_topk();
  pthreadpool_destroy(pools[0]);
  pthreadpool_destroy(pools[1]);
  printf("runtime_e2e_task: %zu cases ok (detect/segment/pose/obb, serial = 2 and 3 threads), errors, softmax, top-k ok\n",
         total_cases);
  return 0;
}
