// carve runtime: the 3x3 stride-1 convolution by Winograd F(2x2, 3x3), with its
// bias, SiLU and residual.
//
// Every tensor is NHWC float32 with batch 1 and a row stride in floats
// (stride >= channels), see carve_rt.h. No function allocates; the work is split
// over `pool` (NULL: serial) with bit-identical results for any number of threads.

#ifndef CARVE_WINOGRAD_H
#define CARVE_WINOGRAD_H

#include "carve_isa.h"
#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// What carve_conv3x3s1_winograd accepts: cin and cout multiples of this (8: the
// kernels work in blocks of 16 or 32 channels and finish an odd multiple of 8 with
// one 8-channel block, so yolo26n's 16 -> 8 and 8 -> 16 convolutions qualify).
#define CARVE_WINOGRAD_CHANNEL_MULTIPLE 8
// 2x2 output tiles per group (a task's unit of work) and input channels per block.
#define CARVE_WINOGRAD_TILES 12
#define CARVE_WINOGRAD_KC 128
// Bytes of one scratch slot for cout output channels: U (16 planes of TILES * KC floats) and M (16 planes of
// TILES * cout floats), each plane padded by 16 floats, rounded up to 64 bytes.
#define CARVE_WINOGRAD_SLOT_BYTES(cout) \
  ((((size_t)16 * (CARVE_WINOGRAD_TILES * CARVE_WINOGRAD_KC + 16) + \
     (size_t)16 * (CARVE_WINOGRAD_TILES * (size_t)(cout) + 16)) * sizeof(float) + 63) / 64 * 64)

// y = act(conv3x3(x) + bias) + residual: a 3x3 convolution, stride 1, padding 1,
// groups 1, by Winograd F(2x2, 3x3), with the bias, activation and residual
// applied in registers (no second pass over y).
// x is (h, w, cin) with pixel stride x_stride >= cin (the floats past cin are not
// read); y is (h, w, cout) with pixel stride y_stride >= cout (the floats past
// cout of each pixel are not written); residual is (h, w, cout) with pixel stride
// r_stride >= cout, or NULL (no addition, r_stride ignored), and may not alias y.
// weights are (16, cin, cout): for each (ci, co) the 4x4 matrix G g G^T of the
// 3x3 kernel g (g[ky][kx] = the convolution's weight (co, ci, ky, kx)), with
// G = {{1, 0, 0}, {1/2, 1/2, 1/2}, {1/2, -1/2, 1/2}, {0, 0, 1}}; its element
// (a, b) is at weights[((4 * a + b) * cin + ci) * cout + co] (computed once, in
// double, rounded to float). bias is (cout). cin and cout are multiples of
// CARVE_WINOGRAD_CHANNEL_MULTIPLE (8); h and w any (odd sizes give partial tiles).
// The output is cut into 2x2 tiles, numbered row by row, in groups of
// CARVE_WINOGRAD_TILES; each group is transformed (B^T d B), multiplied by the
// weights over blocks of CARVE_WINOGRAD_KC input channels (16 GEMMs) and
// transformed back (A^T m A), + bias, then SiLU as carve_epilogue computes it
// (act CARVE_ACT_SILU; CARVE_ACT_NONE: none), then + residual. On AVX-512 and
// AVX2 + FMA the GEMMs are FMA intrinsics, the variant carve_isa_detect() selects, like the SiLU
// kernels (channels past the last multiple of 16: an 8-channel GEMM in 256-bit
// registers, masked AVX-512 transforms); on aarch64 NEON (checked under qemu
// only, speed not measured);
// elsewhere portable C: the paths agree to float rounding. About as
// accurate as a direct convolution (about 1e-6 absolute on unit-scale data).
// scratch is `slots` slots of CARVE_WINOGRAD_SLOT_BYTES(cout) bytes, 64-byte
// aligned, contents ignored; the groups are split into `slots` tasks over `pool`
// (task s: groups [s * G / slots, (s + 1) * G / slots) in slot s, G the number of
// groups), and the result does not depend on slots or the number of threads.
// x and y must not overlap. CARVE_ERR_INVALID_ARGUMENT (nothing written) for
// NULL pointers (x, weights, bias, y, scratch), empty sizes, cin or cout not
// multiples of 8, strides below the channels, slots == 0, a scratch not 64-byte
// aligned or an unknown act.
carve_status carve_conv3x3s1_winograd(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
                                      const float* weights, const float* bias, size_t cout, float* y,
                                      size_t y_stride, const float* residual, size_t r_stride, carve_act act,
                                      void* scratch, size_t slots, pthreadpool_t pool);


// carve_conv3x3s1_winograd of one instruction set; carve_conv3x3s1_winograd_select(isa) returns the best variant
// this build has for isa (never NULL; isa from carve_isa_detect()).
typedef carve_status (*carve_conv3x3s1_winograd_fn)(const float* x, size_t x_stride, size_t h, size_t w, size_t cin,
    const float* weights, const float* bias, size_t cout, float* y, size_t y_stride, const float* residual,
    size_t r_stride, carve_act act, void* scratch, size_t slots, pthreadpool_t pool);
carve_conv3x3s1_winograd_fn carve_conv3x3s1_winograd_select(carve_isa isa);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_WINOGRAD_H
