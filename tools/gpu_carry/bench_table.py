#!/usr/bin/env python3
"""The table of issue 20 from the JSON lines of tools/gpu_carry/bench.sh (bench_main and torch_bench.py):

    bench_table.py bench.jsonl [profile.jsonl ...]      (prints Markdown)

One row per system and batch: the time of one run (a batch of N images) with the input already on the GPU
(carve: enqueue_tensors, network + e2e head; PyTorch: the forward with its e2e head), images per second (runs back
to back), and for carve also the run from a device-resident uint8 image (letterbox on the device), run_image from
a host image and the launches per forward (in parentheses, how many of them run in series: the graph's longest
chain). Then the issue's targets, each met or not, for the figures present; the Detect layer's from a profile line
(bench_main --profile: "graph_layers", the layer's device time inside a CUDA Graph with event-record nodes at the
layer ends) where one is given, and with the "carve <prec> late-head" row's profile the early fork's line: the
Detect layer and the layers before it with the head's P3 / P4 lanes beside the neck and with every lane after it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load(paths) -> list:
    rows = []
    for p in paths:
        for line in Path(p).read_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def fmt(v, digits=3):
    return "-" if v is None else f"{v:.{digits}f}"


def launches(r: dict) -> str:
    """The graph's nodes, with its longest chain's in parentheses where the row has it."""
    if "graph_nodes" not in r:
        return "-"
    return f"{r['graph_nodes']}" + (f" ({r['graph_depth']})" if "graph_depth" in r else "")


def table(rows: list) -> str:
    out = ["| system | batch | ms per run, input on the GPU | images/s | from a device uint8 image (ms) | "
           "run_image from host (ms) | launches (in series) | convs timed: cuBLAS / fused | create (ms) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r["batch"], not r["system"].startswith("carve"), r["system"])):
        if "error" in r:
            out.append(f"| {r['system']} | {r['batch']} | failed: {r['error'][:80]} | | | | | | |")
            continue
        carve = "device_tensor_ms" in r
        ms = r["device_tensor_ms"] if carve else r["ms"]
        paths = f"{r['convs_gemm']} / {r['convs_fused']}" if "convs_gemm" in r else "-"
        out.append(f"| {r['system']} | {r['batch']} | {fmt(ms)} | {fmt(r.get('throughput_ips'), 0)} | "
                   f"{fmt(r.get('device_image_ms'))} | {fmt(r.get('run_image_ms'))} | "
                   f"{launches(r)} | {paths} | {fmt(r.get('init_ms'), 0)} |")
    return "\n".join(out)


def find(rows, prefix: str, batch: int):
    """The row named `prefix` exactly (so "carve tf32" is not "carve tf32 fused"), else the first it begins."""
    ok = [r for r in rows if r["batch"] == batch and "error" not in r]
    return next((r for r in ok if r["system"] == prefix), None) or \
        next((r for r in ok if r["system"].startswith(prefix)), None)


def best(rows, names, batch: int, key: str, low: bool):
    """The row of `names` (exact system names) at `batch` with the lowest (low) or highest `key`."""
    ok = [r for r in rows if r["batch"] == batch and "error" not in r and r["system"] in names and key in r]
    return (min if low else max)(ok, key=lambda r: r[key]) if ok else None


def _graph_split(profiles: list, system: str):
    """(the Detect layer's ms, the ms of the layers before it) inside the marked graph of `system` at batch 1, or
    None."""
    for p in profiles:
        if p.get("system") == system and p.get("batch") == 1 and p.get("graph_layers"):
            types = [layer[0] for layer in p["layers"]]
            if "Detect" in types:
                d = types.index("Detect")
                return p["graph_layers"][d], sum(p["graph_layers"][:d])
    return None


def detect_in_graph(profiles: list, system: str):
    """The Detect layer's ms inside the marked graph of `system` at batch 1, or None."""
    split = _graph_split(profiles, system)
    return split[0] if split else None


def targets(rows: list, profiles: list = ()) -> str:
    """Issue 20's targets for yolo26n 640: carve's faster fp16 configuration (as generated, or with the fused
    convolutions) against PyTorch's faster fp16 CUDA Graph (NCHW or channels-last), each named; the TF32
    package where no fp16 one ran, said so."""
    lines = []
    prec = "fp16" if find(rows, "carve fp16", 1) else "tf32"
    mine = (f"carve {prec}", f"carve {prec} fused")
    graphs = ("pytorch graph fp16", "pytorch graph fp16-channels-last")
    carve1 = best(rows, mine, 1, "device_tensor_ms", True)
    torch1 = best(rows, graphs, 1, "ms", True)
    carve32 = best(rows, mine, 32, "throughput_ips", False)
    torch32 = best(rows, graphs, 32, "throughput_ips", False) or find(rows, "pytorch eager fp16", 32)
    if carve1:
        ms = carve1["device_image_ms"]
        lines.append(f"- batch 1 network + head from a device-resident image <= 0.5 ms ({carve1['system']}): "
                     f"{ms:.3f} ms: {'met' if ms <= 0.5 else 'not met'}")
        if torch1:
            ratio = torch1["ms"] / carve1["device_tensor_ms"]
            lines.append(f"- >= 2x faster than PyTorch fp16 + CUDA Graph at batch 1 ({carve1['system']} "
                         f"{carve1['device_tensor_ms']:.3f} ms vs {torch1['system']} {torch1['ms']:.3f} ms): "
                         f"{ratio:.2f}x: {'met' if ratio >= 2 else 'not met'}")
    detect = detect_in_graph(profiles, carve1["system"]) if carve1 else None
    if detect is not None:
        us = 1000 * detect
        lines.append(f"- Detect layer with the e2e head under 60 us ({carve1['system']}, inside the graph with layer "
                     f"marks): {us:.1f} us: {'met' if us < 60 else 'not met'}")
    # the head's early fork (its P3 / P4 lanes beside the neck) against every head lane after the neck: the Detect
    # layer and the layers before it, whose time the early lanes may take some of
    early, late = (f"carve {prec}", f"carve {prec} late-head")
    pairs = [_graph_split(profiles, s) for s in (early, late)]
    if None not in pairs:
        (d0, n0), (d1, n1) = pairs
        lines.append(f"  - the early fork ({early} against {late}): Detect {1000 * d0:.1f} against {1000 * d1:.1f} us, "
                     f"the layers before it {1000 * n0:.1f} against {1000 * n1:.1f} us, both {1000 * (d0 + n0):.1f} "
                     f"against {1000 * (d1 + n1):.1f} us")
    if carve32 and torch32:
        a, b = carve32["throughput_ips"], torch32["throughput_ips"]
        lines.append(f"- batch 32 throughput >= PyTorch fp16 batch 32 ({carve32['system']} vs {torch32['system']}): "
                     f"{a:.0f} vs {b:.0f} images/s: {'met' if a >= b else 'not met'}")
    if prec != "fp16":
        lines.append("- (no carve fp16 package in this run: the targets use the TF32 package)")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    loaded = load(sys.argv[1:])
    rows = [r for r in loaded if "layers" not in r]  # bench_main / torch_bench rows; the rest are profiles
    profiles = [r for r in loaded if "layers" in r]
    if not rows:
        print("bench_table: no results")
        return 1
    dev = next((r["device"] for r in rows if "device" in r), "?")
    print(f"yolo26n, device {dev}\n\n{table(rows)}\n\n{targets(rows, profiles)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
