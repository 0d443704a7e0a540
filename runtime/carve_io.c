// carve runtime: demo-side helpers (see carve_io.h).
//
// stb_image and stb_image_write are used through their headers only; the
// implementation comes from Debian's libstb (link -lstb). Elsewhere, compile
// one translation unit with STB_IMAGE_IMPLEMENTATION and
// STB_IMAGE_WRITE_IMPLEMENTATION defined before the same two includes.

#define _POSIX_C_SOURCE 200809L  // open, fdopen, getpid, readlink

#include "carve_io.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <stb/stb_image.h>
#include <stb/stb_image_write.h>

// ---- NumPy files ------------------------------------------------------------

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64                 // numpy pads the header to a multiple of 64
#define NPY_MAX_HEADER (1u << 20)    // refuse absurd headers

static int host_is_little_endian(void) {
  const uint16_t one = 1;
  uint8_t first;
  memcpy(&first, &one, 1);
  return first == 1;
}

static void swap4(uint8_t* b) {
  uint8_t t = b[0];
  b[0] = b[3];
  b[3] = t;
  t = b[1];
  b[1] = b[2];
  b[2] = t;
}

carve_status carve_npy_write_f32(const char* path, const float* data, const size_t* shape,
                                 int ndim) {
  if (path == NULL || ndim < 0 || ndim > CARVE_NPY_MAX_DIMS || (ndim > 0 && shape == NULL)) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  size_t count = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] != 0 && count > SIZE_MAX / sizeof(float) / shape[i]) {
      return CARVE_ERR_INVALID_ARGUMENT;
    }
    count *= shape[i];
  }
  if (count != 0 && data == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }

  // "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" padded with
  // spaces and a final '\n' so that magic + version + length + header is a
  // multiple of 64 bytes.
  char header[64 + CARVE_NPY_MAX_DIMS * 24 + NPY_ALIGN];
  int len = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
  for (int i = 0; i < ndim; i++) {
    len += snprintf(header + len, sizeof header - (size_t)len, i == 0 ? "%zu" : ", %zu", shape[i]);
  }
  len += snprintf(header + len, sizeof header - (size_t)len, ndim == 1 ? ",), }" : "), }");
  const size_t prefix = NPY_MAGIC_LEN + 2 + 2;
  size_t total = prefix + (size_t)len + 1;
  total = (total + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
  const size_t header_len = total - prefix;
  while ((size_t)len < header_len - 1) {
    header[len++] = ' ';
  }
  header[len++] = '\n';

  FILE* f = fopen(path, "wb");
  if (f == NULL) {
    return CARVE_ERR_IO;
  }
  const uint8_t version_and_len[4] = {1, 0, (uint8_t)(header_len & 0xFF),
                                      (uint8_t)(header_len >> 8)};
  int ok = fwrite(NPY_MAGIC, 1, NPY_MAGIC_LEN, f) == NPY_MAGIC_LEN &&
           fwrite(version_and_len, 1, 4, f) == 4 && fwrite(header, 1, header_len, f) == header_len;
  if (ok && host_is_little_endian()) {
    ok = fwrite(data, sizeof(float), count, f) == count;
  } else {
    for (size_t i = 0; ok && i < count; i++) {
      uint8_t b[4];
      memcpy(b, &data[i], 4);
      swap4(b);
      ok = fwrite(b, 1, 4, f) == 4;
    }
  }
  if (fclose(f) != 0) {
    ok = 0;
  }
  return ok ? CARVE_OK : CARVE_ERR_IO;
}

// Finds the value of 'key' in a .npy header dict: returns a pointer just past the ':'.
static const char* npy_find_key(const char* header, const char* key) {
  const char* p = strstr(header, key);
  if (p == NULL) {
    return NULL;
  }
  p += strlen(key);
  while (*p == ' ') {
    p++;
  }
  if (*p != ':') {
    return NULL;
  }
  p++;
  while (*p == ' ') {
    p++;
  }
  return p;
}

// Parses "(d0, d1, ...)" into shape; returns the number of dims, -1 if malformed,
// CARVE_NPY_MAX_DIMS + 1 if there are too many.
static int npy_parse_shape(const char* p, size_t shape[CARVE_NPY_MAX_DIMS]) {
  if (*p++ != '(') {
    return -1;
  }
  int ndim = 0;
  for (;;) {
    while (*p == ' ') {
      p++;
    }
    if (*p == ')') {
      return ndim;
    }
    if (*p < '0' || *p > '9') {
      return -1;
    }
    size_t v = 0;
    while (*p >= '0' && *p <= '9') {
      const size_t digit = (size_t)(*p++ - '0');
      if (v > (SIZE_MAX - digit) / 10) {
        return -1;
      }
      v = v * 10 + digit;
    }
    if (ndim == CARVE_NPY_MAX_DIMS) {
      return CARVE_NPY_MAX_DIMS + 1;
    }
    shape[ndim++] = v;
    while (*p == ' ') {
      p++;
    }
    if (*p == ',') {
      p++;
    } else if (*p != ')') {
      return -1;
    }
  }
}

carve_status carve_npy_read_f32(const char* path, float** data_out,
                                size_t shape[CARVE_NPY_MAX_DIMS], int* ndim) {
  if (path == NULL || data_out == NULL || shape == NULL || ndim == NULL) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  *data_out = NULL;
  *ndim = 0;
  carve_status status = CARVE_ERR_IO;
  char* header = NULL;
  float* data = NULL;
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    return CARVE_ERR_IO;
  }

  uint8_t prefix[NPY_MAGIC_LEN + 2];
  if (fread(prefix, 1, sizeof prefix, f) != sizeof prefix ||
      memcmp(prefix, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
    goto error;
  }
  const int major = prefix[NPY_MAGIC_LEN];
  size_t header_len;
  if (major == 1) {
    uint8_t b[2];
    if (fread(b, 1, 2, f) != 2) {
      goto error;
    }
    header_len = (size_t)b[0] | (size_t)b[1] << 8;
  } else if (major == 2 || major == 3) {
    uint8_t b[4];
    if (fread(b, 1, 4, f) != 4) {
      goto error;
    }
    header_len = (size_t)b[0] | (size_t)b[1] << 8 | (size_t)b[2] << 16 | (size_t)b[3] << 24;
  } else {
    status = CARVE_ERR_UNSUPPORTED;
    goto error;
  }
  if (header_len == 0 || header_len > NPY_MAX_HEADER) {
    goto error;
  }
  header = malloc(header_len + 1);
  if (header == NULL) {
    status = CARVE_ERR_OUT_OF_MEMORY;
    goto error;
  }
  if (fread(header, 1, header_len, f) != header_len) {
    goto error;
  }
  header[header_len] = '\0';

  const char* descr = npy_find_key(header, "'descr'");
  const char* fortran = npy_find_key(header, "'fortran_order'");
  const char* shape_str = npy_find_key(header, "'shape'");
  if (descr == NULL || fortran == NULL || shape_str == NULL) {
    goto error;
  }
  if (strncmp(descr, "'<f4'", 5) != 0 || strncmp(fortran, "False", 5) != 0) {
    status = CARVE_ERR_UNSUPPORTED;
    goto error;
  }
  const int dims = npy_parse_shape(shape_str, shape);
  if (dims < 0) {
    goto error;
  }
  if (dims > CARVE_NPY_MAX_DIMS) {
    status = CARVE_ERR_UNSUPPORTED;
    goto error;
  }
  size_t count = 1;
  for (int i = 0; i < dims; i++) {
    if (shape[i] != 0 && count > SIZE_MAX / sizeof(float) / shape[i]) {
      goto error;
    }
    count *= shape[i];
  }

  data = malloc(count == 0 ? 1 : count * sizeof(float));
  if (data == NULL) {
    status = CARVE_ERR_OUT_OF_MEMORY;
    goto error;
  }
  if (fread(data, sizeof(float), count, f) != count) {
    goto error;  // truncated
  }
  if (!host_is_little_endian()) {
    for (size_t i = 0; i < count; i++) {
      swap4((uint8_t*)&data[i]);
    }
  }
  free(header);
  fclose(f);
  *data_out = data;
  *ndim = dims;
  return CARVE_OK;

error:
  free(data);
  free(header);
  fclose(f);
  return status;
}

