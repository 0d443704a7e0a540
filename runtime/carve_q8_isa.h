// carve runtime, internal: what carve_q8.c shares with the instruction-set variants of carve_q8_run_pool
// (carve_q8_pool*.c): an op's resolved views (carve_q8_task) and the entry that runs an op on the pool with a
// variant's item loops for the kinds it takes, carve_q8.c's own for the rest. Not part of the package's API.
//
// Plain C11, no instruction set of its own: carve_q8.c (every int8 package, the Cortex-M firmware included)
// includes it; carve_q8_run does not go through it.

#ifndef CARVE_Q8_ISA_H
#define CARVE_Q8_ISA_H

#include <stddef.h>
#include <stdint.h>

#include "carve_q8.h"

#ifdef __cplusplus
extern "C" {
#endif

// A CONV's record (carve_q8.h's layout), read in place.
typedef struct carve_q8_conv_params {
  const int32_t* bias;   // (cout)
  const int32_t* mul;    // (cout)
  const int32_t* shift;  // (cout)
  const int8_t* w;       // carve_q8.h's layout
  const int8_t* lut;     // int8[256] or NULL
} carve_q8_conv_params;

// One op, checked, with its views resolved: the context of every tile.
typedef struct carve_q8_task {
  const carve_q8_desc* d;
  carve_q8_conv_params p;  // CONV
  const uint8_t* x;        // the input view (int8, or float32 for QUANTIZE)
  const uint8_t* x2;       // ADD's second input
  uint8_t* y;              // the output view (int8, or float32 for DEQUANTIZE)
} carve_q8_task;

// An instruction set's item loops: takes(d) says whether it has loops for this op (checked once per op, after the
// argument checks); items(task, start, count) computes the op's items [start, start + count) (carve_q8.c's items:
// output rows of CONV and MAXPOOL, input rows of UPSAMPLE2X, pixels of the others), each item's bytes exactly
// carve_q8_run's.
typedef struct carve_q8_isa_loops {
  int (*takes)(const carve_q8_desc* d);
  void (*items)(void* task, size_t start, size_t count);
} carve_q8_isa_loops;

// carve_q8_run_pool with `loops` for the ops it takes (NULL: none): the same argument checks and tiles.
carve_status carve_q8_run_pool_loops(const carve_q8_desc* d, const uint8_t* blob, uint8_t* arena,
                                     pthreadpool_t pool, const carve_q8_isa_loops* loops);

// ADD's int32 form applies (carve_q8.c, add_i32): shift in [17, 47], multipliers in [0, 2^31 - 2^15].
#define CARVE_Q8_ADD_I32_MAX_MUL (INT32_MAX - (1 << 15))  // mh = (m + 2^15) >> 16 stays below 2^15

static inline int carve_q8_add_i32_ok(const carve_q8_desc* d) {
  return d->shift >= 17 && d->shift <= 47 && d->mul_a >= 0 && d->mul_a <= CARVE_Q8_ADD_I32_MAX_MUL &&
         d->mul_b >= 0 && d->mul_b <= CARVE_Q8_ADD_I32_MAX_MUL;
}

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8_ISA_H
