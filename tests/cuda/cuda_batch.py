#!/usr/bin/env python3
"""--batch and the asynchronous API of the cuda backend, under the host emulation (no GPU):

    cuda_batch.py --work build/work [--imgsz 64] [--keep]

1. yolo26n (the random checkpoint the other cuda tests share) generated with --backend cuda, float32 (TF32) at
   --imgsz-fp32 (96: the deep levels' 144, 36, 9 pixels per image are not multiples of the GEMM tiles) and
   --precision fp16 at --imgsz (64), each once with --batch 2 and once with --batch 1; built with
   tests/cuda/cuda_emu.h and linked with tests/cuda/batch_main.cu;
2. two different inputs (Ultralytics' bus.jpg and zidane.jpg: letterboxed tensors from tools/oracle.py
   make_input, and the images themselves);
3. the --batch 2 package runs both at once (run_tensors, enqueue_tensors from device memory with pinned results,
   run_images, enqueue_images from device images: batch_main checks these last two agree exactly), the
   --batch 1 package runs each alone;
4. each image's rows of the batch run must equal the batch-1 package's rows for that input bit for bit (the same
   kernels on the same data, image after image), synchronous and asynchronous, and its run_images detections
   the same, and with the fused convolutions (options.fused_conv) too; the two images' rows must differ, and their
   scores must spread (not a flat random network); the batch-2 forward's CUDA Graph may have at most
   EXTRA_NODES_PER_IMAGE[model] nodes more than batch 1's (every layer runs once for the batch);
5. classify (yolo26n-cls, random checkpoint, both precisions at --imgsz-cls): the same with
   tests/cuda/batch_classify_main.cu: each image's probabilities (run_tensors, enqueue_tensors' pinned copy) of the
   --batch 2 package bit-identical to the --batch 1 package's on that image alone, run_images' top 5 the same, the
   two images' probabilities different and not flat, the graph nodes as in step 4;
6. segment (yolo26n-seg, random checkpoint, both precisions at --imgsz) with tests/cuda/batch_segment_main.cu: each
   image's rows and prototypes bit-identical to the --batch 1 package's on that image alone, run_images'
   detections and each one's mask in the image's pixels (batch_mask: pixel count and hash) the same, the two
   images' prototypes different and some masks not empty;
7. --head nms (the one-to-many head + NMS, detect, both precisions at --imgsz): each image's kept rows of the
   --batch 2 package (run_tensors, enqueue_tensors' pinned rows, fused convolutions) bit-identical to the --batch 1
   package's on that image alone, run_images' detections the same, the counts in device and pinned memory equal,
   the enqueued NMS at options.enqueue_conf what run_tensors keeps at that conf (batch_main.cu), and the NMS once
   for the batch (no extra graph node while one launch sorts every image's scores); yolo26n-seg --head nms in
   fp32 as step 6 (each image's kept rows, prototypes and masks);
8. --batch is refused for other backends (checked through the generator).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import cuda_vs_xnnpack as cvx  # noqa: E402

IMAGES = ("bus.jpg", "zidane.jpg")
# The extra graph nodes a second image may add, per model: 2 per attention layer, none elsewhere. Every layer runs
# once for the batch, the end-to-end head too (carve_cu_e2e_postprocess_batch); the attention's GEMM path (the
# default, runtime/carve_cuda_attention.h) runs batch 1 per image (3 launches and V's gather) and batch 2 per head
# (2 heads + 1 and V's gather: yolo26n's 2 heads). (With options.attention_fused none: one launch up to
# CARVE_CU_ATTN_MAX_BATCH images.) yolo26n and -seg have 2 attention layers, -cls 1.
EXTRA_NODES_PER_IMAGE = {"yolo26n": 4, "yolo26n-seg": 4, "yolo26n-cls": 2}


def build(pkg: Path, lib: Path, prefix: str = "yolo26n", main: str = "batch_main") -> Path:
    b = pkg / "build-emu"
    b.mkdir(exist_ok=True)
    inc = ["-I", pkg, "-I", pkg / "runtime"]
    cvx.compile_all([[cvx.CXX, *cvx.EMU_FLAGS, "-O1", *inc, "-c", pkg / f"{prefix}.cu", "-o", b / "model.o"],
                     [cvx.CXX, *cvx.EMU_FLAGS, "-O1", *inc, "-c", HERE / f"{main}.cu", "-o", b / "main.o"],
                     [cvx.CC, "-I", pkg, "-c", pkg / f"{prefix}_weights.S", "-o", b / "weights.o"]])
    exe = b / main
    cvx.run([cvx.CXX, b / "main.o", b / "model.o", b / "weights.o", lib, "-lstb", "-lpthread", "-lm", "-o", exe])
    return exe


def run_both(exes: dict, work: Path, imgsz: int, task: str = "detect") -> dict:
    """The test program of the --batch 2 package on both inputs, and the --batch 1 package's on each alone (the
    tensors from tools/oracle.py make_input, then the images): {"b2", "b1-0", "b1-1"} -> its output folder."""
    images = [cvx.oracle.sample_image(n) for n in IMAGES]
    tensors = []
    for i, img in enumerate(images):
        t = work / f"input{i}.npy"
        cvx.oracle.make_input(img, imgsz, t, task=task)
        tensors.append(t)
    outs = {}
    for key, cmd in {"b2": [exes[2], *tensors, *images],
                     "b1-0": [exes[1], tensors[0], images[0]], "b1-1": [exes[1], tensors[1], images[1]]}.items():
        d = work / f"out-{key}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        print(cvx.run([cmd[0], d, *cmd[1:]]).stdout.strip())
        outs[key] = d
    return outs


def refusals(pt: Path, work: Path) -> bool:
    ok = True
    for backend, manifest, extra, want in (("xnnpack", "yolo26n", [], "runs one image per run"),
                                           ("cuda", "yolo26n", ["--batch", "0"], "expected an integer from 1")):
        out = work / f"refused-{backend}"
        args = [cvx.ROOT / "carve", "generate", cvx.ROOT / "manifests" / f"{manifest}.yaml", "--backend", backend,
                "--weights", pt, "--imgsz", "64", "--out", out, "--force"]
        args += extra if "--batch" in extra else ["--batch", "2", *extra]
        p = cvx.subprocess.run([str(a) for a in args], text=True, capture_output=True)
        good = p.returncode != 0 and want in p.stderr and not out.exists()
        print(f"--batch refused ({backend} {' '.join(extra)}): {'ok' if good else 'FAIL'}: {p.stderr.strip()[-200:]}")
        ok &= good
    return ok


def batch_pair(model: str, pt: Path, lib: Path, work: Path, imgsz: int, precision: str, task: str = "detect",
               head: str = "e2e") -> dict:
    """The --batch 2 and --batch 1 packages of `model` built with the task's test program and run (run_both)."""
    main = {"classify": "batch_classify_main", "segment": "batch_segment_main"}.get(task, "batch_main")
    exes = {}
    for batch in (1, 2):
        pkg = work / f"b{batch}"
        cvx.generate(model, "cuda", pt, imgsz, pkg, "--batch", str(batch), "--precision", precision,
                     *(["--head", head] if head != "e2e" else []))
        exes[batch] = build(pkg, lib, model.replace("-", "_"), main)
    return run_both(exes, work, imgsz, task)


