#!/usr/bin/env python3
"""Threads under contention (issue 17): carve's xnnpack package, ONNX Runtime and OpenVINO side by side in one run.

    make bench-threads                                         # yolo26n at 640, 30 runs per cell: on an idle machine
    build/bench-venv/bin/python bench/threads.py --runs 3 --warmup 1          # a smoke run (numbers mean nothing)
    build/bench-venv/bin/python bench/threads.py --before /path/to/old/carve  # also the carve of another checkout
    build/bench-venv/bin/python bench/threads.py --report --docs              # re-render, update docs/performance.md

Scenarios, each thread count one cell in which every system is started (bench.py's Worker: bench/carve_runner.c,
bench/peer.py), warmed up, then run once per round in turns, round after round, with a pause before each run:
  a. idle, 1 and 2 threads;
  b. idle, 3, 4 and 8 threads: `carve` as a caller gets it (options.threads clamped to the CPUs this process may run
     on), `carve-over` with allow_oversubscribe (that many threads really run: the scheduler's own test);
  c. one CPU-bound process beside them (started before the warm-up and stopped after the cell by this script),
     1 and 2 threads.
`carve-before` (--before DIR): the package generated and built by another carve checkout (e.g. a worktree of the
commit before the scheduler) from the same checkpoint, run with the thread count as asked.
Reported: the median and p90 of the end-to-end time (letterbox, network, rows) of each system per cell (d: one
markdown table), and the issue's targets: a. carve not slower than carve-before at 1 and 2 threads; b. carve and
carve-over at 3, 4, 8 threads within 1.2x of carve's idle 2-thread median; c. under load, carve's 2-thread median
within 1.1x and p90 within 1.3x of its 1-thread ones. Results: build/bench/threads/results.json and table.md;
--docs writes the table into docs/performance.md between its bench-threads markers. Never a test: timings only.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (bench/bench.py: prepare, Worker, pct, machine)

ROOT = bench.ROOT
OUT = bench.BUILD / "threads"
DOC = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- bench-threads: begin (bench/threads.py --docs) -->", "<!-- bench-threads: end -->"
PEERS = ["onnxruntime", "openvino"]
SCENARIOS = [("a", "idle", False), ("b", "idle, more threads than CPUs", False), ("c", "one CPU-bound process beside", True)]


def log(msg: str) -> None:
    print(f"bench-threads: {msg}", file=sys.stderr, flush=True)


def prepare_before(before: Path, model: str, prep: dict, imgsz: int) -> Path:
    """The carve runner of another checkout: its generator, runtime and bench/carve_runner.c, the same checkpoint."""
    cname = bench.MODELS[model][2]
    pkg = bench.BUILD / f"pkg-{model}-before"
    bench.run([before / "carve", "generate", before / bench.MODELS[model][1], "--backend", "xnnpack",
               "--weights", prep["pt"], "--imgsz", str(imgsz), "--out", pkg, "--force"])
    bench.run(["cmake", "-S", pkg, "-B", pkg / "build", "-DCMAKE_BUILD_TYPE=Release"], stdout=subprocess.DEVNULL)
    bench.run(["cmake", "--build", pkg / "build", "-j", bench.JOBS], stdout=subprocess.DEVNULL)
    exe = bench.BUILD / "bin" / f"carve_runner_{model}_before"
    # Before the runtime library (issue 16) the package's own library held the runtime; before carve_pool.c
    # (issue 17) the pool was libpthreadpool.
    runtime_lib = [pkg / "build" / "libcarve_runtime.a"] if (pkg / "build" / "libcarve_runtime.a").exists() else []
    pool = ["-lpthreadpool"] if not (pkg / "runtime" / "carve_pool.c").exists() else []
    bench.run(["cc", "-std=c11", "-O2", before / "bench" / "carve_runner.c", pkg / "runtime" / "carve_io.c",
               f"-I{pkg}", f"-I{pkg / 'runtime'}", f"-I{before / 'bench'}", f"-DCARVE_MODEL={cname}",
               f"-DCARVE_NAME={cname.upper()}", f'-DCARVE_HEADER="{cname}.h"', pkg / "build" / f"lib{cname}.a",
               *runtime_lib, "-lXNNPACK", *pool, "-lcpuinfo", "-lstb", "-lpthread", "-lm", "-o", exe])
    return exe


def cell(prep: dict, before_exe: Path | None, image: Path, systems: list[str], threads: int, busy: bool,
         runs: int, warmup: int, settle_ms: float, imgsz: int) -> dict:
    """One thread count of one scenario: every system's process, runs in turns; medians and p90s."""
    workers = []
    for s in systems:
        if s == "carve":
            w = bench.Worker("carve", "", prep, image, threads, imgsz)
        elif s == "carve-over":
            w = bench.Worker("carve", "", prep, image, threads, imgsz, carve_args=("oversubscribe",))
        elif s == "carve-before":
            w = bench.Worker("carve", "", dict(prep, carve_exe=before_exe), image, threads, imgsz)
        else:
            w = bench.Worker(s, "", prep, image, threads, imgsz)
        w.name = s
        workers.append(w)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    loads = []
    try:
        for r in range(warmup + runs):
            order = workers[r % len(workers):] + workers[:r % len(workers)]
            for w in order:
                time.sleep(settle_ms / 1000)
                w.run(1, keep=r >= warmup)
            loads.append(os.getloadavg()[0])
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    out = {"threads": threads, "busy": busy, "load_mean": sum(loads) / len(loads), "systems": {}}
    for w in workers:
        w.quit()
        out["systems"][w.name] = {"threads_used": w.ready.get("threads", threads), "e2e_ms": w.e2e,
                                  "median": statistics.median(w.e2e),
                                  "p90": bench.pct(w.e2e, 0.9), "detections": w.ready["detections"]}
    log(f"t{threads}{' busy' if busy else ''}: " + ", ".join(
        f"{k} {v['median']:.1f}/{v['p90']:.1f} ms" for k, v in out["systems"].items()))
    return out