// ---- Images -----------------------------------------------------------------

// Largest file carve_image_load_rgb reads (stb_image takes an int length).
#define IMAGE_MAX_FILE_BYTES ((size_t)INT32_MAX)

static void set_msg(char* msg, size_t msg_size, const char* fmt, const char* a, const char* b) {
  if (msg != NULL && msg_size > 0) {
    snprintf(msg, msg_size, fmt, a, b);
  }
}

static int starts_with(const uint8_t* data, size_t size, size_t at, const char* magic, size_t n) {
  return size >= at + n && memcmp(data + at, magic, n) == 0;
}

// The format the first bytes name: one stb_image decodes, or one it does not
// (*supported = 0), or NULL when they name none carve knows.
static const char* sniff_format(const uint8_t* d, size_t n, int* supported) {
  *supported = 1;
  if (starts_with(d, n, 0, "\xFF\xD8\xFF", 3)) return "JPEG";
  if (starts_with(d, n, 0, "\x89PNG\r\n\x1A\n", 8)) return "PNG";
  if (starts_with(d, n, 0, "BM", 2)) return "BMP";
  if (starts_with(d, n, 0, "GIF8", 4)) return "GIF";
  if (starts_with(d, n, 0, "8BPS", 4)) return "PSD";
  if (starts_with(d, n, 0, "#?RADIANCE", 10) || starts_with(d, n, 0, "#?RGBE", 6)) return "HDR";
  if (n >= 2 && d[0] == 'P' && d[1] >= '1' && d[1] <= '7') {
    if (d[1] == '5' || d[1] == '6') return "PNM";
    *supported = 0;
    return "PNM (only binary P5 / P6 are read)";
  }
  *supported = 0;
  if (starts_with(d, n, 0, "RIFF", 4) && starts_with(d, n, 8, "WEBP", 4)) return "WebP";
  if (starts_with(d, n, 0, "II*\0", 4) || starts_with(d, n, 0, "MM\0*", 4)) return "TIFF";
  if (starts_with(d, n, 4, "ftypavif", 8) || starts_with(d, n, 4, "ftypavis", 8)) return "AVIF";
  if (starts_with(d, n, 4, "ftyphei", 7) || starts_with(d, n, 4, "ftyphev", 7) ||
      starts_with(d, n, 4, "ftypmif1", 8) || starts_with(d, n, 4, "ftypmsf1", 8)) {
    return "HEIF/HEIC";
  }
  if (starts_with(d, n, 0, "\0\0\0\x0CjP  ", 8) || starts_with(d, n, 0, "\xFF\x4F\xFF\x51", 4)) return "JPEG 2000";
  if (starts_with(d, n, 0, "\xFF\x0A", 2) || starts_with(d, n, 0, "\0\0\0\x0CJXL ", 8)) return "JPEG XL";
  if (starts_with(d, n, 0, "%PDF", 4)) return "PDF";
  if (starts_with(d, n, 0, "<svg", 4) || starts_with(d, n, 0, "<?xml", 5)) return "SVG/XML";
  return NULL;
}

static uint32_t exif_u16(const uint8_t* p, int little) {
  return little ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : (uint32_t)p[0] << 8 | (uint32_t)p[1];
}

static uint32_t exif_u32(const uint8_t* p, int little) {
  return little ? exif_u16(p, 1) | exif_u16(p + 2, 1) << 16 : exif_u16(p, 0) << 16 | exif_u16(p + 2, 0);
}

// Orientation tag (0x0112) of IFD0 in a TIFF block; 1 when absent or invalid.
static int tiff_orientation(const uint8_t* t, size_t n) {
  int little;
  if (starts_with(t, n, 0, "II*\0", 4)) {
    little = 1;
  } else if (starts_with(t, n, 0, "MM\0*", 4)) {
    little = 0;
  } else {
    return 1;
  }
  if (n < 8) return 1;
  const size_t ifd = exif_u32(t + 4, little);
  if (ifd < 8 || ifd > n - 2) return 1;
  const size_t count = exif_u16(t + ifd, little);
  for (size_t i = 0; i < count; i++) {
    const size_t e = ifd + 2 + i * 12;  // tag u16, type u16, count u32, value / offset 4 bytes
    if (n < 12 || e > n - 12) return 1;
    if (exif_u16(t + e, little) != 0x0112) continue;
    const uint32_t type = exif_u16(t + e + 2, little), cnt = exif_u32(t + e + 4, little);
    if (type != 3 || cnt < 1) return 1;  // SHORT, stored in the first 2 value bytes
    const uint32_t v = exif_u16(t + e + 8, little);
    return v >= 1 && v <= 8 ? (int)v : 1;
  }
  return 1;
}

int carve_jpeg_exif_orientation(const void* data, size_t size) {
  const uint8_t* d = (const uint8_t*)data;
  if (d == NULL || !starts_with(d, size, 0, "\xFF\xD8", 2)) return 1;
  size_t p = 2;
  while (p < size) {
    if (d[p] != 0xFF) return 1;  // not at a marker: damaged stream
    while (p < size && d[p] == 0xFF) p++;  // fill bytes
    if (p >= size) return 1;
    const uint8_t m = d[p++];
    if (m == 0xD9 || m == 0xDA) return 1;               // end of image, start of scan: no Exif before the data
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;  // markers without a length
    if (size - p < 2) return 1;
    const size_t len = exif_u16(d + p, 0);  // includes its own 2 bytes
    if (len < 2 || len > size - p) return 1;
    if (m == 0xE1 && starts_with(d + p + 2, len - 2, 0, "Exif\0\0", 6)) {
      return tiff_orientation(d + p + 8, len - 8);
    }
    p += len;
  }
  return 1;
}

