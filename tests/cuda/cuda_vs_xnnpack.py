#!/usr/bin/env python3
"""The cuda backend without a GPU: generated CUDA packages, built on the host with the emulation header,
against the xnnpack package of the same variant and checkpoint, layer by layer and final.

    cuda_vs_xnnpack.py --task detect --scales n,s,m,l,x --imgsz 96 --work build/work [--head nms] [--keep]

For each variant yolo26<scale><task suffix> of the batch:

1. the checkpoint: Ultralytics' own yaml with random weights and realistic BatchNorm statistics
   (tools/oracle.py make_checkpoint, seed 0), cached in WORK/checkpoints-r<recipe>/ (oracle.checkpoint_dir) and shared with the oracle tests;
2. ``./carve generate --backend xnnpack`` and ``--backend cuda`` at --imgsz;
3. builds: the xnnpack package with its C runtime and XNNPACK; the cuda package's ``<name>.cu`` and
   ``<name>_demo.cu`` as C++ with ``tests/cuda/cuda_emu.h`` (kernels run on the CPU, cuBLAS is a host GEMM)
   and the device runtime ``runtime/carve_cuda_*.cu`` the same way. Every runtime file a package carries is
   a byte-for-byte copy of ``runtime/`` (checked here), so each runtime is compiled once per batch and only
   the model, its demo and its weights per variant. Everything with -Wall -Wextra -Werror;
4. both demos on the same input tensor (a real image, letterboxed or centre-cropped by tools/oracle.py
   make_input) with ``--dump``: every layer's output (NCHW), the head's rows / probabilities (output0.npy)
   and segment's prototypes (output1.npy); the cuda demo runs ``--runs 3``, so the dump comes from a CUDA
   Graph replay (the first run is eager, the second captures), and once more with ``--no-graph``;
5. tools/oracle.py compare_layers(cuda, xnnpack): per file, max|cuda - xnnpack| / max|xnnpack| (rows matched
   row by row with per-column scales) must stay within the bound below; the graph replay and the eager run
   must agree bit for bit (the same kernels on the same data); so must, with the head's branches as concurrent
   lanes (backends/cuda_lanes.py), the graph replayed in an interleaved order (CARVE_EMU_GRAPH_ORDER=interleave:
   the lanes' nodes alternate, so lanes sharing memory or scratch, or a missing fork / join edge, change the
   results) with each launch's blocks and each block's threads in reverse order (a missing barrier changes them;
   not for the --cmake variant) and, for the n scale, the head run serially (--serial-head);
6. run_image end to end: both demos on Ultralytics' bus.jpg with --json (the cuda package uploads the uint8
   image and letterboxes / crops it on the device, post-processes there, maps boxes back on the host),
   compared by tools/oracle.py compare_detections with its default tolerances (boxes within 1 px, scores
   within 1e-3, mask IoU >= 0.99, keypoints within 1 px, angles within 1e-3 rad, top-5 probabilities within
   1e-4).

Tolerance. Both packages compute in float32 from the same OHWI weight blob and the same plan; they differ
only in the order of summation (XNNPACK's micro-kernels vs the emulated cuBLAS GEMM's blocking, im2col vs
direct convolution), so each differs from the exact result by rounding that the network then amplifies,
more so the deeper and wider it is. The bound is therefore relative to the tensor's magnitude and measured,
not assumed: max(1e-4, 3 x the error of PyTorch's fused float32 model against the xnnpack package on the
same layer) - a third float32 implementation that shows how far two correct float32 summation orders drift
on this layer of this model. (On the n models every layer stays well under 1e-4 outright; the printed table
shows both errors.) Integer outputs - classes, the order of rows, top-5 classes - must match once rows are
paired, which compare_layers checks.

TF32 (the packages' default): a second cuda run without --strict-fp32, held to max(tol, 3 x the error of PyTorch fp32
whose groups-1 convolutions multiply TF32-rounded inputs and weights, oracle.use_tf32_convs); with --head nms the
head's rows are left out of it (TF32 changes which boxes the NMS keeps). --no-tf32 skips it.

--tune: a cuda run with options.conv_tune (the emulation's default is off; on a GPU it is on), TF32, held to the
TF32 bound; its --profile must report convolutions timed at create, the default's none.
--fused-conv: a third cuda run, TF32 with the demo's --fused-conv (options.fused_conv: the groups-1 convolutions as
carve's fused implicit-GEMM kernel, runtime/carve_cuda_igemm.h, one launch each), held to the TF32 bound; and the
launches per forward (the demo's --profile: CUDA Graph nodes) of both paths, printed, the fused one required lower.

--head nms: both packages with the one-to-many head + NMS (the device NMS of runtime/carve_cuda_nms.cu against
the CPU one of runtime/carve_nms.c); the head's rows (layer_NN.npy, output0.npy) are then held to --tol alone,
PyTorch's fused reference being the one2one head's.

A failure keeps the work folder; a pass deletes the dumps, the builds and the weight blobs.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import numpy as np  # noqa: E402
import oracle  # noqa: E402

EMU_HEADER = ROOT / "tests" / "cuda" / "cuda_emu.h"
RUNTIME = ROOT / "runtime"
TASKS = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb", "classify": "-cls"}
CC = os.environ.get("CC", "gcc")
CXX = os.environ.get("CXX", "g++")
WARN = ["-Wall", "-Wextra", "-Werror"]
C_FLAGS = ["-std=c11", "-O2", *WARN]
EMU_FLAGS = ["-std=c++17", "-x", "c++", "-include", str(EMU_HEADER), "-DCARVE_CUDA_EMULATION",
             "-DCARVE_RT_NO_THREADS", *WARN]
XNN_LIBS = ["-lXNNPACK", "-lcpuinfo", "-lstb", "-lpthread", "-lm"]
# The emulation's orders reversed (tests/cuda/cuda_emu.h): the graph's lanes interleaved, each launch's blocks and each
# block's threads from the last to the first. A run under these gives the same bits unless a kernel or the lanes
# race (a missing barrier, fork / join edge or split-K ordering).
SHUFFLED = {"CARVE_EMU_GRAPH_ORDER": "interleave", "CARVE_EMU_BLOCK_ORDER": "reverse",
            "CARVE_EMU_THREAD_ORDER": "reverse"}
IMAGE = {"classify": "bus.jpg"}  # every task: Ultralytics' bus.jpg
STEPS: dict = {}


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (user + system): the measure of the CI budget
    that does not depend on how loaded the machine is."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class step:
    """`with step("name"):` adds the block's wall and CPU time to STEPS[name] (printed at the end: the CI budget)."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.t, self.c = time.time(), cpu_seconds()

    def __exit__(self, *exc):
        wall, cpu = STEPS.get(self.name, (0.0, 0.0))
        STEPS[self.name] = (wall + time.time() - self.t, cpu + cpu_seconds() - self.c)


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    cmd = [str(c) for c in cmd]
    p = subprocess.run(cmd, text=True, capture_output=True, **kw)
    if p.returncode != 0:
        print("$ " + " ".join(cmd))
        sys.stdout.write(p.stdout[-20000:])
        sys.stderr.write(p.stderr[-20000:])
        raise SystemExit(f"cuda_vs_xnnpack: command failed with exit code {p.returncode}")
    return p


