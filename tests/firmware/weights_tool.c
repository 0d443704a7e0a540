// Exercises runtime/carve_weights.c for weights_file.py, which compares it with numpy and zlib:
//   weights_tool f16             writes carve_f16_to_f32() of all 65536 halves (little-endian float32) to stdout
//   weights_tool crc FILE        prints carve_crc32() of the file's bytes in hex

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carve_weights.h"

static int f16(void) {
  static uint8_t halves[65536 * 2];
  static float out[65536];
  for (uint32_t i = 0; i < 65536; i++) {
    halves[2 * i] = (uint8_t)(i & 0xffu);
    halves[2 * i + 1] = (uint8_t)(i >> 8);
  }
  carve_f16_to_f32(halves, out, 65536);
  return fwrite(out, sizeof(float), 65536, stdout) == 65536 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "f16") == 0) {
    return f16();
  }
  if (argc != 3) {
    fprintf(stderr, "usage: weights_tool f16 | crc FILE\n");
    return 2;
  }
  void* data = NULL;
  size_t bytes = 0;
  carve_status s = carve_weights_read_file(argv[2], &data, &bytes);
  if (s != CARVE_OK) {
    fprintf(stderr, "weights_tool: %s: %s\n", argv[2], carve_status_str(s));
    return 1;
  }
  if (strcmp(argv[1], "crc") == 0) {
    printf("%08x %zu\n", (unsigned)carve_crc32(data, bytes), bytes);
  }
  free(data);
  return 0;
}