def same_per_image(outs: dict, label: str, what: str, kinds: tuple, texts: str) -> bool:
    """Each image's <kind>_<b>.npy of the batch-2 run bit-identical to <kind>_0.npy of the batch-1 run on it alone,
    and its <texts>_<b>.txt (what run_images returned) the same text."""
    ok = True
    for b in range(2):
        single = outs[f"b1-{b}"]
        for kind in kinds:
            got, want = np.load(outs["b2"] / f"{kind}_{b}.npy"), np.load(single / f"{kind}_0.npy")
            same = got.shape == want.shape and np.array_equal(got, want)
            print(f"{label}: image {b} ({IMAGES[b]}) {kind} {what}, batch 2 vs batch 1: "
                  f"{'bit-identical' if same else 'DIFFERENT'} {got.shape}")
            ok &= same
        text = (single / f"{texts}_0.txt").read_text()
        same = (outs["b2"] / f"{texts}_{b}.txt").read_text() == text
        print(f"{label}: image {b} run_images {texts} ({len(text.splitlines())} lines), batch 2 vs batch 1: "
              f"{'same' if same else 'DIFFERENT'}")
        ok &= same
    return ok


def nodes_ok(outs: dict, label: str, model: str) -> bool:
    """Launches per forward: each layer runs once for the whole batch."""
    n1, n2 = (int((outs[k] / "nodes.txt").read_text()) for k in ("b1-0", "b2"))
    extra = EXTRA_NODES_PER_IMAGE[model]
    few = n2 - n1 <= extra
    print(f"{label}: graph nodes per forward: batch 1 {n1}, batch 2 {n2} (at most {extra} more): "
          f"{'ok' if few else 'FAIL'}")
    return few


