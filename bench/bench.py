#!/usr/bin/env python3
"""carve's CPU package against ONNX Runtime, OpenVINO, ExecuTorch (XNNPACK) and PyTorch, side by side.

    make bench                                     # everything below, then docs/performance.md and docs/perf.png
    build/bench-venv/bin/python bench/bench.py --models yolo26n --threads 2 --runs 30
    build/bench-venv/bin/python bench/bench.py --report   # re-render the docs from build/bench/results/*.json

For each model (yolo26n, yolo26s: detect at 640; yolo26n-seg): one random-weight checkpoint
(tools/oracle.py make-checkpoint), exported to every peer's format (bench/export.py), and the carve package
generated from the same checkpoint and built Release. Each system runs in its own process (bench/carve_runner.c,
bench/peer.py) on the same image: Ultralytics' bus.jpg decoded once by OpenCV and stored losslessly as PNG, so that
every system sees the same pixels (JPEG decoders differ by a few levels, which random weights amplify). For each
thread count the processes are started one after the other (init time), warmed up, then run one inference each in
turn, round after round, so that the load of a shared machine falls on all of them alike, with a pause (--settle-ms,
50 ms) before each inference so that the worker threads of the system that ran before it (pthreadpool, ONNX Runtime
and TBB spin for a while after a run) have gone to sleep and do not compete with it. The same run measures the
machine's FMA peak (bench/fma_peak.c). Results go to build/bench/results/<model>-t<threads>.json.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bench"
WORK = BUILD / "work"
RESULTS = BUILD / "results"
SYSTEMS = ["carve", "onnxruntime", "openvino", "executorch", "pytorch"]
MODELS = {  # bench name -> (Ultralytics cfg, carve manifest, C name)
    "yolo26n": ("yolo26n.yaml", "manifests/yolo26n.yaml", "yolo26n"),
    "yolo26s": ("yolo26s.yaml", "manifests/yolo26s.yaml", "yolo26s"),
    "yolo26n-seg": ("yolo26n-seg.yaml", "manifests/yolo26n-seg.yaml", "yolo26n_seg"),
}
JOBS = os.environ.get("JOBS", "2")


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw) -> None:
    log(" ".join(str(c) for c in cmd))
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kw)


# ---- Preparation -------------------------------------------------------------------------------------------------

def bench_image() -> Path:
    """Ultralytics' bus.jpg, decoded by OpenCV, as a PNG: the same pixels for stb_image (carve) and OpenCV (peers)."""
    png = WORK / "bus.png"
    if not png.exists():
        import cv2
        import ultralytics

        img = cv2.imread(os.path.join(os.path.dirname(ultralytics.__file__), "assets", "bus.jpg"))
        WORK.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(png), img)
    return png


def prepare(model: str, imgsz: int, formats: list[str] | None = None) -> dict:
    """The checkpoint, its exports (formats: bench/export.py's, default all), the carve package and its runner."""
    cfg, manifest, cname = MODELS[model]
    WORK.mkdir(parents=True, exist_ok=True)
    pt = WORK / f"{model}.pt"
    if not pt.exists():
        run([sys.executable, "tools/oracle.py", "make-checkpoint", "--cfg", cfg, "--out", pt])
    run([sys.executable, "bench/export.py", "--pt", pt, "--imgsz", str(imgsz),
         *(["--formats", ",".join(formats)] if formats else [])])
    pkg = BUILD / f"pkg-{model}"
    run(["./carve", "generate", manifest, "--backend", "xnnpack", "--weights", pt, "--imgsz", str(imgsz),
         "--out", pkg, "--force"])
    run(["cmake", "-S", pkg, "-B", pkg / "build", "-DCMAKE_BUILD_TYPE=Release"], stdout=subprocess.DEVNULL)
    run(["cmake", "--build", pkg / "build", "-j", JOBS], stdout=subprocess.DEVNULL)
    exe = BUILD / "bin" / f"carve_runner_{model}"
    exe.parent.mkdir(parents=True, exist_ok=True)
    run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "bench/carve_runner.c", pkg / "runtime" / "carve_io.c",
         f"-I{pkg}", f"-I{pkg / 'runtime'}", f"-DCARVE_MODEL={cname}", f"-DCARVE_NAME={cname.upper()}",
         f'-DCARVE_HEADER="{cname}.h"', pkg / "build" / f"lib{cname}.a", pkg / "build" / "libcarve_runtime.a",
         "-lXNNPACK", "-lcpuinfo", "-lstb", "-lpthread", "-lm", "-o", exe])  # the pool: the package's carve_pool.c
    header = (pkg / f"{cname}.h").read_text()
    const = lambda n: int(re.search(rf"#define {cname.upper()}_{n} (\d+)", header).group(1))  # noqa: E731
    stem = WORK / model
    return {
        "pt": pt, "carve_exe": exe, "flops": const("FLOPS"), "weight_bytes": const("WEIGHT_BYTES"),
        "arena_bytes": const("ARENA_BYTES"),
        "artifacts": {
            "carve": [exe],
            "onnxruntime": [stem.with_suffix(".onnx")],
            "openvino": [WORK / f"{model}_openvino_model" / f"{model}.xml", WORK / f"{model}_openvino_model" / f"{model}.bin"],
            "executorch": [WORK / f"{model}_executorch_model" / "model.pte"],
            "pytorch": [pt],
        },
    }


