// The case format the int8 kernel tools share (q8_tool.c, q8conv_tool.c; written by q8_vs_arith.py): every field
// a little-endian uint64, a descriptor as Q8_FIELDS of them in carve_q8_desc's order (the scale as its float32
// bits). Test code only.

#ifndef Q8_CASE_IO_H
#define Q8_CASE_IO_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "carve_q8.h"

#define Q8_FIELDS 26

static inline int read_exact(FILE* f, void* p, size_t n) { return n == 0 || fread(p, 1, n, f) == n; }

static inline int read_u64(FILE* f, uint64_t* v) {
  unsigned char b[8];
  if (!read_exact(f, b, 8)) {
    return 0;
  }
  *v = 0;
  for (int i = 7; i >= 0; i--) {
    *v = (*v << 8) | b[i];
  }
  return 1;
}

static inline carve_q8_desc read_desc(const int64_t v[Q8_FIELDS]) {
  carve_q8_desc d;
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
  d.in2_stride = (size_t)v[11];
  d.out_stride = (size_t)v[12];
  d.in_off = (size_t)v[13];
  d.in2_off = (size_t)v[14];
  d.out_off = (size_t)v[15];
  d.weight_off = (size_t)v[16];
  d.lut_off = (size_t)v[17];
  d.act = (int)v[18];
  d.in_zero = (int32_t)v[19];
  d.in2_zero = (int32_t)v[20];
  d.out_zero = (int32_t)v[21];
  d.mul_a = (int32_t)v[22];
  d.mul_b = (int32_t)v[23];
  d.shift = (int32_t)v[24];
  const uint32_t bits = (uint32_t)v[25];
  memcpy(&d.scale, &bits, sizeof d.scale);
  return d;
}

#endif  // Q8_CASE_IO_H