def check_precision(pt: Path, lib: Path, work: Path, imgsz: int, precision: str, head: str = "e2e") -> bool:
    """Steps 1-4 (7: --head nms) for one precision: the --batch 2 package's rows of each image against the --batch 1
    package's on that image alone (every path, and the fused convolutions), and the launches per forward of both."""
    label = f"{precision} {imgsz}" + (f" --head {head}" if head != "e2e" else "")
    work = work / f"{precision}-{imgsz}-{head}"
    work.mkdir(parents=True, exist_ok=True)
    outs = batch_pair("yolo26n", pt, lib, work, imgsz, precision, head=head)
    ok = same_per_image(outs, label, "rows", ("sync", "async", "fused"), "dets")
    r0, r1 = (np.load(outs["b2"] / f"sync_{b}.npy")[0] for b in range(2))
    spread = float(r0[:, 4].std())
    distinct = not np.array_equal(r0, r1)
    print(f"{label}: the two images' rows differ: {distinct} ({len(r0)} and {len(r1)} rows); score spread (std over "
          f"rows) {spread:.3g}")
    return ok & distinct & (spread > 1e-3) & (min(len(r0), len(r1)) > 1) & nodes_ok(outs, label, "yolo26n")


def check_classify(pt: Path, lib: Path, work: Path, imgsz: int, precision: str) -> bool:
    """Step 5 for one precision: the --batch 2 classify package's probabilities of each image against the --batch 1
    package's on that image alone, run_images' top 5 the same, the launches per forward."""
    label = f"classify {precision} {imgsz}"
    work = work / f"cls-{precision}-{imgsz}"
    work.mkdir(parents=True, exist_ok=True)
    outs = batch_pair("yolo26n-cls", pt, lib, work, imgsz, precision, "classify")
    ok = same_per_image(outs, label, "probabilities", ("sync", "async"), "top")
    p0, p1 = (np.load(outs["b2"] / f"sync_{b}.npy")[0] for b in range(2))
    distinct, peaked = not np.array_equal(p0, p1), min(p0.max(), p1.max()) > 10.0 / p0.size
    print(f"{label}: the two images' probabilities differ: {distinct}; largest {p0.max():.3g}, {p1.max():.3g} "
          f"(not flat: > {10.0 / p0.size:.3g})")
    return ok & distinct & peaked & nodes_ok(outs, label, "yolo26n-cls")


def check_segment(pt: Path, lib: Path, work: Path, imgsz: int, precision: str, head: str = "e2e") -> bool:
    """Step 6 for one precision (and --head nms): the --batch 2 segment package's rows and prototypes of each image
    against the --batch 1 package's on that image alone, and run_images' detections with their masks (batch_mask)
    the same."""
    label = f"segment {precision} {imgsz}" + (f" --head {head}" if head != "e2e" else "")
    work = work / f"seg-{precision}-{imgsz}-{head}"
    work.mkdir(parents=True, exist_ok=True)
    outs = batch_pair("yolo26n-seg", pt, lib, work, imgsz, precision, "segment", head)
    ok = same_per_image(outs, label, "output", ("sync", "protos"), "masks")
    masks = [(outs["b2"] / f"masks_{b}.txt").read_text().splitlines() for b in range(2)]
    pixels = [int(line.split()[6]) for lines in masks for line in lines]
    distinct = not np.array_equal(*(np.load(outs["b2"] / f"protos_{b}.npy") for b in range(2)))
    print(f"{label}: the two images' prototypes differ: {distinct}; masks {len(masks[0])} + {len(masks[1])}, "
          f"their pixels {min(pixels, default=0)} .. {max(pixels, default=0)}")
    return ok & distinct & (min(len(m) for m in masks) > 0) & (max(pixels, default=0) > 0) & \
        nodes_ok(outs, label, "yolo26n-seg")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--imgsz", type=int, default=64, help="the fp16 packages' size (fp32: --imgsz-fp32)")
    ap.add_argument("--imgsz-fp32", type=int, default=96)
    ap.add_argument("--imgsz-cls", type=int, default=64, help="the classify packages' size")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    root = args.work.resolve()
    work = root / "cuda" / "batch"
    work.mkdir(parents=True, exist_ok=True)
    pt = cvx.checkpoint(root, "yolo26n")
    lib = cvx.build_runtime(root, "emu")
    ok = check_precision(pt, lib, work, args.imgsz_fp32, "fp32")
    ok &= check_precision(pt, lib, work, args.imgsz, "fp16")
    for precision in ("fp32", "fp16"):
        ok &= check_precision(pt, lib, work, args.imgsz, precision, head="nms")
    pt_cls = cvx.checkpoint(root, "yolo26n-cls")
    pt_seg = cvx.checkpoint(root, "yolo26n-seg")
    for precision in ("fp32", "fp16"):
        ok &= check_classify(pt_cls, lib, work, args.imgsz_cls, precision)
        ok &= check_segment(pt_seg, lib, work, args.imgsz, precision)
    ok &= check_segment(pt_seg, lib, work, args.imgsz, "fp32", head="nms")
    ok &= refusals(pt, work)
    print(f"cuda_batch: {'PASS' if ok else 'FAIL'}")
    if ok and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
