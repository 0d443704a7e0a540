// carve_pool.c: the thread pool and the CPU count.
//
//   * every pthreadpool_parallelize_* visits each index / tile exactly once, with the right tile
//     sizes, on pools of 1..8 threads and a NULL pool, odd ranges, tiles larger than the range,
//     empty ranges;
//   * PTHREADPOOL_FLAG_DISABLE_DENORMALS: flush-to-zero inside the tasks (x86: MXCSR FTZ | DAZ) on
//     whichever thread runs them, not inside tasks of steps without the flag, and the caller's mode
//     restored afterwards;
//   * a step never waits for a worker that has not started: with every worker held back (as a busy
//     OS could), thousands of steps complete on the caller alone, then the workers join in again;
//   * random steps back to back on pools of 2..8 threads (the ThreadSanitizer build, pool_tsan,
//     runs this too);
//   * carve_cpu_count: the affinity mask, cgroup v2 cpu.max (the tightest along the path) and v1
//     cfs_quota_us / cfs_period_us, read from fake trees; restricted to one CPU with
//     sched_setaffinity; carve_threads_for's 0 default and clamping.
// Arguments: [WORK_DIR] [--expect-cpus N] (ctest runs it under `taskset -c 0` with --expect-cpus 1).

#define CARVE_POOL_TEST_HOOKS
#include "../../runtime/carve_pool.c"

#include <errno.h>
#include <sys/stat.h>

#define CHECK(cond)                                                         \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

// ---- Worker hook ---------------------------------------------------------------

static _Atomic int g_hold;          // workers wait here while nonzero
static _Atomic int g_held;          // workers waiting now
static _Thread_local int t_caller;  // 1 on the test's own thread

static _Atomic int g_stack_on = -1;  // a CPU the next worker through the hook moves to (check_place)

// Moves the calling thread onto `cpu` and gives it back its mask, so that it stays there unpinned.
static void stack_onto(int cpu) {
  cpu_set_t all, one;
  CHECK(sched_getaffinity(0, sizeof(all), &all) == 0);
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  CHECK(sched_setaffinity(0, sizeof(one), &one) == 0);
  CHECK(sched_setaffinity(0, sizeof(all), &all) == 0);
}

static void test_worker_hook(void) {
  const int stack = atomic_exchange(&g_stack_on, -1);
  if (stack >= 0) {
    stack_onto(stack);
  }
  if (atomic_load(&g_hold) == 0) {
    return;
  }
  atomic_fetch_add(&g_held, 1);
  while (atomic_load(&g_hold) != 0) {
    usleep(100);
  }
  atomic_fetch_sub(&g_held, 1);
}

// ---- Coverage -------------------------------------------------------------------

#define MAXE 8192
static _Atomic int g_hits[MAXE];
static size_t g_r[6], g_t[6];
static _Atomic int g_bad;
static _Atomic long g_off_caller;  // tiles run by a thread other than the test's

static size_t lin(const size_t* i, size_t dims) {
  size_t l = 0;
  for (size_t d = 0; d < dims; d++) {
    l = l * g_r[d] + i[d];
  }
  return l;
}

// Marks the box [start, start + size) of a dims-dimensional grid; checks tile alignment and size.
static void mark(size_t dims, const size_t* start, const size_t* size) {
  if (!t_caller) {
    atomic_fetch_add(&g_off_caller, 1);
  }
  for (size_t d = 0; d < dims; d++) {
    const size_t want = g_r[d] - start[d] < g_t[d] ? g_r[d] - start[d] : g_t[d];
    if (start[d] % g_t[d] != 0 || start[d] >= g_r[d] || size[d] != want) {
      atomic_store(&g_bad, 1);
      return;
    }
  }
  size_t i[6] = {0};
  for (;;) {
    size_t p[6];
    for (size_t d = 0; d < dims; d++) p[d] = start[d] + i[d];
    atomic_fetch_add(&g_hits[lin(p, dims)], 1);
    size_t d = dims;
    while (d-- > 0) {
      if (++i[d] < size[d]) break;
      i[d] = 0;
    }
    if (d == (size_t)-1) break;
  }
}

