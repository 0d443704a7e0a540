#!/usr/bin/env python3
"""The cuda backend's --precision fp16 without a GPU: the trained demo model (assets/yolo26n-shapes.pt) as an fp16
cuda package, built on the host with the emulation header, against Ultralytics.

    cuda_f16.py --work build/work [--imgsz 320] [--heads e2e,nms] [--keep]
    cuda_f16.py --work build/work --heads "" --random-tasks segment,classify   # ctest cuda_f16_seg_cls

For each head (e2e: the one-to-one head and its top-k; nms: the one-to-many head and the device NMS):

1. ``./carve generate manifests/yolo26n-shapes.yaml --backend cuda --precision fp16`` at --imgsz (320: the size the
   model was trained at);
2. the package built as C++ with tests/cuda/cuda_emu.h (whose __half rounds to nearest even at every store and
   whose cublasGemmEx widens the half operands and accumulates in float, as tensor cores do), the device runtime
   compiled once (cuda_vs_xnnpack.build_runtime, runtime/carve_cuda_f16.cu included);
3. e2e: every layer's output on assets/shapes-1.png (the demo's --dump) against PyTorch's fused float32 model
   (tools/oracle.py reference_layers). The bound is fp16's own, measured: each layer's is
   max(2^-10, 3 x the error of PyTorch's float16 model (model.half(), the same fused weights) on that layer), i.e.
   carve fp16 may drift at most three times as far from float32 as PyTorch's own half-precision model does
   (2^-10: two roundings of the unit roundoff 2^-11, the input's and the output's). The package must also be
   measurably half precision: its first layer's error is above 2^-14 (a float32 package's is ~1e-7);
4. run_image on assets/shapes-{1..4}.png (--json: upload, device letterbox, network in half, head in float32)
   against Ultralytics' predictor (float32, predict(nms=False) or predict() for --head nms) at the same conf:
   the same detections with the same classes, boxes within max(1 px, 3 x PyTorch fp16's largest box drift) and
   scores within max(1e-3, 3 x its largest score drift), those drifts measured on the one-to-one head's rows of
   PyTorch's float16 and float32 models on each of the four images (the rows above conf, in image pixels; the
   same bounds for --head nms, whose one-to-many head PyTorch's layer dump does not run);
5. the compared values spread: the layer outputs are not flat (each std / max >= 1e-2 in PyTorch's float32) and
   the detections cover at least two classes with scores that differ by >= 0.1 (a trained checkpoint).

--random-tasks: yolo26n of each task with the random checkpoint of tools/oracle.py (cached as the oracle tests
cache it) as an fp16 package at --random-imgsz (160), step 3 alone on Ultralytics' bus.jpg (the rows of a random
head hold near-ties: compare_layers pairs them row by row; segment: the rows' mask coefficients and the prototypes,
output1, widened to float32 by the package); classify also run_image on bus.jpg against Ultralytics' predictor
(check_classify_image).

--fused-conv: the packages run with the demo's --fused-conv (options.fused_conv: carve's fused implicit-GEMM
convolutions on tensor cores, runtime/carve_cuda_igemm.h, instead of im2col + cuBLAS + epilogue), held to the same
bounds (ctest cuda_f16_fused; work folder WORK/cuda_f16_fused). Without --heads, the work folder is named after the
tasks (WORK/cuda_f16_segment_classify), so that the ctests run side by side.

A failure keeps the work folder; a pass deletes the packages and dumps.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import cuda_vs_xnnpack as cvx  # noqa: E402  (its build helpers; it puts tools/ on the path)
import oracle  # noqa: E402

ROOT = cvx.ROOT
MODEL = "yolo26n-shapes"
PREFIX = "yolo26n_shapes"
PT = ROOT / "assets" / f"{MODEL}.pt"
IMAGES = [ROOT / "assets" / f"shapes-{i}.png" for i in range(1, 5)]
CONF = 0.25
FLOOR = 2.0 ** -10      # the layer bound's floor: two roundings of fp16's unit roundoff
HALF_MIN_ERR = 2.0 ** -14  # a half-precision package's first layer is at least this far from float32
FACTOR = 3.0


def build(work: Path, head: str, imgsz: int, lib: Path) -> Path:
    pkg = work / f"pkg-f16-{head}"
    cvx.generate(MODEL, "cuda", PT, imgsz, pkg, "--precision", "fp16", "--head", head)
    return cvx.build_cuda_emu(pkg, PREFIX, lib)


def spread_ok(ref: Path) -> list:
    """The layers of PyTorch's float32 dump whose values are flat (std / max|x| < 1e-2)."""
    flat = []
    for f in sorted(ref.glob("layer_*.npy")):
        a = np.load(f)
        if a.ndim == 4 and np.abs(a).max() > 0 and a.std() / np.abs(a).max() < 1e-2:
            flat.append(f.name)
    return flat