// Turns the (w, h) RGB image in `pixels` upright for an Exif orientation
// (TIFF 6.0 / Exif 2.3: 2 mirror left-right, 3 rotate 180, 4 mirror top-bottom,
// 5 transpose, 6 rotate 90 clockwise, 7 transverse, 8 rotate 90 counter-clockwise);
// swaps *w and *h for 5..8. `copy` is scratch of w * h * 3 bytes.
static void apply_orientation(uint8_t* pixels, uint8_t* copy, int* w, int* h, int orientation) {
  const size_t sw = (size_t)*w, sh = (size_t)*h;
  memcpy(copy, pixels, sw * sh * 3);
  const int swap = orientation >= 5;
  const size_t ow = swap ? sh : sw, oh = swap ? sw : sh;
  for (size_t y = 0; y < oh; y++) {
    for (size_t x = 0; x < ow; x++) {
      size_t sx, sy;  // the source pixel shown at (x, y)
      switch (orientation) {
        case 2: sx = sw - 1 - x; sy = y; break;
        case 3: sx = sw - 1 - x; sy = sh - 1 - y; break;
        case 4: sx = x; sy = sh - 1 - y; break;
        case 5: sx = y; sy = x; break;
        case 6: sx = y; sy = sh - 1 - x; break;
        case 7: sx = sw - 1 - y; sy = sh - 1 - x; break;
        case 8: sx = sw - 1 - y; sy = x; break;
        default: sx = x; sy = y; break;
      }
      memcpy(pixels + (y * ow + x) * 3, copy + (sy * sw + sx) * 3, 3);
    }
  }
  *w = (int)ow;
  *h = (int)oh;
}

carve_status carve_image_decode_rgb(const void* data, size_t size, uint8_t** rgb, int* w, int* h,
                                    char* msg, size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  if (data == NULL || rgb == NULL || w == NULL || h == NULL) {
    set_msg(msg, msg_size, "%s%s", "invalid argument", "");
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  *rgb = NULL;
  *w = *h = 0;
  int supported = 0;
  const char* format = sniff_format((const uint8_t*)data, size, &supported);
  if (size == 0) {
    set_msg(msg, msg_size, "%s%s", "empty file", "");
    return CARVE_ERR_BAD_IMAGE;
  }
  if (format != NULL && !supported) {
    set_msg(msg, msg_size, "unsupported format: %s%s", format,
            " (readable: JPEG, PNG, BMP, GIF, TGA, PSD, HDR, PNM P5/P6)");
    return CARVE_ERR_UNSUPPORTED;
  }
  if (size > IMAGE_MAX_FILE_BYTES) {
    set_msg(msg, msg_size, "%s%s", "file too large for stb_image (2 GiB at most)", "");
    return CARVE_ERR_UNSUPPORTED;
  }
  int channels_in_file = 0;
  uint8_t* pixels = stbi_load_from_memory((const stbi_uc*)data, (int)size, w, h, &channels_in_file, 3);
  if (pixels == NULL || *w <= 0 || *h <= 0 || (size_t)*w > SIZE_MAX / 3 / (size_t)*h) {
    const char* why = stbi_failure_reason();
    stbi_image_free(pixels);
    *w = *h = 0;
    if (format == NULL) {  // nothing recognised it (TGA has no magic: stb_image tried it last)
      set_msg(msg, msg_size, "unsupported format: not an image stb_image reads%s%s",
              " (JPEG, PNG, BMP, GIF, TGA, PSD, HDR, PNM P5/P6)", "");
      return CARVE_ERR_UNSUPPORTED;
    }
    set_msg(msg, msg_size, "corrupt or truncated %s: %s", format, why ? why : "cannot decode");
    return CARVE_ERR_BAD_IMAGE;
  }
  const int orientation = format != NULL && !strcmp(format, "JPEG") ? carve_jpeg_exif_orientation(data, size) : 1;
  if (orientation != 1) {
    uint8_t* copy = malloc((size_t)*w * (size_t)*h * 3);
    if (copy == NULL) {
      stbi_image_free(pixels);
      *w = *h = 0;
      set_msg(msg, msg_size, "%s%s", "out of memory", "");
      return CARVE_ERR_OUT_OF_MEMORY;
    }
    apply_orientation(pixels, copy, w, h, orientation);
    free(copy);
  }
  *rgb = pixels;
  return CARVE_OK;
}

carve_status carve_image_load_rgb_msg(const char* path, uint8_t** rgb, int* w, int* h, char* msg,
                                      size_t msg_size) {
  if (msg != NULL && msg_size > 0) msg[0] = '\0';
  if (path == NULL || rgb == NULL || w == NULL || h == NULL) {
    set_msg(msg, msg_size, "%s%s", "invalid argument", "");
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  *rgb = NULL;
  *w = *h = 0;
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    set_msg(msg, msg_size, "cannot open: %s%s", strerror(errno), "");
    return CARVE_ERR_IO;
  }
  carve_status status = CARVE_ERR_IO;
  uint8_t* data = NULL;
  size_t size = 0, cap = 0;
  for (;;) {  // read to the end (works for pipes too), doubling the buffer
    if (size == cap) {
      if (cap >= IMAGE_MAX_FILE_BYTES) {
        set_msg(msg, msg_size, "%s%s", "file too large for stb_image (2 GiB at most)", "");
        status = CARVE_ERR_UNSUPPORTED;
        goto done;
      }
      const size_t grown = cap == 0 ? (size_t)1 << 16 : cap * 2;
      uint8_t* bigger = realloc(data, grown);
      if (bigger == NULL) {
        set_msg(msg, msg_size, "%s%s", "out of memory", "");
        status = CARVE_ERR_OUT_OF_MEMORY;
        goto done;
      }
      data = bigger;
      cap = grown;
    }
    const size_t got = fread(data + size, 1, cap - size, f);
    size += got;
    if (got == 0) {
      if (ferror(f)) {
        set_msg(msg, msg_size, "cannot read: %s%s", strerror(errno), "");
        goto done;
      }
      break;
    }
  }
  status = carve_image_decode_rgb(data, size, rgb, w, h, msg, msg_size);
done:
  free(data);
  fclose(f);
  return status;
}

carve_status carve_image_load_rgb(const char* path, uint8_t** rgb, int* w, int* h) {
  return carve_image_load_rgb_msg(path, rgb, w, h, NULL, 0);
}

void carve_image_free(uint8_t* rgb) {
  if (rgb != NULL) {
    stbi_image_free(rgb);
  }
}

// Case-insensitive: does path end with ext (".png")?
static int has_extension(const char* path, const char* ext) {
  const size_t n = strlen(path), m = strlen(ext);
  if (n <= m) return 0;
  for (size_t i = 0; i < m; i++) {
    char c = path[n - m + i];
    if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
    if (c != ext[i]) return 0;
  }
  return 1;
}

carve_image_format carve_image_format_for_path(const char* path) {
  if (path == NULL) return CARVE_IMAGE_UNKNOWN;
  if (has_extension(path, ".png")) return CARVE_IMAGE_PNG;
  if (has_extension(path, ".jpg") || has_extension(path, ".jpeg")) return CARVE_IMAGE_JPEG;
  if (has_extension(path, ".bmp")) return CARVE_IMAGE_BMP;
  if (has_extension(path, ".tga")) return CARVE_IMAGE_TGA;
  return CARVE_IMAGE_UNKNOWN;
}

// ---- Files written whole ----------------------------------------------------

// A file written under a temporary name beside its target and renamed over it when complete.
typedef struct whole_file {
  FILE* f;
  char* tmp;   // the temporary file's path (malloc'd)
  char* path;  // the target's (malloc'd)
} whole_file;

static carve_status whole_open(const char* path, whole_file* wf) {
  memset(wf, 0, sizeof(*wf));
  const size_t len = strlen(path);
  const size_t tmp_size = len + 48;  // ".<pid>-<n>.tmp"
  wf->path = (char*)malloc(len + 1);
  wf->tmp = (char*)malloc(tmp_size);
  if (wf->path == NULL || wf->tmp == NULL) {
    free(wf->path);
    free(wf->tmp);
    memset(wf, 0, sizeof(*wf));
    return CARVE_ERR_OUT_OF_MEMORY;
  }
  memcpy(wf->path, path, len + 1);
  for (int i = 0; i < 100; i++) {  // another writer of the same path in this process: the next name
    snprintf(wf->tmp, tmp_size, "%s.%ld-%d.tmp", path, (long)getpid(), i);
    const int fd = open(wf->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      break;
    }
    wf->f = fdopen(fd, "wb");
    if (wf->f != NULL) return CARVE_OK;
    close(fd);
    remove(wf->tmp);
    break;
  }
  free(wf->path);
  free(wf->tmp);
  memset(wf, 0, sizeof(*wf));
  return CARVE_ERR_IO;
}

// Closes the file; renames it over the target when ok and every write went through, else removes it.
static carve_status whole_close(whole_file* wf, int ok) {
  if (wf->f != NULL) {
    ok = ok && fflush(wf->f) == 0 && !ferror(wf->f);
    ok = fclose(wf->f) == 0 && ok;
  }
  ok = ok && wf->f != NULL && rename(wf->tmp, wf->path) == 0;
  if (!ok && wf->tmp != NULL) remove(wf->tmp);
  free(wf->tmp);
  free(wf->path);
  memset(wf, 0, sizeof(*wf));
  return ok ? CARVE_OK : CARVE_ERR_IO;
}

static void stb_to_file(void* context, void* data, int size) {
  if (size > 0) fwrite(data, 1, (size_t)size, (FILE*)context);  // a failed write shows in ferror at whole_close
}

static carve_status image_write_as(const char* path, carve_image_format format, const uint8_t* rgb, int w, int h) {
  if (path == NULL || rgb == NULL || w <= 0 || h <= 0 || w > INT32_MAX / 3) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (format == CARVE_IMAGE_UNKNOWN) return CARVE_ERR_UNSUPPORTED;
  whole_file wf;
  const carve_status s = whole_open(path, &wf);
  if (s != CARVE_OK) return s;
  int ok = 0;
  switch (format) {
    case CARVE_IMAGE_PNG: ok = stbi_write_png_to_func(stb_to_file, wf.f, w, h, 3, rgb, w * 3); break;
    case CARVE_IMAGE_JPEG: ok = stbi_write_jpg_to_func(stb_to_file, wf.f, w, h, 3, rgb, CARVE_IMAGE_JPEG_QUALITY); break;
    case CARVE_IMAGE_BMP: ok = stbi_write_bmp_to_func(stb_to_file, wf.f, w, h, 3, rgb); break;
    case CARVE_IMAGE_TGA: ok = stbi_write_tga_to_func(stb_to_file, wf.f, w, h, 3, rgb); break;
    default: break;
  }
  return whole_close(&wf, ok);
}

carve_status carve_image_write_png(const char* path, const uint8_t* rgb, int w, int h) {
  return image_write_as(path, CARVE_IMAGE_PNG, rgb, w, h);
}

carve_status carve_image_write(const char* path, const uint8_t* rgb, int w, int h) {
  return image_write_as(path, carve_image_format_for_path(path), rgb, w, h);
}

// ---- COCO results files -----------------------------------------------------

size_t carve_rle_string(const uint32_t* counts, size_t n, char* out, size_t capacity) {
  if (out == NULL) capacity = 0;
  if (capacity > 0) out[0] = '\0';
  if (counts == NULL && n > 0) return 0;
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t x = (int64_t)counts[i];
    if (i > 2) x -= (int64_t)counts[i - 2];
    for (int more = 1; more;) {
      int c = (int)(((x % 32) + 32) % 32);  // x & 0x1f and x >> 5 (floor), without shifting a negative value
      x = (x - c) / 32;
      more = (c & 0x10) ? x != -1 : x != 0;
      if (more) c |= 0x20;
      if (len + 1 < capacity) out[len] = (char)(c + 48);
      len++;
    }
  }
  if (capacity > 0) out[len < capacity ? len : capacity - 1] = '\0';
  return len;
}