static void t1(void* c, size_t i) { (void)c; const size_t s[] = {i}, z[] = {1}; mark(1, s, z); }
static void t1t(void* c, size_t i, size_t n) { (void)c; const size_t s[] = {i}, z[] = {n}; mark(1, s, z); }
static void t2(void* c, size_t i, size_t j) { (void)c; const size_t s[] = {i, j}, z[] = {1, 1}; mark(2, s, z); }
static void t2t1(void* c, size_t i, size_t j, size_t nj) {
  (void)c; const size_t s[] = {i, j}, z[] = {1, nj}; mark(2, s, z);
}
static void t2t2(void* c, size_t i, size_t j, size_t ni, size_t nj) {
  (void)c; const size_t s[] = {i, j}, z[] = {ni, nj}; mark(2, s, z);
}
static void t3(void* c, size_t i, size_t j, size_t k) {
  (void)c; const size_t s[] = {i, j, k}, z[] = {1, 1, 1}; mark(3, s, z);
}
static void t3t2(void* c, size_t i, size_t j, size_t k, size_t nj, size_t nk) {
  (void)c; const size_t s[] = {i, j, k}, z[] = {1, nj, nk}; mark(3, s, z);
}
static void t4(void* c, size_t i, size_t j, size_t k, size_t l) {
  (void)c; const size_t s[] = {i, j, k, l}, z[] = {1, 1, 1, 1}; mark(4, s, z);
}
static void t4t2(void* c, size_t i, size_t j, size_t k, size_t l, size_t nk, size_t nl) {
  (void)c; const size_t s[] = {i, j, k, l}, z[] = {1, 1, nk, nl}; mark(4, s, z);
}
static void t5(void* c, size_t i, size_t j, size_t k, size_t l, size_t m) {
  (void)c; const size_t s[] = {i, j, k, l, m}, z[] = {1, 1, 1, 1, 1}; mark(5, s, z);
}
static void t5t2(void* c, size_t i, size_t j, size_t k, size_t l, size_t m, size_t nl, size_t nm) {
  (void)c; const size_t s[] = {i, j, k, l, m}, z[] = {1, 1, 1, nl, nm}; mark(5, s, z);
}
static void t6t2(void* c, size_t i, size_t j, size_t k, size_t l, size_t m, size_t n, size_t nm, size_t nn) {
  (void)c; const size_t s[] = {i, j, k, l, m, n}, z[] = {1, 1, 1, 1, nm, nn}; mark(6, s, z);
}

static unsigned g_seed = 12345;
static size_t rnd(size_t n) {
  g_seed = g_seed * 1103515245u + 12345u;
  return n == 0 ? 0 : (size_t)((g_seed >> 8) % n);
}

