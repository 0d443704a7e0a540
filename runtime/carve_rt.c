// carve runtime: status strings and the thread-pool glue (see carve_rt.h; the pool: carve_pool.c).

#include "carve_rt.h"

// ---- Status -----------------------------------------------------------------

const char* carve_status_str(carve_status status) {
#ifdef CARVE_RT_NO_ERROR_STRINGS
  (void)status;
  return "";
#else
  switch (status) {
    case CARVE_OK:
      return "success";
    case CARVE_ERR_INVALID_ARGUMENT:
      return "invalid argument";
    case CARVE_ERR_OUT_OF_MEMORY:
      return "out of memory";
    case CARVE_ERR_BACKEND:
      return "backend failure (XNNPACK, CUDA or cuBLAS)";
    case CARVE_ERR_IO:
      return "file input/output error";
    case CARVE_ERR_UNSUPPORTED:
      return "unsupported";
    case CARVE_ERR_BAD_WEIGHTS:
      return "weights blob is missing, truncated or for another model";
    case CARVE_ERR_BAD_IMAGE:
      return "image is empty, malformed or cannot be decoded";
    case CARVE_ERR_WEIGHTS_MAGIC:
      return "not a carve weights file (bad magic)";
    case CARVE_ERR_WEIGHTS_VERSION:
      return "weights file has an unsupported format version";
    case CARVE_ERR_WEIGHTS_SIZE:
      return "weights file is truncated or has the wrong size";
    case CARVE_ERR_WEIGHTS_CHECKSUM:
      return "weights file is corrupted (checksum mismatch)";
    case CARVE_ERR_WEIGHTS_MODEL:
      return "weights file is for another model or weight type";
  }
  return "unknown status";
#endif
}

// ---- Parallel loops ---------------------------------------------------------

void carve_parallelize_1d_tile(pthreadpool_t pool, carve_task_1d_tile_t task, void* context,
                               size_t range, size_t tile) {
  if (range == 0) {
    return;
  }
  if (tile == 0) {
    tile = 1;
  }
#ifdef CARVE_RT_NO_THREADS
  (void)pool;
  for (size_t start = 0; start < range; start += tile) {
    const size_t left = range - start;
    task(context, start, left < tile ? left : tile);
  }
#else
  pthreadpool_parallelize_1d_tile_1d(pool, task, context, range, tile, 0);
#endif
}