def runtime_libs(system: str, exe: Path) -> list[str]:
    """The shared libraries a system loads for inference (its 'binary'), for the size column."""
    site = Path(__import__("numpy").__file__).parent.parent
    venv_site = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    if system == "carve":
        out = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
        return [m for m in re.findall(r"=> (\S+)", out) if re.search(r"XNNPACK|pthreadpool|cpuinfo", m)]
    pats = {
        "onnxruntime": [venv_site / "onnxruntime/capi/*.so"],
        "openvino": [venv_site / "openvino/libs/libopenvino.so.*", venv_site / "openvino/libs/libopenvino_intel_cpu_plugin.so",
                     venv_site / "openvino/libs/libopenvino_ir_frontend.so.*"],
        "executorch": [venv_site / "executorch/extension/pybindings/*.so"],
        "pytorch": [site / "torch/lib/libtorch_cpu.so", site / "torch/lib/libc10.so"],
    }[system]
    return sorted({f for p in pats for f in glob.glob(str(p)) if not os.path.islink(f)})


def fma_peak() -> dict:
    exe = BUILD / "bin" / "fma_peak"
    exe.parent.mkdir(parents=True, exist_ok=True)
    run(["cc", "-std=c11", "-O3", "-Wall", "-Wextra", "-Werror", "-pthread", "bench/fma_peak.c", "-o", exe])
    out = {}
    for t in (1, 2):
        r = subprocess.run([str(exe), "--threads", str(t)], capture_output=True, text=True, check=True)
        out[f"t{t}"] = json.loads(r.stdout)
    return out


# ---- Measurement -------------------------------------------------------------------------------------------------

