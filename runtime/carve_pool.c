// carve runtime: the thread pool and the CPU count (see carve_pool.h).
//
// One step, as the caller publishes it:
//   step      what to run: the task, its ranges and tiles, items (tiles) per chunk, flags; plain
//             fields, written only while no chunk of any step is outstanding;
//   pending   chunks of the step not yet reported done (the caller's futex word); a thread reports
//             the chunks it ran in one subtraction when it finds nothing left to claim;
//   slots     one share per thread, (generation << 32) | (end << 16) | begin, each on its own cache
//             line: its owner claims chunk `begin` by a compare-and-swap to begin + 1, a thief chunk
//             `end - 1` by one to end - 1; a compare-and-swap fails when another thread got there
//             first or the caller has moved on to another step (another generation);
//   epoch     bumped once per step, the workers' futex word.
// A thread reads `step` only after a claim succeeded: the step cannot end (pending > 0) and the
// caller cannot rewrite it before that chunk is reported, and the claim's acquire pairs with the
// caller's release of the share, so the thread sees the step the chunk belongs to. A worker that
// wakes after the step ended finds no chunk to claim, so it never delays the caller.

#define _GNU_SOURCE  // sched_getaffinity, CPU_COUNT

#include "carve_pool.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>  // snprintf only (files are read with open / read)
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#define CARVE_POOL_FUTEX 1
#else
#define CARVE_POOL_FUTEX 0
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

// How long a thread spins before it sleeps, in microseconds: long enough to span the gap between two
// steps of a run (a serial layer, a step too small to share), short enough to leave a CPU to the
// other programs soon after a run ends. Measured in time, not in pause instructions, whose latency
// differs tenfold between CPUs. A pool whose width (see `adapt`) is above the CPU count does not spin
// at all: there a spinning thread keeps a thread with work off its CPU. docs/performance.md has the
// measurements behind the value.
#ifndef CARVE_POOL_SPIN_US
#define CARVE_POOL_SPIN_US 100
#endif

#ifdef CARVE_POOL_TEST_HOOKS
// tests/runtime/test_pool.c: called by a worker before it claims chunks, to hold it back as the OS could.
static void test_worker_hook(void);
#define WORKER_HOOK() test_worker_hook()
#else
#define WORKER_HOOK() ((void)0)
#endif

#define MAX_CHUNKS 0xffffu
#define MAX_DIMS 6

// ---- CPUs -------------------------------------------------------------------

// Reads a small text file (at most size - 1 bytes) into buf; 0 on failure. open/read, not stdio:
// nothing here allocates.
static int read_text(const char* path, char* buf, size_t size) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return 0;
  }
  size_t used = 0;
  while (used + 1 < size) {
    const ssize_t got = read(fd, buf + used, size - 1 - used);
    if (got <= 0) {
      break;
    }
    used += (size_t)got;
  }
  close(fd);
  buf[used] = '\0';
  return used > 0;
}

static int parse_u64(const char** s, unsigned long long* out) {
  const char* p = *s;
  unsigned long long v = 0;
  if (*p < '0' || *p > '9') {
    return 0;
  }
  while (*p >= '0' && *p <= '9') {
    v = v * 10u + (unsigned long long)(*p - '0');
    p++;
  }
  *s = p;
  *out = v;
  return 1;
}

// CPUs a quota of `quota` per `period` allows, rounded up; 0 for no limit.
static size_t quota_cpus(unsigned long long quota, unsigned long long period) {
  if (quota == 0 || period == 0) {
    return 0;
  }
  return (size_t)((quota + period - 1) / period);
}

static size_t min_limit(size_t a, size_t b) { return a == 0 ? b : (b == 0 ? a : (a < b ? a : b)); }

// cgroup v2: "max 100000" (no limit) or "<quota> <period>" in <dir>/cpu.max.
static size_t v2_limit(const char* dir) {
  char path[4096], text[128];
  if (snprintf(path, sizeof(path), "%s/cpu.max", dir) >= (int)sizeof(path) || !read_text(path, text, sizeof(text))) {
    return 0;
  }
  const char* p = text;
  unsigned long long quota = 0, period = 0;
  if (!parse_u64(&p, &quota) || *p++ != ' ' || !parse_u64(&p, &period)) {
    return 0;  // "max ..." or unreadable
  }
  return quota_cpus(quota, period);
}

// cgroup v1: <dir>/cpu.cfs_quota_us (-1: no limit) and <dir>/cpu.cfs_period_us.
static size_t v1_limit(const char* dir) {
  char path[4096], text[64];
  unsigned long long quota = 0, period = 0;
  if (snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir) >= (int)sizeof(path) ||
      !read_text(path, text, sizeof(text))) {
    return 0;
  }
  const char* p = text;
  if (!parse_u64(&p, &quota)) {
    return 0;  // -1
  }
  if (snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir) >= (int)sizeof(path) ||
      !read_text(path, text, sizeof(text))) {
    return 0;
  }
  p = text;
  if (!parse_u64(&p, &period)) {
    return 0;
  }
  return quota_cpus(quota, period);
}

// The tightest limit of <mount><cgroup> and each of its ancestors up to <mount>.
static size_t limit_along(const char* mount, const char* cgroup, size_t (*limit)(const char*)) {
  char dir[4096];
  if (snprintf(dir, sizeof(dir), "%s%s", mount, strcmp(cgroup, "/") == 0 ? "" : cgroup) >= (int)sizeof(dir)) {
    return 0;
  }
  const size_t base = strlen(mount);
  size_t best = 0;
  for (;;) {
    best = min_limit(best, limit(dir));
    char* slash = strrchr(dir, '/');
    if (slash == NULL || (size_t)(slash - dir) < base) {
      break;
    }
    *slash = '\0';
  }
  return best;
}

