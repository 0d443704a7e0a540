// carve runtime: weights that are not linked in, and half-precision storage.
//
// A package generated with `--weights file` reads its weights at create from a
// `<name>.weights` file (or from a caller's buffer holding that file's bytes);
// one generated with `--weights-dtype f16` stores them as IEEE half floats and
// widens them to float32 at create. Both are checked and converted here.
//
// The file is little-endian: a 64-byte header, then the payload (the package's
// weight blob, float32 or float16, each tensor 64-byte aligned):
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

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_WEIGHTS_H
