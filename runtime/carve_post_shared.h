// carve runtime, internal: what the two box heads' post-processing share (carve_post.c, the
// end-to-end top-k; carve_nms.c, the one-to-many head + NMS): the ranking keys and their heap,
// the NaN-ignoring maximum of a class row, the sigmoid, and the decoding of one anchor's rotated
// box and extras. Not part of the API.
//
// Ranking key of a candidate: (order_bits(score) << 32) | (2^32 - 1 - index), where order_bits
// maps a float to an unsigned integer of the same order (NaN -> 0, below everything). Keys are
// distinct, a larger key ranks higher, and equal scores fall to the lower index.

#ifndef CARVE_POST_SHARED_H
#define CARVE_POST_SHARED_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "carve_post.h"  // carve_level, carve_e2e_task

// Maps a float to bits whose unsigned order is the float order; NaN -> 0 (lowest),
// -0 -> the bits of +0.
static inline uint32_t carve_order_bits(float score) {
  if (score != score) {
    return 0;
  }
  if (score == 0.0f) {
    score = 0.0f;
  }
  uint32_t u;
  memcpy(&u, &score, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Ranking key of candidate `index` (< 2^32) with this score; never 0 for a score that is not
// NaN, so 0 can mark "not a candidate".
static inline uint64_t carve_make_key(float score, size_t index) {
  return ((uint64_t)carve_order_bits(score) << 32) | (uint64_t)(UINT32_MAX - (uint32_t)index);
}

// The candidate index stored in a key.
static inline size_t carve_key_index(uint64_t key) { return (size_t)(UINT32_MAX - (uint32_t)key); }

// sigmoid(x) = 1 / (1 + exp(-x)) in float, as torch.sigmoid.
static inline float carve_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Restores the min-heap order of heap[0 .. n) below position i.
static inline void carve_key_sift_down(uint64_t* heap, size_t n, size_t i) {
  const uint64_t v = heap[i];
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= n) {
      break;
    }
    if (child + 1 < n && heap[child + 1] < heap[child]) {
      child++;
    }
    if (heap[child] >= v) {
      break;
    }
    heap[i] = heap[child];
    i = child;
  }
  heap[i] = v;
}

// max over c of x[c], ignoring NaN; NaN only when every x[c] is NaN (the value
// of one pass in order keeping x[c] where x[c] > m or m is NaN, except that of a
// +0 and a -0 either may come out; their sigmoids are equal). The maximum is kept
// in CARVE_MAX_LANES lanes (c mod the lane count) from -inf, with one compare and
// select per element and no branch, which NaN never wins; a result of -inf means
// that every x[c] is NaN or -inf, told apart by a second pass. 12x faster than the
// branchy single pass over the 8400 x 80 class scores of a 640 detect head.
#define CARVE_MAX_LANES 8
static inline float carve_max_ignoring_nan(const float* x, size_t n) {
  float lane[CARVE_MAX_LANES];
  for (size_t l = 0; l < CARVE_MAX_LANES; l++) {
    lane[l] = -INFINITY;
  }
  size_t c = 0;
  for (; c + CARVE_MAX_LANES <= n; c += CARVE_MAX_LANES) {
    for (size_t l = 0; l < CARVE_MAX_LANES; l++) {
      lane[l] = x[c + l] > lane[l] ? x[c + l] : lane[l];
    }
  }
  float m = -INFINITY;
  for (size_t l = 0; l < CARVE_MAX_LANES; l++) {
    m = lane[l] > m ? lane[l] : m;
  }
  for (; c < n; c++) {
    m = x[c] > m ? x[c] : m;
  }
  if (m == -INFINITY) {
    for (c = 0; c < n; c++) {
      if (x[c] == x[c]) {
        return m;  // a -inf, the rest NaN or -inf
      }
    }
    return NAN;  // every x[c] is NaN (or n == 0)
  }
  return m;
}

// The level of flat anchor `a` (levels in order, each h * w anchors) and its pixel in that level.
static inline const carve_level* carve_locate_anchor(const carve_level* levels, size_t num_levels, size_t a,
                                                     size_t* pixel) {
  for (size_t l = 0; l < num_levels; l++) {
    const size_t count = levels[l].h * levels[l].w;
    if (a < count) {
      *pixel = a;
      return &levels[l];
    }
    a -= count;
  }
  *pixel = 0;
  return NULL;  // not reached for a < A
}

// dist2rbox on one anchor: ltrb distances and raw angle -> (cx, cy, w, h) * stride. Each product
// is rounded on its own (volatile: no contraction into an FMA), as PyTorch's elementwise kernels do.
static inline void carve_decode_rbox(const float* ltrb, float theta, float ax, float ay, float s, float* out) {
  const float xf = (ltrb[2] - ltrb[0]) / 2.0f;
  const float yf = (ltrb[3] - ltrb[1]) / 2.0f;
  const float c = cosf(theta), sn = sinf(theta);
  volatile float xc = xf * c, ys = yf * sn, xs = xf * sn, yc = yf * c;
  const float x = xc - ys, y = xs + yc;
  out[0] = (x + ax) * s;
  out[1] = (y + ay) * s;
  out[2] = (ltrb[0] + ltrb[2]) * s;
  out[3] = (ltrb[1] + ltrb[3]) * s;
}

// A row's extras, decoded as the head decodes them at inference: Pose26.kpts_decode for
// keypoints ((raw + anchor) * stride for x and y, sigmoid for visibility), else copied raw.
// ax, ay, s: the anchor and stride of the row's box.
static inline void carve_decode_extras(carve_e2e_task task, const float* raw, size_t extra_channels, float ax,
                                       float ay, float s, float* out) {
  if (task == CARVE_E2E_POSE) {
    for (size_t j = 0; j + 3 <= extra_channels; j += 3) {
      out[j] = (raw[j] + ax) * s;
      out[j + 1] = (raw[j + 1] + ay) * s;
      out[j + 2] = carve_sigmoid(raw[j + 2]);
    }
  } else if (extra_channels != 0) {
    memcpy(out, raw, extra_channels * sizeof(float));
  }
}

#endif  // CARVE_POST_SHARED_H
