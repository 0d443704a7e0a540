#!/usr/bin/env python3
"""The portable backend against the xnnpack backend: same variant, same checkpoint, same input.

    compare_backends.py --task detect --scales n,s,m,l,x --work build/work [--imgsz 160,128,96,64,64] [--keep]

For each scale of the task (yolo26{S}{,-seg,-pose,-obb,-cls}), in one process:

1. The checkpoint: built with Ultralytics from its own yaml (tools/oracle.py make_checkpoint, seed 0, realistic
   BN statistics), cached in WORK/checkpoints-r<recipe>/ (oracle.checkpoint_dir) and shared with tests/oracle/run_oracle.py.
2. `./carve generate` of the manifest for both backends at the reduced --imgsz; both packages are built with
   the plain compiler command of a C11 package (no CMake): gcc -std=c11 -Wall -Wextra -Werror -O2. The
   portable one links with -lm only (and -lstb for the demo), and its objects must not reference a pthread,
   pthreadpool or XNNPACK symbol (nm). Its C files also compile with clang -Werror.
3. The sample image's tensor (letterboxed; classify: resized and centre-cropped) through both demos' --dump:
   every layer_XX.npy, the head's rows (matched row by row) or classify's probabilities, output0.npy and
   segment's output1.npy, compared with tools/oracle.py compare_layers.

Tolerance. The two backends compute the same float32 graph; they differ only in the order of the float32
sums (XNNPACK's packed micro-kernels vs. carve_portable.c's blocks), so their difference is float32 round-off,
amplified by the network. The same round-off separates any two fp32 implementations; PyTorch's fp32 forward
(reference_layers) is a third one, so per file the bound is
    max(1e-4, 3 x |PyTorch fp32 - XNNPACK|)       (relative to the layer's max |value|)
i.e. the portable package may be at most 3x as far from XNNPACK as PyTorch is. (1e-4 relative is 1700 float32
ulps of the layer's largest value; for yolo26n at 160 the measured portable-vs-XNNPACK error is 3e-7 on layer 0
and up to 1e-4 at the deepest layers, the same order as PyTorch's distance from XNNPACK.)

Prints one line per variant (max relative error and its layer, the bound's largest factor, latencies) and exits
non-zero if any variant fails. WORK keeps the packages' sources; dumps and builds are deleted after a pass
unless --keep.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import oracle  # noqa: E402

TASKS = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb", "classify": "-cls"}
DEFAULT_IMGSZ = {"n": 160, "s": 128, "m": 96, "l": 64, "x": 64}  # P5 of 5, 4, 3, 2, 2 pixels: odd and even
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2"]
TOL, FACTOR = 1e-4, 3.0  # the bound max(TOL, FACTOR x |PyTorch fp32 - xnnpack|) (above; also tests/firmware/cross.py)
JOBS = 2  # compiler processes at a time (CI: 2 cores)
# Symbols the portable package must not need: threads and XNNPACK.
FORBIDDEN = re.compile(r"^(pthread|xnn_|cpuinfo_)")


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run([str(c) for c in cmd], text=True, capture_output=True, **kw)
    if p.returncode != 0:
        print("$ " + " ".join(str(c) for c in cmd))
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        raise SystemExit(f"compare_backends: command failed with exit code {p.returncode}")
    return p


def build(pkg: Path, prefix: str, backend: str, cc: str = "gcc", cflags: tuple = (), ldflags: tuple = ()) -> Path:
    """Compiles the package's C files and links its demo with `cc`, as its README's plain build would;
    returns the demo's path. cflags / ldflags: extra options (tests/firmware/cross.py: a cross compiler with
    an aarch64 sysroot's -I and -L)."""
    obj = pkg / "build"
    obj.mkdir(exist_ok=True)
    sources = [pkg / f"{prefix}.c", pkg / f"{prefix}_demo.c"] + sorted((pkg / "runtime").glob("*.c"))
    defs = ["-DCARVE_RT_NO_THREADS"] if backend == "portable" else []
    objects = [obj / (src.stem + ".o") for src in sources]
    blob = obj / f"{prefix}_weights.o"
    cmds = [[cc, *CFLAGS, *defs, *cflags, "-I", pkg, "-I", pkg / "runtime", "-c", src, "-o", o]
            for src, o in zip(sources, objects)]
    cmds.append([cc, "-c", "-I", pkg, pkg / f"{prefix}_weights.S", "-o", blob])
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        list(pool.map(run, cmds))
    libs = ["-lstb", "-lm"] if backend == "portable" else ["-lXNNPACK", "-lpthreadpool", "-lcpuinfo", "-lstb",
                                                             "-lpthread", "-lm"]
    demo = obj / f"{prefix}_demo"
    run([cc, *objects, blob, "-o", demo, *ldflags, *libs])
    if backend == "portable":
        nm = cc[:-len("gcc")] + "nm" if cc.endswith("-gcc") else "nm"  # aarch64-linux-gnu-gcc: aarch64-linux-gnu-nm
        undefined = run([nm, "-u", *[o for o in objects if o.stem != f"{prefix}_demo"]]).stdout.split()
        bad = sorted({s for s in undefined if FORBIDDEN.match(s)})
        if bad:
            raise SystemExit(f"compare_backends: {pkg}: the portable package references {', '.join(bad)}")
    return demo


