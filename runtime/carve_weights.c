// carve runtime: weights files and half-precision widening (see carve_weights.h).

#include "carve_weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if !defined(CARVE_RT_NO_FILE) && !defined(CARVE_RT_NO_HEAP)
#include <stdio.h>
#endif

// ---- CRC-32 -----------------------------------------------------------------

// crc_table[n] = CRC-32 of the byte n (reflected polynomial 0xEDB88320).
static const uint32_t crc_table[256] = {
    0x00000000u, 0x77073096u, 0xee0e612cu, 0x990951bau, 0x076dc419u, 0x706af48fu,
    0xe963a535u, 0x9e6495a3u, 0x0edb8832u, 0x79dcb8a4u, 0xe0d5e91eu, 0x97d2d988u,
    0x09b64c2bu, 0x7eb17cbdu, 0xe7b82d07u, 0x90bf1d91u, 0x1db71064u, 0x6ab020f2u,
    0xf3b97148u, 0x84be41deu, 0x1adad47du, 0x6ddde4ebu, 0xf4d4b551u, 0x83d385c7u,
    0x136c9856u, 0x646ba8c0u, 0xfd62f97au, 0x8a65c9ecu, 0x14015c4fu, 0x63066cd9u,
    0xfa0f3d63u, 0x8d080df5u, 0x3b6e20c8u, 0x4c69105eu, 0xd56041e4u, 0xa2677172u,
    0x3c03e4d1u, 0x4b04d447u, 0xd20d85fdu, 0xa50ab56bu, 0x35b5a8fau, 0x42b2986cu,
    0xdbbbc9d6u, 0xacbcf940u, 0x32d86ce3u, 0x45df5c75u, 0xdcd60dcfu, 0xabd13d59u,
    0x26d930acu, 0x51de003au, 0xc8d75180u, 0xbfd06116u, 0x21b4f4b5u, 0x56b3c423u,
    0xcfba9599u, 0xb8bda50fu, 0x2802b89eu, 0x5f058808u, 0xc60cd9b2u, 0xb10be924u,
    0x2f6f7c87u, 0x58684c11u, 0xc1611dabu, 0xb6662d3du, 0x76dc4190u, 0x01db7106u,
    0x98d220bcu, 0xefd5102au, 0x71b18589u, 0x06b6b51fu, 0x9fbfe4a5u, 0xe8b8d433u,
    0x7807c9a2u, 0x0f00f934u, 0x9609a88eu, 0xe10e9818u, 0x7f6a0dbbu, 0x086d3d2du,
    0x91646c97u, 0xe6635c01u, 0x6b6b51f4u, 0x1c6c6162u, 0x856530d8u, 0xf262004eu,
    0x6c0695edu, 0x1b01a57bu, 0x8208f4c1u, 0xf50fc457u, 0x65b0d9c6u, 0x12b7e950u,
    0x8bbeb8eau, 0xfcb9887cu, 0x62dd1ddfu, 0x15da2d49u, 0x8cd37cf3u, 0xfbd44c65u,
    0x4db26158u, 0x3ab551ceu, 0xa3bc0074u, 0xd4bb30e2u, 0x4adfa541u, 0x3dd895d7u,
    0xa4d1c46du, 0xd3d6f4fbu, 0x4369e96au, 0x346ed9fcu, 0xad678846u, 0xda60b8d0u,
    0x44042d73u, 0x33031de5u, 0xaa0a4c5fu, 0xdd0d7cc9u, 0x5005713cu, 0x270241aau,
    0xbe0b1010u, 0xc90c2086u, 0x5768b525u, 0x206f85b3u, 0xb966d409u, 0xce61e49fu,
    0x5edef90eu, 0x29d9c998u, 0xb0d09822u, 0xc7d7a8b4u, 0x59b33d17u, 0x2eb40d81u,
    0xb7bd5c3bu, 0xc0ba6cadu, 0xedb88320u, 0x9abfb3b6u, 0x03b6e20cu, 0x74b1d29au,
    0xead54739u, 0x9dd277afu, 0x04db2615u, 0x73dc1683u, 0xe3630b12u, 0x94643b84u,
    0x0d6d6a3eu, 0x7a6a5aa8u, 0xe40ecf0bu, 0x9309ff9du, 0x0a00ae27u, 0x7d079eb1u,
    0xf00f9344u, 0x8708a3d2u, 0x1e01f268u, 0x6906c2feu, 0xf762575du, 0x806567cbu,
    0x196c3671u, 0x6e6b06e7u, 0xfed41b76u, 0x89d32be0u, 0x10da7a5au, 0x67dd4accu,
    0xf9b9df6fu, 0x8ebeeff9u, 0x17b7be43u, 0x60b08ed5u, 0xd6d6a3e8u, 0xa1d1937eu,
    0x38d8c2c4u, 0x4fdff252u, 0xd1bb67f1u, 0xa6bc5767u, 0x3fb506ddu, 0x48b2364bu,
    0xd80d2bdau, 0xaf0a1b4cu, 0x36034af6u, 0x41047a60u, 0xdf60efc3u, 0xa867df55u,
    0x316e8eefu, 0x4669be79u, 0xcb61b38cu, 0xbc66831au, 0x256fd2a0u, 0x5268e236u,
    0xcc0c7795u, 0xbb0b4703u, 0x220216b9u, 0x5505262fu, 0xc5ba3bbeu, 0xb2bd0b28u,
    0x2bb45a92u, 0x5cb36a04u, 0xc2d7ffa7u, 0xb5d0cf31u, 0x2cd99e8bu, 0x5bdeae1du,
    0x9b64c2b0u, 0xec63f226u, 0x756aa39cu, 0x026d930au, 0x9c0906a9u, 0xeb0e363fu,
    0x72076785u, 0x05005713u, 0x95bf4a82u, 0xe2b87a14u, 0x7bb12baeu, 0x0cb61b38u,
    0x92d28e9bu, 0xe5d5be0du, 0x7cdcefb7u, 0x0bdbdf21u, 0x86d3d2d4u, 0xf1d4e242u,
    0x68ddb3f8u, 0x1fda836eu, 0x81be16cdu, 0xf6b9265bu, 0x6fb077e1u, 0x18b74777u,
    0x88085ae6u, 0xff0f6a70u, 0x66063bcau, 0x11010b5cu, 0x8f659effu, 0xf862ae69u,
    0x616bffd3u, 0x166ccf45u, 0xa00ae278u, 0xd70dd2eeu, 0x4e048354u, 0x3903b3c2u,
    0xa7672661u, 0xd06016f7u, 0x4969474du, 0x3e6e77dbu, 0xaed16a4au, 0xd9d65adcu,
    0x40df0b66u, 0x37d83bf0u, 0xa9bcae53u, 0xdebb9ec5u, 0x47b2cf7fu, 0x30b5ffe9u,
    0xbdbdf21cu, 0xcabac28au, 0x53b39330u, 0x24b4a3a6u, 0xbad03605u, 0xcdd70693u,
    0x54de5729u, 0x23d967bfu, 0xb3667a2eu, 0xc4614ab8u, 0x5d681b02u, 0x2a6f2b94u,
    0xb40bbe37u, 0xc30c8ea1u, 0x5a05df1bu, 0x2d02ef8du,
};

