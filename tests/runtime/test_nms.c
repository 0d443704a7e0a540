// Checks carve_nms_postprocess (the one-to-many head + NMS of --head nms) where
// nms_vs_ultralytics.py cannot: the argument contract (every refusal writes no
// row and sets *num_rows = 0), a hand-worked case (class-aware and agnostic,
// max_det, conf), and the selection against a brute force over a qsort of the
// candidates (the greedy suppression written as plainly as possible, the same
// float formulas) on levels at odd sizes, with heavy ties (logits from a small
// set, saturated sigmoids), NaN and infinite logits, nc = 1, 3, 80, agnostic or
// not, max_det 1, 7, all; every case serially and on pools of 2 and 3 threads,
// bit for bit the same rows. Ultralytics agreement (decode, IoU, probiou, tie
// order, max_nms) is nms_vs_ultralytics.py's.

#include "carve_nms.h"
#include "test_common.h"

// ---- Brute force (detect) ---------------------------------------------------------

typedef struct cand {
  float score;
  size_t index, cls;
  float box[5];  // offset xyxy + area
  float row[4];  // xyxy
} cand;

static int cand_cmp(const void* pa, const void* pb) {
  const cand* a = pa;
  const cand* b = pb;
  if (a->score != b->score) {
    return a->score > b->score ? -1 : 1;
  }
  return a->index < b->index ? -1 : (a->index > b->index ? 1 : 0);
}

static float sigmoid_ref(float x) { return 1.0f / (1.0f + expf(-x)); }

// Every anchor scored by the largest sigmoid over its classes, the first class with it;
// candidates above conf, sorted; greedy suppression against the kept ones.
static size_t brute_force(const carve_level* levels, size_t num_levels, size_t nc, const carve_nms_params* p,
                          float* rows) {
  size_t A = 0;
  for (size_t l = 0; l < num_levels; l++) {
    A += levels[l].h * levels[l].w;
  }
  cand* c = malloc((A + 1) * sizeof(cand));
  CHECK(c != NULL);
  size_t n = 0, a = 0;
  for (size_t l = 0; l < num_levels; l++) {
    const carve_level* L = &levels[l];
    for (size_t px = 0; px < L->h * L->w; px++, a++) {
      float best = NAN;
      size_t bc = 0;
      for (size_t k = 0; k < nc; k++) {
        const float x = L->cls[px * L->cls_stride + k];
        if (x != x) {
          continue;
        }
        const float s = sigmoid_ref(x);
        if (best != best || s > best) {
          best = s;
          bc = k;
        }
      }
      if (!(best > p->conf)) {
        continue;
      }
      const float* d = L->box + px * L->box_stride;
      const float ax = (float)(px % L->w) + 0.5f, ay = (float)(px / L->w) + 0.5f, s = L->stride;
      const float x1 = ax - d[0], y1 = ay - d[1], x2 = ax + d[2], y2 = ay + d[3];
      volatile float cx = (x1 + x2) / 2.0f * s, cy = (y1 + y2) / 2.0f * s, w = (x2 - x1) * s, h = (y2 - y1) * s;
      cand* q = &c[n++];
      q->score = best;
      q->index = a;
      q->cls = bc;
      q->row[0] = cx - w / 2.0f;
      q->row[1] = cy - h / 2.0f;
      q->row[2] = cx + w / 2.0f;
      q->row[3] = cy + h / 2.0f;
      const float off = p->agnostic ? 0.0f : (float)bc * 7680.0f;
      for (int k = 0; k < 4; k++) {
        q->box[k] = q->row[k] + off;
      }
      volatile float area = (q->box[2] - q->box[0]) * (q->box[3] - q->box[1]);
      q->box[4] = area;
    }
  }
  qsort(c, n, sizeof(cand), cand_cmp);
  size_t kept = 0;
  cand** keep = malloc((n + 1) * sizeof(cand*));
  CHECK(keep != NULL);
  for (size_t i = 0; i < n && kept < p->max_det; i++) {
    int gone = 0;
    for (size_t j = 0; j < kept && !gone; j++) {
      const float* A_ = keep[j]->box;
      const float* B = c[i].box;
      const float w = fmaxf(0.0f, fminf(A_[2], B[2]) - fmaxf(A_[0], B[0]));
      const float h = fmaxf(0.0f, fminf(A_[3], B[3]) - fmaxf(A_[1], B[1]));
      const float inter = w * h;
      gone = (double)(inter / (A_[4] + B[4] - inter)) > p->iou;
    }
    if (!gone) {
      keep[kept] = &c[i];
      float* r = rows + kept * 6;
      memcpy(r, c[i].row, sizeof c[i].row);
      r[4] = c[i].score;
      r[5] = (float)c[i].cls;
      kept++;
    }
  }
  free(keep);
  free(c);
  return kept;
}

