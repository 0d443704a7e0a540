#!/usr/bin/env python3
"""Caller-owned memory: builds tests/firmware/no_malloc.c against a generated yolo26n package
(--weights-format file --weights-dtype f16) in a parent CMake project that links carve::yolo26n with the
allocator wrapped (-Wl,--wrap=malloc,...), and runs it (see no_malloc.c for what it checks).

    no_malloc.py --work build/work [--imgsz 160]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fwlib  # noqa: E402
from fwlib import log, run  # noqa: E402

PARENT = """cmake_minimum_required(VERSION 3.16)
project(no_malloc LANGUAGES C)
set(YOLO26N_BUILD_DEMO OFF CACHE BOOL "" FORCE)
add_subdirectory(yolo26n)
add_executable(no_malloc {src})
target_link_libraries(no_malloc PRIVATE carve::yolo26n)
set_target_properties(no_malloc PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_compile_options(no_malloc PRIVATE -Wall -Wextra -Werror)
target_link_options(no_malloc PRIVATE
  -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign,--wrap=free)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--imgsz", type=int, default=160)
    args = ap.parse_args()
    t = fwlib.Timer()
    work = fwlib.fresh(args.work.resolve() / "firmware-no-malloc")
    pt = fwlib.checkpoint(args.work)
    fwlib.generate("yolo26n.yaml", pt, work / "yolo26n", "--imgsz", str(args.imgsz), "--weights-format", "file",
                   "--weights-dtype", "f16")
    (work / "CMakeLists.txt").write_text(PARENT.format(src=Path(__file__).with_name("no_malloc.c")))
    fwlib.cmake_build(work, work / "build")
    p = run([work / "build" / "no_malloc", work / "yolo26n" / "yolo26n.weights"], check=False)
    log(p.stdout.strip())
    if p.stderr:
        log(p.stderr.strip())
    shutil.rmtree(work, ignore_errors=True)
    log(f"no_malloc: exit {p.returncode} ({t})")
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