// One step of `kind` with ranges r and tiles t (untiled dimensions' t ignored); checks exactly-once.
static void one_step(pthreadpool_t pool, int kind, const size_t* r, const size_t* t, uint32_t flags) {
  static const size_t kDims[12] = {1, 1, 2, 2, 2, 3, 3, 4, 4, 5, 5, 6};
  static const unsigned kTiled[12] = {0, 1, 0, 2, 3, 0, 6, 0, 12, 0, 24, 48};  // bit d: dimension d tiled
  const size_t dims = kDims[kind];
  size_t total = 1;
  for (size_t d = 0; d < dims; d++) {
    g_r[d] = r[d];
    g_t[d] = (kTiled[kind] >> d) & 1u ? (t[d] == 0 ? 1 : t[d]) : 1;
    total *= r[d];
  }
  CHECK(total <= MAXE);
  for (size_t e = 0; e < total; e++) atomic_store(&g_hits[e], 0);
  atomic_store(&g_bad, 0);
  switch (kind) {
    case 0: pthreadpool_parallelize_1d(pool, t1, NULL, r[0], flags); break;
    case 1: pthreadpool_parallelize_1d_tile_1d(pool, t1t, NULL, r[0], t[0], flags); break;
    case 2: pthreadpool_parallelize_2d(pool, t2, NULL, r[0], r[1], flags); break;
    case 3: pthreadpool_parallelize_2d_tile_1d(pool, t2t1, NULL, r[0], r[1], t[1], flags); break;
    case 4: pthreadpool_parallelize_2d_tile_2d(pool, t2t2, NULL, r[0], r[1], t[0], t[1], flags); break;
    case 5: pthreadpool_parallelize_3d(pool, t3, NULL, r[0], r[1], r[2], flags); break;
    case 6: pthreadpool_parallelize_3d_tile_2d(pool, t3t2, NULL, r[0], r[1], r[2], t[1], t[2], flags); break;
    case 7: pthreadpool_parallelize_4d(pool, t4, NULL, r[0], r[1], r[2], r[3], flags); break;
    case 8: pthreadpool_parallelize_4d_tile_2d(pool, t4t2, NULL, r[0], r[1], r[2], r[3], t[2], t[3], flags); break;
    case 9: pthreadpool_parallelize_5d(pool, t5, NULL, r[0], r[1], r[2], r[3], r[4], flags); break;
    case 10:
      pthreadpool_parallelize_5d_tile_2d(pool, t5t2, NULL, r[0], r[1], r[2], r[3], r[4], t[3], t[4], flags);
      break;
    default:
      pthreadpool_parallelize_6d_tile_2d(pool, t6t2, NULL, r[0], r[1], r[2], r[3], r[4], r[5], t[4], t[5], flags);
      break;
  }
  CHECK(atomic_load(&g_bad) == 0);
  for (size_t e = 0; e < total; e++) {
    CHECK(atomic_load(&g_hits[e]) == 1);
  }
}

static void random_steps(pthreadpool_t pool, int steps) {
  for (int s = 0; s < steps; s++) {
    size_t r[6], t[6];
    const int kind = (int)rnd(12);
    for (int d = 0; d < 6; d++) {
      r[d] = 1 + rnd(d < 2 ? 9 : 3);
      t[d] = rnd(5);
    }
    if (rnd(50) == 0) r[rnd(2)] = 0;  // an empty range: nothing runs
    one_step(pool, kind, r, t, (uint32_t)rnd(2));
  }
}

// ---- Width -----------------------------------------------------------------------
// A worker that the OS preempts while it holds a chunk, simulated by a task that sleeps 3 ms when a
// worker runs it: the pool narrows to the caller alone, every tile still runs once, and once the
// workers run normally again it widens back by its probes.

static _Atomic int g_slow;
static _Atomic long g_width_tiles;

static _Atomic long g_held_chunks;  // tiles a worker ran while g_slow

static void width_task(void* c, size_t i) {
  (void)c;
  (void)i;
  if (atomic_load(&g_slow) != 0) {
    if (!t_caller) {
      atomic_fetch_add(&g_held_chunks, 1);
      usleep(3000);
    } else {  // 20 us of work on the caller: time for a sleeping worker to wake and claim a chunk
      struct timespec t0, t;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      do {
        clock_gettime(CLOCK_MONOTONIC, &t);
      } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 20000);
    }
  }
  atomic_fetch_add(&g_width_tiles, 1);
}

