// carve runtime: the thread pool of the CPU packages, and the CPUs a process may use.
//
// One parallel step (a call of one of the pthreadpool_parallelize_* functions below) is cut into
// chunks of consecutive tiles, and each thread of the pool (the caller included) gets a contiguous
// share of them. A thread claims chunks from the front of its own share and, when that is empty,
// steals from the back of the others'; the step is over when every chunk is done. No step waits
// for a worker that the OS has not scheduled: its share is stolen by the caller and the running
// workers, and a worker that wakes late finds nothing to claim. A preempted worker holds at most
// one chunk (about 1 / (CARVE_POOL_CHUNKS_PER_THREAD * threads) of the step), and on an idle
// machine the threads finish a step within about one chunk of each other. When workers keep being
// preempted while they hold a chunk, the pool deals steps to fewer threads (carve_pool_width) and
// tries more again later.
// Workers spin for up to CARVE_POOL_SPIN_US between steps, then sleep on a futex (a condition
// variable off Linux).
// Nothing is allocated after create; which thread runs a tile never changes what the tile computes.
//
// The pool is the `pthreadpool_t` of XNNPACK and of carve's kernels: this file provides the 13
// pthreadpool_* functions that Debian's libXNNPACK.so imports (same declarations as <pthreadpool.h>
// of 2021-05) plus create / destroy. A package executable's definitions take precedence over
// libpthreadpool's (ELF symbol interposition), so XNNPACK's operators run on this scheduler too;
// docs/backends/xnnpack.md says why carve has its own. The pool is meant for one caller at a time
// (a model context is used by one thread at a time).

#ifndef CARVE_POOL_H
#define CARVE_POOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- CPUs -------------------------------------------------------------------

// The number of CPUs this process may run on (>= 1): the CPUs of its affinity mask
// (sched_getaffinity; taskset, cpusets), capped by its cgroup CPU quota rounded up (cgroup v2
// cpu.max of its cgroup and every ancestor, or v1 cpu.cfs_quota_us / cpu.cfs_period_us).
// Off Linux: the online processors.
size_t carve_cpu_count(void);

// The same, with the cgroup files read under `root` instead of "/" (root "/x" reads
// /x/proc/self/cgroup and /x/sys/fs/cgroup/...): for tests.
size_t carve_cpu_count_at(const char* root);

// The threads a model context uses for a requested count: 0 -> carve_cpu_count(); more than
// carve_cpu_count() -> carve_cpu_count() unless allow_oversubscribe is nonzero; otherwise the
// request.
size_t carve_threads_for(size_t requested, int allow_oversubscribe);

// ---- Pool -------------------------------------------------------------------

// Chunks per thread that a step is cut into (fewer when the step has fewer tiles). Claiming a chunk
// of one's own share is an uncontended compare-and-swap, so chunks can be small: 8 per thread left
// yolo26n 640 at 2 threads 12% slower than libpthreadpool's one-tile claims (docs/performance.md).
#define CARVE_POOL_CHUNKS_PER_THREAD 32
// Kernels that cut their work into one task per scratch slot (the Winograd convolution) get this
// many slots per thread, so that a preempted thread holds a quarter of its share, not all of it.
#define CARVE_POOL_SLOTS_PER_THREAD 4

typedef struct pthreadpool* pthreadpool_t;

#ifndef PTHREADPOOL_FLAG_DISABLE_DENORMALS
#define PTHREADPOOL_FLAG_DISABLE_DENORMALS 0x00000001  // flush denormals to zero while the step's tasks run
#endif
#ifndef PTHREADPOOL_FLAG_YIELD_WORKERS
#define PTHREADPOOL_FLAG_YIELD_WORKERS 0x00000002  // accepted; carve's workers always sleep after a brief spin
#endif

typedef void (*pthreadpool_task_1d_t)(void*, size_t);
typedef void (*pthreadpool_task_1d_tile_1d_t)(void*, size_t, size_t);
typedef void (*pthreadpool_task_2d_t)(void*, size_t, size_t);
typedef void (*pthreadpool_task_2d_tile_1d_t)(void*, size_t, size_t, size_t);
typedef void (*pthreadpool_task_2d_tile_2d_t)(void*, size_t, size_t, size_t, size_t);
typedef void (*pthreadpool_task_3d_t)(void*, size_t, size_t, size_t);
typedef void (*pthreadpool_task_3d_tile_2d_t)(void*, size_t, size_t, size_t, size_t, size_t);
typedef void (*pthreadpool_task_4d_t)(void*, size_t, size_t, size_t, size_t);
typedef void (*pthreadpool_task_4d_tile_2d_t)(void*, size_t, size_t, size_t, size_t, size_t, size_t);
typedef void (*pthreadpool_task_5d_t)(void*, size_t, size_t, size_t, size_t, size_t);
typedef void (*pthreadpool_task_5d_tile_2d_t)(void*, size_t, size_t, size_t, size_t, size_t, size_t, size_t);
typedef void (*pthreadpool_task_6d_tile_2d_t)(void*, size_t, size_t, size_t, size_t, size_t, size_t, size_t,
                                              size_t);

