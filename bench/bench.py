#!/usr/bin/env python3
"""carve's CPU packages (fp32 and int8) against ONNX Runtime, OpenVINO, ExecuTorch (XNNPACK) and PyTorch, side by side.

    make bench                                     # everything below, then docs/performance.md and docs/perf.png
    build/bench-venv/bin/python bench/bench.py --models yolo26n --threads 2 --runs 30
    build/bench-venv/bin/python bench/bench.py --models yolo26n --runs 2 --warmup 1 --no-docs   # a smoke run
    build/bench-venv/bin/python bench/bench.py --report   # re-render the docs from build/bench/results/*.json

For each model (yolo26n, yolo26s: detect at 640; yolo26n-seg; yolo26n-shapes, trained): one checkpoint (random
weights: tools/oracle.py make-checkpoint; or the trained model's), exported to every peer's format (bench/export.py),
and the carve package generated from the same checkpoint and built Release. Each system runs in its own process
(bench/carve_runner.c, bench/peer.py) on the same image: Ultralytics' bus.jpg decoded once by OpenCV and stored
losslessly as PNG, so that every system sees the same pixels (JPEG decoders differ by a few levels, which random
weights amplify); the trained yolo26n-shapes runs on assets/shapes-3.png, an image of its own kind. For each
thread count the processes are started one after the other (init time), warmed up, then run one inference each in
turn, round after round, so that the load of a shared machine falls on all of them alike, with a pause (--settle-ms,
50 ms) before each inference so that the worker threads of the system that ran before it (pthreadpool, ONNX Runtime
and TBB spin for a while after a run) have gone to sleep and do not compete with it. The same run measures the
machine's FMA peak (bench/fma_peak.c) and its int8 peaks (bench/int8_peak.c: AVX-512 VNNI, AVX-VNNI, AMX).
Results go to build/bench/results/<model>-t<threads>.json; the report (bench/report.py) is printed and written into
docs/performance.md (--no-docs: into build/bench/report.md only).

The systems (SPECS; --systems picks a subset, in this order):

  carve              the xnnpack package, float32
  carve-int8         the xnnpack package generated with --precision int8 --calib (carve's own AMX / VNNI kernels)
  openvino-default   the OpenVINO IR at the CPU plugin's default precision (bf16 on CPUs with AVX512-BF16 / AMX;
                     the row names what the plugin chose)
  openvino-int8      NNCF post-training quantization of that IR (bench/quantize.py), the plugin's default precision
                     for what stays float
  onnxruntime-int8   ONNX Runtime quantize_static, QDQ, int8 activations (bench/quantize.py; make eval's model)
  onnxruntime-int8-u8  the same with uint8 activations, which ONNX Runtime's CPU provider fuses into QLinearConv
                     (with int8 activations it fuses 12 of 102 convolutions and runs slower than float32)
  onnxruntime        ONNX Runtime, float32
  openvino           OpenVINO, INFERENCE_PRECISION_HINT f32
  executorch         ExecuTorch, XNNPACK delegate, float32
  pytorch            PyTorch eager, float32

The int8 systems run for the models of --int8-models (default yolo26n-shapes: YOLO26n trained by
tools/train_demo.py, at 640 like the others, on assets/shapes-3.png; TRAINED). A random-weight checkpoint makes no
sense for int8 (its activations are no real model's, and every op alone in int8 costs the chaotic network's output
a lot: the sensitivity pass of quant.json version 1 kept all 102 convs of yolo26n in float32; the current one stops at
its budget of 10 % of the FLOPs in float32 and warns). Calibration: --calib-count (default 32, the quantization pass's minimum) images of
tools/train_demo.py's renderer, seed 0 (bench/eval.py's calibration seed: the demo model's training images), rendered
into build/bench/work/calib-<count>/ (or --calib DIR). The same folder calibrates carve (--calib) and both peers'
quantizers. The int8 package and the int8 peer models are cached: the package in build/bench/pkg-<model>-int8/
while the checkpoint, the calibration images, the input size and carve's generator, templates and runtime are those
it was made from (.bench-key; generate.log keeps carve's summary, which every run prints), the peers' models in
build/bench/int8/<model>-<imgsz>-<key>/ (bench/quantize.py's keyed_checkpoint).
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bench"
WORK = BUILD / "work"
RESULTS = BUILD / "results"
INT8_DIR = BUILD / "int8"


@dataclass(frozen=True)
class Spec:
    runner: str               # "carve" (bench/carve_runner.c) or bench/peer.py's --system
    precision: str            # "fp32", "int8", or "default": the runtime's own choice (the result names it)
    ov_precision: str = "f32"  # OpenVINO: bench/peer.py --ov-precision
    int8: bool = False        # quantized from the calibration set: runs for --int8-models only


SPECS = {  # the order of the processes' start and of the first round; "carve" first: the agreement reference
    "carve": Spec("carve", "fp32"),
    "carve-int8": Spec("carve", "int8", int8=True),
    "openvino-default": Spec("openvino", "default", ov_precision="default"),
    "openvino-int8": Spec("openvino", "int8", ov_precision="default", int8=True),
    "onnxruntime-int8": Spec("onnxruntime", "int8", int8=True),
    "onnxruntime-int8-u8": Spec("onnxruntime", "int8", int8=True),
    "onnxruntime": Spec("onnxruntime", "fp32"),
    "openvino": Spec("openvino", "fp32"),
    "executorch": Spec("executorch", "fp32"),
    "pytorch": Spec("pytorch", "fp32"),
}
SYSTEMS = list(SPECS)
CALIB_COUNT = 32  # the quantization pass's minimum
MODELS = {  # bench name -> (Ultralytics cfg, carve manifest, C name)
    "yolo26n": ("yolo26n.yaml", "manifests/yolo26n.yaml", "yolo26n"),
    "yolo26s": ("yolo26s.yaml", "manifests/yolo26s.yaml", "yolo26s"),
    "yolo26n-seg": ("yolo26n-seg.yaml", "manifests/yolo26n-seg.yaml", "yolo26n_seg"),
    "yolo26n-shapes": ("yolo26n.yaml", "manifests/yolo26n-shapes.yaml", "yolo26n_shapes"),
}
# Models with trained weights (not a random-weight checkpoint): bench name -> (checkpoint, the image it runs on).
# yolo26n-shapes is YOLO26n (5 classes) trained by tools/train_demo.py (docs/demo-model.md): the int8 systems run on
# it, because on random weights int8 means nothing (each op alone in int8 already costs the chaotic network's output
# a lot: carve's sensitivity pass keeps as much in float32 as its FLOPs budget allows and warns).
TRAINED = {"yolo26n-shapes": ("assets/yolo26n-shapes.pt", "assets/shapes-3.png")}
INT8_MODELS = ("yolo26n-shapes",)  # --int8-models' default
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


def image_for(model: str) -> Path:
    """The image a model runs on: bus.png (bench_image), or its own for a trained model (TRAINED)."""
    return ROOT / TRAINED[model][1] if model in TRAINED else bench_image()


def checkpoint(model: str) -> Path:
    """build/bench/work/<model>.pt: a random-weight checkpoint (tools/oracle.py make-checkpoint: BatchNorm statistics
    calibrated on real images), made once, or a trained model's copied (its exports dropped when the copy changes)."""
    import export  # bench/export.py

    cfg = MODELS[model][0]
    WORK.mkdir(parents=True, exist_ok=True)
    pt = WORK / f"{model}.pt"
    if model in TRAINED:
        src = ROOT / TRAINED[model][0]
        if not pt.exists() or pt.read_bytes() != src.read_bytes():
            export.artifact(pt, "onnx").unlink(missing_ok=True)
            for fmt in ("openvino", "executorch"):
                shutil.rmtree(export.artifact(pt, fmt).parent, ignore_errors=True)
            shutil.copyfile(src, pt)
    elif not pt.exists():
        run([sys.executable, "tools/oracle.py", "make-checkpoint", "--cfg", cfg, "--out", pt])
    return pt


