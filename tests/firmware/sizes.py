#!/usr/bin/env python3
"""Prints the memory table of docs/firmware.md: code and data sizes of generated packages, per target.

    sizes.py --work build/work [--target host|aarch64|cortex-m7 ...]
    sizes.py --work build/work --firmware [--imgsz 160 256 320] [--precision fp32 int8]

For each (model, input size, backend, weight options): ./carve generate, compile every package source
(-O2, not the demo) with the target's compiler into objects (cortex-m7: linked with cross.py's minimal
main, newlib, --specs=nosys.specs), then `<prefix>size -A`: .text, .rodata (all .rodata*), .data, .bss summed
over the objects (or of the ELF), and the arena, scratch and context constants of <name>.h (the RAM a
context needs besides the stack). A Markdown table on stdout. Not a test: a measurement for the docs.

--firmware: the flash and RAM of yolo26n and yolo26n-cls (random-weight checkpoints, tools/oracle.py) per input
size and precision, as the bare-metal Cortex-M7 image of tests/firmware/qemu_m7.py links them (fwm7.py: portable,
-O2, --gc-sections, create_with in static buffers, run_image; int8: the quantization pass's calibration (images of
tools/train_demo.py's renderer: meaningless ranges for random weights, the package's real sizes) and rewrite with
no op kept in float32 (fwm7.generate_all_int8: its sensitivity analysis would keep nearly every op of a random
network in float32, which a trained model's package does not); while this carve has no --precision,
tests/int8/handquant.py's graph instead, labelled so: every convolution int8, the rest float32, so its arena is not
the pass's): flash = the weight
blob + .text + .rodata + .data + the vector table (not the harness's input image); RAM = arena + scratch + context
(<name>.h) + the stack the run used, measured on qemu's mps2-an500 (painted at reset, the deepest word
overwritten; needs qemu-system-arm, else "-"). Detect runs on assets/shapes-3.png (letterboxed by run_image);
classify on its centre square resized to the input size (a camera region of interest), so that run_image's
resize scratch is only its coefficient tables.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cross  # noqa: E402
import fwlib  # noqa: E402
import fwm7  # noqa: E402
from fwlib import REPO, run  # noqa: E402

TARGETS = {"host": ("cc", "size", []), "aarch64": ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-size", []),
           "cortex-m7": ("arm-none-eabi-gcc", "arm-none-eabi-size", [*cross.M7, *cross.M7_DEFINES])}
VARIANTS = [("yolo26n-cls.yaml", "yolo26n_cls", "classify", "224"), ("yolo26n.yaml", "yolo26n", "detect", "320")]
OPTIONS = [("blob", "f32"), ("blob", "f16"), ("file", "f32"), ("file", "f16")]


def sections(size_tool: str, files: list) -> dict:
    out = {"text": 0, "rodata": 0, "data": 0, "bss": 0}
    for f in files:
        for ln in run([size_tool, "-A", f]).stdout.splitlines():
            m = re.match(r"^(\.\S+)\s+(\d+)", ln)
            if not m:
                continue
            sec, n = m.group(1), int(m.group(2))
            key = ("text" if sec.startswith(".text") else "rodata" if sec.startswith(".rodata") else
                   "data" if sec.startswith(".data") else "bss" if sec.startswith(".bss") else None)
            if key:
                out[key] += n
    return out


FW_MODELS = [("yolo26n.yaml", "detect"), ("yolo26n-cls.yaml", "classify")]


def firmware_image(work: Path, task: str, imgsz: int) -> Path:
    """Detect: the sample PNG; classify: its centre square resized to imgsz x imgsz (a PNG in work)."""
    if task != "classify":
        return fwlib.IMAGE
    import cv2
    img = cv2.imread(str(fwlib.IMAGE), cv2.IMREAD_COLOR)
    h, w = img.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    out = work / f"classify-{imgsz}.png"
    square = img[top:top + side, left:left + side]
    cv2.imwrite(str(out), cv2.resize(square, (imgsz, imgsz), interpolation=cv2.INTER_AREA))
    return out


def firmware(args) -> int:
    """The --firmware table (module docstring)."""
    work = fwlib.fresh(args.work.resolve() / "firmware-sizes-m7")
    can_run = fwm7.have(fwm7.QEMU)
    calib = fwm7.calib_folder(args.work) if "int8" in args.precision else None
    rows, ok = [], True
    for manifest, task in FW_MODELS:
        pt = fwlib.checkpoint(args.work, manifest)
        name = fwm7.c_name(manifest[:-len(".yaml")])
        for imgsz in args.imgsz:
            for precision in args.precision:
                pkg = work / f"{name}-{imgsz}-{precision}"
                quant = fwm7.quant_mode(precision)
                quant = "all" if quant == "pass" else quant  # random weights: see the module docstring
                if quant == "hand" and task == "classify":
                    fwlib.log(f"{name} {imgsz} int8: no row (handquant's calibration, tests/generator/irsim.py, has "
                              "no global_avgpool; the quantization pass will have it)")
                    continue
                fwm7.generate(manifest, pt, pkg, imgsz, quant, calib)
                image = firmware_image(work, task, imgsz)
                scratch = None
                if task == "classify":
                    w, h = fwm7.write_inputs(pkg, name, task, image)  # its size first
                    scratch = fwm7.classify_image_scratch(pkg, w, h, imgsz)
                fwm7.write_inputs(pkg, name, task, image, scratch)
                elf = fwm7.build_m7(pkg, name)
                sec = fwm7.elf_sections(elf)
                hdr = (pkg / f"{name}.h").read_text()
                const = {k: int(v) for k, v in re.findall(rf"#define {name.upper()}_(\w+_BYTES) (\d+)u", hdr)}
                stack = "-"
                if can_run:
                    r = fwm7.run_qemu(elf)
                    if r.returncode != 0 or r.status != 0:
                        fwlib.log(r.text)
                        fwlib.log(f"sizes.py --firmware: {name} {imgsz} {precision}: the Cortex-M7 run failed")
                        ok = False
                    stack = r.stack_used
                code = sec.get(".text", 0)
                other = sum(sec.get(k, 0) for k in (".vectors", ".rodata", ".ARM.exidx", ".ARM.extab", ".data"))
                weights = sec.get(".weights", 0)
                ram = const["ARENA_BYTES"] + const["SCRATCH_BYTES"] + const["CONTEXT_BYTES"]
                label = {"fp32": "fp32", "all": "int8", "hand": "int8 (handquant)"}[quant]
                rows.append((f"{manifest[:-len('.yaml')]} {imgsz}", label, weights, code, other,
                             weights + code + other, const["ARENA_BYTES"], const["SCRATCH_BYTES"],
                             const["CONTEXT_BYTES"], stack, ram + (stack if stack != "-" else 0),
                             sec.get(".data", 0) + sec.get(".bss", 0)))
                shutil.rmtree(pkg, ignore_errors=True)
    print("| model | precision | weights | .text | .rodata + .data | flash | arena | scratch | context | stack "
          "| RAM | .data + .bss |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| " + " | ".join(str(v) for v in r) + " |")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--target", nargs="+", default=["host"], choices=tuple(TARGETS))
    ap.add_argument("--backend", default="xnnpack")
    ap.add_argument("--firmware", action="store_true", help="the Cortex-M7 flash / RAM table (see above)")
    ap.add_argument("--imgsz", nargs="+", type=int, default=[160, 256, 320], help="--firmware: input sizes")
    ap.add_argument("--precision", nargs="+", default=["fp32", "int8"], choices=("fp32", "int8"),
                    help="--firmware: precisions")
    args = ap.parse_args()
    if args.firmware:
        return firmware(args)
    work = fwlib.fresh(args.work.resolve() / "firmware-sizes")
    rows = []
    for target in args.target:
        cc, size_tool, flags = TARGETS[target]
        link = target == "cortex-m7"
        for manifest, name, task, imgsz in VARIANTS:
            pt = fwlib.checkpoint(args.work, manifest)
            for fmt, dtype in OPTIONS:
                pkg = work / f"{target}-{name}-{fmt}-{dtype}"
                run([fwlib.CARVE, "generate", REPO / "manifests" / manifest, "--backend", args.backend, "--weights", pt,
                     "--out", pkg, "--imgsz", imgsz, "--weights-format", fmt, "--weights-dtype", dtype])
                extra = list(flags)
                if args.backend == "xnnpack" and target != "host":
                    inc = work / "include"
                    inc.mkdir(exist_ok=True)
                    for h in ("xnnpack.h", "pthreadpool.h"):
                        (inc / h).write_bytes((Path("/usr/include") / h).read_bytes())
                    extra.append(f"-I{inc}")
                elf = cross.build(pkg, name, task, cc, extra, ["--specs=nosys.specs", "-lm"], link)
                objs = [elf] if elf else sorted(p for p in (pkg / "obj").glob("*.o") if p.name != "cross_main.c.o")
                s = sections(size_tool, objs)
                hdr = (pkg / f"{name}.h").read_text()
                const = {k: int(v) for k, v in re.findall(rf"#define {name.upper()}_(\w+_BYTES) (\d+)u", hdr)}
                file_bytes = const.get("WEIGHTS_FILE_BYTES", 0)
                rows.append((target, f"{name} {imgsz}", args.backend, f"{fmt} {dtype}", s["text"], s["rodata"], s["data"],
                             s["bss"], const["ARENA_BYTES"], const["SCRATCH_BYTES"], const["CONTEXT_BYTES"],
                             const["WIDE_WEIGHT_BYTES"], file_bytes))
    print("| target | model | backend | weights | .text | .rodata | .data | .bss | arena | scratch | context "
          "| widened weights | weights file |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| " + " | ".join(str(v) for v in r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
