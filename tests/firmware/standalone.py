#!/usr/bin/env python3
"""A generated package stands alone: copied out of the repository, it builds three ways, and each build's
demo runs once on a real image with the same detections.

    standalone.py --work build/work [--imgsz 160]

1. ./carve generate yolo26n (random Ultralytics weights, cached in WORK/checkpoints): xnnpack with
   --weights-format blob, xnnpack with --weights-format file --weights-dtype f16 at a non-square size, and
   portable with the blob; each is copied to a fresh temporary folder outside the repository.
2. Per package: (a) its own CMakeLists.txt; (b) a parent CMake project that add_subdirectory()s it, links an
   application against the exported target carve::yolo26n and also builds the package's demo; (c) the one
   plain `cc` command of its generated README (taken from the README, so the documented command is the
   tested one).
3. Every demo runs once on assets/shapes-3.png (--json); all three builds give the same detections, and the
   parent application's own run agrees with the demo's raw row count. No build may refer to the repository.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fwlib  # noqa: E402
from fwlib import REPO, log, run  # noqa: E402

APP = r"""// A parent project's application: links carve::yolo26n, runs it on a grey image, prints the row count.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "yolo26n.h"

int main(int argc, char** argv) {
  yolo26n_options opt;
  yolo26n_default_options(&opt);
#ifdef WEIGHTS_FILE
  opt.weights_path = argc > 1 ? argv[1] : WEIGHTS_FILE;
#else
  (void)argc;
  (void)argv;
#endif
  yolo26n* model = NULL;
  carve_status s = yolo26n_create(&opt, &model);
  if (s != CARVE_OK) {
    fprintf(stderr, "app: create: %s\n", carve_status_str(s));
    return 1;
  }
  const size_t n = (size_t)3 * YOLO26N_INPUT_H * YOLO26N_INPUT_W;
  float* x = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = 0.5f;
  size_t num = 0, rows = 0;
  s = yolo26n_run_tensor(model, x, 0.25f, NULL, 0, &num);
  yolo26n_rows(model, &rows);
  printf("app: %s, %zu rows, input %dx%d\n", carve_status_str(s), rows, YOLO26N_INPUT_H, YOLO26N_INPUT_W);
  free(x);
  yolo26n_destroy(model);
  return s == CARVE_OK && rows > 0 ? 0 : 1;
}
"""

PARENT = """cmake_minimum_required(VERSION 3.16)
project(parent_app LANGUAGES C)
add_subdirectory(vendor/yolo26n)
add_executable(app app.c)
target_link_libraries(app PRIVATE carve::yolo26n)
if(DEFINED YOLO26N_WEIGHTS_FILE)
  target_compile_definitions(app PRIVATE WEIGHTS_FILE="${YOLO26N_WEIGHTS_FILE}")
endif()
"""


def readme_cc_command(pkg: Path) -> str:
    m = re.search(r"<!-- carve:cc -->\n```sh\n(.+?)\n```", (pkg / "README.md").read_text(), re.S)
    if not m:
        raise SystemExit(f"{pkg}/README.md: no plain cc command (<!-- carve:cc --> block)")
    return m.group(1).strip()


def no_repo_paths(build: Path) -> None:
    cache = build / "CMakeCache.txt"
    if cache.exists() and str(REPO) in cache.read_text():
        raise SystemExit(f"{cache}: the build refers to the repository ({REPO}); the package is not standalone")


def check_package(pkg_src: Path, tmp: Path, file_weights: bool) -> bool:
    pkg = tmp / "yolo26n"
    shutil.copytree(pkg_src, pkg)
    results = {}
    demo_args = ()
    # (a) its own CMakeLists.txt
    fwlib.cmake_build(pkg, pkg / "build")
    no_repo_paths(pkg / "build")
    results["cmake"] = fwlib.demo_json(pkg / "build" / "yolo26n_demo")
    # (b) add_subdirectory from a parent project, which links the exported target
    parent = tmp / "parent"
    (parent / "vendor").mkdir(parents=True)
    shutil.copytree(pkg_src, parent / "vendor" / "yolo26n")
    (parent / "CMakeLists.txt").write_text(PARENT)
    (parent / "app.c").write_text(APP)
    fwlib.cmake_build(parent, parent / "build")
    no_repo_paths(parent / "build")
    app = run([parent / "build" / "app"])
    log(app.stdout.strip())
    results["add_subdirectory"] = fwlib.demo_json(parent / "build" / "vendor" / "yolo26n" / "yolo26n_demo")
    # (c) the README's plain cc command, run in a third copy
    plain = tmp / "plain"
    shutil.copytree(pkg_src, plain)
    cmd = readme_cc_command(plain)
    log(f"README: {cmd}")
    run(["sh", "-c", cmd], cwd=plain)
    if file_weights:
        demo_args = ("--weights", plain / "yolo26n.weights")
    results["cc"] = fwlib.demo_json(plain / "yolo26n_demo", *demo_args, cwd=plain)
    ok = True
    ref = results["cmake"]
    for how, res in results.items():
        n = len(res.get("detections") or [])
        same = fwlib.same_detections(ref, res)
        log(f"  {how:16} demo: {n} detections{'' if same else '  DIFFERENT from the CMake build'}")
        ok &= same and n > 0
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--imgsz", type=int, default=160)
    args = ap.parse_args()
    t = fwlib.Timer()
    work = args.work.resolve() / "firmware-standalone"
    fwlib.fresh(work)
    pt = fwlib.checkpoint(args.work)
    ok = True
    variants = (("xnnpack-blob-f32", "xnnpack", ("--imgsz", str(args.imgsz)), False),
                ("xnnpack-file-f16", "xnnpack", ("--imgsz", str(args.imgsz), str(args.imgsz + 64), "--weights-format",
                                                 "file", "--weights-dtype", "f16"), True),
                ("portable-blob-f32", "portable", ("--imgsz", str(args.imgsz)), False))
    for name, backend, flags, file_weights in variants:
        src = fwlib.generate("yolo26n.yaml", pt, work / name, *flags, backend=backend)
        with tempfile.TemporaryDirectory(prefix=f"carve-standalone-{name}-") as tmp:
            log(f"-- {name}: copied to {tmp}")
            good = check_package(src, Path(tmp), file_weights)
        log(f"-- {name}: {'PASS' if good else 'FAIL'}")
        ok &= good
    shutil.rmtree(work, ignore_errors=True)
    log(f"standalone: {'PASS' if ok else 'FAIL'} (3 builds x {len(variants)} packages, {t})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