def render(res: dict) -> str:
    systems = res["systems"]
    head = ["scenario", "threads", "load"] + [f"{s} median / p90 (ms)" for s in systems]
    lines = [f"yolo26n at {res['imgsz']}, {res['runs']} runs per cell after {res['warmup']} warm-up rounds, systems in "
             f"turns; {res['machine']['cpu']}, {res['cpus']} CPU(s) for this process; load average before "
             f"{res['load_before']:.2f}, and per cell (load: the mean 1-minute load average while it ran, its own "
             f"processes included). carve: options.threads as asked (clamped to the CPUs; `(N run)`: the threads it "
             f"used); carve-over: allow_oversubscribe (that many threads run).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (1 + len(systems))]
    for c in res["cells"]:
        row = [f"{c['scenario']}. {dict((k, d) for k, d, _ in SCENARIOS)[c['scenario']]}", str(c["threads"]),
               f"{c['load_mean']:.1f}"]
        for s in systems:
            v = c["systems"].get(s)
            if v is None:
                row.append("")
                continue
            used = f" ({v['threads_used']} run)" if s.startswith("carve") and v["threads_used"] != c["threads"] else ""
            row.append(f"{v['median']:.1f} / {v['p90']:.1f}{used}")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Targets (issue 17):", ""] + [f"* {t}" for t in targets(res)]
    return "\n".join(lines) + "\n"


def targets(res: dict) -> list[str]:
    def get(scn: str, t: int, s: str):
        for c in res["cells"]:
            if c["scenario"] == scn and c["threads"] == t and s in c["systems"]:
                return c["systems"][s]
        return None

    out = []
    for t in (1, 2):
        now, old = get("a", t, "carve"), get("a", t, "carve-before")
        if now and old:
            r = now["median"] / old["median"]
            out.append(f"a. idle, {t} thread(s): carve {now['median']:.1f} ms vs carve-before {old['median']:.1f} ms "
                       f"= {r:.2f}x ({'met' if r <= 1.03 else 'NOT met'}: not slower, 3% noise allowed)")
    two = get("a", 2, "carve")
    for s in ("carve", "carve-over"):
        for t in (3, 4, 8):
            v = get("b", t, s)
            if v and two:
                r = v["median"] / two["median"]
                out.append(f"b. {s}, {t} threads idle: {v['median']:.1f} ms = {r:.2f}x carve's 2-thread median "
                           f"({'met' if r <= 1.2 else 'NOT met'}: <= 1.2x)")
    one, two = get("c", 1, "carve"), get("c", 2, "carve")
    if one and two:
        rm, rp = two["median"] / one["median"], two["p90"] / one["p90"]
        out.append(f"c. beside a busy process: carve 2 threads / 1 thread median {rm:.2f}x "
                   f"({'met' if rm <= 1.1 else 'NOT met'}: <= 1.1x), p90 {rp:.2f}x "
                   f"({'met' if rp <= 1.3 else 'NOT met'}: <= 1.3x)")
    return out


def write_docs(table: str) -> None:
    text = DOC.read_text()
    block = f"{BEGIN}\n{table}{END}"
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## Threads under contention (bench/threads.py)\n\n" + block + "\n"
    DOC.write_text(text)
    log(f"wrote {DOC}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="yolo26n", choices=list(bench.MODELS))
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--settle-ms", type=float, default=50.0)
    ap.add_argument("--idle", default="1,2", help="scenario a's thread counts")
    ap.add_argument("--over", default="3,4,8", help="scenario b's thread counts")
    ap.add_argument("--busy", default="1,2", help="scenario c's thread counts")
    ap.add_argument("--peers", default=",".join(PEERS), help="peer systems (empty: carve only)")
    ap.add_argument("--before", type=Path, help="another carve checkout: its package as carve-before")
    ap.add_argument("--report", action="store_true", help="only render build/bench/threads/results.json")
    ap.add_argument("--docs", action="store_true", help="write the table into docs/performance.md")
    a = ap.parse_args()
    if a.runs < 1 or a.warmup < 0 or a.settle_ms < 0:
        sys.exit("threads.py: --runs must be >= 1, --warmup and --settle-ms >= 0")
    peers = [p for p in a.peers.split(",") if p]
    for p in peers:
        if p not in PEERS:
            sys.exit(f"threads.py: --peers: unknown system '{p}' (known: {', '.join(PEERS)})")
    results = OUT / "results.json"
    if not a.report:
        prep = bench.prepare(a.model, a.imgsz, formats=[{"onnxruntime": "onnx"}.get(p, p) for p in peers])
        before_exe = prepare_before(a.before.resolve(), a.model, prep, a.imgsz) if a.before else None
        image = bench.bench_image()
        cpus = subprocess.run([str(prep["carve_exe"]), str(image), "0"], input="quit\n", capture_output=True,
                              text=True, check=True).stdout.splitlines()[0]
        res = {"model": a.model, "imgsz": a.imgsz, "runs": a.runs, "warmup": a.warmup, "settle_ms": a.settle_ms,
               "machine": bench.machine(), "cpus": json.loads(cpus)["threads"], "load_before": os.getloadavg()[0],
               "systems": ["carve"] + (["carve-before"] if before_exe else []) + peers, "cells": []}
        for scn, counts in (("a", a.idle), ("b", a.over), ("c", a.busy)):
            for t in (int(x) for x in counts.split(",") if x):
                systems = ["carve"] + (["carve-over"] if scn == "b" else []) + (["carve-before"] if before_exe else [])
                systems += peers
                log(f"scenario {scn}, {t} thread(s): {', '.join(systems)}")
                c = cell(prep, before_exe, image, systems, t, scn == "c", a.runs, a.warmup, a.settle_ms, a.imgsz)
                c["scenario"] = scn
                res["cells"].append(c)
                if "carve-over" in c["systems"] and "carve-over" not in res["systems"]:
                    res["systems"].insert(1, "carve-over")
        OUT.mkdir(parents=True, exist_ok=True)
        results.write_text(json.dumps(res, indent=1))
    if not results.exists():
        sys.exit(f"threads.py: no {results}: run without --report first")
    table = render(json.loads(results.read_text()))
    (OUT / "table.md").write_text(table)
    print(table)
    if a.docs:
        write_docs(table)


if __name__ == "__main__":
    main()