def fp16_drift(ref32: Path, ref16: Path, imgsz: int, image: Path) -> tuple:
    """(largest box drift in image pixels, largest score drift) of PyTorch's float16 rows against its float32
    rows: each float32 row above CONF paired with the float16 row of its class nearest to it."""
    r32, r16 = np.load(ref32 / "output0.npy")[0], np.load(ref16 / "output0.npy")[0]
    from PIL import Image
    w, h = Image.open(image).size
    gain = max(w, h) / imgsz  # the letterbox's scale back to image pixels
    box, score = 0.0, 0.0
    for row in r32[r32[:, 4] >= CONF]:
        same = r16[r16[:, 5] == row[5]]
        j = int(np.argmin(np.abs(same[:, :4] - row[:4]).max(axis=1)))
        box = max(box, float(np.abs(same[j, :4] - row[:4]).max()) * gain)
        score = max(score, float(abs(same[j, 4] - row[4])))
    return box, score


def detection_bounds(work: Path, imgsz: int) -> tuple:
    """(box_px, score_tol) of step 4: FACTOR x PyTorch float16's largest drifts over the images, with floors."""
    box, score = 0.0, 0.0
    for img in IMAGES:
        inp, ref32, ref16 = work / f"in-{img.stem}.npy", work / f"t32-{img.stem}", work / f"t16-{img.stem}"
        oracle.make_input(img, imgsz, out=inp)
        with cvx.step("PyTorch float32 and float16"):
            oracle.reference_layers(PT, inp, ref32)
            oracle.reference_layers(PT, inp, ref16, dtype="float16")
        b, sc = fp16_drift(ref32, ref16, imgsz, img)
        print(f"PyTorch float16 drift on {img.name}: boxes {b:.3f} px, scores {sc:.2e}")
        box, score = max(box, b), max(score, sc)
    return max(1.0, FACTOR * box), max(1e-3, FACTOR * score)


def check_head(args, head: str, lib: Path, work: Path, bounds: tuple) -> bool:
    ok = True
    exe = build(work, head, args.imgsz, lib)
    box_px, score_tol = bounds
    print(f"detections held to {box_px:.2f} px, scores to {score_tol:.2e}")
    if head == "e2e":
        stem = IMAGES[0].stem
        inp, ref32, ref16, ours = work / f"in-{stem}.npy", work / f"t32-{stem}", work / f"t16-{stem}", work / "dump-f16"
        with cvx.step("run (emulated)"):
            cvx.run([exe, "--input", inp, "--dump", ours, "--runs", 3, *args.demo_flags])
            # the head's lanes (backends/cuda_lanes.py) with the graph's nodes interleaved, blocks and threads
            # in reverse order (cvx.SHUFFLED): the same output bit for bit
            cvx.run([exe, "--input", inp, "--dump", work / "dump-f16-interleaved", "--runs", 3, *args.demo_flags],
                    env=dict(os.environ, **cvx.SHUFFLED))
        if not np.array_equal(np.load(ours / "output0.npy"), np.load(work / "dump-f16-interleaved" / "output0.npy")):
            print("FAIL: the graph replayed with the lanes' nodes interleaved, blocks and threads reversed, gives "
                  "other rows")
            ok = False
        print(f"carve fp16{' --fused-conv' if args.fused_conv else ''} vs PyTorch float32 (the 'PyTorch fp32' column: PyTorch float16's error; bound "
              f"max({FLOOR:.2e}, {FACTOR:g} x it))")
        if not oracle.compare_layers(ours, ref32, tol=FLOOR, baseline=ref16, factor=FACTOR):
            ok = False
        first = sorted(ref32.glob("layer_*.npy"))[0].name
        a, r = np.load(ours / first), np.load(ref32 / first)
        err = float(np.abs(a - r).max() / np.abs(r).max())
        print(f"{first}: carve fp16 error {err:.2e} (half precision: > {HALF_MIN_ERR:.2e})")
        if err <= HALF_MIN_ERR:
            print("FAIL: the fp16 package computes like a float32 one (no half rounding seen)")
            ok = False
        flat = spread_ok(ref32)
        if flat:
            print(f"FAIL: flat layer outputs, the comparison proves nothing: {', '.join(flat)}")
            ok = False
    classes, scores = set(), []
    for img in IMAGES:
        ref_json, ours_json = work / f"{head}-{img.stem}-ref.json", work / f"{head}-{img.stem}-f16.json"
        with cvx.step("Ultralytics predict"):
            ref = oracle.reference_predict(PT, img, imgsz=args.imgsz, conf=CONF, out_json=ref_json, head=head)
        with cvx.step("run_image (emulated)"):
            out = cvx.run([exe, img, "--json", "--conf", CONF, "--runs", 2, *args.demo_flags]).stdout
        ours_json.write_text(out)
        print(f"{head} {img.name}: {len(ref['detections'])} Ultralytics detections, "
              f"{len(json.loads(out)['detections'])} carve fp16")
        if not oracle.compare_detections(ours_json, ref_json, box_px=box_px, score_tol=score_tol):
            ok = False
        classes |= {d["class_id"] for d in ref["detections"]}
        scores += [d["score"] for d in ref["detections"]]
    if len(classes) < 2 or not scores or max(scores) - min(scores) < 0.1:
        print(f"FAIL: the detections do not spread (classes {sorted(classes)}, scores {min(scores, default=0):.3f}"
              f"..{max(scores, default=0):.3f}): the comparison proves nothing")
        ok = False
    return ok