def compile_with_clang(pkg: Path, prefix: str, runtime_too: bool) -> None:
    """The portable package's C files compile warning-free with clang as well (objects discarded)."""
    sources = [pkg / f"{prefix}.c"] + (sorted((pkg / "runtime").glob("*.c")) if runtime_too else [])
    cmds = [["clang", *CFLAGS, "-DCARVE_RT_NO_THREADS", "-I", pkg, "-I", pkg / "runtime", "-c", src,
             "-o", "/dev/null"] for src in sources]
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        list(pool.map(run, cmds))


def latency(demo_stdout: str) -> float:
    """The latency line of a demo run (one run, so a rough figure)."""
    m = re.search(r"latency: ([0-9.]+) ms", demo_stdout)
    return float(m.group(1)) if m else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="detect", choices=tuple(TASKS))
    ap.add_argument("--scales", default="n,s,m,l,x")
    ap.add_argument("--imgsz", help="comma-separated, one per scale (default: n 160, s 128, m 96, l 64, x 64)")
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--tol", type=float, default=TOL)
    ap.add_argument("--factor", type=float, default=FACTOR)
    ap.add_argument("--keep", action="store_true", help="keep the dumps and builds of passing variants")
    args = ap.parse_args()

    scales = args.scales.split(",")
    sizes = [int(s) for s in args.imgsz.split(",")] if args.imgsz else [DEFAULT_IMGSZ[s] for s in scales]
    if len(sizes) != len(scales):
        ap.error("--imgsz needs one size per scale")
    work = args.work.resolve()
    failed = []
    t_all = time.time()
    for i, (scale, imgsz) in enumerate(zip(scales, sizes)):
        t0 = time.time()
        model = f"yolo26{scale}{TASKS[args.task]}"
        prefix = model.replace("-", "_")
        pt = oracle.checkpoint_dir(work) / f"{model}.pt"
        if not pt.exists():  # the same cache and seed as tests/oracle/run_oracle.py
            pt.parent.mkdir(parents=True, exist_ok=True)
            tmp = pt.with_suffix(f".tmp{os.getpid()}.pt")
            oracle.make_checkpoint(f"{model}.yaml", tmp, seed=0)
            tmp.rename(pt)
        var = work / "portable" / f"{model}-{imgsz}"
        demos = {}
        for backend in ("xnnpack", "portable"):
            pkg = var / backend
            run([ROOT / "carve", "generate", ROOT / "manifests" / f"{model}.yaml", "--backend", backend,
                 "--weights", pt, "--imgsz", imgsz, "--out", pkg, "--force"])
            demos[backend] = build(pkg, prefix, backend)
        compile_with_clang(var / "portable", prefix, runtime_too=(i == 0))

        inp = var / "input.npy"
        oracle.make_input(oracle.sample_image("bus.jpg"), imgsz, inp, task=args.task)
        dumps = {b: var / f"dump-{b}" for b in demos}
        ms = {b: latency(run([demo, "--input", inp, "--dump", dumps[b]]).stdout) for b, demo in demos.items()}
        ref32 = var / "ref32"
        oracle.reference_layers(pt, inp, ref32)
        print(f"== {model} at {imgsz}: portable vs xnnpack, bound max({args.tol:g}, {args.factor:g} x "
              f"|PyTorch fp32 - xnnpack|)")
        ok = oracle.compare_layers(dumps["portable"], dumps["xnnpack"], tol=args.tol, baseline=ref32,
                                   factor=args.factor)
        stats = dict(oracle.LAST_STATS)
        worst = max(stats, key=lambda k: stats[k][0])
        widened = max((args.factor * b / args.tol for _, b in stats.values() if b), default=0.0)
        print(f"{model} imgsz {imgsz}: {'PASS' if ok else 'FAIL'}; max rel error {stats[worst][0]:.2e} ({worst}); "
              f"bound widened to {max(widened, 1.0):.1f}x tol; latency portable {ms['portable']:.1f} ms, "
              f"xnnpack {ms['xnnpack']:.1f} ms (1 thread); {time.time() - t0:.0f} s", flush=True)
        if ok and not args.keep:
            for d in (*dumps.values(), ref32, var / "xnnpack" / "build", var / "portable" / "build"):
                shutil.rmtree(d, ignore_errors=True)
        if not ok:
            failed.append(model)
    print(f"compare_backends {args.task}: {len(scales) - len(failed)}/{len(scales)} passed"
          + (f" (failed: {', '.join(failed)})" if failed else "") + f" in {time.time() - t_all:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
