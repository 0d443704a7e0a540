// Helper for xq8_vs_arith.py: runs the xnnpack backend's int8 operators (carve_xnn.c's QCONV, QADD and
// DEQUANTIZE kinds, carve_q8_lut) on cases the script writes, on carve's thread pool.
//
//   xq8_tool CASES.bin RESULTS.bin
//
// CASES.bin (little-endian): "XQ8C", uint32 number of cases, then per case:
//   int64 fields[XQ8_FIELDS]   the carve_xnn_desc in the order of read_desc() (scales: their float32 bits),
//                              then lut_off (QCONV: when not 0, carve_q8_lut applies the table at blob + lut_off
//                              to the output in place after the conv, as the xnnpack package's SiLU step does)
//                              and the number of threads (1: a NULL pool)
//   uint64 blob bytes, the blob; uint64 arena bytes, the arena
// RESULTS.bin: per case, int32 carve_status, uint64 bytes XNNPACK took from the heap scope the operator was
// created in (runtime/carve_xnn.h), then the arena after the call (as many bytes as it came with).
//
// Besides carve_xnn_kind's values, two kinds of this tool only:
//   KIND_LUT (100)           carve_q8_lut from in (in_off, in_stride) to out (out_off, out_stride), h * w pixels of
//                            cin channels, the table at weight_off (in place when in_off == out_off);
//   KIND_XNN_QUANTIZE (101)  XNNPACK's xnn_create_convert_nc_f32_qs8 (out_scale, out_zero) from the float32 view
//                            at in_off: measured against arith.quantize, not used by carve (see the script).

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carve_pool.h"
#include "carve_q8_lut.h"
#include "carve_xnn.h"

#define XQ8_FIELDS 26
#define KIND_LUT 100
#define KIND_XNN_QUANTIZE 101
#define HEAP_BYTES ((size_t)64 << 20)

static int fail(const char* what) {
  fprintf(stderr, "xq8_tool: %s\n", what);
  return 1;
}

static int read_exact(FILE* f, void* p, size_t n) { return n == 0 || fread(p, 1, n, f) == n; }

static int read_u64(FILE* f, uint64_t* v) {
  unsigned char b[8];
  if (!read_exact(f, b, 8)) {
    return 0;
  }
  uint64_t x = 0;
  for (int i = 7; i >= 0; i--) {
    x = (x << 8) | b[i];
  }
  *v = x;
  return 1;
}

