// Checks the task drawing helpers of carve_io.h: carve_draw_mask's blend
// formula pixel by pixel (alpha 0, 0.5, 1, clamping, NaN), untouched pixels
// outside the mask; carve_draw_keypoints' discs (radius 5, colour per keypoint,
// visibility threshold), COCO limbs in the limb colours (skipped for invisible or
// negative ends), other keypoint counts, NaN and far-away coordinates;
// carve_draw_rotated_box's outline for 0 and 90 degrees, thickness, clipping
// and non-finite input. Mask blending against Ultralytics' Annotator is in
// mask_vs_ultralytics.py.

#include "carve_io.h"
#include "test_common.h"

enum { W = 64, H = 48 };

static uint8_t* pixel(uint8_t* img, int x, int y) { return img + ((size_t)y * W + (size_t)x) * 3; }

static int is_color(uint8_t* img, int x, int y, const uint8_t c[3]) {
  const uint8_t* p = pixel(img, x, y);
  return p[0] == c[0] && p[1] == c[1] && p[2] == c[2];
}

static void fill(uint8_t* img, uint8_t v) { memset(img, v, (size_t)W * H * 3); }

// ---- Masks ------------------------------------------------------------------

static void test_mask(void) {
  test_rng rng = {3};
  static uint8_t img[W * H * 3], orig[W * H * 3], mask[W * H];
  for (size_t i = 0; i < sizeof img; i++) {
    orig[i] = (uint8_t)rng_below(&rng, 256);
  }
  for (size_t i = 0; i < sizeof mask; i++) {
    mask[i] = (uint8_t)(rng_below(&rng, 3) == 0 ? 0 : rng_below(&rng, 255) + 1);
  }
  const uint8_t color[3] = {255, 56, 7};
  const float alphas[] = {0.0f, 0.5f, 0.3f, 1.0f, 2.0f, -1.0f};
  for (size_t a = 0; a < sizeof alphas / sizeof alphas[0]; a++) {
    memcpy(img, orig, sizeof img);
    carve_draw_mask(img, W, H, mask, color, alphas[a]);
    const float alpha = alphas[a] < 0.0f ? 0.0f : (alphas[a] > 1.0f ? 1.0f : alphas[a]);
    for (size_t p = 0; p < (size_t)W * H; p++) {
      for (int c = 0; c < 3; c++) {
        const uint8_t before = orig[p * 3 + (size_t)c], after = img[p * 3 + (size_t)c];
        if (mask[p] == 0) {
          CHECK(after == before);
          continue;
        }
        // Within one unit of the exact blend, truncated.
        const double exact = before * (1.0 - alpha) + color[c] * alpha;
        CHECK_MSG(after <= exact + 1e-3 && after >= floor(exact) - 1.0, "alpha %g: %d vs %g",
                  (double)alpha, after, exact);
        if (alpha == 0.0f) {
          CHECK(after == before);
        }
        if (alpha == 1.0f) {
          CHECK(after == color[c]);
        }
      }
    }
  }
  memcpy(img, orig, sizeof img);
  carve_draw_mask(img, W, H, mask, color, NAN);
  carve_draw_mask(img, W, H, NULL, color, 0.5f);
  carve_draw_mask(img, W, H, mask, NULL, 0.5f);
  carve_draw_mask(NULL, W, H, mask, color, 0.5f);
  carve_draw_mask(img, 0, H, mask, color, 0.5f);
  CHECK(memcmp(img, orig, sizeof img) == 0);
}

// ---- Keypoints ----------------------------------------------------------------

// Ultralytics' pose palette entries as shown (its BGR triples reversed).
static const uint8_t GREEN[3] = {0, 255, 0};      // pose_palette[16]: face points and limbs
static const uint8_t BLUE[3] = {0, 128, 255};     // pose_palette[0] shown: arms
static const uint8_t ORANGE[3] = {255, 153, 51};  // pose_palette[9] shown: hips, legs

