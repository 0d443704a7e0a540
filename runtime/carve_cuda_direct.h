// carve runtime, CUDA: which convolutions carve_cu_conv2d runs as the direct kernel for few input channels
// (carve_cuda_elem.h, carve_cu_direct_conv_kernel) instead of the GEMM paths. Plain C over carve_cuda.h's
// carve_cu_conv (no CUDA code), so that carve_cu_conv2d_scratch_floats, the tests and the generator's mirror
// (generator/carve/backends/cuda.py, _conv_direct) state the same rule.
//
// The rule: groups 1, cin <= CARVE_CU_DIRECT_MAX_CIN and K = kh kw cin <= CARVE_CU_DIRECT_MAX_K: the network's
// image input (RGB: the stem Conv of every YOLO26 model, 3 -> 16..96 channels, 3x3 / 2, K 27). Why: with so few
// input channels the GEMM formulations are starved. cin = 3 is no whole 16-byte vector in either precision, so
// the cuBLAS path runs the scalar im2col kernel, then a K = 27 GEMM that cuBLAS serves with a slow kernel, then
// the epilogue; the fused implicit-GEMM kernel fills most of its 16-byte chunks with zeros. On an H100 at batch
// 32 (fp16, 640 x 640) that stem took 1.214 ms of the network's 6.82 ms, 73 GFLOP/s, through cuBLAS and
// 0.778 ms fused (docs/data/cuda-h100-2026-11-26/after/profile.jsonl). The direct kernel reads each input tap
// once per output pixel and channel group, keeps the block's weights in shared memory and does the bias, SiLU
// and residual in the same launch; it needs no scratch (carve_cu_conv2d_scratch_floats: 0). K <= 64 bounds a
// thread's work (K x CARVE_CU_DIRECT_GROUP multiply-adds per pixel) and the weights a block stages.
// The rest of the predicate: the kernel's 32-bit indices (the batch's output pixels below 2^31, input rows and
// columns as int with the padding) and its grid (at most 65535 slices of CARVE_CU_DIRECT_SLICE channels).
// The conv must be valid (carve_cu_conv_valid): the output extents are computed here.
// Numerics: float32 multiply-adds on the CUDA cores in a fixed order in both precisions and in both math
// modes (CARVE_CU_MATH_TF32 does not apply: float32 is at least as accurate as TF32).

#ifndef CARVE_CUDA_DIRECT_H
#define CARVE_CUDA_DIRECT_H

#include <stddef.h>

#include "carve_cuda.h"

#define CARVE_CU_DIRECT_MAX_CIN 4   // input channels (the image: RGB, or RGBA; the CPU stem's CARVE_STEM_MAX_CIN too)
#define CARVE_CU_DIRECT_MAX_K 64    // kh kw cin: a thread's multiply-adds per output channel
#define CARVE_CU_DIRECT_GROUP 8     // output channels per thread (one 16-byte store of halves)
#define CARVE_CU_DIRECT_SLICE 32    // output channels per block (grid.y): the weights it stages
#define CARVE_CU_DIRECT_THREADS 256 // threads per block

static inline int carve_cu_conv_direct(const carve_cu_conv* c) {
  if (c->groups != 1 || c->cin > CARVE_CU_DIRECT_MAX_CIN || c->kh > CARVE_CU_DIRECT_MAX_K ||
      c->kw > CARVE_CU_DIRECT_MAX_K || (size_t)c->kh * c->kw * c->cin > CARVE_CU_DIRECT_MAX_K) {
    return 0;
  }
  if (c->h >= 0x20000000u || c->w >= 0x20000000u || c->pad >= 0x10000000u ||
      (c->cout + (size_t)CARVE_CU_DIRECT_SLICE - 1) / CARVE_CU_DIRECT_SLICE > 65535u) {
    return 0;
  }
  const size_t oh = ((size_t)c->h + 2 * (size_t)c->pad - c->kh) / c->stride + 1;
  const size_t ow = ((size_t)c->w + 2 * (size_t)c->pad - c->kw) / c->stride + 1;
  const size_t batch = c->batch > 1 ? c->batch : 1;
  return oh * ow <= 0x7FFFFFFFu && oh * ow * batch <= 0x7FFFFFFFu;
}

#endif  // CARVE_CUDA_DIRECT_H
