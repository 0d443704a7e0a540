#!/usr/bin/env python3
"""`make cuda-check`: the real cuda package on an NVIDIA GPU against the CPU (xnnpack) package.

    python3 tools/cuda_check.py [--model yolo26n] [--imgsz 640] [--runs 50] [--arch native] [--work build/work]

Not part of CI (it needs a GPU; tests/cuda/cuda_vs_xnnpack.py checks the same generated code without one).
Steps:
1. a random-weight checkpoint of the model (tools/oracle.py make_checkpoint, cached in WORK/checkpoints-r<recipe>/);
2. ``./carve generate`` for xnnpack and for cuda; both built with their own CMakeLists.txt (the cuda one
   with nvcc for --arch, default the GPU of this machine);
3. both demos on the same input tensor (Ultralytics' bus.jpg, letterboxed) with ``--dump``; per-layer
   differences printed by tools/oracle.py compare_layers (cuda vs xnnpack, the bound of
   tests/cuda/cuda_vs_xnnpack.py: max(1e-4, 3x PyTorch fp32's difference from xnnpack));
4. latency on the image: median of --runs with the CUDA Graph and with --no-graph, the CPU package's for
   reference, and the per-layer device times (--profile).
Exit status 0 when every layer is within its bound, 1 otherwise, 2 without a GPU or nvcc.
--emulate runs the same steps with the package built on the host through the emulation header (no GPU):
a check of this script, with the emulator's latencies.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests" / "cuda"))

import cuda_vs_xnnpack as cvx  # noqa: E402
import oracle  # noqa: E402


def cmake_build(pkg: Path, build: Path, *defs: str) -> None:
    cvx.run(["cmake", "-S", pkg, "-B", build, "-DCMAKE_BUILD_TYPE=Release", *defs])
    cvx.run(["cmake", "--build", build, "-j", str(os.cpu_count() or 2)])


def median_ms(demo: Path, image: Path, runs: int, *extra: str) -> float:
    p = cvx.run([demo, image, "--json", "--runs", runs, *extra])
    return float(json.loads(p.stdout)["timing_ms"]["median"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="yolo26n", help="a manifest name: yolo26{n,s,m,l,x}{,-seg,-pose,-obb,-cls}")
    ap.add_argument("--imgsz", type=int, help="input size (default: the manifest's)")
    ap.add_argument("--runs", type=int, default=50, help="runs per latency figure (median)")
    ap.add_argument("--arch", default="native", help="CMAKE_CUDA_ARCHITECTURES (default: native, this GPU)")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "work")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--emulate", action="store_true",
                    help="build the cuda package with the host emulation header instead of nvcc (no GPU needed): "
                         "exercises this script; its latencies are the emulator's, not a GPU's")
    args = ap.parse_args()

    if args.emulate:
        gpu = "the host emulation (tests/cuda/cuda_emu.h), not a GPU"
    elif shutil.which("nvidia-smi") is None or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode:
        print("cuda-check: no NVIDIA GPU here (nvidia-smi -L fails); it runs on a GPU machine only. Without one, "
              "tests/cuda/cuda_vs_xnnpack.py checks the generated code on the host (emulation).")
        return 2
    elif shutil.which("nvcc") is None:
        print("cuda-check: nvcc not on PATH (e.g. export PATH=/usr/local/cuda/bin:$PATH)")
        return 2
    else:
        gpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip().splitlines()[0]
    manifest = ROOT / "manifests" / f"{args.model}.yaml"
    if not manifest.is_file():
        ap.error(f"--model {args.model}: no {manifest}")
    task = next((t for t, suf in cvx.TASKS.items() if suf and args.model.endswith(suf)), "detect")
    prefix = args.model.replace("-", "_")
    imgsz = args.imgsz or int(next(ln.split(":")[1] for ln in manifest.read_text().splitlines()
                                   if ln.strip().startswith("imgsz:")))
    work = (args.work / "cuda-check" / f"{args.model}-{imgsz}").resolve()
    work.mkdir(parents=True, exist_ok=True)

    pt = cvx.checkpoint(args.work.resolve(), args.model)
    xpkg, cpkg = work / "xnnpack", work / "cuda"
    cvx.generate(args.model, "xnnpack", pt, imgsz, xpkg)
    cvx.generate(args.model, "cuda", pt, imgsz, cpkg)
    cmake_build(xpkg, xpkg / "build")
    cmake_build(cpkg, cpkg / "build", f"-DCARVE_CUDA_EMULATION_HEADER={cvx.EMU_HEADER}" if args.emulate
                else f"-DCMAKE_CUDA_ARCHITECTURES={args.arch}")
    xdemo, cdemo = xpkg / "build" / f"{prefix}_demo", cpkg / "build" / f"{prefix}_demo"

    image = oracle.sample_image("bus.jpg")
    inp = work / "input.npy"
    oracle.make_input(image, imgsz, inp, task=task)
    xd, cd, td = work / "dump-xnnpack", work / "dump-cuda", work / "dump-torch32"
    for d in (xd, cd, td):
        shutil.rmtree(d, ignore_errors=True)
    cvx.run([xdemo, "--input", inp, "--dump", xd, "--threads", str(os.cpu_count() or 1)])
    cvx.run([cdemo, "--input", inp, "--dump", cd, "--runs", "3"])
    oracle.reference_layers(pt, inp, td)
    print(f"== {args.model} {imgsz}x{imgsz} on {gpu}: cuda vs xnnpack, per layer "
          f"(bound max({args.tol:g}, 3x PyTorch fp32's difference from xnnpack))")
    ok = oracle.compare_layers(cd, xd, tol=args.tol, baseline=td, factor=3.0)

    graph = median_ms(cdemo, image, args.runs)
    eager = median_ms(cdemo, image, args.runs, "--no-graph")
    cpu = median_ms(xdemo, image, max(3, args.runs // 10), "--threads", str(os.cpu_count() or 1))
    print(f"\n== latency, {args.model} {imgsz}x{imgsz}, image run incl. upload, letterbox and post-processing "
          f"(median of {args.runs}):")
    print(f"  cuda, CUDA Graph replay : {graph:8.3f} ms")
    print(f"  cuda, no graph          : {eager:8.3f} ms")
    print(f"  xnnpack ({os.cpu_count()} threads)    : {cpu:8.3f} ms")
    print("\n== per-layer device time (no graph):")
    print(cvx.run([cdemo, image, "--profile", "--runs", "5"]).stdout)
    print(f"cuda-check: {'OK' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