static void check_width(void) {
  pthreadpool_t pool = pthreadpool_create(2);
  CHECK(pool != NULL && carve_pool_width(pool) == 2 && carve_pool_width(NULL) == 1);
  atomic_store(&g_slow, 1);
  long want = 0;
  int steps = 0;
  for (; steps < 64 * 40 && carve_pool_width(pool) != 1; steps++) {
    pthreadpool_parallelize_1d(pool, width_task, NULL, 64, 0);
    want += 64;
  }
  printf("width: narrowed to %zu after %d steps, a worker held 3 ms in %ld of its chunks\n", carve_pool_width(pool),
         steps, atomic_load(&g_held_chunks));
  CHECK(carve_pool_width(pool) == 1);
  atomic_store(&g_slow, 0);
  for (steps = 0; steps < 64 * 2000 && carve_pool_width(pool) != 2; steps++) {
    pthreadpool_parallelize_1d(pool, width_task, NULL, 64, 0);
    want += 64;
  }
  printf("width: back to %zu after %d steps\n", carve_pool_width(pool), steps);
  CHECK(carve_pool_width(pool) == 2);
  CHECK(atomic_load(&g_width_tiles) == want);  // every tile ran once, whatever the width
  pthreadpool_destroy(pool);
}

// ---- Stacked threads ----------------------------------------------------------------

static void noop_task(void* c, size_t i) {
  (void)c;
  (void)i;
}

// A worker put on its caller's CPU moves off it at its next step (place()), and is left with the
// process's whole mask. Needs two CPUs; the caller is pinned to one for the check.
static void check_place(void) {
  cpu_set_t all;
  CHECK(sched_getaffinity(0, sizeof(all), &all) == 0);
  if (CPU_COUNT(&all) < 2 || carve_cpu_count() < 2) {
    printf("place: skipped (one CPU)\n");
    return;
  }
  int home = 0;
  while (!CPU_ISSET(home, &all)) home++;
  pthreadpool_t pool = pthreadpool_create(2);  // before the caller is pinned: workers inherit its mask
  CHECK(pool != NULL);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(home, &one);
  CHECK(sched_setaffinity(0, sizeof(one), &one) == 0);  // the caller stays on `home`
  pthreadpool_parallelize_1d(pool, noop_task, NULL, 64, 0);
  usleep(2000);  // past the worker's last move, if it made one
  const uint64_t before = carve_pool_moves(pool);
  atomic_store(&g_stack_on, home);
  for (int i = 0; i < 10000 && (atomic_load(&g_stack_on) >= 0 || carve_pool_moves(pool) == before); i++) {
    atomic_store(&pool->width, 2);  // a loaded machine may have narrowed it: the worker must get steps
    pthreadpool_parallelize_1d(pool, noop_task, NULL, 64, 0);
  }
  const int worker_cpu = atomic_load(&pool->slots[1].cpu);
  printf("place: worker stacked on CPU %d, moved %llu time(s), now on CPU %d\n", home,
         (unsigned long long)(carve_pool_moves(pool) - before), worker_cpu);
  CHECK(atomic_load(&g_stack_on) == -1 && carve_pool_moves(pool) > before);
  // A worker that woke late may still be inside place() (its mask briefly the free CPUs) after the last
  // step returned: no step runs now, so it restores the whole mask as soon as it is scheduled, which on a
  // loaded machine can take milliseconds (make test under load saw 2 ms pass): poll for up to a second.
  cpu_set_t mask;
  for (int waited = 0;; waited++) {
    CHECK(pthread_getaffinity_np(pool->workers[0], sizeof(mask), &mask) == 0);
    if (CPU_EQUAL(&mask, &all) || waited == 1000) break;
    usleep(1000);
  }
  CHECK(CPU_EQUAL(&mask, &all));  // not pinned
  CHECK(carve_pool_moves(NULL) == 0);
  pthreadpool_destroy(pool);
  CHECK(sched_setaffinity(0, sizeof(all), &all) == 0);
}

// ---- Denormals --------------------------------------------------------------------

static _Atomic int g_fpu_bad;
#if defined(__x86_64__) || defined(__i386__)
static void fpu_task(void* c, size_t i) {
  (void)i;
  const int want = *(const int*)c;
  const int ftz = (_mm_getcsr() & 0x8040u) == 0x8040u;
  const int none = (_mm_getcsr() & 0x8040u) == 0;
  if (want ? !ftz : !none) atomic_store(&g_fpu_bad, 1);
}
#endif