struct carve_coco_writer {
  whole_file file;
  size_t results;  // written so far
  int failed;      // a write failed: close removes the file
  char* text;      // the current mask's compressed counts
  size_t text_cap;
};

carve_status carve_coco_open(const char* path, carve_coco_writer** out) {
  if (out != NULL) *out = NULL;
  if (path == NULL || out == NULL || path[0] == '\0') return CARVE_ERR_INVALID_ARGUMENT;
  carve_coco_writer* w = (carve_coco_writer*)calloc(1, sizeof(*w));
  if (w == NULL) return CARVE_ERR_OUT_OF_MEMORY;
  const carve_status s = whole_open(path, &w->file);
  if (s != CARVE_OK) {
    free(w);
    return s;
  }
  w->failed = fputs("[", w->file.f) < 0;
  *out = w;
  return CARVE_OK;
}

static int all_finite(const float* v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(v[i])) return 0;
  }
  return 1;
}

static carve_status coco_check(const carve_coco_result* r) {
  if (!isfinite(r->score)) return CARVE_ERR_INVALID_ARGUMENT;
  if (r->bbox != NULL && !all_finite(r->bbox, 4)) return CARVE_ERR_INVALID_ARGUMENT;
  if (r->rbox != NULL && !all_finite(r->rbox, 5)) return CARVE_ERR_INVALID_ARGUMENT;
  if (r->keypoints != NULL && (r->num_keypoints > SIZE_MAX / 3 || !all_finite(r->keypoints, 3 * r->num_keypoints))) {
    return CARVE_ERR_INVALID_ARGUMENT;
  }
  if (r->rle != NULL) {
    if (r->rbox != NULL || r->rle_count == 0 || r->mask_h <= 0 || r->mask_w <= 0) return CARVE_ERR_INVALID_ARGUMENT;
    uint64_t sum = 0;
    for (size_t i = 0; i < r->rle_count; i++) sum += r->rle[i];
    if (sum != (uint64_t)r->mask_h * (uint64_t)r->mask_w) return CARVE_ERR_INVALID_ARGUMENT;
  }
  return CARVE_OK;
}

