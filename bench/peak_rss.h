// Peak resident set size of the calling process, for the benchmark's runners (bench/carve_runner.c; the same
// in Python in bench/peer.py).
//
// getrusage(RUSAGE_SELF).ru_maxrss is not this process's own peak on Linux: execve() folds the peak of the
// address space it replaces into it, so a runner started by bench.py (a Python process with torch loaded and
// the exports done, several hundred MiB) reported bench.py's peak as its own. VmHWM in /proc/self/status is the
// peak of the current address space only, i.e. of this program since its exec.

#ifndef CARVE_BENCH_PEAK_RSS_H
#define CARVE_BENCH_PEAK_RSS_H

#include <stdio.h>
#include <string.h>

// VmHWM in KiB, or -1 when /proc/self/status cannot be read or has no VmHWM line.
static long peak_rss_kb(void) {
  FILE* f = fopen("/proc/self/status", "r");
  if (f == NULL) {
    return -1;
  }
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "VmHWM:", 6) == 0) {
      if (sscanf(line + 6, "%ld", &kb) != 1) {
        kb = -1;
      }
      break;
    }
  }
  fclose(f);
  return kb;
}

#endif  // CARVE_BENCH_PEAK_RSS_H