static void check_denormals(pthreadpool_t pool) {
#if defined(__x86_64__) || defined(__i386__)
  const unsigned before = _mm_getcsr();
  for (int round = 0; round < 200; round++) {
    int want = round & 1;
    pthreadpool_parallelize_1d(pool, fpu_task, &want, 64, want ? PTHREADPOOL_FLAG_DISABLE_DENORMALS : 0);
    CHECK(_mm_getcsr() == before);
  }
  CHECK(atomic_load(&g_fpu_bad) == 0);
#else
  (void)pool;
#endif
}

// ---- CPU count ---------------------------------------------------------------------

static void write_file(const char* root, const char* rel, const char* text) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", root, rel);
  for (char* p = path + strlen(root) + 1; *p; p++) {
    if (*p == '/') {
      *p = '\0';
      mkdir(path, 0755);
      *p = '/';
    }
  }
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0);
  CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  close(fd);
}

static size_t mask_cpus(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CHECK(sched_getaffinity(0, sizeof(set), &set) == 0);
  return (size_t)CPU_COUNT(&set);
}

static void check_cpu_count(const char* work) {
  const size_t cpus = mask_cpus();
  char root[4096];
  snprintf(root, sizeof(root), "%s/pool_cgroup_XXXXXX", work);
  CHECK(mkdtemp(root) != NULL);
  // No cgroup files: the affinity mask.
  CHECK(carve_cpu_count_at(root) == cpus);
  CHECK(carve_cpu_count() >= 1 && carve_cpu_count() <= cpus);
  // cgroup v2: no limit on the leaf, 1.5 CPUs on its parent -> 2 (rounded up), 0.5 on the root's -> 1.
  write_file(root, "proc/self/cgroup", "0::/a/b\n");
  write_file(root, "sys/fs/cgroup/a/b/cpu.max", "max 100000\n");
  CHECK(carve_cpu_count_at(root) == cpus);
  write_file(root, "sys/fs/cgroup/a/cpu.max", "150000 100000\n");
  CHECK(carve_cpu_count_at(root) == (cpus < 2 ? cpus : 2));
  write_file(root, "sys/fs/cgroup/cpu.max", "50000 100000\n");
  CHECK(carve_cpu_count_at(root) == 1);
  write_file(root, "sys/fs/cgroup/cpu.max", "max 100000\n");
  write_file(root, "sys/fs/cgroup/a/cpu.max", "max\n");
  write_file(root, "sys/fs/cgroup/a/b/cpu.max", "100000 100000\n");
  CHECK(carve_cpu_count_at(root) == 1);
  // cgroup v1 (a hybrid file: v2 line without a limit), quota -1 = none, then 0.25 CPU -> 1.
  write_file(root, "sys/fs/cgroup/a/b/cpu.max", "max 100000\n");
  write_file(root, "proc/self/cgroup", "12:memory:/m\n4:cpu,cpuacct:/c\n0::/a/b\n");
  write_file(root, "sys/fs/cgroup/cpu,cpuacct/c/cpu.cfs_quota_us", "-1\n");
  write_file(root, "sys/fs/cgroup/cpu,cpuacct/c/cpu.cfs_period_us", "100000\n");
  CHECK(carve_cpu_count_at(root) == cpus);
  write_file(root, "sys/fs/cgroup/cpu,cpuacct/c/cpu.cfs_quota_us", "25000\n");
  CHECK(carve_cpu_count_at(root) == 1);
  // A controller list that only contains "cpu" as part of a name does not count.
  write_file(root, "proc/self/cgroup", "4:cpuset:/c\n");
  write_file(root, "sys/fs/cgroup/cpu/c/cpu.cfs_quota_us", "25000\n");
  write_file(root, "sys/fs/cgroup/cpu/c/cpu.cfs_period_us", "100000\n");
  CHECK(carve_cpu_count_at(root) == cpus);

  // carve_threads_for: 0 -> the CPU count, more clamped unless allowed.
  const size_t n = carve_cpu_count();
  CHECK(carve_threads_for(0, 0) == n && carve_threads_for(0, 1) == n);
  CHECK(carve_threads_for(1, 0) == 1);
  CHECK(carve_threads_for(n + 3, 0) == n && carve_threads_for(n + 3, 1) == n + 3);

  // One CPU in the affinity mask (as `taskset -c <cpu>`): 1 everywhere, and a pool of 1 thread.
  cpu_set_t all, one;
  CHECK(sched_getaffinity(0, sizeof(all), &all) == 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &one);
      break;
    }
  }
  CHECK(sched_setaffinity(0, sizeof(one), &one) == 0);
  CHECK(carve_cpu_count() == 1);
  CHECK(carve_threads_for(0, 0) == 1 && carve_threads_for(4, 0) == 1 && carve_threads_for(4, 1) == 4);
  pthreadpool_t p1 = pthreadpool_create(0);
  CHECK(p1 != NULL && pthreadpool_get_threads_count(p1) == 1);
  pthreadpool_destroy(p1);
  // Eight threads on one CPU still finish every step.
  pthreadpool_t p8 = pthreadpool_create(8);
  CHECK(p8 != NULL);
  random_steps(p8, 300);
  pthreadpool_destroy(p8);
  CHECK(sched_setaffinity(0, sizeof(all), &all) == 0);
}

