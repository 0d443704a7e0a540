#!/usr/bin/env python3
"""Threads of a generated xnnpack package (issue 17): the demo model (assets/yolo26n-shapes.pt) at 160x160,
built with its own CMakeLists.txt, and its demo run on a fixed random input tensor.

    threads.py --work build/work [--imgsz 160] [--max-threads 8]

Checks, each printed:
  * the demo executable exports every pthreadpool_* function libXNNPACK.so imports (runtime/carve_pool.c), so the
    dynamic linker binds XNNPACK to carve's pool;
  * the default and --threads 0 run on the CPUs this process may use (its affinity mask, capped by its cgroup CPU
    quota, computed here in Python from /proc and /sys), and so does the API's default (the JSON "threads");
  * --threads above that is clamped to it with exactly one notice line on stderr; --oversubscribe keeps it, quietly;
    --threads 1 is 1; --caller-memory (create_with) is 1;
  * under `taskset -c <one CPU>` the default is 1 and --threads 2 is clamped to 1;
  * with one CPU-bound process beside it (started and stopped here), on assets/shapes-3.png, every layer's output
    (--dump) and the end-to-end rows are byte-identical for 1 .. --max-threads threads (--oversubscribe), and so are
    the detections.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAME = "yolo26n_shapes"


def log(msg: str) -> None:
    print(msg, flush=True)


def run(cmd, check=True, **kw) -> subprocess.CompletedProcess:
    cmd = [str(c) for c in cmd]
    p = subprocess.run(cmd, text=True, capture_output=True, **kw)
    if check and p.returncode != 0:
        sys.stdout.write(p.stdout[-4000:])
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"threads.py: {' '.join(cmd)}: exit code {p.returncode}")
    return p


def cgroup_cpus() -> int:
    """CPU quota of this process's cgroups rounded up (v2 cpu.max along the path, v1 cfs quota / period); 0: none."""
    best = 0

    def take(quota: int, period: int) -> None:
        nonlocal best
        if quota > 0 and period > 0:
            n = -(-quota // period)
            best = n if best == 0 else min(best, n)

    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        ident, ctrl, path = line.split(":", 2)
        if ident == "0" and ctrl == "":
            d = Path("/sys/fs/cgroup" + (path if path != "/" else ""))
            while True:
                try:
                    q, per = (d / "cpu.max").read_text().split()
                    if q != "max":
                        take(int(q), int(per))
                except (OSError, ValueError):
                    pass
                if d == Path("/sys/fs/cgroup"):
                    break
                d = d.parent
        elif "cpu" in ctrl.split(","):
            for mount in ("cpu,cpuacct", "cpu", "cpuacct,cpu"):
                base = Path("/sys/fs/cgroup") / mount
                for d in {base, Path(str(base) + (path if path != "/" else ""))}:
                    try:
                        take(int((d / "cpu.cfs_quota_us").read_text()), int((d / "cpu.cfs_period_us").read_text()))
                    except (OSError, ValueError):
                        pass
    return best


def cpu_count() -> int:
    n = len(os.sched_getaffinity(0))
    q = cgroup_cpus()
    return min(n, q) if q else n


def demo_json(exe: Path, args: list, prefix: list | None = None) -> tuple[dict, str]:
    p = run([*(prefix or []), exe, *args, "--json"])
    return json.loads(p.stdout), p.stderr


def notices(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "note:" in line]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--imgsz", type=int, default=160)
    ap.add_argument("--max-threads", type=int, default=8)
    a = ap.parse_args()
    t0 = time.time()
    work = a.work.resolve() / "threads"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    pkg = work / "pkg"
    run([REPO / "carve", "generate", REPO / "manifests" / "yolo26n-shapes.yaml", "--backend", "xnnpack",
         "--weights", REPO / "assets" / "yolo26n-shapes.pt", "--imgsz", a.imgsz, "--out", pkg, "--force"])
    run(["cmake", "-S", pkg, "-B", pkg / "build", "-DCMAKE_BUILD_TYPE=Release"])
    run(["cmake", "--build", pkg / "build", "-j", "2"])
    exe = pkg / "build" / f"{NAME}_demo"

    import numpy as np

    x = np.random.default_rng(17).random((1, 3, a.imgsz, a.imgsz), dtype=np.float32)
    inp = work / "input.npy"
    np.save(inp, x)
    failed = []

    def check(ok: bool, what: str) -> None:
        log(f"{'ok  ' if ok else 'FAIL'}  {what}")
        if not ok:
            failed.append(what)

    # ---- XNNPACK's pthreadpool_* imports resolve to the package's carve_pool.c ----
    nm = shutil.which("nm")
    libs = sorted(Path("/usr/lib").glob("*/libXNNPACK.so*")) + sorted(Path("/usr/lib").glob("libXNNPACK.so*"))
    if nm and libs:
        imports = {line.split()[-1] for line in run([nm, "-D", "--undefined-only", libs[0]]).stdout.splitlines()
                   if "pthreadpool_" in line}
        exported = {line.split()[-1] for line in run([nm, "-D", "--defined-only", exe]).stdout.splitlines()
                    if " T " in line}
        check(len(imports) >= 13 and imports <= exported,
              f"the demo exports all {len(imports)} pthreadpool_* functions libXNNPACK.so imports "
              f"(missing: {sorted(imports - exported)})")
    else:
        log("skip  no nm or no /usr/lib/*/libXNNPACK.so: the exported pthreadpool_* check")

    cpus = cpu_count()
    log(f"this process may run on {cpus} CPU(s) (affinity {len(os.sched_getaffinity(0))}, cgroup quota "
        f"{cgroup_cpus() or 'none'})")

    # ---- The default, 0, clamping, opting out ----
    j, err = demo_json(exe, ["--input", inp])
    check(j["threads"] == cpus and not notices(err), f"default: {j['threads']} thread(s) = the CPU count {cpus}")
    j, err = demo_json(exe, ["--input", inp, "--threads", "0"])
    check(j["threads"] == cpus and not notices(err), f"--threads 0: {j['threads']} = {cpus}")
    j, err = demo_json(exe, ["--input", inp, "--threads", "1"])
    check(j["threads"] == 1 and not notices(err), "--threads 1: 1, no notice")
    over = cpus + 3
    j, err = demo_json(exe, ["--input", inp, "--threads", over])
    n = notices(err)
    check(j["threads"] == cpus and len(n) == 1 and "clamped" in n[0],
          f"--threads {over}: clamped to {j['threads']} with one notice: {n[0] if n else None!r}")
    j, err = demo_json(exe, ["--input", inp, "--threads", over, "--oversubscribe"])
    check(j["threads"] == over and not notices(err), f"--threads {over} --oversubscribe: {j['threads']}, no notice")
    j, err = demo_json(exe, ["--input", inp, "--caller-memory"])
    check(j["threads"] == 1, f"--caller-memory (create_with): {j['threads']} thread")

    # ---- A restricted affinity mask ----
    taskset = shutil.which("taskset")
    if taskset:
        one = str(min(os.sched_getaffinity(0)))
        j, err = demo_json(exe, ["--input", inp], prefix=[taskset, "-c", one])
        check(j["threads"] == 1 and not notices(err), f"taskset -c {one}: default {j['threads']} thread")
        j, err = demo_json(exe, ["--input", inp, "--threads", "2"], prefix=[taskset, "-c", one])
        n = notices(err)
        check(j["threads"] == 1 and len(n) == 1, f"taskset -c {one} --threads 2: clamped to {j['threads']}")
    else:
        log("skip  taskset not installed: the restricted-mask checks")

    # ---- Bit-identical outputs for 1 .. max threads, one CPU-bound process beside them ----
    image = REPO / "assets" / "shapes-3.png"  # a held-out image of the demo model: letterbox and detections too
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        ref_dir, ref_json = None, None
        for t in range(1, a.max_threads + 1):
            d = work / f"dump-t{t}"
            d.mkdir()
            j, _ = demo_json(exe, [image, "--threads", t, "--oversubscribe", "--dump", d])
            files = sorted(p.name for p in d.iterdir())
            if ref_dir is None:
                ref_dir, ref_json = d, j
                check(len(files) > 2, f"1 thread: {len(files)} dumps (every layer and the outputs)")
                continue
            same = files == sorted(p.name for p in ref_dir.iterdir()) and all(
                filecmp.cmp(d / f, ref_dir / f, shallow=False) for f in files)
            check(same and j["detections"] == ref_json["detections"] and j["threads"] == t,
                  f"{t} threads beside a busy process: {len(files)} dumps and {len(j['detections'])} detections "
                  f"byte-identical to 1 thread")
    finally:
        busy.kill()
        busy.wait()
    log(f"threads.py: {len(failed)} failure(s), {time.time() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
