#!/usr/bin/env python3
"""Two carve checkouts side by side: is a change speed-neutral? (A before/after check, not a peer benchmark.)

    python3 bench/ab.py --before /path/to/old-checkout --after . [--model yolo26n] [--threads 1,2] [--runs 30]

Each checkout generates the same model from the same random-weight checkpoint (bench/bench.py's, built with
tools/oracle.py make-checkpoint) with its own generator, templates and runtime, builds its own bench/carve_runner.c
against it, and the two runners then take turns on the same image (bench/bench.py's Worker: one inference each,
the order rotated every round, a pause before each so that the other's pool threads have gone to sleep; half the
runs with the processes started in the other order), so that the load of a shared machine falls on both alike. Prints one markdown table (median and p90 of run_image per
thread count, after / before) and writes it with the raw times to build/bench/ab/ab.json. Both runners must print
the same first detections: a check that the two packages compute the same thing.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (bench/bench.py: checkpoint, image, Worker, percentiles)

OUT = bench.BUILD / "ab"


def build_side(label: str, root: Path, model: str, imgsz: int, pt: Path) -> Path:
    """Generate, build and link carve_runner with the checkout at `root`; returns the runner."""
    _, manifest, cname = bench.MODELS[model]
    pkg = OUT / f"{label}-{model}"
    # A fresh package folder: a library left in pkg/build by another checkout (a runtime library the other side's
    # CMake made) would be linked by the glob below and turn an A/A run into an A/B one.
    shutil.rmtree(pkg, ignore_errors=True)
    bench.run([root / "carve", "generate", root / manifest, "--backend", "xnnpack", "--weights", pt,
               "--imgsz", str(imgsz), "--out", pkg, "--force"])
    bench.run(["cmake", "-S", pkg, "-B", pkg / "build", "-DCMAKE_BUILD_TYPE=Release"], stdout=subprocess.DEVNULL)
    bench.run(["cmake", "--build", pkg / "build", "-j", bench.JOBS], stdout=subprocess.DEVNULL)
    exe = OUT / f"carve_runner_{label}_{model}"
    libs = sorted(str(p) for p in (pkg / "build").glob("lib*.a"))
    bench.run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", root / "bench" / "carve_runner.c",
               pkg / "runtime" / "carve_io.c", f"-I{pkg}", f"-I{pkg / 'runtime'}", f"-I{root / 'bench'}",
               f"-DCARVE_MODEL={cname}", f"-DCARVE_NAME={cname.upper()}", f'-DCARVE_HEADER="{cname}.h"',
               "-Wl,--start-group", *libs, "-Wl,--end-group",
               "-lXNNPACK", "-lpthreadpool", "-lcpuinfo", "-lstb", "-lpthread", "-lm", "-o", exe])  # libpthreadpool: the before side; a package with carve_pool.c defines the pthreadpool_* itself, which take precedence
    return exe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, type=Path, help="the checkout to compare against")
    ap.add_argument("--after", default=Path("."), type=Path, help="the checkout under test (default: this one)")
    ap.add_argument("--model", default="yolo26n", choices=sorted(bench.MODELS))
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--settle-ms", type=float, default=50.0)
    a = ap.parse_args()
    for side in (a.before, a.after):
        if not (side / "carve").is_file():
            sys.exit(f"ab.py: {side}: not a carve checkout (no ./carve launcher)")
    OUT.mkdir(parents=True, exist_ok=True)
    pt = bench.checkpoint(a.model)  # random weights, or the trained demo model's (yolo26n-shapes)
    image = bench.image_for(a.model)
    exes = {label: build_side(label, root.resolve(), a.model, a.imgsz, pt)
            for label, root in (("before", a.before), ("after", a.after))}
    results = {}
    for t in (int(x) for x in a.threads.split(",")):
        times: dict = {"before": [], "after": []}
        # Two passes, the second with the processes started in the other order: the process started second ran
        # about 8% slower in an A/A run (both sides the same checkout) on a 2-core machine, so the order is
        # balanced rather than trusted.
        for labels in (("before", "after"), ("after", "before")):
            workers = {label: bench.Worker("carve", a.model, {"carve_exe": exes[label]}, image, t, a.imgsz)
                       for label in labels}
            if workers["before"].ready["rows"] != workers["after"].ready["rows"]:
                sys.exit(f"ab.py: t{t}: the two packages print different detections:\n  before "
                         f"{workers['before'].ready['rows']}\n  after  {workers['after'].ready['rows']}")
            order = list(workers.values())
            for r in range(a.warmup + -(-a.runs // 2)):
                for w in order[r % 2:] + order[:r % 2]:
                    time.sleep(a.settle_ms / 1000)
                    w.run(1, keep=r >= a.warmup)
            for label, w in workers.items():
                times[label] += w.e2e
                w.quit()
        results[t] = {label: {"e2e_ms": ts, "median": statistics.median(ts), "p90": bench.pct(ts, 0.9)}
                      for label, ts in times.items()}
        bench.log(f"t{t}: before {results[t]['before']['median']:.2f} ms, after {results[t]['after']['median']:.2f} ms")
    lines = [f"{a.model} {a.imgsz}, run_image, {a.runs} runs per side, taking turns ({bench.machine()['cpu']})", "",
             "| threads | before median | after median | after / before | before p90 | after p90 |",
             "|---:|---:|---:|---:|---:|---:|"]
    for t, r in results.items():
        b, f = r["before"], r["after"]
        lines.append(f"| {t} | {b['median']:.2f} ms | {f['median']:.2f} ms | {f['median'] / b['median']:.3f} | "
                     f"{b['p90']:.2f} ms | {f['p90']:.2f} ms |")
    table = "\n".join(lines)
    print(table)
    (OUT / "ab.json").write_text(json.dumps({"before": str(a.before), "after": str(a.after), "model": a.model,
                                             "imgsz": a.imgsz, "results": results, "table": table}, indent=1))


if __name__ == "__main__":
    main()