// ---- Cases ----------------------------------------------------------------------

typedef struct level_data {
  float* box;
  float* cls;
} level_data;

// Three levels (h x w given for the first, halved twice, at least 1), strides 8 / 16 / 32, row strides wider
// than the channels; logits from `vocab` values (heavy ties) or normal, some NaN / +-inf.
static void make_levels(test_rng* r, size_t h, size_t w, size_t nc, int vocab, carve_level* levels, level_data* d) {
  for (size_t l = 0; l < 3; l++) {
    const size_t lh = h > 1 ? h : 1, lw = w > 1 ? w : 1, bs = 6, cs = nc + 3;
    d[l].box = malloc(lh * lw * bs * sizeof(float));
    d[l].cls = malloc(lh * lw * cs * sizeof(float));
    CHECK(d[l].box && d[l].cls);
    for (size_t i = 0; i < lh * lw * bs; i++) {
      d[l].box[i] = vocab ? (float)(1 + rng_below(r, 3)) : rng_range(r, 0.5f, 4.0f);
    }
    for (size_t i = 0; i < lh * lw * cs; i++) {
      float v = vocab ? (float)((int)rng_below(r, (size_t)vocab) - vocab / 2) : rng_normal(r) * 2.0f;
      const size_t pick = rng_below(r, 200);
      if (pick == 0) {
        v = NAN;
      } else if (pick == 1) {
        v = INFINITY;
      } else if (pick == 2) {
        v = -INFINITY;
      } else if (pick == 3) {
        v = 40.0f + (float)rng_below(r, 4);  // saturated sigmoid: 1.0f
      }
      d[l].cls[i] = v;
    }
    levels[l] = (carve_level){d[l].box, bs, d[l].cls, cs, NULL, 0, lh, lw, (float)(8u << l)};
    h /= 2;
    w /= 2;
  }
}

static void free_levels(level_data* d) {
  for (int l = 0; l < 3; l++) {
    free(d[l].box);
    free(d[l].cls);
  }
}

static void check_case(test_rng* r, size_t h, size_t w, size_t nc, int vocab, float conf, int agnostic,
                       size_t max_det, pthreadpool_t* pools) {
  carve_level levels[3];
  level_data d[3];
  make_levels(r, h, w, nc, vocab, levels, d);
  size_t A = 0;
  for (int l = 0; l < 3; l++) {
    A += levels[l].h * levels[l].w;
  }
  const carve_nms_params p = {conf, 0.7, agnostic, max_det};
  const size_t cap = max_det < A ? max_det : A;
  float* ref = malloc((cap + 1) * 6 * sizeof(float));
  float* got = malloc((cap + 1) * 6 * sizeof(float));
  void* scratch = malloc(carve_nms_scratch_bytes(A));
  CHECK(ref && got && scratch);
  const size_t n_ref = brute_force(levels, 3, nc, &p, ref);
  for (int t = 0; t < 3; t++) {
    size_t n = 12345;
    fill_canary(got, (cap + 1) * 6);
    CHECK(carve_nms_postprocess(levels, 3, nc, 0, CARVE_E2E_DETECT, &p, scratch, got, &n, pools[t]) == CARVE_OK);
    CHECK_MSG(n == n_ref, "%zux%zu nc %zu vocab %d conf %g agnostic %d max_det %zu pool %d: %zu rows, brute force %zu",
              h, w, nc, vocab, (double)conf, agnostic, max_det, t, n, n_ref);
    CHECK(memcmp(got, ref, n * 6 * sizeof(float)) == 0);
    CHECK(is_canary(got[n * 6]));  // nothing past the rows
  }
  free(ref);
  free(got);
  free(scratch);
  free_levels(d);
}