static float bits_to_float(int64_t v) {
  const uint32_t bits = (uint32_t)v;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static carve_xnn_desc read_desc(const int64_t v[XQ8_FIELDS]) {
  carve_xnn_desc d;
  memset(&d, 0, sizeof d);
  d.kind = (int)v[0];
  d.kh = (uint32_t)v[1];
  d.kw = (uint32_t)v[2];
  d.stride = (uint32_t)v[3];
  d.pad = (uint32_t)v[4];
  d.groups = (uint32_t)v[5];
  d.cin = (uint32_t)v[6];
  d.cout = (uint32_t)v[7];
  d.h = (uint32_t)v[8];
  d.w = (uint32_t)v[9];
  d.in_stride = (size_t)v[10];
  d.out_stride = (size_t)v[11];
  d.weight_off = (size_t)v[12];
  d.bias_off = (size_t)v[13];
  d.in_off = (size_t)v[14];
  d.in2_off = (size_t)v[15];
  d.out_off = (size_t)v[16];
  d.scale_off = (size_t)v[17];
  d.in_zero = (int32_t)v[18];
  d.in2_zero = (int32_t)v[19];
  d.out_zero = (int32_t)v[20];
  d.in_scale = bits_to_float(v[21]);
  d.in2_scale = bits_to_float(v[22]);
  d.out_scale = bits_to_float(v[23]);
  return d;
}

// XNNPACK's own float -> int8 conversion, for the measurement only.
static carve_status xnn_quantize(const carve_xnn_desc* d, uint8_t* arena, pthreadpool_t pool) {
  xnn_operator_t op = NULL;
  enum xnn_status s = xnn_create_convert_nc_f32_qs8(d->cin, d->in_stride, d->out_stride, d->out_scale,
                                                    (int8_t)d->out_zero, INT8_MIN, INT8_MAX, 0, &op);
  if (s == xnn_status_success) {
    s = xnn_setup_convert_nc_f32_qs8(op, (size_t)d->h * d->w, (const float*)(arena + d->in_off),
                                     (int8_t*)(arena + d->out_off), pool);
  }
  if (s == xnn_status_success) {
    s = xnn_run_operator(op, pool);
  }
  if (op != NULL) {
    xnn_delete_operator(op);
  }
  return s == xnn_status_success ? CARVE_OK : CARVE_ERR_BACKEND;
}

// Runs one case: the operator created (and deleted) in a heap scope over `heap`, whose use is reported.
static carve_status run_case(const carve_xnn_desc* d, size_t lut_off, const uint8_t* blob, uint8_t* arena,
                             pthreadpool_t pool, carve_xnn_heap* heap) {
  if (d->kind == KIND_LUT) {
    return carve_q8_lut((const int8_t*)(arena + d->in_off), d->in_stride, (int8_t*)(arena + d->out_off),
                        d->out_stride, (size_t)d->h * d->w, d->cin, (const int8_t*)(blob + d->weight_off), pool);
  }
  if (d->kind == KIND_XNN_QUANTIZE) {
    return xnn_quantize(d, arena, pool);
  }
  xnn_operator_t op = NULL;
  carve_xnn_heap* previous = carve_xnn_heap_begin(heap);
  carve_status st = carve_xnn_create(d, (const float*)blob, (float*)arena, pool, &op);
  carve_xnn_heap_end(previous);
  if (st == CARVE_OK) {
    st = carve_xnn_run(op, pool);
  }
  if (st == CARVE_OK && d->kind == CARVE_XNN_QCONV && lut_off != 0) {
    int8_t* y = (int8_t*)(arena + d->out_off);
    const size_t oh = (d->h + 2 * d->pad - d->kh) / d->stride + 1, ow = (d->w + 2 * d->pad - d->kw) / d->stride + 1;
    st = carve_q8_lut(y, d->out_stride, y, d->out_stride, oh * ow, d->cout, (const int8_t*)(blob + lut_off), pool);
  }
  previous = carve_xnn_heap_begin(heap);
  carve_xnn_delete_all(&op, 1);
  carve_xnn_heap_end(previous);
  return st;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s CASES.bin RESULTS.bin\n", argv[0]);
    return 2;
  }
  FILE* in = fopen(argv[1], "rb");
  FILE* out = fopen(argv[2], "wb");
  if (in == NULL || out == NULL) {
    return fail("cannot open the files");
  }
  unsigned char head[8];
  if (!read_exact(in, head, sizeof head) || memcmp(head, "XQ8C", 4) != 0) {
    return fail("not an XQ8C cases file");
  }
  const uint32_t cases = head[4] | head[5] << 8 | (uint32_t)head[6] << 16 | (uint32_t)head[7] << 24;
  if (carve_xnn_init() != CARVE_OK) {
    return fail("XNNPACK does not initialize");
  }
  unsigned char* heap_buf = malloc(HEAP_BYTES);
  if (heap_buf == NULL) {
    return fail("out of memory");
  }
  for (uint32_t c = 0; c < cases; c++) {
    int64_t fields[XQ8_FIELDS];
    for (int i = 0; i < XQ8_FIELDS; i++) {
      uint64_t v;
      if (!read_u64(in, &v)) {
        return fail("truncated case");
      }
      fields[i] = (int64_t)v;
    }
    uint64_t blob_n, arena_n;
    if (!read_u64(in, &blob_n)) {
      return fail("truncated case");
    }
    uint8_t* blob = malloc(blob_n ? blob_n : 1);
    if (blob == NULL || !read_exact(in, blob, blob_n) || !read_u64(in, &arena_n)) {
      return fail("truncated case or out of memory");
    }
    uint8_t* arena = malloc(arena_n ? arena_n : 1);
    if (arena == NULL || !read_exact(in, arena, arena_n)) {
      return fail("truncated case or out of memory");
    }
    const carve_xnn_desc d = read_desc(fields);
    const int64_t threads = fields[XQ8_FIELDS - 1];
    pthreadpool_t pool = threads > 1 ? pthreadpool_create((size_t)threads) : NULL;
    if (threads > 1 && pool == NULL) {
      return fail("no thread pool");
    }
    carve_xnn_heap heap;
    carve_xnn_heap_init(&heap, heap_buf, HEAP_BYTES);
    const size_t lut_off = (size_t)fields[XQ8_FIELDS - 2];
    const int32_t status = (int32_t)run_case(&d, lut_off, blob_n ? blob : NULL, arena, pool, &heap);
    if (pool != NULL) {
      pthreadpool_destroy(pool);
    }
    unsigned char rb[12];
    for (int i = 0; i < 4; i++) rb[i] = (unsigned char)((uint32_t)status >> (8 * i));
    for (int i = 0; i < 8; i++) rb[4 + i] = (unsigned char)((uint64_t)heap.used >> (8 * i));
    if (fwrite(rb, 1, sizeof rb, out) != sizeof rb || fwrite(arena, 1, arena_n, out) != arena_n) {
      return fail("cannot write the results");
    }
    free(blob);
    free(arena);
  }
  free(heap_buf);
  if (fclose(out) != 0) {
    return fail("cannot write the results");
  }
  fclose(in);
  return 0;
}
