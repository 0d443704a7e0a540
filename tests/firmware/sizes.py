#!/usr/bin/env python3
"""Prints the memory table of docs/firmware.md: code and data sizes of generated packages, per target.

    sizes.py --work build/work [--target host|aarch64|cortex-m7 ...]

For each (model, input size, backend, weight options): ./carve generate, compile every package source
(-O2, not the demo) with the target's compiler into objects (cortex-m7: linked with cross.py's minimal
main, newlib, --specs=nosys.specs), then `<prefix>size -A`: .text, .rodata (all .rodata*), .data, .bss summed
over the objects (or of the ELF), and the arena, scratch and context constants of <name>.h (the RAM a
context needs besides the stack). A Markdown table on stdout. Not a test: a measurement for the docs.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cross  # noqa: E402
import fwlib  # noqa: E402
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--target", nargs="+", default=["host"], choices=tuple(TARGETS))
    ap.add_argument("--backend", default="xnnpack")
    args = ap.parse_args()
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