uint32_t carve_crc32(const void* data, size_t bytes) {
  const uint8_t* p = data;
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < bytes; i++) {
    crc = crc_table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  }
  return crc ^ 0xffffffffu;
}

// ---- Header -----------------------------------------------------------------

static uint32_t load_u32(const uint8_t* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t load_u64(const uint8_t* p) { return (uint64_t)load_u32(p) | (uint64_t)load_u32(p + 4) << 32; }

carve_status carve_weights_check(const void* data, size_t bytes, const carve_weights_expect* expect,
                                 const void** payload) {
  if (data == NULL || expect == NULL || payload == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  *payload = NULL;
  const uint8_t* h = data;
  if (bytes < CARVE_WEIGHTS_HEADER_BYTES) {
    return CARVE_ERR_WEIGHTS_SIZE;
  }
  if (memcmp(h, CARVE_WEIGHTS_MAGIC, 8) != 0) {
    return CARVE_ERR_WEIGHTS_MAGIC;
  }
  if (load_u32(h + 8) != CARVE_WEIGHTS_VERSION) {
    return CARVE_ERR_WEIGHTS_VERSION;
  }
  const uint64_t payload_bytes = load_u64(h + 16);
  if (payload_bytes != (uint64_t)(bytes - CARVE_WEIGHTS_HEADER_BYTES)) {
    return CARVE_ERR_WEIGHTS_SIZE;
  }
  const uint8_t* body = h + CARVE_WEIGHTS_HEADER_BYTES;
  if (carve_crc32(body, (size_t)payload_bytes) != load_u32(h + 24)) {
    return CARVE_ERR_WEIGHTS_CHECKSUM;
  }
  if (load_u32(h + 12) != (uint32_t)expect->dtype || payload_bytes != expect->payload_bytes ||
      load_u32(h + 24) != expect->crc32 || memcmp(h + 32, expect->model_sha256, 32) != 0) {
    return CARVE_ERR_WEIGHTS_MODEL;
  }
  *payload = body;
  return CARVE_OK;
}

// ---- File -------------------------------------------------------------------

carve_status carve_weights_read_file(const char* path, void** data_out, size_t* bytes_out) {
  if (path == NULL || data_out == NULL || bytes_out == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  *data_out = NULL;
  *bytes_out = 0;
#if defined(CARVE_RT_NO_FILE) || defined(CARVE_RT_NO_HEAP)
  return CARVE_ERR_UNSUPPORTED;
#else
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    return CARVE_ERR_IO;
  }
  carve_status status = CARVE_ERR_IO;
  void* data = NULL;
  if (fseek(f, 0, SEEK_END) != 0) {
    goto done;
  }
  const long size = ftell(f);
  if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
    goto done;
  }
  const size_t bytes = (size_t)size;
  data = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);  // never 0 bytes
  if (data == NULL) {
    status = CARVE_ERR_OUT_OF_MEMORY;
    goto done;
  }
  if (fread(data, 1, bytes, f) != bytes) {
    free(data);
    data = NULL;
    goto done;
  }
  *data_out = data;
  *bytes_out = bytes;
  status = CARVE_OK;
done:
  fclose(f);
  return status;
#endif
}