int main(int argc, char** argv) {
  const char* work = "/tmp";
  long expect = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--expect-cpus") && i + 1 < argc) {
      expect = strtol(argv[++i], NULL, 10);
    } else {
      work = argv[i];
    }
  }
  t_caller = 1;
  if (expect >= 0) {
    printf("carve_cpu_count() = %zu (expected %ld)\n", carve_cpu_count(), expect);
    CHECK(carve_cpu_count() == (size_t)expect);
    CHECK(carve_threads_for(0, 0) == (size_t)expect && carve_threads_for(64, 0) == (size_t)expect);
    pthreadpool_t pool = pthreadpool_create(0);
    CHECK(pool != NULL && pthreadpool_get_threads_count(pool) == (size_t)expect);
    pthreadpool_destroy(pool);
  }

  // NULL pool and pools of 1..8 threads: every kind, random shapes.
  CHECK(pthreadpool_get_threads_count(NULL) == 1 && carve_pool_steps(NULL) == 0);
  random_steps(NULL, 200);
  for (size_t threads = 1; threads <= 8; threads++) {
    pthreadpool_t pool = pthreadpool_create(threads);
    CHECK(pool != NULL && pthreadpool_get_threads_count(pool) == threads);
    random_steps(pool, 400);
    CHECK(carve_pool_steps(pool) > 0);
    check_denormals(pool);
    pthreadpool_destroy(pool);
  }
  check_denormals(NULL);

  // Workers held back: the caller alone finishes every step, without waiting for them.
  {
    pthreadpool_t pool = pthreadpool_create(4);
    CHECK(pool != NULL);
    random_steps(pool, 50);
    atomic_store(&g_hold, 1);
    random_steps(pool, 50);  // wakes the workers into the hook
    for (int i = 0; i < 2000 && atomic_load(&g_held) < 3; i++) usleep(1000);
    CHECK(atomic_load(&g_held) == 3);
    atomic_store(&g_off_caller, 0);
    random_steps(pool, 3000);
    CHECK(atomic_load(&g_off_caller) == 0);  // all of it on the test's thread
    atomic_store(&g_hold, 0);
    random_steps(pool, 500);
    pthreadpool_destroy(pool);
  }
  check_width();
  check_place();
  check_cpu_count(work);
  printf("pool: ok (%zu CPUs for this process)\n", carve_cpu_count());
  return 0;
}
