#!/usr/bin/env python3
"""nvcc builds of generated cuda packages: one per task, for every GPU architecture, warnings as errors.

    nvcc_packages.py --work build/work [--tasks detect,segment,pose,obb,classify] [--archs 75,80,86,89,90]
                     [--options detect:file:f16,classify:c-array:f16,segment:file:f32,detect:blob:f32:nms,
                                detect:blob:f16:e2e:fp16,...]

For each task, yolo26n of that task (checkpoint from tools/oracle.py, cached in WORK/checkpoints-r<recipe>/ as the
oracle tests do) is generated for ``--backend cuda`` at --imgsz 64 (blob, f32), and so is each
``task:format:dtype[:head[:precision]]`` of --options (the weights file and f16 code paths: ``--weights-format
file``, ``--weights-dtype f16``, and create_with, which every package has; ``--head nms``; ``--precision fp16``,
the half-precision packages of runtime/carve_cuda_f16.cu); its ``<name>.cu`` and
``<name>_demo.cu`` are compiled by nvcc for sm_75, sm_80, sm_86, sm_89 and sm_90 in one invocation each
(``-gencode arch=compute_XX,code=sm_XX``), with ``-Werror all-warnings`` and the host compiler's
``-Wall -Wextra -Werror`` - the flags of the package's CMakeLists.txt. The device runtime's own .cu files
are compiled by the runtime's tests (tests/cuda/tests.cmake); this checks the generated code.

Exit status 77 (ctest: skipped) with a message when nvcc is not installed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests" / "cuda"))

import cuda_vs_xnnpack as cvx  # noqa: E402

SKIP = 77


def find_nvcc() -> str | None:
    return shutil.which("nvcc") or next((str(p) for p in (Path("/usr/local/cuda/bin/nvcc"),) if p.exists()), None)


def parse_variant(v: str) -> tuple:
    """task:format:dtype[:head][:precision][:bN] -> (task, format, dtype, head, precision, batch): head e2e,
    precision fp32 and batch 1 by default; a field bN (b2, b32) is --batch N, fp32 / fp16 the precision."""
    parts = v.split(":")
    batch = next((p[1:] for p in parts[3:] if p[:1] == "b" and p[1:].isdigit()), "1")
    precision = next((p for p in parts[3:] if p in ("fp32", "fp16")), "fp32")
    rest = [p for p in parts[3:] if not (p[:1] == "b" and p[1:].isdigit()) and p not in ("fp32", "fp16")]
    return (*parts[:3], rest[0] if rest else "e2e", precision, batch)


def kernels_in(src: Path, dirs: list) -> list:
    """The files among src and the headers it includes (\"...\", transitively, found in dirs) that define a kernel
    (__global__): none for a generated package, which is why `make test` compiles packages for one architecture."""
    seen, todo, found = set(), [src], []
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        text = f.read_text(errors="replace")
        if "__global__" in text:
            found.append(f.name)
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            todo += [d / inc for d in dirs if (d / inc).is_file()][:1]
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--tasks", default="detect,segment,pose,obb,classify")
    ap.add_argument("--archs", default="75,80,86,89,90")
    ap.add_argument("--options", default="detect:file:f16,classify:c-array:f16,segment:file:f32,detect:blob:f32:nms,"
                                         "segment:blob:f32:nms,detect:blob:f32:b2,detect:blob:f16:e2e:fp16,"
                                         "pose:file:f16:nms:fp16,obb:c-array:f16:e2e:fp16,detect:blob:f16:e2e:fp16:b2,"
                                         "segment:file:f16:e2e:fp16,classify:blob:f16:e2e:fp16,classify:blob:f32:b2,"
                                         "segment:blob:f16:e2e:fp16:b2,detect:blob:f32:nms:b2,"
                                         "segment:blob:f16:nms:fp16:b2",
                    help="more packages, each task:weights-format:weights-dtype[:head][:precision][:bN] ('' for "
                         "none); a --batch N package (bN) also compiles tests/cuda/batch_main.cu (classify: batch_classify_main.cu, "
                         "segment: batch_segment_main.cu) against it")
    ap.add_argument("--option-archs", default=None,
                    help="the architectures of the --options packages (default: --archs; `make test` compiles them "
                         "for the newest only, `make test-full` for all)")
    ap.add_argument("--nvcc", default=None, help="nvcc to use (default: PATH, then /usr/local/cuda/bin)")
    args = ap.parse_args()
    nvcc = args.nvcc or find_nvcc()
    if not nvcc:
        print("nvcc_packages: SKIPPED: nvcc not found (install the CUDA toolkit to compile the generated .cu files)")
        return SKIP
    def flags_for(archs: str) -> list:
        return ["-std=c++17", "-O2", "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror",
                "-DCARVE_RT_NO_THREADS", *[f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs.split(",")]]
    ver = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    print(f"nvcc: {nvcc} ({ver}); architectures sm_{', sm_'.join(args.archs.split(','))}"
          + (f" (the --options packages: sm_{', sm_'.join(args.option_archs.split(','))})" if args.option_archs else ""))
    ok = True
    variants = [(task, "blob", "f32", "e2e", "fp32", "1") for task in args.tasks.split(",") if task]
    first_option = len(variants)
    variants += [parse_variant(v) for v in args.options.split(",") if v]
    for i, (task, fmt, dtype, head, precision, batch) in enumerate(variants):
        archs = args.option_archs if i >= first_option and args.option_archs else args.archs
        flags = flags_for(archs)
        if task not in cvx.TASKS or fmt not in ("blob", "c-array", "file") or dtype not in ("f32", "f16") or \
                head not in ("e2e", "nms") or not batch.isdigit():
            ap.error(f"unknown variant {task}:{fmt}:{dtype}:{head}:{precision}:b{batch}")
        model = f"yolo26n{cvx.TASKS[task]}"
        prefix = model.replace("-", "_")
        t0 = time.time()
        pt = cvx.checkpoint(args.work.resolve(), model)
        pkg = (args.work / "cuda-nvcc" / f"{model}-{fmt}-{dtype}-{head}-{precision}-b{batch}").resolve()
        cvx.generate(model, "cuda", pt, 64, pkg, "--weights-format", fmt, "--weights-dtype", dtype,
                     *(["--head", head] if head != "e2e" else []),
                     *(["--precision", precision] if precision != "fp32" else []), "--batch", batch)
        objs = pkg / "build-nvcc"
        objs.mkdir(exist_ok=True)
        sources = [pkg / f"{prefix}.cu", pkg / f"{prefix}_demo.cu"]
        if batch != "1":  # the batch API's test program of the task
            main = {"classify": "batch_classify_main.cu", "segment": "batch_segment_main.cu"}.get(task, "batch_main.cu")
            sources.append(Path(__file__).resolve().parent / main)
        for src in sources:
            kernels = kernels_in(src, [pkg, pkg / "runtime"]) if "," not in archs and src.parent == pkg else []
            if kernels:
                print(f"{src.name} defines or includes kernels ({', '.join(kernels)}): compile the packages for "
                      f"every architecture (--archs / --option-archs), not one")
                ok = False
            cmd = [nvcc, *flags, "-I", pkg, "-I", pkg / "runtime", "-c", src, "-o", objs / (src.name + ".o")]
            p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
            if p.returncode != 0 or p.stderr.strip():
                print("$ " + " ".join(str(c) for c in cmd) + "\n" + p.stdout + p.stderr)
                ok = False
        print(f"{model} ({fmt}, {dtype}, {head}, {precision}, batch {batch}): {'OK' if ok else 'FAIL'} "
              f"({time.time() - t0:.0f} s)", flush=True)
        if ok:
            shutil.rmtree(pkg)
    print(f"nvcc_packages: {'OK' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