static void test_keypoints(void) {
  static uint8_t img[W * H * 3];
  const uint8_t bg[3] = {10, 10, 10};
  float k[17 * 3];
  for (int i = 0; i < 17; i++) {
    k[3 * i] = 5.0f + 3.0f * i;
    k[3 * i + 1] = 20.0f;
    k[3 * i + 2] = 0.1f;  // invisible
  }
  // One visible point (left hip, 11: an orange keypoint): a disc of radius 5, no limbs.
  k[3 * 11] = 30.7f;  // int() -> 30
  k[3 * 11 + 1] = 24.9f;
  k[3 * 11 + 2] = 0.9f;
  fill(img, 10);
  carve_draw_keypoints(img, W, H, k, 17, 0.25f);
  CHECK(is_color(img, 30, 24, ORANGE));
  CHECK(is_color(img, 35, 24, ORANGE) && is_color(img, 25, 24, ORANGE));
  CHECK(is_color(img, 30, 29, ORANGE) && is_color(img, 30, 19, ORANGE));
  CHECK(is_color(img, 36, 24, bg) && is_color(img, 30, 30, bg));
  CHECK(is_color(img, 34, 27, ORANGE) && is_color(img, 34, 28, bg));  // 16+9 <= 25 < 16+16
  size_t set = 0;
  for (int y = 0; y < H; y++) {
    for (int x = 0; x < W; x++) {
      set += !is_color(img, x, y, bg);
    }
  }
  CHECK(set == 81);  // lattice points with dx^2 + dy^2 <= 25

  // A face point is green; the min_visibility threshold is inclusive (v < t skips).
  k[3 * 0 + 2] = 0.25f;
  k[3 * 0] = 8.0f;
  k[3 * 0 + 1] = 8.0f;
  fill(img, 10);
  carve_draw_keypoints(img, W, H, k, 17, 0.25f);
  CHECK(is_color(img, 8, 8, GREEN));

  // Limb 16-14 (left ankle to left knee, 1-based) is orange; the line's middle
  // is far from both discs.
  for (int i = 0; i < 17; i++) {
    k[3 * i + 2] = 0.0f;
  }
  k[3 * 15] = 5.0f, k[3 * 15 + 1] = 40.0f, k[3 * 15 + 2] = 1.0f;
  k[3 * 13] = 55.0f, k[3 * 13 + 1] = 40.0f, k[3 * 13 + 2] = 1.0f;
  fill(img, 10);
  carve_draw_keypoints(img, W, H, k, 17, 0.5f);
  CHECK(is_color(img, 30, 40, ORANGE));
  CHECK(is_color(img, 30, 42, bg));  // thin: lw = 2 on 64x48, limbs ceil(2 / 2) = 1 wide
  // An arm limb (7-9, left shoulder to left elbow) is blue, over its end points.
  for (int i = 0; i < 17; i++) {
    k[3 * i + 2] = 0.0f;
  }
  k[3 * 6] = 10.0f, k[3 * 6 + 1] = 5.0f, k[3 * 6 + 2] = 1.0f;
  k[3 * 8] = 10.0f, k[3 * 8 + 1] = 45.0f, k[3 * 8 + 2] = 1.0f;
  fill(img, 10);
  carve_draw_keypoints(img, W, H, k, 17, 0.5f);
  CHECK(is_color(img, 10, 25, BLUE) && is_color(img, 10, 5, BLUE));
  // An end with a negative pixel coordinate drops the limb, not the other point.
  k[3 * 6 + 1] = -3.0f;
  fill(img, 10);
  carve_draw_keypoints(img, W, H, k, 17, 0.5f);
  CHECK(is_color(img, 10, 25, bg) && is_color(img, 10, 45, BLUE));
  CHECK(is_color(img, 10, 1, BLUE));  // the disc around (10, -3) is clipped, still drawn

  // NaN and far-away points draw nothing and do not crash.
  k[3 * 8] = NAN;
  k[3 * 6] = 1e30f;
  fill(img, 10);
  carve_draw_keypoints(img, W, H, k, 17, 0.5f);
  for (size_t i = 0; i < (size_t)W * H * 3; i++) {
    CHECK(img[i] == 10);
  }
  // Other keypoint counts: discs only, palette colours (as shown).
  float two[6] = {10.0f, 10.0f, 1.0f, 50.0f, 10.0f, 1.0f};
  fill(img, 10);
  carve_draw_keypoints(img, W, H, two, 2, 0.5f);
  uint8_t c0[3], shown0[3];
  carve_palette_color(0, c0);
  shown0[0] = c0[2], shown0[1] = c0[1], shown0[2] = c0[0];
  CHECK(is_color(img, 10, 10, shown0) && is_color(img, 30, 10, bg));
  carve_draw_keypoints(NULL, W, H, two, 2, 0.5f);
  carve_draw_keypoints(img, W, H, NULL, 2, 0.5f);
  carve_draw_keypoints(img, W, H, two, 0, 0.5f);
}