static void coco_numbers(FILE* f, const char* key, const double* v, size_t n) {
  fprintf(f, ", \"%s\": [", key);
  for (size_t i = 0; i < n; i++) fprintf(f, "%s%.3f", i ? ", " : "", v[i]);
  fputs("]", f);
}

carve_status carve_coco_add(carve_coco_writer* w, const carve_coco_result* r) {
  if (w == NULL || r == NULL) return CARVE_ERR_INVALID_ARGUMENT;
  carve_status s = coco_check(r);
  if (s != CARVE_OK) return s;
  if (w->failed) return CARVE_ERR_IO;
  if (r->rle != NULL) {  // the compressed counts, before anything of this result is written
    const size_t len = carve_rle_string(r->rle, r->rle_count, NULL, 0);
    if (len + 1 > w->text_cap) {
      char* bigger = (char*)realloc(w->text, len + 1);
      if (bigger == NULL) return CARVE_ERR_OUT_OF_MEMORY;
      w->text = bigger;
      w->text_cap = len + 1;
    }
    carve_rle_string(r->rle, r->rle_count, w->text, w->text_cap);
  }
  FILE* f = w->file.f;
  fprintf(f, "%s\n{\"image_id\": %" PRId64 ", \"category_id\": %d", w->results ? "," : "", r->image_id,
          r->category_id);
  double corners[8];
  if (r->rbox != NULL) {  // ops.xywhr2xyxyxyxy: ctr + v1 + v2, ctr + v1 - v2, ctr - v1 - v2, ctr - v1 + v2
    const double cx = r->rbox[0], cy = r->rbox[1], c = cos((double)r->rbox[4]), sn = sin((double)r->rbox[4]);
    const double v1x = r->rbox[2] / 2.0 * c, v1y = r->rbox[2] / 2.0 * sn;
    const double v2x = -r->rbox[3] / 2.0 * sn, v2y = r->rbox[3] / 2.0 * c;
    const double sx[4] = {1, 1, -1, -1}, sy[4] = {1, -1, -1, 1};
    for (int k = 0; k < 4; k++) {
      corners[2 * k] = cx + sx[k] * v1x + sy[k] * v2x;
      corners[2 * k + 1] = cy + sx[k] * v1y + sy[k] * v2y;
    }
  }
  if (r->bbox != NULL) {
    const double b[4] = {r->bbox[0], r->bbox[1], r->bbox[2], r->bbox[3]};
    coco_numbers(f, "bbox", b, 4);
  } else if (r->rbox != NULL) {
    double x0 = corners[0], y0 = corners[1], x1 = corners[0], y1 = corners[1];
    for (int k = 1; k < 4; k++) {
      x0 = fmin(x0, corners[2 * k]);
      x1 = fmax(x1, corners[2 * k]);
      y0 = fmin(y0, corners[2 * k + 1]);
      y1 = fmax(y1, corners[2 * k + 1]);
    }
    const double b[4] = {x0, y0, x1 - x0, y1 - y0};
    coco_numbers(f, "bbox", b, 4);
  }
  fprintf(f, ", \"score\": %.5f", (double)r->score);
  if (r->rle != NULL) {
    fprintf(f, ", \"segmentation\": {\"size\": [%d, %d], \"counts\": \"", r->mask_h, r->mask_w);
    for (const char* c = w->text; *c != '\0'; c++) {  // characters 48..111: only the backslash needs escaping
      if (*c == '\\') fputc('\\', f);
      fputc(*c, f);
    }
    fputs("\"}", f);
  }
  if (r->keypoints != NULL) {
    fputs(", \"keypoints\": [", f);
    for (size_t k = 0; k < r->num_keypoints; k++) {
      const float* p = r->keypoints + 3 * k;
      fprintf(f, "%s%.3f, %.3f, %.5f", k ? ", " : "", (double)p[0], (double)p[1], (double)p[2]);
    }
    fputs("]", f);
  }
  if (r->rbox != NULL) {
    const double rb[5] = {r->rbox[0], r->rbox[1], r->rbox[2], r->rbox[3], r->rbox[4]};
    coco_numbers(f, "rbox", rb, 5);
    coco_numbers(f, "poly", corners, 8);
    fputs(", \"segmentation\": [[", f);
    for (int k = 0; k < 8; k++) fprintf(f, "%s%.3f", k ? ", " : "", corners[k]);
    fputs("]]", f);
  }
  if (fputs("}", f) < 0 || ferror(f)) {
    w->failed = 1;
    return CARVE_ERR_IO;
  }
  w->results++;
  return CARVE_OK;
}

carve_status carve_coco_close(carve_coco_writer* w) {
  if (w == NULL) return CARVE_ERR_INVALID_ARGUMENT;
  const int ok = !w->failed && fputs(w->results ? "\n]\n" : "]\n", w->file.f) >= 0;
  const carve_status s = whole_close(&w->file, ok);
  free(w->text);
  free(w);
  return s;
}

void carve_coco_abort(carve_coco_writer* w) {
  if (w == NULL) return;
  whole_close(&w->file, 0);
  free(w->text);
  free(w);
}

// ---- The running executable -------------------------------------------------

carve_status carve_exe_dir(const char* argv0, char* out, size_t size) {
  if (out == NULL || size == 0) return CARVE_ERR_INVALID_ARGUMENT;
  out[0] = '\0';
  char link[4096];
  const char* exe = NULL;
  const ssize_t n = readlink("/proc/self/exe", link, sizeof(link));
  if (n > 0 && (size_t)n < sizeof(link)) {
    link[n] = '\0';
    exe = link;
  } else if (argv0 != NULL && strchr(argv0, '/') != NULL) {
    exe = argv0;
  } else {
    return CARVE_ERR_UNSUPPORTED;
  }
  size_t len = (size_t)(strrchr(exe, '/') - exe);
  if (len == 0) len = 1;  // "/demo": the root folder
  if (len >= size) return CARVE_ERR_IO;
  memcpy(out, exe, len);
  out[len] = '\0';
  return CARVE_OK;
}

// ---- Drawing ----------------------------------------------------------------