// Whether the comma-separated controller list [s, end) names "cpu".
static int names_cpu(const char* s, const char* end) {
  while (s < end) {
    const char* comma = memchr(s, ',', (size_t)(end - s));
    const char* stop = comma != NULL ? comma : end;
    if (stop - s == 3 && memcmp(s, "cpu", 3) == 0) {
      return 1;
    }
    s = stop + 1;
  }
  return 0;
}

// The CPU quota of this process's cgroups (v2 and v1), rounded up; 0 for none found.
static size_t cgroup_cpus(const char* root) {
  char path[4096], text[4096], mount[4096];
  if (snprintf(path, sizeof(path), "%s/proc/self/cgroup", root) >= (int)sizeof(path) ||
      !read_text(path, text, sizeof(text))) {
    return 0;
  }
  size_t best = 0;
  for (char* line = text; *line != '\0';) {
    char* nl = strchr(line, '\n');
    char* end = nl != NULL ? nl : line + strlen(line);
    char* c1 = memchr(line, ':', (size_t)(end - line));
    char* c2 = c1 != NULL ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
    if (c2 != NULL) {
      *end = '\0';
      const char* cgroup = c2 + 1;
      if (c2 == c1 + 1 && c1 - line == 1 && line[0] == '0') {  // "0::<path>": cgroup v2
        if (snprintf(mount, sizeof(mount), "%s/sys/fs/cgroup", root) < (int)sizeof(mount)) {
          best = min_limit(best, limit_along(mount, cgroup, v2_limit));
        }
      } else if (names_cpu(c1 + 1, c2)) {  // "<id>:cpu,cpuacct:<path>": cgroup v1
        static const char* const kMounts[] = {"cpu,cpuacct", "cpu", "cpuacct,cpu"};
        for (size_t i = 0; i < sizeof(kMounts) / sizeof(kMounts[0]); i++) {
          if (snprintf(mount, sizeof(mount), "%s/sys/fs/cgroup/%s", root, kMounts[i]) < (int)sizeof(mount)) {
            // In a container the cgroup's own folder is often mounted at the root: try both.
            best = min_limit(best, limit_along(mount, cgroup, v1_limit));
            best = min_limit(best, v1_limit(mount));
          }
        }
      }
    }
    if (nl == NULL) {
      break;
    }
    line = nl + 1;
  }
  return best;
}

static size_t affinity_cpus(void) {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) {
      return (size_t)n;
    }
  }
#endif
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? (size_t)online : 1;
}

size_t carve_cpu_count_at(const char* root) {
  const size_t cpus = affinity_cpus();
  const size_t quota = cgroup_cpus(root != NULL && strcmp(root, "/") != 0 ? root : "");
  return quota != 0 && quota < cpus ? quota : cpus;
}

size_t carve_cpu_count(void) { return carve_cpu_count_at("/"); }

size_t carve_threads_for(size_t requested, int allow_oversubscribe) {
  const size_t cpus = carve_cpu_count();
  if (requested == 0 || (requested > cpus && !allow_oversubscribe)) {
    return cpus;
  }
  return requested;
}

// ---- Floating-point state ---------------------------------------------------

// PTHREADPOOL_FLAG_DISABLE_DENORMALS: flush-to-zero and denormals-are-zero while a step's tasks run,
// on whichever thread runs them (as libpthreadpool does; XNNPACK's operators ask for it).
typedef struct fpu_state {
#if defined(__x86_64__) || defined(__i386__)
  unsigned int mxcsr;
#elif defined(__aarch64__)
  uint64_t fpcr;
#else
  int unused;
#endif
} fpu_state;

static fpu_state fpu_flush_denormals(void) {
  fpu_state saved;
#if defined(__x86_64__) || defined(__i386__)
  saved.mxcsr = _mm_getcsr();
  _mm_setcsr(saved.mxcsr | 0x8040u);  // FTZ | DAZ
#elif defined(__aarch64__)
  uint64_t fpcr;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  saved.fpcr = fpcr;
  __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | UINT64_C(0x1080000)));  // FZ, FZ16
#else
  saved.unused = 0;
#endif
  return saved;
}

