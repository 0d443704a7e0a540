// carve runtime: the portable backend's compute kernels, plain C11 and libm.
//
// Generated packages describe every compute op (convolution, transposed
// convolution, max pool, channel copy, add, global average pool, fully
// connected, softmax) by a constant descriptor whose shapes, strides and
// weight / arena offsets are all known at generation time; carve_pt_run()
// executes one on the calling thread. No threads, no allocation, no global
// state; the loops are written so that compilers vectorise them (the inner
// loop of every kernel runs over contiguous channels with a fixed trip count
// or restrict-qualified pointers). These kernels never use a thread pool; a
// portable package builds the rest of the runtime with CARVE_RT_NO_THREADS
// (its generated code checks that), so that nothing needs pthreadpool.
//
// Weight layouts in the blob (the generator writes them; PyTorch's in brackets):
//   CARVE_PT_CONV, groups == channels (depthwise):
//       (kh, kw, c)                                  [c, 1, kh, kw]
//   CARVE_PT_CONV, otherwise:
//       (groups, cout_pad / CARVE_PT_OC, kh, kw, cin / groups, CARVE_PT_OC)
//       where cout_pad is cout / groups rounded up to CARVE_PT_OC, the extra
//       output channels zero: every block of CARVE_PT_OC output channels is one
//       contiguous (kh * kw * cin/groups, CARVE_PT_OC) panel.
//                                                    [cout, cin/groups, kh, kw]
//   CARVE_PT_DECONV (kernel = stride, no padding, groups 1):
//       (cout_pad / CARVE_PT_OC, kh, kw, cin, CARVE_PT_OC)   [cin, cout, kh, kw]
//   CARVE_PT_FC: (cin, cout)                         [cout, cin]
// Biases are (cout) in every case.

#ifndef CARVE_PORTABLE_H
#define CARVE_PORTABLE_H

#include <stddef.h>
#include <stdint.h>

#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// Output channels of one register block of the dense convolutions; the
// generator pads each group's output channels to a multiple of it (it checks
// this value with a _Static_assert in the generated code).
#define CARVE_PT_OC 8

// Output pixels of one register block (a block of CARVE_PT_PX x CARVE_PT_OC
// accumulators).
#define CARVE_PT_PX 4

// ---- Descriptors ------------------------------------------------------------

typedef enum carve_pt_kind {
  CARVE_PT_CONV = 1,     // y = W * x + b; pad on all four sides; dilation 1; any groups
  CARVE_PT_DECONV = 2,   // transposed conv, stride = kernel, no padding, groups 1
  CARVE_PT_MAXPOOL = 3,  // y = max over a kh x kh window, stride, padding as -inf
  CARVE_PT_COPY = 4,     // y[p, 0:cin] = x[p, 0:cin] for h * w pixels (strided channel copy)
  CARVE_PT_ADD = 5,      // y = x + x2, contiguous (h * w, cin) tensors
  CARVE_PT_GAP = 6,      // y[c] = mean over the h*w pixels of x[., c]
  CARVE_PT_FC = 7,       // y = W x + b
  CARVE_PT_SOFTMAX = 8,  // y = softmax(x) over cin channels
} carve_pt_kind;

// One op: a carve_op_desc (carve_rt.h) whose kind is a carve_pt_kind.
typedef carve_op_desc carve_pt_desc;

// ---- Run ----------------------------------------------------------------------

// Runs one op on `arena` with the weights of `weights`. `zeros` holds at least
// as many zero floats as the largest cin / groups of a CARVE_PT_CONV (the
// padding rows of the convolutions read it). The output must not overlap the
// inputs (carve's memory plan guarantees it). weights may be NULL for the kinds
// without weights (all but CONV, DECONV and FC), zeros for all but CONV and
// DECONV. CARVE_ERR_INVALID_ARGUMENT (nothing written) for a NULL d or arena, a
// NULL weights or zeros that the kind needs, or an unknown kind. The descriptor's
// sizes and offsets are the generator's, and not checked again here.
carve_status carve_pt_run(const carve_pt_desc* d, const float* weights, float* arena, const float* zeros);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_PORTABLE_H