def build_runner(pkg: Path, cname: str, exe: Path) -> Path:
    """bench/carve_runner.c linked against a built package (its lib<name>.a and libcarve_runtime.a)."""
    exe.parent.mkdir(parents=True, exist_ok=True)
    run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "bench/carve_runner.c", pkg / "runtime" / "carve_io.c",
         f"-I{pkg}", f"-I{pkg / 'runtime'}", f"-DCARVE_MODEL={cname}", f"-DCARVE_NAME={cname.upper()}",
         f'-DCARVE_HEADER="{cname}.h"', pkg / "build" / f"lib{cname}.a", pkg / "build" / "libcarve_runtime.a",
         "-lXNNPACK", "-lcpuinfo", "-lstb", "-lpthread", "-lm", "-o", exe])  # the pool: the package's carve_pool.c
    return exe


def header_const(pkg: Path, cname: str, name: str) -> int:
    header = (pkg / f"{cname}.h").read_text()
    m = re.search(rf"#define {cname.upper()}_{name} (\d+)", header)
    if m is None:
        raise SystemExit(f"bench.py: {pkg / (cname + '.h')}: no {cname.upper()}_{name}")
    return int(m.group(1))


def build_package(pkg: Path) -> None:
    run(["cmake", "-S", pkg, "-B", pkg / "build", "-DCMAKE_BUILD_TYPE=Release"], stdout=subprocess.DEVNULL)
    run(["cmake", "--build", pkg / "build", "-j", JOBS], stdout=subprocess.DEVNULL)


