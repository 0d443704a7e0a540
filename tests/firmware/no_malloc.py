#!/usr/bin/env python3
"""Caller-owned memory: builds tests/firmware/no_malloc.c against a generated package in a parent CMake project that
links carve::<name> with the allocator wrapped (-Wl,--wrap=malloc,...), and runs it (see no_malloc.c for what it
checks).

    no_malloc.py --work build/work [--imgsz 160]            yolo26n, xnnpack, --weights-format file --weights-dtype f16
    no_malloc.py --work build/work --int8 portable           the int8 demo model (--precision int8), imgsz 128: the
                                                             shared package of tests/int8/int8pkg.py (--int8 xnnpack:
                                                             the xnnpack one, generated on first use)
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "int8")]
import fwlib  # noqa: E402
from fwlib import log, run  # noqa: E402

PARENT = """cmake_minimum_required(VERSION 3.16)
project(no_malloc LANGUAGES C ASM)
set({upper}_BUILD_DEMO OFF CACHE BOOL "" FORCE)
add_subdirectory({pkg} pkg)
add_executable(no_malloc {src})
target_link_libraries(no_malloc PRIVATE carve::{name})
target_compile_definitions(no_malloc PRIVATE NM={name} NM_UPPER={upper} NM_HEADER="{name}.h" {defs})
set_target_properties(no_malloc PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_compile_options(no_malloc PRIVATE -Wall -Wextra -Werror)
target_link_options(no_malloc PRIVATE
  -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign,--wrap=free)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--imgsz", type=int, default=None, help="default: 160 (yolo26n), 128 (--int8)")
    ap.add_argument("--int8", choices=("portable", "xnnpack"), help="the int8 package of this backend instead")
    args = ap.parse_args()
    t = fwlib.Timer()
    if args.int8:
        import int8pkg
        work = fwlib.fresh(args.work.resolve() / f"firmware-no-malloc-int8-{args.int8}")
        pkg = int8pkg.package(args.work, args.int8, args.imgsz or int8pkg.IMGSZ)
        name, argv = int8pkg.PREFIX, []
        defs = "NM_XNN_HEAP" if args.int8 == "xnnpack" else ""
    else:
        work = fwlib.fresh(args.work.resolve() / "firmware-no-malloc")
        pt = fwlib.checkpoint(args.work)
        pkg = fwlib.generate("yolo26n.yaml", pt, work / "yolo26n", "--imgsz", str(args.imgsz or 160),
                             "--weights-format", "file", "--weights-dtype", "f16")
        name, argv = "yolo26n", [pkg / "yolo26n.weights"]
        defs = "NM_XNN_HEAP NM_WEIGHTS_FILE"
    (work / "CMakeLists.txt").write_text(PARENT.format(pkg=pkg, name=name, upper=name.upper(), defs=defs,
                                                       src=HERE / "no_malloc.c"))
    fwlib.cmake_build(work, work / "build")
    p = run([work / "build" / "no_malloc", *argv], check=False)
    log(p.stdout.strip())
    if p.stderr:
        log(p.stderr.strip())
    shutil.rmtree(work, ignore_errors=True)
    log(f"no_malloc{' (int8 ' + args.int8 + ')' if args.int8 else ''}: exit {p.returncode} ({t})")
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
