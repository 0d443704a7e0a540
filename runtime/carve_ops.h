// carve runtime: every CPU tensor kernel, one family per header (an umbrella,
// kept so that code written against the single header still compiles; new code
// includes the families it calls).
//
//   carve_epilogue.h   y = act(y) + residual (SiLU)
//   carve_stem.h       the stem convolution, 3x3 stride 2 of a few channels
//   carve_dwconv.h     the depthwise 3x3 convolution
//   carve_winograd.h   the 3x3 stride-1 convolution by Winograd F(2x2, 3x3)
//   carve_attention.h  the core of the Attention block
//   carve_layout.h     nearest 2x upsampling, NCHW <-> NHWC
//   carve_isa.h        the instruction sets of the kernels' variants

#ifndef CARVE_OPS_H
#define CARVE_OPS_H

#include "carve_attention.h"
#include "carve_dwconv.h"
#include "carve_epilogue.h"
#include "carve_isa.h"
#include "carve_layout.h"
#include "carve_rt.h"
#include "carve_stem.h"
#include "carve_winograd.h"

#endif  // CARVE_OPS_H
