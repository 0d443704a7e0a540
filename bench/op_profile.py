#!/usr/bin/env python3
"""Per-operator time of a generated CPU package: where `<model>_demo --profile` (per layer) is too coarse.

    python3 bench/op_profile.py PACKAGE_DIR IMAGE [--threads 1] [--runs 40] [--top 25]

PACKAGE_DIR is a package from `carve generate ... --backend xnnpack` (or portable, fp32 or int8). The script copies
it to a temporary folder, wraps every runtime call inside the generated `layer_NN_*` functions in a clock read (each
`carve_xnn_run`, `carve_q8_run`, ... statement, and each call through the kernel table, `m->k.epilogue`,
`m->k.conv3x3s1_winograd`, `m->k.q8conv`, `m->k.q8_pool`, ..., reported as carve_epilogue, carve_q8conv, ...),
builds the copy (CMake, Release) and runs its demo on IMAGE. It prints the time per operator kind (XNNPACK 1x1
convolutions, XNNPACK 3x3 stride-2 convolutions, the Winograd kernel, the SiLU epilogue; in an int8 package each
carve_q8 descriptor kind, with the convolutions by kernel, stride and depthwise or dense, read from the package's
k_q8_ops table) with the FLOPs the kind covers, then the slowest single calls. The times are means over the demo's runs plus its warm-up run, in milliseconds.
The package itself is not changed; the timing adds two clock reads per call (about 0.1 us each).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TIMER = """
double carve_op_ms[{n}];
static const char* const carve_op_label[{n}] = {{{labels}}};
"""
DUMP = r"""
#include <stdio.h>
#include <stdlib.h>
// Written when the demo exits: one line per instrumented call, total milliseconds over all runs.
__attribute__((destructor)) static void carve_op_dump(void) {
  const char* path = getenv("CARVE_OP_PROFILE");
  FILE* f = path != NULL ? fopen(path, "w") : NULL;
  if (f == NULL) return;
  for (int i = 0; i < %d; i++) fprintf(f, "%%.6f\t%%s\n", carve_op_ms[i], carve_op_label[i]);
  fclose(f);
}
"""


def _code(text: str) -> str:
    return re.sub(r"//.*", "", text)


def instrument(source: str) -> tuple[str, list[str]]:
    """The generated C with every runtime call in a layer function timed; each call's label ('call<TAB>comment')."""
    out, labels, pending = [], [], None
    current, in_layer = "", False
    for line in source.split("\n"):
        if pending is not None:  # a call spanning several lines: until its parentheses balance
            pending.append(line)
            text = "\n".join(pending)
            if _code(text).count("(") == _code(text).count(")"):
                out.append(f"  {{ double t_ = now_ms(); {text.strip()}\n    carve_op_ms[{len(labels) - 1}] += now_ms() - t_; }}")
                pending = None
            continue
        if line.startswith("static carve_status layer_"):
            in_layer = True
        elif line.startswith("}"):
            in_layer = False
        comment = re.match(r"\s*// (model\.\S+): (.*)", line)
        if comment:
            current = f"{comment.group(1)}: {comment.group(2)}"
        stmt = line.strip()
        if in_layer and (stmt.startswith(("TRY(carve_", "TRY(m->k.")) or re.match(r"carve_[a-z0-9_]+\(", stmt)):
            call = stmt[4:].split("(")[0] if stmt.startswith("TRY(") else stmt.split("(")[0]
            if call.startswith("m->k."):  # the kernel table's variant of carve_<kernel>
                call = "carve_" + call[len("m->k."):]
            part = re.search(r"// output channels (\d+)\.\.(\d+)", stmt)  # one slice of a split convolution
            q8 = re.search(r"k_q8_ops\[(\d+)\]", stmt)  # an int8 op: its descriptor
            labels.append(f"{call}\t{current}" + (f" [slice {part.group(1)}..{part.group(2)}]" if part else "") +
                          (f" [q8 {q8.group(1)}]" if q8 else ""))
            if _code(stmt).count("(") == _code(stmt).count(")"):
                out.append(f"  {{ double t_ = now_ms(); {stmt}\n    carve_op_ms[{len(labels) - 1}] += now_ms() - t_; }}")
            else:
                pending = [line]
            continue
        out.append(line)
    text = "\n".join(out)
    at = text.index("static double now_ms(void)")
    at = text.index("\n}\n", at) + 3
    quoted = ",".join('"' + label.replace("\\", "").replace('"', "'").replace("\t", "\\t") + '"' for label in labels)
    text = text[:at] + TIMER.format(n=len(labels), labels=quoted) + text[at:] + DUMP % len(labels)
    return text, labels


def q8_table(source: str) -> dict:
    """The generated k_q8_ops table: {index: {"kind": "CONV", "kh": 3, ...}} (integer fields only)."""
    out = {}
    for m in re.finditer(r"/\*\s*(\d+) \S+ \*/\s*\{\.kind = CARVE_Q8_(\w+)(.*?)\},\n", source):
        fields = {k: int(v) for k, v in re.findall(r"\.(\w+) = (-?\d+)\b(?![.\w])", m.group(3))}
        out[int(m.group(1))] = dict(fields, kind=m.group(2))
    return out


def q8_desc(what: str, table: dict) -> dict | None:
    m = re.search(r"\[q8 (\d+)\]", what)
    return table.get(int(m.group(1))) if m else None


