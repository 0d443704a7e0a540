// The firmware harness (tests/firmware/m7): one carve package in static buffers (create_with, no allocator), one
// run on an image linked into the program, the result printed in a stable text format. The same source runs
// bare-metal on an emulated Cortex-M7 (fw_m7.c, startup_m7.S, mps2_an500.ld) and on the host (fw_host.c);
// tests/firmware/qemu_m7.py builds both and compares what they print.
//
// fw_model.h, written by qemu_m7.py beside the package, names the model:
//   #include "<name>.h"
//   #define FW_NAME "<name>"             the C name
//   #define FW_T <name>                  the context type
//   #define FW(f) <name>_##f             the API's functions and types
//   #define FW_C(c) <NAME>_##c           the header's constants
//   #define FW_DETECT 1 / FW_CLASSIFY 1  the task
//   #define FW_IMAGE_W / FW_IMAGE_H      the linked image's size (RGB, 8 bits, rows packed)
//   #define FW_IMAGE_SCRATCH_BYTES N     classify only: the run_image scratch of that size
// fw_image.S links the image's bytes as fw_image[] (fw_image.rgb).
//
// Output, one record a line, every number printed twice for a detection: in decimal (score 6 digits, box 3, as
// the package's demo prints --json) and as the float's IEEE-754 bits in hex (exact, for the comparison):
//   carve-fw model <name> platform <p> input <H>x<W> image <w>x<h>
//   det <i> class <id> <class name> score <s> box <x1> <y1> <x2> <y2> bits <s> <x1> <y1> <x2> <y2>
//   top <i> class <id> <class name> prob <p> bits <p>                     (classify)
//   detections <n> | classes <n>
//   image_scratch_bytes <n>                                              (classify)
//   stack_bytes <used> of <reserved>                                     (bare metal only)
//   status <carve_status> <its name>
// main returns the carve_status (bare metal: the semihosting exit status, so qemu's).
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fw_model.h"
#include "fw_port.h"

// ---- The model's memory: static, 64-byte aligned -------------------------------------------------------------

static uint8_t g_context[FW_C(CONTEXT_BYTES)] __attribute__((aligned(64)));
static uint8_t g_arena[FW_C(ARENA_BYTES)] __attribute__((aligned(64)));
static uint8_t g_scratch[FW_C(SCRATCH_BYTES)] __attribute__((aligned(64)));
#if FW_C(WIDE_WEIGHT_BYTES) > 0
static uint8_t g_wide_weights[FW_C(WIDE_WEIGHT_BYTES)] __attribute__((aligned(64)));  // f16: the float32 weights
#endif
#ifdef FW_CLASSIFY
static uint8_t g_image_scratch[FW_IMAGE_SCRATCH_BYTES] __attribute__((aligned(64)));  // resize + crop rows
static FW(class) g_top[FW_C(TOPK)];
#else
static FW(detection) g_dets[FW_C(MAX_DETECTIONS)];
#endif

// The image, (FW_IMAGE_H, FW_IMAGE_W, 3) RGB bytes (fw_image.S).
extern const uint8_t fw_image[];
extern const uint8_t fw_image_end[];

// ---- Text without printf: the same digits from every C library -----------------------------------------------

typedef struct line {
  char buf[512];
  size_t n;
} line;

static void put_str(line* l, const char* s) {
  while (*s != '\0' && l->n + 1 < sizeof l->buf) {
    l->buf[l->n++] = *s++;
  }
  l->buf[l->n] = '\0';
}

static void put_u64(line* l, uint64_t v) {
  char tmp[24];
  size_t i = sizeof tmp;
  tmp[--i] = '\0';
  do {
    tmp[--i] = (char)('0' + v % 10u);
    v /= 10u;
  } while (v != 0u);
  put_str(l, tmp + i);
}

static void put_i64(line* l, int64_t v) {
  if (v < 0) {
    put_str(l, "-");
    put_u64(l, (uint64_t)0 - (uint64_t)v);
  } else {
    put_u64(l, (uint64_t)v);
  }
}

// The float's IEEE-754 bits, 8 hex digits.
static void put_bits(line* l, float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  char tmp[9];
  for (int i = 7; i >= 0; i--) {
    tmp[i] = "0123456789abcdef"[u & 15u];
    u >>= 4;
  }
  tmp[8] = '\0';
  put_str(l, tmp);
}