def prepare(model: str, imgsz: int, formats: list[str] | None = None, calib: Path | None = None) -> dict:
    """The checkpoint, its exports (formats: bench/export.py's, default all), the carve package and its runner; with
    calib (a folder of calibration images), also the int8 package, its runner and the int8 peers (prepare_int8)."""
    _, manifest, cname = MODELS[model]
    pt = checkpoint(model)
    run([sys.executable, "bench/export.py", "--pt", pt, "--imgsz", str(imgsz),
         *(["--formats", ",".join(formats)] if formats else [])])
    pkg = BUILD / f"pkg-{model}"
    run(["./carve", "generate", manifest, "--backend", "xnnpack", "--weights", pt, "--imgsz", str(imgsz),
         "--out", pkg, "--force"])
    build_package(pkg)
    exe = build_runner(pkg, cname, BUILD / "bin" / f"carve_runner_{model}")
    stem = WORK / model
    ov_fp32 = [WORK / f"{model}_openvino_model" / f"{model}.xml", WORK / f"{model}_openvino_model" / f"{model}.bin"]
    prep = {
        "pt": pt, "carve_exe": exe, "flops": header_const(pkg, cname, "FLOPS"),
        "weight_bytes": header_const(pkg, cname, "WEIGHT_BYTES"), "arena_bytes": header_const(pkg, cname, "ARENA_BYTES"),
        "artifacts": {
            "carve": [exe],
            "onnxruntime": [stem.with_suffix(".onnx")],
            "openvino": ov_fp32,
            "openvino-default": ov_fp32,
            "executorch": [WORK / f"{model}_executorch_model" / "model.pte"],
            "pytorch": [pt],
        },
    }
    if calib is not None:
        prep = prepare_int8(model, imgsz, calib, prep)
    return prep


