#!/usr/bin/env python3
"""The portable int8 package against the quantization pass's simulator: the proof that the generated C computes the
quantized graph the pass reports on (quant.json).

    vs_simulator.py --work DIR [--imgsz 128]

The package: ``carve generate manifests/yolo26n-shapes.yaml --backend portable --checkpoint
assets/yolo26n-shapes.pt --precision int8 --calib <32 rendered images>`` (tests/int8/int8pkg.py, shared with the
other int8 tests of the build folder). The graph: int8pkg.package_graph, the pass's calibration on the same folder
and quant.json's float ops, proven to be the package's graph (it emits the package's files byte for byte).

On each sample image (assets/shapes-{1,2,3,4}.png):

* the input: the package's own letterboxed tensor (stb decode + carve_letterbox + /255, through the runtime's C
  code: int8pkg.letterboxed); the demo run on the image file and on that tensor (--input) must dump the same bytes,
  so the simulator and the package start from the same input (the package's input is int8: run_image letterboxes
  straight to int8 with carve_letterbox_q8, run_tensor and the simulator quantize the float32 tensor, and the
  three must agree);
* every layer whose output is int8 (the demo dumps it dequantized, ``(float)(q - zp) * scale``): bit-identical to
  ``arith.dequantize`` of the simulator's int8 tensor (quant/simulate.py: arith.py's integer arithmetic), and its
  int8 values must spread (a flat layer would prove nothing);
* a float layer (an op the pass kept in float32, or the head's rows): float32 in C against numpy (floatexec:
  BLAS sums in another order, np.exp for expf), so close, not equal: ``FLOAT_RTOL`` of the layer's largest value;
* the rows (output0: the end-to-end head's top 300, box corners, score, class): float32 decode of bit-identical
  int8 logits and boxes, so the same classes and order, box corners within ``BOX_ATOL`` pixels (measured: equal)
  and scores within ``SCORE_ATOL`` (measured: 1.2e-10, the sigmoid's expf against numpy's exp); the detections
  (rows scoring >= CONF) the same, and at least one per image.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

# One BLAS thread for the pass's calibration, as `carve generate --precision int8` (cli.py): OpenBLAS's spinning
# threads make its many small products up to 10x slower on a busy machine. Read when numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import int8pkg  # noqa: E402
from carve.quant import arith, floatexec, simulate  # noqa: E402

IMAGES = [int8pkg.REPO / "assets" / f"shapes-{i}.png" for i in (1, 2, 3, 4)]
CONF = 0.25
FLOAT_RTOL = 1e-4     # a float layer: |C - numpy| <= FLOAT_RTOL * max|numpy| (float32 sums in another order)
SCORE_ATOL = 1e-6     # the rows' scores: sigmoid with expf (C) against numpy, a few float32 ulps of values <= 1
BOX_ATOL = 1e-3       # the rows' box corners, input pixels: a float32 decode of bit-identical int8 values


def nchw(v: np.ndarray) -> np.ndarray:
    return v.transpose(2, 0, 1)[None] if v.ndim == 3 else v


def compare_layers(graph, env: dict, dump: Path, tag: str, spread: dict) -> list:
    """Problems of one image's dumps against the simulator (module docstring)."""
    producer = graph.producer()
    problems = []
    for layer in graph.layers:
        got = np.load(dump / f"layer_{layer.index:02d}.npy")
        t = graph.tensors[layer.output]
        v = env[layer.output]
        where = f"{tag}: layer {layer.index} ({layer.type}, {layer.output})"
        if t.dtype == "i8":
            spread.setdefault(layer.index, set()).update(np.unique(v).tolist())
            want = nchw(arith.dequantize(v, t.quant.scale, t.quant.zero_point))
            if got.shape != want.shape or got.tobytes() != want.tobytes():
                bad = np.argwhere(got != want) if got.shape == want.shape else None
                first = f", first at {bad[0].tolist()}: {got[tuple(bad[0])]} vs {want[tuple(bad[0])]}" \
                    if bad is not None and len(bad) else ""
                problems.append(f"{where}: int8 layer not bit-identical to the simulator ({got.shape} vs "
                                f"{want.shape}{first})")
        elif producer[layer.output].kind in floatexec.POSTPROCESS:   # the head's rows
            problems += compare_rows(got, np.asarray(v, np.float32), where)
        else:
            op = producer[layer.output]
            want = nchw(np.asarray(v, np.float32))
            exact = op.kind == "dequantize"
            scale = float(np.abs(want).max()) if want.size else 0.0
            err = float(np.abs(got.astype(np.float64) - want).max()) if got.shape == want.shape else np.inf
            if (exact and got.tobytes() != want.tobytes()) or err > FLOAT_RTOL * max(scale, 1e-30):
                problems.append(f"{where}: float layer off by {err:.3g} (largest value {scale:.3g}; "
                                f"{'dequantize: bit-identical expected' if exact else f'tolerance {FLOAT_RTOL:g}'})")
    return problems


