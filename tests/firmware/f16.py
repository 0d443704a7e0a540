#!/usr/bin/env python3
"""--weights-dtype f16: the checkpoint's halves stored, the f32 package's weights rebuilt at create.

    f16.py --work build/work [--imgsz 320] [--skip-lossy]

A. Bit-identity. The trained demo model (assets/yolo26n-shapes.pt: float16, as Ultralytics saves every
   checkpoint; detections and layers whose values spread) generated f32 and f16 for xnnpack (linked blob) and
   portable (f16 as a weights file, read from its path), built, and run on assets/shapes-3.png with --json
   --dump: every dumped layer and output of each f16 package is the f32 package's, bit for bit, and so is its
   JSON (timings aside). Each layer checked spreads (distinct values); there are detections. The f16 weights are
   about half the f32 ones (the checkpoint's halves plus each convolution's BatchNorm parameters; xnnpack stores
   its Winograd convolutions' 9 halves per kernel where the f32 blob has 16 floats).
B. The runtime against the generator: carve_weights_expand (runtime/carve_weights.c, through weights_tool.c)
   on the pieces of yolo26n-shapes for xnnpack, portable and cuda gives the f32 blob bit for bit, in one call and
   in the cuda package's chunks of 4096 floats, built as a package builds it (ISO C11) and as GNU C with
   -ffp-contract=fast -march=native (multiply-adds fused wherever the compiler may: they are not).
C. The lossy path: a random-weight yolo26n saved in float32 (tools/oracle.py make-checkpoint --no-half): carve
   warns, naming the tensors; its f16 package (the folded weights rounded to float16) against Ultralytics' fused
   model with every weight rounded to float16, in float64, layer by layer, within the oracle's bound
   max(1e-4, 3 x PyTorch's own fp32 error).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fwlib  # noqa: E402
from fwlib import REPO, log, run  # noqa: E402

sys.path.insert(0, str(REPO / "generator"))

SHAPES_PT = REPO / "assets" / "yolo26n-shapes.pt"
SHAPES = "yolo26n-shapes.yaml"
CHUNK = 4096        # UPLOAD_CHUNK_FLOATS of templates/cuda/model.cu.j2


def _define(header: Path, name: str) -> int:
    m = re.search(rf"^#define {name} (\d+)u", header.read_text(), re.M)
    assert m, f"{header}: no {name}"
    return int(m.group(1))


def _spreads(a: np.ndarray) -> bool:
    return np.unique(a).size >= min(16, a.size) and float(np.std(a)) > 0


def bit_identity(work: Path, imgsz: int) -> bool:
    """A: the f16 package of each backend against its f32 package."""
    ok = True
    for backend, f16_format in (("xnnpack", "blob"), ("portable", "file")):
        out = {}
        for dtype, fmt in (("f32", "blob"), ("f16", f16_format)):
            pkg = fwlib.generate(SHAPES, SHAPES_PT, work / f"{backend}-{dtype}", "--imgsz", str(imgsz),
                                 "--weights-dtype", dtype, "--weights-format", fmt, backend=backend)
            fwlib.cmake_build(pkg, pkg / "build")
            dump = work / f"dump-{backend}-{dtype}"
            extra = ["--weights", pkg / "yolo26n_shapes.weights"] if fmt == "file" else []
            p = run([pkg / "build" / "yolo26n_shapes_demo", fwlib.IMAGE, "--json", "--dump", dump, *extra])
            js = json.loads(p.stdout)
            js.pop("timing_ms", None)
            stored = _define(pkg / "yolo26n_shapes.h", "YOLO26N_SHAPES_WEIGHT_STORAGE_BYTES")
            out[dtype] = (dump, js, stored, _define(pkg / "yolo26n_shapes.h", "YOLO26N_SHAPES_WEIGHT_BYTES"))
        (d32, j32, s32, w32), (d16, j16, s16, w16) = out["f32"], out["f16"]
        files = sorted(p.name for p in d32.glob("*.npy"))
        same = [f for f in files if (d16 / f).is_file() and (d16 / f).read_bytes() == (d32 / f).read_bytes()]
        flat = [f for f in files if not _spreads(np.load(d32 / f))]
        dets = j32.get("detections") or []
        ok_b = (len(files) > 20 and same == files and j16 == j32 and not flat and len(dets) >= 1
                and len({d["score"] for d in dets}) == len(dets) and w16 == w32 and s16 <= 0.52 * s32)
        log(f"A. {backend}: f16 ({f16_format}) vs f32: {len(same)}/{len(files)} dumps bit-identical, JSON "
            f"{'identical' if j16 == j32 else 'DIFFERENT'} ({len(dets)} detections); layers that do not spread: "
            f"{flat or 'none'}; weights stored {s16} vs {s32} bytes ({s16 / s32:.3f}), float32 {w16} bytes: "
            f"{'PASS' if ok_b else 'FAIL'}")
        if same != files:
            log(f"   differ: {[f for f in files if f not in same][:8]}")
        ok &= ok_b
    return ok


def runtime_vs_generator(work: Path) -> bool:
    """B: carve_weights_expand on yolo26n-shapes' pieces of every backend against the f32 blob."""
    from carve import compiler
    from carve.backends import f16, get_backend
    from carve.planner import plan_memory
    # as a package builds it, and as a compiler that fuses multiply-adds wherever it may builds it (GNU C, FMA
    # instructions, -ffp-contract=fast): without carve_weights.c's rounding through volatiles, the second gives
    # other bits (1846 floats of this model, measured on an AVX-512 machine)
    tools = {}
    for name, flags in (("c11 -O2", ["-std=c11", "-O2"]),
                        ("gnu11 -O3 -march=native -ffp-contract=fast", ["-std=gnu11", "-O3", "-march=native",
                                                                       "-ffp-contract=fast"])):
        tools[name] = work / f"weights_tool{len(tools)}"
        run(["cc", *flags, "-Wall", "-Wextra", "-Werror", "-I", REPO / "runtime", Path(__file__).with_name("weights_tool.c"),
             REPO / "runtime" / "carve_weights.c", REPO / "runtime" / "carve_rt.c", "-DCARVE_RT_NO_THREADS",
             "-o", tools[name], "-lm"])
    seen = {}
    compiler.compile_model(str(REPO / "manifests" / SHAPES), "xnnpack", str(SHAPES_PT), 64,
                           graph_hook=lambda g: seen.setdefault("graph", g))
    graph = seen["graph"]
    ok = True
    for backend in ("xnnpack", "portable", "cuda"):
        program = get_backend(backend).lower(graph, plan_memory(graph))
        stored = f16.build(graph, program)
        payload, table = work / f"{backend}.payload", work / f"{backend}.pieces"
        payload.write_bytes(stored.payload)
        lines = []
        for pc in stored.pieces:
            flags = (1 if pc.bn else 0) | (2 if pc.bias else 0) | (4 if pc.winograd else 0)
            dims = list(pc.dims) + [0] * (6 - len(pc.dims))
            steps = list(pc.steps) + [0] * (6 - len(pc.steps))
            eps = struct.unpack("<I", struct.pack("<f", pc.eps))[0]
            lines.append(" ".join(map(str, [1 if pc.kind == "halves" else 2, flags, pc.dst, pc.count, pc.src,
                                            pc.channels, pc.cin, pc.bias_dst, pc.bn_src]))
                         + f" {eps:x} {len(pc.dims)} " + " ".join(map(str, dims + steps)))
        table.write_text("\n".join(lines) + "\n")
        blob = program["blob"]
        kinds = {("winograd" if pc.winograd else "folded" if pc.bn else "halves") for pc in stored.pieces}
        for (cc, tool), chunk in ((t, c) for t in tools.items() for c in (0, CHUNK)):
            got = subprocess.run([str(tool), "expand", str(payload), str(table), str(len(blob) // 4), str(chunk)],
                                 capture_output=True, check=True).stdout
            same = got == blob
            log(f"B. {backend}: carve_weights_expand ({len(stored.pieces)} pieces: {', '.join(sorted(kinds))}; "
                f"{'one call' if chunk == 0 else f'chunks of {chunk}'}; cc {cc}) == the f32 blob ({len(blob)} "
                f"bytes): {'PASS' if same else 'FAIL'}")
            if not same:
                a, b = np.frombuffer(got, "<u4"), np.frombuffer(blob, "<u4")
                if a.size == b.size:
                    log(f"   first difference at float {int(np.argmax(a != b))} of {a.size}")
            ok &= same
    return ok


def lossy(work: Path, imgsz: int) -> bool:
    """C: a float32 checkpoint's f16 package against Ultralytics' fused model with its weights rounded."""
    import oracle
    pt = fwlib.checkpoint(work.parent, "yolo26n.yaml", half=False)
    p = run([fwlib.CARVE, "generate", REPO / "manifests" / "yolo26n.yaml", "--backend", "xnnpack", "--weights", pt,
             "--out", work / "lossy", "--force", "--imgsz", str(imgsz), "--weights-dtype", "f16"])
    warned = re.search(r"carve: warning: --weights-dtype f16: (\d+) tensor\(s\) of .* are not float16 \(F32;",
                       p.stderr)
    log(f"C. a float32 checkpoint: {'warned: ' + warned.group(0) if warned else 'NO WARNING'}")
    pkg = work / "lossy"
    fwlib.cmake_build(pkg, pkg / "build")
    inp = work / "input.npy"
    oracle.make_input(oracle.sample_image("bus.jpg"), imgsz, inp)
    run([pkg / "build" / "yolo26n_demo", "--input", inp, "--dump", work / "dump-lossy"])
    ref64, ref32 = work / "ultra16-64", work / "ultra16-32"
    plain = oracle.load_fused

    def fp16_weights(weights, dtype="float32"):
        torch = oracle._torch()
        model = plain(weights, "float32")
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                if t.dtype == torch.float32:
                    t.copy_(t.half().float())
        return model.double() if dtype == "float64" else model

    oracle.load_fused = fp16_weights
    try:
        oracle.reference_layers(pt, inp, ref64, dtype="float64")
        oracle.reference_layers(pt, inp, ref32)
    finally:
        oracle.load_fused = plain
    ok = oracle.compare_layers(work / "dump-lossy", ref64, tol=1e-4, baseline=ref32, factor=3.0)
    worst = max(oracle.LAST_STATS.values(), key=lambda v: v[0])[0]
    log(f"C. lossy f16 package vs Ultralytics' fp16-weight model: max rel error {worst:.2e}: "
        f"{'PASS' if ok and warned else 'FAIL'}")
    return bool(ok and warned)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--imgsz", type=int, default=320)
    ap.add_argument("--skip-lossy", action="store_true", help="only A and B (no torch needed)")
    args = ap.parse_args()
    t = fwlib.Timer()
    work = fwlib.fresh(args.work.resolve() / "firmware-f16")
    ok = runtime_vs_generator(work)
    ok &= bit_identity(work, args.imgsz)
    if not args.skip_lossy:
        ok &= lossy(work, args.imgsz)
    log(f"f16: {'PASS' if ok else 'FAIL'} ({t})")
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