def source_key() -> str:
    """sha256 over carve's generator, templates and runtime (every file's path and bytes): what a generated package is
    a function of besides its inputs."""
    h = hashlib.sha256()
    files = [ROOT / "carve"] + sorted(f for d in ("generator", "templates", "runtime") for f in (ROOT / d).rglob("*")
                                      if f.is_file() and "__pycache__" not in f.parts)
    for f in files:
        h.update(str(f.relative_to(ROOT)).encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def int8_package(model: str, imgsz: int, calib: Path, pt: Path) -> tuple[Path, list[str]]:
    """The int8 xnnpack package (generated when its .bench-key differs from the inputs' and sources' key: the
    calibration is minutes at 640) and the generation summary's lines (carve's stderr, kept in generate.log)."""
    import quantize  # bench/quantize.py

    _, manifest, _ = MODELS[model]
    pkg = BUILD / f"pkg-{model}-int8"
    key = hashlib.sha256(f"{quantize.cache_key(pt, calib, imgsz)} {source_key()} {manifest}".encode()).hexdigest()
    stamp, logf = pkg / ".bench-key", pkg / "generate.log"
    if stamp.exists() and stamp.read_text() == key and logf.exists():
        log(f"{model}: the int8 package {pkg} is up to date (checkpoint, calibration images, imgsz, carve's sources)")
        lines = logf.read_text().splitlines()
    else:
        stamp.unlink(missing_ok=True)
        cmd = ["./carve", "generate", manifest, "--backend", "xnnpack", "--checkpoint", pt, "--imgsz", str(imgsz),
               "--precision", "int8", "--calib", calib, "--out", pkg, "--force"]
        log(" ".join(str(c) for c in cmd))
        t0 = time.time()
        p = subprocess.Popen([str(c) for c in cmd], cwd=ROOT, stderr=subprocess.PIPE, text=True)
        lines = []
        for line in p.stderr:  # the progress as it comes, and the summary kept
            sys.stderr.write(line)
            lines.append(line.rstrip("\n"))
        if p.wait() != 0:
            raise SystemExit(f"bench.py: carve generate --precision int8 failed (exit {p.returncode})")
        lines.append(f"(generated in {time.time() - t0:.0f} s)")
        logf.write_text("\n".join(lines) + "\n")
        stamp.write_text(key)
    return pkg, lines


def summary_lines(lines: list[str]) -> list[str]:
    """The int8 part of carve generate's summary: from "carve: int8: ..." to the "generated" line, without carve's
    prefix."""
    out, on = [], False
    for line in lines:
        body = line[len("carve: "):] if line.startswith("carve: ") else line
        on = on or body.startswith("int8:")
        if on:
            out.append(body)
        if on and body.startswith("generated "):
            break
    return out


def quant_ops(pkg: Path) -> dict:
    """From the package's quant.json: how many conv / add ops are int8, and which stay float32 and why."""
    q = json.loads((pkg / "quant.json").read_text())
    ops = [o for o in q["ops"] if o["kind"] in ("conv2d", "add")]
    return {"int8_ops": sum(o["precision"] == "int8" for o in ops), "quantizable_ops": len(ops),
            "float_ops": [[o["name"], o["kind"], o["reason"]] for o in ops if o["precision"] == "float32"],
            "calibration_images": q["calibration"]["count"], "thresholds_db": q["sensitivity"]["thresholds_db"]}


def prepare_int8(model: str, imgsz: int, calib: Path, prep: dict) -> dict:
    """carve's int8 package and runner, and the int8 peers (bench/quantize.py, cached per checkpoint, calibration
    set and imgsz), all from the calibration images in calib."""
    import quantize  # bench/quantize.py

    _, _, cname = MODELS[model]
    pkg, lines = int8_package(model, imgsz, calib, prep["pt"])
    build_package(pkg)
    exe = build_runner(pkg, cname, BUILD / "bin" / f"carve_runner_{model}_int8")
    kpt = quantize.keyed_checkpoint(prep["pt"], calib, imgsz, INT8_DIR)
    peers = quantize.build(kpt, imgsz, calib, ["onnxruntime-int8", "onnxruntime-int8-u8", "openvino-int8"], log=log)
    ov = peers["openvino-int8"]
    summary = summary_lines(lines)
    for line in summary:
        log(f"carve int8: {line}")
    return dict(prep, carve_int8_exe=exe, int8={
        "calib": {"folder": str(calib.relative_to(ROOT) if calib.is_relative_to(ROOT) else calib),
                  "images": len(quantize.calibration_images(calib)), "key": quantize.cache_key(prep["pt"], calib, imgsz)},
        "summary": summary, **quant_ops(pkg), "flops": header_const(pkg, cname, "FLOPS"),
        "weight_bytes": header_const(pkg, cname, "WEIGHT_BYTES"), "arena_bytes": header_const(pkg, cname, "ARENA_BYTES"),
        "models": {k: str(v.relative_to(ROOT)) for k, v in peers.items()}},
        artifacts=dict(prep["artifacts"], **{"carve-int8": [exe], "onnxruntime-int8": [peers["onnxruntime-int8"]],
                                               "onnxruntime-int8-u8": [peers["onnxruntime-int8-u8"]],
                                               "openvino-int8": [ov, ov.with_suffix(".bin")]}))


def calibration_folder(count: int) -> Path:
    """count images of tools/train_demo.py's renderer, seed 0 (bench/eval.py's calibration seed), as PNGs in
    build/bench/work/calib-<count>/ (cached by bench/eval.py's render)."""
    import eval as harness  # bench/eval.py

    folder = WORK / f"calib-{count}"
    harness.render(folder, harness.CALIB_SEED, count)
    return folder


def runtime_libs(system: str, exe: Path) -> list[str]:
    """The shared libraries a system (SPECS' runner) loads for inference (its 'binary'), for the size column."""
    site = Path(__import__("numpy").__file__).parent.parent
    venv_site = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    system = SPECS[system].runner if system in SPECS else system
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


def peak(source: str, threads=(1, 2)) -> dict:
    """bench/fma_peak.c or bench/int8_peak.c, built and run on 1 and 2 threads: {"t1": {...}, "t2": {...}}."""
    exe = BUILD / "bin" / Path(source).stem
    exe.parent.mkdir(parents=True, exist_ok=True)
    run(["cc", "-std=c11", "-O3", "-Wall", "-Wextra", "-Werror", "-pthread", source, "-o", exe])
    out = {}
    for t in threads:
        r = subprocess.run([str(exe), "--threads", str(t)], capture_output=True, text=True)
        if r.returncode != 0:  # int8_peak: no int8 instruction on this CPU
            log(f"{source} --threads {t}: exit {r.returncode} ({r.stderr.strip() or 'nothing measured'})")
            continue
        out[f"t{t}"] = json.loads(r.stdout)
    return out


def fma_peak() -> dict:
    return peak("bench/fma_peak.c")


def int8_peak() -> dict:
    return peak("bench/int8_peak.c")


# ---- Measurement -------------------------------------------------------------------------------------------------

class Worker:
    """One system's process: started (init measured inside it), then driven by 'run K' lines."""

    def __init__(self, system: str, model: str, prep: dict, image: Path, threads: int, imgsz: int,
                 carve_args: tuple = ()):
        self.system = system
        spec = SPECS[system]
        if spec.runner == "carve":
            exe = prep["carve_int8_exe"] if spec.int8 else prep["carve_exe"]
            cmd = [str(exe), str(image), str(threads), *carve_args]
        else:
            cmd = [sys.executable, str(ROOT / "bench" / "peer.py"), "--system", spec.runner,
                   "--artifact", str(prep["artifacts"][system][0]), "--pt", str(prep["pt"]),
                   "--image", str(image), "--threads", str(threads), "--imgsz", str(imgsz),
                   "--ov-precision", spec.ov_precision]
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


def precision_of(system: str, ready: dict) -> str:
    """What a row runs in: SPECS' precision, with the precision OpenVINO's plugin chose for its float parts."""
    spec, chosen = SPECS[system], ready.get("inference_precision")
    if chosen is None or spec.runner != "openvino":
        return spec.precision
    if spec.precision == "default":
        return f"{chosen} (default)"
    if spec.precision == "int8":
        return f"int8 + {chosen}"
    return "fp32" if chosen == "f32" else chosen


def box_agreement(ref: list, rows: list) -> float | None:
    """The largest coordinate difference (px) between each of ref's rows [x1, y1, x2, y2, score, cls] and the
    closest row of the same class in rows: the top 5 of two systems matched by box, not by rank (a trained model's
    int8 run may swap two detections of close scores, or miss one: then its closest match is another object, and
    the difference says so). None when ref is empty; inf when a class has no row in rows."""
    if not ref:
        return None
    worst = 0.0
    for a in ref:
        best = min((max(abs(x - y) for x, y in zip(a[:4], b[:4])) for b in rows if int(b[5]) == int(a[5])),
                   default=float("inf"))
        worst = max(worst, best)
    return worst


def measure(model: str, prep: dict, threads: int, runs: int, warmup: int, imgsz: int, systems: list[str],
            peaks: dict, settle_ms: float) -> dict:
    """One thread count: every system's process started in turn, then the interleaved rounds; the result JSON."""
    image = image_for(model)
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
           "image": image.name, "trained": model in TRAINED,
           "flops": prep["flops"], "weight_bytes": prep["weight_bytes"], "arena_bytes": prep["arena_bytes"],
           "load_before": load0, "load_during_mean": statistics.mean(loads), "load_after": os.getloadavg(),
           "fma_peak": peaks["fma"], "int8_peak": peaks["int8"], "systems": {}}
    if "int8" in prep:
        out["int8"] = prep["int8"]
    ref = workers[0].ready["rows"]
    for w in workers:
        rss = w.quit()
        arts = prep["artifacts"][w.system]
        libs = runtime_libs(w.system, arts[0] if SPECS[w.system].runner == "carve" else prep["carve_exe"])
        agree = box_agreement(ref, w.ready["rows"])
        out["systems"][w.system] = {
            "precision": precision_of(w.system, w.ready), "runner": SPECS[w.system].runner,
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
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="a subset of " + ",".join(SYSTEMS))
    ap.add_argument("--int8-models", default=",".join(INT8_MODELS),
                    help=f"the models the int8 systems run for (default {','.join(INT8_MODELS)}; '' for none)")
    ap.add_argument("--calib-count", type=int, default=CALIB_COUNT,
                    help=f"calibration images rendered for the int8 systems (default {CALIB_COUNT}, the minimum of "
                         "carve's quantization pass)")
    ap.add_argument("--calib", type=Path, help="a folder of calibration images instead of the rendered ones")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--settle-ms", type=float, default=50.0,
                    help="pause before each inference so that the previous system's worker threads, which spin "
                         "for a while after a run (pthreadpool, ONNX Runtime, TBB), are idle (default 50)")
    ap.add_argument("--report", action="store_true", help="only render the report from build/bench/results")
    ap.add_argument("--no-docs", action="store_true",
                    help="leave docs/performance.md and docs/perf.png alone: the report goes to build/bench/report.md "
                         "(and the terminal) only; for smoke runs on a busy machine")
    a = ap.parse_args()
    if a.runs < 1 or a.warmup < 0 or a.settle_ms < 0 or a.calib_count < 1:
        sys.exit("bench.py: --runs and --calib-count must be >= 1, --warmup and --settle-ms >= 0")
    systems = a.systems.split(",")
    for s in systems:
        if s not in SYSTEMS:
            sys.exit(f"bench.py: --systems: unknown system '{s}' (known: {', '.join(SYSTEMS)})")
    systems = [s for s in SYSTEMS if s in systems]  # SPECS' order: carve first, the agreement reference
    models = a.models.split(",")
    int8_models = [m for m in a.int8_models.split(",") if m]
    for m in models + int8_models:
        if m not in MODELS:
            sys.exit(f"bench.py: --models / --int8-models: unknown model '{m}' (known: {', '.join(MODELS)})")
    if a.calib is not None and not a.calib.is_dir():
        sys.exit(f"bench.py: --calib {a.calib}: no such folder")
    t_start = time.time()
    if not a.report:
        peaks = {"fma": fma_peak(), "int8": int8_peak()}
        log(f"FMA peak per core: {peaks['fma']}")
        log(f"int8 peaks per core: {peaks['int8']}")
        for model in models:
            todo = [s for s in systems if not SPECS[s].int8 or model in int8_models]
            calib = None
            if any(SPECS[s].int8 for s in todo):
                calib = a.calib.resolve() if a.calib is not None else calibration_folder(a.calib_count)
            skipped = [s for s in systems if s not in todo]
            if skipped:
                log(f"{model}: not in --int8-models: without {', '.join(skipped)}")
            prep = prepare(model, a.imgsz, calib=calib)
            for t in (int(x) for x in a.threads.split(",")):
                measure(model, prep, t, a.runs, a.warmup, a.imgsz, todo, peaks, a.settle_ms)
        log(f"measured in {time.time() - t_start:.0f} s")
    import report  # bench/report.py

    results = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    if not results:
        sys.exit(f"bench.py: no results in {RESULTS}: run without --report first")
    text = report.render(results, machine())
    (BUILD / "report.md").write_text(text + "\n")
    print(text)
    if not a.no_docs:
        report.write_report(results, machine(), ROOT / "docs")
        log("wrote docs/performance.md and docs/perf.png")
    log(f"wrote {(BUILD / 'report.md').relative_to(ROOT)}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