class Worker:
    """One system's process: started (init measured inside it), then driven by 'run K' lines."""

    def __init__(self, system: str, model: str, prep: dict, image: Path, threads: int, imgsz: int,
                 carve_args: tuple = ()):
        self.system = system
        if system == "carve":
            cmd = [str(prep["carve_exe"]), str(image), str(threads), *carve_args]
        else:
            cmd = [sys.executable, str(ROOT / "bench" / "peer.py"), "--system", system,
                   "--artifact", str(prep["artifacts"][system][0]), "--pt", str(prep["pt"]),
                   "--image", str(image), "--threads", str(threads), "--imgsz", str(imgsz)]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), YOLO_OFFLINE="1", YOLO_AUTOINSTALL="false",
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, cwd=ROOT, env=env)
        self.ready = self._read()
        self.e2e: list[float] = []
        self.net: list[float] = []

    def _read(self) -> dict:
        while True:  # runtimes log to stdout too (ExecuTorch's threadpool, Ultralytics' model summary): skip that
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.system}: the process ended early (exit {self.p.wait()})")
            if line.startswith("{"):
                return json.loads(line)

    def run(self, k: int, keep: bool) -> None:
        self.p.stdin.write(f"run {k}\n")
        self.p.stdin.flush()
        r = self._read()
        if keep:
            self.e2e += r["e2e_ms"]
            self.net += r["net_ms"]

    def quit(self) -> int:
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        rss = self._read()["maxrss_kb"]
        self.p.wait()
        return rss


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def measure(model: str, threads: int, runs: int, warmup: int, imgsz: int, systems: list[str], peak: dict,
            settle_ms: float) -> dict:
    prep = prepare(model, imgsz)
    image = bench_image()
    load0 = os.getloadavg()
    workers = []
    for s in systems:
        log(f"{model} t{threads}: starting {s}")
        workers.append(Worker(s, model, prep, image, threads, imgsz))
    loads = []
    for r in range(warmup + runs):
        order = workers[r % len(workers):] + workers[:r % len(workers)]  # rotate who goes first
        for w in order:
            time.sleep(settle_ms / 1000)  # let the previous system's pool threads stop spinning
            w.run(1, keep=r >= warmup)
        loads.append(os.getloadavg()[0])
        if r % 10 == 0:
            log(f"{model} t{threads}: round {r + 1}/{warmup + runs}, load {loads[-1]:.2f}")
    out = {"model": model, "threads": threads, "runs": runs, "warmup": warmup, "imgsz": imgsz, "settle_ms": settle_ms,
           "flops": prep["flops"], "weight_bytes": prep["weight_bytes"], "arena_bytes": prep["arena_bytes"],
           "load_before": load0, "load_during_mean": statistics.mean(loads), "load_after": os.getloadavg(),
           "fma_peak": peak, "systems": {}}
    ref = workers[0].ready["rows"]
    for w in workers:
        rss = w.quit()
        arts = prep["artifacts"][w.system]
        libs = runtime_libs(w.system, prep["carve_exe"])
        agree = max((abs(a - b) for ra, rb in zip(ref, w.ready["rows"]) for a, b in zip(ra[:4], rb[:4])), default=None)
        out["systems"][w.system] = {
            "init_ms": w.ready["init_ms"], "detections": w.ready["detections"], "top_rows": w.ready["rows"],
            "max_box_diff_vs_first_px": agree,
            "e2e_ms": w.e2e, "net_ms": w.net,
            "e2e_median": statistics.median(w.e2e), "e2e_p90": pct(w.e2e, 0.9),
            "net_median": statistics.median(w.net), "net_p90": pct(w.net, 0.9),
            "maxrss_kb": rss, "baseline_rss_kb": w.ready["baseline_rss_kb"],
            "artifact_bytes": sum(Path(a).stat().st_size for a in arts),
            "runtime_lib_bytes": sum(Path(f).stat().st_size for f in libs), "runtime_libs": libs,
        }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{model}-t{threads}.json").write_text(json.dumps(out, indent=1))
    return out


def machine() -> dict:
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    flags = Path("/proc/cpuinfo").read_text()
    isa = [f for f in ("avx512f", "avx512_bf16", "amx_tile", "avx2", "fma") if re.search(rf"\b{f}\b", flags)]
    return {"cpu": cpu, "cores": os.cpu_count(), "isa": isa, "kernel": platform.release(),
            "python": platform.python_version()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--settle-ms", type=float, default=50.0,
                    help="pause before each inference so that the previous system's worker threads, which spin "
                         "for a while after a run (pthreadpool, ONNX Runtime, TBB), are idle (default 50)")
    ap.add_argument("--report", action="store_true", help="only render docs/performance.md and docs/perf.png")
    a = ap.parse_args()
    if a.runs < 1 or a.warmup < 0 or a.settle_ms < 0:
        sys.exit("bench.py: --runs must be >= 1, --warmup and --settle-ms >= 0")
    systems = a.systems.split(",")
    for s in systems:
        if s not in SYSTEMS:
            sys.exit(f"bench.py: --systems: unknown system '{s}' (known: {', '.join(SYSTEMS)})")
    if not a.report:
        peak = fma_peak()
        log(f"FMA peak per core: {peak}")
        for model in a.models.split(","):
            if model not in MODELS:
                sys.exit(f"bench.py: --models: unknown model '{model}' (known: {', '.join(MODELS)})")
            for t in (int(x) for x in a.threads.split(",")):
                measure(model, t, a.runs, a.warmup, a.imgsz, systems, peak, a.settle_ms)
    from report import write_report  # bench/report.py

    results = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    if not results:
        sys.exit(f"bench.py: no results in {RESULTS}: run without --report first")
    write_report(results, machine(), ROOT / "docs")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
