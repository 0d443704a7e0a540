// carve runtime: an int8 -> int8 table applied to a strided int8 view, on the
// thread pool (--precision int8, docs/quantization.md).
//
// The xnnpack backend's int8 convolutions are XNNPACK operators that requantize
// to the pre-activation (qconv2d's pre_zero); the SiLU is then this table,
// arith.silu_lut, applied in place: y = lut[x + 128]. (carve_q8_run's CONV
// applies the same table itself, on one thread.)

#ifndef CARVE_Q8_LUT_H
#define CARVE_Q8_LUT_H

#include <stddef.h>
#include <stdint.h>

#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

// y[p * y_stride + c] = lut[x[p * x_stride + c] + 128] for p < pixels, c <
// channels; x may equal y (in place, same stride), otherwise the views must not
// overlap. lut holds 256 entries (CARVE_Q8_LUT_SIZE of carve_q8.h). The pixels
// are split over `pool` (NULL: serial); any number of threads gives the same
// bytes. CARVE_ERR_INVALID_ARGUMENT (nothing written) for a NULL pointer, zero
// pixels or channels, a stride below channels, or x == y with different strides.
carve_status carve_q8_lut(const int8_t* x, size_t x_stride, int8_t* y, size_t y_stride, size_t pixels,
                          size_t channels, const int8_t* lut, pthreadpool_t pool);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_Q8_LUT_H
