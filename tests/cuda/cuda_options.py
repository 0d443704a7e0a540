#!/usr/bin/env python3
"""The cuda backend's package options without a GPU: --weights-format file, --weights-dtype f16 and
caller-owned memory (<name>_create_with), built on the host with the emulation header.

    cuda_options.py --work build/work [--imgsz 64] [--keep]

yolo26n (random Ultralytics weights, realistic BN statistics: tools/oracle.py, cached in WORK/checkpoints-r<recipe>/)
generated for --backend cuda four times: blob f32 (the reference), file f32, c-array f16 and file f16. Each
package's ``<name>.cu`` and ``<name>_demo.cu`` are built as C++ with tests/cuda/cuda_emu.h, with the device
runtime compiled once (cuda_vs_xnnpack.build_runtime). Then:

1. weights file: the file f32 package's every layer dump and output (demo --input --dump --runs 3: the
   output from a CUDA Graph replay) is bit-identical to the blob f32 package's (same weights, same kernels),
   and the file f16 package's to the c-array f16 package's;
2. f16: the checkpoint holds float16 (as Ultralytics saves them): the c-array f16 package's every layer dump
   and output is bit-identical to the blob f32 package's (its weights rebuilt on the host by
   carve_weights_expand, in chunks, and uploaded), and run_image gives the same detections;
3. create_with: each package's demo with --caller-memory (its own stream, cuBLAS handle and cudaMalloc'ed
   buffers) gives dumps bit-identical to create's; run_image on bus.jpg likewise gives the same detections;
4. tests/cuda/options_main.cu, linked against each file package with the allocator wrapped
   (-Wl,--wrap=malloc,...) and the emulator's cudaMalloc / cudaMallocHost / cublasCreate counters: damaged
   files each give their status, create_with and the runs allocate nothing (see that file);
5. the other tasks, yolo26n-seg (transposed conv, masks) and yolo26n-cls (the classification
   pre-processing; --extra adds more, e.g. yolo26n-pose,yolo26n-obb,yolo26x-seg), generated with --weights-format
   file --weights-dtype f16: create_with (--caller-memory) gives the same dumps and run_image JSON on
   bus.jpg as create, and the generator's compile-time device scratch constant equals the runtime's
   <name>_device_scratch_bytes(), as options_main.cu checks both for detect;
6. the generator's mirror of the attention's scratch (backends/cuda.py _attention_scratch_floats, which
   device_scratch_bytes takes at the package's --batch) equals the runtime's carve_cu_attention_scratch_floats
   over batches 1 to 40 (per image and per head), 1 to 8 heads and a few sizes (a small program linked with the
   runtime).

A failure keeps the work folder; a pass deletes it (the checkpoints stay cached).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests" / "cuda"))
sys.path.insert(0, str(ROOT / "tests" / "firmware"))

import numpy as np  # noqa: E402

import cuda_vs_xnnpack as cvx  # noqa: E402
import oracle  # noqa: E402

HERE = Path(__file__).resolve().parent
VARIANTS = {"blob-f32": ("blob", "f32"), "file-f32": ("file", "f32"), "c-array-f16": ("c-array", "f16"),
            "file-f16": ("file", "f16")}
WRAP = "-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign,--wrap=free"
SCRATCH_CHECK = r"""
#include <cstdio>
#include MODEL_HEADER
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
int main() {
  const size_t got = CAT(MODEL, _device_scratch_bytes)(CAT(UPPER, _MAX_IMAGE_W), CAT(UPPER, _MAX_IMAGE_H));
  std::printf("%zu %u\n", got, (unsigned)CAT(UPPER, _DEVICE_SCRATCH_BYTES));
  return got == CAT(UPPER, _DEVICE_SCRATCH_BYTES) ? 0 : 1;
}
"""


ATTENTION_SCRATCH = r"""
#include <cstdio>
#include "carve_cuda.h"
int main() {
  for (unsigned batch = 1; batch <= 40; batch++)
    for (unsigned heads = 1; heads <= 8; heads++)
      for (unsigned n : {1u, 9u, 400u, 1600u})
        std::printf("%u %u %u %zu\n", batch, n, heads, carve_cu_attention_scratch_floats(batch, n, heads));
  return 0;
}
"""


def attention_scratch(work: Path, lib: Path) -> bool:
    """Step 6: backends/cuda.py's _attention_scratch_floats against carve_cu_attention_scratch_floats."""
    sys.path.insert(0, str(ROOT / "generator"))
    from carve.backends import cuda as cuda_backend
    src = work / "attention_scratch.cu"
    src.write_text(ATTENTION_SCRATCH)
    exe = work / "attention_scratch"
    with cvx.step("build cuda (emulated)"):
        cvx.run([cvx.CXX, *cvx.EMU_FLAGS, "-I", cvx.RUNTIME, "-c", src, "-o", src.with_suffix(".o")])
        cvx.run([cvx.CXX, src.with_suffix(".o"), lib, "-lpthread", "-lm", "-o", exe])
    bad, rows = [], cvx.run([exe]).stdout.split("\n")
    for line in filter(None, rows):
        batch, n, heads, floats = map(int, line.split())
        want = cuda_backend._attention_scratch_floats({"n": n, "heads": heads}, batch)
        if want != floats:
            bad.append(f"batch {batch} n {n} heads {heads}: runtime {floats}, generator {want}")
    return check(len(rows) > 1000 and not bad, f"attention scratch: the generator's formula == the runtime's at "
                 f"{len(rows) - 1} (batch, n, heads)" + (f" (differ: {'; '.join(bad[:3])})" if bad else ""))