// 5x7 glyphs for ASCII 32..126: 7 rows top to bottom, bit 4 = leftmost column.
static const uint8_t font5x7[95][7] = {
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // ' '
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04},  // '!'
    {0x0A, 0x0A, 0x0A, 0x00, 0x00, 0x00, 0x00},  // '"'
    {0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A},  // '#'
    {0x04, 0x0F, 0x14, 0x0E, 0x05, 0x1E, 0x04},  // '$'
    {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03},  // '%'
    {0x0C, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0D},  // '&'
    {0x04, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00},  // '\''
    {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02},  // '('
    {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08},  // ')'
    {0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00},  // '*'
    {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00},  // '+'
    {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08},  // ','
    {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00},  // '-'
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C},  // '.'
    {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00},  // '/'
    {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E},  // '0'
    {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E},  // '1'
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F},  // '2'
    {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E},  // '3'
    {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02},  // '4'
    {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E},  // '5'
    {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E},  // '6'
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08},  // '7'
    {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E},  // '8'
    {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C},  // '9'
    {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00},  // ':'
    {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x04, 0x08},  // ';'
    {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02},  // '<'
    {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00},  // '='
    {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08},  // '>'
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04},  // '?'
    {0x0E, 0x11, 0x01, 0x0D, 0x15, 0x15, 0x0E},  // '@'
    {0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11},  // 'A'
    {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E},  // 'B'
    {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E},  // 'C'
    {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C},  // 'D'
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F},  // 'E'
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10},  // 'F'
    {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F},  // 'G'
    {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11},  // 'H'
    {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E},  // 'I'
    {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C},  // 'J'
    {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11},  // 'K'
    {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F},  // 'L'
    {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11},  // 'M'
    {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11},  // 'N'
    {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E},  // 'O'
    {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10},  // 'P'
    {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D},  // 'Q'
    {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11},  // 'R'
    {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E},  // 'S'
    {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04},  // 'T'
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E},  // 'U'
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04},  // 'V'
    {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A},  // 'W'
    {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11},  // 'X'
    {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04},  // 'Y'
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F},  // 'Z'
    {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E},  // '['
    {0x00, 0x10, 0x08, 0x04, 0x02, 0x01, 0x00},  // '\\'
    {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E},  // ']'
    {0x04, 0x0A, 0x11, 0x00, 0x00, 0x00, 0x00},  // '^'
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F},  // '_'
    {0x08, 0x04, 0x02, 0x00, 0x00, 0x00, 0x00},  // '`'
    {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F},  // 'a'
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E},  // 'b'
    {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E},  // 'c'
    {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F},  // 'd'
    {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E},  // 'e'
    {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08},  // 'f'
    {0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E},  // 'g'
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11},  // 'h'
    {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E},  // 'i'
    {0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0C},  // 'j'
    {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12},  // 'k'
    {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E},  // 'l'
    {0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11},  // 'm'
    {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11},  // 'n'
    {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E},  // 'o'
    {0x00, 0x00, 0x1E, 0x11, 0x1E, 0x10, 0x10},  // 'p'
    {0x00, 0x00, 0x0D, 0x13, 0x0F, 0x01, 0x01},  // 'q'
    {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10},  // 'r'
    {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E},  // 's'
    {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06},  // 't'
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D},  // 'u'
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04},  // 'v'
    {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A},  // 'w'
    {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11},  // 'x'
    {0x00, 0x00, 0x11, 0x11, 0x0F, 0x01, 0x0E},  // 'y'
    {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F},  // 'z'
    {0x02, 0x04, 0x04, 0x08, 0x04, 0x04, 0x02},  // '{'
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04},  // '|'
    {0x08, 0x04, 0x04, 0x02, 0x04, 0x04, 0x08},  // '}'
    {0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00},  // '~'
};

// Sets pixel (x, y) if it lies inside the image.
static void put_pixel(uint8_t* rgb, int w, int h, int x, int y, const uint8_t color[3]) {
  if (x < 0 || y < 0 || x >= w || y >= h) {
    return;
  }
  uint8_t* p = rgb + ((size_t)y * (size_t)w + (size_t)x) * 3;
  p[0] = color[0];
  p[1] = color[1];
  p[2] = color[2];
}

// Fills [x0, x1) x [y0, y1), clipped to the image.
static void fill_rect(uint8_t* rgb, int w, int h, int x0, int y0, int x1, int y1,
                      const uint8_t color[3]) {
  x0 = x0 < 0 ? 0 : x0;
  y0 = y0 < 0 ? 0 : y0;
  x1 = x1 > w ? w : x1;
  y1 = y1 > h ? h : y1;
  for (int y = y0; y < y1; y++) {
    for (int x = x0; x < x1; x++) {
      put_pixel(rgb, w, h, x, y, color);
    }
  }
}

// round(v) to an int, with v first clamped to [lo, hi] so the conversion is defined.
static int round_to_pixel(float v, int lo, int hi) {
  const float r = floorf(v + 0.5f);
  return r < (float)lo ? lo : (r > (float)hi ? hi : (int)r);
}

void carve_draw_box(uint8_t* rgb, int w, int h, float x1, float y1, float x2, float y2,
                    const uint8_t color[3], int thickness) {
  if (rgb == NULL || color == NULL || w <= 0 || h <= 0) {
    return;
  }
  if (!isfinite(x1) || !isfinite(y1) || !isfinite(x2) || !isfinite(y2)) {
    return;
  }
  if (thickness < 1) {
    thickness = 1;
  }
  if (thickness > w + h) {
    thickness = w + h;  // already covers the whole image
  }
  // Far outside the image is as good as just outside it.
  const int margin = thickness + 1;
  int l = round_to_pixel(x1, -margin, w + margin), r = round_to_pixel(x2, -margin, w + margin);
  int t = round_to_pixel(y1, -margin, h + margin), b = round_to_pixel(y2, -margin, h + margin);
  if (l > r) {
    const int s = l;
    l = r;
    r = s;
  }
  if (t > b) {
    const int s = t;
    t = b;
    b = s;
  }
  // Ring i (0 = outermost) is the rectangle [l + i, r - i] x [t + i, b - i].
  for (int i = 0; i < thickness && l + i <= r - i && t + i <= b - i; i++) {
    fill_rect(rgb, w, h, l + i, t + i, r - i + 1, t + i + 1, color);  // top
    fill_rect(rgb, w, h, l + i, b - i, r - i + 1, b - i + 1, color);  // bottom
    fill_rect(rgb, w, h, l + i, t + i, l + i + 1, b - i + 1, color);  // left
    fill_rect(rgb, w, h, r - i, t + i, r - i + 1, b - i + 1, color);  // right
  }
}

int carve_text_scale(int w, int h) {
  const long s = ((long)w + (long)h) / 1000;
  return s < 1 ? 1 : (s > 64 ? 64 : (int)s);
}

// Characters of text that a label draws: all of them, capped so sizes fit an int.
static int label_chars(const char* text) {
  const size_t cap = 1u << 16;
  const size_t n = text != NULL ? strlen(text) : 0;
  return (int)(n < cap ? n : cap);
}

void carve_text_size(int w, int h, const char* text, int* text_w, int* text_h) {
  const int s = carve_text_scale(w, h);
  if (text_w != NULL) {
    *text_w = (label_chars(text) * CARVE_FONT_CELL_W + 1) * s;
  }
  if (text_h != NULL) {
    *text_h = CARVE_FONT_CELL_H * s;
  }
}