// ---- Hand-worked ----------------------------------------------------------------

// One level of 1 x 4 anchors, stride 10, 2 classes. Anchor boxes (ltrb in grid units) and best classes:
//   a0: ltrb (1,1,1,1) -> [-5,-5,15,15], class 0, score sigmoid(3)
//   a1: ltrb (1,1,1,1) -> [ 5,-5,25,15], class 0, score sigmoid(2): IoU with a0 = 100/700: kept
//   a2: ltrb (2,1,0,1) -> [ 5,-5,25,15], class 1, score sigmoid(1): same box as a1, other class
//   a3: ltrb (1,1,1,1) -> [25,-5,45,15], class 1, score sigmoid(-3): below conf 0.25
static void hand_worked(void) {
  float box[4 * 4] = {1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 0, 1, 1, 1, 1, 1};
  float cls[4 * 2] = {3, -9, 2, -9, -9, 1, -9, -3};
  const carve_level L = {box, 4, cls, 2, NULL, 0, 1, 4, 10.0f};
  float rows[4 * 6];
  uint64_t scratch[4 * 4];
  size_t n = 99;
  carve_nms_params p = {0.25f, 0.7, 0, 300};
  CHECK(carve_nms_postprocess(&L, 1, 2, 0, CARVE_E2E_DETECT, &p, scratch, rows, &n, NULL) == CARVE_OK);
  CHECK(n == 3);
  const float want[3][6] = {{-5, -5, 15, 15, 0, 0}, {5, -5, 25, 15, 0, 0}, {5, -5, 25, 15, 0, 1}};
  const float logit[3] = {3, 2, 1};
  for (int i = 0; i < 3; i++) {
    for (int k = 0; k < 6; k++) {
      CHECK(rows[i * 6 + k] == (k == 4 ? sigmoid_ref(logit[i]) : want[i][k]));
    }
  }
  p.agnostic = 1;  // a2's box is a1's: removed by it once classes do not matter
  CHECK(carve_nms_postprocess(&L, 1, 2, 0, CARVE_E2E_DETECT, &p, scratch, rows, &n, NULL) == CARVE_OK);
  CHECK(n == 2 && rows[6 + 5] == 0.0f);
  p.iou = 0.1;  // IoU(a0, a1) = 1/7 > 0.1: a1 goes too
  CHECK(carve_nms_postprocess(&L, 1, 2, 0, CARVE_E2E_DETECT, &p, scratch, rows, &n, NULL) == CARVE_OK);
  CHECK(n == 1 && rows[0] == -5.0f);
  p = (carve_nms_params){0.25f, 0.7, 0, 2};  // max_det cuts the kept boxes
  CHECK(carve_nms_postprocess(&L, 1, 2, 0, CARVE_E2E_DETECT, &p, scratch, rows, &n, NULL) == CARVE_OK);
  CHECK(n == 2);
  p = (carve_nms_params){0.01f, 0.7, 0, 300};  // a3 joins
  CHECK(carve_nms_postprocess(&L, 1, 2, 0, CARVE_E2E_DETECT, &p, scratch, rows, &n, NULL) == CARVE_OK);
  CHECK(n == 4 && rows[3 * 6] == 25.0f);
  p.conf = NAN;  // nothing scores above NaN
  CHECK(carve_nms_postprocess(&L, 1, 2, 0, CARVE_E2E_DETECT, &p, scratch, rows, &n, NULL) == CARVE_OK);
  CHECK(n == 0);
}

// ---- Refusals ----------------------------------------------------------------------

