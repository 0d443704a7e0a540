// Exercises runtime/carve_weights.c for weights_file.py and f16.py, which compare it with numpy and zlib:
//   weights_tool f16             writes carve_f16_to_f32() of all 65536 halves (little-endian float32) to stdout
//   weights_tool crc FILE        prints carve_crc32() of the file's bytes in hex
//   weights_tool expand PAYLOAD PIECES TOTAL CHUNK
//                                writes the TOTAL floats carve_weights_expand() rebuilds from the halves in the file
//                                PAYLOAD with the pieces in the text file PIECES (one a line: kind flags dst count
//                                src channels cin bias_dst bn_src eps-bits ndim dims[6] steps[6]), CHUNK floats
//                                per call (0: one call), to stdout

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

static int expand(const char* payload_path, const char* pieces_path, size_t total, size_t chunk) {
  void* payload = NULL;
  size_t bytes = 0;
  if (carve_weights_read_file(payload_path, &payload, &bytes) != CARVE_OK) {
    fprintf(stderr, "weights_tool: cannot read %s\n", payload_path);
    return 1;
  }
  FILE* f = fopen(pieces_path, "r");
  size_t n = 0, cap = 0;
  carve_weights_piece* pieces = NULL;
  unsigned kind, flags, eps_bits;
  size_t v[7], ndim;
  while (f != NULL && fscanf(f, "%u %u %zu %zu %zu %zu %zu %zu %zu %x %zu", &kind, &flags, &v[0], &v[1], &v[2], &v[3],
                             &v[4], &v[5], &v[6], &eps_bits, &ndim) == 11) {
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      pieces = realloc(pieces, cap * sizeof(*pieces));
    }
    carve_weights_piece* p = &pieces[n++];
    memset(p, 0, sizeof(*p));
    p->kind = (carve_weights_piece_kind)kind;
    p->flags = flags;
    p->dst = v[0], p->count = v[1], p->src = v[2], p->channels = v[3], p->cin = v[4], p->bias_dst = v[5];
    p->bn_src = v[6];
    memcpy(&p->eps, &eps_bits, sizeof(p->eps));
    p->ndim = ndim;
    for (int j = 0; j < 2 * CARVE_WEIGHTS_MAX_DIMS; j++) {
      size_t x = 0;
      if (fscanf(f, "%zu", &x) != 1) {
        return 2;
      }
      *(j < CARVE_WEIGHTS_MAX_DIMS ? &p->dims[j] : &p->steps[j - CARVE_WEIGHTS_MAX_DIMS]) = x;
    }
  }
  if (f == NULL) {
    return 2;
  }
  fclose(f);
  float* out = malloc((chunk ? chunk : total) * sizeof(float) + 4);
  for (size_t first = 0; first < total;) {
    const size_t count = chunk && total - first > chunk ? chunk : total - first;
    carve_status s = carve_weights_expand(payload, bytes, pieces, n, total, first, out, count);
    if (s != CARVE_OK) {
      fprintf(stderr, "weights_tool: carve_weights_expand: %s\n", carve_status_str(s));
      return 1;
    }
    if (fwrite(out, sizeof(float), count, stdout) != count) {
      return 1;
    }
    first += count;
  }
  free(out);
  free(pieces);
  free(payload);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "f16") == 0) {
    return f16();
  }
  if (argc == 6 && strcmp(argv[1], "expand") == 0) {
    return expand(argv[2], argv[3], (size_t)strtoull(argv[4], NULL, 10), (size_t)strtoull(argv[5], NULL, 10));
  }
  if (argc != 3) {
    fprintf(stderr, "usage: weights_tool f16 | crc FILE | expand PAYLOAD PIECES TOTAL CHUNK\n");
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