def compare_rows(got: np.ndarray, want: np.ndarray, where: str) -> list:
    got, want = got.reshape(-1, 6), want.reshape(-1, 6)
    if got.shape != want.shape:
        return [f"{where}: rows {got.shape} vs the simulator's {want.shape}"]
    problems = []
    cls = np.flatnonzero(got[:, 5] != want[:, 5])
    if len(cls):
        problems.append(f"{where}: row {cls[0]} class {got[cls[0], 5]:g} vs {want[cls[0], 5]:g} ({len(cls)} rows: "
                        "a different order, or a different int8 logit)")
    box = float(np.abs(got[:, :4] - want[:, :4]).max())
    score = float(np.abs(got[:, 4] - want[:, 4]).max())
    if box > BOX_ATOL or score > SCORE_ATOL:
        problems.append(f"{where}: rows differ: box corners by {box:.3g} px (tolerance {BOX_ATOL:g}), scores by "
                        f"{score:.3g} (tolerance {SCORE_ATOL:g})")
    dg, dw = got[got[:, 4] >= CONF], want[want[:, 4] >= CONF]
    if len(dg) != len(dw):
        problems.append(f"{where}: {len(dg)} detections >= {CONF} vs the simulator's {len(dw)}")
    elif len(dg) == 0:
        problems.append(f"{where}: no detection >= {CONF} (a sample image has objects: a flat model proves nothing)")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--imgsz", type=int, default=int8pkg.IMGSZ)
    args = ap.parse_args()
    t0 = time.time()
    pkg = int8pkg.package(args.work, "portable", args.imgsz)
    graph = int8pkg.package_graph(args.work, pkg, "portable", args.imgsz)
    n_i8 = sum(graph.tensors[lay.output].dtype == "i8" for lay in graph.layers)
    kinds = {k: sum(op.kind == k for op in graph.ops) for k in ("qconv2d", "qadd", "quantize", "dequantize")}
    print(f"package {pkg.name}: {len(graph.layers)} layers, {n_i8} of them int8; ops {kinds}; the graph rebuilt from "
          f"the calibration and quant.json emits the package's files byte for byte ({time.time() - t0:.0f} s)")
    exe = int8pkg.demo(args.work, pkg, "portable")
    work = int8pkg.root(args.work) / f"vs-simulator-{args.imgsz}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    inputs = int8pkg.letterboxed(IMAGES, args.imgsz)
    problems, spread = [], {}
    for img in IMAGES:
        x = inputs[img]
        tensor = int8pkg.save_nchw(x, work / f"{img.stem}.npy")
        d_tensor, d_image = work / f"dump-{img.stem}-tensor", work / f"dump-{img.stem}-image"
        int8pkg.run_demo(exe, "--input", tensor, "--dump", d_tensor, "--conf", CONF)
        int8pkg.run_demo(exe, img, "--dump", d_image, "--conf", CONF)
        for f in sorted(d_tensor.glob("*.npy")):
            if f.read_bytes() != (d_image / f.name).read_bytes():
                problems.append(f"{img.name}: {f.name} differs between the demo on the image and on its letterboxed "
                                "tensor (int8pkg.letterboxed is not the package's preprocessing)")
        env = simulate.run(graph, x, postprocess=True, conf=CONF)
        found = compare_layers(graph, env, d_tensor, img.name, spread)
        problems += found
        rows = np.load(d_tensor / "output0.npy").reshape(-1, 6)
        det = rows[rows[:, 4] >= CONF]
        print(f"  {img.name}: {'layers bit-identical' if not found else f'{len(found)} problem(s)'}; detections "
              f"{', '.join(f'class {int(r[5])} {r[4]:.3f}' for r in det)}")
    flat = [f"layer {i} has {len(v)} distinct int8 values" for i, v in sorted(spread.items()) if len(v) < 16]
    problems += flat
    print(f"int8 layers' distinct values over the images: {min(len(v) for v in spread.values())} to "
          f"{max(len(v) for v in spread.values())} (at least 16 required: a flat layer proves nothing)")
    for p in problems:
        print(f"FAIL {p}")
    if not problems:
        shutil.rmtree(work, ignore_errors=True)
    verdict = (f"ok: {len(IMAGES)} images, {n_i8} int8 layers bit-identical to the simulator, the rows within "
               "tolerance") if not problems else f"FAILED ({len(problems)} problems)"
    print(f"vs_simulator: {verdict} ({time.time() - t0:.0f} s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