static void refusals(void) {
  float box[4] = {1, 1, 1, 1}, cls[2] = {3, 0}, ext[3] = {0};
  const carve_level L = {box, 4, cls, 2, ext, 3, 1, 1, 8.0f};
  uint64_t scratch[8];
  float rows[16];
  const carve_nms_params ok = {0.25f, 0.7, 0, 300};
  size_t n = 7;
  CHECK(carve_nms_postprocess(&L, 1, 2, 0, CARVE_E2E_DETECT, &ok, scratch, rows, NULL, NULL) ==
        CARVE_ERR_INVALID_ARGUMENT);
#define REFUSED(...)                                                                    \
  do {                                                                                  \
    n = 7;                                                                              \
    fill_canary(rows, 16);                                                              \
    CHECK(carve_nms_postprocess(__VA_ARGS__, rows, &n, NULL) == CARVE_ERR_INVALID_ARGUMENT); \
    CHECK(n == 0 && is_canary(rows[0]));                                                \
  } while (0)
  REFUSED(NULL, 1, 2, 0, CARVE_E2E_DETECT, &ok, scratch);
  REFUSED(&L, 1, 2, 0, CARVE_E2E_DETECT, NULL, scratch);
  REFUSED(&L, 1, 2, 0, CARVE_E2E_DETECT, &ok, NULL);
  REFUSED(&L, 1, 0, 0, CARVE_E2E_DETECT, &ok, scratch);
  REFUSED(&L, 1, 2, 0, CARVE_E2E_DETECT, &ok, (char*)scratch + 4);  // not 8-byte aligned
  REFUSED(&L, 1, 2, 0, (carve_e2e_task)9, &ok, scratch);
  REFUSED(&L, 1, 2, 4, CARVE_E2E_POSE, &ok, scratch);  // keypoints come in threes
  REFUSED(&L, 1, 2, 2, CARVE_E2E_OBB, &ok, scratch);   // one angle
  const carve_level no_extra = {box, 4, cls, 2, NULL, 0, 1, 1, 8.0f};
  REFUSED(&no_extra, 1, 2, 3, CARVE_E2E_POSE, &ok, scratch);
  const double bad_iou[] = {-0.1, 1.5, NAN};
  for (size_t i = 0; i < 3; i++) {
    const carve_nms_params p = {0.25f, bad_iou[i], 0, 300};
    REFUSED(&L, 1, 2, 0, CARVE_E2E_DETECT, &p, scratch);
  }
  // Not refused: no rows to write.
  const carve_nms_params none = {0.25f, 0.7, 0, 0};
  CHECK(carve_nms_postprocess(&L, 1, 2, 0, CARVE_E2E_DETECT, &none, scratch, rows, &n, NULL) == CARVE_OK && n == 0);
  CHECK(carve_nms_postprocess(&L, 0, 2, 0, CARVE_E2E_DETECT, &ok, scratch, rows, &n, NULL) == CARVE_OK && n == 0);
  CHECK(carve_nms_postprocess(&L, 1, 2, 3, CARVE_E2E_POSE, &ok, scratch, rows, &n, NULL) == CARVE_OK && n == 1);
  CHECK(carve_nms_scratch_bytes(100) == CARVE_NMS_SCRATCH_BYTES(100) && carve_nms_scratch_bytes(SIZE_MAX) == SIZE_MAX);
#undef REFUSED
}

int main(void) {
  refusals();
  hand_worked();
  pthreadpool_t pools[3] = {NULL, make_pool2(), pthreadpool_create(3)};
  CHECK(pools[2] != NULL);
  test_rng r = {2026};
  const size_t nc_list[] = {1, 3, 80};
  const size_t det_list[] = {1, 7, 100000};
  int cases = 0;
  for (size_t a = 0; a < 3; a++) {
    for (int vocab = 0; vocab <= 6; vocab += 6) {
      for (int agnostic = 0; agnostic <= 1; agnostic++) {
        for (size_t m = 0; m < 3; m++) {
          check_case(&r, 13 + 6 * a, 11 + 4 * a, nc_list[a], vocab, vocab ? 0.1f : 0.25f, agnostic, det_list[m],
                     pools);
          cases++;
        }
      }
    }
  }
  check_case(&r, 80, 80, 80, 0, 0.25f, 0, 300, pools);  // a 640x640 head: A = 8400
  check_case(&r, 80, 80, 80, 8, 0.05f, 1, 300, pools);
  cases += 2;
  pthreadpool_destroy(pools[1]);
  pthreadpool_destroy(pools[2]);
  printf("runtime_nms: refusals, hand-worked case and %d brute-force cases (1 / 2 / 3 threads) OK\n", cases);
  return 0;
}
