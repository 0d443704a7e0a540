// carve runtime: weights that are not linked in, and half-precision storage.
//
// A package generated with `--weights file` reads its weights at create from a
// `<name>.weights` file (or from a caller's buffer holding that file's bytes);
// one generated with `--weights-dtype f16` stores the checkpoint's float16
// tensors and rebuilds from them at create, with carve_weights_expand(), the
// float32 weights of the f32 package. Both are checked and converted here.
//
// The file is little-endian: a 64-byte header, then the payload (f32: the
// package's weight blob, each tensor 64-byte aligned; f16: the halves that its
// pieces read, see carve_weights_piece):
//
//   offset  size  field
//        0     8  magic "CARVEWTS"
//        8     4  format version, CARVE_WEIGHTS_VERSION
//       12     4  dtype: CARVE_WEIGHTS_F32 or CARVE_WEIGHTS_F16
//       16     8  payload bytes
//       24     4  CRC-32 (IEEE 802.3, as zlib's crc32) of the payload
//       28     4  reserved, 0
//       32    32  SHA-256 of the checkpoint the package was generated from
//       64     .  payload
//
// The payload starts 64 bytes into the file, so a 64-byte aligned buffer keeps
// every tensor 64-byte aligned. Nothing here allocates except
// carve_weights_read_file(), which create calls (never a run).

#ifndef CARVE_WEIGHTS_H
#define CARVE_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "carve_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CARVE_WEIGHTS_MAGIC "CARVEWTS"
#define CARVE_WEIGHTS_VERSION 1u
#define CARVE_WEIGHTS_HEADER_BYTES 64u

typedef enum carve_weights_dtype {
  CARVE_WEIGHTS_F32 = 1,
  CARVE_WEIGHTS_F16 = 2,
} carve_weights_dtype;

// What a package was generated for; a file that differs is refused.
typedef struct carve_weights_expect {
  carve_weights_dtype dtype;
  uint64_t payload_bytes;
  uint32_t crc32;            // of the payload
  uint8_t model_sha256[32];  // of the checkpoint
} carve_weights_expect;

// Checks a weights file image of `bytes` bytes, in this order, and returns the
// first failure:
//   CARVE_ERR_INVALID_ARGUMENT  data, expect or payload is NULL;
//   CARVE_ERR_WEIGHTS_SIZE      shorter than the header, or the header's payload
//                               size differs from the bytes after it (truncated
//                               or padded file);
//   CARVE_ERR_WEIGHTS_MAGIC     the magic is not "CARVEWTS";
//   CARVE_ERR_WEIGHTS_VERSION   another format version;
//   CARVE_ERR_WEIGHTS_CHECKSUM  the payload's CRC-32 differs from the header's
//                               (corrupted);
//   CARVE_ERR_WEIGHTS_MODEL     a valid file for another model: dtype, payload
//                               size, CRC-32 or checkpoint SHA-256 differ from expect.
// On success *payload points `CARVE_WEIGHTS_HEADER_BYTES` into data.
carve_status carve_weights_check(const void* data, size_t bytes, const carve_weights_expect* expect,
                                 const void** payload);

// Reads a whole file into a 64-byte aligned buffer from aligned_alloc (the
// caller frees it with free()); *bytes_out is its size. CARVE_ERR_IO when the
// file cannot be opened or read, CARVE_ERR_OUT_OF_MEMORY. Nothing is checked:
// pass the bytes to carve_weights_check(). With CARVE_RT_NO_FILE (no stdio, e.g.
// on bare metal) or CARVE_RT_NO_HEAP it returns CARVE_ERR_UNSUPPORTED: pass the bytes instead.
carve_status carve_weights_read_file(const char* path, void** data_out, size_t* bytes_out);

// CRC-32 (IEEE 802.3, reflected, as zlib's crc32(0, data, bytes)).
uint32_t carve_crc32(const void* data, size_t bytes);

// dst[i] = the IEEE binary16 value src[i] as float32 (exact: every half is a
// float). src is read as little-endian 16-bit words; src and dst must not overlap.
// CARVE_ERR_INVALID_ARGUMENT (nothing written) for NULL pointers with count > 0.
carve_status carve_f16_to_f32(const void* src, float* dst, size_t count);