def compile_all(jobs: list) -> None:
    """Runs compile commands two at a time (the CI machine has 2 cores)."""
    pending = list(jobs)
    while pending:
        batch, pending = pending[:2], pending[2:]
        procs = [(cmd, subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)) for cmd in batch]
        for cmd, p in procs:
            out = p.communicate()[0]
            if p.returncode != 0:
                print("$ " + " ".join(str(c) for c in cmd) + "\n" + out[-20000:])
                raise SystemExit("cuda_vs_xnnpack: compile failed")


# ---- Runtimes, compiled once ------------------------------------------------------------------


def _digest(files: list, flags: list) -> str:
    h = hashlib.sha256(" ".join(flags).encode())
    for f in files:
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def build_runtime(work: Path, kind: str) -> Path:
    """lib<kind>.a of the runtime files every package of that kind copies; cached by content."""
    host_c = ["carve_rt.c", "carve_isa.c", "carve_epilogue.c", "carve_stem.c", "carve_dwconv.c", "carve_winograd.c",
              "carve_attention.c", "carve_layout.c", "carve_pre.c", "carve_post.c", "carve_nms.c", "carve_mask.c",
              "carve_io.c", "carve_weights.c"]
    if kind == "xnn":
        # carve_pool: the pthreadpool_*; carve_model: the CPU packages' lifecycle (the cuda ones keep their own)
        srcs = [RUNTIME / f for f in host_c + ["carve_xnn.c", "carve_pool.c", "carve_model.c", "carve_model_mask.c"]]
        jobs = lambda out: [[CC, *C_FLAGS, "-c", s, "-o", out / (s.name + ".o")] for s in srcs]  # noqa: E731
        deps = srcs + sorted(RUNTIME.glob("*.h"))
    else:
        cus = sorted(RUNTIME.glob("carve_cuda_*.cu"))
        if not cus:
            raise SystemExit("cuda_vs_xnnpack: no runtime/carve_cuda_*.cu: the device runtime is missing")
        srcs = [RUNTIME / f for f in host_c] + cus
        jobs = lambda out: ([[CC, *C_FLAGS, "-DCARVE_RT_NO_THREADS", "-c", s, "-o", out / (s.name + ".o")]  # noqa: E731
                             for s in srcs if s.suffix == ".c"]
                            + [[CXX, *EMU_FLAGS, "-O2", "-I", RUNTIME, "-c", s, "-o", out / (s.name + ".o")]
                               for s in cus])
        # the emulation's headers: cuda_emu.h and what it includes (cuda_emu_f16.h)
        deps = (srcs + sorted(RUNTIME.glob("*.h")) + sorted(RUNTIME.glob("*.cuh"))
                + sorted(EMU_HEADER.parent.glob("cuda_emu*.h")))
    lib_dir = work / "runtimes" / f"{kind}-{_digest(deps, C_FLAGS + EMU_FLAGS)}"
    lib = lib_dir / f"libcarve_{kind}.a"
    if lib.exists():
        return lib
    lib_dir.parent.mkdir(parents=True, exist_ok=True)
    # One build of a runtime at a time: the tests that ctest -j starts together wait for the first one's library
    # (about a minute of CPU for the emulated runtime) instead of compiling the same files beside it.
    with open(lib_dir.with_name(lib_dir.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if lib.exists():
            return lib
        tmp = lib_dir.with_name(lib_dir.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with step(f"runtime {kind}"):
            compile_all(jobs(tmp))
            run(["ar", "rcs", tmp / lib.name, *sorted(tmp.glob("*.o"))])
        shutil.rmtree(lib_dir, ignore_errors=True)  # a folder without its library (rename needs the name free)
        tmp.rename(lib_dir)
    return lib


def check_runtime_copies(pkg: Path) -> None:
    """The shortcut above is honest only if the package's runtime/ is runtime/ of this repo."""
    for f in sorted((pkg / "runtime").iterdir()):
        if f.read_bytes() != (RUNTIME / f.name).read_bytes():
            raise SystemExit(f"cuda_vs_xnnpack: {f} differs from runtime/{f.name}")


# ---- One variant -----------------------------------------------------------------------------------


def checkpoint(work: Path, model: str) -> Path:
    pt = oracle.checkpoint_dir(work) / f"{model}.pt"
    if not pt.exists():
        pt.parent.mkdir(parents=True, exist_ok=True)
        tmp = pt.with_suffix(f".tmp{os.getpid()}.pt")
        with step("checkpoint"):
            oracle.make_checkpoint(f"{model}.yaml", tmp, seed=0)
        tmp.rename(pt)
    return pt


def generate(model: str, backend: str, pt: Path, imgsz: int, out: Path, *flags) -> None:
    """./carve generate, as a user runs it (flags: more options, e.g. --weights-format file)."""
    with step("generate"):
        run([ROOT / "carve", "generate", ROOT / "manifests" / f"{model}.yaml", "--backend", backend,
             "--weights", pt, "--imgsz", imgsz, "--out", out, "--force", *flags])
    check_runtime_copies(out)


def generate_pair(model: str, pt: Path, imgsz: int, outs: dict, head: str = "e2e") -> None:
    """The packages of several backends from one read of the checkpoint: carve's own pipeline
    (compiler.compile_model, cli.write_package), with the checkpoint reader memoised for the call."""
    sys.path.insert(0, str(ROOT / "generator"))
    from carve import cli, compiler

    real, cache = compiler.read_checkpoint, {}
    compiler.read_checkpoint = lambda path: cache[path] if path in cache else cache.setdefault(path, real(path))
    try:
        with step("generate"):
            for backend, out in outs.items():
                options = {"weights_format": "blob"} if head == "e2e" else {"weights_format": "blob", "head": head}
                r = compiler.compile_model(str(ROOT / "manifests" / f"{model}.yaml"), backend, str(pt), imgsz,
                                           options)
                cli.write_package(r.files, out, True)
    finally:
        compiler.read_checkpoint = real
    for out in outs.values():
        check_runtime_copies(out)


def build_xnnpack(pkg: Path, prefix: str, lib: Path) -> Path:
    b = pkg / "build"
    b.mkdir(exist_ok=True)
    inc = ["-I", pkg, "-I", pkg / "runtime"]
    with step("build xnnpack"):
        compile_all([[CC, *C_FLAGS, *inc, "-c", pkg / f"{prefix}.c", "-o", b / "model.o"],
                     [CC, *C_FLAGS, *inc, "-c", pkg / f"{prefix}_demo.c", "-o", b / "demo.o"],
                     [CC, "-I", pkg, "-c", pkg / f"{prefix}_weights.S", "-o", b / "weights.o"]])
        exe = b / f"{prefix}_demo"
        run([CC, b / "demo.o", b / "model.o", b / "weights.o", lib, *XNN_LIBS, "-o", exe])
    return exe


def build_cuda_emu(pkg: Path, prefix: str, lib: Path) -> Path:
    b = pkg / "build-emu"
    b.mkdir(exist_ok=True)
    inc = ["-I", pkg, "-I", pkg / "runtime"]
    with step("build cuda (emulated)"):
        compile_all([[CXX, *EMU_FLAGS, "-O1", *inc, "-c", pkg / f"{prefix}.cu", "-o", b / "model.o"],
                     [CXX, *EMU_FLAGS, "-O1", *inc, "-c", pkg / f"{prefix}_demo.cu", "-o", b / "demo.o"],
                     [CC, "-I", pkg, "-c", pkg / f"{prefix}_weights.S", "-o", b / "weights.o"]])
        exe = b / f"{prefix}_demo"
        run([CXX, b / "demo.o", b / "model.o", b / "weights.o", lib, "-lstb", "-lpthread", "-lm", "-o", exe])
    return exe


def build_cuda_cmake(pkg: Path, prefix: str) -> Path:
    """The package's own CMake emulation option (-DCARVE_CUDA_EMULATION_HEADER), as a user would build it."""
    b = pkg / "build-cmake-emu"
    with step("build cuda (emulated, package CMake)"):
        run(["cmake", "-S", pkg, "-B", b, "-DCMAKE_BUILD_TYPE=Release", f"-DCARVE_CUDA_EMULATION_HEADER={EMU_HEADER}"])
        run(["cmake", "--build", b, "-j", "2"])
    return b / f"{prefix}_demo"


def same_dumps(a: Path, b: Path) -> list:
    """Files whose contents differ between two dump folders (graph replay vs eager: must be none)."""
    names = sorted(p.name for p in a.glob("*.npy"))
    if names != sorted(p.name for p in b.glob("*.npy")) or not names:
        return ["file lists differ"]
    return [n for n in names if not np.array_equal(np.load(a / n), np.load(b / n), equal_nan=True)]


def variant(args, scale: str, libs: dict) -> tuple:
    model = f"yolo26{scale}{TASKS[args.task]}"
    prefix = model.replace("-", "_")
    imgsz = args.imgsz_large if (args.imgsz_large and scale in "mlx") else args.imgsz
    work = (args.work / "cuda" / f"{model}-{imgsz}{'-nms' if args.head == 'nms' else ''}").resolve()
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    pt = checkpoint(args.work.resolve(), model)
    xpkg, cpkg = work / "xnnpack", work / "cuda"
    generate_pair(model, pt, imgsz, {"xnnpack": xpkg, "cuda": cpkg}, args.head)
    xdemo = build_xnnpack(xpkg, prefix, libs["xnn"])
    cdemo = build_cuda_cmake(cpkg, prefix) if args.cmake else build_cuda_emu(cpkg, prefix, libs["emu"])

    inp = work / "input.npy"
    oracle.make_input(oracle.sample_image(IMAGE.get(args.task, "bus.jpg")), imgsz, inp, task=args.task)
    xd, cd, ce, td = work / "dump-xnnpack", work / "dump-cuda", work / "dump-cuda-eager", work / "dump-torch32"
    ct, tt, cf = work / "dump-cuda-tf32", work / "dump-torch-tf32", work / "dump-cuda-fused"
    ci, cs, cu = work / "dump-cuda-interleaved", work / "dump-cuda-serial-head", work / "dump-cuda-tuned"
    for d in (xd, cd, ce, td, ct, tt, cf, ci, cs, cu):
        shutil.rmtree(d, ignore_errors=True)
    with step("run xnnpack"):
        run([xdemo, "--input", inp, "--dump", xd])
    strict = ["--strict-fp32"]  # the float32 comparison (the package's default is TF32: below)
    with step("run cuda (emulated)"):
        run([cdemo, "--input", inp, "--dump", cd, "--runs", "3", *strict])          # dumped from the graph replay
        run([cdemo, "--input", inp, "--dump", ce, "--no-graph", *strict])
        if not args.cmake:  # (the 640 CMake variant: its build is the point; its head is n's at 96 here)
            run([cdemo, "--input", inp, "--dump", ci, "--runs", "3", *strict], env=dict(os.environ, **SHUFFLED))
        if not args.cmake and scale == "n":  # the serial head is the lanes' code on one stream: once per task
            run([cdemo, "--input", inp, "--dump", cs, "--runs", "3", "--serial-head", *strict])
        if args.tf32:
            run([cdemo, "--input", inp, "--dump", ct, "--runs", "3"])
        if args.fused_conv:
            run([cdemo, "--input", inp, "--dump", cf, "--runs", "3", "--fused-conv"])
        if args.tune:
            run([cdemo, "--input", inp, "--dump", cu, "--runs", "3", "--tune"])
    with step("reference (PyTorch fp32)"):
        oracle.reference_layers(pt, inp, td)
        if args.tf32:
            oracle.reference_layers(pt, inp, tt, tf32=True)
        for d in (td, tt) if args.head == "nms" else ():  # the reference's head is the one2one one: no baseline
            for f in [*d.glob("output*.npy"), *([max(d.glob("layer_*.npy"))] if d.is_dir() else [])]:
                if f.name != "output1.npy":
                    f.unlink()
    with step("compare"):
        print(f"-- {model} imgsz {imgsz}: cuda (emulated, --strict-fp32) vs xnnpack, bound max({args.tol:g}, "
              f"3x PyTorch fp32's)")
        ok = oracle.compare_layers(cd, xd, tol=args.tol, baseline=td, factor=3.0)
        stats = dict(oracle.LAST_STATS)
        diff = same_dumps(cd, ce)
        if diff:
            print(f"FAIL graph replay and eager run differ: {', '.join(diff[:5])}")
            ok = False
        for other, what in ((ci, "the graph replayed interleaved (lanes)"), (cs, "the serial head")):
            lanes_diff = same_dumps(cd, other) if other.exists() else []
            if lanes_diff:
                print(f"FAIL graph replay and {what} differ: {', '.join(lanes_diff[:5])}")
                ok = False
            diff = diff or lanes_diff
        if args.tf32:
            # TF32 (the default): the convolutions' GEMM inputs rounded to a 10-bit mantissa. The bound is
            # measured the same way, from a third implementation with the same rounding: PyTorch fp32 whose
            # groups-1 convolutions multiply TF32-rounded inputs and weights (oracle.use_tf32_convs).
            ref = xd
            if args.head == "nms":
                # The NMS keeps a different set of boxes when TF32 moves scores and boxes across its thresholds
                # (yolo26n at 320: 168 rows against 166), so the head's rows are compared in float32 only.
                ref = work / "dump-xnnpack-layers"
                shutil.rmtree(ref, ignore_errors=True)
                ref.mkdir()
                head = max(xd.glob("layer_*.npy"))
                for f in xd.glob("*.npy"):
                    if f != head and f.name != "output0.npy":
                        (ref / f.name).symlink_to(f)
            print(f"-- {model} imgsz {imgsz}: cuda (emulated, TF32) vs xnnpack, bound max({args.tol:g}, "
                  f"3x PyTorch fp32-with-TF32-convs'){'; the head rows of the NMS left out' if ref != xd else ''}")
            ok_tf32 = oracle.compare_layers(ct, ref, tol=args.tol, baseline=tt, factor=3.0)
            tf32_stats = dict(oracle.LAST_STATS)
            ok &= ok_tf32
        if args.fused_conv:
            print(f"-- {model} imgsz {imgsz}: cuda (emulated, TF32, --fused-conv) vs xnnpack, the TF32 bound"
                  f"{'; the head rows of the NMS left out' if ref != xd else ''}")
            ok &= oracle.compare_layers(cf, ref, tol=args.tol, baseline=tt, factor=3.0)
            launches = {}
            for name, flags in (("cuBLAS path", []), ("fused", ["--fused-conv"])):
                out = run([cdemo, "--input", inp, "--profile", *flags]).stdout
                m = re.search(r"launches per forward: (\d+)", out)
                launches[name] = int(m.group(1)) if m else None
            print(f"launches per forward (CUDA Graph nodes), TF32: cuBLAS path {launches['cuBLAS path']}, "
                  f"fused {launches['fused']}")
            if None in launches.values() or launches["fused"] >= launches["cuBLAS path"]:
                print("FAIL: the fused convolutions do not lower the launch count")
                ok = False
        if args.tune:
            # options.conv_tune (the default on a GPU; the emulation's default is off): create times both paths of
            # each convolution shape and each convolution runs the faster. Whichever it picked, TF32's bound holds.
            print(f"-- {model} imgsz {imgsz}: cuda (emulated, TF32, --tune) vs xnnpack, the TF32 bound"
                  f"{'; the head rows of the NMS left out' if ref != xd else ''}")
            ok &= oracle.compare_layers(cu, ref, tol=args.tol, baseline=tt, factor=3.0)
            timed = {}
            for flags in (["--tune"], []):
                out = run([cdemo, "--input", inp, "--profile", *flags]).stdout
                m = re.search(r"convolutions: (\d+), timed at create: (\d+) on the cuBLAS path, (\d+) on the fused", out)
                timed[bool(flags)] = tuple(int(g) for g in m.groups()) if m else None
            print(f"convolutions timed at create (total, cuBLAS path, fused): --tune {timed[True]}, "
                  f"the emulation's default {timed[False]}")
            if timed[True] is None or timed[True][1] + timed[True][2] == 0 or timed[False] != (timed[True][0], 0, 0):
                print("FAIL: --tune timed no convolution, or the emulation's default timed some")
                ok = False
        # run_image: the uint8 image uploaded, letterboxed (or resized and cropped) on the device, post-processed
        # there and mapped back to image pixels; the same demo JSON as the CPU package's, compared with it.
        image = oracle.sample_image(IMAGE.get(args.task, "bus.jpg"))
        xj, cj = work / "xnnpack.json", work / "cuda.json"
        xj.write_text(run([xdemo, image, "--json"]).stdout)
        cj.write_text(run([cdemo, image, "--json", "--runs", "3", *strict]).stdout)
        print(f"-- {model} imgsz {imgsz}: run_image on {image.name}, cuda (emulated, --strict-fp32) vs xnnpack")
        ok &= oracle.compare_detections(cj, xj)
    worst = max(stats, key=lambda k: stats[k][0])
    base = f"{stats[worst][1]:.2e}" if stats[worst][1] is not None else "-"
    tf32 = ""
    if args.tf32:
        tw = max(tf32_stats, key=lambda k: tf32_stats[k][0])
        tb = f"{tf32_stats[tw][1]:.2e}" if tf32_stats[tw][1] is not None else "-"
        tf32 = f"; TF32 max rel error {tf32_stats[tw][0]:.2e} ({tw}; PyTorch TF32 convs vs xnnpack {tb})"
    line = (f"{model} imgsz {imgsz}: {'PASS' if ok else 'FAIL'}; max rel error vs xnnpack {stats[worst][0]:.2e} "
            f"({worst}; PyTorch fp32 vs xnnpack {base}){tf32}; graph == eager: {not diff}; "
            f"{time.time() - t0:.0f} s")
    print(line, flush=True)
    if ok and not args.keep:
        for d in (xd, cd, ce, td, ct, tt, cf, ci, cs, cu, work / "dump-xnnpack-layers", xpkg / "build", cpkg / "build-emu", cpkg / "build-cmake-emu"):
            shutil.rmtree(d, ignore_errors=True)
        for blob in work.glob("*/*_weights.bin"):
            blob.unlink()
    return ok, line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="detect", choices=tuple(TASKS))
    ap.add_argument("--scales", default="n", help="comma-separated of n,s,m,l,x (default n)")
    ap.add_argument("--imgsz", type=int, default=96, help="input size, a multiple of 32 (default 96)")
    ap.add_argument("--imgsz-large", type=int, help="input size for m, l and x (default: --imgsz)")
    ap.add_argument("--work", required=True, type=Path, help="checkpoints (shared with the oracle) and packages")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--cmake", action="store_true", help="build the cuda package through its own CMakeLists.txt")
    ap.add_argument("--head", default="e2e", choices=("e2e", "nms"), help="the head both packages run")
    ap.add_argument("--keep", action="store_true", help="keep dumps and builds after a pass")
    ap.add_argument("--no-tf32", dest="tf32", action="store_false",
                    help="skip the TF32 comparison (the packages' default math; checked unless this is given)")
    ap.add_argument("--fused-conv", action="store_true",
                    help="also run the TF32 package with --fused-conv (held to the TF32 bound) and compare launch counts")
    ap.add_argument("--tune", action="store_true",
                    help="also run the TF32 package with --tune (options.conv_tune: each convolution's path timed at "
                         "create), held to the TF32 bound")
    args = ap.parse_args()
    if (args.fused_conv or args.tune) and not args.tf32:
        ap.error("--fused-conv and --tune need the TF32 comparison (drop --no-tf32)")
    scales = [s for s in args.scales.split(",") if s]
    if not scales or any(s not in "nsmlx" or len(s) != 1 for s in scales):
        ap.error(f"--scales {args.scales!r}: expected a comma-separated list of n, s, m, l, x")
    t0 = time.time()
    libs = {"xnn": build_runtime(args.work.resolve(), "xnn")}
    if not args.cmake:
        libs["emu"] = build_runtime(args.work.resolve(), "emu")
    results = [variant(args, s, libs) for s in scales]
    print("\n".join(["", "summary:"] + [r[1] for r in results]))
    ckpt = STEPS.get("checkpoint", (0.0, 0.0))
    print("steps (wall / CPU seconds): " + ", ".join(f"{k} {w:.1f} / {c:.1f}" for k, (w, c) in STEPS.items()))
    print(f"total: {time.time() - t0:.0f} s wall, {cpu_seconds():.0f} s CPU; without making checkpoints "
          f"(shared with the oracle tests): {time.time() - t0 - ckpt[0]:.0f} s wall, {cpu_seconds() - ckpt[1]:.0f} s CPU")
    return 0 if all(r[0] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