// v rounded to `digits` decimals (half away from zero, in double: exact for these magnitudes).
static void put_fixed(line* l, float v, int digits) {
  if (isnan(v) || isinf(v)) {
    put_str(l, isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
    return;
  }
  int64_t scale = 1;
  for (int i = 0; i < digits; i++) {
    scale *= 10;
  }
  const int64_t r = (int64_t)llround((double)v * (double)scale);
  const uint64_t a = r < 0 ? (uint64_t)0 - (uint64_t)r : (uint64_t)r;
  if (r < 0) {
    put_str(l, "-");
  }
  put_u64(l, a / (uint64_t)scale);
  put_str(l, ".");
  char frac[24];
  uint64_t f = a % (uint64_t)scale;
  for (int i = digits - 1; i >= 0; i--) {
    frac[i] = (char)('0' + f % 10u);
    f /= 10u;
  }
  frac[digits] = '\0';
  put_str(l, frac);
}

static void emit(line* l) {
  put_str(l, "\n");
  fw_puts(l->buf);
  l->n = 0;
  l->buf[0] = '\0';
}

static int finish(carve_status s) {
  line l = {.n = 0};
  const size_t reserved = fw_stack_size();
  if (reserved > 0) {
    put_str(&l, "stack_bytes ");
    put_u64(&l, fw_stack_used());
    put_str(&l, " of ");
    put_u64(&l, reserved);
    emit(&l);
  }
  put_str(&l, "status ");
  put_i64(&l, (int64_t)s);
  put_str(&l, " ");
  put_str(&l, s == CARVE_OK ? "ok" : carve_status_str(s));
  emit(&l);
  return (int)s;
}

// ---- The run ---------------------------------------------------------------------------------------------------

int main(void) {
  line l = {.n = 0};
  put_str(&l, "carve-fw model " FW_NAME " platform ");
  put_str(&l, fw_platform());
  put_str(&l, " input ");
  put_u64(&l, FW_C(INPUT_H));
  put_str(&l, "x");
  put_u64(&l, FW_C(INPUT_W));
  put_str(&l, " image ");
  put_u64(&l, FW_IMAGE_W);
  put_str(&l, "x");
  put_u64(&l, FW_IMAGE_H);
  emit(&l);
  if ((size_t)(fw_image_end - fw_image) != (size_t)FW_IMAGE_W * FW_IMAGE_H * 3u) {
    put_str(&l, "error: the linked image has ");
    put_u64(&l, (uint64_t)(fw_image_end - fw_image));
    put_str(&l, " bytes, not FW_IMAGE_W x FW_IMAGE_H x 3");
    emit(&l);
    return finish(CARVE_ERR_INVALID_ARGUMENT);
  }

  FW(options) opt;
  FW(default_options)(&opt);
  opt.threads = 1;
  const FW(buffers) buffers = {
      .context = g_context, .context_bytes = sizeof g_context, .arena = g_arena, .arena_bytes = sizeof g_arena,
      .scratch = g_scratch, .scratch_bytes = sizeof g_scratch,
#if FW_C(WIDE_WEIGHT_BYTES) > 0
      .weights = g_wide_weights, .weights_bytes = sizeof g_wide_weights,
#endif
  };
  FW_T* model = NULL;
  carve_status s = FW(create_with)(&opt, &buffers, &model);
  if (s != CARVE_OK) {
    return finish(s);
  }

#ifdef FW_CLASSIFY
  const size_t need = FW(image_scratch_bytes)(FW_IMAGE_W, FW_IMAGE_H);
  put_str(&l, "image_scratch_bytes ");
  put_u64(&l, need);
  emit(&l);
  s = need <= sizeof g_image_scratch ? CARVE_OK : CARVE_ERR_INVALID_ARGUMENT;
  if (s == CARVE_OK) {
    s = FW(run_image)(model, fw_image, FW_IMAGE_W, FW_IMAGE_H, (size_t)FW_IMAGE_W * 3u, g_top, FW_C(TOPK),
                      g_image_scratch, sizeof g_image_scratch);
  }
  if (s == CARVE_OK) {
    for (size_t i = 0; i < FW_C(TOPK); i++) {
      put_str(&l, "top ");
      put_u64(&l, i);
      put_str(&l, " class ");
      put_i64(&l, g_top[i].class_id);
      put_str(&l, " ");
      put_str(&l, FW(class_name)(g_top[i].class_id));
      put_str(&l, " prob ");
      put_fixed(&l, g_top[i].prob, 6);
      put_str(&l, " bits ");
      put_bits(&l, g_top[i].prob);
      emit(&l);
    }
    put_str(&l, "classes ");
    put_u64(&l, FW_C(TOPK));
    emit(&l);
  }
#else
  size_t n = 0;
  s = FW(run_image)(model, fw_image, FW_IMAGE_W, FW_IMAGE_H, (size_t)FW_IMAGE_W * 3u, FW_C(DEFAULT_CONF), g_dets,
                    FW_C(MAX_DETECTIONS), &n);
  if (s == CARVE_OK) {
    for (size_t i = 0; i < n; i++) {
      const FW(detection)* d = &g_dets[i];
      const float v[5] = {d->score, d->x1, d->y1, d->x2, d->y2};
      put_str(&l, "det ");
      put_u64(&l, i);
      put_str(&l, " class ");
      put_i64(&l, d->class_id);
      put_str(&l, " ");
      put_str(&l, FW(class_name)(d->class_id));
      put_str(&l, " score ");
      put_fixed(&l, v[0], 6);
      put_str(&l, " box");
      for (int k = 1; k < 5; k++) {
        put_str(&l, " ");
        put_fixed(&l, v[k], 3);
      }
      put_str(&l, " bits");
      for (int k = 0; k < 5; k++) {
        put_str(&l, " ");
        put_bits(&l, v[k]);
      }
      emit(&l);
    }
    put_str(&l, "detections ");
    put_u64(&l, n);
    emit(&l);
  }
#endif
  FW(destroy)(model);
  return finish(s);
}