def q8_kind(call: str, d: dict) -> str:
    """An int8 op's kind: the descriptor kind, convolutions by kernel / stride and depthwise, dense or grouped."""
    name = call.replace("carve_", "")
    if d["kind"] != "CONV":
        return f"int8 {d['kind'].lower()} ({name})"
    dw = d.get("groups", 1) == d.get("cin") == d.get("cout")
    shape = "depthwise" if dw else "grouped" if d.get("groups", 1) > 1 else "dense"
    return f"int8 conv {d.get('kh')}x{d.get('kw')}/{d.get('stride')} {shape} ({name})"


def q8_mflops(d: dict) -> float:
    """2 x multiply-adds of an int8 convolution descriptor (0 for the other kinds)."""
    if d is None or d["kind"] != "CONV":
        return 0.0
    oh = (d["h"] + 2 * d.get("pad", 0) - d["kh"]) // d["stride"] + 1
    ow = (d["w"] + 2 * d.get("pad", 0) - d["kw"]) // d["stride"] + 1
    return 2.0 * d["kh"] * d["kw"] * (d["cin"] // d.get("groups", 1)) * d["cout"] * oh * ow / 1e6


def kind_of(call: str, what: str, table: dict | None = None) -> str:
    d = q8_desc(what, table or {})
    if d is not None:
        return q8_kind(call, d)
    if call == "carve_xnn_run":
        if re.search(r"Conv2?d? 1x1", what):
            return "XNNPACK 1x1 convolution"
        m = re.search(r"Conv 3x3/(\d)( dw)?", what)
        if m:
            return f"XNNPACK 3x3{' depthwise' if m.group(2) else ''} stride-{m.group(1)} convolution"
        return "XNNPACK " + (what.split(":", 1)[1].split()[0] if ":" in what else "other")
    return call


def mflops(what: str) -> float:
    """Multiply-adds x 2 of a convolution from its comment: 'Conv KxK/S cin->cout ... -> (h,w,c)' (a slice's share
    for '[slice a..b]')."""
    m = re.search(r"(?:Conv2?d?) (\d)x\d(?:/\d)?( dw)? (\d+)->(\d+).*-> \((\d+),(\d+),(\d+)\)", what)
    if not m:
        return 0.0
    k, dw, cin, cout, h, w = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5)), int(m.group(6))
    part = re.search(r"\[slice (\d+)\.\.(\d+)\]", what)
    if part:
        cout = int(part.group(2)) - int(part.group(1)) + 1
    return 2.0 * k * k * (1 if dw else cin) * cout * h * w / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("package", type=Path)
    ap.add_argument("image", type=Path)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    sources = [p for p in a.package.glob("*.c") if not p.name.endswith("_demo.c")]
    if len(sources) != 1 or not (a.package / "CMakeLists.txt").is_file():
        print(f"op_profile: {a.package} is not a generated CPU package (one <model>.c and a CMakeLists.txt)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="carve-op-profile-") as tmp:
        pkg = Path(tmp) / "pkg"
        shutil.copytree(a.package, pkg, ignore=shutil.ignore_patterns("build"))
        src = pkg / sources[0].name
        source = src.read_text()
        table = q8_table(source)
        text, labels = instrument(source)
        src.write_text(text)
        build = pkg / "build"
        subprocess.run(["cmake", "-S", str(pkg), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", str(build), "-j", "2"], check=True, stdout=subprocess.DEVNULL)
        demo = next(build.glob("*_demo"))
        out = Path(tmp) / "ops.tsv"
        run = subprocess.run([str(demo), str(a.image), "--threads", str(a.threads), "--runs", str(a.runs)],
                             check=True, capture_output=True, text=True, env={**os.environ, "CARVE_OP_PROFILE": str(out)})
        latency = next((l for l in run.stdout.splitlines() if l.startswith("latency")), "")
        calls = a.runs + 1  # the demo's first (warm-up) run is timed too
        rows = []
        for line in out.read_text().splitlines():
            ms, call, what = line.split("\t", 2)
            rows.append((float(ms) / calls, call, what))
    total = sum(r[0] for r in rows)
    print(f"{demo.name} {a.image.name}, {a.threads} thread(s), {len(labels)} instrumented calls; {latency}")
    print(f"sum of the calls: {total:.2f} ms\n")
    kinds = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for ms, call, what in rows:
        k = kinds[kind_of(call, what, table)]
        k[0] += ms
        d = q8_desc(what, table)
        if d is not None:
            k[1] += q8_mflops(d)
        elif call in ("carve_xnn_run", "carve_conv3x3s1_winograd", "carve_conv3x3s2_small_cin", "carve_dwconv3x3"):
            k[1] += mflops(what)
        k[2] += 1
    print(f"{'kind':44s} {'calls':>5s} {'ms':>8s} {'share':>6s} {'MFLOPs':>8s} {'GFLOP/s':>8s}  (int8: MOPs, GOP/s)")
    for name, (ms, mf, n) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
        rate = f"{mf / ms:8.1f}" if mf and ms else f"{'':8s}"
        print(f"{name:44s} {n:5d} {ms:8.3f} {100 * ms / total:5.1f}% {mf:8.1f} {rate}")
    print(f"\nthe {a.top} slowest calls:")
    for ms, call, what in sorted(rows, key=lambda r: -r[0])[: a.top]:
        print(f"{ms:8.3f} ms  {call:28s} {what[:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