// ---- Rotated boxes -------------------------------------------------------------

static void test_rotated_box(void) {
  static uint8_t img[W * H * 3];
  const uint8_t red[3] = {255, 0, 0}, bg[3] = {0, 0, 0};
  fill(img, 0);
  carve_draw_rotated_box(img, W, H, 20.0f, 15.0f, 20.0f, 10.0f, 0.0f, red, 1);
  // Corners (30, 20), (30, 10), (10, 10), (10, 20): the outline only.
  for (int x = 10; x <= 30; x++) {
    CHECK(is_color(img, x, 10, red) && is_color(img, x, 20, red));
  }
  for (int y = 10; y <= 20; y++) {
    CHECK(is_color(img, 10, y, red) && is_color(img, 30, y, red));
  }
  CHECK(is_color(img, 20, 15, bg) && is_color(img, 9, 15, bg) && is_color(img, 31, 15, bg));
  CHECK(is_color(img, 11, 11, bg) && is_color(img, 20, 9, bg));

  // 90 degrees: the same box standing up (corners within a pixel of the swap).
  fill(img, 0);
  carve_draw_rotated_box(img, W, H, 32.0f, 24.0f, 20.0f, 10.0f, (float)(3.14159265358979 / 2),
                         red, 1);
  CHECK(is_color(img, 32, 14, red) && is_color(img, 32, 34, red));  // top and bottom edges
  CHECK(is_color(img, 27, 24, red) || is_color(img, 26, 24, red));  // left edge
  CHECK(is_color(img, 37, 24, red) || is_color(img, 36, 24, red));  // right edge
  CHECK(is_color(img, 32, 24, bg));

  // Thickness 2 and 3: 3 and 5 pixels across, as cv2.line; the inside still empty.
  fill(img, 0);
  carve_draw_rotated_box(img, W, H, 20.0f, 20.0f, 20.0f, 20.0f, 0.0f, red, 2);
  CHECK(is_color(img, 9, 20, red) && is_color(img, 10, 20, red) && is_color(img, 11, 20, red));
  CHECK(is_color(img, 8, 20, bg) && is_color(img, 12, 20, bg) && is_color(img, 20, 20, bg));
  fill(img, 0);
  carve_draw_rotated_box(img, W, H, 20.0f, 20.0f, 20.0f, 20.0f, 0.0f, red, 3);
  CHECK(is_color(img, 8, 20, red) && is_color(img, 12, 20, red));
  CHECK(is_color(img, 7, 20, bg) && is_color(img, 13, 20, bg) && is_color(img, 20, 20, bg));

  // 45 degrees, partly outside the image, huge and non-finite boxes: no crash.
  fill(img, 0);
  carve_draw_rotated_box(img, W, H, 0.0f, 0.0f, 80.0f, 30.0f, 0.785398f, red, 2);
  carve_draw_rotated_box(img, W, H, 1e30f, -1e30f, 1e30f, 1e30f, 1.0f, red, 5);
  carve_draw_rotated_box(img, W, H, 10.0f, 10.0f, 1e9f, 1e9f, 0.3f, red, 1000000);
  fill(img, 0);
  carve_draw_rotated_box(img, W, H, NAN, 10.0f, 5.0f, 5.0f, 0.0f, red, 1);
  carve_draw_rotated_box(img, W, H, 10.0f, 10.0f, 5.0f, 5.0f, INFINITY, red, 1);
  carve_draw_rotated_box(img, W, H, 500.0f, 500.0f, 5.0f, 5.0f, 0.0f, red, 1);  // outside
  for (size_t i = 0; i < (size_t)W * H * 3; i++) {
    CHECK(img[i] == 0);
  }
  carve_draw_rotated_box(NULL, W, H, 10.0f, 10.0f, 5.0f, 5.0f, 0.0f, red, 1);
  carve_draw_rotated_box(img, W, H, 10.0f, 10.0f, 5.0f, 5.0f, 0.0f, NULL, 1);
  carve_draw_rotated_box(img, -1, H, 10.0f, 10.0f, 5.0f, 5.0f, 0.0f, red, 1);
}

int main(void) {
  test_mask();
  test_keypoints();
  test_rotated_box();
  printf("runtime_draw: masks, keypoints, rotated boxes ok\n");
  return 0;
}
