// libFuzzer target: carve_jpeg_exif_orientation (runtime/carve_io.c) on arbitrary bytes.
//
// The Exif parser walks JPEG markers and a TIFF IFD whose lengths, offsets and counts all come from the
// file; every read must stay inside the buffer (ASan: the input is an exact-size copy) and the result must
// be an orientation 1..8. Built and run by tests/security/fuzz_exif.py (ctest security_fuzz_exif).
// stb_image's own decoder is not fuzzed here: stb documents that it is not hardened against hostile files.

#include <stdint.h>
#include <stdlib.h>

#include "carve_io.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int o = carve_jpeg_exif_orientation(data, size);
  if (o < 1 || o > 8) {
    abort();
  }
  return 0;
}
