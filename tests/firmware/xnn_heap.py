#!/usr/bin/env python3
"""xnnpack create_with with XNNPACK's memory in the caller's xnn_heap: generates yolo26n (detect, 320) and
yolo26n-seg / -pose / -obb / -cls at reduced sizes with --backend xnnpack, builds tests/firmware/xnn_heap.c
against each (one parent CMake project, add_subdirectory + carve::<name>; the test program interposes
malloc & co. for the whole process) and runs it; yolo26n also with --foreign (XNNPACK initialized first by
other code). See xnn_heap.c for the checks; each line is printed, with the heap use / bound ratio.

    xnn_heap.py --work build/work [--only yolo26n-seg] [--variant yolo26m-pose=320 ...]

--variant runs other manifests / sizes instead (not in CI: any scale, checkpoints made and cached as usual).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fwlib  # noqa: E402
from fwlib import log, run  # noqa: E402

# manifest stem -> --imgsz (detect at the size of docs/firmware.md's table, the other tasks reduced)
VARIANTS = {"yolo26n": 320, "yolo26n-seg": 160, "yolo26n-pose": 160, "yolo26n-obb": 160, "yolo26n-cls": 96}

PARENT_HEAD = """cmake_minimum_required(VERSION 3.16)
project(xnn_heap LANGUAGES C)
"""
PARENT_MODEL = """set({upper}_BUILD_DEMO OFF CACHE BOOL "" FORCE)
add_subdirectory({pkg} {ident}-pkg)
add_executable(xnn_heap_{ident} {src})
target_include_directories(xnn_heap_{ident} PRIVATE {shim})
target_link_libraries(xnn_heap_{ident} PRIVATE carve::{ident})
set_target_properties(xnn_heap_{ident} PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_compile_options(xnn_heap_{ident} PRIVATE -Wall -Wextra -Werror)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--only", choices=sorted(VARIANTS), action="append", help="these variants only")
    ap.add_argument("--variant", action="append", default=[], metavar="STEM=IMGSZ",
                    help="a manifest stem and --imgsz to run instead, e.g. yolo26s-seg=320")
    args = ap.parse_args()
    variants = {k: VARIANTS[k] for k in args.only or VARIANTS}
    if args.variant:
        variants = {}
        for v in args.variant:
            stem, _, size = v.partition("=")
            if not size.isdigit() or not (fwlib.REPO / "manifests" / f"{stem}.yaml").exists():
                ap.error(f"--variant {v}: expected <manifest stem>=<imgsz>, e.g. yolo26s-seg=320")
            variants[stem] = int(size)
    t = fwlib.Timer()
    work = fwlib.fresh(args.work.resolve() / "firmware-xnn-heap")
    src = Path(__file__).with_name("xnn_heap.c")
    cmake = [PARENT_HEAD]
    idents = []
    for stem, imgsz in variants.items():
        ident = stem.replace("-", "_")
        pt = fwlib.checkpoint(args.work, f"{stem}.yaml")
        pkg = fwlib.generate(f"{stem}.yaml", pt, work / stem, "--imgsz", str(imgsz))
        shim = work / f"shim-{ident}"
        shim.mkdir()
        (shim / "xnn_heap_model.h").write_text(
            f'#include "{ident}.h"\n#define M(x) {ident}##x\n#define MU(x) {ident.upper()}##x\n'
            f'#define M_NAME "{ident.upper()}"\n#define M_CLASSIFY {int(stem.endswith("-cls"))}\n')
        cmake.append(PARENT_MODEL.format(upper=ident.upper(), pkg=pkg, ident=ident, src=src, shim=shim))
        idents.append((stem, ident))
    (work / "CMakeLists.txt").write_text("\n".join(cmake))
    fwlib.cmake_build(work, work / "build")
    failed = []
    for stem, ident in idents:
        exe = work / "build" / f"xnn_heap_{ident}"
        for extra in ([[], ["--foreign"]] if stem == idents[0][0] else [[]]):
            p = run([exe, *extra], check=False)
            log(p.stdout.strip())
            if p.stderr:
                log(p.stderr.strip())
            if p.returncode != 0:
                failed.append(" ".join([stem, *extra]))
    shutil.rmtree(work, ignore_errors=True)
    log(f"xnn_heap: {'FAIL: ' + ', '.join(failed) if failed else 'PASS'} ({t})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