def check_classify_image(exe: Path, pt: Path, ref32: Path, ref16: Path, imgsz: int, work: Path) -> bool:
    """A classify package's run_image (the device pre-processing writing halves, the probabilities in float32) on
    bus.jpg against Ultralytics' predictor: the same top 5 (ranks may swap within the tolerance), probabilities
    within max(1e-3, FACTOR x PyTorch float16's largest probability drift on the tensor input)."""
    drift = float(np.abs(np.load(ref16 / "output0.npy") - np.load(ref32 / "output0.npy")).max())
    tol = max(1e-3, FACTOR * drift)
    import cv2
    img = work / "bus.png"  # decoded once, by OpenCV, stored losslessly: stb_image's JPEG decoder rounds otherwise
    cv2.imwrite(str(img), cv2.imread(str(oracle.sample_image("bus.jpg"))))
    ref_json, ours_json = work / "classify-ref.json", work / "classify-f16.json"
    with cvx.step("Ultralytics predict"):
        oracle.reference_predict(pt, img, imgsz=imgsz, out_json=ref_json)
    with cvx.step("run_image (emulated)"):
        ours_json.write_text(cvx.run([exe, img, "--json", "--runs", 2]).stdout)
    print(f"classify run_image vs Ultralytics' predictor: probabilities within {tol:.2e} ({FACTOR:g} x PyTorch "
          f"float16's drift {drift:.2e})")
    return oracle.compare_detections(ours_json, ref_json, prob_tol=tol, tie_tol=tol)


def check_random_task(args, task: str, lib: Path, work: Path) -> bool:
    model = "yolo26n" + cvx.TASKS[task]
    pt = cvx.checkpoint(args.work.resolve(), model)
    pkg = work / f"pkg-f16-{model}"
    cvx.generate(model, "cuda", pt, args.random_imgsz, pkg, "--precision", "fp16")
    exe = cvx.build_cuda_emu(pkg, model.replace("-", "_"), lib)
    inp, ref32, ref16, ours = work / f"{task}-in.npy", work / f"{task}-t32", work / f"{task}-t16", work / f"{task}-f16"
    oracle.make_input(oracle.sample_image("bus.jpg"), args.random_imgsz, out=inp, task=task)
    with cvx.step("PyTorch float32 and float16"):
        oracle.reference_layers(pt, inp, ref32)
        oracle.reference_layers(pt, inp, ref16, dtype="float16")
    with cvx.step("run (emulated)"):
        cvx.run([exe, "--input", inp, "--dump", ours, "--runs", 2, *args.demo_flags])
    print(f"{model} (random weights) fp16 vs PyTorch float32, bound max({FLOOR:.2e}, {FACTOR:g} x PyTorch float16)")
    ok = oracle.compare_layers(ours, ref32, tol=FLOOR, baseline=ref16, factor=FACTOR)
    flat = spread_ok(ref32)
    if flat:
        print(f"FAIL: flat layer outputs, the comparison proves nothing: {', '.join(flat)}")
    if task == "classify":
        ok = check_classify_image(exe, pt, ref32, ref16, args.random_imgsz, work) and ok
    return ok and not flat


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--imgsz", type=int, default=320)
    ap.add_argument("--heads", default="e2e,nms")
    ap.add_argument("--random-tasks", default="", help="also these tasks (any of the five) with random weights")
    ap.add_argument("--random-imgsz", type=int, default=160)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--fused-conv", action="store_true", help="run the packages with the fused convolution kernel")
    args = ap.parse_args()
    args.demo_flags = ["--fused-conv"] if args.fused_conv else []
    # a folder per configuration: ctest runs cuda_f16_shapes, cuda_f16_seg_cls and cuda_f16_fused side by side
    tasks = [t for t in args.random_tasks.split(",") if t]
    work = args.work.resolve() / "_".join(["cuda_f16", *(["fused"] if args.fused_conv else []),
                                           *(tasks if not args.heads else [])])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    lib = cvx.build_runtime(args.work.resolve(), "cuda")
    heads = [h for h in args.heads.split(",") if h]
    bounds = detection_bounds(work, args.imgsz) if heads else None
    ok = True
    for head in heads:
        ok = check_head(args, head, lib, work, bounds) and ok
    for task in tasks:
        ok = check_random_task(args, task, lib, work) and ok
    if ok and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print("cuda_f16: " + ("OK" if ok else f"FAILED (work folder kept: {work})"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