def generate(models: dict, imgsz: int) -> None:
    """The packages from one read of each checkpoint: carve's own pipeline (compiler.compile_model,
    cli.write_package), as cuda_vs_xnnpack.generate_pair does."""
    sys.path.insert(0, str(ROOT / "generator"))
    from carve import cli, compiler

    real, cache = compiler.read_checkpoint, {}
    compiler.read_checkpoint = lambda path: cache[path] if path in cache else cache.setdefault(path, real(path))
    try:
        with cvx.step("generate"):
            for out, (model, pt, fmt, dtype) in models.items():
                r = compiler.compile_model(str(ROOT / "manifests" / f"{model}.yaml"), "cuda", str(pt), imgsz,
                                           {"weights_format": fmt, "weights_dtype": dtype})
                cli.write_package(r.files, out, True)
                cvx.check_runtime_copies(out)
    finally:
        compiler.read_checkpoint = real


def build(pkg: Path, prefix: str, lib: Path, extra: list | None = None) -> dict:
    """Objects of the package (model, weights if linked) and its demo, emulated; the demo linked."""
    b = pkg / "build-emu"
    b.mkdir(exist_ok=True)
    inc = ["-I", pkg, "-I", pkg / "runtime"]
    jobs = [[cvx.CXX, *cvx.EMU_FLAGS, "-O1", *inc, "-c", pkg / f"{prefix}.cu", "-o", b / "model.o"]]
    objs = [b / "model.o"]
    if (pkg / f"{prefix}_weights.S").exists():
        jobs.append([cvx.CC, "-I", pkg, "-c", pkg / f"{prefix}_weights.S", "-o", b / "weights.o"])
        objs.append(b / "weights.o")
    elif (pkg / f"{prefix}_weights.c").exists():
        jobs.append([cvx.CC, *cvx.C_FLAGS, "-c", pkg / f"{prefix}_weights.c", "-o", b / "weights.o"])
        objs.append(b / "weights.o")
    jobs.append([cvx.CXX, *cvx.EMU_FLAGS, "-O1", *inc, "-c", pkg / f"{prefix}_demo.cu", "-o", b / "demo.o"])
    jobs += extra or []
    with cvx.step("build cuda (emulated)"):
        cvx.compile_all(jobs)
        exe = b / f"{prefix}_demo"
        cvx.run([cvx.CXX, b / "demo.o", *objs, lib, "-lstb", "-lpthread", "-lm", "-o", exe])
    return {"demo": exe, "objs": objs, "dir": b, "inc": inc}


def same_files(a: Path, b: Path) -> list:
    """Dump files that differ (bit for bit, NaN equal to NaN) between two folders: must be none."""
    return cvx.same_dumps(a, b)


