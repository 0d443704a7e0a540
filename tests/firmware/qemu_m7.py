#!/usr/bin/env python3
"""A portable package run bare-metal on an emulated Cortex-M7 (qemu-system-arm, machine mps2-an500), against the
same package on the host.

    qemu_m7.py --work build/work [--precision fp32|int8] [--quant auto|pass|hand] [--calib DIR] [--imgsz 320]
               [--image PNG] [--keep]

1. ./carve generate manifests/yolo26n-shapes.yaml --backend portable (the trained demo model,
   assets/yolo26n-shapes.pt) at --imgsz, in --precision. int8: --quant pass, --precision int8 --calib (--calib or,
   by default, CALIB_COUNT images of the demo model's training seed rendered by tools/train_demo.py, cached in
   WORK); --quant hand, tests/int8/handquant.py's graph (every convolution int8, the rest float32; fwm7.py);
   --quant all, the pass's calibration and rewrite with no op kept in float32 (fwm7.generate_all_int8);
   --quant auto (default): the pass when this carve has it, else handquant.
2. The firmware harness (tests/firmware/m7: startup, semihosting, linker script, fw_main.c) around it, built
   twice by tests/firmware/fwm7.py: for the Cortex-M7 (arm-none-eabi-gcc, newlib, -DCARVE_RT_NO_THREADS
   -DCARVE_RT_NO_FILE -DCARVE_RT_NO_HEAP, create_with in static buffers, no allocator linked) and for the host.
   The image (a held-out PNG of the demo model, assets/shapes-3.png) is linked in as RGB bytes and run through
   the package's run_image (letterbox included).
3. Runs: the ELF on qemu (with a timeout), the host build natively, the host build under qemu-x86_64 on a CPU
   without AVX2 / FMA (the runtime's portable kernels, as on the M7), and the package's own demo --json on the
   PNG. Each prints the detections (class, score, box, and each float's bits).
4. Checks, all required:
   a. every run exits 0 with status CARVE_OK, there are detections, and they spread (several classes, distinct
      scores): a flat output would make the comparisons below meaningless;
   b. the host harness = the package's demo --json (classes, count; scores and boxes to the demo's printed
      digits): the harness reads the image and the API as a program using the package does;
   c. Cortex-M7 = host with the portable kernels, bit for bit (every float of every detection);
   d. Cortex-M7 = native host: --quant all and hand (every convolution int8: no SiLU on the FMA path below;
      measured bit-identical on an AVX-512 host) bit for bit; fp32, and the pass's int8 (which may keep
      convolutions in float32), the same classes and count, and |score| <= SCORE_TOL, |box| <= BOX_TOL x the
      image's longer side. Why float convolutions may differ: both builds are ISO C11 (no contraction into FMA)
      and newlib's expf equals glibc's, so with the same kernels they agree bit for bit (c); but natively on an
      x86-64 with AVX-512 or AVX2 + FMA the runtime's SiLU runs its FMA intrinsics, which round once where the
      portable loop rounds twice (runtime/carve_simd.h: 99.96 % of SiLU values bit-equal, the rest within 4 ulp).
      Measured on yolo26n-shapes fp32 at 320: scores differ by <= 1e-6 and boxes by <= 1 ulp; the tolerance is
      1e-4 (the portable tests' per-layer bound, compare_backends.TOL), two orders above that and far below what
      a wrong kernel gives.
Exit 77 (ctest: skipped), with the reason: qemu-system-arm absent (sh tools/install.sh --test installs it), or
--quant pass / all while this carve has no --precision. A missing arm-none-eabi-gcc or qemu-x86_64 fails.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cross  # noqa: E402
import fwlib  # noqa: E402
import fwm7  # noqa: E402
from fwlib import REPO, log, run  # noqa: E402

sys.path.insert(0, str(REPO / "tests" / "portable"))
import compare_backends  # noqa: E402  (the demo build of the portable tests)

SKIP = 77
MANIFEST, NAME, TASK = "yolo26n-shapes.yaml", "yolo26n_shapes", "detect"
CHECKPOINT = REPO / "assets" / "yolo26n-shapes.pt"
SCORE_TOL, BOX_TOL = 1e-4, 1e-4  # fp32, Cortex-M7 vs native host (docstring, 4d); box: x the image's longer side
CALIB_SEED, CALIB_COUNT = 0, 32  # the demo model's training images (tools/train_demo.py TRAIN_SEED)
QEMU_TIMEOUT = 600


def show(label: str, r: fwm7.Result) -> None:
    log(f"-- {label}: exit {r.returncode}, {r.seconds:.1f} s")
    for ln in r.text.rstrip().splitlines():
        log("   " + ln)


def spread(r: fwm7.Result) -> bool:
    classes = {c for c, _ in r.values}
    scores = {v[0] for _, v in r.values}
    return len(r.values) >= 2 and len(classes) >= 2 and len(scores) == len(r.values)


def same_as_demo(r: fwm7.Result, demo: dict) -> bool:
    dets = demo.get("detections") or []
    if len(dets) != len(r.values):
        return False
    for (cls, v), d in zip(r.values, dets):
        # the demo prints %.6f / %.3f: half a unit of the last digit, plus float32 rounding of the value printed
        if cls != d["class_id"] or abs(v[0] - d["score"]) > 0.5e-6 + 1e-7:
            return False
        if any(abs(a - b) > 0.5e-3 + 1e-4 for a, b in zip(v[1:], d["box"])):
            return False
    return True


def within(a: fwm7.Result, b: fwm7.Result, box_tol: float) -> tuple[bool, float, float]:
    """Same classes and count, scores within SCORE_TOL, boxes within box_tol; the largest differences."""
    if len(a.values) != len(b.values) or any(x[0] != y[0] for x, y in zip(a.values, b.values)):
        return False, float("inf"), float("inf")
    ds = max(abs(x[1][0] - y[1][0]) for x, y in zip(a.values, b.values))
    db = max(abs(p - q) for x, y in zip(a.values, b.values) for p, q in zip(x[1][1:], y[1][1:]))
    return ds <= SCORE_TOL and db <= box_tol, ds, db


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--precision", default="fp32", choices=("fp32", "int8"))
    ap.add_argument("--calib", type=Path, help="int8: calibration images (default: rendered, see above)")
    ap.add_argument("--quant", default="auto", choices=("auto", "pass", "all", "hand"),
                    help="int8: the quantization pass (--precision int8 --calib), the pass with no op kept in float32, "
                         "tests/int8/handquant.py's graph, or the pass when this carve has it, else handquant (auto)")
    ap.add_argument("--imgsz", type=int, default=320)
    ap.add_argument("--image", type=Path, default=fwlib.IMAGE)
    ap.add_argument("--keep", action="store_true", help="keep the package and builds in WORK")
    args = ap.parse_args()
    t = fwlib.Timer()
    tag = f"qemu-m7 {args.precision} {args.imgsz}"
    if not fwm7.have(fwm7.QEMU):
        log(f"{tag}: SKIPPED: {fwm7.QEMU} not found (sh tools/install.sh --test installs Debian's qemu-system-arm)")
        return SKIP
    quant = fwm7.quant_mode(args.precision, args.quant)
    if quant in ("pass", "all") and not fwm7.supports_precision():
        log(f"{tag}: SKIPPED: --precision {args.precision} is not in this carve yet (--quant hand: handquant's graph)")
        return SKIP
    for tool in ("arm-none-eabi-gcc", fwm7.QEMU_X86):
        if not fwm7.have(tool):
            log(f"{tag}: {tool} not found (sh tools/install.sh --test installs it)")
            return 1
    if not cross.have_backend("portable"):
        log(f"{tag}: SKIPPED: --backend portable is not in this carve")
        return SKIP
    work = fwlib.fresh(args.work.resolve() / f"firmware-qemu-m7-{args.precision}-{args.imgsz}")
    calib = args.calib or (fwm7.calib_folder(args.work, CALIB_SEED, CALIB_COUNT) if args.precision != "fp32" else None)
    pkg = fwm7.generate(MANIFEST, CHECKPOINT, work / "pkg", args.imgsz, quant, calib)
    width, height = fwm7.write_inputs(pkg, NAME, TASK, args.image)

    elf = fwm7.build_m7(pkg, NAME)
    sizes = fwm7.elf_sections(elf)
    log(f"{elf.name}: .text {sizes.get('.text', 0)}, .rodata {sizes.get('.rodata', 0)}, .weights "
        f"{sizes.get('.weights', 0)} (PSRAM), .image {sizes.get('.image', 0)}, .data {sizes.get('.data', 0)}, "
        f".bss {sizes.get('.bss', 0)}, stack {sizes.get('.stack', 0)} bytes; no allocator linked")
    host = fwm7.build_host(pkg, NAME)
    demo = compare_backends.build(pkg, NAME, "portable")

    m7 = fwm7.run_qemu(elf, QEMU_TIMEOUT)
    show(f"Cortex-M7 on qemu {fwm7.MACHINE}", m7)
    native = fwm7.run_host(host)
    show("host (native)", native)
    portable = fwm7.run_host(host, portable_isa=True)
    show(f"host (portable kernels: {fwm7.QEMU_X86} -cpu qemu64)", portable)
    demo_json = json.loads(run([demo, args.image, "--json"]).stdout)

    ok = True

    def check(good: bool, what: str) -> None:
        nonlocal ok
        log(f"   {'ok  ' if good else 'FAIL'} {what}")
        ok &= good

    how = {"fp32": "", "pass": " (quantization pass)", "all": " (quantization pass, no op kept in float32)",
           "hand": " (tests/int8/handquant.py's graph)"}[quant]
    log(f"== {NAME} {args.precision}{how} at {args.imgsz} on {args.image.name} ({width}x{height})")
    for label, r in (("Cortex-M7", m7), ("host", native), ("host, portable kernels", portable)):
        check(r.returncode == 0 and r.status == 0 and r.count == len(r.values) > 0,
              f"{label}: exit 0, status CARVE_OK, {r.count} detections")
    check(spread(native), "the detections spread (several classes, distinct scores)")
    check(same_as_demo(native, demo_json), f"host harness = the package's demo --json ({len(demo_json['detections'])} "
          "detections; to its printed digits)")
    check(m7.header == native.header, "same model, input and image in the header lines")
    check(m7.records == portable.records, "Cortex-M7 = host with the portable kernels, bit for bit")
    if quant in ("hand", "all"):
        check(m7.records == native.records, "Cortex-M7 = native host, bit for bit (int8, every convolution int8)")
    else:
        box_tol = BOX_TOL * max(width, height)
        good, ds, db = within(m7, native, box_tol)
        exact = m7.records == native.records
        check(good, f"Cortex-M7 vs native host: same classes and count; max |score| diff {ds:.2e} <= {SCORE_TOL:g}, "
              f"max |box| diff {db:.2e} px <= {box_tol:g} ({'bit for bit' if exact else 'not bit for bit'})")
    log(f"   stack: {m7.stack_used} of {m7.stack_size} bytes used on the Cortex-M7")
    log(f"   wall time: qemu-system-arm {m7.seconds:.1f} s, host {native.seconds:.2f} s, "
        f"qemu-x86_64 {portable.seconds:.1f} s")
    if ok and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    log(f"{tag}: {'PASS' if ok else 'FAIL (files kept in ' + str(work) + ')'} ({t})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
