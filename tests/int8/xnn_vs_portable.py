#!/usr/bin/env python3
"""An int8 package of the trained demo model on the xnnpack backend against the portable backend's.

    xnn_vs_portable.py --tool PATH/TO/xq8_tool --work DIR [--imgsz 160] [--keep] [--quant-pass]

The quantized graph: the demo model (manifests/yolo26n-shapes.yaml, assets/yolo26n-shapes.pt) with every
convolution in int8 by tests/int8/handquant.py, calibrated on 8 images rendered by tools/train_demo.py (not the
test images); with --quant-pass, the quantization pass's graph instead (generator/carve/quant/, --precision int8:
compiler.quantized_graph on 32 rendered images), once it is merged. Both
packages come from the same graph (compile_model's graph_hook): the portable one runs arith.py's integer
arithmetic bit for bit (carve_q8), the xnnpack one XNNPACK's int8 operators, which requantize in float32.

1. Per operator, on the same input (what "within one unit" means): the graph simulated with arith.py on the
   test images (handquant.simulate); each int8 op the xnnpack lowering gives to XNNPACK (its descriptor table
   says which: QCONV with its SiLU table, QADD, DEQUANTIZE) run by xq8_tool on its simulated input, against
   arith: every value within 1 (a SiLU table after the conv: a table entry within 1 of arith's pre-activation),
   at most xq8_vs_arith.MAX_OFF_BY_ONE of them off by one, DEQUANTIZE bit for bit.
2. The two packages (generated, built with the plain compiler command, run with --dump on the test images):
   every layer's output in units of its int8 scale (printed: the largest difference and the share of values
   that differ, which grow along the network: one unit off in one layer is a different input to the next), and
   the detections: every detection scoring at least CONF + MARGIN in one package is in the other, same class,
   IoU >= MIN_IOU, scores within MARGIN (a detection within MARGIN of the threshold may be on one side of it in
   one package and on the other in the other). The xnnpack package gives the same bytes on 1 and 3 threads, and
   the same rows with --caller-memory (create_with: XNNPACK's operators in a heap of <NAME>_XNN_HEAP_BYTES,
   xnn_heap.py's; it refuses an int8 package's layer callback, so no layers there). The
   fp32 package of the same model is run too: printed, how many of its detections the int8 one finds.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "generator"), str(REPO / "tools"), str(REPO / "tests" / "int8"),
                str(REPO / "tests" / "runtime"), str(REPO / "tests" / "portable")]

import compare_backends  # noqa: E402
import handquant  # noqa: E402
import oracle  # noqa: E402
import xq8_vs_arith as xq8  # noqa: E402
from carve.backends import xnn_q8, xnnpack  # noqa: E402
from carve.checkpoint import read_checkpoint  # noqa: E402
from carve.compiler import compile_model, load_architecture  # noqa: E402
from carve.frontend.yolo26 import build_graph  # noqa: E402
from carve.manifest import load_manifest  # noqa: E402
from carve.passes import optimize  # noqa: E402
from carve.planner import plan_memory  # noqa: E402
from carve.quant import arith  # noqa: E402

MANIFEST = REPO / "manifests" / "yolo26n-shapes.yaml"
WEIGHTS = REPO / "assets" / "yolo26n-shapes.pt"
PREFIX = "yolo26n_shapes"
IMAGES = [REPO / "assets" / f"shapes-{i}.png" for i in (1, 2, 3, 4)]
CALIB_SEED, CALIB_COUNT = 5, 8      # tools/train_demo.py render_image(seed, index): not the test images
QUANT_PASS_IMAGES = 32              # --quant-pass: the pass wants at least 32
CONF, MARGIN, MIN_IOU = 0.25, 0.05, 0.9


def calibration_images(work: Path, count: int) -> list:
    """count images rendered by tools/train_demo.py into WORK/calib (kept between runs)."""
    import cv2
    import train_demo
    out = []
    for i in range(count):
        path = work / "calib" / f"calib-{i}.png"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(path), train_demo.render_image(CALIB_SEED, i)[0])
        out.append(path)
    return out


def quantized(work: Path, imgsz: int, quant_pass: bool):
    """The quantized graph of the demo model (module docstring)."""
    if quant_pass:
        from carve import compiler
        if not hasattr(compiler, "quantized_graph"):
            raise SystemExit("xnn_vs_portable: --quant-pass: this carve has no quantization pass "
                             "(compiler.quantized_graph) yet")
        calib = calibration_images(work, QUANT_PASS_IMAGES)[0].parent
        return compiler.quantized_graph(str(MANIFEST), str(WEIGHTS), str(calib), imgsz).graph
    manifest = load_manifest(MANIFEST)
    fgraph = optimize(build_graph(manifest, load_architecture(manifest), read_checkpoint(str(WEIGHTS)), imgsz))
    images = [nhwc(oracle.make_input(p, imgsz)) for p in calibration_images(work, CALIB_COUNT)]
    return handquant.quantize_graph(fgraph, handquant.calibrate(fgraph, images))



def nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x[0].transpose(1, 2, 0), np.float32)


def xnnpack_ops(graph) -> dict:
    """{op name: descriptor kind} of the int8 ops the xnnpack lowering gives to XNNPACK."""
    program = xnnpack.BACKEND.lower(graph, plan_memory(graph))
    return {o["name"]: o["kind"][len("CARVE_XNN_"):] for o in program["ops"]
            if o["kind"] in ("CARVE_XNN_QCONV", "CARVE_XNN_QADD", "CARVE_XNN_DEQUANTIZE")}


def op_cases(graph, env: dict, which: dict, rng, tag: str) -> list:
    """xq8 cases of the ops XNNPACK runs, on their simulated inputs (env), against arith (env's outputs)."""
    w, cases = graph.weights, []
    for op in graph.ops:
        kind = which.get(op.name)
        if kind is None:
            continue
        ins = [env[t] for t in op.inputs]
        qs = [graph.tensors[t].quant for t in op.inputs]
        y = env[op.outputs[0]]
        if kind == "QCONV":
            a, p = op.attrs, op.params
            mul, shift = w[p["mul"]], w[p["shift"]]
            pre = arith.qconv2d(ins[0], qs[0].zero_point, w[p["weight"]], w[p["bias"]], mul, shift, a["pre_zero"],
                                a["stride"], a["pad"], a["groups"])
            cases.append(xq8.qconv_case(rng, f"{tag} {op.name}", ins[0], 0, a["cin"], qs[0].zero_point,
                                        w[p["weight"]], w[p["bias"]], xnn_q8.qc8_scales(mul, shift), a["pre_zero"],
                                        a["stride"], a["pad"], a["groups"], w.get(p.get("lut")), y, pre, threads=2,
                                        group="QCONV + SiLU" if "lut" in p else "QCONV", spread=False))
        elif kind == "QADD":
            a, c = op.attrs, ins[0].shape[2]
            cases.append(xq8.qadd_case(rng, f"{tag} {op.name}", ins[0].reshape(-1, c), qs[0].zero_point,
                                       ins[1].reshape(-1, c), qs[1].zero_point, a["mul_a"], a["mul_b"], a["shift"],
                                       graph.tensors[op.outputs[0]].quant.zero_point, y.reshape(-1, c), threads=2,
                                       spread=False))
        else:
            c = ins[0].shape[2]
            case_x = ins[0].reshape(-1, c)
            arena = xq8.Arena(rng)
            x_off = arena.view(case_x, c, 1, 1)
            y_off = arena.out(case_x.shape[0], c, c, 4, 4)
            cases.append(xq8.Case(f"{tag} {op.name}", "DEQUANTIZE", arena, b"",
                                  (y_off, case_x.shape[0], c, c, np.float32), y.reshape(-1, c), "exact", spread=False,
                                  h=case_x.shape[0], w=1, cin=c, in_stride=c, out_stride=c, in_off=x_off,
                                  out_off=y_off, in_zero=qs[0].zero_point, in_scale=qs[0].scale, threads=2))
    return cases


def write_package(files: dict, out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    for rel, data in files.items():
        p = out / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def iou(a, b) -> float:
    x1, y1 = max(a[0], b[0]), max(a[1], b[1])
    x2, y2 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def match_detections(rows_a: np.ndarray, rows_b: np.ndarray) -> tuple:
    """(problems, matched pairs (iou, score difference)) of A's detections scoring >= CONF + MARGIN against B's
    scoring >= CONF - MARGIN: the same class, IoU >= MIN_IOU, scores within MARGIN."""
    problems, pairs = [], []
    cand = [r for r in rows_b if r[4] >= CONF - MARGIN]
    for r in rows_a:
        if r[4] < CONF + MARGIN:
            continue
        best = max(cand, key=lambda s: iou(r, s) if s[5] == r[5] else -1.0, default=None)
        if best is None or best[5] != r[5] or iou(r, best) < MIN_IOU or abs(best[4] - r[4]) > MARGIN:
            problems.append(f"class {int(r[5])} score {r[4]:.3f} box {np.round(r[:4], 1).tolist()}: no match")
        else:
            pairs.append((iou(r, best), abs(best[4] - r[4])))
    return problems, pairs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", required=True, help="xq8_tool (tests/runtime)")
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--imgsz", type=int, default=160)
    ap.add_argument("--keep", action="store_true", help="keep the packages' builds and dumps")
    ap.add_argument("--quant-pass", action="store_true", help="the quantization pass's graph, not handquant's")
    args = ap.parse_args()
    t0 = time.time()
    work = (args.work / f"int8-xnn-vs-portable-{args.imgsz}").resolve()
    work.mkdir(parents=True, exist_ok=True)
    qgraph = quantized(work, args.imgsz, args.quant_pass)
    which = xnnpack_ops(qgraph)
    counts = {k: sum(v == k for v in which.values()) for k in ("QCONV", "QADD", "DEQUANTIZE")}
    n_q = sum(op.kind == "qconv2d" for op in qgraph.ops)
    n_a = sum(op.kind == "qadd" for op in qgraph.ops)
    print(f"quantized graph: {n_q} qconv2d, {n_a} qadd; on XNNPACK: {counts} (the rest: carve_q8)")
    if counts["QCONV"] == 0 or counts["DEQUANTIZE"] == 0:
        print("FAIL: the xnnpack lowering gave no int8 op to XNNPACK")
        return 1

    # 1. per operator, on the same inputs
    inputs = {img.name: work / f"{img.stem}.npy" for img in IMAGES}
    for img in IMAGES:
        oracle.make_input(img, args.imgsz, inputs[img.name])
    rng = np.random.default_rng(19)
    cases = []
    for img in IMAGES[:2]:
        env = handquant.simulate(qgraph, nhwc(np.load(inputs[img.name])))
        cases += op_cases(qgraph, env, which, rng, img.stem)
    failed, _ = xq8.compare(args.tool, cases)
    print(f"1. per operator, the xnnpack package's XNNPACK int8 operators on arith's inputs ({len(cases)} runs, "
          f"{IMAGES[0].name} and {IMAGES[1].name}):")
    failed += xq8.print_counts()
    if failed:
        print(f"FAIL: {failed} operator runs")

    # 2. the packages
    demos = {}
    for backend, hook in (("xnnpack", lambda g: qgraph), ("portable", lambda g: qgraph), ("fp32", None)):
        be = "xnnpack" if backend == "fp32" else backend
        res = compile_model(str(MANIFEST), be, str(WEIGHTS), args.imgsz, graph_hook=hook)
        write_package(res.files, work / backend)
        demos[backend] = compare_backends.build(work / backend, PREFIX, be)
    units = handquant.layer_units(qgraph)
    worst: dict = {}
    problems = []
    for img in IMAGES:
        dumps = {}
        for backend, demo in demos.items():
            dumps[backend] = work / f"dump-{backend}-{img.stem}"
            subprocess.run([str(demo), "--input", str(inputs[img.name]), "--dump", str(dumps[backend])], check=True,
                           capture_output=True)
        for layer in qgraph.layers:
            name = f"layer_{layer.index:02d}.npy"
            a, b = np.load(dumps["xnnpack"] / name), np.load(dumps["portable"] / name)
            if layer.index in units:
                d = np.abs(a.astype(np.float64) - b) / units[layer.index]
                big, share = float(d.max()), float(np.mean(d > 0.5))
            else:
                big, share = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)), float(np.mean(a != b))
            old = worst.get(layer.index, (0.0, 0.0))
            worst[layer.index] = (max(old[0], big), max(old[1], share))
        if img == IMAGES[0]:  # the xnnpack package on 1 and 3 threads, and in the caller's memory: the same bytes
            for tag, extra in (("t1", ["--threads", "1"]), ("t3", ["--threads", "3", "--oversubscribe"]),
                               ("caller", ["--caller-memory"])):
                d = work / f"dump-xnnpack-{img.stem}-{tag}"
                r = subprocess.run([str(demos["xnnpack"]), "--input", str(inputs[img.name]), "--dump", str(d),
                                    *extra], check=True, capture_output=True, text=True)
                heap = [line for line in (r.stdout + r.stderr).splitlines() if line.startswith("xnn_heap:")]
                if heap:
                    print(f"  xnnpack int8 package, --caller-memory: {heap[0]}")
                # create_with refuses an int8 package's layer callback (it would allocate the dequantized copy):
                # there, the rows only
                files = ["output0.npy"] if tag == "caller" else [f.name for f in dumps["xnnpack"].glob("*.npy")]
                for name in sorted(files):
                    f = dumps["xnnpack"] / name
                    if not (d / name).exists() or f.read_bytes() != (d / name).read_bytes():
                        problems.append(f"{img.name}: {f.name} with {' '.join(extra)} differs from the default run")
        rows = {k: np.load(dumps[k] / "output0.npy")[0] for k in dumps}
        for a, b in (("xnnpack", "portable"), ("portable", "xnnpack")):
            bad, pairs = match_detections(rows[a], rows[b])
            problems += [f"{img.name}: {a} {p}, not in {b}" for p in bad]
        _, pairs = match_detections(rows["xnnpack"], rows["portable"])
        shown = [f"{r[4]:.3f}" for r in rows["xnnpack"] if r[4] >= CONF]
        _, fp = match_detections(rows["fp32"], rows["xnnpack"])
        print(f"  {img.name}: {len(shown)} detections >= {CONF} (xnnpack int8 scores {', '.join(shown)}); vs portable: "
              f"IoU >= {min((p[0] for p in pairs), default=1):.3f}, |score diff| <= "
              f"{max((p[1] for p in pairs), default=0):.4f}; fp32 detections found in int8: "
              f"{len(fp)} of {sum(r[4] >= CONF + MARGIN for r in rows['fp32'])}")
    print("2. packages, xnnpack int8 vs portable int8, per layer over the images (int8 layers in units of their "
          "scale: largest difference, share of values that differ; float layers: relative):")
    for layer in qgraph.layers:
        big, share = worst[layer.index]
        kind = "units" if layer.index in units else "rel (float layer)"
        print(f"  layer {layer.index:2d} {layer.type:12s} {big:8.3g} {kind:18s} {share:7.2%} differ")
    for p in problems:
        print(f"FAIL detections: {p}")
    ok = not failed and not problems
    if ok and not args.keep:
        for d in work.glob("dump-*"):
            shutil.rmtree(d)
        for backend in demos:
            shutil.rmtree(work / backend / "build", ignore_errors=True)
    print(f"xnn_vs_portable: {'ok' if ok else 'FAILED'} ({time.time() - t0:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