def check(ok: bool, what: str) -> bool:
    print(f"{'ok  ' if ok else 'FAIL'}  {what}", flush=True)
    return ok


def detections(path: Path) -> list:
    return json.loads(path.read_text())["detections"]


def other_task(pkg: Path, name: str, lib: Path, image: Path) -> bool:
    """A file f16 package of another task: --caller-memory dumps and run_image JSON equal create's; the
    header's device scratch constant equals <name>_device_scratch_bytes() (a small program linked with it)."""
    src = pkg / "build-emu" / "scratch_check.cu"
    src.parent.mkdir(exist_ok=True)
    src.write_text(SCRATCH_CHECK)
    defs = [f'-DMODEL_HEADER="{name}.h"', f"-DMODEL={name}", f"-DUPPER={name.upper()}"]
    check_o = src.with_suffix(".o")
    b = build(pkg, name, lib, [[cvx.CXX, *cvx.EMU_FLAGS, *defs, "-I", pkg, "-I", pkg / "runtime", "-c", src,
                                "-o", check_o]])
    with cvx.step("build cuda (emulated)"):
        cvx.run([cvx.CXX, check_o, *b["objs"], lib, "-lpthread", "-lm", "-o", b["dir"] / "scratch_check"])
    p = subprocess.run([str(b["dir"] / "scratch_check")], capture_output=True, text=True)
    got, want = (p.stdout.split() + ["?", "?"])[:2]
    ok = check(p.returncode == 0, f"{name}: device_scratch_bytes(default image) {got} == "
               f"{name.upper()}_DEVICE_SCRATCH_BYTES {want}")
    weights = ["--weights", pkg / f"{name}.weights"]
    task_inp = pkg / "input.npy"
    oracle.make_input(image, int(re.search(rf"#define {name.upper()}_INPUT_H (\d+)",
                                           (pkg / f"{name}.h").read_text()).group(1)),
                      task_inp, task="classify" if name.endswith("_cls") else "detect")
    out = {}
    with cvx.step("run cuda (emulated)"):
        for mode, flags in (("create", []), ("create_with", ["--caller-memory"])):
            cvx.run([b["demo"], "--input", task_inp, "--dump", pkg / f"dump-{mode}", "--runs", "3", *weights, *flags])
            js = json.loads(cvx.run([b["demo"], image, "--json", "--runs", "3", *weights, *flags]).stdout)
            js.pop("timing_ms")
            out[mode] = js
    diff = same_files(pkg / "dump-create_with", pkg / "dump-create")
    ok &= check(not diff and out["create"] == out["create_with"],
                f"{name} (file f16): create_with == create: every layer and output, and run_image on {image.name}"
                + (f" (differ: {', '.join(diff[:4])})" if diff else ""))
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path, help="checkpoints (shared with the oracle) and packages")
    ap.add_argument("--imgsz", type=int, default=64, help="input size, a multiple of 32 (default 64)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder after a pass")
    ap.add_argument("--extra", default="", help="more models for step 5, comma-separated (e.g. yolo26n-pose)")
    args = ap.parse_args()
    t0 = time.time()
    work_root = args.work.resolve()
    work = work_root / "cuda-options"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    others = ["yolo26n-seg", "yolo26n-cls"] + [m for m in args.extra.split(",") if m]
    pts = {m: cvx.checkpoint(work_root, m) for m in ["yolo26n", *others]}
    models = {work / v: ("yolo26n", pts["yolo26n"], fmt, dtype) for v, (fmt, dtype) in VARIANTS.items()}
    for m in others:
        models[work / m] = (m, pts[m], "file", "f16")
    generate(models, args.imgsz)
    lib = cvx.build_runtime(work_root, "emu")
    ok = True

    # the packages, and the allocation-counting harness against each file package
    builds = {}
    for v in VARIANTS:
        pkg = work / v
        extra = []
        if v.startswith("file"):
            extra.append([cvx.CXX, *cvx.EMU_FLAGS, "-O1", "-I", pkg, "-I", pkg / "runtime", "-c",
                          HERE / "options_main.cu", "-o", pkg / "build-emu" / "options.o"])
            (pkg / "build-emu").mkdir(exist_ok=True)
        builds[v] = build(pkg, "yolo26n", lib, extra)

    # 4. the harness: weights file statuses, create_with without allocating
    for v in ("file-f32", "file-f16"):
        b = builds[v]
        exe = b["dir"] / "cuda_options"
        with cvx.step("build cuda (emulated)"):
            cvx.run([cvx.CXX, b["dir"] / "options.o", *b["objs"], lib, WRAP, "-lpthread", "-lm", "-o", exe])
        with cvx.step("run harness"):
            p = subprocess.run([str(exe), str(work / v / "yolo26n.weights")], capture_output=True, text=True)
        print(f"-- tests/cuda/options_main.cu against the {v} package:\n" + p.stdout.rstrip() + p.stderr, flush=True)
        ok &= check(p.returncode == 0, f"options_main ({v}) exit {p.returncode}")

    # 1 + 3. dumps: formats against each other, create_with against create
    inp = work / "input.npy"
    oracle.make_input(oracle.sample_image("bus.jpg"), args.imgsz, inp)
    dumps = {}
    with cvx.step("run cuda (emulated)"):
        for v, b in builds.items():
            weights = ["--weights", work / v / "yolo26n.weights"] if v.startswith("file") else []
            for mode, flags in (("create", []), ("create_with", ["--caller-memory"])):
                d = work / f"dump-{v}-{mode}"
                cvx.run([b["demo"], "--input", inp, "--dump", d, "--runs", "3", *weights, *flags])
                dumps[v, mode] = d
    ok &= check(not same_files(dumps["file-f32", "create"], dumps["blob-f32", "create"]),
                "file f32 == blob f32: every layer and output bit-identical")
    ok &= check(not same_files(dumps["file-f16", "create"], dumps["c-array-f16", "create"]),
                "file f16 == c-array f16: every layer and output bit-identical")
    for v in VARIANTS:
        diff = same_files(dumps[v, "create_with"], dumps[v, "create"])
        ok &= check(not diff, f"{v}: create_with (--caller-memory) == create, every layer and output"
                    + (f" (differ: {', '.join(diff[:4])})" if diff else ""))
    image = oracle.sample_image("bus.jpg")
    for v in ("file-f16", "blob-f32"):
        weights = ["--weights", work / v / "yolo26n.weights"] if v.startswith("file") else []
        js = {}
        for mode, flags in (("create", []), ("create_with", ["--caller-memory"])):
            js[mode] = work / f"{v}-{mode}.json"
            js[mode].write_text(cvx.run([builds[v]["demo"], image, "--json", "--runs", "3", *weights, *flags]).stdout)
        dets = detections(js["create"])
        ok &= check(bool(dets) and dets == detections(js["create_with"]),
                    f"{v}: run_image on {image.name}, create_with == create ({len(dets)} detections)")

    # 2. f16: the checkpoint is float16 (as Ultralytics saves them), so the f16 package rebuilds the f32 package's
    # weights bit for bit (on the host, in chunks) and computes its bits
    diff = same_files(dumps["c-array-f16", "create"], dumps["blob-f32", "create"])
    ok &= check(not diff, "f16 == f32: every layer and output bit-identical"
                + (f" (differ: {', '.join(diff[:4])})" if diff else ""))
    ok &= check(detections(work / "file-f16-create.json") == detections(work / "blob-f32-create.json"),
                f"f16 == f32: run_image on {image.name}, the same detections")

    # 5. the other tasks: create_with against create, and the compile-time device scratch constant
    for m in others:
        ok &= other_task(work / m, m.replace("-", "_"), lib, image)

    # 6. the generator's attention scratch at any batch
    ok &= attention_scratch(work, lib)

    print("steps (wall / CPU seconds): " + ", ".join(f"{k} {w:.1f} / {c:.1f}" for k, (w, c) in cvx.STEPS.items()))
    ckpt = cvx.STEPS.get("checkpoint", (0.0, 0.0))
    print(f"cuda_options: {'PASS' if ok else 'FAIL'}; {time.time() - t0:.0f} s wall, {cvx.cpu_seconds():.0f} s CPU; "
          f"without making checkpoints: {time.time() - t0 - ckpt[0]:.0f} s wall, {cvx.cpu_seconds() - ckpt[1]:.0f} s CPU")
    if ok and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