// ---- f16 packages: the float32 weights rebuilt from the checkpoint's halves ---
//
// An f16 package's payload holds little-endian halves; a table of pieces,
// generated with it (generator/carve/backends/f16.py), says how each float32
// weight the layers read comes from them:
//
//   CARVE_WEIGHTS_PIECE_HALVES  count halves at src, widened to floats at dst.
//   CARVE_WEIGHTS_PIECE_CONV    a convolution's weights (count floats at dst):
//     with CARVE_WEIGHTS_BN, its BatchNorm folded in as the generator folds it
//     for the f32 package (passes.fold_arrays): in float32, one operation at a
//     time, in this order, per output channel c:
//       r = 1 / sqrt(var[c] + eps)       s = gamma[c] * r
//       w' = w * s                       b' = ((b[c] - mean[c]) * r) * gamma[c] + beta[c]
//     (b = 0 without CARVE_WEIGHTS_BIAS); the `channels` biases b' go to
//     bias_dst. gamma, beta, mean, var (then b) are `channels` halves each, in
//     that order, at bn_src. Without CARVE_WEIGHTS_WINOGRAD the weights at src
//     are in the layout of dst (count halves): element (i_0, ..., i_{ndim-1})
//     of dims (row-major) is of channel sum i_j * steps[j], and a channel >=
//     `channels` is the layout's padding (its half, 0, widened).
//     With CARVE_WEIGHTS_WINOGRAD the weights at src are (channels, cin, 3, 3),
//     folded (with BN) or widened, then transformed to (16, cin, channels): the
//     4x4 G g G^T of each 3x3 kernel g in double, as the generator's
//     winograd_weights does it (over the rows, then the columns: t0 = g0,
//     t1 = (g0 + g1 + g2) * 0.5, t2 = (g0 - g1 + g2) * 0.5, t3 = g2, each sum
//     left to right), + 0.0 (a zero is +0), rounded to float; position
//     4 * a + b of the 4x4 result.
//
// Every operation is a correctly rounded IEEE one (+ - * / and sqrt), each
// result rounded to its type before the next (never a fused multiply-add,
// whatever -ffp-contract says), so the bits are the f32 package's with any C
// compiler that has IEEE binary32 / binary64 arithmetic, unless told to break
// it (-ffast-math, -freciprocal-math, ...).

#define CARVE_WEIGHTS_MAX_DIMS 6

typedef enum carve_weights_piece_kind {
  CARVE_WEIGHTS_PIECE_HALVES = 1,
  CARVE_WEIGHTS_PIECE_CONV = 2,
} carve_weights_piece_kind;

// carve_weights_piece.flags (CONV)
#define CARVE_WEIGHTS_BN 1u        // fold the BatchNorm at bn_src; write the biases at bias_dst
#define CARVE_WEIGHTS_BIAS 2u      // with BN: the conv's own bias follows var
#define CARVE_WEIGHTS_WINOGRAD 4u  // transform the weights for carve_conv3x3s1_winograd

typedef struct carve_weights_piece {
  carve_weights_piece_kind kind;
  uint32_t flags;
  size_t dst;       // the first float it writes
  size_t count;     // floats written at dst (HALVES: also the halves read)
  size_t src;       // the first half of its weights in the payload
  size_t channels;  // CONV: output channels
  size_t cin;       // WINOGRAD: input channels (count is 16 * cin * channels)
  size_t bias_dst;  // BN: the first of the `channels` folded biases
  size_t bn_src;    // BN: the first half of gamma
  float eps;        // BN: the BatchNorm's eps, as float
  size_t ndim;      // CONV without WINOGRAD: 1 .. CARVE_WEIGHTS_MAX_DIMS
  size_t dims[CARVE_WEIGHTS_MAX_DIMS];   // their product is count
  size_t steps[CARVE_WEIGHTS_MAX_DIMS];  // the channel of an element: sum i_j * steps[j]
} carve_weights_piece;

// Writes floats [first, first + count) of the `total` float32 weights that the
// pieces rebuild from `payload` (payload_bytes bytes of little-endian halves)
// into out[0 .. count); a float no piece writes is 0. Reads only the payload
// and the table: no allocation, no state (the CPU packages' create calls it
// once for the whole buffer, the cuda package's a chunk at a time). Every piece
// is checked first; CARVE_ERR_INVALID_ARGUMENT, nothing written, for NULL
// pointers (payload / pieces may be NULL when payload_bytes / num_pieces is 0),
// a range [first, first + count) past total, an unknown kind or flag, a piece
// that reads past the payload or writes past total, dims whose product is not
// count or a step past the channels, or an eps that is negative or not finite.
// (The bytes of a weights file are checked before: size and CRC-32.)
carve_status carve_weights_expand(const void* payload, size_t payload_bytes, const carve_weights_piece* pieces,
                                  size_t num_pieces, size_t total, size_t first, float* out, size_t count);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_WEIGHTS_H
