// Helper for ops_vs_torch.py: runs carve_epilogue (SiLU) and carve_attention on
// .npy inputs.
//
//   ops_tool silu IN.npy OUT.npy                       IN (pixels, channels)
//   ops_tool attention QKV.npy HEADS KEY_DIM HEAD_DIM OUT.npy V_OUT.npy
//                                                      QKV (n, heads * (2*key_dim + head_dim))

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carve_io.h"
#include "carve_attention.h"
#include "carve_epilogue.h"

static int fail(const char* what, const char* path, carve_status s) {
  fprintf(stderr, "ops_tool: %s %s: %s\n", what, path, carve_status_str(s));
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s silu IN OUT | attention QKV HEADS KD HD OUT V_OUT\n", argv[0]);
    return 2;
  }
  float* x = NULL;
  size_t shape[CARVE_NPY_MAX_DIMS];
  int ndim = 0;
  carve_status s = carve_npy_read_f32(argv[2], &x, shape, &ndim);
  if (s != CARVE_OK) {
    return fail("reading", argv[2], s);
  }
  if (ndim != 2) {
    fprintf(stderr, "ops_tool: %s: expected 2 dims\n", argv[2]);
    return 1;
  }
  if (strcmp(argv[1], "silu") == 0) {
    carve_epilogue(x, shape[1], NULL, 0, shape[0], shape[1], CARVE_ACT_SILU, NULL);
    if ((s = carve_npy_write_f32(argv[3], x, shape, 2)) != CARVE_OK) {
      return fail("writing", argv[3], s);
    }
  } else if (strcmp(argv[1], "attention") == 0 && argc == 8) {
    const size_t heads = strtoul(argv[3], NULL, 10), kd = strtoul(argv[4], NULL, 10);
    const size_t hd = strtoul(argv[5], NULL, 10), n = shape[0];
    if (shape[1] != heads * (2 * kd + hd)) {
      fprintf(stderr, "ops_tool: qkv has %zu channels, expected %zu\n", shape[1],
              heads * (2 * kd + hd));
      return 1;
    }
    float* out = malloc(n * heads * hd * sizeof(float));
    float* v_out = malloc(n * heads * hd * sizeof(float));
    float* scratch = malloc(carve_attention_scratch_floats(n, heads, kd) * sizeof(float));
    if (out == NULL || v_out == NULL || scratch == NULL) {
      fprintf(stderr, "ops_tool: out of memory\n");
      return 1;
    }
    carve_attention(x, shape[1], n, heads, kd, hd, 1.0f / sqrtf((float)kd), out, heads * hd, v_out,
                    heads * hd, scratch, NULL);
    const size_t out_shape[2] = {n, heads * hd};
    if ((s = carve_npy_write_f32(argv[6], out, out_shape, 2)) != CARVE_OK) {
      return fail("writing", argv[6], s);
    }
    if ((s = carve_npy_write_f32(argv[7], v_out, out_shape, 2)) != CARVE_OK) {
      return fail("writing", argv[7], s);
    }
    free(out);
    free(v_out);
    free(scratch);
  } else {
    fprintf(stderr, "ops_tool: unknown op or wrong arguments\n");
    return 2;
  }
  free(x);
  return 0;
}