void carve_draw_text(uint8_t* rgb, int w, int h, int x, int y, const char* text,
                     const uint8_t fg[3], const uint8_t bg[3]) {
  if (rgb == NULL || text == NULL || fg == NULL || w <= 0 || h <= 0) {
    return;
  }
  // Far away labels: nothing to draw, and no int overflow below.
  if (x > w || y > h || x < -(1 << 24) || y < -(1 << 24)) {
    return;
  }
  const int s = carve_text_scale(w, h);
  const int chars = label_chars(text);
  if (bg != NULL) {
    int text_w, text_h;
    carve_text_size(w, h, text, &text_w, &text_h);
    fill_rect(rgb, w, h, x, y, x + text_w, y + text_h, bg);
  }
  // Glyph i covers columns x + (1 + 6i + col) * s and rows y + (1 + row) * s.
  for (int i = 0; i < chars; i++) {
    const int gx = x + (1 + i * CARVE_FONT_CELL_W) * s;
    if (gx >= w) {
      break;
    }
    const unsigned char ch = (unsigned char)text[i];
    const uint8_t* glyph = font5x7[(ch >= 32 && ch <= 126 ? ch : '?') - 32];
    for (int row = 0; row < 7; row++) {
      for (int col = 0; col < 5; col++) {
        if (glyph[row] & (0x10 >> col)) {
          const int px = gx + col * s, py = y + (1 + row) * s;
          fill_rect(rgb, w, h, px, py, px + s, py + s, fg);
        }
      }
    }
  }
}

// utils.plotting.Colors.palette, hex "042AFF" ... "A2FF0B", as RGB.
static const uint8_t palette[20][3] = {
    {0x04, 0x2A, 0xFF}, {0x0B, 0xDB, 0xEB}, {0xF3, 0xF3, 0xF3}, {0x00, 0xDF, 0xB7},
    {0x11, 0x1F, 0x68}, {0xFF, 0x6F, 0xDD}, {0xFF, 0x44, 0x4F}, {0xCC, 0xED, 0x00},
    {0x00, 0xF3, 0x44}, {0xBD, 0x00, 0xFF}, {0x00, 0xB4, 0xFF}, {0xDD, 0x00, 0xBA},
    {0x00, 0xFF, 0xFF}, {0x26, 0xC0, 0x00}, {0x01, 0xFF, 0xB3}, {0x7D, 0x24, 0xFF},
    {0x7B, 0x00, 0x68}, {0xFF, 0x1B, 0x6C}, {0xFC, 0x6D, 0x2F}, {0xA2, 0xFF, 0x0B},
};

void carve_palette_color(int class_id, uint8_t out[3]) {
  if (out == NULL) {
    return;
  }
  const int i = ((class_id % 20) + 20) % 20;
  memcpy(out, palette[i], 3);
}

// ---- Masks, keypoints, rotated boxes ----------------------------------------

void carve_draw_mask(uint8_t* rgb, int w, int h, const uint8_t* mask, const uint8_t color[3],
                     float alpha) {
  if (rgb == NULL || mask == NULL || color == NULL || w <= 0 || h <= 0 || alpha != alpha) {
    return;
  }
  alpha = alpha < 0.0f ? 0.0f : (alpha > 1.0f ? 1.0f : alpha);
  // Annotator.masks, one mask: inv = 1 - alpha, mcs = color / 255 * alpha,
  // out = byte((im / 255 * inv + mcs) * 255), each step rounded to float (volatile:
  // no FMA contraction, PyTorch runs them as separate kernels).
  const float inv = 1.0f - alpha;
  float mcs[3];
  for (int c = 0; c < 3; c++) {
    mcs[c] = ((float)color[c] / 255.0f) * alpha;
  }
  for (size_t p = 0; p < (size_t)w * (size_t)h; p++) {
    if (mask[p] == 0) {
      continue;
    }
    uint8_t* px = rgb + p * 3;
    for (int c = 0; c < 3; c++) {
      volatile float scaled = ((float)px[c] / 255.0f) * inv;
      const float v = (scaled + mcs[c]) * 255.0f;
      px[c] = (uint8_t)(v >= 255.0f ? 255.0f : (v > 0.0f ? v : 0.0f));
    }
  }
}

// Fills the pixels whose centres (x, y) lie within `radius` of the segment
// (x0, y0) - (x1, y1) (a capsule; a disc when the ends coincide), clipped to the
// image. Row by row: the capsule is convex, so its row section is the union of
// the sections of the two end discs and of the band around the segment.
static void fill_capsule(uint8_t* rgb, int w, int h, double x0, double y0, double x1, double y1,
                         double radius, const uint8_t color[3]) {
  const double ylo = fmax(fmin(y0, y1) - radius, 0.0);
  const double yhi = fmin(fmax(y0, y1) + radius, (double)h - 1.0);
  if (!(ylo <= yhi)) {
    return;
  }
  const double dx = x1 - x0, dy = y1 - y0, len = sqrt(dx * dx + dy * dy);
  const double r2 = radius * radius;
  for (int y = (int)ceil(ylo); y <= (int)floor(yhi); y++) {
    double lo = INFINITY, hi = -INFINITY;
    // End discs.
    const double ends[2][2] = {{x0, y0}, {x1, y1}};
    for (int e = 0; e < 2; e++) {
      const double ddy = (double)y - ends[e][1];
      if (ddy * ddy <= r2) {
        const double half = sqrt(r2 - ddy * ddy);
        lo = fmin(lo, ends[e][0] - half);
        hi = fmax(hi, ends[e][0] + half);
      }
    }
    // Band: 0 <= (p - p0) . u <= len and |(p - p0) x u| <= radius, u = unit direction.
    if (len > 0.0) {
      const double ux = dx / len, uy = dy / len, ry = (double)y - y0;
      double blo = -INFINITY, bhi = INFINITY;
      // Along: 0 <= (x - x0) ux + ry uy <= len.
      if (ux != 0.0) {
        double a = (0.0 - ry * uy) / ux + x0, b = (len - ry * uy) / ux + x0;
        blo = fmax(blo, fmin(a, b));
        bhi = fmin(bhi, fmax(a, b));
      } else if (ry * uy < 0.0 || ry * uy > len) {
        bhi = -INFINITY;
      }
      // Across: |(x - x0) uy - ry ux| <= radius.
      if (uy != 0.0) {
        double a = (ry * ux - radius) / uy + x0, b = (ry * ux + radius) / uy + x0;
        blo = fmax(blo, fmin(a, b));
        bhi = fmin(bhi, fmax(a, b));
      } else if (fabs(ry * ux) > radius) {
        bhi = -INFINITY;
      }
      if (blo <= bhi) {
        lo = fmin(lo, blo);
        hi = fmax(hi, bhi);
      }
    }
    lo = fmax(ceil(lo - 1e-9), 0.0);
    hi = fmin(floor(hi + 1e-9), (double)w - 1.0);
    if (lo <= hi) {
      fill_rect(rgb, w, h, (int)lo, y, (int)hi + 1, y + 1, color);
    }
  }
}