// A pool of `threads` threads, the caller included (threads - 1 workers); 0: carve_cpu_count().
// NULL when a thread or the pool cannot be created.
pthreadpool_t pthreadpool_create(size_t threads);
// Joins the workers and frees the pool; NULL is ignored.
void pthreadpool_destroy(pthreadpool_t pool);
// The pool's threads, the caller included; 1 for NULL.
size_t pthreadpool_get_threads_count(pthreadpool_t pool);
// The threads the pool deals steps to now (1..threads; 1 for NULL). It narrows when the caller keeps
// waiting for workers that the OS preempted while they held a chunk (a shared or over-asked machine)
// and widens again by probes (runtime/carve_pool.c, `adapt`). Results do not depend on it.
size_t carve_pool_width(pthreadpool_t pool);
// Parallel steps this pool has run (a serial fallback on one thread counts too): for tests.
uint64_t carve_pool_steps(pthreadpool_t pool);
// Times a worker moved off a CPU that another of the pool's threads was on (runtime/carve_pool.c,
// place()): for tests and benchmarks; 0 for NULL.
uint64_t carve_pool_moves(pthreadpool_t pool);

// Each calls the task once for every index (untiled dimensions) or tile (tiled ones: start and
// size, the last tile cut at the range), on the pool's threads (on the caller alone for a NULL
// pool or one thread), and returns when all are done. Argument order as in <pthreadpool.h>.
void pthreadpool_parallelize_1d(pthreadpool_t pool, pthreadpool_task_1d_t task, void* context, size_t range,
                                uint32_t flags);
void pthreadpool_parallelize_1d_tile_1d(pthreadpool_t pool, pthreadpool_task_1d_tile_1d_t task, void* context,
                                        size_t range, size_t tile, uint32_t flags);
void pthreadpool_parallelize_2d(pthreadpool_t pool, pthreadpool_task_2d_t task, void* context, size_t range_i,
                                size_t range_j, uint32_t flags);
void pthreadpool_parallelize_2d_tile_1d(pthreadpool_t pool, pthreadpool_task_2d_tile_1d_t task, void* context,
                                        size_t range_i, size_t range_j, size_t tile_j, uint32_t flags);
void pthreadpool_parallelize_2d_tile_2d(pthreadpool_t pool, pthreadpool_task_2d_tile_2d_t task, void* context,
                                        size_t range_i, size_t range_j, size_t tile_i, size_t tile_j,
                                        uint32_t flags);
void pthreadpool_parallelize_3d(pthreadpool_t pool, pthreadpool_task_3d_t task, void* context, size_t range_i,
                                size_t range_j, size_t range_k, uint32_t flags);
void pthreadpool_parallelize_3d_tile_2d(pthreadpool_t pool, pthreadpool_task_3d_tile_2d_t task, void* context,
                                        size_t range_i, size_t range_j, size_t range_k, size_t tile_j,
                                        size_t tile_k, uint32_t flags);
void pthreadpool_parallelize_4d(pthreadpool_t pool, pthreadpool_task_4d_t task, void* context, size_t range_i,
                                size_t range_j, size_t range_k, size_t range_l, uint32_t flags);
void pthreadpool_parallelize_4d_tile_2d(pthreadpool_t pool, pthreadpool_task_4d_tile_2d_t task, void* context,
                                        size_t range_i, size_t range_j, size_t range_k, size_t range_l,
                                        size_t tile_k, size_t tile_l, uint32_t flags);
void pthreadpool_parallelize_5d(pthreadpool_t pool, pthreadpool_task_5d_t task, void* context, size_t range_i,
                                size_t range_j, size_t range_k, size_t range_l, size_t range_m, uint32_t flags);
void pthreadpool_parallelize_5d_tile_2d(pthreadpool_t pool, pthreadpool_task_5d_tile_2d_t task, void* context,
                                        size_t range_i, size_t range_j, size_t range_k, size_t range_l,
                                        size_t range_m, size_t tile_l, size_t tile_m, uint32_t flags);
void pthreadpool_parallelize_6d_tile_2d(pthreadpool_t pool, pthreadpool_task_6d_tile_2d_t task, void* context,
                                        size_t range_i, size_t range_j, size_t range_k, size_t range_l,
                                        size_t range_m, size_t range_n, size_t tile_m, size_t tile_n,
                                        uint32_t flags);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CARVE_POOL_H