static void fpu_restore(fpu_state saved) {
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr(saved.mxcsr);
#elif defined(__aarch64__)
  __asm__ volatile("msr fpcr, %0" : : "r"(saved.fpcr));
#else
  (void)saved;
#endif
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

// ---- Steps ------------------------------------------------------------------

typedef enum step_kind {
  K_1D, K_1D_TILE_1D, K_2D, K_2D_TILE_1D, K_2D_TILE_2D, K_3D, K_3D_TILE_2D, K_4D, K_4D_TILE_2D,
  K_5D, K_5D_TILE_2D, K_6D_TILE_2D,
} step_kind;

typedef struct step {
  step_kind kind;
  void (*task)(void);     // the caller's task, cast back by kind
  void* context;
  size_t dims;
  size_t range[MAX_DIMS];  // per dimension: the range,
  size_t tile[MAX_DIMS];   // its tile (1: untiled),
  size_t count[MAX_DIMS];  // and its number of tiles
  size_t items;            // tiles in all (the product of count)
  size_t per_chunk;        // tiles per chunk
  uint32_t flags;
} step;

#define CACHE_LINE 64

// One thread's share of the current step: (generation << 32) | (end << 16) | begin, chunks
// [begin, end). Its owner claims from the front, the others steal from the back; on its own cache
// line, so that an owner's claims cost no traffic until someone steals.
typedef struct slot {
  _Alignas(CACHE_LINE) _Atomic uint64_t range;
  struct pthreadpool* pool;  // the slot's pool and index: a worker's start argument
  size_t index;
  _Atomic int cpu;           // the CPU its thread was on at its last step (-1: not known); see place()
  int64_t moved_ns;          // a worker's: when it last moved off a CPU it shared with the pool
} slot;

// The pool's width follows what the OS gives it. On a machine whose CPUs are shared (another busy
// process, more threads than CPUs) the threads of a wide pool lose more than they win, two ways:
//   - a worker preempted while it holds a chunk makes the caller wait for it (the chunk cannot be
//     taken back) for a time slice of the scheduler, not a chunk's time;
//   - the caller itself is preempted, by the other programs or by its own workers, and no step
//     starts until it runs again: with one busy process on two CPUs, three threads share two CPUs
//     and a two-thread run gets no further than a one-thread run, which keeps a CPU to itself.
// So the caller counts, per window of ADAPT_WINDOW parallel steps, the time each step lost: its
// time off the CPU while it ran its chunks (wall time less its thread CPU time) and its wait beyond
// the step's tail (2 of its chunks + ADAPT_SLACK_NS). When that is more than 1/ADAPT_WAIT_SHARE
// of ADAPT_STRIKES windows in a row (of one, for a probe: so that a passing spike of load, say
// another program's threads spinning down, costs no narrowing), it halves the width (above the
// CPU count: narrows it to the CPU count). After `backoff` good windows it tries twice the width
// again (a probe); a bad probe doubles the backoff, up to
// ADAPT_BACKOFF_MAX windows, a good one resets it. The tiles, and so the results, do not depend on
// the width: XNNPACK and carve's kernels size them by pthreadpool_get_threads_count.
#define ADAPT_WINDOW 64
#define ADAPT_SLACK_NS 50000
#define ADAPT_WAIT_SHARE 5
#define ADAPT_BACKOFF_MAX 256
#define ADAPT_STRIKES 2

// Threads of the pool stacked on one CPU. Linux places a thread it wakes on an idle CPU, but in a
// virtual machine a CPU that has been idle for a while (its vCPU halted on the host) counts as
// "preempted" (vcpu_is_preempted), not as idle, so a worker woken after a pause of some tens of
// milliseconds lands on its caller's CPU and stays there until the load balancer moves one of them:
// for a few milliseconds the two run in turns (the worker spins through the caller's time slice), the
// caller's time off the CPU passes a fifth of its windows and `adapt` narrows the pool to one thread.
// Measured on the 2-vCPU development VM (docs/performance.md, "Stacked threads"): the int8
// yolo26n-shapes package at 640 on 2 threads ran 7-8 ms back to back, 14.5 ms with 50 ms pauses
// before each run, 8.7 ms with place(). So a worker about to run a step checks the CPUs of the
// others in the width (each records its own, the caller at every parallel step); when one shares
// its CPU and the process may run on a CPU none of them is on, it moves there: sched_setaffinity to
// those CPUs (the kernel migrates the thread before it returns) and back to the mask it had, so
// that nothing stays pinned and the scheduler is free to move it again. At most once per PLACE_INTERVAL_NS per worker, and never while the width is above
// the CPU count (threads must share CPUs then). `carve_pool_moves()` counts the moves.
#define PLACE_INTERVAL_NS 1000000

typedef struct adapt {
  int64_t window_ns;   // the parallel steps of this window: their time,
  int64_t waited_ns;   // and the caller's waits beyond their chunks
  uint32_t steps;      // steps of this window so far
  uint32_t backoff;    // good windows to wait before the next probe
  uint32_t left;       // of them, still to go
  int probing;         // this window runs a wider width than the last good one
  uint32_t strikes;    // bad windows in a row at a width that was good before
} adapt;

struct pthreadpool {
  _Alignas(CACHE_LINE) _Atomic uint32_t pending;  // chunks of the step not yet reported done
  _Atomic uint32_t caller_waiting;                // the caller asleep (or about to be) on pending
  _Alignas(CACHE_LINE) _Atomic uint32_t epoch;    // bumped once per step: the workers' futex word
  _Atomic uint32_t sleepers;                      // workers asleep (or about to be) on epoch
  _Atomic uint32_t stop;
  _Atomic uint32_t unpark;                        // bumped when the width grows or the pool stops: the
                                                  // futex word of the workers outside the width
  _Atomic uint64_t steps;
  _Atomic uint64_t moves;                         // place(): workers moved off a shared CPU
  _Atomic size_t width;                           // threads the caller deals steps to (1..threads)
  _Alignas(CACHE_LINE) uint32_t generation;       // the caller's
  step step;
  size_t threads;
  adapt adapt;                                    // the caller's: how `width` follows the waits
  int64_t spin_ns;                  // CARVE_POOL_SPIN_US
  size_t cpus;                      // carve_cpu_count() at create: no spinning while width > cpus
  size_t workers_started;
  slot* slots;                      // threads of them: [0] the caller's, [1 + i] worker i's
#if !CARVE_POOL_FUTEX
  pthread_mutex_t lock;
  pthread_cond_t cond;
#endif
  pthread_t workers[];
};

// Sleeps while *word == expected (may return early); wake() wakes up to n sleepers.
static void wait_word(struct pthreadpool* pool, _Atomic uint32_t* word, uint32_t expected) {
#if CARVE_POOL_FUTEX
  (void)pool;
  syscall(SYS_futex, (uint32_t*)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
#else
  pthread_mutex_lock(&pool->lock);
  while (atomic_load(word) == expected) {
    pthread_cond_wait(&pool->cond, &pool->lock);
  }
  pthread_mutex_unlock(&pool->lock);
#endif
}

static void wake(struct pthreadpool* pool, _Atomic uint32_t* word, uint32_t n) {
#if CARVE_POOL_FUTEX
  (void)pool;
  syscall(SYS_futex, (uint32_t*)word, FUTEX_WAKE_PRIVATE, n > 0x7fffffffu ? 0x7fffffff : (int)n, NULL, NULL, 0);
#else
  (void)word;
  (void)n;
  pthread_mutex_lock(&pool->lock);
  pthread_mutex_unlock(&pool->lock);
  pthread_cond_broadcast(&pool->cond);
#endif
}

// Runs tiles [first, first + n) of the step, in order.
static void run_items(const step* s, size_t first, size_t n) {
  size_t idx[MAX_DIMS] = {0}, start[MAX_DIMS] = {0}, size[MAX_DIMS] = {0};
  size_t rest = first;
  for (size_t d = s->dims; d-- > 0;) {
    idx[d] = rest % s->count[d];
    rest /= s->count[d];
  }
  for (size_t k = 0; k < n; k++) {
    for (size_t d = 0; d < s->dims; d++) {
      start[d] = idx[d] * s->tile[d];
      const size_t left = s->range[d] - start[d];
      size[d] = left < s->tile[d] ? left : s->tile[d];
    }
    const size_t* i = start;
    const size_t* t = size;
    void* c = s->context;
    switch (s->kind) {
      case K_1D: ((pthreadpool_task_1d_t)s->task)(c, i[0]); break;
      case K_1D_TILE_1D: ((pthreadpool_task_1d_tile_1d_t)s->task)(c, i[0], t[0]); break;
      case K_2D: ((pthreadpool_task_2d_t)s->task)(c, i[0], i[1]); break;
      case K_2D_TILE_1D: ((pthreadpool_task_2d_tile_1d_t)s->task)(c, i[0], i[1], t[1]); break;
      case K_2D_TILE_2D: ((pthreadpool_task_2d_tile_2d_t)s->task)(c, i[0], i[1], t[0], t[1]); break;
      case K_3D: ((pthreadpool_task_3d_t)s->task)(c, i[0], i[1], i[2]); break;
      case K_3D_TILE_2D: ((pthreadpool_task_3d_tile_2d_t)s->task)(c, i[0], i[1], i[2], t[1], t[2]); break;
      case K_4D: ((pthreadpool_task_4d_t)s->task)(c, i[0], i[1], i[2], i[3]); break;
      case K_4D_TILE_2D:
        ((pthreadpool_task_4d_tile_2d_t)s->task)(c, i[0], i[1], i[2], i[3], t[2], t[3]);
        break;
      case K_5D: ((pthreadpool_task_5d_t)s->task)(c, i[0], i[1], i[2], i[3], i[4]); break;
      case K_5D_TILE_2D:
        ((pthreadpool_task_5d_tile_2d_t)s->task)(c, i[0], i[1], i[2], i[3], i[4], t[3], t[4]);
        break;
      case K_6D_TILE_2D:
        ((pthreadpool_task_6d_tile_2d_t)s->task)(c, i[0], i[1], i[2], i[3], i[4], i[5], t[4], t[5]);
        break;
    }
    // The next tile: the last dimension fastest.
    for (size_t d = s->dims; d-- > 0;) {
      if (++idx[d] < s->count[d]) {
        break;
      }
      idx[d] = 0;
    }
  }
}

static inline uint32_t range_begin(uint64_t w) { return (uint32_t)(w & 0xffffu); }
static inline uint32_t range_end(uint64_t w) { return (uint32_t)((w >> 16) & 0xffffu); }

// Claims the first chunk of a share (its owner) or the last (a thief): a compare-and-swap that fails
// when another thread got there first or the caller has moved on to another step (another
// generation). 1 and *chunk on success, 0 when the share is empty.
static int claim_front(_Atomic uint64_t* share, uint32_t* chunk) {
  uint64_t w = atomic_load_explicit(share, memory_order_relaxed);
  while (range_begin(w) < range_end(w)) {
    if (atomic_compare_exchange_weak_explicit(share, &w, w + 1, memory_order_acquire, memory_order_relaxed)) {
      *chunk = range_begin(w);
      return 1;
    }
  }
  return 0;
}

static int claim_back(_Atomic uint64_t* share, uint32_t* chunk) {
  uint64_t w = atomic_load_explicit(share, memory_order_relaxed);
  while (range_begin(w) < range_end(w)) {
    if (atomic_compare_exchange_weak_explicit(share, &w, w - (UINT64_C(1) << 16), memory_order_acquire,
                                              memory_order_relaxed)) {
      *chunk = range_end(w) - 1;
      return 1;
    }
  }
  return 0;
}

// A chunk of the current step: from the front of thread `self`'s own share, else from the back of
// the next one's of the `width` shares that has one left. 0 when every share is empty.
static int claim(struct pthreadpool* pool, size_t self, size_t width, uint32_t* chunk) {
  if (claim_front(&pool->slots[self].range, chunk)) {
    return 1;
  }
  for (size_t k = 1; k < width; k++) {
    const size_t victim = (self + k) % width;
    if (claim_back(&pool->slots[victim].range, chunk)) {
      return 1;
    }
  }
  return 0;
}

static int64_t clock_ns(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

// Spins while *word == value, for at most the pool's spin time; returns the word's last value
// (acquired). The clock is read once per 16 pauses.
static uint32_t spin_while(struct pthreadpool* pool, _Atomic uint32_t* word, uint32_t value) {
  uint32_t w = atomic_load_explicit(word, memory_order_acquire);
  if (w != value || atomic_load_explicit(&pool->width, memory_order_relaxed) > pool->cpus) {
    return w;
  }
  const int64_t until = now_ns() + pool->spin_ns;
  for (unsigned i = 1;; i++) {
    cpu_relax();
    w = atomic_load_explicit(word, memory_order_acquire);
    if (w != value || (i % 16 == 0 && now_ns() >= until)) {
      return w;
    }
  }
}

// Claims and runs chunks of whatever step is current until none is left, then reports how many it
// ran; the caller (self 0) and the workers alike. The step cannot change while a thread holds
// chunks it has not reported (pending stays above 0), so every chunk it claims before reporting is
// of one step. The floating-point mode follows the step. Returns the chunks it ran; a worker outside
// the pool's width runs none.
static uint32_t run_chunks(struct pthreadpool* pool, size_t self) {
  const size_t width = atomic_load_explicit(&pool->width, memory_order_relaxed);
  uint32_t done = 0, chunk = 0;
  fpu_state saved = {0};
  int flushing = 0;
  while (self < width && claim(pool, self, width, &chunk)) {
    const step* s = &pool->step;  // after the claim's acquire: the step the chunk belongs to
    if (done == 0 && (s->flags & PTHREADPOOL_FLAG_DISABLE_DENORMALS) != 0) {
      saved = fpu_flush_denormals();
      flushing = 1;
    }
    const size_t first = (size_t)chunk * s->per_chunk;
    const size_t left = s->items - first;
    run_items(s, first, left < s->per_chunk ? left : s->per_chunk);
    done++;
  }
  if (flushing) {
    fpu_restore(saved);
  }
  if (done > 0 && atomic_fetch_sub(&pool->pending, done) == done &&  // seq_cst: pairs with caller_waiting
      atomic_load(&pool->caller_waiting) != 0) {
    wake(pool, &pool->pending, 1);
  }
  return done;
}

static int current_cpu(void) {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

// Records the CPU of thread `self` (0: the caller) in its slot; written only when it changed, since
// the other threads read the slot's line to steal.
static int note_cpu(struct pthreadpool* pool, size_t self) {
  const int cpu = current_cpu();
  if (atomic_load_explicit(&pool->slots[self].cpu, memory_order_relaxed) != cpu) {
    atomic_store_explicit(&pool->slots[self].cpu, cpu, memory_order_relaxed);
  }
  return cpu;
}

// A worker about to run a step: moves it off a CPU it shares with another thread of the width when
// the process may run on a CPU none of them is on (see PLACE_INTERVAL_NS above).
static void place(struct pthreadpool* pool, size_t self) {
  const int me = note_cpu(pool, self);
#if defined(__linux__)
  const size_t width = atomic_load_explicit(&pool->width, memory_order_relaxed);
  if (me < 0 || width > pool->cpus || self >= width) {
    return;
  }
  cpu_set_t taken;
  CPU_ZERO(&taken);
  int shared = 0;
  for (size_t t = 0; t < width; t++) {
    const int cpu = atomic_load_explicit(&pool->slots[t].cpu, memory_order_relaxed);
    if (t != self && cpu >= 0 && cpu < CPU_SETSIZE) {
      CPU_SET(cpu, &taken);
      shared |= cpu == me;
    }
  }
  slot* s = &pool->slots[self];
  const int64_t now = shared ? now_ns() : 0;
  if (!shared || now - s->moved_ns < PLACE_INTERVAL_NS) {
    return;
  }
  s->moved_ns = now;
  cpu_set_t allowed, free_cpus;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    return;
  }
  CPU_XOR(&free_cpus, &allowed, &taken);  // allowed and not taken
  CPU_AND(&free_cpus, &free_cpus, &allowed);
  if (CPU_COUNT(&free_cpus) > 0 && sched_setaffinity(0, sizeof(free_cpus), &free_cpus) == 0) {
    sched_setaffinity(0, sizeof(allowed), &allowed);
    note_cpu(pool, self);
    atomic_fetch_add_explicit(&pool->moves, 1, memory_order_relaxed);
  }
#else
  (void)me;
#endif
}

static void* worker_main(void* arg) {
  const slot* self = arg;
  struct pthreadpool* pool = self->pool;
  const size_t index = self->index;
  uint32_t seen = 0;
  for (;;) {
    // Outside the width: parked on a word of its own, so that the caller's wake-ups on `epoch` go to
    // the workers it deals to (a futex wakes any of its sleepers).
    const uint32_t u = atomic_load(&pool->unpark);
    if (index >= atomic_load(&pool->width) && atomic_load(&pool->stop) == 0) {
      wait_word(pool, &pool->unpark, u);  // returns at once if the width grew since `u` was read
      continue;
    }
    uint32_t e = spin_while(pool, &pool->epoch, seen);
    if (e == seen) {
      atomic_fetch_add(&pool->sleepers, 1);
      while ((e = atomic_load(&pool->epoch)) == seen) {
        wait_word(pool, &pool->epoch, seen);
      }
      atomic_fetch_sub(&pool->sleepers, 1);
    }
    seen = e;
    if (atomic_load(&pool->stop) != 0) {
      return NULL;
    }
    WORKER_HOOK();
    place(pool, index);
    run_chunks(pool, index);
  }
}

// The end of a parallel step (or a step run serially because the width is 1): the adapt window
// and, at its end, the width for the next one (see `adapt` above).
static void adapt_step(struct pthreadpool* pool, int64_t step_ns, int64_t waited_ns) {
  adapt* a = &pool->adapt;
  a->window_ns += step_ns;
  a->waited_ns += waited_ns;
  if (++a->steps < ADAPT_WINDOW) {
    return;
  }
  const size_t width = atomic_load_explicit(&pool->width, memory_order_relaxed);
  size_t next = width;
  const int bad = a->waited_ns * ADAPT_WAIT_SHARE > a->window_ns;
  a->strikes = bad ? a->strikes + 1 : 0;
  if (bad && (a->probing || a->strikes >= ADAPT_STRIKES)) {  // narrower, and probe later than last time
    a->strikes = 0;
    next = width > pool->cpus ? pool->cpus : (width / 2 > 0 ? width / 2 : 1);  // more than the CPUs: the CPUs
    a->backoff = a->probing ? (a->backoff * 2 < ADAPT_BACKOFF_MAX ? a->backoff * 2 : ADAPT_BACKOFF_MAX)
                            : (a->backoff > 0 ? a->backoff : 1);
    a->left = a->backoff;
    a->probing = 0;
  } else if (!bad) {
    if (a->probing) {
      a->backoff = 1;
      a->probing = 0;
    }
    if (width < pool->threads) {
      if (a->left > 0) {
        a->left--;
      } else {
        next = width * 2 < pool->threads ? width * 2 : pool->threads;
        a->probing = 1;
      }
    }
  }
  atomic_store(&pool->width, next);
  if (next > width) {  // after the store: a parked worker that saw the old width sees the new count
    atomic_fetch_add(&pool->unpark, 1);
    wake(pool, &pool->unpark, 0x7fffffffu);
  }
  a->window_ns = 0;
  a->waited_ns = 0;
  a->steps = 0;
}

// Runs a step: serially on the caller for a NULL pool, one thread or one chunk; otherwise cuts it
// into chunks, gives each thread of the width a contiguous share, wakes sleeping workers (as many
// as could get a chunk), runs its own share and steals from the others', and waits until the last
// chunk is done.
static void run_step(struct pthreadpool* pool, step* s) {
  s->items = 1;
  for (size_t d = 0; d < s->dims; d++) {
    if (s->range[d] == 0) {
      return;
    }
    if (s->tile[d] == 0) {
      s->tile[d] = 1;
    }
    s->count[d] = (s->range[d] - 1) / s->tile[d] + 1;
    s->items *= s->count[d];
  }
  // The chunks follow the pool's thread count, not its width, so that a step is cut the same way
  // whatever the width.
  size_t chunks = pool != NULL ? pool->threads * CARVE_POOL_CHUNKS_PER_THREAD : 1;
  chunks = chunks < s->items ? chunks : s->items;
  chunks = chunks < MAX_CHUNKS ? chunks : MAX_CHUNKS;
  s->per_chunk = (s->items - 1) / chunks + 1;
  chunks = (s->items - 1) / s->per_chunk + 1;
  if (pool != NULL) {
    atomic_fetch_add_explicit(&pool->steps, 1, memory_order_relaxed);
  }
  const size_t width = pool != NULL ? atomic_load_explicit(&pool->width, memory_order_relaxed) : 1;
  if (width <= 1 || chunks <= 1) {
    const int flush = (s->flags & PTHREADPOOL_FLAG_DISABLE_DENORMALS) != 0;
    fpu_state saved = {0};
    if (flush) {
      saved = fpu_flush_denormals();
    }
    run_items(s, 0, s->items);
    if (flush) {
      fpu_restore(saved);
    }
    if (pool != NULL && pool->threads > 1 && chunks > 1) {
      adapt_step(pool, 0, 0);  // narrowed to 1: the window counts on towards the next probe
    }
    return;
  }
  const int64_t t0 = now_ns(), cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  note_cpu(pool, 0);
  pool->step = *s;  // no chunk is outstanding: no thread reads it now
  atomic_store_explicit(&pool->pending, (uint32_t)chunks, memory_order_relaxed);
  const uint64_t gen = (uint64_t)++pool->generation << 32;
  for (size_t i = 0; i < width; i++) {  // the shares, released: a claim sees the step above
    const uint64_t begin = (uint64_t)(i * chunks / width), end = (uint64_t)((i + 1) * chunks / width);
    atomic_store_explicit(&pool->slots[i].range, gen | (end << 16) | begin, memory_order_release);
  }
  atomic_fetch_add(&pool->epoch, 1);
  const uint32_t asleep = atomic_load(&pool->sleepers);
  if (asleep > 0) {
    const uint32_t want = (uint32_t)(chunks - 1 < width - 1 ? chunks - 1 : width - 1);
    wake(pool, &pool->epoch, asleep < want ? asleep : want);
  }
  const uint32_t own = run_chunks(pool, 0);
  const int64_t t1 = now_ns(), cpu1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  uint32_t left = atomic_load_explicit(&pool->pending, memory_order_acquire);
  if (left != 0) {
    left = spin_while(pool, &pool->pending, left);
  }
  if (left != 0) {
    atomic_store(&pool->caller_waiting, 1);
    while ((left = atomic_load(&pool->pending)) != 0) {
      wait_word(pool, &pool->pending, left);
    }
    atomic_store(&pool->caller_waiting, 0);
  }
  const int64_t t2 = now_ns();
  // Lost: the caller's time off the CPU while it had chunks to run (preempted), and its wait beyond
  // the step's tail (two of its chunks and some slack: a worker held a chunk while the OS ran
  // something else). A sleep while waiting is the caller's own choice, not counted twice.
  const int64_t preempted = (t1 - t0) - (cpu1 - cpu0);
  const int64_t normal = own > 0 ? 2 * (t1 - t0 - preempted) / own + ADAPT_SLACK_NS : ADAPT_SLACK_NS;
  const int64_t waited = t2 - t1 > normal ? t2 - t1 - normal : 0;
  adapt_step(pool, t2 - t0, (preempted > 0 ? preempted : 0) + waited);
}

// ---- Pool lifecycle ---------------------------------------------------------

static void stop_workers(struct pthreadpool* pool) {
  atomic_store(&pool->stop, 1);
  atomic_fetch_add(&pool->epoch, 1);
  wake(pool, &pool->epoch, 0x7fffffffu);
  atomic_fetch_add(&pool->unpark, 1);
  wake(pool, &pool->unpark, 0x7fffffffu);
  for (size_t i = 0; i < pool->workers_started; i++) {
    pthread_join(pool->workers[i], NULL);
  }
  pool->workers_started = 0;
}

// aligned_alloc of `size` rounded up to a multiple of CACHE_LINE, zeroed.
static void* alloc_lines(size_t size) {
  size = (size + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE;
  void* p = aligned_alloc(CACHE_LINE, size);
  if (p != NULL) {
    memset(p, 0, size);
  }
  return p;
}

pthreadpool_t pthreadpool_create(size_t threads) {
  if (threads == 0) {
    threads = carve_cpu_count();
  }
  if (threads > 4096) {
    return NULL;
  }
  struct pthreadpool* pool = alloc_lines(sizeof(*pool) + (threads - 1) * sizeof(pthread_t));
  if (pool == NULL) {
    return NULL;
  }
  pool->slots = alloc_lines(threads * sizeof(slot));
  if (pool->slots == NULL) {
    free(pool);
    return NULL;
  }
  pool->threads = threads;
  atomic_init(&pool->width, threads);
  pool->spin_ns = (int64_t)CARVE_POOL_SPIN_US * 1000;
  pool->cpus = carve_cpu_count();
  atomic_init(&pool->pending, 0);
  atomic_init(&pool->epoch, 0);
  atomic_init(&pool->sleepers, 0);
  atomic_init(&pool->caller_waiting, 0);
  atomic_init(&pool->stop, 0);
  atomic_init(&pool->unpark, 0);
  atomic_init(&pool->steps, 0);
  atomic_init(&pool->moves, 0);
  for (size_t i = 0; i < threads; i++) {
    atomic_init(&pool->slots[i].range, 0);
    atomic_init(&pool->slots[i].cpu, -1);
    pool->slots[i].moved_ns = 0;
    pool->slots[i].pool = pool;
    pool->slots[i].index = i;
  }
#if !CARVE_POOL_FUTEX
  if (pthread_mutex_init(&pool->lock, NULL) != 0) {
    free(pool->slots);
    free(pool);
    return NULL;
  }
  if (pthread_cond_init(&pool->cond, NULL) != 0) {
    pthread_mutex_destroy(&pool->lock);
    free(pool->slots);
    free(pool);
    return NULL;
  }
#endif
  for (size_t i = 0; i + 1 < threads; i++) {
    if (pthread_create(&pool->workers[i], NULL, worker_main, &pool->slots[i + 1]) != 0) {
      pthreadpool_destroy(pool);
      return NULL;
    }
    pool->workers_started++;
  }
  return pool;
}

void pthreadpool_destroy(pthreadpool_t pool) {
  if (pool == NULL) {
    return;
  }
  stop_workers(pool);
#if !CARVE_POOL_FUTEX
  pthread_cond_destroy(&pool->cond);
  pthread_mutex_destroy(&pool->lock);
#endif
  free(pool->slots);
  free(pool);
}

size_t pthreadpool_get_threads_count(pthreadpool_t pool) { return pool != NULL ? pool->threads : 1; }

size_t carve_pool_width(pthreadpool_t pool) {
  return pool != NULL ? atomic_load_explicit(&pool->width, memory_order_relaxed) : 1;
}

uint64_t carve_pool_steps(pthreadpool_t pool) {
  return pool != NULL ? atomic_load_explicit(&pool->steps, memory_order_relaxed) : 0;
}

uint64_t carve_pool_moves(pthreadpool_t pool) {
  return pool != NULL ? atomic_load_explicit(&pool->moves, memory_order_relaxed) : 0;
}

// ---- pthreadpool_parallelize_* ------------------------------------------------

// A step of `dims` dimensions: ranges r, tiles t (NULL: all 1).
static void parallelize(pthreadpool_t pool, step_kind kind, void (*task)(void), void* context, size_t dims,
                        const size_t* r, const size_t* t, uint32_t flags) {
  step s;
  memset(&s, 0, sizeof(s));
  s.kind = kind;
  s.task = task;
  s.context = context;
  s.dims = dims;
  s.flags = flags;
  for (size_t d = 0; d < dims; d++) {
    s.range[d] = r[d];
    s.tile[d] = t != NULL ? t[d] : 1;
  }
  run_step(pool, &s);
}

#define FN(f) ((void (*)(void))(f))

void pthreadpool_parallelize_1d(pthreadpool_t pool, pthreadpool_task_1d_t task, void* context, size_t range,
                                uint32_t flags) {
  const size_t r[1] = {range};
  parallelize(pool, K_1D, FN(task), context, 1, r, NULL, flags);
}

void pthreadpool_parallelize_1d_tile_1d(pthreadpool_t pool, pthreadpool_task_1d_tile_1d_t task, void* context,
                                        size_t range, size_t tile, uint32_t flags) {
  const size_t r[1] = {range}, t[1] = {tile};
  parallelize(pool, K_1D_TILE_1D, FN(task), context, 1, r, t, flags);
}

void pthreadpool_parallelize_2d(pthreadpool_t pool, pthreadpool_task_2d_t task, void* context, size_t range_i,
                                size_t range_j, uint32_t flags) {
  const size_t r[2] = {range_i, range_j};
  parallelize(pool, K_2D, FN(task), context, 2, r, NULL, flags);
}

void pthreadpool_parallelize_2d_tile_1d(pthreadpool_t pool, pthreadpool_task_2d_tile_1d_t task, void* context,
                                        size_t range_i, size_t range_j, size_t tile_j, uint32_t flags) {
  const size_t r[2] = {range_i, range_j}, t[2] = {1, tile_j};
  parallelize(pool, K_2D_TILE_1D, FN(task), context, 2, r, t, flags);
}

void pthreadpool_parallelize_2d_tile_2d(pthreadpool_t pool, pthreadpool_task_2d_tile_2d_t task, void* context,
                                        size_t range_i, size_t range_j, size_t tile_i, size_t tile_j,
                                        uint32_t flags) {
  const size_t r[2] = {range_i, range_j}, t[2] = {tile_i, tile_j};
  parallelize(pool, K_2D_TILE_2D, FN(task), context, 2, r, t, flags);
}

void pthreadpool_parallelize_3d(pthreadpool_t pool, pthreadpool_task_3d_t task, void* context, size_t range_i,
                                size_t range_j, size_t range_k, uint32_t flags) {
  const size_t r[3] = {range_i, range_j, range_k};
  parallelize(pool, K_3D, FN(task), context, 3, r, NULL, flags);
}

void pthreadpool_parallelize_3d_tile_2d(pthreadpool_t pool, pthreadpool_task_3d_tile_2d_t task, void* context,
                                        size_t range_i, size_t range_j, size_t range_k, size_t tile_j,
                                        size_t tile_k, uint32_t flags) {
  const size_t r[3] = {range_i, range_j, range_k}, t[3] = {1, tile_j, tile_k};
  parallelize(pool, K_3D_TILE_2D, FN(task), context, 3, r, t, flags);
}

void pthreadpool_parallelize_4d(pthreadpool_t pool, pthreadpool_task_4d_t task, void* context, size_t range_i,
                                size_t range_j, size_t range_k, size_t range_l, uint32_t flags) {
  const size_t r[4] = {range_i, range_j, range_k, range_l};
  parallelize(pool, K_4D, FN(task), context, 4, r, NULL, flags);
}

void pthreadpool_parallelize_4d_tile_2d(pthreadpool_t pool, pthreadpool_task_4d_tile_2d_t task, void* context,
                                        size_t range_i, size_t range_j, size_t range_k, size_t range_l,
                                        size_t tile_k, size_t tile_l, uint32_t flags) {
  const size_t r[4] = {range_i, range_j, range_k, range_l}, t[4] = {1, 1, tile_k, tile_l};
  parallelize(pool, K_4D_TILE_2D, FN(task), context, 4, r, t, flags);
}

void pthreadpool_parallelize_5d(pthreadpool_t pool, pthreadpool_task_5d_t task, void* context, size_t range_i,
                                size_t range_j, size_t range_k, size_t range_l, size_t range_m, uint32_t flags) {
  const size_t r[5] = {range_i, range_j, range_k, range_l, range_m};
  parallelize(pool, K_5D, FN(task), context, 5, r, NULL, flags);
}

void pthreadpool_parallelize_5d_tile_2d(pthreadpool_t pool, pthreadpool_task_5d_tile_2d_t task, void* context,
                                        size_t range_i, size_t range_j, size_t range_k, size_t range_l,
                                        size_t range_m, size_t tile_l, size_t tile_m, uint32_t flags) {
  const size_t r[5] = {range_i, range_j, range_k, range_l, range_m}, t[5] = {1, 1, 1, tile_l, tile_m};
  parallelize(pool, K_5D_TILE_2D, FN(task), context, 5, r, t, flags);
}

void pthreadpool_parallelize_6d_tile_2d(pthreadpool_t pool, pthreadpool_task_6d_tile_2d_t task, void* context,
                                        size_t range_i, size_t range_j, size_t range_k, size_t range_l,
                                        size_t range_m, size_t range_n, size_t tile_m, size_t tile_n,
                                        uint32_t flags) {
  const size_t r[6] = {range_i, range_j, range_k, range_l, range_m, range_n};
  const size_t t[6] = {1, 1, 1, 1, tile_m, tile_n};
  parallelize(pool, K_6D_TILE_2D, FN(task), context, 6, r, t, flags);
}
