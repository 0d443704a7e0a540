// carve calibration preprocessor (--precision int8): the images of --calib DIR turned into the network's input
// exactly as a package's demo does before its network runs, with the runtime's own code.
//
// Built once by generator/carve/quant/images.py with the system C compiler, together with runtime/carve_io.c
// (carve_image_load_rgb_msg: stb_image's formats, the Exif orientation of JPEGs), runtime/carve_pre.c
// (carve_letterbox for detect / segment / pose / obb, carve_classify_preprocess for classify) and
// runtime/carve_rt.c, linked with libstb like the demo.
//
//   carve_calib_pre letterbox|classify OUT_W OUT_H < paths (each terminated by a NUL byte)
//
// For each path, in order, one record on stdout:
//   int32 status (0: the image was read; otherwise the carve_status of the failure), int32 source width,
//   int32 source height, uint32 payload bytes, then the payload: (OUT_H, OUT_W, 3) uint8 when status is 0, else
//   the reason as text ("unsupported format: WebP (readable: ...)").
// The preprocessed tensor is value / 255.0f of a uint8 (both functions compute exactly that), so the uint8 is
// written and the generator rebuilds the float32 tensor bit for bit; the tool checks the round trip.
// Exit status: 0 after the last path, 2 for bad arguments, 3 for an output or memory failure.

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carve_io.h"
#include "carve_pre.h"

#define MAX_PATH_BYTES 65536

static int write_record(int32_t status, int32_t w, int32_t h, const void* payload, uint32_t bytes) {
  const int32_t head[3] = {status, w, h};
  if (fwrite(head, sizeof head, 1, stdout) != 1 || fwrite(&bytes, sizeof bytes, 1, stdout) != 1) {
    return 0;
  }
  if (bytes > 0 && fwrite(payload, bytes, 1, stdout) != 1) {
    return 0;
  }
  return fflush(stdout) == 0;
}

static int write_error(int32_t status, const char* why) {
  return write_record(status, 0, 0, why, (uint32_t)strlen(why));
}

// Reads one NUL-terminated path from stdin into buf; 0 at the end of the input.
static int read_path(char* buf, size_t size) {
  size_t n = 0;
  int c;
  while ((c = getchar()) != EOF) {
    if (c == '\0') {
      buf[n] = '\0';
      return 1;
    }
    if (n + 1 < size) {
      buf[n++] = (char)c;
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 4 || (strcmp(argv[1], "letterbox") != 0 && strcmp(argv[1], "classify") != 0)) {
    fprintf(stderr, "usage: carve_calib_pre letterbox|classify OUT_W OUT_H < NUL-separated paths\n");
    return 2;
  }
  const int classify = strcmp(argv[1], "classify") == 0;
  const int out_w = atoi(argv[2]), out_h = atoi(argv[3]);
  if (out_w <= 0 || out_h <= 0 || out_w > 16384 || out_h > 16384 || (classify && out_w != out_h)) {
    fprintf(stderr, "carve_calib_pre: bad output size %s x %s\n", argv[2], argv[3]);
    return 2;
  }
  const size_t n = (size_t)out_w * (size_t)out_h * 3;
  float* tensor = malloc(n * sizeof(float));
  uint8_t* pixels = malloc(n);
  void* scratch = classify ? NULL : malloc(carve_letterbox_scratch_bytes(out_w, out_h));
  char* path = malloc(MAX_PATH_BYTES);
  if (tensor == NULL || pixels == NULL || path == NULL || (!classify && scratch == NULL)) {
    fprintf(stderr, "carve_calib_pre: out of memory\n");
    return 3;
  }
  int ok = 1;
  while (ok && read_path(path, MAX_PATH_BYTES)) {
    uint8_t* rgb = NULL;
    int w = 0, h = 0;
    char why[512];
    carve_status s = carve_image_load_rgb_msg(path, &rgb, &w, &h, why, sizeof why);
    if (s != CARVE_OK) {
      ok = write_error((int32_t)s, why);
      continue;
    }
    if (classify) {
      void* cls_scratch = malloc(carve_classify_scratch_bytes(w, h, out_w) + 64);
      s = cls_scratch == NULL ? CARVE_ERR_OUT_OF_MEMORY
                              : carve_classify_preprocess(rgb, w, h, (size_t)w * 3, out_w, tensor, cls_scratch, NULL);
      free(cls_scratch);
    } else {
      s = carve_letterbox(rgb, w, h, (size_t)w * 3, out_w, out_h, tensor, scratch, NULL, NULL);
    }
    carve_image_free(rgb);
    if (s != CARVE_OK) {
      ok = write_error((int32_t)s, carve_status_str(s));
      continue;
    }
    for (size_t i = 0; i < n; i++) {
      const long q = lrintf(tensor[i] * 255.0f);
      if (q < 0 || q > 255 || (float)q / 255.0f != tensor[i]) {
        fprintf(stderr, "carve_calib_pre: %s: value %.9g is not a uint8 / 255\n", path, (double)tensor[i]);
        return 3;
      }
      pixels[i] = (uint8_t)q;
    }
    ok = write_record(0, w, h, pixels, (uint32_t)n);
  }
  free(tensor);
  free(pixels);
  free(scratch);
  free(path);
  if (!ok) {
    fprintf(stderr, "carve_calib_pre: cannot write to stdout\n");
    return 3;
  }
  return 0;
}