// ---- Half precision ---------------------------------------------------------

// binary16 -> binary32 by bit manipulation (no _Float16 needed): sign, 5-bit
// exponent (bias 15), 10-bit mantissa; subnormals renormalised, inf / NaN kept.
static float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1fu) {
    bits = sign | 0x7f800000u | man << 13;  // inf or NaN
  } else if (exp != 0) {
    bits = sign | (exp + 112u) << 23 | man << 13;  // normal: rebias 15 -> 127
  } else if (man == 0) {
    bits = sign;  // +-0
  } else {
    exp = 113u;  // subnormal: shift the mantissa up until its leading 1 is implicit
    while ((man & 0x400u) == 0) {
      man <<= 1;
      exp--;
    }
    bits = sign | exp << 23 | (man & 0x3ffu) << 13;
  }
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

carve_status carve_f16_to_f32(const void* src, float* dst, size_t count) {
  if (count > 0 && (src == NULL || dst == NULL)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  const uint8_t* p = src;
  for (size_t i = 0; i < count; i++) {
    dst[i] = half_to_float((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
  }
  return CARVE_OK;
}

// ---- f16 packages: the float32 weights rebuilt from the checkpoint's halves ---

// x rounded to its type, even where a compiler would keep more precision or fuse
// it into a multiply-add (-ffp-contract=fast, x87): the bits must be those of
// numpy's one-operation-at-a-time arithmetic in the generator.
static float rounded(float x) {
  volatile float v = x;
  return v;
}

static double rounded_d(double x) {
  volatile double v = x;
  return v;
}

static float half_at(const uint8_t* halves, size_t i) {
  return half_to_float((uint16_t)(halves[2 * i] | halves[2 * i + 1] << 8));
}

// [start, start + n) lies in [0, limit), without overflow.
static int range_ok(size_t start, size_t n, size_t limit) { return n <= limit && start <= limit - n; }

// a * b into *out, 0 on overflow.
static int mul_ok(size_t a, size_t b, size_t* out) {
  if (a != 0 && b > SIZE_MAX / a) {
    return 0;
  }
  *out = a * b;
  return 1;
}

static int piece_ok(const carve_weights_piece* pc, size_t halves, size_t total) {
  if (pc->kind == CARVE_WEIGHTS_PIECE_HALVES) {
    return pc->flags == 0 && range_ok(pc->src, pc->count, halves) && range_ok(pc->dst, pc->count, total);
  }
  const uint32_t known = CARVE_WEIGHTS_BN | CARVE_WEIGHTS_BIAS | CARVE_WEIGHTS_WINOGRAD;
  if (pc->kind != CARVE_WEIGHTS_PIECE_CONV || (pc->flags & ~known) != 0 ||
      (pc->flags & (CARVE_WEIGHTS_BN | CARVE_WEIGHTS_WINOGRAD)) == 0 ||
      ((pc->flags & CARVE_WEIGHTS_BIAS) != 0 && (pc->flags & CARVE_WEIGHTS_BN) == 0) || pc->channels == 0 ||
      !range_ok(pc->dst, pc->count, total)) {
    return 0;
  }
  size_t read = pc->count;  // halves of weights at src
  if (pc->flags & CARVE_WEIGHTS_WINOGRAD) {
    size_t kernels, transformed;
    if (pc->cin == 0 || !mul_ok(pc->cin, pc->channels, &kernels) || !mul_ok(kernels, 9, &read) ||
        !mul_ok(kernels, 16, &transformed) || transformed != pc->count) {
      return 0;
    }
  } else {
    if (pc->ndim < 1 || pc->ndim > CARVE_WEIGHTS_MAX_DIMS) {
      return 0;
    }
    size_t elements = 1, top = 0;  // top: the largest channel an element can have
    for (size_t j = 0; j < pc->ndim; j++) {
      size_t reach;
      if (pc->dims[j] == 0 || !mul_ok(elements, pc->dims[j], &elements) ||
          !mul_ok(pc->dims[j] - 1, pc->steps[j], &reach) || reach > SIZE_MAX - top) {
        return 0;
      }
      top += reach;
    }
    if (elements != pc->count) {
      return 0;
    }
  }
  if (!range_ok(pc->src, read, halves)) {
    return 0;
  }
  if (pc->flags & CARVE_WEIGHTS_BN) {
    size_t params;
    if (!mul_ok(pc->channels, (pc->flags & CARVE_WEIGHTS_BIAS) ? 5 : 4, &params) ||
        !range_ok(pc->bn_src, params, halves) || !range_ok(pc->bias_dst, pc->channels, total) ||
        !(pc->eps >= 0.0f && pc->eps <= 3.4e38f)) {  // also false for NaN
      return 0;
    }
  }
  return 1;
}

// passes.fold_arrays for channel c: r = 1 / sqrt(var + eps), s = gamma * r.
static void bn_scale(const uint8_t* bn, size_t channels, size_t c, float eps, float* r, float* s) {
  const float gamma = half_at(bn, c);
  const float var = half_at(bn, 3 * channels + c);
  const float root = rounded(sqrtf(rounded(var + eps)));
  *r = rounded(1.0f / root);
  *s = rounded(gamma * *r);
}

// passes.fold_arrays' bias of channel c: ((b - mean) * r) * gamma + beta, b = 0 without the conv's own.
static float bn_bias(const uint8_t* bn, size_t channels, size_t c, float eps, int has_bias) {
  float r, s;
  bn_scale(bn, channels, c, eps, &r, &s);
  const float gamma = half_at(bn, c);
  const float beta = half_at(bn, channels + c);
  const float mean = half_at(bn, 2 * channels + c);
  const float b = has_bias ? half_at(bn, 4 * channels + c) : 0.0f;
  float t = rounded(b - mean);
  t = rounded(t * r);
  t = rounded(t * gamma);
  return rounded(t + beta);
}

// Row k of Winograd F(2x2, 3x3)'s G applied to (x0, x1, x2), as xnnpack.py's _winograd_rows.
static double winograd_row(int k, double x0, double x1, double x2) {
  switch (k) {
    case 0:
      return x0;
    case 1:
      return rounded_d(rounded_d(rounded_d(x0 + x1) + x2) * 0.5);
    case 2:
      return rounded_d(rounded_d(rounded_d(x0 - x1) + x2) * 0.5);
    default:
      return x2;
  }
}

// Weights [lo, hi) of a CONV piece without Winograd (relative to pc->dst) into out[pc->dst + e - first].
static void expand_direct(const carve_weights_piece* pc, const uint8_t* halves, size_t lo, size_t hi, size_t first,
                          float* out) {
  size_t idx[CARVE_WEIGHTS_MAX_DIMS];
  size_t ch = 0, rem = lo;
  for (size_t j = pc->ndim; j-- > 0;) {  // lo's multi-index, innermost dim last
    idx[j] = rem % pc->dims[j];
    rem /= pc->dims[j];
    ch += idx[j] * pc->steps[j];
  }
  const uint8_t* bn = halves + 2 * pc->bn_src;
  size_t scaled = SIZE_MAX;  // the channel whose scale s holds
  float r = 0.0f, s = 0.0f;
  for (size_t e = lo; e < hi; e++) {
    float w = half_at(halves, pc->src + e);
    if (ch < pc->channels) {  // else padding: its half (0)
      if (ch != scaled) {
        bn_scale(bn, pc->channels, ch, pc->eps, &r, &s);
        scaled = ch;
      }
      w = rounded(w * s);
    }
    out[pc->dst + e - first] = w;
    for (size_t j = pc->ndim; j-- > 0;) {  // the next element's multi-index and channel
      ch += pc->steps[j];
      if (++idx[j] < pc->dims[j]) {
        break;
      }
      ch -= pc->steps[j] * pc->dims[j];
      idx[j] = 0;
    }
  }
}

// Weights [lo, hi) of a Winograd CONV piece: element e of (16, cin, channels) is position p = 4 * a + b of
// the G g G^T of kernel (co, ci), g folded (BN) or widened.
static void expand_winograd(const carve_weights_piece* pc, const uint8_t* halves, size_t lo, size_t hi,
                            size_t first, float* out) {
  const size_t plane = pc->cin * pc->channels;
  const uint8_t* bn = halves + 2 * pc->bn_src;
  size_t scaled = SIZE_MAX;
  float r = 0.0f, s = 0.0f;
  for (size_t e = lo; e < hi; e++) {
    const size_t p = e / plane, ci = e % plane / pc->channels, co = e % pc->channels;
    const size_t k0 = pc->src + (co * pc->cin + ci) * 9;
    if ((pc->flags & CARVE_WEIGHTS_BN) && co != scaled) {
      bn_scale(bn, pc->channels, co, pc->eps, &r, &s);
      scaled = co;
    }
    double g[3][3];
    for (size_t k = 0; k < 9; k++) {
      const float w = half_at(halves, k0 + k);
      g[k / 3][k % 3] = (pc->flags & CARVE_WEIGHTS_BN) ? rounded(w * s) : w;
    }
    const int a = (int)(p / 4), b = (int)(p % 4);
    double t[3];
    for (int l = 0; l < 3; l++) {
      t[l] = winograd_row(a, g[0][l], g[1][l], g[2][l]);
    }
    out[pc->dst + e - first] = rounded((float)rounded_d(winograd_row(b, t[0], t[1], t[2]) + 0.0));  // a zero is +0
  }
}

carve_status carve_weights_expand(const void* payload, size_t payload_bytes, const carve_weights_piece* pieces,
                                  size_t num_pieces, size_t total, size_t first, float* out, size_t count) {
  if ((payload == NULL && payload_bytes > 0) || (pieces == NULL && num_pieces > 0) || (out == NULL && count > 0) ||
      !range_ok(first, count, total)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  for (size_t i = 0; i < num_pieces; i++) {
    if (!piece_ok(&pieces[i], payload_bytes / 2, total)) {
      return CARVE_ERR_INVALID_ARGUMENT;
    }
  }
  if (count == 0) {
    return CARVE_OK;
  }
  memset(out, 0, count * sizeof(float));
  const uint8_t* halves = payload;
  const size_t end = first + count;
  for (size_t i = 0; i < num_pieces; i++) {
    const carve_weights_piece* pc = &pieces[i];
    // the piece's weights [dst, dst + count) within [first, end), relative to dst
    const size_t lo = pc->dst > first ? 0 : first - pc->dst;
    const size_t hi = pc->dst + pc->count < end ? pc->count : (end > pc->dst ? end - pc->dst : 0);
    if (lo < hi) {
      if (pc->kind == CARVE_WEIGHTS_PIECE_HALVES) {
        for (size_t e = lo; e < hi; e++) {
          out[pc->dst + e - first] = half_at(halves, pc->src + e);
        }
      } else if (pc->flags & CARVE_WEIGHTS_WINOGRAD) {
        expand_winograd(pc, halves, lo, hi, first, out);
      } else {
        expand_direct(pc, halves, lo, hi, first, out);
      }
    }
    if (pc->kind == CARVE_WEIGHTS_PIECE_CONV && (pc->flags & CARVE_WEIGHTS_BN)) {
      const uint8_t* bn = halves + 2 * pc->bn_src;
      for (size_t c = 0; c < pc->channels; c++) {
        if (pc->bias_dst + c >= first && pc->bias_dst + c < end) {
          out[pc->bias_dst + c - first] =
              bn_bias(bn, pc->channels, c, pc->eps, (pc->flags & CARVE_WEIGHTS_BIAS) != 0);
        }
      }
    }
  }
  return CARVE_OK;
}