// Radius of the capsule that draws a line `thickness` pixels wide the way
// cv2.line does: one pixel for 1, else 2 * ceil(t / 2) + 1 pixels across an
// axis-aligned line (t + 1 for even t, t + 2 for odd t), i.e. (t + 1) / 2.
static double line_radius(int thickness) {
  return thickness <= 1 ? 0.5 : (thickness + 1) / 2.0;
}

// Python's round(x) for x >= 0 (half to even).
static double round_half_even_pos(double x) {
  const double f = floor(x), frac = x - f;
  return frac > 0.5 ? f + 1.0 : frac < 0.5 ? f : (fmod(f, 2.0) == 0.0 ? f : f + 1.0);
}

// Annotator's default line width on a w x h x 3 image.
static int annotator_line_width(int w, int h) {
  const double lw = round_half_even_pos(((double)w + (double)h + 3.0) / 2.0 * 0.003);
  return lw < 2.0 ? 2 : (int)fmin(lw, 4096.0);
}

// utils.plotting.Colors.pose_palette, as listed there (Ultralytics draws these
// triples on a BGR image).
static const uint8_t pose_palette[20][3] = {
    {255, 128, 0},   {255, 153, 51},  {255, 178, 102}, {230, 230, 0},   {255, 153, 255},
    {153, 204, 255}, {255, 102, 255}, {255, 51, 255},  {102, 178, 255}, {51, 153, 255},
    {255, 153, 153}, {255, 102, 102}, {255, 51, 51},   {153, 255, 153}, {102, 255, 102},
    {51, 255, 51},   {0, 255, 0},     {0, 0, 255},     {255, 0, 0},     {255, 255, 255},
};

// Annotator.skeleton (1-based keypoint numbers) and its limb / keypoint colours.
static const uint8_t coco_skeleton[19][2] = {
    {16, 14}, {14, 12}, {17, 15}, {15, 13}, {12, 13}, {6, 12}, {7, 13}, {6, 7}, {6, 8}, {7, 9},
    {8, 10},  {9, 11},  {2, 3},   {1, 2},   {1, 3},   {2, 4},  {3, 5},  {4, 6}, {5, 7},
};
static const uint8_t coco_limb_color[19] = {9, 9, 9, 9, 7, 7, 7, 0, 0, 0,
                                            0, 0, 16, 16, 16, 16, 16, 16, 16};
static const uint8_t coco_kpt_color[17] = {16, 16, 16, 16, 16, 0, 0, 0, 0,
                                           0, 0, 9, 9, 9, 9, 9, 9};

// A palette triple drawn by cv2 on a BGR image, as RGB.
static void bgr_to_rgb(const uint8_t bgr[3], uint8_t rgb[3]) {
  rgb[0] = bgr[2];
  rgb[1] = bgr[1];
  rgb[2] = bgr[0];
}

// int(v) of Python for a finite float: truncation towards zero, kept in range.
static double trunc_coord(float v) { return fmax(fmin(trunc((double)v), 1e9), -1e9); }

void carve_draw_keypoints(uint8_t* rgb, int w, int h, const float* kpts, size_t nk,
                          float min_visibility) {
  if (rgb == NULL || kpts == NULL || w <= 0 || h <= 0) {
    return;
  }
  const double radius = 5.0;  // Results.plot(kpt_radius=5)
  const int is_pose = nk == 17;
  // A point is drawn when visible and finite (Annotator: k[2] < conf_thres skips).
  for (size_t i = 0; i < nk; i++) {
    const float* k = kpts + 3 * i;
    if (k[2] < min_visibility || !isfinite(k[0]) || !isfinite(k[1])) {
      continue;
    }
    uint8_t color[3];
    if (is_pose) {
      bgr_to_rgb(pose_palette[coco_kpt_color[i]], color);
    } else {
      uint8_t shown[3];
      carve_palette_color((int)(i % 20), shown);  // colors(i) is RGB, drawn as BGR
      bgr_to_rgb(shown, color);
    }
    const double x = trunc_coord(k[0]), y = trunc_coord(k[1]);
    fill_capsule(rgb, w, h, x, y, x, y, radius, color);
  }
  if (!is_pose) {
    return;
  }
  const int thickness = (annotator_line_width(w, h) + 1) / 2;  // ceil(lw / 2)
  for (size_t i = 0; i < 19; i++) {
    const float* a = kpts + 3 * (size_t)(coco_skeleton[i][0] - 1);
    const float* b = kpts + 3 * (size_t)(coco_skeleton[i][1] - 1);
    if (a[2] < min_visibility || b[2] < min_visibility || !isfinite(a[0]) || !isfinite(a[1]) ||
        !isfinite(b[0]) || !isfinite(b[1])) {
      continue;
    }
    const double ax = trunc_coord(a[0]), ay = trunc_coord(a[1]);
    const double bx = trunc_coord(b[0]), by = trunc_coord(b[1]);
    if (ax < 0.0 || ay < 0.0 || bx < 0.0 || by < 0.0) {
      continue;  // Annotator: min(pos1 + pos2) < 0
    }
    uint8_t color[3];
    bgr_to_rgb(pose_palette[coco_limb_color[i]], color);
    fill_capsule(rgb, w, h, ax, ay, bx, by, line_radius(thickness), color);
  }
}

void carve_draw_rotated_box(uint8_t* rgb, int w, int h, float cx, float cy, float bw, float bh,
                            float angle, const uint8_t color[3], int thickness) {
  if (rgb == NULL || color == NULL || w <= 0 || h <= 0) {
    return;
  }
  if (!isfinite(cx) || !isfinite(cy) || !isfinite(bw) || !isfinite(bh) || !isfinite(angle)) {
    return;
  }
  if (thickness < 1) {
    thickness = 1;
  }
  if (thickness > w + h) {
    thickness = w + h;
  }
  // ops.xywhr2xyxyxyxy: vec1 = w/2 (cos, sin), vec2 = h/2 (-sin, cos).
  const double c = cos((double)angle), s = sin((double)angle);
  const double v1x = bw / 2.0 * c, v1y = bw / 2.0 * s;
  const double v2x = -bh / 2.0 * s, v2y = bh / 2.0 * c;
  const double corner[4][2] = {
      {cx + v1x + v2x, cy + v1y + v2y},
      {cx + v1x - v2x, cy + v1y - v2y},
      {cx - v1x - v2x, cy - v1y - v2y},
      {cx - v1x + v2x, cy - v1y + v2y},
  };
  double pt[4][2];
  for (int i = 0; i < 4; i++) {
    pt[i][0] = fmax(fmin(trunc(corner[i][0]), 1e9), -1e9);
    pt[i][1] = fmax(fmin(trunc(corner[i][1]), 1e9), -1e9);
  }
  for (int i = 0; i < 4; i++) {
    const int j = (i + 1) % 4;
    fill_capsule(rgb, w, h, pt[i][0], pt[i][1], pt[j][0], pt[j][1], line_radius(thickness),
                 color);
  }
}
